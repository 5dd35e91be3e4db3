# Built by hub/vendor.py from scd_core/models/rows.py: edit the library, then rebuild.
"""Rows joining and leaving a running session (`protocols.ResizableSession`), shared by
every adapter that keeps a per-row state (a cache, a history, a table index).

A session's per-row state is laid out as `reps` blocks of `batch` rows: the conditional rows
of every prompt, then (with classifier-free guidance) their unconditional rows. `GuidedRows`
gives such a session `add_rows` and `keep_rows`; the session says how to start rows of its
own kind and how to concatenate or select its per-row state.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def check_rows(rows, batch: int) -> torch.Tensor:
    """The `rows` argument of `keep_rows`: distinct indices in [0, batch), as a 1-D LongTensor."""
    try:
        rows = torch.as_tensor(rows)
    except (TypeError, ValueError, RuntimeError):
        rows = None
    if rows is None or rows.ndim != 1 or rows.dtype.is_floating_point or rows.dtype.is_complex \
            or rows.dtype == torch.bool:
        raise ValueError("rows: expected a 1-D tensor of integer row indices")
    rows = rows.long().cpu()
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= batch):
        raise ValueError(f"rows: expected indices in [0, {batch}), got {rows.tolist()}")
    if rows.unique().numel() != rows.numel():
        raise ValueError(f"rows: each row may be kept once, got {rows.tolist()}")
    return rows


def guided_order(old: int, new: int, reps: int) -> torch.Tensor:
    """Cache rows of a batch of `old` prompts followed by one of `new` prompts, each laid out
    as `reps` blocks (conditional rows, then unconditional ones): the index into
    cat([old rows, new rows]) that gives one block layout again (old + new per block)."""
    blocks = []
    for r in range(reps):
        blocks.append(torch.arange(r * old, (r + 1) * old))
        blocks.append(reps * old + torch.arange(r * new, (r + 1) * new))
    return torch.cat(blocks)


def guided_rows(rows: torch.Tensor, batch: int, reps: int) -> torch.Tensor:
    """Cache rows of prompts `rows` in a block layout of `reps` blocks of `batch` rows."""
    return torch.cat([rows + r * batch for r in range(reps)])


class GuidedRows:
    """`add_rows` / `keep_rows` for a session with per-row state in `reps` blocks of `batch` rows.

    The session has `batch`, `reps` and `first_logits` [batch, V], and provides:
    - `start_like(prompts)`: a new session of the same kind over `prompts` (same guidance);
    - `join_state(new, order)`: take `cat([own state rows, new's state rows])[order]` as its
      per-row state (called before `batch` grows);
    - `select_state(index)`: keep only per-row state rows `index`, in that order (called
      before `batch` shrinks).
    A failed `start_like` leaves the session as it was.
    """

    batch: int
    reps: int
    first_logits: torch.Tensor

    @torch.no_grad()
    def add_rows(self, prompts: Sequence[str]) -> torch.Tensor:
        """Start new rows after the existing ones (one forward pass over their prompts, with
        this session's guidance); returns their first logits [b, V]."""
        return self.add_session_rows(self.start_like(prompts))

    def add_session_rows(self, new: "GuidedRows") -> torch.Tensor:
        """Take the rows of `new`, a started session of the same kind, after the existing ones."""
        self.join_state(new, guided_order(self.batch, new.batch, self.reps))
        self.batch += new.batch
        self.first_logits = torch.cat([self.first_logits, new.first_logits.to(self.first_logits.device)])
        return new.first_logits

    def keep_rows(self, rows: torch.LongTensor) -> None:
        """Keep only the rows listed, in that order; the others are forgotten."""
        rows = check_rows(rows, self.batch)
        self.select_state(guided_rows(rows, self.batch, self.reps))
        self.batch = int(rows.numel())
        self.first_logits = self.first_logits[rows.to(self.first_logits.device)]

    def start_like(self, prompts: Sequence[str]) -> "GuidedRows":
        raise NotImplementedError

    def join_state(self, new: "GuidedRows", order: torch.Tensor) -> None:
        raise NotImplementedError

    def select_state(self, index: torch.Tensor) -> None:
        raise NotImplementedError
