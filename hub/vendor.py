"""Builds `hub/scd/custom_generate/`, the Hub folder's code, from the library.

transformers runs a repository's `custom_generate/generate.py` and brings along (downloads from
the Hub, or copies from a local folder) the modules it names by relative imports
(`from .module import ...`), file by file in that one folder. So the folder holds `scd_core.hf`
and every library module it imports, each as one file of its own name with its imports of
`scd_core` made relative; `generate.py` names each module, so that the ones imported as modules
(`from . import chain`, which transformers does not follow) come too. The folder then runs
where scd_core is not installed: torch and transformers are all it imports.

    python hub/vendor.py            # rewrite the folder's modules from the library

`tests/test_hub_folder.py` checks that the folder holds exactly what this builds.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "hub" / "scd" / "custom_generate"
ENTRY = "scd_core.hf"
REQUIREMENTS = "transformers>=5.24.0\ntorch>=2.4\n"
IMPORT = re.compile(r"from\s+(\.+[\w.]*|scd_core[\w.]*)\s+import")


def source(module: str) -> Path:
    """The file of a library module (a package's `__init__.py`)."""
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def is_module(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return (path / "__init__.py").is_file() or path.with_suffix(".py").is_file()


def imported(module: str, node: ast.ImportFrom) -> tuple[str | None, list[str]]:
    """(the library module a `from ... import` names, or None for another package; the library
    modules it imports as modules)."""
    if node.level:
        package = module.split(".") if source(module).name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1])
        target = f"{base}.{node.module}" if node.module else base
    elif node.module and node.module.split(".")[0] == "scd_core":
        target = node.module
    else:
        return None, []
    modules = [f"{target}.{a.name}" for a in node.names if is_module(f"{target}.{a.name}")]
    return target, modules


def closure(entry: str = ENTRY) -> list[str]:
    """`entry` and every library module it imports, directly or not, at any depth of the code
    (imports inside functions included), in a stable order."""
    seen, todo = [], [entry]
    while todo:
        module = todo.pop(0)
        if module in seen:
            continue
        seen.append(module)
        for node in ast.walk(ast.parse(source(module).read_text())):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "scd_core" for a in node.names), f"{module}: import scd_core"
            elif isinstance(node, ast.ImportFrom):
                target, modules = imported(module, node)
                if target is not None:
                    todo += modules or [target]
    return seen


def flat(module: str) -> str:
    """A module's file name in the folder: its own name (`scd_core.hf` is `hf`)."""
    return module.rsplit(".", 1)[-1]


def vendored(module: str) -> str:
    """The module's source with each import of the library made relative to the folder."""
    text = source(module).read_text()
    lines = text.splitlines(keepends=True)
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.ImportFrom):
            continue
        target, modules = imported(module, node)
        if target is None:
            continue
        if modules:                                            # modules imported as modules
            assert len(modules) == len(node.names), f"{module}: mixed import from {target}"
            assert all(flat(m) == a.name for m, a in zip(modules, node.names)), f"{module}: renamed module"
            relative = "from . import"
        else:
            relative = f"from .{flat(target)} import"
        i = node.lineno - 1
        lines[i] = IMPORT.sub(relative, lines[i], count=1)
    origin = source(module).relative_to(ROOT).as_posix()
    return f"# Built by hub/vendor.py from {origin}: edit the library, then rebuild.\n" + "".join(lines)


def entry_point(modules: list[str]) -> str:
    """The folder's `generate.py`: transformers' entry, and the names of every module."""
    names = "\n".join(f"from .{flat(m)} import __name__ as _{flat(m)}  # noqa: F401" for m in sorted(modules, key=flat) if m != ENTRY)
    return f'''"""Speculative Coupled Decoding (SCD) as a transformers `custom_generate` repository.

    model.generate(input_ids, custom_generate="<this repository>", trust_remote_code=True,
                   method="scd-mc", window=16, ...)

transformers calls `generate` below with the arguments of its own `generate`; it runs
transformers' preparation and then the engine's loop (AR, SJD, SCD with maximal coupling or
with Gumbel coupling, lossless), from the modules beside this file. They are the scd_core
library's, built by its `hub/vendor.py`: edit the library, then rebuild.
"""
from .hf import hub_generate

# transformers brings along the modules named by `from .module import` lines: all of them.
{names}


def generate(*args, model=None, **kwargs):
    """transformers' `generate` arguments (`method`, `window`, `init`, `seed` besides them), the
    model first or by keyword (as transformers passes it)."""
    return hub_generate(*args, model=model, **kwargs)
'''


def files() -> dict[str, str]:
    """Every file of the folder, by name, as built from the library."""
    modules = closure()
    names = [flat(m) for m in modules]
    assert len(set(names)) == len(names), f"two library modules share a name: {sorted(names)}"
    out = {f"{flat(m)}.py": vendored(m) for m in modules}
    assert "generate.py" not in out
    out["generate.py"] = entry_point(modules)
    out["requirements.txt"] = REQUIREMENTS
    return out


def write() -> None:
    built = files()
    for stale in FOLDER.glob("*.py"):
        if stale.name not in built:
            stale.unlink()
    for name, text in built.items():
        (FOLDER / name).write_text(text)
    print(f"wrote {len(built)} files to {FOLDER.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(write())
