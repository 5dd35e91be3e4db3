"""The samplers the engine calls: hand-built verification cases, coupling bounds, exact
marginals, and the counter-based random numbers."""
from __future__ import annotations

import torch
from scipy import stats

from scd_core import coupling
from stats_util import chi_square_pvalue

ALPHA = 1e-4 / 10


def mrs(p, q, x, u_accept, u_residual):
    """Modified rejection sampling of x ~ q towards p from the primitives the pass draws with:
    (kept, token, accept_prob), the token x where u_accept < min(1, p(x)/q(x)), else a draw
    from the residual."""
    alpha = coupling.accept_prob(p, q, x)
    kept = u_accept < alpha
    return kept, torch.where(kept, x, coupling.sample(coupling.residual_mass(p, q), u_residual)), alpha


def _tv(p: torch.Tensor, q: torch.Tensor) -> float:
    return 0.5 * (p - q).abs().sum().item()


def _pair(V: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(V, generator=g) * 1.5).softmax(-1), (torch.randn(V, generator=g) * 1.5).softmax(-1)


def _u(*shape: int, seed: int) -> torch.Tensor:
    """Uniforms from the engine's own counter-based streams."""
    keys = coupling.row_keys(torch.tensor([seed]))
    n = 1
    for s in shape:
        n *= s
    return coupling.uniforms(keys.unsqueeze(1), torch.arange(n).unsqueeze(0)).view(*shape)


def test_hand_built_accept_accept_reject_to_the_residual_only_token():
    """vocab 10, drafts [1, 4, 5] from uniform q: p certain of 1, then of 4, then of 8, so
    the verification accepts, accepts, rejects, and the residual's only token is 8."""
    V = 10
    p = torch.zeros(3, V)
    p[0, 1], p[1, 4], p[2, 8] = 1.0, 1.0, 1.0
    q = torch.full((3, V), 1.0 / V)
    kept, tokens, alpha = mrs(p, q, torch.tensor([1, 4, 5]), _u(3, seed=0), _u(3, seed=1))
    assert kept.tolist() == [True, True, False]
    assert tokens.tolist() == [1, 4, 8]
    assert alpha.tolist() == [1.0, 1.0, 0.0]


def test_accept_is_exactly_u_below_p_over_q():
    p, q = torch.tensor([[0.2, 0.8]]), torch.tensor([[0.5, 0.5]])
    x = torch.tensor([0])                                       # min(1, 0.2 / 0.5) = 0.4
    alpha = coupling.accept_prob(p, q, x).item()
    assert alpha == torch.tensor(0.4).item()
    for u, expect in ((alpha - 1e-9, True), (alpha, False), (alpha + 1e-9, False)):
        kept, _, _ = mrs(p, q, x, torch.tensor([u], dtype=torch.float64), torch.tensor([0.5]))
        assert bool(kept) == expect


def test_sample_is_inverse_cdf_and_skips_zero_mass():
    p = torch.tensor([0.25, 0.0, 0.5, 0.25])
    u = torch.tensor([0.0, 0.2499, 0.25, 0.7499, 0.75, 0.9999999], dtype=torch.float64)
    assert coupling.sample(p.expand(6, -1), u).tolist() == [0, 0, 2, 2, 3, 3]


def test_one_hot_q_accepts_with_probability_p_of_the_draft():
    n = 40_000
    p = torch.tensor([0.25, 0.5, 0.25]).expand(n, 3)
    q = torch.zeros(n, 3)
    q[:, 1] = 1.0
    kept, tokens, _ = mrs(p, q, torch.ones(n, dtype=torch.long), _u(n, seed=2), _u(n, seed=3))
    assert abs(kept.float().mean().item() - 0.5) < 0.01
    assert chi_square_pvalue(tokens, p[0]) > ALPHA


def test_maximal_coupling_collides_with_probability_one_minus_tv_and_keeps_p():
    p, q = _pair()
    n = 200_000
    x = coupling.sample(q.expand(n, -1), _u(n, seed=4))
    kept, y, _ = mrs(p.expand(n, -1), q.expand(n, -1), x, _u(n, seed=5), _u(n, seed=6))
    collision = (y == x).float().mean().item()
    se = (collision * (1 - collision) / n) ** 0.5
    assert abs(collision - (1 - _tv(p, q))) < 5 * se
    assert chi_square_pvalue(y, p) > ALPHA
    assert chi_square_pvalue(x, q) > ALPHA


def test_gumbel_coupling_meets_its_bound_and_keeps_both_marginals():
    p, q = _pair(seed=3)
    n, V = 100_000, p.numel()
    keys = coupling.row_keys(torch.tensor([7])).unsqueeze(1)
    g = coupling.gumbel_noise(keys, torch.arange(n).unsqueeze(0), V)[0]       # [n, V]
    x, y = coupling.gumbel_argmax(q.expand(n, -1), g), coupling.gumbel_argmax(p.expand(n, -1), g)
    collision = (x == y).float().mean().item()
    tv = _tv(p, q)
    exact = sum(1.0 / torch.maximum(p / p[i], q / q[i]).sum().item() for i in range(V))
    se = (collision * (1 - collision) / n) ** 0.5
    assert abs(collision - exact) < 5 * se
    assert collision > (1 - tv) / (1 + tv)
    assert chi_square_pvalue(y, p) > ALPHA and chi_square_pvalue(x, q) > ALPHA


def test_gumbel_noise_is_fixed_per_position_and_distinct_across_positions_and_seeds():
    keys = coupling.row_keys(torch.tensor([1, 2])).unsqueeze(1)
    pos = torch.arange(5).expand(2, -1)
    a = coupling.gumbel_noise(keys, pos, 16)
    assert torch.equal(a, coupling.gumbel_noise(keys, pos, 16))
    assert torch.equal(a[:, 2:], coupling.gumbel_noise(keys, pos[:, 2:], 16))   # same position, same noise
    assert not torch.allclose(a[0], a[1])                                         # other seed
    assert len(set(a[0].flatten().tolist())) == a[0].numel()


def test_gumbel_noise_is_standard_gumbel():
    keys = coupling.row_keys(torch.tensor([5])).unsqueeze(1)
    g = coupling.gumbel_noise(keys, torch.arange(2000).unsqueeze(0), 64).flatten().double()
    assert stats.kstest(g.numpy(), stats.gumbel_r.cdf).pvalue > ALPHA


def test_uniforms_are_uniform_independent_and_keyed_by_seed_alone():
    keys = coupling.row_keys(torch.tensor([3, 2**40 + 3, 3])).unsqueeze(1)
    u = coupling.uniforms(keys, torch.arange(50_000).unsqueeze(0))              # [3, 50000]
    assert torch.equal(u[0], u[2]) and not torch.equal(u[0], u[1])             # the seed's high bits count
    assert ((u >= 0) & (u < 1)).all()
    assert stats.kstest(u[0].numpy(), stats.uniform.cdf).pvalue > ALPHA
    pairs = (u[0, :-1] * 8).long() * 8 + (u[0, 1:] * 8).long()                  # consecutive counters
    assert chi_square_pvalue(pairs, torch.full((64,), 1 / 64)) > ALPHA
    assert (u[0] * 2**53).frac().eq(0).all() and len(set(u[0].tolist())) == u.shape[1]


def test_residual_of_equal_laws_falls_back_to_p():
    p = torch.tensor([0.2, 0.3, 0.5])
    assert torch.equal(coupling.residual(p, p), p)
    assert torch.allclose(coupling.residual(p, torch.tensor([0.4, 0.3, 0.3])), torch.tensor([0.0, 0.0, 1.0]))


def test_gumbel_noise_is_finite_even_at_the_top_hash_bucket():
    """The 24-bit uniform's top bucket, (2**24 - 0.5) / 2**24, rounds to 1.0 in float32 and
    would give G = +inf, which picks its token whatever p (even p = 0): the uniforms stay
    below 1, so the noise of every hash is finite."""
    import torch
    from scd_core import coupling

    h = torch.tensor([0, 2 ** 31, 2 ** 32 - 257, 2 ** 32 - 1], dtype=torch.long)
    u = coupling.uniforms24(h >> 8)
    assert bool((u > 0).all() and (u < 1).all())
    assert torch.isfinite(-(-u.log()).log()).all()
    assert float(u[-1]) > float(u[-2])                      # the top bucket still ranks above the next


def _blocky_law(V: int = 3 * coupling.CDF_BLOCK + 17, seed: int = 0) -> torch.Tensor:
    """A law over several CDF blocks and a partial last one, with a block of zero mass and
    scattered zero-mass tokens (the shapes top-k and residuals give)."""
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(V, generator=g) ** 3
    p[coupling.CDF_BLOCK: 2 * coupling.CDF_BLOCK] = 0.0                         # a whole block empty
    p[torch.rand(V, generator=g) < 0.3] = 0.0
    return p / p.sum()


def _grid_counts(sampler, p: torch.Tensor, M: int = 2**16) -> torch.Tensor:
    """Tokens counted over u on an even grid of M points: for an exact inverse CDF each
    token gets M * p(token) points, within one (its interval's length on the grid)."""
    u = (torch.arange(M, dtype=torch.float64) + 0.5) / M
    return torch.bincount(sampler(p.expand(M, -1), u), minlength=p.numel()).double()


def test_sample_over_blocks_is_the_exact_inverse_cdf():
    """The two-level CDF (block masses, then one block), which `sample` uses for large
    batches, gives each token its exact share of an even u grid, never a token of zero mass,
    and the same tokens as the one-level float64 CDF on random laws (also unnormalised, and
    rows of different laws at once), at either batch size."""
    for seed in range(3):
        p = _blocky_law(seed=seed)
        counts = _grid_counts(coupling.sample, p)
        assert (counts[p == 0] == 0).all()
        assert ((counts - 2**16 * p.double()).abs() <= 1 + 1e-6).all()
    laws = torch.stack([_blocky_law(seed=s) * (s + 1) for s in range(4)]).repeat(700, 1)   # [2800, V]
    u = _u(laws.shape[0], seed=9)
    cdf = laws.cumsum(-1, dtype=torch.float64)
    reference = torch.searchsorted(cdf, (u.unsqueeze(-1) * cdf[:, -1:]), right=True).squeeze(-1)
    assert laws.numel() > coupling.ONE_LEVEL_MAX >= laws[:8].numel()          # both of sample's paths
    assert torch.equal(coupling.sample(laws, u), reference)
    assert torch.equal(coupling.sample(laws[:8], u[:8]), reference[:8])
    assert torch.equal(coupling._sample_two_level(laws[:8], u[:8]), reference[:8])
    assert coupling.sample(laws[0], u[0]).shape == ()                          # any leading shape
    assert torch.equal(coupling.sample(laws.view(4, 700, -1), u.view(4, 700)), reference.view(4, 700))


def test_sample_over_blocks_catches_a_biased_variant():
    """The grid test above fails for a two-level sampler that reuses u's position for the
    block and again inside it (the second level must continue the first's target)."""
    def reused_u(p, u):
        V, b = p.shape[-1], coupling.CDF_BLOCK
        nb = -(-V // b)
        blocks = torch.nn.functional.pad(p, (0, nb * b - V)).reshape(-1, nb, b)
        mass = blocks.sum(-1, dtype=torch.float64)
        cdf = mass.cumsum(-1)
        j = torch.searchsorted(cdf, u.unsqueeze(-1) * cdf[:, -1:], right=True).clamp(max=nb - 1)
        inside = blocks[torch.arange(blocks.shape[0]), j.squeeze(1)].cumsum(-1, dtype=torch.float64)
        i = torch.searchsorted(inside, u.unsqueeze(-1) * inside[:, -1:], right=True).clamp(max=b - 1)
        return (j * b + i).squeeze(-1)

    p = _blocky_law()
    assert ((_grid_counts(reused_u, p) - 2**16 * p.double()).abs() > 1 + 1e-6).any()


def test_sample_holds_a_target_at_the_block_total_on_positive_mass():
    """The block masses and the CDF inside a block add the same masses in different orders:
    a mass of 1 followed by 63 masses of 2**-54 sums to more than 1 by blocks, while the
    running CDF inside the block stays at 1.0. A target between the two (u just below 1)
    takes the block's last token of positive mass instead of running past the block."""
    b = coupling.CDF_BLOCK
    p = torch.full((2 * b,), 2.0 ** -54)
    p[b] = 1.0
    p[:b] = 0.0                                                                   # the first block empty
    assert p[b:].sum(dtype=torch.float64) > p[b:].cumsum(-1, dtype=torch.float64)[-1]
    u = torch.tensor([1 - 2.0 ** -52, 0.0, 0.5], dtype=torch.float64)
    drawn = coupling._sample_two_level(p.expand(3, -1), u)
    assert drawn.tolist() == [b, b, b] and bool((p[drawn] > 0).all())


def test_resample_draws_from_the_unnormalised_residual_as_from_the_residual():
    """resample draws from max(0, p - q) without normalising it: the same law as
    `sample(residual(p, q), u)`, exactly on an even u grid, and p itself where p == q."""
    p, q = _blocky_law(seed=1), _blocky_law(seed=2)
    for a, b in ((p, q), (q, p), (p, p)):
        got = _grid_counts(lambda x, u: coupling.resample(x, b.expand_as(x), u), a)
        want = _grid_counts(coupling.sample, coupling.residual(a, b))
        assert ((got - want).abs() <= 2).all() and (got[coupling.residual(a, b) == 0] == 0).all()


def _keyed_case(R: int, V: int, top_k: int, seed: int):
    """Rows [R, 1, V] of p under top-k, the k tokens kept [R, 1, k], keys [R, 1], positions [R, 1]."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(R, 1, V, generator=g) * 3
    support = logits.topk(top_k, dim=-1, sorted=False).indices
    p = torch.zeros_like(logits).scatter_(-1, support, logits.gather(-1, support).softmax(-1))
    keys = coupling.row_keys(torch.arange(R) + 100 * seed).unsqueeze(1)
    return p, support, keys, torch.randint(0, 4096, (R, 1), generator=g)


def _dense_gumbel(p, keys, positions):
    return coupling.gumbel_argmax(p, coupling.gumbel_noise(keys, positions, p.shape[-1]))


def test_gumbel_on_the_support_is_the_dense_draw_token_for_token():
    """Hashing the noise at top-k's tokens only gives the dense argmax(log p + G) exactly, so
    the coupling across passes is the same whichever is drawn."""
    for R, V, top_k, seed in ((300, 2048, 100, 0), (40, 16384, 1000, 1), (300, 64, 63, 2), (50, 200, 1, 3)):
        p, support, keys, positions = _keyed_case(R, V, top_k, seed)
        assert torch.equal(coupling.gumbel_argmax_on(p, support, keys, positions), _dense_gumbel(p, keys, positions))


def test_gumbel_on_the_support_breaks_ties_as_argmax():
    """Equal scores (equal p under one shared noise value for every token) go to the lowest
    token, as the dense argmax's do, whatever the order of the support."""
    import unittest.mock

    p = torch.tensor([[[0.0, 0.25, 0.25, 0.5, 0.0]], [[0.5, 0.0, 0.0, 0.0, 0.5]]])
    support = torch.tensor([[[3, 2, 1]], [[4, 2, 0]]])
    keys, positions = coupling.row_keys(torch.tensor([1, 2])).unsqueeze(1), torch.tensor([[3], [4]])
    with unittest.mock.patch.object(coupling, "_token_keys", lambda V, device: torch.zeros(V, dtype=torch.long)):
        dense, keyed = _dense_gumbel(p, keys, positions), coupling.gumbel_argmax_on(p, support, keys, positions)
    assert dense.tolist() == keyed.tolist() == [[3], [0]]


def test_support_gumbel_equality_catches_noise_keyed_by_support_rank():
    """A variant that keys each support token's noise by its rank in the support (still an
    exact draw from p, but the noise of a token moves when the support changes, which breaks
    the coupling across passes) fails the token-for-token comparison above."""
    def by_rank(p, support, keys, positions):
        g = coupling.gumbel_noise(keys, positions, p.shape[-1])[..., : support.shape[-1]]   # noise of ranks 0 .. k-1
        score = g.exp() * p.gather(-1, support)
        return support.gather(-1, score.argmax(-1, keepdim=True)).squeeze(-1)

    p, support, keys, positions = _keyed_case(300, 2048, 100, 0)
    assert not torch.equal(by_rank(p, support, keys, positions), _dense_gumbel(p, keys, positions))


def test_gumbel_on_the_support_draws_p_where_tokens_tie_outside_it(monkeypatch):
    """Logits [3, 2, 1, 1, 1, 0] under top-k 3: three tokens tie at the 3rd largest, two of them
    outside torch.topk's pick. The draw on the support (their largest Gumbel variable drawn as
    one) follows p over 40,000 positions; a draw blind to them does not."""
    from scd_core.sampling import SamplingConfig, probs_and_support

    R = 40_000
    logits = torch.tensor([3.0, 2.0, 1.0, 1.0, 1.0, 0.0]).expand(R, 1, 6)
    p, support = probs_and_support(logits, SamplingConfig(1.0, 3, 1.0))
    assert (p[0, 0] > 0).sum() == 5 and support.shape[-1] == 3
    keys = coupling.row_keys(torch.arange(R) + 10_000).unsqueeze(1)
    positions = torch.arange(R).unsqueeze(1) % 4096
    draws = coupling.gumbel_argmax_on(p, support, keys, positions).flatten()
    assert chi_square_pvalue(draws, p[0, 0]) > 1e-4
    monkeypatch.setattr(coupling, "tied_outside", lambda p, s, k, pos: (
        torch.zeros(p.shape[:-1], dtype=torch.long), torch.zeros(p.shape[:-1])))
    assert chi_square_pvalue(coupling.gumbel_argmax_on(p, support, keys, positions).flatten(), p[0, 0]) < 1e-10
