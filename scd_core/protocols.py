"""The `TokenModel` / `Session` contract between the decoding engine and a model.

The engine never imports a model library: everything model-specific (prompt templates,
unconditional rows for classifier-free guidance, forced tokens, cache cropping) lives
behind these two classes.
"""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import torch


@runtime_checkable
class Session(Protocol):
    """One batch of prompts being decoded.

    `first_logits` [B, V] predicts generated position 0 (guidance already applied).
    `step(tokens [B, W], start [B])` feeds `tokens[b, j]` at generated position
    `start[b] + j`, first forgetting anything fed earlier at positions >= start[b] of that
    row, and returns logits [B, W, V] where `logits[b, j]` predicts position
    `start[b] + j + 1`. One call is one forward pass.
    """

    first_logits: torch.Tensor

    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor: ...


@runtime_checkable
class TokenModel(Protocol):
    """An autoregressive model over a grid of discrete tokens.

    `vocab_size` is V, the last dimension of the logits (the drafting vocabulary: random
    drafts are uniform over range(V)); `grid` is (H, W) for images or (T, H, W) for video.
    """

    vocab_size: int
    grid: tuple[int, ...]

    def start(self, prompts: Sequence[str], cfg_scale: float) -> Session: ...

    def decode(self, tokens: torch.LongTensor) -> list: ...
