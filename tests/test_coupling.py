"""The samplers: hand-built verification cases, coupling bounds, exact marginals."""
from __future__ import annotations

import torch
from scipy import stats

from scd_core import coupling
from stats_util import chi_square_pvalue

ALPHA = 1e-4 / 8


def _tv(p: torch.Tensor, q: torch.Tensor) -> float:
    return 0.5 * (p - q).abs().sum().item()


def _pair(V: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(V, generator=g) * 1.5).softmax(-1), (torch.randn(V, generator=g) * 1.5).softmax(-1)


def test_hand_built_accept_accept_reject_to_the_residual_only_token():
    """transformers-style: vocab 10, drafts [1, 4, 5]; forced accept, accept, reject -> 8."""
    V = 10
    p = torch.full((3, V), 0.0)
    p[0, 1] = 1.0                       # draft 1 certain under p: forced accept
    p[1, 4] = 1.0                       # draft 4 certain: accept
    p[2, 8] = 1.0                       # draft 5 impossible under p: reject; residual is {8}
    q = torch.full((3, V), 1.0 / V)     # uniform random-init drafts
    drafts = torch.tensor([1, 4, 5])
    kept, tokens, accept_prob = coupling.mrs(p, q, drafts, torch.Generator().manual_seed(0))
    assert kept.tolist() == [True, True, False]
    assert tokens.tolist() == [1, 4, 8]
    assert accept_prob.tolist() == [1.0, 1.0, 0.0]


def test_one_hot_q_accepts_with_probability_p_of_the_draft():
    p = torch.tensor([0.25, 0.5, 0.25]).expand(40_000, 3)
    q = torch.zeros(40_000, 3)
    q[:, 1] = 1.0
    kept, tokens, _ = coupling.mrs(p, q, torch.ones(40_000, dtype=torch.long), torch.Generator().manual_seed(1))
    assert abs(kept.float().mean().item() - 0.5) < 0.01
    assert chi_square_pvalue(tokens, p[0]) > ALPHA


def test_maximal_coupling_collides_with_probability_one_minus_tv_and_keeps_p():
    p, q = _pair()
    n = 200_000
    g = torch.Generator().manual_seed(2)
    x = coupling.sample(q.expand(n, -1), g)
    kept, y, _ = coupling.mrs(p.expand(n, -1), q.expand(n, -1), x, g)
    collision = (y == x).float().mean().item()
    se = (collision * (1 - collision) / n) ** 0.5
    assert abs(collision - (1 - _tv(p, q))) < 5 * se
    assert chi_square_pvalue(y, p) > ALPHA
    assert chi_square_pvalue(x, q) > ALPHA


def test_gumbel_coupling_meets_its_bound_and_keeps_both_marginals():
    p, q = _pair(seed=3)
    n, V = 100_000, p.numel()
    noise = coupling.gumbel_noise(7, torch.zeros(1, dtype=torch.long), torch.arange(n), V)   # [n, V]
    x, y = coupling.gumbel_argmax(q.expand(n, -1), noise), coupling.gumbel_argmax(p.expand(n, -1), noise)
    collision = (x == y).float().mean().item()
    tv = _tv(p, q)
    exact = sum(1.0 / torch.maximum(p / p[i], q / q[i]).sum().item() for i in range(V))
    se = (collision * (1 - collision) / n) ** 0.5
    assert abs(collision - exact) < 5 * se
    assert collision > (1 - tv) / (1 + tv)
    assert chi_square_pvalue(y, p) > ALPHA and chi_square_pvalue(x, q) > ALPHA


def test_gumbel_noise_is_fixed_per_position_and_distinct_across_positions_rows_seeds():
    rows, pos = torch.tensor([[0], [1]]), torch.arange(5).expand(2, -1)
    a = coupling.gumbel_noise(1, rows, pos, 16)
    assert torch.equal(a, coupling.gumbel_noise(1, rows, pos, 16))
    assert torch.equal(a[:, 2:], coupling.gumbel_noise(1, rows, pos[:, 2:], 16))   # same position, same noise
    assert not torch.allclose(a[0], a[1])
    assert not torch.allclose(a, coupling.gumbel_noise(2, rows, pos, 16))
    assert len(set(a[0].flatten().tolist())) == a[0].numel()


def test_gumbel_noise_is_standard_gumbel():
    g = coupling.gumbel_noise(5, torch.tensor(0), torch.arange(2000), 64).flatten().double()
    assert stats.kstest(g.numpy(), stats.gumbel_r.cdf).pvalue > ALPHA


def test_residual_of_equal_laws_falls_back_to_p():
    p = torch.tensor([0.2, 0.3, 0.5])
    assert torch.equal(coupling.residual(p, p), p)
    assert torch.allclose(coupling.residual(p, torch.tensor([0.4, 0.3, 0.3])), torch.tensor([0.0, 0.0, 1.0]))
