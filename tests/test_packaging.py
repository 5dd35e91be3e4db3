"""The package as pip installs it: what `import scd_core` pulls in, what the wheel ships, and
requirements.txt in step with pyproject.toml."""
import fnmatch
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import scd_core
from scd_core.models import tiny
from scd_core.prompts import PARTI_PATH

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PACKAGE = Path(scd_core.__file__).resolve().parent


def requirement_name(line: str) -> str:
    return re.split(r"[\s\[<>=!~;]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_import_scd_core_pulls_in_no_demo_or_adapter_package():
    code = ("import json, sys, scd_core; scd_core.load_model('tiny'); "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.splitlines()[-1]))
    assert "torch" in loaded and "scd_core" in loaded
    assert not loaded & {"gradio", "gradio_client", "plotly", "spaces", "transformers", "diffusers", "imageio"}


def test_the_embedded_models_and_prompts_lie_inside_the_package_and_its_package_data():
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["scd_core"]
    needed = [PARTI_PATH] + [p for _, prior in tiny.VARIANTS.values() for p in tiny.asset_files(tiny.ASSETS, prior)]
    for path in needed:
        rel = path.resolve().relative_to(PACKAGE).as_posix()      # raises when outside the package
        assert path.exists(), rel
        assert any(fnmatch.fnmatch(rel, pattern) for pattern in patterns), rel


def test_console_scripts_name_mains_that_take_argv():
    import importlib
    import inspect

    scripts = PYPROJECT["project"]["scripts"]
    assert set(scripts) == {"scd-bench", "scd-serve", "scd-gpu-timing"}
    for target in scripts.values():
        module, func = target.split(":")
        main = getattr(importlib.import_module(module), func)
        assert list(inspect.signature(main).parameters) == ["argv"], target


def test_requirements_txt_pins_what_pyproject_declares_for_the_demo():
    extras = PYPROJECT["project"]["optional-dependencies"]
    declared = {requirement_name(r): r.replace(" ", "") for r in
                PYPROJECT["project"]["dependencies"] + extras["demo"] + extras["models"]}
    lines = [l.split("#")[0].strip() for l in (ROOT / "requirements.txt").read_text().splitlines()]
    listed = {requirement_name(l): l.replace(" ", "") for l in lines if l and not l.startswith("-")}
    assert listed.pop("torch") == "torch==2.13.0"          # the demo's torch: the tested release
    declared.pop("torch")
    assert listed == declared
