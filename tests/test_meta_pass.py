"""Passes on `device="meta"`: every shipped model and adapter, its weights on meta, runs whole
passes of the engine (AR, SCD-MC, SJD with a draft tree) with its prefill made on meta too.
A meta tensor has a shape and no values, so any value read back (`item`, `nonzero`, a
Python `bool` of a tensor) raises, and a CPU tensor met in a step either raises or shows
as a copy to meta (`ops_util.OpCounter`): what runs here reads nothing back and copies
nothing to the device, as a pass must on a GPU.

The passes are the engine's own pass functions (`chain.start_rows` and
`passes.eager_pass`): `stream`'s loop reads each record back, which meta cannot.
"""
from __future__ import annotations

import math

import pytest
import torch

import scd_core
from scd_core import chain, passes
import models_util
from ops_util import OpCounter, model_only

MODELS = ["texture", "tiny", "tiny-64", "tiny-video", "janus-pro", "emu3", "lumina-mgpt", "llamagen", "cosmos"]
CASES = {"ar": dict(method="ar"), "scd-mc": dict(method="scd-mc", window=8),
         "sjd-tree": dict(method="sjd", window=8, tree=(2, 2))}


@pytest.fixture(scope="module")
def built():
    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = models_util.build_meta(name)
        return cache[name]
    return get


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", MODELS)
def test_passes_run_on_meta(built, name, case):
    model, prompts, cfg, start = built(name)
    kw = dict(CASES[case], cfg_scale=cfg, top_k=20)
    plan = chain.Plan.of(scd_core.Settings(**kw), model)
    whole, alone = OpCounter(), OpCounter(paused=True)
    with torch.no_grad():
        session = start(prompts, cfg)
        assert session.first_logits.device.type == "meta"
        state, _ = chain.start_rows(session.first_logits, list(range(len(prompts))), plan)
        one_pass = passes.eager_pass(plan)
        watched = model_only(_Model(session), alone).start(prompts, cfg)
        state, _ = one_pass(watched, state, plan)       # the first: a tree's shape is made once per device
        with whole, alone:
            for _ in range(3):
                state, verdict = one_pass(watched, state, plan)
    B, N = len(prompts), math.prod(model.grid)
    assert state.tokens.device.type == "meta" and tuple(state.tokens.shape) == (B, N)
    assert alone.total > 0                                              # the model's step ran
    assert not alone.copies and not alone.made, f"{name}: {dict(alone.copies)} {dict(alone.made)}"
    assert not whole.copies and not whole.made, f"{name}: {dict(whole.copies)} {dict(whole.made)}"


class _Model:
    """A model whose `start` returns a session already started (its prefill made on meta)."""

    def __init__(self, session) -> None:
        self.session = session

    def start(self, prompts, cfg_scale):
        return self.session


def test_a_read_back_fails_on_meta():
    """The check has teeth: reading a meta tensor's value raises."""
    with pytest.raises((RuntimeError, NotImplementedError)):
        int(torch.zeros(2, dtype=torch.long, device="meta").max())
