"""One copy of a model per machine: with worker-process decoding the page never loads a
downloaded model; its worker loads it once and draws every picture the page shows of it.

A tiny Janus-Pro checkpoint in the published layout is served by the fake Hub as
deepseek-community/Janus-Pro-1B (tests/test_hub.py); `tests/page_loads.py` runs the page in
a fresh process against it and counts the model loads of each process."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fakehub import REPO_ROOT, FakeHub, client_env
from test_hub import JANUS_REPO, published, serve  # noqa: F401 (fixture)

pytestmark = pytest.mark.served


def test_the_page_never_loads_a_downloaded_model_its_worker_loads_it_once(published, tmp_path):
    log = tmp_path / "loads.log"
    with FakeHub() as hub:
        serve(hub, published, JANUS_REPO)
        env = client_env(hub, tmp_path / "home")
        proc = subprocess.run([sys.executable, str(REPO_ROOT / "tests" / "page_loads.py"), str(log), "janus-pro-1b"],
                              env=env, cwd=str(REPO_ROOT), capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    seen = json.loads(lines[-1][len("RESULT "):])
    janus = [int(pid) for pid, name in seen["loads"] if name == "janus-pro-1b"]
    assert janus == [seen["worker"]] and seen["worker"] != seen["page"]        # once, in the worker only
    assert seen["heard"] > 0 and "Loaded." in seen["note"]                    # picked: the page downloaded it
    assert "**done**" in seen["status"] and "**Done** on **janus-pro-1b**." in seen["race"], seen
    assert seen["same_picture"]                         # the worker's picture is the one a page copy draws
    assert seen["replay"][0] >= 96 and all(size > 0 for size in seen["export"])
    assert len(seen["sample"]) == 4
