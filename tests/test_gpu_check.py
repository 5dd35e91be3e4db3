"""`scripts/gpu_check.sh`, the first thing to run on a GPU (docs/deploy.md), runs on the CPU as CI
has it: every step that does not need CUDA runs and passes, and each CUDA-only one is
skipped by name, in the table at the end."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["texture", "tiny", "tiny-64", "janus-pro", "emu3", "lumina-mgpt", "llamagen", "cosmos"]


@pytest.mark.drill
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the script runs its CUDA steps: run it whole there")
def test_the_gpu_check_runs_on_the_cpu_with_the_cuda_steps_skipped_by_name(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, GPU_CHECK_OUT=str(tmp_path))
    done = subprocess.run(["bash", "scripts/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1500)
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert "| gpu-tests | skipped (CUDA only) |" in out
    assert "| engine | ok |" in out and "| gpu-timing | ok |" in out
    engine = (tmp_path / "engine.log").read_text()
    for name in MODELS:
        assert f"| {name} | wall >= step | ok |" in engine
        assert f"| {name} | no wait in a pass | skipped (CUDA only) |" in engine
        assert f"| {name} | compiled = eager, no skipped capture | skipped (CUDA only) |" in engine
    assert engine.count("a pass's peak memory") == 2 and "0 steps failed" in engine
    assert (tmp_path / "gpu_timing.json").exists()
