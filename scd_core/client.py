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
    client.model_info(model) -> ModelInfo                        (what a front end must know of a model)
    client.pictures(model, canvases, size, requests) -> frames   (tokens drawn where the model is)
    client.close()

A front end that uses a client never needs a copy of a model: `model_info` tells it the
grid, vocabulary, prompt kind, example prompts and default settings (the service loads the
model to answer), and `pictures` decodes token canvases beside the model, each with its
row's own decoder, into frames of about the size shown (`scd_core.frames`).

A service that loses a row (its worker died, its batch failed) ends that row's records and
result with a `DecodeError` whose message says why; other rows are not touched.

Implementations: `scd_core.local.LocalClient` (this process) and
`scd_core.workers.ProcessClient` (one worker process per model). `RowLog` and `RowBook`
below are the row bookkeeping they share; a new backend may use them too.
"""
from __future__ import annotations

import collections
import dataclasses
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np
import torch

from scd_core.protocols import optional
from scd_core.settings import Settings
from scd_core.trace import Iteration, TokenLog


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


@dataclass(frozen=True)
class ModelInfo:
    """What a front end must know about a model it does not hold: its grid and vocabulary
    (to check a request), its prompt kind, example prompts and default settings (to offer
    them), its frames per second (a video's clip). Plain values: it crosses any boundary."""

    name: str
    grid: tuple[int, ...]
    vocab_size: int
    prompt_kind: str = "text"
    example_prompts: tuple[str, ...] = ()
    default_settings: dict = field(default_factory=dict)
    fps: float | None = None

    @classmethod
    def of(cls, name: str, model: Any) -> "ModelInfo":
        """The info of a loaded model (its optional attributes, `scd_core.protocols`)."""
        fps = optional(model, "fps")
        return cls(name=name, grid=tuple(int(g) for g in model.grid), vocab_size=int(model.vocab_size),
                   prompt_kind=str(optional(model, "prompt_kind", "text")),
                   example_prompts=tuple(str(p) for p in optional(model, "example_prompts", ())),
                   default_settings=dict(optional(model, "default_settings", {})),
                   fps=None if fps is None else float(fps))


Frames = list[list[np.ndarray]]
"""`pictures`' answer: per canvas, its frames (HxWx3 uint8), one per token frame of the grid."""


@runtime_checkable
class DecodeClient(Protocol):
    """What every decode client does (docs/serving.md, "Decode clients", says it in full).
    All methods may be called from any thread."""

    def submit(self, model: str, prompt: str, seed: int, settings: Settings) -> str:
        """Queue one row; return its request id (a string no one can guess: uuid4 hex) once
        it is queued (the first row of a model also waits for the model to load). A bad
        request raises ValueError naming the argument (model, prompts, seed, settings or a
        setting); a service that cannot take the row raises DecodeError."""
        ...

    def records(self, request: str) -> Iterator[Iteration]:
        """The row's records from its first (each call replays them, then waits for more):
        one `Iteration` of batch 1 per pass the row took part in, its prefill first, with
        the row's own index, nfe (index + 1) and cumulative wall and step times. Ends when
        the row ends (complete or cancelled); raises DecodeError after the last record if
        the row was lost."""
        ...

    def cancel(self, request: str) -> None:
        """Return at once; the row leaves at its next pass boundary, its records so far
        stay. Nothing happens to a row that has ended."""
        ...

    def result(self, request: str, timeout: float | None = None) -> RowResult:
        """Wait for the row's end (TimeoutError after `timeout` s; DecodeError if lost)."""
        ...

    def model_info(self, model: str) -> ModelInfo:
        """What a front end must know of the model (loading it where it decodes, as the first
        `submit` would). A ValueError for a name the service does not know, a DecodeError if
        it could not be loaded."""
        ...

    def pictures(self, model: str, canvases: torch.LongTensor, size: int | None = None,
                 requests: Sequence[str | None] | None = None, clip: bool = False) -> Frames:
        """Token canvases [R, N] of `model` (-1 where empty) decoded where the model is:
        row r with the own decoder of row `requests[r]` (a request id of this client; None,
        or a row no longer known: the model's own decoder), one frame per token frame,
        each box-filtered to about `size` px (None: as decoded); `clip`: every decoded
        frame (a video's clip). `scd_core.frames.display_frames` says how. A ValueError
        names a bad argument. A client keeps the decoders of its last rows after their end
        (at least as many as the rows it keeps readable)."""
        ...

    def decoder(self, request: str) -> str:
        """How a front end names the row's own decoder in `pictures`: its request id."""
        ...

    def close(self) -> None:
        """Cancel the rows still running, stop; a later `submit` raises DecodeError."""
        ...


# ------------------------------------------------------------------ for implementations

def failure_message(error: BaseException) -> str:
    """What a person is told when their row was lost to `error` (a DecodeError's message)."""
    if isinstance(error, DecodeError):
        return str(error)
    if isinstance(error, ValueError):
        return f"this request was refused: {error}"
    return f"decoding failed ({type(error).__name__}: {error}); please try again"


class RowLog:
    """One row as a client holds it: its records so far and how it ended. One producer
    appends records and ends it; any number of threads read it (`records` replays from the
    first record, then waits for the next one or the end; `result` waits for the end)."""

    def __init__(self, model: str, num_tokens: int) -> None:
        self.model, self.num_tokens = model, num_tokens
        self._records: list[Iteration] = []
        lock = threading.Lock()
        self._changed = threading.Condition(lock)  # a record or the end: wakes the readers of records
        self._end = threading.Condition(lock)      # the end only: wakes those waiting for the result
        self._ended = False
        self._error: str | None = None             # a DecodeError's message
        self._batch_sizes: tuple[int, ...] = ()
        self.cancel_requested = False
        self.server = None                          # where its passes run, for a client whose readers run them

    @property
    def ended(self) -> bool:
        return self._ended

    @property
    def count(self) -> int:
        """Its records so far."""
        return len(self._records)

    def append(self, record: Iteration) -> None:
        with self._changed:
            self._records.append(record)
            self._changed.notify_all()

    def end(self, error: str | None = None, batch_sizes: tuple[int, ...] = ()) -> bool:
        """End the row (its records, then `error` if it was lost); False if it had ended."""
        with self._changed:
            if self._ended:
                return False
            self._ended, self._error, self._batch_sizes = True, error, tuple(batch_sizes)
            self._changed.notify_all()
            self._end.notify_all()
            return True

    def records(self) -> Iterator[Iteration]:
        i = 0
        while True:
            with self._changed:
                self._changed.wait_for(lambda: len(self._records) > i or self._ended)
                if i == len(self._records):
                    if self._error is not None:
                        raise DecodeError(self._error)
                    return
                record = self._records[i]
            i += 1
            yield record

    def result(self, timeout: float | None = None) -> RowResult:
        with self._changed:
            if not self._end.wait_for(lambda: self._ended, timeout):
                raise TimeoutError(f"the request did not finish within {timeout} s")
            if self._error is not None:
                raise DecodeError(self._error)
            if not self._records:                   # cancelled before its prefill
                return RowResult(torch.full((self.num_tokens,), -1, dtype=torch.long), 0, 0.0, 0.0,
                                 self._batch_sizes, cancelled=self.cancel_requested)
            last = self._records[-1]
            complete = int(last.n_after[0]) >= self.num_tokens
            return RowResult(last.tokens_after[0].clone(), last.nfe, last.wall_time, last.step_time,
                             self._batch_sizes, cancelled=self.cancel_requested and not complete)


class RowBook:
    """The rows of a client by request id. Running rows are kept; finished ones until
    `keep` newer rows have finished (or `release`)."""

    def __init__(self, keep: int = 1024) -> None:
        self.keep = keep
        self._rows: dict[str, RowLog] = {}
        self._finished: collections.deque[str] = collections.deque()
        self._lock = threading.Lock()

    def add(self, request: str, row: RowLog) -> None:
        with self._lock:
            self._rows[request] = row

    def get(self, request: str) -> RowLog:
        with self._lock:
            row = self._rows.get(request) if isinstance(request, str) else None
        if row is None:
            raise ValueError(f"request: unknown request id {request!r} (a finished request is kept until "
                             f"{self.keep} newer ones have finished)")
        return row

    def find(self, request: str) -> RowLog | None:
        """The row, or None if it is not (or no longer) known."""
        with self._lock:
            return self._rows.get(request)

    def running(self) -> list[RowLog]:
        with self._lock:
            return [row for row in self._rows.values() if not row.ended]

    def finished(self, request: str) -> None:
        with self._lock:
            self._finished.append(request)
            while len(self._finished) > self.keep:
                self._rows.pop(self._finished.popleft(), None)

    def release(self, request: str) -> None:
        with self._lock:
            row = self._rows.get(request)
            if row is not None and row.ended:
                del self._rows[request]


class DecoderBook:
    """Rows' own decoders by request id, where the model is: the running rows' (a callable
    `running(request)` finds them) and those of the last `keep` ended rows whose decoder is
    their own, not the model's (a video row's, which knows the frames it continued), for
    `pictures` after a row's end (a replay, an export). Thread-safe."""

    def __init__(self, keep: int = 1024, running: Callable[[str], Any] = lambda request: None) -> None:
        self.keep, self._running = keep, running
        self._ended: collections.OrderedDict[str, tuple[Any, Any]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def ended(self, request: str, decode, model) -> None:
        """Keep an ended row's decoder, if it is its own (not `model.decode`)."""
        if decode is None or decode == getattr(model, "decode", None):
            return
        with self._lock:
            self._ended[request] = (model, decode)
            self._ended.move_to_end(request)
            while len(self._ended) > self.keep:
                self._ended.popitem(last=False)

    def keep_models(self, models) -> None:
        """Forget the decoders of every model but these (a model no longer served: they hold it)."""
        live = {id(m) for m in models}
        with self._lock:
            for request in [r for r, (m, _) in self._ended.items() if id(m) not in live]:
                del self._ended[request]

    def forget(self, model) -> None:
        """Forget the decoders of this model (it is being unloaded: they hold it)."""
        with self._lock:
            for request in [r for r, (m, _) in self._ended.items() if m is model]:
                del self._ended[request]

    def get(self, request: str | None, model=None):
        """The row's decoder (of `model`, if given), or None (no request, or one no longer
        known: the model's own)."""
        if not isinstance(request, str):
            return None
        found = self._running(request)
        if found is None:
            with self._lock:
                owner, found = self._ended.get(request, (None, None))
            if model is not None and owner is not model:
                return None
        return found

    def pictures(self, model, canvases, size: int | None, requests, clip: bool = False) -> Frames:
        """`DecodeClient.pictures` beside `model`, with these rows' decoders."""
        from scd_core.frames import check_canvases, display_frames

        canvases = check_canvases(model, canvases)
        requests = [None] * canvases.shape[0] if requests is None else list(requests)
        if len(requests) != canvases.shape[0]:
            raise ValueError(f"requests: expected one per canvas ({canvases.shape[0]}), got {len(requests)}")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"size: expected a whole number of pixels >= 1 or None, got {size!r}")
        return display_frames(model, canvases, size, [self.get(r, model) for r in requests], clip=bool(clip))


# --------------------------------------------------------- records across a boundary

_FIELDS = tuple(f.name for f in dataclasses.fields(Iteration))
_COUNTERS = ("index", "nfe", "wall_time", "step_time")          # each row's own, from its server request
_TENSORS = tuple(name for name in _FIELDS if name not in (*_COUNTERS, "method", "log"))


def pack_pass(record: Iteration, rows: Sequence[tuple[int, Any, Iteration]]) -> tuple:
    """One pass of several rows as small plain values, for a pipe: `rows` are (row b of
    `record`, the row's request id, the row's own record of this pass, for its counters).
    Each tensor of `record` crosses as one numpy array of those rows [R, ...] (one conversion
    per field, not per row), the run's token log as the tokens each row committed this pass
    (concatenated, row after row), never the [B, N] canvas."""
    at = np.array([b for b, _, _ in rows], dtype=np.int64)
    every = len(at) == record.n_after.shape[0] and bool((at == np.arange(len(at))).all())

    def chosen(t: torch.Tensor | None) -> np.ndarray | None:       # the rows' part, as numpy
        return None if t is None else t.numpy() if every else t.numpy()[at]
    arrays = tuple(chosen(getattr(record, name)) for name in _TENSORS)
    n_before, n_after = chosen(record.n_before), chosen(record.n_after)
    positions = np.arange(record.num_tokens)
    new = (positions >= n_before[:, None]) & (positions < n_after[:, None])               # [R, N]
    committed = chosen(record.log.tokens)[new]
    counters = tuple((rid, *(getattr(own, name) for name in _COUNTERS)) for _, rid, own in rows)
    return record.method, arrays, committed, counters


def unpack_pass(packed: tuple, buffer: Callable[[Any], torch.LongTensor | None]) -> list[tuple[Any, Iteration]]:
    """The rows' records `pack_pass` sent, as (request id, record of batch 1). `buffer(rid)`
    is the row's running token buffer [1, N] (-1 where nothing is committed), updated in place
    and read by its records; a row without one (None: no longer followed) is skipped."""
    method, arrays, committed, counters = packed
    writable = lambda a: a if a is None or a.flags.writeable else a.copy()    # noqa: E731 (read-only: zero-copy transports)
    arrays, committed = tuple(writable(a) for a in arrays), writable(committed)
    n_before, n_after = arrays[_TENSORS.index("n_before")], arrays[_TENSORS.index("n_after")]
    ends = np.cumsum(n_after - n_before)
    out = []
    for r, (rid, *values) in enumerate(counters):
        tokens = buffer(rid)
        if tokens is None:
            continue
        start, stop = int(n_before[r]), int(n_after[r])
        tokens[0, start: stop] = torch.from_numpy(committed[ends[r] - (stop - start): ends[r]])
        fields = {name: None if a is None else torch.from_numpy(a[r: r + 1]) for name, a in zip(_TENSORS, arrays)}
        fields.update(zip(_COUNTERS, values))
        out.append((rid, Iteration(method=method, log=TokenLog.over(tokens), **fields)))   # reads below its n_after
    return out


def pack_record(record: Iteration) -> tuple:
    """One row's record (batch 1) as `pack_pass` packs it."""
    return pack_pass(record, [(0, None, record)])


def unpack_record(packed: tuple, tokens: torch.LongTensor) -> Iteration:
    """The record `pack_record` sent; `tokens` [1, N] is the row's running token buffer
    (-1 where nothing is committed), updated in place."""
    return unpack_pass(packed, lambda _: tokens)[0][1]
