"""What one decoding iteration and one run record, and the metrics derived from them.

Every metric has exactly one definition, here:
- acceptance rate = accepted drafts / verified drafts (a draft is verified once, when
  everything before it in its window was accepted), so it never exceeds 1;
- mean accepted length = accepted drafts per speculative forward pass of an active row
  (the tokens committed per pass are one more: the residual or bonus token);
- step compression = AR's NFE / this NFE, where AR's NFE is N (prefill + N - 1 steps);
- latency speed-up = AR wall time / this wall time, measured in the same process.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

import torch


@dataclass
class Iteration:
    """One forward pass and what the engine did with it. Tensors are on the CPU, but for the
    run's shared token buffer, which stays on the model's device.

    The engine builds records under `torch.inference_mode()`: read them freely, and clone
    one before changing it in place (`Run.tokens` is already an ordinary tensor).

    Index conventions: B rows; W tokens fed this pass; D = window - 1 draft slots.
    Draft slot i of row b is generated position `n_before[b] + i`.

    The engine stores only what it computed anyway; the tokens, masks and counts below the
    fields (`tokens_after`, `committed_tokens`, `verified`, `accepted`, `bonus`, `carried`,
    `unchanged`) follow from them and are derived on first use, so that a trace costs the
    decoding loop nothing it does not read.
    """

    index: int                          # 0 is the prefill
    method: str
    n_before: torch.LongTensor          # [B] tokens committed before this pass
    n_after: torch.LongTensor           # [B] tokens committed after it
    start: torch.LongTensor             # [B] position of the first fed token (-1: prefill)
    window_tokens: torch.LongTensor     # [B, W] the tokens fed (committed, then drafts)
    num_accepted: torch.LongTensor      # [B] drafts accepted (slots 0 .. num_accepted - 1)
    accept_prob: torch.Tensor           # [B, D] min(1, p/q) of each draft fed (NaN: none)
    resampled: torch.BoolTensor         # [B] the last committed token came from the residual
    drafts_after: torch.LongTensor      # [B, D] next iteration's drafts (-1: none), slot i at n_after + i
                                        # (a slot past the grid's end may hold one: never fed)
    committed_buffer: torch.LongTensor  # [B, N] the run's token buffer, shared by its records and
                                        # written by later passes (at and after n_after: later
                                        # tokens or stale drafts): read `tokens_after` instead
    nfe: int                            # cumulative forward passes, prefill included
    wall_time: float                    # cumulative seconds spent decoding (a consumer's time between
                                        # records of `stream` is not counted)
    step_time: float                    # cumulative seconds spent inside Session.step / start

    @cached_property
    def tokens_after(self) -> torch.LongTensor:
        """[B, N] committed tokens after this pass, -1 elsewhere.

        Derived from the run's shared buffer: a committed token never changes, so positions
        below `n_after` hold this pass's tokens whenever the record is read, and the later
        positions are masked (no copy of the grid per pass).
        """
        tokens = self.committed_buffer.cpu()
        later = torch.arange(tokens.shape[1]).unsqueeze(0) >= self.n_after.unsqueeze(1)
        return tokens.masked_fill(later, -1)

    @cached_property
    def committed_tokens(self) -> torch.LongTensor:
        """[B, D + 1] tokens committed by this pass, from position n_before on (-1 padded)."""
        tokens = self.tokens_after
        slots = torch.arange(self.drafts_after.shape[1] + 1).unsqueeze(0)
        at = (self.n_before.unsqueeze(1) + slots).clamp(max=tokens.shape[1] - 1)
        return tokens.gather(1, at).masked_fill(slots >= self.committed.unsqueeze(1), -1)

    @cached_property
    def accepted(self) -> torch.BoolTensor:
        """[B, D] slot i was accepted (a prefix of `verified`)."""
        return self._slots < self.num_accepted.unsqueeze(1)

    @cached_property
    def verified(self) -> torch.BoolTensor:
        """[B, D] slot i was tested against p: the accepted ones and the first rejection."""
        return self._slots < (self.num_accepted + self.resampled).unsqueeze(1)

    @cached_property
    def bonus(self) -> torch.BoolTensor:
        """[B] the last committed token is the bonus sample (every fed draft accepted)."""
        return ~self.resampled & (self.committed > self.num_accepted) & (self.start >= 0)

    @property
    def drafts_fed(self) -> torch.LongTensor:
        """[B] drafts in this pass's window (the rest of it re-fed committed tokens)."""
        W = self.window_tokens.shape[1]
        return (W - self.n_before + self.start).clamp(min=0)

    @cached_property
    def carried(self) -> torch.BoolTensor:
        """[B, D] that draft was fed this pass and is still a draft."""
        N = self.tokens_after.shape[1]
        left = (self.drafts_fed - self.committed).unsqueeze(1)          # fed drafts not committed
        return (self._slots < left) & (self.n_after.unsqueeze(1) + self._slots < N)

    @cached_property
    def unchanged(self) -> torch.LongTensor:
        """[B] carried drafts with the same token as in this pass's window."""
        W = self.window_tokens.shape[1]
        if W == 0 or self.drafts_after.shape[1] == 0:
            return torch.zeros_like(self.n_before)
        # draft slot j of this pass was fed at window index W - drafts_fed + j
        fed_at = (W - self.drafts_fed + self.committed).unsqueeze(1) + self._slots
        before = self.window_tokens.gather(1, fed_at.clamp(0, W - 1))
        return (self.carried & (self.drafts_after == before)).sum(1)

    @property
    def _slots(self) -> torch.LongTensor:
        return torch.arange(self.drafts_after.shape[1]).unsqueeze(0)

    @property
    def window_positions(self) -> torch.LongTensor:
        """[B, W] generated positions fed this pass."""
        return self.start.unsqueeze(1) + torch.arange(self.window_tokens.shape[1])

    @property
    def first_rejection(self) -> torch.LongTensor:
        """[B] slot of the first rejection, -1 if none."""
        return torch.where(self.resampled, self.num_accepted, -1)

    @property
    def draft_new(self) -> torch.BoolTensor:
        """[B, D] the draft in that slot, inside the grid, was drawn fresh (not fed this pass)."""
        in_grid = self.n_after.unsqueeze(1) + self._slots < self.tokens_after.shape[1]
        return (self.drafts_after >= 0) & ~self.carried & in_grid

    @property
    def canvas(self) -> torch.LongTensor:
        """[B, N] committed tokens, then the next drafts, -1 elsewhere."""
        canvas = self.tokens_after.clone()
        D = self.drafts_after.shape[1]
        if D:
            pos = self.n_after.unsqueeze(1) + torch.arange(D)
            ok = (self.drafts_after >= 0) & (pos < canvas.shape[1])
            canvas.scatter_(1, torch.where(ok, pos, 0), torch.where(ok, self.drafts_after, canvas[:, :1]))
        return canvas

    @property
    def committed(self) -> torch.LongTensor:
        """[B] tokens committed by this pass."""
        return self.n_after - self.n_before

    @property
    def window(self) -> int:
        return int(self.window_tokens.shape[1])

    @property
    def num_verified(self) -> torch.LongTensor:
        return self.num_accepted + self.resampled


@dataclass
class Run:
    """A finished decode: tokens, NFE, decoded images and the per-iteration trace."""

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
        return cls(tokens=last.tokens_after.clone(), nfe=last.nfe, wall_time=last.wall_time,
                   step_time=last.step_time, iterations=list(iterations), method=last.method,
                   window=int(last.drafts_after.shape[1]) + 1, _decode=decode)

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
        B = self.tokens.shape[0]
        done_at = torch.full((B,), self.nfe, dtype=torch.long)
        for it in reversed(self.iterations):
            finished = it.n_after == self.num_tokens
            done_at = torch.where(finished, torch.full_like(done_at, it.index + 1), done_at)
        return done_at

    @property
    def accepted_drafts(self) -> int:
        return int(sum(int(it.accepted.sum()) for it in self.iterations))

    @property
    def verified_drafts(self) -> int:
        return int(sum(int(it.verified.sum()) for it in self.iterations))

    @property
    def acceptance_rate(self) -> float:
        """Accepted drafts / verified drafts (0 when nothing was drafted)."""
        verified = self.verified_drafts
        return self.accepted_drafts / verified if verified else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Accepted drafts per speculative forward pass of an active row (prefill excluded).

        The tokens committed per pass are this plus one (the residual or bonus token), except
        in a row's last pass at the end of the grid. AR accepts no drafts: 0.
        """
        passes = sum(int((it.n_before < self.num_tokens).sum()) for it in self.iterations[1:])
        return self.accepted_drafts / passes if passes else 0.0

    @property
    def step_compression(self) -> float:
        """AR's NFE (N) / this run's NFE."""
        return self.num_tokens / self.nfe

    @property
    def draft_stability(self) -> float:
        """Fraction of carried-over drafts whose token did not change from one pass to the next.

        Counts drafts that were fed in one pass and are still drafts after it (not committed,
        not created fresh by the init scheme): the flicker that coupling removes.
        """
        kept = sum(int(it.unchanged.sum()) for it in self.iterations)
        carried = sum(int(it.carried.sum()) for it in self.iterations)
        return kept / carried if carried else 0.0

    @property
    def engine_time(self) -> float:
        """Seconds spent outside the model's forward passes."""
        return self.wall_time - self.step_time

    @property
    def engine_fraction(self) -> float:
        """Engine time as a fraction of forward time (the paper: 1.66 ms / 36.41 ms = 4.6%)."""
        return self.engine_time / self.step_time if self.step_time > 0 else 0.0


def latency_speedup(ar: Run, other: Run) -> float:
    """AR wall time / this wall time; both runs must come from the same process."""
    return ar.wall_time / other.wall_time if other.wall_time > 0 else float("inf")
