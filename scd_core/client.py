"""The decode client interface: how a page (or any front end) asks for rows to be decoded
without decoding them itself.

A client submits one row (a model name, a prompt, a seed and its `Settings`), reads that
row's records as its passes happen, may cancel it, and waits for its result. Behind it a
decode service runs `scd_core.serve.Server`s (rows with equal settings share passes): in
this process, in worker processes, or on Ray Serve replicas. A row's tokens depend only on
its model, prompt, seed and settings, so every implementation gives the same picture for
the same request.

    client.submit(model, prompt, seed, settings) -> request id   (at once; ValueError names a bad argument)
    client.records(request id) -> iterator of the row's records  (one `Iteration` of batch 1 per pass)
    client.cancel(request id)                                    (the row leaves at the next pass boundary)
    client.result(request id, timeout) -> RowResult              (waits; partial if cancelled)
    client.close()

A service that loses a row (its worker died, its batch failed) ends that row's records and
result with a `DecodeError` whose message says why; other rows are not touched.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Protocol, runtime_checkable

import torch

from scd_core.settings import Settings
from scd_core.trace import Iteration


class DecodeError(RuntimeError):
    """A row could not be decoded to its end (not a bad argument: that is a ValueError at
    `submit`). The message is meant for the person who asked for the row."""


@dataclass(frozen=True)
class RowResult:
    """How a row ended: its tokens [N] (-1 past what was committed when cancelled), its
    forward passes (prefill included), seconds decoding and inside the model, the number of
    rows each of its passes decoded, and whether it was cancelled before its end."""

    tokens: torch.LongTensor
    nfe: int
    wall_time: float
    step_time: float
    batch_sizes: tuple[int, ...] = field(default=())
    cancelled: bool = False


@runtime_checkable
class DecodeClient(Protocol):
    def submit(self, model: str, prompt: str, seed: int, settings: Settings) -> str: ...

    def records(self, request: str) -> Iterator[Iteration]: ...

    def cancel(self, request: str) -> None: ...

    def result(self, request: str, timeout: float | None = None) -> RowResult: ...

    def close(self) -> None: ...
