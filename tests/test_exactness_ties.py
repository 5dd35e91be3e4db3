"""Exactness where bfloat16 logits tie: every method samples the law of transformers' warpers,
in which top-k keeps every token tied with the k-th largest logit (rule 1).

The toy model has V = 4 tokens and N = 4 positions (a 2 x 2 grid: 256 sequences) and holds its
logits in bfloat16 as whole numbers, so that at most prefixes two or more tokens tie, often at
the k-th largest (the test checks that they do). The exact joint is built from transformers' own
`TemperatureLogitsWarper`, `TopKLogitsWarper` and `TopPLogitsWarper`, then softmax, on the
guided logits of every prefix: independently of `scd_core.sampling`. Each case decodes ROWS rows
and compares the histogram of sequences with that joint by chi-square, as tests/test_exactness.py
does. Two biased variants fail the same test: top-k keeping exactly k tokens (torch.topk's pick
among the tied, the engine's old law), under every method; and an SCD-Gumbel draft that ignores
the tied tokens outside that pick (a draft not drawn from its stored q = p).
"""
from __future__ import annotations

import itertools

import pytest
import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

import scd_core
from scd_core import coupling, sampling
from scd_core.models.toy import ToyModel
from stats_util import chi_square_pvalue

METHODS = ["ar", "sjd", "scd-mc", "scd-gumbel"]
SETTINGS = {
    "cfg, top-k 2": dict(cfg_scale=2.0, top_k=2, init="random"),
    "top-k 2, top-p 0.8, temp 0.7": dict(cfg_scale=1.0, top_k=2, top_p=0.8, temperature=0.7, init="repeat-above"),
}
CASES = list(itertools.product(METHODS, SETTINGS))
ROWS = 24_000
PROMPT = "a red apple"
NUM_TESTS = len(CASES) + len(METHODS[1:]) + len(METHODS) + 2
ALPHA = 1e-4 / NUM_TESTS


class TiedToy(ToyModel):
    """`ToyModel` with its logits rounded to whole numbers (exact in bfloat16)."""

    def table(self, prompt: str | None) -> torch.Tensor:
        return super().table(prompt).float().round().to(self.dtype)


@pytest.fixture(scope="module")
def toy() -> TiedToy:
    return TiedToy(vocab_size=4, grid=(2, 2), scale=0.6, seed=3, dtype=torch.bfloat16)


def warped(scores: torch.Tensor, settings: dict) -> torch.Tensor:
    """transformers' warpers on scores [nodes, V], then softmax: the law of its sampling."""
    if settings.get("temperature", 1.0) != 1.0:
        scores = TemperatureLogitsWarper(settings["temperature"])(None, scores)
    scores = TopKLogitsWarper(settings["top_k"])(None, scores)
    if settings.get("top_p", 1.0) < 1.0:
        scores = TopPLogitsWarper(settings["top_p"])(None, scores)
    return scores.softmax(-1)


def reference_joint(model: TiedToy, settings: dict) -> torch.Tensor:
    """[V**N] the exact law of every sequence (index: base V, position 0 first) under
    transformers' warpers."""
    probs = warped(model.guided_table(PROMPT, settings["cfg_scale"]).float(), settings).double()
    V, joint = model.vocab_size, torch.ones(1, dtype=torch.float64)
    for length in range(model.N):
        nodes = probs[model.offset[length]: model.offset[length] + V ** length]
        joint = (joint.unsqueeze(1) * nodes).reshape(-1)
    return joint


def pvalue(model: TiedToy, method: str, name: str, seed: int, window: int = 3, tree=(1, 0)) -> float:
    settings = SETTINGS[name]
    run = scd_core.generate(model, [PROMPT] * ROWS, method=method, window=window, tree=tree, seed=seed, **settings)
    return chi_square_pvalue(model.sequence_index(run.tokens), reference_joint(model, settings))


def test_the_toy_ties_at_the_kth_logit(toy):
    """The premise: at many prefixes tokens tie at the 2nd largest guided logit, so top-k 2
    keeps three or four tokens there."""
    for name, settings in SETTINGS.items():
        table = toy.guided_table(PROMPT, settings["cfg_scale"]).float()[: toy.offset[toy.N]]
        kept = (warped(table, dict(top_k=2)) > 0).sum(-1)
        assert (kept > 2).float().mean() > 0.5, name


@pytest.mark.parametrize("method,name", CASES)
def test_rows_sample_transformers_law_where_logits_tie(toy, method, name):
    p = pvalue(toy, method, name, seed=1_000_000 * (1 + CASES.index((method, name))))
    assert p > ALPHA, f"{method}/{name}: chi-square p = {p:.3g}"


@pytest.mark.parametrize("method", METHODS[1:])
def test_draft_trees_sample_transformers_law_where_logits_tie(toy, method):
    """Two candidates at the first draft position (L = 4), under top-k, top-p and temperature."""
    p = pvalue(toy, method, "top-k 2, top-p 0.8, temp 0.7", seed=50_000_000 * (1 + METHODS.index(method)),
               window=4, tree=(2, 1))
    assert p > ALPHA, f"{method} with a tree: chi-square p = {p:.3g}"


def exactly_k(tied, values, support):
    """The biased top-k: the k tokens torch.topk picks, the tied ones it left out dropped."""
    return torch.zeros(tied.shape, dtype=values.dtype, device=values.device).scatter_(-1, support, values.softmax(-1))


@pytest.mark.parametrize("method", METHODS)
def test_keeping_exactly_k_tokens_is_detected(toy, monkeypatch, method):
    monkeypatch.setattr(sampling, "top_k_probs", exactly_k)
    p = pvalue(toy, method, "cfg, top-k 2", seed=77)
    assert p < ALPHA, f"{method}: the biased variant passed: chi-square p = {p:.3g}"


def test_a_gumbel_draft_blind_to_the_tied_tokens_outside_the_pick_is_detected(toy, monkeypatch):
    """SCD-Gumbel's drafts hash the noise at top-k's k tokens; one that never draws the tied
    tokens outside them is not a draw from its stored q = p."""
    monkeypatch.setattr(coupling, "tied_outside", lambda p, support, keys, positions: (
        torch.zeros(p.shape[:-1], dtype=torch.long, device=p.device), torch.zeros(p.shape[:-1], device=p.device)))
    p = pvalue(toy, "scd-gumbel", "cfg, top-k 2", seed=78)
    assert p < ALPHA, f"the biased variant passed: chi-square p = {p:.3g}"
