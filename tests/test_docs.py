"""The Python examples of README.md and docs/*.md run as written: each fenced ```python block,
in its own interpreter, from a temporary folder (not the repository), with the embedded
models and no network. A block that needs a download or a GPU says so on the line before its
fence, `<!-- not run: REASON -->`, and is skipped with that reason; every other block runs."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->\s*$")
TIMEOUT_S = 600


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """(line, code, reason it is not run or None) for each ```python block of a markdown text."""
    blocks = []
    for match in FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = NOT_RUN.search(before)
        blocks.append((text.count("\n", 0, match.start()) + 1, match.group(1), reason and reason.group(1)))
    return blocks


CASES = [pytest.param(code, id=f"{path.relative_to(ROOT)}:{line}",
                      marks=[pytest.mark.skip(reason=f"not run: {reason}")] if reason else [])
         for path in DOCS for line, code, reason in python_blocks(path.read_text())]


def test_the_parser_finds_each_block_and_its_not_run_marker():
    text = "text\n<!-- not run: needs a download -->\n```python\nx = 1\n```\n\n```python\ny = 2\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n", "needs a download"), (7, "y = 2\n", None)]
    assert len(CASES) >= 5                 # README.md and docs/ do have examples to run


@pytest.mark.parametrize("code", CASES)
def test_example_runs(code, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               HF_HUB_OFFLINE="1", OMP_NUM_THREADS=os.environ.get("SCD_TEST_THREADS", "1"))
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"the example failed:\n{code}\n{done.stderr[-4000:]}"
