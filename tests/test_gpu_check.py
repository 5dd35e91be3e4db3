"""`scripts/gpu_check.sh`, the first thing to run on a GPU (docs/deploy.md), runs on the CPU as CI
has it: every step that does not need CUDA runs and passes, and each CUDA-only one is
skipped by name, in the one table at the end; on a GPU its steps' limits make its header's
five minutes true."""
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
    table = out[out.rindex("| check | result | time |"):]
    assert "| gpu-first | skipped (CUDA only) |" in table and "| gpu-tests | skipped (CUDA only) |" in table
    assert "| engine | ok |" in table and "| gpu-timing | ok |" in table
    for name in MODELS:
        assert f"| {name}: wall >= step | ok | |" in table
        assert f"| {name}: no wait in a pass | skipped (CUDA only) | |" in table
        assert f"| {name}: compiled: CUDA graphs, a pass eager and compiled | skipped (CUDA only) | |" in table
    assert table.count("a pass's peak memory") == 2 and "0 steps failed" in (tmp_path / "engine.log").read_text()
    assert (tmp_path / "gpu_timing.json").exists()


def test_the_gpu_checks_limits_add_up_to_its_five_minutes():
    """The header's figure is the sum of the GPU steps' limits, and at most five minutes."""
    import re

    script = (ROOT / "scripts" / "gpu_check.sh").read_text()
    begin = script.index('if [ "$GPU" = 1 ]; then')
    gpu = script[begin:script.index("\nelse\n", begin)]
    limits = [int(n) for n in re.findall(r"^\s*step [\w-]+ (\d+) ", gpu, re.M)]
    assert len(limits) == 4 and f"limits below add to {sum(limits)} s" in script and sum(limits) <= 300
