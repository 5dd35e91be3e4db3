# Built by hub/vendor.py from scd_core/trace.py: edit the library, then rebuild.
"""What one decoding pass and one run record, and every metric derived from them.

Each metric has exactly one definition, here, as a function over records; `Run`, the
benchmark, the pictures and the app all call these:
- acceptance rate = accepted drafts / verified drafts (a draft is verified once, when
  everything before it in its window was accepted), so it never exceeds 1;
- mean accepted length = accepted drafts per speculative pass of an unfinished row (the
  tokens committed per pass are one more: the residual or bonus token);
- draft stability = share of carried-over drafts (fed in one pass, still drafts after it)
  whose token did not change: the flicker that coupling removes;
- committed histogram = passes that committed 1, 2, 3, ... tokens;
- sibling share (draft trees) = share of speculative passes whose accepted path took a
  candidate other than the first at some tree level: passes the tree kept going;
- step compression = AR's NFE / this NFE, where AR's NFE is N (prefill + N - 1 steps);
- latency speed-up = AR wall time / this wall time, measured in the same process.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Sequence

import torch


class TokenLog:
    """The committed tokens [B, N] of a batch's rows (-1 where none yet), on the CPU, shared
    by the records of its passes. A committed token never changes, so each pass's copy changes
    only the positions it committed, and a record reads those below its own `n_after`: a record that
    is kept still shows its own pass's canvas after later passes have written theirs. A run
    of P passes thus holds one [B, N] buffer, not P of them."""

    def __init__(self, tokens: torch.LongTensor) -> None:
        with torch.inference_mode(False):               # an ordinary tensor: later passes write it in place
            self.tokens = tokens.detach().to("cpu", copy=True)

    @classmethod
    def over(cls, tokens: torch.LongTensor) -> "TokenLog":
        """A log over this buffer [B, N] itself, shared, not copied (a reader that keeps the
        committed tokens of its rows, such as a decode client's, writes them there)."""
        log = cls.__new__(cls)
        log.tokens = tokens
        return log

    @property
    def N(self) -> int:
        return int(self.tokens.shape[1])

    def write(self, tokens: torch.LongTensor) -> None:
        """Take a pass's committed tokens [B, N] (any device): one whole copy, which changes only
        the positions the pass committed (a committed token never changes, and every position
        a row has not committed is -1 in both)."""
        self.tokens.copy_(tokens, non_blocking=True)   # from a GPU: the caller waits for it (`Iteration.from_pass`)

    def upto(self, n: torch.LongTensor) -> torch.LongTensor:
        """[B, N] the tokens below position n[b] of each row, -1 after them (a new tensor)."""
        return self.tokens.masked_fill(torch.arange(self.N) >= n.unsqueeze(1), -1)

    def row(self, b: int) -> "TokenLog":
        """Row b's log: a view of this one, so later passes' tokens show through."""
        return TokenLog.over(self.tokens[b: b + 1])


@dataclass
class Iteration:
    """One forward pass and what the engine did with it; tensors on the CPU.

    B rows; W tokens fed this pass; D draft slots (window - 1 on a chain). Draft slot i of row
    b is generated position `n_before[b] + i` before the pass and `n_after[b] + i` after it.
    With a draft tree, the W fed tokens are its nodes (`parents`): first the main line (node
    j at position start + j: the root, branch 0 of each tree level, then the chain), then the
    other candidates of each tree level; `branches` says which one the accepted path took.
    The stored fields are what the engine computed; the masks and counts below them are
    derived on first use. Records are built under `torch.inference_mode()`: clone a tensor
    before changing it in place.
    """

    index: int                          # 0 is the prefill
    method: str
    n_before: torch.LongTensor          # [B] tokens committed before this pass
    n_after: torch.LongTensor           # [B] tokens committed after it
    start: torch.LongTensor             # [B] position of the first fed token (-1: prefill)
    window_tokens: torch.LongTensor     # [B, W] the tokens fed (committed, then drafts)
    num_accepted: torch.LongTensor      # [B] drafts accepted (slots 0 .. num_accepted - 1)
    accept_prob: torch.Tensor           # [B, D] min(1, p/q) of each draft fed (NaN: none)
    p_draft: torch.Tensor               # [B, D] p(x) of each draft x fed, this pass's law (NaN: none)
    q_draft: torch.Tensor               # [B, D] q(x), the law x was drawn from (NaN: none)
    resampled: torch.BoolTensor         # [B] the last committed token came from the residual
    drafts_after: torch.LongTensor      # [B, D] next pass's drafts (-1: none), slot i at n_after + i
    log: TokenLog                       # the run's committed tokens: `tokens_after` reads this pass's
    nfe: int                            # cumulative forward passes, prefill included
    wall_time: float = 0.0              # cumulative seconds spent decoding (not the consumer's)
    step_time: float = 0.0              # cumulative seconds spent inside the model (part of wall_time)
    branches: torch.LongTensor | None = None   # [B, depth] candidate taken at each tree level (-1: none)
    parents: torch.LongTensor | None = None    # [B, W] parent of each fed node (-1: root); None: a chain

    @classmethod
    def from_pass(cls, index: int, method: str, before, after, verdict, nfe: int,
                  log: TokenLog | None = None) -> "Iteration":
        """The record of one pass from the engine's state before and after it and its verdict
        (`before` None: the prefill), copied to the host: on a GPU it returns once the pass has
        run, so the caller reads its clocks after it and sets `wall_time` and `step_time`.
        `log`: the previous record's log, for the same rows in the same order, into which this
        pass's committed tokens are written; None: a new log (a copy of the committed tokens)."""
        n_before = before.n if before is not None else torch.zeros_like(after.n)
        tensors = dict(n_before=n_before, n_after=after.n, start=verdict.start, window_tokens=verdict.fed,
                       num_accepted=verdict.num_accepted, accept_prob=verdict.accept_prob,
                       p_draft=verdict.p_draft, q_draft=verdict.q_draft,
                       resampled=verdict.resampled, drafts_after=after.drafts,
                       branches=getattr(verdict, "branches", None), parents=getattr(verdict, "parents", None))
        on_gpu = after.n.is_cuda
        if after.n.device.type != "cpu":                # on a GPU: every copy queued, then one wait for all
            tensors = {name: t if t is None else t.to("cpu", non_blocking=on_gpu) for name, t in tensors.items()}
        if log is None or log.tokens.shape != after.tokens.shape:
            log = TokenLog(after.tokens)
        else:
            log.write(after.tokens)
        if on_gpu:
            torch.cuda.current_stream(after.n.device).synchronize()
        return cls(index=index, method=method, nfe=nfe, log=log, **tensors)

    def row(self, b: int) -> "Iteration":
        """The record of row b alone (a batch of one)."""
        sliced = {name: None if getattr(self, name) is None else getattr(self, name)[b: b + 1] for name in _ROW_FIELDS}
        return Iteration(index=self.index, method=self.method, nfe=self.nfe, wall_time=self.wall_time,
                         step_time=self.step_time, log=self.log.row(b), **sliced)

    @property
    def tokens_after(self) -> torch.LongTensor:
        """[B, N] committed tokens after this pass, -1 elsewhere (a new tensor at each call)."""
        return self.log.upto(self.n_after)

    @property
    def num_tokens(self) -> int:
        """N: tokens in the grid."""
        return self.log.N

    @property
    def committed(self) -> torch.LongTensor:
        """[B] tokens committed by this pass."""
        return self.n_after - self.n_before

    @property
    def window(self) -> int:
        """Tokens fed this pass (the tree's nodes, with a tree)."""
        return int(self.window_tokens.shape[1])

    @property
    def line(self) -> int:
        """Tokens fed on the main line (node j at position start + j): the window on a chain."""
        if self.parents is None or self.parents.shape[1] <= 1:
            return self.window
        chain = self.parents[0, 1:] == torch.arange(self.parents.shape[1] - 1)
        return 1 + int(chain.long().cumprod(0).sum())

    @property
    def num_verified(self) -> torch.LongTensor:
        """[B] drafts tested against p: the accepted ones and the first rejection."""
        return self.num_accepted + self.resampled

    @property
    def active(self) -> torch.BoolTensor:
        """[B] the row was unfinished before this pass (a speculative pass, not the prefill)."""
        return (self.n_before < self.num_tokens) & (self.start >= 0)

    @cached_property
    def committed_tokens(self) -> torch.LongTensor:
        """[B, D + 1] tokens committed by this pass, from position n_before on (-1 padded)."""
        slots = torch.arange(self.drafts_after.shape[1] + 1).unsqueeze(0)
        at = (self.n_before.unsqueeze(1) + slots).clamp(max=self.num_tokens - 1)
        return self.log.tokens.gather(1, at).masked_fill(slots >= self.committed.unsqueeze(1), -1)

    @cached_property
    def accepted(self) -> torch.BoolTensor:
        """[B, D] slot i was accepted (a prefix of `verified`)."""
        return self._slots < self.num_accepted.unsqueeze(1)

    @cached_property
    def verified(self) -> torch.BoolTensor:
        """[B, D] slot i was tested against p: the accepted ones and the first rejection."""
        return self._slots < self.num_verified.unsqueeze(1)

    @property
    def took_sibling(self) -> torch.BoolTensor:
        """[B] the accepted path took a candidate other than the first at some tree level."""
        if self.branches is None or self.branches.shape[1] == 0:
            return torch.zeros_like(self.n_before, dtype=torch.bool)
        return (self.branches > 0).any(1)

    @cached_property
    def bonus(self) -> torch.BoolTensor:
        """[B] the last committed token is the bonus draw (every fed draft accepted)."""
        return ~self.resampled & (self.committed > self.num_accepted) & (self.start >= 0)

    @property
    def drafts_fed(self) -> torch.LongTensor:
        """[B] drafts in this pass's window (the rest of it re-fed committed tokens)."""
        return (self.line - self.n_before + self.start).clamp(min=0)

    @cached_property
    def carried(self) -> torch.BoolTensor:
        """[B, D] the draft in that slot was fed this pass and is still a draft after it."""
        N = self.num_tokens
        left = (self.drafts_fed - self.committed).unsqueeze(1)          # fed drafts not committed
        return (self._slots < left) & (self.n_after.unsqueeze(1) + self._slots < N)

    @cached_property
    def unchanged(self) -> torch.LongTensor:
        """[B] carried drafts whose token is the one fed this pass."""
        line = self.line
        if line == 0 or self.drafts_after.shape[1] == 0:
            return torch.zeros_like(self.n_before)
        fed_at = (line - self.drafts_fed + self.committed).unsqueeze(1) + self._slots   # index on the line
        before = self.window_tokens.gather(1, fed_at.clamp(0, line - 1))
        return (self.carried & (self.drafts_after == before)).sum(1)

    @property
    def changed(self) -> torch.LongTensor:
        """[B] carried drafts whose token changed this pass: the flicker coupling removes."""
        return self.carried.sum(1) - self.unchanged

    @property
    def canvas(self) -> torch.LongTensor:
        """[B, N] committed tokens, then the next drafts, -1 elsewhere."""
        N, D = self.num_tokens, self.drafts_after.shape[1]
        rel = torch.arange(N).unsqueeze(0) - self.n_after.unsqueeze(1)          # draft slot of each position
        drafts = self.drafts_after.gather(1, rel.clamp(0, max(D - 1, 0))) if D else torch.full_like(rel, -1)
        return torch.where(rel < 0, self.log.tokens, torch.where(rel < D, drafts, -1))

    @property
    def _slots(self) -> torch.LongTensor:
        return torch.arange(self.drafts_after.shape[1]).unsqueeze(0)


_ROW_FIELDS = ("n_before", "n_after", "start", "window_tokens", "num_accepted", "accept_prob", "p_draft", "q_draft", "resampled",
               "drafts_after", "branches", "parents")


# ------------------------------------------------------------------------------ metrics

def _rows(records: Sequence[Iteration], row: int | None) -> list[Iteration]:
    return list(records) if row is None else [it.row(row) for it in records]


@dataclass(frozen=True)
class DraftCounts:
    """The sums the draft metrics are ratios of, over some records (each row of a batch
    counts; `of(records, row)`: row `row` alone). They add up over records, so a viewer that
    receives records one by one keeps a running total instead of rereading them all."""

    accepted: int = 0        # drafts accepted
    verified: int = 0        # drafts tested against p: the accepted ones and the first rejection
    passes: int = 0          # speculative passes of unfinished rows (the prefill excluded)
    carried: int = 0         # drafts fed and still drafts after the pass
    unchanged: int = 0       # of those, the ones whose token did not change
    siblings: int = 0        # passes whose accepted path took a sibling: with a draft tree, a
                             # candidate other than the first at some tree level

    @classmethod
    def of(cls, records: Sequence[Iteration], row: int | None = None) -> "DraftCounts":
        total = cls()
        for it in records:
            per_row = torch.stack([it.num_accepted, it.num_verified, it.active.long(),
                                   it.carried.sum(1), it.unchanged, it.took_sibling.long()])   # [6, B]
            total = total + cls(*(per_row.sum(1) if row is None else per_row[:, row]).tolist())
        return total

    def __add__(self, other: "DraftCounts") -> "DraftCounts":
        return DraftCounts(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))

    @property
    def acceptance_rate(self) -> float:
        """Accepted drafts / verified drafts (0 when nothing was drafted)."""
        return _ratio(self.accepted, self.verified)

    @property
    def mean_accepted_length(self) -> float:
        """Accepted drafts per speculative pass of an unfinished row (AR accepts none: 0)."""
        return _ratio(self.accepted, self.passes)

    @property
    def draft_stability(self) -> float:
        """Share of carried-over drafts whose token did not change from one pass to the next."""
        return _ratio(self.unchanged, self.carried)

    @property
    def sibling_share(self) -> float:
        """Share of speculative passes whose accepted path took a sibling (0 on a chain)."""
        return _ratio(self.siblings, self.passes)


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def accepted_drafts(records: Sequence[Iteration], row: int | None = None) -> int:
    return DraftCounts.of(records, row).accepted


def verified_drafts(records: Sequence[Iteration], row: int | None = None) -> int:
    return DraftCounts.of(records, row).verified


def acceptance_rate(records: Sequence[Iteration], row: int | None = None) -> float:
    """Accepted drafts / verified drafts (0 when nothing was drafted)."""
    return DraftCounts.of(records, row).acceptance_rate


def mean_accepted_length(records: Sequence[Iteration], row: int | None = None) -> float:
    """Accepted drafts per speculative pass of an unfinished row (AR accepts none: 0)."""
    return DraftCounts.of(records, row).mean_accepted_length


def draft_stability(records: Sequence[Iteration], row: int | None = None) -> float:
    """Share of carried-over drafts whose token did not change from one pass to the next."""
    return DraftCounts.of(records, row).draft_stability


def row_nfe(records: Sequence[Iteration], num_tokens: int) -> torch.LongTensor:
    """[B] forward passes each row needed (prefill included) until its grid of `num_tokens` was
    complete; every pass of the records for a row that never completed."""
    done_at = torch.full(records[-1].n_after.shape, len(records), dtype=torch.long)
    for it in reversed(records):
        done_at = torch.where(it.n_after >= num_tokens, it.index + 1, done_at)
    return done_at


def committed_histogram(records: Sequence[Iteration], row: int | None = None) -> list[int]:
    """[j] = speculative passes (of unfinished rows) that committed j tokens, j = 0 .. L."""
    its = _rows(records, row)
    L = int(its[0].drafts_after.shape[1]) + 1 if its else 0
    counts = torch.zeros(L + 1, dtype=torch.long)
    for it in its:
        counts += torch.bincount(it.committed[it.active], minlength=L + 1)
    return counts.tolist()


def step_compression(num_tokens: int, nfe: float) -> float:
    """AR's NFE (one pass per token: N) / this NFE."""
    return num_tokens / nfe


def latency_speedup(ar_wall: float, wall: float) -> float:
    """AR wall time / this wall time; both measured in the same process."""
    return ar_wall / wall if wall > 0 else float("inf")


# --------------------------------------------------------------------------------- run

@dataclass
class Run:
    """A finished decode: tokens, NFE, decoded images and the per-pass trace."""

    tokens: torch.LongTensor            # [B, N]
    nfe: int
    wall_time: float
    step_time: float
    iterations: list[Iteration]
    method: str
    window: int
    _decode: Callable[[torch.LongTensor], list] | None = field(default=None, repr=False)
    _images: list | None = field(default=None, repr=False)

    @classmethod
    def from_iterations(cls, iterations: list[Iteration], decode=None) -> "Run":
        """Assemble a Run from the records `scd_core.stream` yielded (the last one closes it)."""
        last = iterations[-1]
        return cls(tokens=last.tokens_after, nfe=last.nfe, wall_time=last.wall_time,
                   step_time=last.step_time, iterations=list(iterations), method=last.method,
                   window=last.window if last.parents is not None else int(last.drafts_after.shape[1]) + 1,
                   _decode=decode)

    @property
    def images(self) -> list:
        """Decoded output: PIL images, or lists of frames for video (decoded on first use)."""
        if self._images is None:
            if self._decode is None:
                raise ValueError("this run has no decoder attached")
            self._images = self._decode(self.tokens)
        return self._images

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def row_nfe(self) -> torch.LongTensor:
        """[B] forward passes each row needed (prefill included) until it was complete."""
        return row_nfe(self.iterations, self.num_tokens)

    @property
    def acceptance_rate(self) -> float:
        return acceptance_rate(self.iterations)

    @property
    def mean_accepted_length(self) -> float:
        return mean_accepted_length(self.iterations)

    @property
    def draft_stability(self) -> float:
        return draft_stability(self.iterations)

    @property
    def step_compression(self) -> float:
        return step_compression(self.num_tokens, self.nfe)

    @property
    def engine_time(self) -> float:
        """Seconds spent outside the model's forward passes."""
        return self.wall_time - self.step_time
