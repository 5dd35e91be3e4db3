"""Every tensor a compiled pass writes in place is static (`scd_core.models.static`), so that
on a GPU the pass is captured as a CUDA graph: CUDA-graph trees skip capture, silently, when a
graph mutates an input that is neither static nor owned by a recorded graph
(torch/_inductor/cudagraph_utils.py, `check_for_mutation`). Read on the CPU from inductor's
compiled graph (its mutated and static inputs, what CUDA-graph trees read), for every shipped
model with SCD-MC (the adapters' SCD-MC passes where tests/test_model_compile.py compiles them),
and draft trees' passes (`step_tree` and `keep_path` in the graph).
`scd_core.testing.check_static_writes` does the reading, each graph compiled cold (tens of
seconds on a small CPU: the compile lane takes every model once and one tree, the rest is also
`slow`); the first test shows that it catches a cache that is not marked.

On a GPU (`gpu`, scripts/gpu_check.sh runs it first), the same runs compiled replay as CUDA
graphs: inductor's count of skipped captures stays 0, and the tokens are eager's.
"""
from __future__ import annotations

import pytest
import torch

import models_util
import scd_core
from scd_core.testing import check_static_writes, unmarked_writes

pytestmark = pytest.mark.compile

SLOW = {"tiny-64", "tiny-video"}          # tiny's session and layers at other sizes
# The adapters' SCD-MC passes are read where tests/test_model_compile.py compiles them (its
# default cases, `unmarked_writes` around the compiled run): one cold compile each, not two.
CASES = [pytest.param(name, {}, marks=pytest.mark.slow if name in SLOW else (), id=f"{name}-scd-mc")
         for name in ["texture", "tiny", "tiny-64", "tiny-video"]]
# trees: llamagen's in the compile lane, the others (the same tree slots, or texture's history) also slow
CASES += [pytest.param(name, dict(method="sjd", window=8, tree=(2, 2)), id=f"{name}-sjd-tree-2x2",
                       marks=() if name == "llamagen" else pytest.mark.slow)
          for name in ["texture", "tiny", "llamagen", "janus-pro", "emu3"]]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return models_util.builds(tmp_path_factory)


def test_a_cache_that_is_not_marked_is_found():
    """The reading catches the defect it is for: a tensor the graph writes in place, not
    marked, is reported with its shape; marked, it is not."""
    def write(cache, at, value):
        cache.index_copy_(0, at, value)
        return cache.sum()

    compiled = torch.compile(write, fullgraph=True)
    at, value = torch.tensor([1]), torch.ones(1, 3)
    plain, marked = torch.zeros(4, 3), torch.zeros(4, 3)
    torch._dynamo.mark_static_address(marked)
    torch._dynamo.reset()
    with unmarked_writes() as graphs:
        compiled(plain, at, value)
    assert [[(w.shape, w.dtype) for w in g] for g in graphs] == [[((4, 3), torch.float32)]]
    torch._dynamo.reset()
    with unmarked_writes() as graphs:
        compiled(marked, at, value)
    assert graphs == [[]] and torch.equal(marked[1], value[0])


@pytest.mark.parametrize("name,settings", CASES)
def test_the_compiled_pass_writes_only_static_tensors(built, name, settings):
    model, prompts, cfg = built(name)
    kw = dict(top_k=40) | settings
    if name == "cosmos":
        kw["init"] = "random"
    assert check_static_writes(model, prompts[:1], cfg, **kw) >= 1


GPU_CASES = [pytest.param(name, {}, id=f"{name}-scd-mc")
             for name in ["texture", "tiny", "janus-pro", "emu3", "lumina-mgpt", "llamagen", "cosmos"]]
GPU_CASES += [pytest.param(name, dict(method="sjd", window=8, tree=(2, 2)), id=f"{name}-sjd-tree-2x2")
              for name in ["tiny", "llamagen"]]


@pytest.mark.gpu
@pytest.mark.parametrize("name,settings", GPU_CASES)
def test_the_compiled_pass_replays_as_a_cuda_graph_with_the_eager_tokens(tmp_path_factory, name, settings):
    small = dict(grid=(8, 8)) if name == "texture" else {}
    model, prompts, cfg = models_util.build(name, torch.float32, tmp_path_factory, device="cuda", **small)
    kw = dict(method="scd-mc", window=6, seed=3, cfg_scale=cfg, top_k=40) | settings
    if name == "cosmos":
        kw["init"] = "random"
    eager = scd_core.generate(model, prompts[:1], **kw)
    torch._dynamo.reset()
    skips = torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]
    compiled = [scd_core.generate(model, prompts[:1], compile=True, **kw) for _ in range(2)]   # recorded, replayed
    assert torch._dynamo.utils.counters["inductor"]["cudagraph_skips"] == skips, f"{name}: a capture was skipped"
    for run in compiled:
        assert torch.equal(run.tokens.cpu(), eager.tokens.cpu()) and run.nfe == eager.nfe
