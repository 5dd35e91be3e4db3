"""The contract between the decoding engine and a model.

The engine never imports a model library: everything model-specific (prompt templates,
unconditional rows for classifier-free guidance, forced tokens, cache cropping) lives
behind `TokenModel` and `Session`. `docs/models.md` shows a complete example.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

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
class ResizableSession(Session, Protocol):
    """A Session whose batch can change between passes (optional; see `scd_core.serve`).

    `add_rows(prompts)` starts new rows after the existing ones (one forward pass over their
    prompts, with the session's guidance scale) and returns their first logits [b, V].
    `keep_rows(rows)` keeps only the rows listed, in that order; the others are forgotten.
    Neither may change what the kept rows' later logits are, and a failed `add_rows` leaves
    the session as it was. With both, requests join a running batch and leave it as soon as
    their grid is complete; without them, a server decodes one batch at a time.
    """

    def add_rows(self, prompts: Sequence[str]) -> torch.Tensor: ...

    def keep_rows(self, rows: torch.LongTensor) -> None: ...


@runtime_checkable
class TokenModel(Protocol):
    """An autoregressive model over a grid of discrete tokens.

    `vocab_size` is V, the last dimension of the logits (the drafting vocabulary: random
    drafts are uniform over range(V)); `grid` is (H, W) for images or (T, H, W) for video.
    A model may also declare any of `OPTIONAL_ATTRIBUTES`; read them with `optional`.
    """

    vocab_size: int
    grid: tuple[int, ...]

    def start(self, prompts: Sequence[str], cfg_scale: float) -> Session: ...

    def decode(self, tokens: torch.LongTensor) -> list: ...


OPTIONAL_ATTRIBUTES: dict[str, str] = {
    "default_settings": "dict: the settings the model was made for (any of temperature, top_k, "
                        "top_p, cfg_scale, and window and init for drafting); the benchmark and "
                        "the app start from them",
    "example_prompts": "list[str]: prompts the model draws recognisably",
    "prompt_kind": "'text' (the default) or 'video': prompts are paths of clips to continue",
    "fps": "float: frames per second of decoded video",
    "vocab": "an object with known(prompt) -> list[str], the prompt words the model knows "
             "(for bag-of-words prompts)",
}


def optional(model: Any, name: str, default: Any = None) -> Any:
    """A model's optional attribute `name` (one of `OPTIONAL_ATTRIBUTES`), or `default`."""
    if name not in OPTIONAL_ATTRIBUTES:
        raise ValueError(f"name: {name!r} is not an optional model attribute; "
                         f"known: {', '.join(OPTIONAL_ATTRIBUTES)}")
    value = getattr(model, name, None)
    return default if value is None else value


def row_decoder(model: Any, session: Session, row: int):
    """How to decode row `row`'s tokens [1, N] of `session`: its `row_decoder(row)` where the
    model's decode needs per-row context (a video model decodes the frames it continued),
    else `model.decode`. Capture it when the row starts: row indices change as rows leave."""
    own = getattr(session, "row_decoder", None)
    return own(row) if callable(own) else model.decode


def can_resize(session: Session) -> bool:
    """Whether rows can join and leave the session's batch (`ResizableSession`)."""
    return callable(getattr(session, "add_rows", None)) and callable(getattr(session, "keep_rows", None))
