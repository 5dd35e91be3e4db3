"""Lossless, shown: a speculative method draws from exactly AR's distribution; it does not
reproduce AR's image.

`compare` decodes S samples with AR and S with a method, from disjoint seeds (AR from seed,
the method from seed + SPACING, so that no pair of samples shares its random numbers), and
counts which token each sample put at a few positions: those where the samples, pooled, vary
most (`informative_positions`; where nearly every sample puts the same token there is nothing to
tell apart). At each position a chi-square two-sample test (`chi_square_two_sample`) asks
whether the two sets of counts could come from one distribution: its p-value is the chance of
counts at least this different if they do; `detectable_shift` says how large a change the test
would catch at the samples' size (its power). Equal distributions give p-values spread evenly between 0 and 1 (below 0.05 one time in
twenty by chance); a method that changed the distribution gives p-values near 0 once S is
large enough. In greedy mode (temperature 0) there is no randomness: the method must return
AR's tokens exactly, and `compare` checks that too.
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable

import torch

import scd_core
from scd_core import memory
from scd_core.settings import Settings

SPACING = 1_000_000          # the method's seeds start this far after AR's
MIN_EXPECTED = 5.0           # a chi-square bin needs this many expected samples in each set


@dataclass(frozen=True)
class ChiSquare:
    """A two-sample chi-square test over token bins: the statistic, its degrees of freedom
    (bins - 1) and the p-value; `bins` are the token values compared, -1 the bin that pools
    the tokens too rare to test alone."""

    statistic: float
    dof: int
    p_value: float
    bins: tuple[int, ...]
    counts_a: tuple[int, ...]
    counts_b: tuple[int, ...]


def chi_square_two_sample(a: Sequence[int], b: Sequence[int],
                          min_expected: float = MIN_EXPECTED) -> ChiSquare:
    """Test whether counts `a` and `b` over the same categories (a[v], b[v]: how many samples
    of each set took value v) come from one distribution (Pearson's chi-square on the 2 x k
    table). Categories whose expected count would fall below `min_expected` in either set are
    pooled into one bin (rarest first) so that the chi-square approximation holds."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"a and b must be counts over the same categories, got shapes "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    if bool((a < 0).any() or (b < 0).any()):
        raise ValueError("a and b must be counts (no negative values)")
    na, nb = float(a.sum()), float(b.sum())
    if na == 0 or nb == 0:
        raise ValueError("a and b must each count at least one sample")
    bins = token_groups(a + b, min(na, nb) / (na + nb), min_expected)
    oa = torch.tensor([float(a[list(g)].sum()) for g in bins], dtype=torch.float64)
    ob = torch.tensor([float(b[list(g)].sum()) for g in bins], dtype=torch.float64)
    labels = tuple(g[0] if len(g) == 1 else -1 for g in bins)
    if len(bins) < 2:
        return ChiSquare(0.0, 0, 1.0, labels, tuple(int(x) for x in oa), tuple(int(x) for x in ob))
    total = oa + ob
    ea, eb = total * na / (na + nb), total * nb / (na + nb)
    statistic = float(((oa - ea) ** 2 / ea).sum() + ((ob - eb) ** 2 / eb).sum())
    dof = len(bins) - 1
    p = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                      torch.tensor(statistic / 2, dtype=torch.float64)))
    return ChiSquare(statistic, dof, p, labels, tuple(int(x) for x in oa), tuple(int(x) for x in ob))


def token_groups(pooled: torch.Tensor, share: float, min_expected: float = MIN_EXPECTED) -> list[tuple[int, ...]]:
    """The token groups a test compares, from the pooled counts alone: each token expected at
    least `min_expected` times in the smaller set (`share` of the pooled samples) alone, the rest
    pooled into one group (rarest last), or joined to the smallest group when too few even pooled."""
    order = [int(v) for v in torch.argsort(pooled, descending=True, stable=True) if pooled[v] > 0]
    kept = [v for v in order if float(pooled[v]) * share >= min_expected]
    rare = [v for v in order if v not in set(kept)]
    bins = [(v,) for v in kept]
    if rare:
        if sum(float(pooled[v]) for v in rare) * share >= min_expected or not bins:
            bins.append(tuple(rare))
        else:                                            # too few even pooled: join the smallest kept bin
            bins[-1] = bins[-1] + tuple(rare)
    return bins


def counts_at(tokens: torch.LongTensor, position: int, vocab_size: int) -> torch.LongTensor:
    """[V] how many of the samples `tokens` [S, N] have each token value at `position`."""
    return torch.bincount(tokens[:, position].cpu(), minlength=vocab_size)


def spread_positions(num_tokens: int, count: int = 4) -> list[int]:
    """`count` positions spread over the grid, the first and the last included."""
    return sorted({round(i * (num_tokens - 1) / max(1, count - 1)) for i in range(count)})


def informative_positions(a: torch.LongTensor, b: torch.LongTensor, count: int = 4,
                          min_expected: float = MIN_EXPECTED) -> list[int]:
    """The `count` positions where the samples `a` [S, N] and `b` [S', N], pooled, vary most as
    the test sees them (the entropy of the pooled samples over the token groups the test would
    compare there, `token_groups`; the earlier position on a tie), in order: where the law has
    entropy a test can see, so that it can tell two laws apart (a position of many tokens each
    too rare to test alone is one group: nothing to tell). Chosen from the pooled samples only,
    which are the same whichever sample came from which method: if both draw from one law, the
    choice leaves each test's chance of a small p-value as it is."""
    pooled = torch.cat([a, b]).cpu()
    share = min(a.shape[0], b.shape[0]) / pooled.shape[0]
    entropy = []
    for position in range(pooled.shape[1]):
        counts = torch.bincount(pooled[:, position])
        totals = torch.tensor([float(counts[list(g)].sum()) for g in token_groups(counts, share, min_expected)],
                              dtype=torch.float64) / pooled.shape[0]
        entropy.append(float(-(totals * totals.log()).sum()))
    order = sorted(range(len(entropy)), key=lambda i: (-entropy[i], i))
    return sorted(order[:count])


def chi_square_survival(x: float, dof: int, noncentrality: float = 0.0) -> float:
    """P(X > x) for X chi-square with `dof` degrees of freedom, noncentral by `noncentrality`
    (a Poisson mixture of central ones)."""
    half = noncentrality / 2
    out, j, weight = 0.0, 0, math.exp(-half)
    while True:
        out += weight * float(torch.special.gammaincc(torch.tensor((dof + 2 * j) / 2, dtype=torch.float64),
                                                      torch.tensor(x / 2, dtype=torch.float64)))
        j += 1
        weight *= half / j
        if j > half and weight < 1e-12:
            return out


def _solve(f, low: float, high: float) -> float:
    """x in [low, high] where the increasing `f` crosses 0 (bisection)."""
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) < 0 else (low, mid)
    return (low + high) / 2


def detectable_shift(share: float, samples: int, dof: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The test's power in one figure: how far one token's share must move (the other tokens'
    shares scaled to make room) for the test at level `alpha` to catch it with probability
    `power`, with `samples` samples of each method and the token's share `share` (0 < share < 1)
    over `dof` + 1 token groups. The statistic is then noncentral chi-square with noncentrality
    samples / 2 * d^2 / (share (1 - share)) for a shift d."""
    critical = _solve(lambda x: alpha - chi_square_survival(x, dof), 0.0, 1e4)
    needed = _solve(lambda lam: chi_square_survival(critical, dof, lam) - power, 0.0, 500.0)
    return math.sqrt(2 * needed * share * (1 - share) / samples)


@dataclass(frozen=True)
class Comparison:
    """AR against one method: S samples each, the test at each position, and greedy mode."""

    method: str
    samples: int
    positions: tuple[int, ...]
    tests: tuple[ChiSquare, ...]
    ar_tokens: torch.LongTensor          # [S, N] AR's samples (seeds seed .. seed + S - 1)
    method_tokens: torch.LongTensor      # [S, N] the method's (seeds seed + SPACING ..)
    greedy_ar: torch.LongTensor          # [N] temperature 0
    greedy_method: torch.LongTensor      # [N] temperature 0
    seconds: float                       # decoding all of it

    @property
    def greedy_equal(self) -> int:
        """Positions where the method's greedy tokens equal AR's (all N when lossless)."""
        return int((self.greedy_ar == self.greedy_method).sum())

    @property
    def different_images(self) -> int:
        """Sample pairs (AR's k-th, the method's k-th) that differ somewhere."""
        return int((self.ar_tokens != self.method_tokens).any(1).sum())


def sample_tokens(model, prompt: str, settings: Settings, samples: int, seed: int, batch: int = 64,
                  stop: Callable[[], bool] | None = None,
                  on_batch: Callable[[], None] | None = None) -> torch.LongTensor | None:
    """[S, N] tokens of S samples, row k from seed + k (as one batch of S would give), decoded
    `batch` rows at a time (fewer where one pass of so many would pass the model's memory cap,
    `scd_core.memory`); None if `stop()` turned true (it is asked before every forward pass,
    so a stop ends the decoding within one pass). `on_batch()` is called before each batch."""
    batch = min(batch, memory.rows_per_pass(model, settings.method, settings.window, settings.top_p))
    out = []
    for start in range(0, samples, batch):
        if on_batch is not None:
            on_batch()
        rows, last = min(batch, samples - start), None
        for record in scd_core.stream(model, [prompt] * rows, seed=seed + start, settings=settings):
            if stop is not None and stop():
                return None
            last = record
        out.append(last.tokens_after.cpu())
    return torch.cat(out)


def compare(model, prompt: str, settings: Settings, method: str, samples: int = 256,
            positions: Sequence[int] | None = None, seed: int = 0, batch: int = 64,
            stop: Callable[[], bool] | None = None,
            on_batch: Callable[[], None] | None = None) -> Comparison | None:
    """AR's and `method`'s distributions side by side under `settings` (its temperature,
    top-k, top-p, CFG and window): `samples` of each, the chi-square test at each of
    `positions` (by default the four where the samples vary most, `informative_positions`), and
    both decoded at temperature 0.
    None if `stop()` turned true (asked before every forward pass); `on_batch()` is called
    before each batch of samples (`sample_tokens`)."""
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 2:
        raise ValueError(f"samples must be an integer of at least 2, got {samples!r}")
    N = math.prod(int(g) for g in model.grid)
    if positions is not None and any(not 0 <= p < N for p in positions):
        raise ValueError(f"positions must lie in 0 .. {N - 1}, got {list(positions)}")
    started = time.perf_counter()
    ar = sample_tokens(model, prompt, settings.replace(method="ar"), samples, seed, batch, stop, on_batch)
    other = None if ar is None else \
        sample_tokens(model, prompt, settings.replace(method=method), samples, seed + SPACING, batch, stop, on_batch)
    if other is None:
        return None
    greedy = settings.replace(temperature=0.0)
    g_ar = sample_tokens(model, prompt, greedy.replace(method="ar"), 1, seed, 1, stop)
    g_m = None if g_ar is None else sample_tokens(model, prompt, greedy.replace(method=method), 1, seed, 1, stop)
    if g_m is None:
        return None
    g_ar, g_m = g_ar[0], g_m[0]
    V = int(model.vocab_size)
    positions = tuple(informative_positions(ar, other) if positions is None else positions)
    tests = tuple(chi_square_two_sample(counts_at(ar, p, V), counts_at(other, p, V)) for p in positions)
    return Comparison(method, samples, positions, tests, ar, other, g_ar, g_m, time.perf_counter() - started)
