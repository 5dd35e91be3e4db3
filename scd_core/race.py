"""A race of decoding methods over K samples, and why one method wins by more on some models.

Each method decodes the same prompt as one batch of K rows (row b draws from seed + b, so
its tokens are those of a single run with that seed) and is timed alone: nothing else runs
between its passes, no other method and no rendering. The recorded traces can then be
replayed in lockstep by NFE. Every figure is a mean over the K samples of a per-sample
metric, with its spread: never one seed's luck presented as a method's speed. The same
per-sample metrics come out of `python -m scd_core.bench` with `--seeds K` on the same
prompt, which decodes the K seeds one at a time (the page's race report spells the command out).

`context_sensitivity` measures the property that decides how much coupling helps: how far
p moves at a position when one earlier token changes.
"""
from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Callable, ContextManager, Iterator

import torch

import scd_core
from scd_core import trace
from scd_core.models import REGISTRY
from scd_core.sampling import SamplingConfig, processed_probs
from scd_core.settings import Settings
from scd_core.trace import Iteration

METHOD_ORDER = ("ar", "sjd", "scd-mc", "scd-gumbel")
T_975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26,
         10: 2.23, 15: 2.13, 20: 2.09, 30: 2.04}      # Student t quantiles by degrees of freedom


@dataclass(frozen=True)
class Race:
    """What every method of a race shares: the prompt, the decoding settings (each method
    runs them with its own `method`) and the first seed (sample k uses seed + k)."""

    prompt: str
    settings: Settings = Settings()
    seed: int = 0

    def of(self, method: str) -> Settings:
        return self.settings.replace(method=method)

    def greedy(self) -> "Race":
        return replace(self, settings=self.settings.replace(temperature=0.0))


# ------------------------------------------------------------------- per-sample metrics

@dataclass(frozen=True)
class Sample:
    """One row of a method's batch: its own NFE and metrics (the trace's definitions)."""

    nfe: int                          # passes until this row was complete, prefill included
    committed: int                    # tokens committed (N unless stopped)
    acceptance_rate: float
    mean_accepted_length: float
    draft_stability: float
    step_compression: float           # N / nfe


def row_nfe(records: Sequence[Iteration], row: int, num_tokens: int) -> int:
    """Forward passes row `row` needed until its grid was complete (all passes if never)."""
    for it in records:
        if int(it.n_after[row]) >= num_tokens:
            return it.index + 1
    return len(records)


def sample_of(records: Sequence[Iteration], row: int, num_tokens: int) -> Sample:
    """Row `row`'s own figures, by the trace's definitions."""
    nfe = row_nfe(records, row, num_tokens)
    return Sample(nfe=nfe, committed=int(records[-1].n_after[row]),
                  acceptance_rate=trace.acceptance_rate(records, row),
                  mean_accepted_length=trace.mean_accepted_length(records, row),
                  draft_stability=trace.draft_stability(records, row),
                  step_compression=trace.step_compression(num_tokens, nfe))


# ------------------------------------------------------------------------- statistics

@dataclass(frozen=True)
class Spread:
    """Mean of K values with their range and a 95% interval for the mean (Student t)."""

    mean: float
    low: float
    high: float
    half_width: float                 # the 95% interval is mean +- half_width (0 for K = 1)
    count: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "Spread":
        values = [float(v) for v in values]
        k = len(values)
        mean = statistics.fmean(values)
        if k < 2:
            return cls(mean, mean, mean, 0.0, k)
        t = T_975.get(k - 1) or T_975[max(d for d in T_975 if d <= k - 1)]
        return cls(mean, min(values), max(values), t * statistics.stdev(values) / math.sqrt(k), k)


# ------------------------------------------------------------------------------- race

class Prefix(Sequence):
    """The first `n` items of an append-only list: what a run had recorded at one moment.
    Later appends do not show, so a kept snapshot never changes (and none is copied)."""

    def __init__(self, items: list, n: int) -> None:
        self._items, self._n = items, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._items[j] for j in range(self._n)[i]]
        return self._items[range(self._n)[i]]


@dataclass(frozen=True)
class MethodRun:
    """One method's batch of K rows: its recorded trace and its wall time, measured alone.
    Immutable: `decode` yields a new one after every pass."""

    method: str
    records: Sequence[Iteration] = ()
    num_tokens: int = 0
    stopped: bool = False

    @property
    def rows(self) -> int:
        return int(self.records[0].n_before.shape[0]) if self.records else 0

    @property
    def wall(self) -> float:
        """Seconds the engine spent decoding this batch (its own clock, rendering excluded)."""
        return float(self.records[-1].wall_time) if self.records else 0.0

    @property
    def nfe(self) -> int:
        return len(self.records)

    @property
    def done(self) -> bool:
        return bool(self.records) and not self.stopped and \
            int(self.records[-1].n_after.min()) >= self.num_tokens

    def samples(self) -> list[Sample]:
        return [sample_of(self.records, b, self.num_tokens) for b in range(self.rows)]

    def tokens(self) -> torch.LongTensor:
        return self.records[-1].tokens_after

    def committed_curves(self) -> torch.LongTensor:
        """[K, NFE] tokens committed by each row after each pass (rows stay at N once done)."""
        return torch.stack([it.n_after for it in self.records], 1)

    def changed_per_pass(self) -> torch.LongTensor:
        """[K, NFE] carried drafts whose token changed in each pass (0 for the prefill)."""
        return torch.stack([it.changed for it in self.records], 1)

    def histogram(self) -> list[float]:
        """[j - 1] = share of passes (all rows pooled, prefill excluded) that committed j tokens,
        j = 1 .. L (no pass of an unfinished row commits none)."""
        counts = trace.committed_histogram(self.records)
        passes = sum(counts)
        return [c / passes for c in counts[1:]] if passes else []

    def final(self) -> "MethodRun":
        """This run reduced to its last record (what a finished picture needs), to keep."""
        return MethodRun(self.method, tuple(self.records[-1:]), self.num_tokens, self.stopped)

    def at(self, nfe: int) -> Iteration:
        """The record after `nfe` passes (the last one once the batch has finished)."""
        return self.records[min(max(nfe, 1), len(self.records)) - 1]


@dataclass
class MethodSummary:
    method: str
    samples: int
    nfe: Spread
    step_compression: Spread
    acceptance_rate: Spread
    mean_accepted_length: Spread
    draft_stability: Spread
    wall: float                       # the batch's engine seconds
    latency_speedup: float | None     # AR's batch wall / this batch wall (None without AR)
    same_as_ar: bool | None           # greedy: every row's tokens equal AR's (None otherwise)


def decode(model, race: Race, method: str, samples: int,
           stop: Callable[[], bool] | None = None,
           device: ContextManager | None = None) -> Iterator[MethodRun]:
    """Decode `samples` rows of one method, yielding the MethodRun so far after every pass
    (each yielded run is a snapshot: it keeps showing the passes it had).

    Nothing but the stop check runs between passes, so the run's wall time is the method's
    own; a consumer that renders between yields is not counted either (the engine's clock
    stops between records). `device` (a serving worker's device lock, `scd_core.serve.Server`,
    or a context holding it) is held from the first pass to the last, so no other decoding
    shares the device meanwhile.
    When `stop()` turns true the run ends after the current pass, marked `stopped`.
    """
    num_tokens, records = math.prod(int(g) for g in model.grid), []
    prompts = [race.prompt] * samples
    with device or contextlib.nullcontext():
        for it in scd_core.stream(model, prompts, seed=race.seed, settings=race.of(method)):
            records.append(it)
            done = int(it.n_after.min()) >= num_tokens
            stopped = stop is not None and not done and stop()
            yield MethodRun(method, Prefix(records, len(records)), num_tokens, stopped)
            if stopped:
                return


def summarise(runs: dict[str, MethodRun], greedy: bool) -> list[MethodSummary]:
    """The race table: per method, per-sample means with their spread, in METHOD_ORDER."""
    ar = runs.get("ar")
    ar_ready = ar is not None and ar.done
    out = []
    for method in (m for m in METHOD_ORDER if m in runs):
        run = runs[method]
        if not run.records:
            continue
        samples = run.samples()
        same = None
        if greedy and ar_ready and run.done:
            same = bool(torch.equal(run.tokens(), ar.tokens()))
        speedup = trace.latency_speedup(ar.wall, run.wall) if ar_ready and run.done and run.wall > 0 else None
        out.append(MethodSummary(
            method=method, samples=len(samples),
            nfe=Spread.of([s.nfe for s in samples]),
            step_compression=Spread.of([s.step_compression for s in samples]),
            acceptance_rate=Spread.of([s.acceptance_rate for s in samples]),
            mean_accepted_length=Spread.of([s.mean_accepted_length for s in samples]),
            draft_stability=Spread.of([s.draft_stability for s in samples]),
            wall=run.wall, latency_speedup=speedup, same_as_ar=same))
    return out


def lockstep(runs: dict[str, MethodRun]) -> int:
    """The NFE at which the slowest finished (the replay's last tick)."""
    return max((r.nfe for r in runs.values()), default=0)


# ------------------------------------------------------------------ why the gap differs

@dataclass(frozen=True)
class Sensitivity:
    """How much p moves when one earlier token changes, on one AR sample.

    tv_next: mean total variation of p at the next position; tv_further: at positions 2 to
    window - 1 further on (still inside a window); collision: mean sum of p^2, the chance
    that two independent draws agree (how well SJD's fresh drafts hold without coupling).
    """

    tv_next: float
    tv_further: float
    collision: float
    sites: int


def context_sensitivity(model, race: Race, sites: int = 12,
                        sample: torch.LongTensor | None = None) -> Sensitivity:
    """Redraw the token at `sites` positions of a sample (`sample` [N], else an AR decode of
    the prompt) and measure TV(p, p') at the following window - 1 positions; each redrawn
    token comes from its own p, excluding the token it had.

    Costs two forward passes over the whole grid (one row, then `sites` rows).
    """
    settings = race.settings
    sampling = SamplingConfig(settings.temperature or 1.0, settings.top_k, settings.top_p)
    x = sample if sample is not None else \
        scd_core.generate(model, [race.prompt], seed=race.seed, settings=race.of("ar")).tokens[0]
    N = x.shape[0]
    reach = max(2, min(settings.window - 1, N - 2))
    js = torch.linspace(1, N - 2, sites).round().long().unique()
    g = torch.Generator().manual_seed(race.seed)
    with torch.inference_mode():
        start = torch.zeros(1, dtype=torch.long)
        logits = model.start([race.prompt], settings.cfg_scale).step(x[:-1].unsqueeze(0), start)
        p = processed_probs(logits.float().cpu(), sampling)[0]                 # [N-1, V]: p of 1..N-1
        rows = []
        for j in js.tolist():
            other = p[j - 1].clone()
            other[x[j]] = 0
            y = x.clone()
            if float(other.sum()) > 0:
                y[j] = int(torch.multinomial(other / other.sum(), 1, generator=g))
            rows.append(y)
        batch = torch.stack(rows).to(x.device)
        changed = model.start([race.prompt] * len(rows), settings.cfg_scale).step(
            batch[:, :-1], torch.zeros(len(rows), dtype=torch.long, device=x.device))
        q = processed_probs(changed.float().cpu(), sampling)                  # [S, N-1, V]
    nxt, further = [], []
    for r, j in enumerate(js.tolist()):
        for d in range(1, reach + 1):
            i = j + d
            if i >= N:
                break
            tv = 0.5 * float((q[r, i - 1] - p[i - 1]).abs().sum())
            (nxt if d == 1 else further).append(tv)
    collision = float((p * p).sum(-1).mean())
    return Sensitivity(statistics.fmean(nxt) if nxt else 0.0,
                       statistics.fmean(further) if further else 0.0, collision, len(rows))


def gap_probe(model, name: str, race: Race, runs: dict) -> Sensitivity | None:
    """`context_sensitivity` on a race's first AR sample, for the embedded models; None for a
    model with downloaded weights, where two more passes over the grid would keep the visitor
    waiting."""
    if REGISTRY[name].needs_weights:
        return None
    return context_sensitivity(model, race, sample=runs["ar"].tokens()[0])
