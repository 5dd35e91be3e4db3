"""The samplers, as pure functions of explicit randomness.

- `sample(p, u)`: one draw from p by inverse CDF, u uniform in [0, 1).
- `residual(p, q)`: the residual law norm(max(0, p - q)); `resample(p, q, u)` a draw from it.
- `accept_prob(p, q, x)` and `residual_mass(p, q)`: the two halves of modified rejection
  sampling (MRS) of a token x drawn from q towards p: keep x if U < min(1, p(x)/q(x)), else
  draw from the residual. Its output is distributed as p and equals x with probability
  1 - TV(p, q), the most any coupling of (p, q) achieves. The same operation is speculative
  verification (SJD and SCD) and SCD's maximal-coupling redraft.
- `gumbel_argmax(p, g)`: argmax(log p + G), a draw from p; two calls that share G are
  coupled (they agree with probability at least (1 - TV) / (1 + TV)).
  `gumbel_argmax_on(p, support, keys, positions)` is the same draw with the noise hashed only
  at the k tokens top-k picked (tokens tied with the k-th outside them drawn as one).
- draft trees: `sample_siblings(q, first, u)` and `gumbel_siblings(q, first, g)`, candidates
  drawn from q without replacement after a first one; `recursive_rejection(p, q, c, u)`, the
  test of such candidates in order (each one against what the earlier rejections left of p).
- `gumbel_noise(keys, positions, V)` and `uniforms(keys, counters)`: counter-based random
  numbers. A row's key comes from its seed alone (`row_keys`); every number is a hash of
  (key, counter), so a row's randomness never depends on which other rows share its batch,
  and a position's Gumbel vector is the same at every pass without storing a table.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

_MASK32 = 0xFFFFFFFF


# ------------------------------------------------------------------------- the samplers

CDF_BLOCK = 64          # tokens per block of `sample`'s two-level CDF
ONE_LEVEL_MAX = 2**19   # `sample` builds the whole float64 CDF for at most this many entries


def sample(p: torch.Tensor, u: torch.Tensor) -> torch.LongTensor:
    """One draw from each (possibly unnormalised) distribution p [..., V]; u [...] in [0, 1).

    Inverse CDF accumulated in float64; `right=True` lands only on tokens of positive mass
    (cdf[i-1] <= u * total < cdf[i]). A small batch (at most `ONE_LEVEL_MAX` entries of p)
    builds the whole CDF; a larger one would spend most of its time on that [..., V] float64
    tensor, and is drawn in two levels instead (`_sample_two_level`): the same draw up to
    float64 rounding. A compiled pass always draws in two levels: there the block sums are one
    fused reduction, while a [..., V] float64 cumulative sum stays a separate, slow kernel.
    """
    if p.numel() > ONE_LEVEL_MAX or (torch.compiler.is_compiling() and p.shape[-1] > CDF_BLOCK):
        return _sample_two_level(p, u)           # compiled, its block sums fuse into one reduction
    cdf = p.cumsum(-1, dtype=torch.float64)                                     # [..., V]
    target = u.unsqueeze(-1) * cdf[..., -1:]                                    # [..., 1]
    return torch.searchsorted(cdf, target, right=True).clamp_(max=p.shape[-1] - 1).squeeze(-1)


def _sample_two_level(p: torch.Tensor, u: torch.Tensor) -> torch.LongTensor:
    """`sample` by a two-level float64 CDF: the cumulative mass of blocks of `CDF_BLOCK`
    tokens finds the block where u * total falls, then the cumulative mass inside that one
    block finds the token. One float64 sum per block and one CDF of `CDF_BLOCK` values per
    draw, never a [..., V] float64 tensor. The target inside the block is held below the
    block's own total, which rounding could otherwise reach (the two levels add the same
    masses in different orders)."""
    V, lead = p.shape[-1], p.shape[:-1]
    nb = -(-V // CDF_BLOCK)
    padded = F.pad(p, (0, nb * CDF_BLOCK - V)) if nb * CDF_BLOCK > V else p      # [..., nb * b]
    blocks = padded.reshape(-1, nb, CDF_BLOCK)                                    # [R, nb, b]
    block_cdf = F.pad(blocks.sum(-1, dtype=torch.float64), (1, 0)).cumsum_(-1)    # [R, nb + 1], 0 first
    target = u.reshape(-1, 1) * block_cdf[:, -1:]                                 # [R, 1]
    j = torch.searchsorted(block_cdf, target, right=True).sub_(1).clamp_(max=nb - 1)  # [R, 1] the block
    cdf = blocks[torch.arange(blocks.shape[0], device=p.device), j.squeeze(1)].cumsum(-1, dtype=torch.float64)  # [R, b]
    inside = torch.minimum(target - block_cdf.gather(1, j), cdf[:, -1:].nextafter(torch.zeros_like(target)))
    return (j * CDF_BLOCK + torch.searchsorted(cdf, inside, right=True)).reshape(lead)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) over the last dimension; p itself where that has no mass (p == q,
    where a draft from q is always accepted and the residual is never drawn)."""
    r = (p - q).clamp(min=0)                                                    # [..., V]
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > 0, r / mass, p)


def accept_prob(p: torch.Tensor, q: torch.Tensor, x: torch.LongTensor) -> torch.Tensor:
    """min(1, p(x) / q(x)) for tokens x [...] drawn from q [..., V]."""
    x = x.unsqueeze(-1)
    return accept_ratio(p.gather(-1, x), q.gather(-1, x)).squeeze(-1)


def accept_ratio(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """min(1, p(x) / q(x)) from the two masses (NaN where either is NaN)."""
    return (p_x / q_x).clamp(max=1.0)


def masses_at(p: torch.Tensor, q: torch.Tensor, x: torch.LongTensor,
              tested: torch.BoolTensor) -> tuple[torch.Tensor, torch.Tensor]:
    """p(x) and q(x) [...] of tokens x [...] drawn from q [..., V], NaN where not `tested` [...]
    (one gather of each law)."""
    x = x.unsqueeze(-1)
    both = torch.cat([p.gather(-1, x), q.gather(-1, x)], -1)                   # [..., 2]
    p_x, q_x = torch.where(tested.unsqueeze(-1), both, float("nan")).unbind(-1)
    return p_x, q_x


def residual_mass(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(0, p - q) [..., V], not normalised: the residual law of a rejected draft as
    `sample` draws from it (it takes unnormalised laws); p itself where that has no mass
    (p == q, where a draft from q is always accepted and the residual is never drawn)."""
    r = (p - q).clamp_(min=0)                                                   # [..., V]
    return torch.where(r.sum(-1, keepdim=True) > 0, r, p)


def resample(p: torch.Tensor, q: torch.Tensor, u: torch.Tensor) -> torch.LongTensor:
    """A draw from `residual(p, q)`: what MRS returns for a rejected draft (never a fresh
    draw from p, which would bias the result towards q)."""
    return sample(residual_mass(p, q), u)


def gumbel_argmax(p: torch.Tensor, g: torch.Tensor) -> torch.LongTensor:
    """argmax(log p + G) over the last dimension: a draw from p, given Gumbel(0, 1) noise G.

    Computed as argmax(p * exp(G)), the same order (exp is increasing) without the log of
    the many zeros that top-k leaves in p, which is slow on some CPUs."""
    return g.exp().mul_(p).argmax(-1)


def gumbel_argmax_on(p: torch.Tensor, support: torch.LongTensor, keys: torch.LongTensor,
                     positions: torch.LongTensor) -> torch.LongTensor:
    """`gumbel_argmax(p, gumbel_noise(keys, positions, V))` [B, S] in law, for p [B, S, V] of
    top-k: mass at the k tokens `support` [B, S, K] and, where logits tie at the k-th, at tied
    tokens outside it, all of one mass (`sampling.top_k_probs`). keys [B, 1], positions [B, S].

    The noise is hashed at the K tokens alone, a fixed shape: without such tied tokens the draw
    is the dense draw's token (a token of zero mass scores 0 and never wins; ties go to the lowest
    token, as `argmax`'s do). The r tied tokens outside the support have one mass, so the largest
    of their r Gumbel variables is one Gumbel variable plus log r, at a token uniform among them:
    both are drawn from the position's own stream (`tied_outside`), the same at every pass."""
    V = p.shape[-1]
    score = gumbel_noise(keys, positions, V, tokens=support).exp_().mul_(p.gather(-1, support))   # [B, S, K]
    best = score.amax(-1, keepdim=True)
    on_support = torch.where(score == best, support, V).amin(-1)                                    # [B, S]
    outside, outside_score = tied_outside(p, support, keys, positions)
    return torch.where(outside_score > best.squeeze(-1), outside, on_support)


TIES_STREAM = 1 << 30   # the sub-stream (`stream_keys`) of the draws among tied tokens outside a support


def tied_outside(p: torch.Tensor, support: torch.LongTensor, keys: torch.LongTensor,
                 positions: torch.LongTensor) -> tuple[torch.LongTensor, torch.Tensor]:
    """The best of the r tokens p [B, S, V] has mass on outside `support` [B, S, K] (all of one
    mass m): a token [B, S] uniform among them and its score m * exp(G + log r) [B, S], G a
    Gumbel variable (score 0 where r = 0). Both numbers are hashed from (row key, position)."""
    outside = (p > 0).scatter(-1, support, False)                                              # [B, S, V]
    r = outside.sum(-1)                                                                        # [B, S]
    u = uniforms(stream_keys(keys, TIES_STREAM).unsqueeze(-1),
                 positions.unsqueeze(-1) * 2 + torch.arange(2, device=p.device))                       # [B, S, 2]
    token = sample(outside.float(), u[..., 0]).clamp_(max=p.shape[-1] - 1)                     # [B, S] uniform among them
    exp_g = -1.0 / u[..., 1].log()                                                             # exp(G), G = -log(-log u)
    score = (p.gather(-1, token.unsqueeze(-1)).squeeze(-1) * r * exp_g).float()
    return token, torch.where(r > 0, score, 0.0)


# ------------------------------------------------------------------- draft-tree samplers

def without(q: torch.Tensor, tokens: torch.LongTensor) -> torch.Tensor:
    """q [..., V] with the tokens [..., j] (-1: none) removed and the rest renormalised: the law
    of a draw from q without replacement after them (all zero where nothing is left)."""
    taken = torch.zeros_like(q, dtype=torch.bool).scatter_(-1, tokens.clamp(min=0), tokens >= 0)
    kept = q.masked_fill(taken, 0.0)
    mass = kept.sum(-1, keepdim=True)
    return torch.where(mass > 0, kept / mass.clamp(min=torch.finfo(q.dtype).tiny), 0.0)


def sample_siblings(q: torch.Tensor, first: torch.LongTensor, u: torch.Tensor) -> torch.LongTensor:
    """[..., k] candidates for one position: `first` [...] (a draw from q [..., V]), then k - 1
    draws from q without replacement (u [..., k - 1]), each from q without the earlier ones;
    -1 once q has no mass left (fewer than k tokens possible)."""
    out = [first]
    for i in range(u.shape[-1]):
        rest = without(q, torch.stack(out, -1))
        draw = sample(rest, u[..., i])
        out.append(torch.where(rest.sum(-1) > 0, draw, -1))
    return torch.stack(out, -1)


def gumbel_siblings(q: torch.Tensor, first: torch.LongTensor, g: torch.Tensor, k: int) -> torch.LongTensor:
    """[..., k] candidates for one position: `first` [...], then the k - 1 tokens of largest
    log q + G (G [..., V] the position's Gumbel noise) among the others: with `first` the
    argmax, the top-k of log q + G, a sample of k without replacement from q; -1 where q has
    no mass left. Computed on q * exp(G), the same order (as `gumbel_argmax`)."""
    score = (q * g.exp()).scatter(-1, first.clamp(min=0).unsqueeze(-1), -1.0)  # [..., V]
    top = score.topk(k - 1, dim=-1)                                            # sorted: largest first
    return torch.cat([first.unsqueeze(-1), torch.where(top.values > 0, top.indices, -1)], -1)


def recursive_rejection(p: torch.Tensor, q: torch.Tensor, candidates: torch.LongTensor,
                        u: torch.Tensor) -> tuple[torch.BoolTensor, torch.Tensor, torch.Tensor]:
    """Recursive rejection sampling of candidates [..., k] drawn from q [..., V] without
    replacement (-1: none), towards p [..., V], with uniforms u [..., k].

    Candidate i is tested against p_i with q_i = q without the earlier candidates,
    renormalised: it passes if u_i < min(1, p_i(c_i) / q_i(c_i)); p_1 = p and
    p_{i+1} = norm(max(0, p_i - q_i)). The first candidate that passes is a draw from p; if
    none does, `resample(p_last, q_last, u)` is one (the residual after the last candidate).
    Every candidate is tested as if the earlier ones had failed, so `passed` [..., k] is
    defined for all; a caller takes the first. Returns (passed, p_last, q_last)."""
    passed = []
    p_i, q_i = p, q
    p_last, q_last = p, q
    for i in range(candidates.shape[-1]):
        c = candidates[..., i]
        valid = c >= 0
        alpha = accept_prob(p_i, q_i, c.clamp(min=0))
        passed.append(valid & (u[..., i] < alpha))
        tested = valid.unsqueeze(-1)
        p_last, q_last = torch.where(tested, p_i, p_last), torch.where(tested, q_i, q_last)
        if i + 1 < candidates.shape[-1]:
            p_i = torch.where(tested, residual(p_i, q_i), p_i)
            q_i = torch.where(tested, without(q, candidates[..., : i + 1]), q_i)
    return torch.stack(passed, -1), p_last, q_last


# --------------------------------------------------------- counter-based random numbers

def _mix32(h: torch.Tensor) -> torch.Tensor:
    """A 32-bit avalanche hash (two xorshift-multiply rounds, the constants of the
    hash-prospector `lowbias32` family) of int64 tensors. The multipliers are odd and below
    2**31, so products of 32-bit values never overflow int64; each round is a bijection."""
    return _mix32_(h & _MASK32)


def _mix32_(h: torch.Tensor) -> torch.Tensor:
    """`_mix32` of h [...] already in [0, 2**32), in place."""
    for shift, multiplier in ((16, 0x21F0AAAD), (15, 0x735A2D97)):
        h ^= h >> shift
        h *= multiplier
        h &= _MASK32
    h ^= h >> 15
    return h


def row_keys(seeds: torch.LongTensor) -> torch.LongTensor:
    """A 32-bit key per row [B] from its seed in [0, 2**63): all of the row's randomness
    derives from it."""
    low, high = seeds & _MASK32, seeds >> 32
    return _mix32(_mix32(low ^ 0x1B873593) ^ high)


def uniforms(keys: torch.LongTensor, counters: torch.LongTensor) -> torch.Tensor:
    """Uniform float64 numbers in (0, 1), one per (key, counter): keys [B, 1] and counters
    [B, S] in [0, 2**32) broadcast. Each is one of 2**32 equally spaced values, a grid far
    finer than the float32 probabilities it is compared with or sampled from.

    The counter is spread by an odd multiplier (a bijection) and hashed with the key."""
    h = _mix32(keys ^ (counters * 0x61C88647))
    return (h.double() + 0.5) * 2.0 ** -32


def stream_keys(keys: torch.LongTensor, stream: int) -> torch.LongTensor:
    """The key of a row's sub-stream number `stream` (>= 1) from its key [B, 1]: numbers drawn
    with it never coincide with the row's own stream's, whatever the counters."""
    return _mix32(keys ^ _mix32(torch.full_like(keys, stream) * 0x7FEB352D))


@functools.lru_cache(maxsize=8)
def _token_keys(vocab: int, device: torch.device) -> torch.Tensor:
    """A 32-bit key per token [V]: a constant of the vocabulary, computed once."""
    return _mix32(torch.arange(vocab, device=device) ^ 0x5BD1E995)


def gumbel_noise(keys: torch.LongTensor, positions: torch.LongTensor, vocab: int,
                 tokens: torch.LongTensor | None = None) -> torch.Tensor:
    """Gumbel(0, 1) noise [B, S, V] fixed per (row key, absolute position, token); with
    `tokens` [B, S, K], the noise of those tokens alone [B, S, K] (the same values).

    keys [B, 1] and positions [B, S] broadcast. Each entry is a 24-bit uniform (the resolution
    of float32, in which p is computed) from a hash: the same position always gets the same
    noise, and no table is stored.
    """
    position_key = _mix32(keys ^ (positions * 0x632BE5AB))                       # [B, S]
    token_keys = _token_keys(vocab, positions.device)                            # [V]
    if tokens is not None:
        token_keys = token_keys[tokens]                                          # [B, S, K]
    h = _mix32_(position_key.unsqueeze(-1) ^ token_keys)                         # [B, S, V or K]: both keys 32-bit
    return uniforms24(h.__irshift__(8)).log_().neg_().log_().neg_()             # -log(-log u)


def uniforms24(top: torch.LongTensor) -> torch.Tensor:
    """Float32 uniforms in (0, 1) from the top 24 bits `top` = h >> 8 of 32-bit hashes h (bucket
    centres). The top bucket's centre, 1 - 2**-25, rounds to 1.0 in float32 (its Gumbel noise
    would be +inf and take its token whatever p, p = 0 included): it is held at the largest
    float below 1."""
    return top.float().add_(0.5).mul_(1.0 / 16777216.0).clamp_(max=1.0 - 2.0 ** -24)
