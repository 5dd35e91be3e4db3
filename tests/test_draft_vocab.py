"""Random-init drafts drawn from a draft vocabulary (`Plan.draft_vocab`): uniform over a fixed
set of tokens, q that uniform law. Exact for any set, also one that leaves out tokens p has mass
on (their mass comes from the residuals), by exact enumeration as in tests/test_exactness.py;
drafts from the set stored with the uniform law over the whole vocabulary (q not the law they
were drawn from) fail the same test. Through transformers' `generate` the set is what the
processors allow at the first generated position (Emu3: its visual codes)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import scd_core
from scd_core import chain, decoding, passes
from scd_core.models.toy import ToyModel
from stats_util import chi_square_pvalue

DRAFT_VOCAB = torch.tensor([0, 2])                 # token 1 is never drafted fresh, yet p has mass on it
ROWS, PROMPT, CFG = 24_000, "a red apple", 2.0
CASES = [("sjd", "random", (1, 0), 3), ("scd-mc", "repeat-above", (1, 0), 3), ("scd-gumbel", "random", (1, 0), 3),
         ("scd-mc", "random", (2, 1), 4)]
ALPHA = 1e-4 / (len(CASES) + 1)


@pytest.fixture(scope="module")
def toy() -> ToyModel:
    return ToyModel(vocab_size=3, grid=(2, 3), scale=1.5)


def sequences(model, method: str, init: str, tree, window: int, seed: int) -> torch.LongTensor:
    settings = scd_core.Settings(method, window, cfg_scale=CFG, init=init, tree=tree)
    plan, _ = decoding.validate(model, [PROMPT], settings, 0)
    plan = dataclasses.replace(plan, draft_vocab=DRAFT_VOCAB)
    session = model.start([PROMPT] * ROWS, plan.cfg_scale)
    state, _ = chain.start_rows(session.first_logits, range(seed, seed + ROWS), plan)
    step = passes.eager_pass(plan)
    while not bool((state.n >= plan.N).all()):
        state, _ = step(session, state, plan)
    return state.tokens


def pvalue(model, tokens) -> float:
    joint = model.exact_joint(PROMPT, CFG, scd_core.Settings(cfg_scale=CFG).sampling)
    return chi_square_pvalue(model.sequence_index(tokens), joint)


@pytest.mark.parametrize("method,init,tree,window", CASES, ids=[f"{m}-{i}-tree{t[0]}x{t[1]}-L{w}" for m, i, t, w in CASES])
def test_drafts_from_a_draft_vocabulary_sample_the_exact_joint(toy, method, init, tree, window):
    tokens = sequences(toy, method, init, tree, window, seed=1_000_000 * (1 + CASES.index((method, init, tree, window))))
    p = pvalue(toy, tokens)
    assert p > ALPHA, f"{method}/{init}/{tree}: chi-square p = {p:.3g}"


def test_drafts_stored_with_the_whole_vocabularys_law_are_detected(toy, monkeypatch):
    real = chain.fill_slots

    def uniform_over_v(state, carried, u, plan):
        after = real(state, carried, u, plan)
        empty = (~carried).unsqueeze(-1)
        return dataclasses.replace(after, q=torch.where(empty, 1.0 / after.q.shape[-1], after.q))

    monkeypatch.setattr(chain, "fill_slots", uniform_over_v)
    p = pvalue(toy, sequences(toy, "sjd", "random", (1, 0), 3, seed=7))
    assert p < ALPHA, f"the biased variant passed: chi-square p = {p:.3g}"
