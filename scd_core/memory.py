"""What one pass holds in memory, and the cap that bounds it.

A pass's memory grows with rows x window x vocabulary: the model's logits [B, W, V], the
processed p at every slot, the stored laws q of the drafts, the residuals, the law each slot
draws from and its cumulative sums are all [B, W, V] (float32 in the engine). Measured on the
CPU at V = 64,000 (`python -m bench pass-memory`, docs/models.md), the peak of a speculative
pass, its state included, is 28-32 bytes per (row, window slot, vocabulary entry); AR's is
under one, since it feeds one token. Top-p sorts p over [B, W, V] (a float32 copy and int64
indices) and masks it: more at its peak, so the bytes per element follow the sampling settings
(`bytes_per_element`).

So what a pass needs is known before it runs (`pass_bytes`), and each model has a cap
(`pass_cap`: the model's own `max_pass_bytes` if it sets one, else `DEFAULT_PASS_BYTES`, and
`SCD_PASS_BYTES` over both). A run whose rows would pass the cap is refused with a
`ValueError` that says how many rows fit (`check_rows`); a server admits at most
`rows_per_pass` rows into a batch and queues the others (`scd_core.serve`), so a page's pass
never grows past the cap however many visitors it has.

Between runs a model keeps its sessions' caches for the next session of the same shapes
(`scd_core.models.static.Buffers`): what it keeps idle is capped too (`idle_cap`).
"""
from __future__ import annotations

import math
import os

from scd_core.protocols import optional

GiB = 2 ** 30
PASS_BYTES_PER_ELEMENT = 36          # bytes of a pass per (row, window slot, vocabulary entry): 28-32 measured, and room
TOP_P_BYTES_PER_ELEMENT = 44         # the same with top-p < 1 (the nucleus's sort): 38.0 measured, and room
DEFAULT_PASS_BYTES = 4 * GiB         # a model's cap on one pass, unless it or SCD_PASS_BYTES says otherwise
ENV = "SCD_PASS_BYTES"
DEFAULT_IDLE_BYTES = 4 * GiB         # a model's buffers kept between runs, unless it or SCD_IDLE_BYTES says otherwise
IDLE_ENV = "SCD_IDLE_BYTES"


def fed_width(method: str, window: int, num_tokens: int) -> int:
    """Tokens a pass feeds per row: one for AR, else the window (at most the grid)."""
    return 1 if method == "ar" else min(window, num_tokens)


def bytes_per_element(top_p: float = 1.0) -> int:
    """Bytes of a pass per (row, window slot, vocabulary entry) at these sampling settings."""
    return TOP_P_BYTES_PER_ELEMENT if top_p < 1 else PASS_BYTES_PER_ELEMENT


def pass_bytes(rows: int, width: int, vocab: int, top_p: float = 1.0) -> int:
    """Bytes a pass of `rows` rows feeding `width` tokens each over a vocabulary of `vocab`
    needs (sampling with `top_p`)."""
    return bytes_per_element(top_p) * rows * width * vocab


def pass_cap(model) -> int:
    """The most bytes one pass of this model may hold: SCD_PASS_BYTES, else the model's
    `max_pass_bytes`, else `DEFAULT_PASS_BYTES`."""
    return _cap(ENV, optional(model, "max_pass_bytes") or DEFAULT_PASS_BYTES, least=1)


def idle_cap(model) -> int:
    """The most bytes of buffers this model keeps between runs for its next sessions (the
    caches of finished sessions, reset and lent again): SCD_IDLE_BYTES, else the model's
    `max_idle_bytes`, else `DEFAULT_IDLE_BYTES`. What running sessions hold is not counted:
    each holds what its rows need, which `check_rows` bounds with the pass."""
    idle = optional(model, "max_idle_bytes")
    return _cap(IDLE_ENV, DEFAULT_IDLE_BYTES if idle is None else idle, least=0)


def _cap(env: str, default: int, least: int) -> int:
    """The number of bytes `env` gives (at least `least`), else `default`."""
    raw = os.environ.get(env, "").strip()
    if not raw:
        return int(default)
    try:
        value = int(float(raw))
    except ValueError:
        value = least - 1
    if value < least:
        raise ValueError(f"{env} must be a number of bytes of at least {least}, got {raw!r}")
    return value


def rows_per_pass(model, method: str, window: int, top_p: float = 1.0) -> int:
    """The most rows one pass of this model may hold at this method, window and top-p (at
    least one)."""
    width = fed_width(method, window, math.prod(model.grid))
    return max(1, pass_cap(model) // pass_bytes(1, width, int(model.vocab_size), top_p))


def check_rows(model, rows: int, method: str, window: int, top_p: float = 1.0) -> None:
    """A ValueError naming the prompts when `rows` rows of one pass would pass the model's cap."""
    fits = rows_per_pass(model, method, window, top_p)
    if rows > fits:
        width = fed_width(method, window, math.prod(model.grid))
        need = pass_bytes(rows, width, int(model.vocab_size), top_p)
        raise ValueError(f"prompts: {rows} rows x window {width} x vocabulary {int(model.vocab_size):,} need about "
                         f"{need / GiB:.1f} GiB in one pass, over this model's cap of {pass_cap(model) / GiB:.1f} GiB "
                         f"({ENV}): decode at most {fits} prompts at a time, or use a smaller window")
