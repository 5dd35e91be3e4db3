"""Argument checks shared by adapters (a ValueError naming the argument) and prompt padding."""
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


def check_tokens(tokens, vocab_size: int, name: str) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name}: expected an integer torch tensor, got {type(tokens).__name__}")
    if tokens.ndim != 2 or tokens.shape[1] == 0:
        raise ValueError(f"{name}: expected shape [B, W] with W >= 1, got {list(tokens.shape)}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{name}: values must lie in [0, {vocab_size})")
    return tokens.long()


def check_step(tokens, start, batch: int, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate `Session.step` arguments: tokens [batch, W] in [0, V), start [batch] >= 0."""
    tokens = check_tokens(tokens, vocab_size, "tokens")
    if tokens.shape[0] != batch:
        raise ValueError(f"tokens: expected {batch} rows, got {tokens.shape[0]}")
    if not isinstance(start, torch.Tensor):
        start = torch.as_tensor(start)
    start = start.reshape(-1).long()
    if start.shape[0] != batch:
        raise ValueError(f"start: expected {batch} entries, got {start.shape[0]}")
    if int(start.min()) < 0:
        raise ValueError("start: positions must be >= 0")
    return tokens, start


def left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id rows of different lengths -> left-padded ids [R, P] and mask [R, P]."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids.to(device), mask.to(device)
