"""Logits -> the one processed distribution p per position (exactness rule 1).

Classifier-free guidance is applied by the model behind the `Session` contract, with `guide`
(every adapter mixes with it); here come temperature, top-k and top-p, then softmax, with the
law of transformers' warpers and of the models' own samplers: top-k keeps every token tied with
the k-th largest logit (bfloat16 logits tie often), top-p is `TopPLogitsWarper`'s computation.
Verification, drafting, residuals and the AR baseline all call `processed_probs`, so they all
sample the same p.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0   # 0 means greedy
    top_k: int = 0             # 0 means no top-k filtering; 1 is greedy (the first of tokens tied at the largest)
    top_p: float = 1.0         # 1.0 means no nucleus filtering

    @property
    def greedy(self) -> bool:
        return self.temperature == 0 or self.top_k == 1


def validate_sampling(temperature: float, top_k: int, top_p: float) -> SamplingConfig:
    """Check the sampling arguments; a ValueError names the argument and its range."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0 or temperature == float("inf"):
        raise ValueError(f"temperature must be a finite number >= 0 (0 is greedy), got {temperature!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0 (0 disables top-k), got {top_k!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (1 disables top-p), got {top_p!r}")
    return SamplingConfig(float(temperature), int(top_k), float(top_p))


def guide(cond: torch.Tensor, uncond: torch.Tensor | None, scale: float) -> torch.Tensor:
    """Classifier-free guidance: `uncond + scale * (cond - uncond)`, elementwise.

    The arithmetic is exactly this expression (one subtraction, one multiplication, one
    addition, in the logits' dtype): adapters that are checked bit-for-bit against a reference
    implementation rely on it (`scale * d` and `d * scale` are the same IEEE product, so the
    references' `u + s * (c - u)` and `u + (c - u) * s` both match). Without unconditional
    logits (`uncond` None) or at `scale == 1`, `cond` is returned unchanged.
    """
    if uncond is None or scale == 1:
        return cond
    return uncond + scale * (cond - uncond)


def processed_probs(logits: torch.Tensor, cfg: SamplingConfig, rows: torch.LongTensor | None = None) -> torch.Tensor:
    """[..., V] guided logits -> [..., V] float32 probabilities p (temperature, top-k, top-p).

    With `rows` [B, L] (logits [B, W, V]), p is [B, L, V] with p[b, l] the distribution of
    logits[b, rows[b, l]]: the logits are filtered where they lie and only the rows' results
    are copied (without top-p, no [B, L, V] copy of the logits)."""
    return probs_and_support(logits, cfg, rows)[0]


def probs_and_support(logits: torch.Tensor, cfg: SamplingConfig,
                      rows: torch.LongTensor | None = None) -> tuple[torch.Tensor, torch.LongTensor | None]:
    """`processed_probs`, and the k tokens `torch.topk` picks under top-k [..., k] (in no
    particular order; None without top-k). p has mass on them and, where logits tie with the
    k-th largest, on the tied tokens the pick left out, each with the k-th token's mass."""
    if logits.dtype != torch.float32:
        logits = logits.float()
    if rows is None:
        shape, pick = logits.shape, lambda t: t
    else:                                                        # [B, W, ...] -> [B, L, ...]
        shape, at = rows.shape + logits.shape[-1:], (torch.arange(rows.shape[0], device=rows.device).unsqueeze(1), rows)
        pick = lambda t: t[at]                                   # noqa: E731
    if cfg.greedy:
        return logits.new_zeros(shape).scatter_(-1, pick(logits.argmax(-1, keepdim=True)), 1.0), None
    if cfg.temperature != 1.0:
        logits = logits / cfg.temperature
    top = logits.topk(cfg.top_k, dim=-1, sorted=False) if 0 < cfg.top_k < logits.shape[-1] else None
    support = None if top is None else pick(top.indices)
    if cfg.top_p < 1:
        scores = pick(logits)
        if top is not None:                                      # transformers' TopKLogitsWarper
            scores = scores.masked_fill(scores < pick(top.values.amin(-1, keepdim=True)), -math.inf)
        probs = nucleus(scores, cfg.top_p).softmax(-1)
    elif top is not None:
        probs = top_k_probs(pick(logits == top.values.amin(-1, keepdim=True)), pick(top.values), support)
    else:
        probs = pick(logits).softmax(-1)
    return probs, support


def top_k_probs(tied: torch.BoolTensor, values: torch.Tensor, support: torch.LongTensor) -> torch.Tensor:
    """p [..., V] of top-k: the softmax over every logit >= the k-th largest, from the k
    (values [..., k], tokens `support` [..., k]) `torch.topk` picks and the mask of logits equal
    to the k-th [..., V], which may hold more tokens than the pick does. Each tied token the pick
    left out takes the k-th token's mass; with none, p is the softmax of the k values alone."""
    s = values.softmax(-1)                                                      # [..., k]
    s_kth = s.amin(-1, keepdim=True)                                            # [..., 1]
    left_out = tied.sum(-1, keepdim=True) - (values == values.amin(-1, keepdim=True)).sum(-1, keepdim=True)
    mass = 1 + left_out * s_kth                                                 # [..., 1]: 1 exactly without ties
    return torch.where(tied, s_kth / mass, 0.0).scatter_(-1, support, s / mass)


def nucleus(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """transformers' `TopPLogitsWarper`: scores [..., V] with -inf at the tokens outside the
    smallest set of most likely ones whose mass exceeds top_p, computed as there (an ascending
    sort, its softmax's cumulative sum against 1 - top_p, the most likely token always kept), so
    that the same scores keep the same tokens, ties across the cut included."""
    ascending, order = scores.sort(-1)
    drop = ascending.softmax(-1).cumsum(-1) <= 1 - top_p
    drop[..., -1:] = False
    return scores.masked_fill(drop.scatter(-1, order, drop), -math.inf)
