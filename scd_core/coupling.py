"""Samplers: independent draws, modified rejection sampling (the maximal coupling), and
position-hashed Gumbel noise (the Gumbel coupling).

Modified rejection sampling `MRS(p, q, x)` keeps a token x drawn from q with probability
min(1, p(x)/q(x)) and otherwise draws from the residual norm(max(0, p - q)). Its output is
distributed as p, and it equals x with probability 1 - TV(p, q), the most any coupling of
(p, q) can achieve. The same operation is the speculative-sampling verification (SJD) and
SCD's maximal-coupling redraft; one vectorised function serves both.

Gumbel coupling: `argmax(log p + G)` with one Gumbel vector G per (seed, row, position),
derived from a counter-based hash so that no table is stored and the same noise comes back
at every iteration.
"""
from __future__ import annotations

import torch

_MASK32 = 0xFFFFFFFF


def sample(p: torch.Tensor, generator: torch.Generator) -> torch.LongTensor:
    """One draw from each distribution in p [..., V] (exponential race: argmax p / E)."""
    e = torch.empty_like(p).exponential_(generator=generator)
    return (p / e).argmax(-1)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)); falls back to p where the residual has no mass (p == q)."""
    r = (p - q).clamp_(min=0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > 0, r / mass.clamp(min=torch.finfo(r.dtype).tiny), p)


def mrs(p: torch.Tensor, q: torch.Tensor, x: torch.LongTensor, generator: torch.Generator):
    """Modified rejection sampling of x ~ q towards p, over any leading shape [...].

    Returns (kept [...], tokens [...], accept_prob [...]): kept is `U < min(1, p(x)/q(x))`,
    tokens is x where kept and a residual sample elsewhere.
    """
    px = p.gather(-1, x.unsqueeze(-1)).squeeze(-1)
    qx = q.gather(-1, x.unsqueeze(-1)).squeeze(-1)
    accept_prob = (px / qx).clamp(max=1.0)
    u = torch.rand(accept_prob.shape, generator=generator, device=p.device)
    kept = u < accept_prob
    tokens = torch.where(kept, x, sample(residual(p, q), generator))
    return kept, tokens, accept_prob


def _mul32(h: torch.Tensor, c: int) -> torch.Tensor:
    """(h * c) mod 2**32 for 0 <= h < 2**32 without int64 overflow."""
    hi, lo = h >> 16, h & 0xFFFF
    return ((((hi * c) & 0xFFFF) << 16) + lo * c) & _MASK32


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser: a bijective avalanche mix of 32-bit values."""
    h = h & _MASK32
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def _key(seed: int, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """A 32-bit hash of (seed, row, position), broadcast over rows/positions."""
    s = torch.tensor([seed & _MASK32, (seed >> 32) & _MASK32], dtype=torch.long, device=positions.device)
    h = _fmix32(s[0] ^ 0x9E3779B9)
    h = _fmix32(h ^ s[1])
    h = _fmix32(h ^ rows)
    return _fmix32(h ^ positions)


def gumbel_noise(seed: int, rows: torch.LongTensor, positions: torch.LongTensor, vocab: int) -> torch.Tensor:
    """Gumbel(0, 1) noise [..., V] fixed per (seed, row, absolute position, token).

    `rows` and `positions` broadcast to the leading shape. Two 32-bit hashes per entry give
    a 53-bit uniform in (0, 1), so ties in argmax(log p + G) have probability ~0.
    """
    key = _key(seed, rows, positions).unsqueeze(-1)
    token = torch.arange(vocab, device=positions.device, dtype=torch.long)
    h = _fmix32(key ^ _fmix32(token + 0x632BE5AB))
    a = _fmix32(h ^ 0x68E31DA4) >> 5          # 27 bits
    b = _fmix32(h ^ 0xB5297A4D) >> 6          # 26 bits
    u = (a.double() * 67108864.0 + b.double() + 0.5) / 9007199254740992.0
    return -torch.log(-torch.log(u)).float()


def gumbel_argmax(p: torch.Tensor, noise: torch.Tensor) -> torch.LongTensor:
    """argmax(log p + G): a draw from p, coupled across calls that share G."""
    return (p.log() + noise).argmax(-1)
