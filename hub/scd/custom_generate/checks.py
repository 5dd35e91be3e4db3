# Built by hub/vendor.py from scd_core/models/checks.py: edit the library, then rebuild.
"""Argument checks shared by adapters (a ValueError naming the argument) and prompt padding.

Two kinds of check, by where they run:
- where inputs enter (`start`, `add_rows`, `decode`): plain Python, reading values freely;
- inside a session's `step`, `step_tree` and `keep_path`: a check of the arguments' types and
  shapes reads no value; a check of their values (`device_check`) runs only where it costs
  nothing (the CPU, eager), so that a pass never waits for it nor aborts the process.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch


def check_prompts(prompts: Sequence[str]) -> list[str]:
    if isinstance(prompts, str) or not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise ValueError(f"prompts: expected a non-empty list of strings, got {prompts!r}")
    if not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompts: every prompt must be a string")
    return list(prompts)


def check_cfg(cfg_scale: float) -> float:
    try:
        value = float(cfg_scale)
    except (TypeError, ValueError):
        raise ValueError(f"cfg_scale: expected a number, got {cfg_scale!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"cfg_scale: expected a finite number, got {cfg_scale!r}")
    return value


def device_check(ok: torch.Tensor, message: str, **values) -> None:
    """Raise the ValueError of `message` (a template: `message.format(**values)`) unless the
    boolean tensor `ok` holds True everywhere, where that costs nothing: on the CPU, outside
    a compiled graph. Anywhere else (an accelerator, a compiled graph, `device="meta"`) it
    checks nothing.

    One meaning on every device: a pass never waits for a check and never aborts the process.
    (A device-side assert would: on CUDA it poisons the process's CUDA context, every other
    run in it included.) Values are checked on the host where they enter (`generate` and
    `stream`'s arguments, `start`'s and `add_rows`' prompts, a server's requests); the engine
    feeds a session only values it made, valid by construction. So this is a courtesy to a
    caller who drives a session by hand on the CPU, never something a pass relies on."""
    if ok.device.type != "cpu" or torch.compiler.is_compiling():
        return
    text = message.format(**values)
    try:
        torch._assert_async(ok.all() if ok.dim() else ok, text)       # on the CPU: at once, no read-back op
    except RuntimeError:
        raise ValueError(text) from None


def check_token_tensor(tokens, name: str, rows: int | None = None) -> torch.Tensor:
    """An integer tensor [B, W] with W >= 1 (and B = `rows` when given), as a LongTensor;
    its type and shape only (no value is read)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name}: expected an integer torch tensor, got {type(tokens).__name__}"
                         + (f" of {tokens.dtype}" if isinstance(tokens, torch.Tensor) else ""))
    if tokens.ndim != 2 or tokens.shape[1] == 0:
        raise ValueError(f"{name}: expected shape [B, W] with W >= 1, got {list(tokens.shape)}")
    if rows is not None and tokens.shape[0] != rows:
        raise ValueError(f"{name}: expected {rows} rows, got {tokens.shape[0]}")
    return tokens.long()


def check_tokens(tokens, vocab_size: int, name: str) -> torch.Tensor:
    """`check_token_tensor`, then values in [0, vocab_size), read on the host (for `decode`)."""
    tokens = check_token_tensor(tokens, name)
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{name}: values must lie in [0, {vocab_size})")
    return tokens


def check_start(start, batch: int, device: torch.device | str | None = None) -> torch.Tensor:
    """`start` [batch] as a LongTensor on `device` (its shape only; a list is taken too)."""
    if not isinstance(start, torch.Tensor):
        try:
            start = torch.as_tensor(start)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"start: expected a tensor of {batch} positions, got {start!r}") from None
    if start.dtype.is_floating_point or start.dtype.is_complex or start.dtype == torch.bool:
        raise ValueError(f"start: expected integer positions, got {start.dtype}")
    start = start.reshape(-1)
    if start.shape[0] != batch:
        raise ValueError(f"start: expected {batch} entries, got {start.shape[0]}")
    return start.to(device).long() if device is not None else start.long()


def check_step(tokens, start, batch: int, vocab_size: int, device: torch.device | str | None = None,
               fed: torch.Tensor | int | None = None, length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate `Session.step` arguments without reading a value on the host: tokens
    [batch, W] in [0, V), start [batch] >= 0, at most `fed` (the positions each row holds, a
    tensor [batch], or a bound) and with start + W <= `length` when given; both are moved to
    `device` (a caller's CPU tensors: the engine's are there already)."""
    tokens = check_token_tensor(tokens, "tokens", batch)
    tokens = tokens.to(device) if device is not None else tokens
    start = check_start(start, batch, tokens.device)
    device_check((tokens >= 0) & (tokens < vocab_size), "tokens: values must lie in [0, {V})", V=vocab_size)
    check_positions(start, fed, None if length is None else (length, tokens.shape[1]))
    return tokens, start


def check_positions(start: torch.Tensor, fed: torch.Tensor | int | None = None,
                    room: tuple[int, int] | None = None) -> None:
    """On the device: start >= 0, start <= `fed` (a tensor of the positions each row holds, or
    a bound), and with `room` = (length, W), start + W <= length."""
    ok = start >= 0
    if fed is not None:
        ok = ok & (start <= fed)
    if room is not None:
        ok = ok & (start + room[1] <= room[0])
    limit = "" if fed is None else (", at most {most}" if not isinstance(fed, torch.Tensor)
                                    else ", at most the positions fed so far")
    device_check(ok, "start: positions must be >= 0" + limit + ("" if room is None else ", with start + W <= {length}"),
                 **({} if isinstance(fed, torch.Tensor) or fed is None else {"most": fed}),
                 **({} if room is None else {"length": room[0]}))


def left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id rows of different lengths -> left-padded ids [R, P] and mask [R, P]."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids.to(device), mask.to(device)
