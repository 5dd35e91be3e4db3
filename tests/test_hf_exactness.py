"""Losslessness through transformers' `generate`: `custom_generate=scd_core.hf.generate` samples
exactly the AR law of transformers' own settings, by exact enumeration.

A tiny LlamaForCausalLM with V = 3 tokens decodes N = 5 new tokens (243 sequences). The exact
joint is computed by plain forwards of every prefix (no cache), with transformers' guidance
(log-softmax scores, a negative prompt), transformers' own processor classes (a repetition
penalty, a `prefix_allowed_tokens_fn` that forbids the token before: both depend on the drafts
before a window position), then temperature, top-k and top-p (`scd_core.sampling`). Each configuration decodes 24,000 rows in one call (row b
keyed by seed + b) and compares the histogram with the joint by chi-square, as the engine's
exactness tests do (tests/test_exactness.py). transformers' own sampler is held to the same
joint, and a biased variant (processors given the window's first prefix at every position) is
caught, with either processor.
"""
from __future__ import annotations

import itertools

import pytest
import torch

import scd_core.hf as hf
from hf_util import tiny_llama
from scd_core.sampling import guide, processed_probs, validate_sampling
from stats_util import chi_square_pvalue

V, N, ROWS = 3, 5, 24_000
PROMPT = [0, 1, 1]                     # token 2 is not in it: a repetition penalty depends on the generated prefix
NEGATIVE = [2, 2]
METHODS = ["ar", "sjd", "scd-mc", "scd-gumbel"]
SETTINGS = {
    "temperature": dict(do_sample=True, temperature=0.7),
    "top-k": dict(do_sample=True, top_k=2),
    "top-p": dict(do_sample=True, top_p=0.7),
    "cfg": dict(do_sample=True, guidance_scale=2.5),
    "repetition": dict(do_sample=True, repetition_penalty=3.0),
    "constrained": dict(do_sample=True, prefix_allowed_tokens_fn=lambda batch_id, sent: [
        t for t in range(V) if t != int(sent[-1])]),                  # never the token before: drafts constrain
}
# prefix_allowed_tokens_fn is called once per row and window position in Python: fewer rows
# (its law has 48 possible sequences, not 243)
ROWS_OF = {"constrained": 12_000}
CASES = list(itertools.product(METHODS, SETTINGS))
NUM_TESTS = len(CASES) + len(SETTINGS) + 2
ALPHA = 1e-4 / NUM_TESTS


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab_size=V, std=0.5, seed=2)


def rows_of(name: str) -> int:
    return ROWS_OF.get(name, ROWS)


def run_kwargs(name: str, rows: int) -> dict:
    kwargs = dict(SETTINGS[name], max_new_tokens=N)
    if "guidance_scale" in kwargs:
        kwargs["negative_prompt_ids"] = torch.tensor([NEGATIVE] * rows)
    return kwargs


@torch.no_grad()
def exact_joint(model, name: str) -> torch.Tensor:
    """[V**N] the AR law of setting `name` (index: the tokens as a base-V number, first most
    significant), from plain forwards of every prefix."""
    s = SETTINGS[name]
    cfg = validate_sampling(s.get("temperature", 1.0), s.get("top_k", 50), s.get("top_p", 1.0))
    processors = []
    if "repetition_penalty" in s:
        from transformers import RepetitionPenaltyLogitsProcessor
        processors.append(RepetitionPenaltyLogitsProcessor(s["repetition_penalty"]))
    if "prefix_allowed_tokens_fn" in s:
        from transformers import PrefixConstrainedLogitsProcessor
        processors.append(PrefixConstrainedLogitsProcessor(s["prefix_allowed_tokens_fn"], num_beams=1))
    joint = torch.ones(1, dtype=torch.float64)
    for length in range(N):
        prefixes = torch.tensor(list(itertools.product(range(V), repeat=length)), dtype=torch.long).view(V ** length, length)
        ids = torch.cat([torch.tensor([PROMPT]).expand(len(prefixes), -1), prefixes], 1)
        scores = model(ids).logits[:, -1].float()
        if "guidance_scale" in s:
            neg = torch.cat([torch.tensor([NEGATIVE]).expand(len(prefixes), -1), prefixes], 1)
            scores = guide(scores.log_softmax(-1), model(neg).logits[:, -1].log_softmax(-1), s["guidance_scale"])
        for proc in processors:
            scores = proc(ids, scores)
        joint = (joint.unsqueeze(1) * processed_probs(scores, cfg).double()).reshape(-1)
    return joint


def pvalue(model, name: str, sequences: torch.LongTensor) -> float:
    tokens = sequences[:, len(PROMPT):]
    assert tokens.shape == (rows_of(name), N)
    index = (tokens * V ** torch.arange(N - 1, -1, -1)).sum(1)
    return chi_square_pvalue(index, exact_joint(model, name))


def ours(model, method: str, name: str, seed: int) -> torch.LongTensor:
    ids = torch.tensor([PROMPT] * rows_of(name))
    return model.generate(ids, custom_generate=hf.generate, method=method, window=3, seed=seed,
                          **run_kwargs(name, rows_of(name)))


@pytest.mark.parametrize("method,name", [pytest.param(m, n, marks=() if m == "scd-mc" else pytest.mark.slow)
                                         for m, n in CASES])               # the quick lane: SCD-MC
def test_rows_sample_the_exact_joint(model, method, name):
    seed = 1_000_000 * (1 + CASES.index((method, name)))                  # disjoint streams per case
    p = pvalue(model, name, ours(model, method, name, seed))
    assert p > ALPHA, f"{method}/{name}: chi-square p = {p:.3g}"


@pytest.mark.slow
@pytest.mark.parametrize("name", SETTINGS)
def test_transformers_own_sampler_samples_the_same_joint(model, name):
    """The joint above is transformers' own law: its sampler passes the same test."""
    torch.manual_seed(7)
    out = model.generate(torch.tensor([PROMPT] * rows_of(name)), **run_kwargs(name, rows_of(name)))
    p = pvalue(model, name, out)
    assert p > ALPHA, f"transformers/{name}: chi-square p = {p:.3g}"


@pytest.mark.parametrize("name,method", [("repetition", "sjd"), ("constrained", "scd-mc")])
def test_processors_given_the_window_start_prefix_are_detected(model, monkeypatch, name, method):
    """Biased: every window position processed with the prefix of the window's first
    position (the committed tokens only, not the drafts before it)."""
    real = hf.CausalSession._process

    def first_prefix(self, scores, start):
        return torch.cat([real(self, scores[:, j: j + 1], start) for j in range(scores.shape[1])], 1)

    monkeypatch.setattr(hf.CausalSession, "_process", first_prefix)
    p = pvalue(model, name, ours(model, method, name, 99))
    assert p < ALPHA, f"the biased variant passed: chi-square p = {p:.3g}"
