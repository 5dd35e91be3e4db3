"""Samplers: independent draws, modified rejection sampling (the maximal coupling), and
position-hashed Gumbel noise (the Gumbel coupling).

Modified rejection sampling `MRS(p, q, x)` keeps a token x drawn from q with probability
min(1, p(x)/q(x)) and otherwise draws from the residual norm(max(0, p - q)). Its output is
distributed as p, and it equals x with probability 1 - TV(p, q), the most any coupling of
(p, q) can achieve. The same operation is the speculative-sampling verification (SJD) and
SCD's maximal-coupling redraft. `mrs` is it in one call; the decoder composes the same
pieces (`accept_test_with`, `residual_weights`, `sample_with`) so that one uniform draw
serves a whole pass.

Gumbel coupling: `argmax(log p + G)` with one Gumbel vector G per (seed, row, position),
derived from a counter-based hash so that no table is stored and the same noise comes back
at every iteration.
"""
from __future__ import annotations

import torch

_MASK32 = 0xFFFFFFFF


def sample(p: torch.Tensor, generator: torch.Generator) -> torch.LongTensor:
    """One draw from each distribution in p [..., V], by inverse CDF (one uniform per draw).

    The CDF is accumulated in float64; `right=True` lands only on tokens of positive mass
    (cdf[i-1] <= u * total < cdf[i]); the clamp covers u * total rounding up to total.
    """
    u = torch.rand(p.shape[:-1], generator=generator, device=p.device, dtype=torch.float64)
    return sample_with(p, u)


def sample_with(p: torch.Tensor, u: torch.Tensor) -> torch.LongTensor:
    """`sample` with the uniforms given: u [...] in [0, 1), float64, one per distribution."""
    cdf = p.cumsum(-1, dtype=torch.float64)
    index = torch.searchsorted(cdf, u.unsqueeze(-1) * cdf[..., -1:], right=True).clamp_(max=p.shape[-1] - 1)
    return index.squeeze(-1)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)); falls back to p where the residual has no mass (p == q)."""
    r = residual_weights(p, q)
    return r / r.sum(-1, keepdim=True)


def residual_weights(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(0, p - q), or p where that has no mass: `residual` without the division, for
    `sample`, which takes unnormalised weights."""
    r = (p - q).clamp_(min=0)
    return torch.where(r.sum(-1, keepdim=True) > 0, r, p)


def accept_test(p: torch.Tensor, q: torch.Tensor, x: torch.LongTensor, generator: torch.Generator):
    """The speculative-sampling test over any leading shape [...]: U < min(1, p(x)/q(x)).

    Returns (kept [...], accept_prob [...]).
    """
    return accept_test_with(p, q, x, torch.rand(x.shape, generator=generator, device=p.device))


def accept_test_with(p: torch.Tensor, q: torch.Tensor, x: torch.LongTensor, u: torch.Tensor):
    """`accept_test` with the uniforms given (u [...] in [0, 1))."""
    x = x.unsqueeze(-1)
    accept_prob = (p.gather(-1, x) / q.gather(-1, x)).clamp_(max=1.0).squeeze(-1)
    return u < accept_prob, accept_prob


def mrs(p: torch.Tensor, q: torch.Tensor, x: torch.LongTensor, generator: torch.Generator):
    """Modified rejection sampling of x ~ q towards p, over any leading shape [...].

    Returns (kept [...], tokens [...], accept_prob [...]): tokens is x where kept and a
    residual sample elsewhere, distributed as p and equal to x w.p. 1 - TV(p, q).
    """
    kept, accept_prob = accept_test(p, q, x, generator)
    tokens = torch.where(kept, x, sample(residual_weights(p, q), generator))
    return kept, tokens, accept_prob


def _mix32(h: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer avalanche mix (xorshift-multiply, three rounds) on int64 tensors.

    The multipliers are odd and below 2**31, so products of 32-bit values never overflow
    int64, and each round is a bijection of 32-bit values.
    """
    return _mix32_(h & _MASK32)


def _mix32_(h: torch.Tensor) -> torch.Tensor:
    """`_mix32` in place on h (values already in [0, 2**32)), with one scratch tensor."""
    scratch = torch.empty_like(h)
    for shift, multiplier in ((16, 0x7FEB352D), (15, 0x2C1B3C6D), (12, 0x297A2D39)):
        h.bitwise_xor_(torch.bitwise_right_shift(h, shift, out=scratch))
        h.mul_(multiplier).bitwise_and_(_MASK32)
    return h.bitwise_xor_(torch.bitwise_right_shift(h, 15, out=scratch))


def row_keys(seed: int, rows: torch.Tensor) -> torch.Tensor:
    """A 32-bit key per (seed, row); position keys derive from it (see `gumbel_noise`)."""
    h = _mix32(torch.tensor(seed & _MASK32, device=rows.device) ^ 0x1B873593)
    h = _mix32(h ^ ((seed >> 32) & _MASK32))
    return _mix32(h ^ rows)


_TOKEN_HASH: dict[tuple[int, str], torch.Tensor] = {}


def _token_hash(vocab: int, device: torch.device) -> torch.Tensor:
    key = (vocab, str(device))
    if key not in _TOKEN_HASH:
        _TOKEN_HASH[key] = _mix32(torch.arange(vocab, device=device, dtype=torch.long) + 0x632BE5AB)
    return _TOKEN_HASH[key]


def gumbel_noise(seed: int, rows: torch.LongTensor, positions: torch.LongTensor, vocab: int) -> torch.Tensor:
    """Gumbel(0, 1) noise [..., V] fixed per (seed, row, absolute position, token).

    `rows` and `positions` broadcast to the leading shape. Each entry is a 24-bit uniform
    (the resolution of float32, the precision p itself is computed in) from a counter-based
    hash: no table is stored and the same position always gets the same noise.
    """
    return gumbel_noise_for_keys(row_keys(seed, rows), positions, vocab)


def gumbel_noise_for_keys(keys: torch.Tensor, positions: torch.LongTensor, vocab: int) -> torch.Tensor:
    """`gumbel_noise` from precomputed `row_keys` (broadcast against positions)."""
    return -exponential_noise_for_keys(keys, positions, vocab).log()


def exponential_noise_for_keys(keys: torch.Tensor, positions: torch.LongTensor, vocab: int) -> torch.Tensor:
    """E = exp(-G) = -log(u) for the same hashed uniforms u as `gumbel_noise_for_keys`.

    argmax(p / E) = argmax(log p + G): the same Gumbel-max draw with two logarithms fewer.
    """
    return exponential_noise_at(position_keys(keys, positions), vocab)


def position_keys(keys: torch.Tensor, positions: torch.LongTensor) -> torch.Tensor:
    """The 32-bit key of each (row key, absolute position): the counter the noise hashes."""
    return _mix32(keys ^ positions)


def exponential_noise_at(position_key: torch.Tensor, vocab: int) -> torch.Tensor:
    """Exponential(1) noise [..., V] from `position_keys` [...]: one hash per token."""
    h = _mix32_(position_key.unsqueeze(-1) ^ _token_hash(vocab, position_key.device))   # both 32-bit
    return h.bitwise_right_shift_(8).float().add_(0.5).mul_(1.0 / 16777216.0).log_().neg_()


def gumbel_argmax(p: torch.Tensor, noise: torch.Tensor) -> torch.LongTensor:
    """argmax(log p + G): a draw from p, coupled across calls that share G."""
    return (p.log() + noise).argmax(-1)


def exponential_argmax(p: torch.Tensor, noise: torch.Tensor) -> torch.LongTensor:
    """argmax(p / E) with E = exp(-G): the Gumbel-max draw of `gumbel_argmax`."""
    return (p / noise).argmax(-1)
