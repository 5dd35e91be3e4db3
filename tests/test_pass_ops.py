"""The pass is GPU-shaped: no operation in it waits for the device, and a chain pass dispatches
no more operations than the engine did before draft trees (each is a kernel launch on a GPU).

Counted with a dispatch mode (`ops_util.OpCounter`) over every pass of a `stream` after the
prefill, records included, on `texture` (B = 8, L = 16; the count per pass does not depend on
the grid's size, so a 12 x 12 grid keeps the test short), as `python -m bench pass-ops` prints
them. The one wait a pass may have is the loop's "are all rows done" check.
"""
from __future__ import annotations

import pytest
import torch

import scd_core
from scd_core import chain
from ops_util import OpCounter, counted

METHODS = ("ar", "sjd", "scd-mc", "scd-gumbel")
# Operations per pass of the chain engine before draft trees (a9fe42d), the texture model's own
# included, measured the same way: the budget each method's pass keeps within.
BEFORE_TREES = {"ar": 111, "sjd": 181, "scd-mc": 183, "scd-gumbel": 212}
PROMPTS = ["ocean waves"] * 8


@pytest.fixture(scope="module")
def texture():
    return scd_core.load_model("texture", grid=(12, 12))


def per_pass(model, counter: OpCounter | None = None, **kw) -> tuple[float, float]:
    """(operations, waits) per pass after the prefill, each pass's record included; the
    loop's last check, after the last pass, is left out of the waits."""
    counter = counter or OpCounter()
    records = scd_core.stream(model, PROMPTS, seed=0, **kw)
    next(records)                                                       # the prefill
    with counter:
        passes = sum(1 for _ in records)
    return counter.total / passes, (counter.total_syncs - 1) / passes


@pytest.mark.parametrize("method", METHODS)
def test_a_chain_pass_dispatches_no_more_than_before_trees_and_waits_once(texture, method):
    ops, syncs = per_pass(texture, method=method, window=16)
    assert syncs <= 1.0, f"{method}: {syncs:.2f} waits per pass"
    assert ops <= BEFORE_TREES[method], f"{method}: {ops:.0f} operations per pass"


@pytest.mark.parametrize("method", METHODS[1:])
@pytest.mark.parametrize("setting", [dict(tree=(2, 2)), dict(top_k=100, cfg_scale=2.0), dict(tree=(3, 1), top_k=50),
                                     dict(init="repeat-above", top_p=0.9)])
def test_no_pass_of_the_engine_waits_for_the_device(texture, method, setting):
    """Trees, top-k, top-p and copy inits included: the engine's own operations (the
    model's left out) wait at most once per pass."""
    counter = OpCounter()
    _, syncs = per_pass(counted(texture, counter), counter, method=method, window=16, **setting)
    assert syncs <= 1.0, dict(counter.syncs)


def test_the_counter_sees_a_pass_that_waits(texture, monkeypatch):
    """A draw made by boolean-mask indexing (the data decides how many rows) is counted."""
    real = chain.draw_line

    def masked(p, support, tested, u, keys, plan):
        line = real(p, support, tested, u, keys, plan)
        where = torch.zeros_like(line, dtype=torch.bool)
        where[:, 0] = True
        line[where] = line[where]                                    # boolean index and index_put
        return line

    monkeypatch.setattr(chain, "draw_line", masked)
    _, syncs = per_pass(texture, method="sjd", window=16)
    assert syncs >= 2
