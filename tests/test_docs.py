"""The Python examples of README.md and docs/*.md run as written: each fenced ```python block,
in a process of its own, from a temporary folder (not the repository), with the embedded
models and no network. A block that needs a download or a GPU says so on the line before its
fence, `<!-- not run: REASON -->`, and is skipped with that reason; every other block runs.

The processes are forked from one interpreter that has imported torch and transformers and
nothing else (`examples`): each block starts with fresh globals and none of the state another
block left, without paying those imports (2-6 s of processor a block) again."""
from __future__ import annotations

import json
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


# Reads one request a line, [code, folder, log file], and forks: the child runs the code as
# `python -c` would (as a fresh `__main__`, from the folder, its output to the log file, then a
# normal exit); the parent kills it after TIMEOUT_S and answers its exit code. The parent runs
# no torch operation, so no thread of torch's is lost in the fork.
FORKER = r"""
import gc, json, os, signal, sys, traceback, types
import torch, transformers
gc.freeze()                                   # what is imported stays out of the children's collections
for line in sys.stdin:
    code, folder, log = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.chdir(folder)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1), os.dup2(out, 2)
        sys.modules["__main__"] = main = types.ModuleType("__main__")
        try:
            exec(compile(code, "<string>", "exec"), main.__dict__)
        except SystemExit:
            raise
        except BaseException:
            traceback.print_exc()
            sys.exit(1)
        sys.exit(0)
    signal.signal(signal.SIGALRM, lambda *_: os.kill(pid, signal.SIGKILL))
    signal.alarm(%d)
    status = os.waitpid(pid, 0)[1]
    signal.alarm(0)
    print(os.waitstatus_to_exitcode(status), flush=True)
""" % TIMEOUT_S


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """The forking interpreter, with the environment every example runs in."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               HF_HUB_OFFLINE="1", OMP_NUM_THREADS=os.environ.get("SCD_TEST_THREADS", "1"))
    forker = subprocess.Popen([sys.executable, "-c", FORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              env=env, text=True, cwd=tmp_path_factory.mktemp("examples"))
    try:
        yield forker
    finally:
        forker.stdin.close()
        forker.wait(timeout=60)


@pytest.mark.parametrize("code", CASES)
def test_example_runs(code, examples, tmp_path):
    log = tmp_path.with_suffix(".log")
    examples.stdin.write(json.dumps([code, str(tmp_path), str(log)]) + "\n")
    examples.stdin.flush()
    rc = examples.stdout.readline().strip()
    why = f"killed after {TIMEOUT_S} s" if rc == "-9" else f"exit {rc or 'unknown'}"
    assert rc == "0", f"the example failed ({why}):\n{code}\n{log.read_text()[-4000:] if log.exists() else ''}"
