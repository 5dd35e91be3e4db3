"""The measurement harness (`python -m bench`): every subcommand is a module with a `main(argv)`,
every command the docs give names one, the library never imports it, and its shared readers
(percentiles, /proc) say what they should. Its measurements' own tests run in their files
(tests/test_frontier.py, test_real_size_drill.py, test_app_stop.py, ...)."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bench
from bench import __main__ as runner
from bench import procs
from bench.stats import percentile

ROOT = Path(__file__).resolve().parents[1]
SHARED = {"__init__", "__main__", "served", "procs", "builds", "published", "figures", "stats"}
NAMES = {name for commands in bench.SUBCOMMANDS.values() for name in commands}


def has_main(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.FunctionDef) and n.name == "main" and [a.arg for a in n.args.args] == ["argv"]
               for n in tree.body)


def test_every_subcommand_is_a_module_with_a_main_and_every_module_a_subcommand_or_shared():
    modules = {p.stem for p in (ROOT / "bench").glob("*.py")}
    assert {bench.module_name(n) for n in NAMES} == modules - SHARED
    for name in NAMES:
        assert has_main(ROOT / "bench" / f"{bench.module_name(name)}.py"), name


def test_the_runner_lists_every_subcommand_and_refuses_an_unknown_one(capsys):
    assert runner.main([]) == 0
    listed = capsys.readouterr().out
    assert all(f"  {name} " in listed for name in NAMES)
    assert runner.main(["page-timings"]) == 2
    assert "no subcommand 'page-timings'" in capsys.readouterr().err


def test_every_command_the_docs_give_names_a_subcommand_and_benchmarks_md_lists_each():
    docs = [ROOT / "README.md", ROOT / "hub" / "scd" / "README.md", *(ROOT / "docs").glob("*.md"),
            *(ROOT / "bench").glob("*.py"), *(ROOT / "scripts").glob("*.sh")]
    for path in docs:
        for name in re.findall(r"python -m\s+bench ([a-z][\w-]*)", path.read_text(encoding="utf-8")):
            assert name in NAMES, f"{path.name}: python -m bench {name}"
    listed = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` |" in listed for name in NAMES)


def test_the_library_and_the_page_never_import_the_harness():
    for path in [*(ROOT / "scd_core").rglob("*.py"), *(ROOT / "demo").rglob("*.py"), ROOT / "app.py"]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            assert not any(n == "bench" or n.startswith("bench.") for n in names), path


def test_the_percentile_is_the_nearest_rank():
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 0.5) == 3.0 and percentile(values, 0.95) == 5.0 and percentile(values, 0.2) == 1.0
    assert percentile([7.0], 0.95) == 7.0 and percentile([], 0.5) != percentile([], 0.5)      # nan


def test_proc_readers_see_a_child_while_it_runs_and_nothing_once_it_is_gone():
    me = procs.status(os.getpid())
    assert me["VmRSS"] > 0 and me["Threads"] >= 1 and procs.rss_bytes(os.getpid()) == me["VmRSS"] * 1024
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while child.pid not in procs.descendants(os.getpid()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in procs.descendants(os.getpid()) and procs.alive(child.pid)
        assert procs.memory_kb(child.pid)[0] > 0 and procs.descriptors(child.pid) >= 3
    finally:
        child.kill()
        child.wait()
    assert not procs.alive(child.pid) and procs.status(child.pid) == {} and procs.memory_kb(child.pid) == (0, 0, 0)


@pytest.mark.parametrize("argv", [["--app-dir", "/"], ["--visitors", "0"]])
def test_a_page_subcommand_refuses_a_bad_argument_before_serving_anything(argv, capsys):
    from bench import page_load

    with pytest.raises(SystemExit) as exit_info:
        page_load.main(argv)
    assert exit_info.value.code == 2 and argv[0] in capsys.readouterr().err
