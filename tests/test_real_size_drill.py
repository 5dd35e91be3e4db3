"""`python -m bench real-size-drill` on small configs of each family: the published file layouts,
served by the fake Hub, downloaded and loaded by `load_model(..., dtype=torch.bfloat16)` in a
fresh process, then a few passes. What is asserted is what makes a real-size load cost one
copy of the weights: no weight is randomly initialised before it is loaded (a `torch.nn.init`
call on a real tensor), and no parameter is ever placed in a module in float32 unless the
loaded model keeps it in float32 (LlamaGen's VQ decoder). The real-size figures are in
docs/models.md."""
from __future__ import annotations

import math

import pytest
import torch

import transformers  # noqa: F401  (the drills write transformers checkpoints)

from scd_core.models.checkpoints import converted_state
from bench import real_size_drill as drill

pytestmark = pytest.mark.drill

# One drill per family (LlamaGen: with and without its T5 text encoder).
DRILLS = ["janus-pro-1b", "emu3-gen", "lumina-mgpt-7b-768", "llamagen-c2i-b", "llamagen-t2i-xl", "cosmos-1-ar-4b"]
PASSES = 2


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    work = tmp_path_factory.mktemp("drill")
    return {name: drill.run_drill(drill.DRILLS[name], "ci", work, None, threads=1, passes=PASSES, timeout=300)
            for name in DRILLS}


@pytest.mark.parametrize("name", DRILLS)
def test_a_small_config_loads_in_bfloat16_without_random_init_or_float32_copies(results, name):
    r = results[name]
    assert "error" not in r, r.get("error")
    assert r["scale"] == "ci" and len(r["pass_s"]) == PASSES and r["committed"] > 0
    assert r["tensors"].get("bfloat16", 0) > 0
    # only what the files do not hold as the model needs it (Lumina: Chameleon's VQ model,
    # absent from Lumina's files, and the q/k norms stored per shard) may be initialised
    assert r["init_elements"] <= r["not_in_files"], r
    # a float32 parameter is placed only where the loaded model keeps float32
    assert r["fp32_param_bytes"] <= r["tensors"].get("float32", 0), r
    assert r["peak_load"] >= r["rss_before"] > 0 and r["anon_peak_load"] > 0


def test_a_float32_checkpoint_is_converted_a_chunk_at_a_time(tmp_path):
    """`converted_state` maps the file anew after each chunk and returns tensors that own
    their memory: no converted tensor keeps the file's pages (or a float32 copy) alive."""
    from scd_core.models.hub import read_checkpoint

    g = torch.Generator().manual_seed(0)
    state = {f"w{i}": torch.randn(256, 256, generator=g) for i in range(8)}       # 256 KiB each
    torch.save({"model": state}, tmp_path / "ckpt.pt")
    opened = []

    def open_state():
        opened.append(1)
        return read_checkpoint(str(tmp_path / "ckpt.pt"), mmap=True)["model"]

    out = converted_state(open_state, torch.device("cpu"), torch.bfloat16, chunk_bytes=3 * 2**18)
    assert len(opened) == math.ceil(8 / 3)
    for key, t in out.items():
        assert t.dtype == torch.bfloat16 and t.untyped_storage().nbytes() == t.nbytes
        assert torch.equal(t, state[key].to(torch.bfloat16))
