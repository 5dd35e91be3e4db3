"""Each adapter's AR law is the law of the sampler its model was published with, on bfloat16
logits whose k-th largest value is tied.

The engine samples an adapter's logits (guidance applied) with `sampling.processed_probs` under
the adapter's settings. Here that p is compared, not by sampling, with the processed
distribution of each model's own sampler, written out from its source: the same tokens keep
mass, and each the same mass up to float32 rounding.

- LlamaGen (`autoregressive/models/generate.py`, `sample`): logits / max(T, 1e-5), then its
  `top_k_top_p_filtering` (drop logits below the k-th largest; top-p on a descending sort, a
  token dropped once the mass before it exceeds top_p), then softmax;
- Lumina-mGPT (`inference_solver.py`): transformers' `generate` with its
  `InterleavedTopKLogitsWarper` (drop scores below the k-th largest image score) before
  transformers' temperature;
- Janus-Pro and Emu3 through transformers: `TemperatureLogitsWarper`, `TopKLogitsWarper`,
  `TopPLogitsWarper`;
- Cosmos (`cosmos1/models/autoregressive/utils/sampling.py`): `logits_to_probs` for top-k (drop
  logits below the k-th largest), `sample_top_p` for top-p (softmax, a descending sort, a token
  dropped once the mass before it exceeds top_p).

The logits are each adapter's first logits from its tiny random model in bfloat16, rounded to
bfloat16, with three tokens set to the k-th largest value so that the cut falls in a tie. The
adapters' own k (1,000 to 2,048) is above the tiny vocabularies: k is a quarter of the
vocabulary. Top-p keeps the tokens transformers' `TopPLogitsWarper` keeps. The published top-p
samplers (Cosmos's default, LlamaGen's) sort the other way: where tokens tie across the cut,
they keep as many tokens of the same masses, but their sort picks its own among the tied; and
a cut within float32 rounding of a token's boundary may fall on its other side. On random
bfloat16 logits of Cosmos's size (V = 64,000, top-p 0.8) that parts the laws by a total
variation of at most 0.0016.
"""
from __future__ import annotations

import pytest
import torch
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

import models_util
from scd_core.sampling import SamplingConfig, processed_probs

SEEDS = {"llamagen": "llamagen", "lumina-mgpt": "lumina", "janus-pro": "transformers", "emu3": "transformers",
         "cosmos": "cosmos"}


def llamagen(logits, t, k, top_p):
    logits = logits / max(t, 1e-5)
    if k > 0:
        logits = logits.masked_fill(logits < logits.topk(min(k, logits.shape[-1])).values[..., -1:], -torch.inf)
    if top_p < 1:
        ordered, order = logits.sort(-1, descending=True)
        drop = ordered.softmax(-1).cumsum(-1) > top_p
        drop = torch.cat([torch.zeros_like(drop[..., :1]), drop[..., :-1]], -1)      # shifted: keep the first over
        logits = logits.masked_fill(drop.scatter(-1, order, drop), -torch.inf)
    return logits.softmax(-1)


def lumina(logits, t, k, top_p):
    assert top_p == 1                                           # Lumina-mGPT samples with top-k alone
    logits = logits.masked_fill(logits < logits.topk(k).values[..., -1:], -torch.inf)
    return (logits / t if t != 1 else logits).softmax(-1)


def transformers_warpers(logits, t, k, top_p):
    if t != 1:
        logits = TemperatureLogitsWarper(t)(None, logits)
    if k > 0:
        logits = TopKLogitsWarper(k)(None, logits)
    if top_p < 1:
        logits = TopPLogitsWarper(top_p)(None, logits)
    return logits.softmax(-1)


def cosmos(logits, t, k, top_p):
    if top_p < 1:
        probs = (logits / t).softmax(-1)
        ordered, order = probs.sort(-1, descending=True)
        ordered = ordered.masked_fill(ordered.cumsum(-1) - ordered > top_p, 0.0)
        ordered = ordered / ordered.sum(-1, keepdim=True)
        return torch.zeros_like(probs).scatter_(-1, order, ordered)
    logits = logits / max(t, 1e-5)
    return logits.masked_fill(logits < logits.topk(min(k, logits.shape[-1])).values[..., -1:], -torch.inf).softmax(-1)


SAMPLERS = {"llamagen": llamagen, "lumina": lumina, "transformers": transformers_warpers, "cosmos": cosmos}


def tied_at(logits: torch.Tensor, k: int) -> torch.Tensor:
    """bfloat16 values of logits [B, V] with the k + 1-th and k + 2-th largest set to the k-th:
    three tokens tied at the k-th largest."""
    logits = logits.bfloat16().float()
    ordered, order = logits.sort(-1, descending=True)
    ordered[:, k: k + 2] = ordered[:, k - 1: k]
    return torch.empty_like(logits).scatter_(-1, order, ordered)


@pytest.fixture(scope="module")
def first_logits(tmp_path_factory):
    cache = {}

    def get(name):
        if name not in cache:
            model, prompts, cfg = models_util.build(name, torch.bfloat16, tmp_path_factory)
            cache[name] = model, model.start(prompts, cfg).first_logits.float().cpu()
        return cache[name]
    return get


@pytest.mark.parametrize("name", models_util.ADAPTERS)
def test_top_k_is_the_models_own_samplers_where_the_kth_logit_ties(first_logits, name):
    model, logits = first_logits(name)
    V = logits.shape[-1]
    k = V // 4
    for t in (1.0, 0.7):
        tied = tied_at(logits, k)
        assert ((tied >= tied.topk(k).values[:, -1:]).sum(-1) == k + 2).all()         # three at the k-th
        ours = processed_probs(tied, SamplingConfig(t, k, 1.0))
        theirs = SAMPLERS[SEEDS[name]](tied, t, k, 1.0)
        assert torch.equal(ours > 0, theirs > 0), f"{name}, temperature {t}"
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["cosmos", "llamagen"])
def test_top_p_is_the_models_own_samplers_but_for_which_tied_tokens_the_cut_keeps(name):
    """A cut well inside one token's mass keeps the same tokens; a cut inside a tie of three
    keeps as many tokens, of the same masses, each sort its own among the tied."""
    clear = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0, -1.0, -2.0, -3.0]])
    tied = torch.tensor([[4.0, 3.0, 2.0, 2.0, 2.0, 1.0, 0.0, -1.0]])
    for rows, same_tokens in ((clear, True), (tied, False)):
        mass = rows.softmax(-1)[0]
        top_p = float(mass[:3].sum() + mass[3] / 2)                 # the cut halfway through the 4th token
        ours = processed_probs(rows, SamplingConfig(1.0, 0, top_p))
        theirs = SAMPLERS[SEEDS[name]](rows, 1.0, 0, top_p)
        assert int((ours > 0).sum()) == int((theirs > 0).sum()) == 4
        torch.testing.assert_close(ours.sort(-1).values, theirs.sort(-1).values, rtol=1e-5, atol=1e-7)
        assert torch.equal(ours > 0, transformers_warpers(rows, 1.0, 0, top_p) > 0)   # transformers' own tokens
        if same_tokens:
            assert torch.equal(ours > 0, theirs > 0)
