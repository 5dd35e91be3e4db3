"""A race of decoding methods over K samples, and why one method wins by more on some models.

Each method decodes the same prompt as K rows (row b draws from seed + b, so its tokens are
those of a single run with that seed), each row keeping its own records. Every figure is a
mean over the K samples of a per-sample metric, with its spread: never one seed's luck
presented as a method's speed. The same per-sample metrics come out of
`python -m scd_core.bench` with `--seeds K` on the same prompt (the page's race report
spells the command out).

Time is reported twice, per method, because the two differ on a CPU: `Timing.latency`, the
seconds of ONE image decoded alone (what a visitor waits for one picture; `bench --seeds 1`),
and `Timing.throughput`, the images per second of the K rows decoded together on shared
passes (`bench --seeds 1 --batch K`). A batched AR pass costs little more than a single one,
so AR's throughput gains most from the batch. A race times each method in up to TIMING_ROUNDS
rounds, interleaved (`time_method`; two at least, more while they take at most TIMING_BUDGET_S
seconds): `Timing.of_rounds` gives the medians with every round's
figure, and two methods' times count as different only where their ranges do not overlap
(`apart`). Passes (NFE) need no repeat: they are the same for the same seeds on any machine.
`decode_rows` decodes on a decode client (`scd_core.client`, wherever it decodes), `decode`
as one batch in this process.

`context_sensitivity` measures the property that decides how much coupling helps: how far
p moves at a position when one earlier token changes.
"""
from __future__ import annotations

import contextlib
import math
import queue
import threading
import time
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Callable, ContextManager, Iterator

import torch

import scd_core
from scd_core import trace
from scd_core.models import REGISTRY
from scd_core.sampling import SamplingConfig, processed_probs
from scd_core.settings import CHAIN, METHODS, Settings
from scd_core.trace import Iteration

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
        """The race's Settings for `method`; AR feeds no drafts, so it runs the chain."""
        tree = CHAIN if method == "ar" else self.settings.tree
        return self.settings.replace(method=method, tree=tree)

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


def sample_of(records: Sequence[Iteration], row: int, num_tokens: int,
              counts: trace.DraftCounts | None = None) -> Sample:
    """Row `row`'s own figures, by the trace's definitions (`counts`: its draft counts over
    these records, where the caller kept them as they came)."""
    nfe = int(trace.row_nfe(records, num_tokens)[row])
    counts = counts if counts is not None else trace.DraftCounts.of(records, row)
    return Sample(nfe=nfe, committed=int(records[-1].n_after[row]),
                  acceptance_rate=counts.acceptance_rate,
                  mean_accepted_length=counts.mean_accepted_length,
                  draft_stability=counts.draft_stability,
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
    """One method's K rows: each row's own records (batch 1, one per pass it took part in,
    its prefill first, up to the pass that completed it), and the seconds the batch took.
    Immutable: `decode` and `decode_rows` yield a new one as passes arrive (a snapshot: it
    keeps showing the passes it had)."""

    method: str
    row_records: tuple[Sequence[Iteration], ...] = ()
    num_tokens: int = 0
    stopped: bool = False
    seconds: float | None = None      # the batch of K rows, first submit to last image (None: running)
    largest_pass: int = 0             # the most rows one of its passes decoded (0: not known yet)
    decoders: tuple = ()              # each row's own decoder where the client tells it (None: the model's)

    @property
    def rows(self) -> int:
        return len(self.row_records)

    @property
    def records(self) -> Sequence[Iteration]:
        """The first row's records (a run of one row: all of them)."""
        return self.row_records[0] if self.row_records else ()

    @property
    def wall(self) -> float:
        """Seconds the batch took (`seconds`), else its longest row's engine seconds so far."""
        if self.seconds is not None:
            return self.seconds
        return max((float(r[-1].wall_time) for r in self.row_records if r), default=0.0)

    @property
    def nfe(self) -> int:
        """Passes of the row that needed the most."""
        return max((len(r) for r in self.row_records), default=0)

    @property
    def done(self) -> bool:
        return bool(self.row_records) and not self.stopped and \
            all(r and int(r[-1].n_after[0]) >= self.num_tokens for r in self.row_records)

    def samples(self) -> list[Sample]:
        return [sample_of(r, 0, self.num_tokens) for r in self.row_records if r]

    def tokens(self) -> torch.LongTensor:
        """[K, N] each row's committed tokens (-1 where none yet)."""
        return torch.cat([r[-1].tokens_after for r in self.row_records])

    def _padded(self, value: Callable[[Iteration], int], fill: Callable[[Sequence[Iteration]], int]):
        width = self.nfe
        return torch.tensor([[value(it) for it in r] + [fill(r)] * (width - len(r))
                             for r in self.row_records], dtype=torch.long)

    def committed_curves(self) -> torch.LongTensor:
        """[K, NFE] tokens committed by each row after each pass (rows stay where they ended)."""
        return self._padded(lambda it: int(it.n_after[0]), lambda r: int(r[-1].n_after[0]) if r else 0)

    def changed_per_pass(self) -> torch.LongTensor:
        """[K, NFE] carried drafts whose token changed in each pass (0 for the prefill and
        after a row's end)."""
        return self._padded(lambda it: int(it.changed[0]), lambda r: 0)

    def histogram(self) -> list[float]:
        """[j - 1] = share of passes (all rows pooled, prefill excluded) that committed j tokens,
        j = 1 .. L (no pass of an unfinished row commits none)."""
        counts = [trace.committed_histogram(r) for r in self.row_records if r]
        counts = [sum(c) for c in zip(*counts)]
        passes = sum(counts)
        return [c / passes for c in counts[1:]] if passes else []

    def final(self) -> "MethodRun":
        """This run reduced to each row's last record (what a finished picture needs), to keep."""
        return replace(self, row_records=tuple(tuple(r[-1:]) for r in self.row_records))

    def at(self, nfe: int) -> list[Iteration]:
        """Each row's record after `nfe` passes (its last once it has ended)."""
        return [r[min(max(nfe, 1), len(r)) - 1] for r in self.row_records if r]

    def last(self) -> list[Iteration]:
        """Each row's latest record."""
        return [r[-1] for r in self.row_records if r]

    def pictures_at(self, nfe: int | None = None) -> list[tuple[Iteration, object]]:
        """(record, the row's own decoder or None) of each row that has a record, after `nfe`
        passes (the latest when None)."""
        decoders = self.decoders or (None,) * self.rows
        return [(r[-1] if nfe is None else r[min(max(nfe, 1), len(r)) - 1], d)
                for r, d in zip(self.row_records, decoders) if r]


TIMING_ROUNDS = 3       # a race times each method up to this many times, the rounds interleaved
TIMING_BUDGET_S = 30.0  # ... the rounds after the first taking about this long at most (two rounds at least)


@dataclass(frozen=True)
class Timing:
    """How fast a method ran, measured where it decodes. `latency`: seconds for ONE image,
    one row decoded alone (its engine clock), with that row's NFE; `throughput`: images per
    second of the batch of K rows sharing passes (K over the batch's engine seconds: its rows
    start in one pass and share every pass, so that is its longest row's clock, the time the
    benchmark measures; records on their way to a page do not count). `alone`: no row from
    outside the race shared a pass with them.

    Timed over several rounds (`of_rounds`), `latency` and `batch_seconds` are the medians and
    `latencies` and `batch_times` every round's figure: one timing alone says little on a
    shared machine, where the same decode varies by 2x or more from one run to the next."""

    latency: float
    latency_nfe: int
    batch: int
    batch_seconds: float
    alone: bool = True
    latencies: tuple[float, ...] = ()        # every round's one-image seconds (empty: `latency` alone)
    batch_times: tuple[float, ...] = ()      # every round's batch seconds (empty: `batch_seconds` alone)

    @property
    def throughput(self) -> float:
        return self.batch / self.batch_seconds if self.batch_seconds > 0 else float("inf")

    @property
    def rounds(self) -> int:
        return max(1, len(self.latencies))

    @property
    def latency_range(self) -> tuple[float, float]:
        """The fastest and slowest round's one-image seconds."""
        values = self.latencies or (self.latency,)
        return min(values), max(values)

    @property
    def throughput_range(self) -> tuple[float, float]:
        """The lowest and highest round's images per second."""
        values = [self.batch / t if t > 0 else float("inf") for t in self.batch_times or (self.batch_seconds,)]
        return min(values), max(values)

    @classmethod
    def of_rounds(cls, rounds: Sequence["Timing"]) -> "Timing":
        """One Timing from the same method timed in several rounds: medians and every figure."""
        latencies = tuple(t for r in rounds for t in (r.latencies or (r.latency,)))
        batches = tuple(t for r in rounds for t in (r.batch_times or (r.batch_seconds,)))
        return cls(latency=statistics.median(latencies), latency_nfe=rounds[0].latency_nfe,
                   batch=rounds[0].batch, batch_seconds=statistics.median(batches),
                   alone=all(r.alone for r in rounds), latencies=latencies, batch_times=batches)


def apart(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two measured ranges (low, high) do not overlap: only then is one method's time
    told apart from the other's; overlapping ones are within noise."""
    return a[1] < b[0] or b[1] < a[0]


CLEAR_CHANCE = 0.1      # a lead is called clear only where noise alone gives one this often at most


def chance_apart(a: int, b: int) -> float:
    """How often noise alone sets two sets of measurements apart (`apart`: every one of one set
    below every one of the other), `a` and `b` of them, when all come from one distribution:
    2 / C(a + b, a) (each order of the a + b equally likely). Two rounds each: 1 in 3; three:
    1 in 10; eight samples each: 1 in 6,435."""
    return 2 / math.comb(a + b, a)


def clearly_apart(a: tuple[float, float], b: tuple[float, float], count_a: int, count_b: int) -> bool:
    """Ranges apart, over enough measurements (`count_a`, `count_b`) that noise alone would set
    them apart at most CLEAR_CHANCE of the time: only then does the page call a lead clear."""
    return apart(a, b) and chance_apart(count_a, count_b) <= CLEAR_CHANCE + 1e-12


@dataclass
class MethodSummary:
    method: str
    samples: int
    nfe: Spread
    step_compression: Spread
    acceptance_rate: Spread
    mean_accepted_length: Spread
    draft_stability: Spread
    same_as_ar: bool | None           # greedy: every row's tokens equal AR's (None otherwise)
    timing: Timing | None = None      # one image alone and the batch of K (None: not timed)
    latency_speedup: float | None = None      # AR's one-image seconds / this method's
    throughput_speedup: float | None = None   # this method's images/s / AR's


def _snapshot(method: str, rows: list[list[Iteration]], num_tokens: int, stopped: bool = False,
              seconds: float | None = None, largest_pass: int = 0, decoders: Sequence = ()) -> MethodRun:
    return MethodRun(method, tuple(Prefix(r, len(r)) for r in rows), num_tokens, stopped, seconds,
                     largest_pass, tuple(decoders))


def decode(model, race: Race, method: str, samples: int,
           stop: Callable[[], bool] | None = None,
           device: ContextManager | None = None) -> Iterator[MethodRun]:
    """Decode `samples` rows of one method as one batch in this process, yielding the
    MethodRun so far after every pass (each yielded run is a snapshot: it keeps showing the
    passes it had). Row b draws from seed + b and keeps its records up to its own last pass.

    Nothing but the stop check runs between passes; a consumer that renders between yields
    is not counted (the engine's clock stops between records). `device` (a serving worker's
    device lock, `scd_core.serve.Server`, or a context holding it) is held from the first
    pass to the last, so no other decoding shares the device meanwhile.
    When `stop()` turns true the run ends after the current pass, marked `stopped`.
    """
    num_tokens, rows = math.prod(int(g) for g in model.grid), [[] for _ in range(samples)]
    prompts = [race.prompt] * samples
    with device or contextlib.nullcontext():
        for it in scd_core.stream(model, prompts, seed=race.seed, settings=race.of(method)):
            for b, row in enumerate(rows):
                if not row or int(row[-1].n_after[0]) < num_tokens:
                    row.append(it.row(b))
            done = int(it.n_after.min()) >= num_tokens
            stopped = stop is not None and not done and stop()
            yield _snapshot(method, rows, num_tokens, stopped, it.wall_time if done else None, samples)
            if stopped:
                return


def decode_rows(client, model: str, race: Race, method: str, seeds: Sequence[int],
                stop: Callable[[], bool] | None = None, poll: float = 0.05) -> Iterator[MethodRun]:
    """Decode one row per seed of one method on a decode client (`scd_core.client`:
    wherever it decodes; rows with equal settings share passes there, and a client with
    `submit_rows` starts them in the same pass, as one batch), yielding the
    MethodRun so far after every record that arrives. The last one yielded has `seconds`,
    from the first submit to the last row's end as seen here, and `largest_pass`, the most
    rows any of its passes decoded (more than len(seeds): rows from outside shared them).

    When `stop()` turns true every row is cancelled (each leaves at its next pass boundary)
    and the last run is marked `stopped`; a consumer that stops reading cancels them too. A
    lost row raises its DecodeError; a bad argument, the client's ValueError.
    """
    settings, feed = race.of(method), queue.Queue()
    started = time.perf_counter()
    together = getattr(client, "submit_rows", None)   # rows that start in one pass, as one batch
    rids = together(model, race.prompt, [int(seed) for seed in seeds], settings) if together else \
        [client.submit(model, race.prompt, int(seed), settings) for seed in seeds]
    rows: list[list[Iteration]] = [[] for _ in rids]
    told, decoders = getattr(client, "decoder", None), [None] * len(rids)   # each row's, where told

    def read(b: int, rid: str) -> None:
        try:
            for record in client.records(rid):
                feed.put((b, record))
            feed.put((b, None))
        except Exception as exc:                      # noqa: BLE001: raised to the reader below
            feed.put((b, exc))

    for b, rid in enumerate(rids):
        threading.Thread(target=read, args=(b, rid), name="scd-race-row", daemon=True).start()
    num_tokens, ended, stopped = 0, 0, False
    try:
        while ended < len(rids):
            if stop is not None and not stopped and stop():
                stopped = True
                for rid in rids:
                    client.cancel(rid)
            try:
                b, item = feed.get(timeout=poll)
            except queue.Empty:
                continue
            if item is None:
                ended += 1
            elif isinstance(item, BaseException):
                raise item
            else:
                rows[b].append(item)
                num_tokens = item.num_tokens
                if told is not None and decoders[b] is None:
                    decoders[b] = told(rids[b])
                yield _snapshot(method, rows, num_tokens, decoders=decoders)
        seconds = time.perf_counter() - started
        largest = max((max(client.result(rid, timeout=5.0).batch_sizes, default=0) for rid in rids),
                      default=0)
    finally:
        for rid in rids:
            try:
                client.cancel(rid)                    # nothing happens to a row that has ended
            except ValueError:
                pass
    complete = all(r and int(r[-1].n_after[0]) >= num_tokens for r in rows)
    for rid in rids:
        getattr(client, "release", lambda rid: None)(rid)
    yield _snapshot(method, rows, num_tokens, stopped and not complete, seconds, largest, decoders)


def time_method(client, model: str, race: Race, method: str, samples: int,
                stop: Callable[[], bool] | None = None) -> "Timing | None":
    """One more timing of a method, nothing kept but its clocks: one row alone (seed s), then
    `samples` rows together (seeds s .. s + samples - 1), as the race decodes them. None when
    `stop()` ended it."""
    runs = []
    for seeds in ([race.seed], range(race.seed, race.seed + samples)) if samples > 1 else ([race.seed],):
        *_, run = decode_rows(client, model, race, method, seeds, stop)
        if run.stopped:
            return None
        runs.append(run)
    return timing_of(runs[0], runs[-1])


@dataclass(frozen=True)
class Step:
    """Where a race stands (`decode_race`): `method`'s rows decoding in `phase` ("one image
    alone", then "K samples together"; `run` so far), or its timing round `round` about to
    start (`run` None). `runs` and `timings` hold the methods finished so far: their runs and
    every round's Timing."""

    method: str
    phase: str
    run: MethodRun | None
    runs: dict[str, MethodRun]
    timings: dict[str, list[Timing]]
    round: int = 1


def decode_race(client, model: str, race: Race, samples: int, stop: Callable[[], bool] | None = None,
                rounds: int = TIMING_ROUNDS, budget: float = TIMING_BUDGET_S) -> Iterator[Step]:
    """A race on a decode client: a few untimed passes of each method first (`warm_up`), then
    per method ONE image alone (its latency) and `samples` rows together (the batch's
    throughput and every per-sample figure), each yielded as its records arrive; then the
    methods timed again, taking turns (`time_method`), up to `rounds` timings each: the second
    round always, each later one only if the rounds after the first, that one included, would
    take at most `budget` seconds as the last round did (a slow model gets two). It ends
    early when `stop()` turns true: the last step's run is then marked stopped, or its timing
    round did not finish (the step's round has no Timing)."""
    warm_up(client, model, race)                       # untimed: a fresh worker's first passes
    began = time.perf_counter()
    runs: dict[str, MethodRun] = {}
    timings: dict[str, list[Timing]] = {}
    phases = (("one image alone", [race.seed]),) + ((   # K = 1: the one image is the batch
        (f"{samples} samples together", range(race.seed, race.seed + samples)),) if samples > 1 else ())
    for method in METHODS:
        one = run = None
        for phase, seeds in phases:
            for run in decode_rows(client, model, race, method, seeds, stop):
                yield Step(method, phase, run, runs, timings)
            if run.stopped:
                return
            one = one or run
        runs[method], timings[method] = run, [timing_of(one, run)]
    last_round, extra = time.perf_counter() - began, 0.0
    for r in range(2, rounds + 1):
        if r > 2 and extra + last_round > budget:
            return
        began = time.perf_counter()
        for method in METHODS:
            yield Step(method, "timing", None, runs, timings, r)
            again = time_method(client, model, race, method, samples, stop)
            if again is None:
                return
            timings[method].append(again)
        last_round = time.perf_counter() - began
        extra += last_round


def warm_up(client, model: str, race: Race, passes: int = 8) -> None:
    """A few untimed passes of each method on the client, then cancelled: the first passes
    of a fresh worker (loading, first kernel calls) would otherwise count against whichever
    method is timed first, as the benchmark's own warm-up run avoids."""
    for method in METHODS:
        for run in decode_rows(client, model, race, method, [race.seed]):
            if run.nfe >= passes:
                break                                 # leaving the generator cancels the row


def timing_of(one: MethodRun, batch: MethodRun) -> Timing:
    """A method's Timing from its one-image run (one row alone) and its batch of K rows."""
    return Timing(latency=float(one.records[-1].wall_time), latency_nfe=one.nfe, batch=batch.rows,
                  batch_seconds=max(float(r[-1].wall_time) for r in batch.row_records if r),
                  alone=one.largest_pass <= 1 and batch.largest_pass <= batch.rows)


def summarise(runs: dict[str, MethodRun], greedy: bool,
              timings: dict[str, Timing] | None = None) -> list[MethodSummary]:
    """The race table: per method, per-sample means with their spread, in METHODS, and
    each timed method's one-image latency and batch throughput against AR's."""
    ar, timings = runs.get("ar"), timings or {}
    ar_ready, ar_time = ar is not None and ar.done, timings.get("ar")
    out = []
    for method in (m for m in METHODS if m in runs):
        run = runs[method]
        if not run.row_records:
            continue
        samples = run.samples()
        same = None
        if greedy and ar_ready and run.done:
            same = bool(torch.equal(run.tokens(), ar.tokens()))
        timing = timings.get(method)
        both = timing is not None and ar_time is not None
        out.append(MethodSummary(
            method=method, samples=len(samples),
            nfe=Spread.of([s.nfe for s in samples]),
            step_compression=Spread.of([s.step_compression for s in samples]),
            acceptance_rate=Spread.of([s.acceptance_rate for s in samples]),
            mean_accepted_length=Spread.of([s.mean_accepted_length for s in samples]),
            draft_stability=Spread.of([s.draft_stability for s in samples]),
            same_as_ar=same, timing=timing,
            latency_speedup=trace.latency_speedup(ar_time.latency, timing.latency) if both else None,
            throughput_speedup=timing.throughput / ar_time.throughput if both else None))
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
