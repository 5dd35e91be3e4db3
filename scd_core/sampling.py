"""Logits -> the one processed distribution p per position (exactness rule 1).

Classifier-free guidance is applied by the model behind the `Session` contract, with `guide`
(every adapter mixes with it); here come temperature, top-k and top-p, then softmax. Verification, drafting, residuals and the AR
baseline all call `processed_probs`, so they all sample the same p.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 1.0   # 0 means greedy
    top_k: int = 0             # 0 means no top-k filtering
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
    are copied (no [B, L, V] copy of the logits)."""
    return probs_and_support(logits, cfg, rows)[0]


def probs_and_support(logits: torch.Tensor, cfg: SamplingConfig,
                      rows: torch.LongTensor | None = None) -> tuple[torch.Tensor, torch.LongTensor | None]:
    """`processed_probs`, and the tokens p can have mass on: the k that top-k keeps [..., k]
    (in no particular order), or None where it may be any token."""
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
    support = None
    if 0 < cfg.top_k < logits.shape[-1]:
        # softmax over the k largest logits only (exactly k tokens: torch.topk breaks ties)
        top = logits.topk(cfg.top_k, dim=-1, sorted=False)
        support = pick(top.indices)
        probs = logits.new_zeros(shape).scatter_(-1, support, pick(top.values).softmax(-1))
    else:
        probs = pick(logits).softmax(-1)
    if cfg.top_p < 1:
        probs = _nucleus(probs, cfg.top_p)
    return probs, support


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p, renormalised."""
    sorted_p, order = probs.sort(-1, descending=True)
    mass_before = sorted_p.cumsum(-1) - sorted_p
    keep_sorted = mass_before < top_p
    keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
    kept = probs * keep
    return kept / kept.sum(-1, keepdim=True)
