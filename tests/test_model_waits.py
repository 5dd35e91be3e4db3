"""Every shipped model and adapter keeps the pass GPU-shaped: through the public `stream`, a
pass (the model's step included) waits for the device once (the loop's "are all rows
done" check), makes no tensor from Python data and copies nothing from the CPU to a
device; the model's own `step`, `step_tree` and `keep_path` wait for nothing at all.

Counted with a dispatch mode (`ops_util.OpCounter`) over every pass after the prefill, on the
embedded models as shipped and the adapters' tiny configs (`models_util.build`). On a CPU
nothing waits, but each counted operation is one that would make a GPU's host wait
(`item`, `nonzero`, boolean-mask indexing); the copies and Python data would each be a
host-to-device copy there.
"""
from __future__ import annotations

import pytest
import torch

import scd_core
import models_util
from ops_util import OpCounter, model_only

MODELS = ["texture", "tiny", "tiny-64", "tiny-video", "janus-pro", "emu3", "lumina-mgpt", "llamagen", "cosmos"]
# the longer grids (256 and 512 tokens) in the slow lane: the same code as tiny's
MODELS = [pytest.param(m, marks=pytest.mark.slow) if m in ("tiny-64", "tiny-video") else m for m in MODELS]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return models_util.builds(tmp_path_factory, texture_grid=(12, 12))


def settings(name: str, cfg: float, **kw) -> dict:
    out = dict(seed=0, cfg_scale=cfg, top_k=50, **kw)
    if name == "cosmos":
        out["init"] = "random"
    return out


def passes_counted(model, prompts, counter: OpCounter, **kw) -> int:
    """Run `stream` to its end with `counter` active after the prefill; the passes run."""
    records = scd_core.stream(model, prompts, **kw)
    next(records)                                                       # the prefill
    with counter:
        return sum(1 for _ in records)


@pytest.mark.parametrize("method", ["ar", "scd-mc"])
@pytest.mark.parametrize("name", MODELS)
def test_a_pass_waits_once_and_copies_nothing_to_the_device(built, name, method):
    model, prompts, cfg = built(name)
    counter = OpCounter()
    passes = passes_counted(model, prompts, counter, **settings(name, cfg, method=method, window=8))
    waits = (counter.total_syncs - 1) / passes                          # the loop's last check: after the last pass
    assert passes >= 2
    assert waits <= 1.0, f"{name}, {method}: {waits:.2f} waits a pass {dict(counter.syncs)}"
    assert not counter.made, f"{name}, {method}: tensors made from Python data in a pass {dict(counter.made)}"
    assert not counter.copies, f"{name}, {method}: copies from the CPU in a pass {dict(counter.copies)}"


@pytest.mark.parametrize("method,tree", [("scd-mc", None), ("sjd", (2, 2))])
@pytest.mark.parametrize("name", MODELS)
def test_the_models_step_and_tree_wait_for_nothing(built, name, method, tree):
    """Only the model's own operations counted (`step`; `step_tree` and `keep_path`)."""
    model, prompts, cfg = built(name)
    counter = OpCounter(paused=True)
    passes_counted(model_only(model, counter), prompts, counter,
                   **settings(name, cfg, method=method, window=8, tree=tree))
    assert counter.total > 0                                            # the model's operations were seen
    assert not counter.syncs, f"{name}: the model's step waits {dict(counter.syncs)}"
    assert not counter.made and not counter.copies, f"{name}: {dict(counter.made)} {dict(counter.copies)}"


def test_the_counter_sees_what_it_must_flag():
    """A read-back, a tensor made from a list and a copy to another device are each counted."""
    counter = OpCounter()
    x = torch.arange(4)
    with counter:
        int(x.max())
        torch.tensor([1, 2])
        torch.ones(2).to("meta")
        torch.zeros(2, device="meta").copy_(torch.ones(2))
        torch.as_tensor(x)                                              # a tensor already: no data made
    assert counter.total_syncs == 1
    assert dict(counter.made) == {"torch.tensor": 1}
    assert sum(counter.copies.values()) == 2


def test_a_step_with_a_read_back_is_caught(built):
    """The test has teeth: a model whose step reads a value back fails it."""
    model, prompts, cfg = built("texture")

    class Reading:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def step(self, tokens, start):
            int(start.max())                                            # an argument check read on the host
            return self.inner.step(tokens, start)

    class ReadingModel:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def start(self, prompts, cfg_scale):
            return Reading(self.inner.start(prompts, cfg_scale))

    counter = OpCounter()
    passes = passes_counted(ReadingModel(model), prompts, counter, **settings("texture", cfg, method="ar"))
    assert (counter.total_syncs - 1) / passes >= 2
