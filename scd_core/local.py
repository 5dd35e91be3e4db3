"""`LocalClient`: the decode client that decodes in this process.

One `scd_core.serve.Server` per model name, the model loaded on its first request; rows
with equal settings share passes. It is what `ProcessClient`'s workers run, and what a
library user embedding the engine (or a test) uses directly. A row's records reach its log
on the server's thread as each pass ends (no thread per row); `on_event`, if given, hears
them there too, with each row's end, for a consumer that forwards them elsewhere (a worker
process's sender).

With `in_call=True` it starts no thread at all: the passes run in the threads that read a
row's records or wait for its result, inside the caller's call (a ZeroGPU call holds the GPU
only while it runs, and only in its own process). Rows read at the same time still share
passes; a row nobody reads waits.

    client = LocalClient()
    request = client.submit("tiny", "red heart", 3, Settings.for_model(model))
    for record in client.records(request): ...
    row = client.result(request, timeout=60)
"""
from __future__ import annotations

import contextlib
import math
import threading
import time
import uuid
from typing import Any, Callable, Iterator, Sequence

from scd_core.client import (DecodeError, DecoderBook, Frames, ModelInfo, RowBook, RowLog, RowResult,
                             failure_message)
from scd_core.models import load_model
from scd_core.serve import Server
from scd_core.settings import Settings
from scd_core.trace import Iteration


class LocalClient:
    """A `DecodeClient` on this process's device (thread-safe). `load(name)` gives the model
    for a name (`scd_core.load_model` by default); `device_lock` is held for each pass of
    every model's server, so two models' passes never overlap on the device; `keep` is how
    many finished rows stay readable (see `RowBook`).

    `on_event(event)`, if given, is called on the server's threads, in order, with ("pass",
    record, rows) after each pass (`record` of all its rows; `rows`: (row b of it, request
    id, that row's own record) of this client's rows in it) and ("end", request id, error,
    batch sizes) when a row ends (error: None, or the DecodeError message it ended with). It
    must be quick and must not raise (a queue's put). `keep_requests`: keep each row's server
    `Request` after its end, until `release` (a page that asks for its batch sizes later).
    `in_call`: no thread of its own; the readers of the rows run the passes (module docstring)."""

    def __init__(self, load: Callable[[str], Any] = load_model, max_batch: int = 32,
                 device_lock: threading.Lock | None = None, keep: int = 1024,
                 on_event: Callable[[tuple], None] | None = None, keep_requests: bool = False,
                 in_call: bool = False) -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive integer, got {max_batch!r}")
        self.max_batch, self._load, self._on_event, self._keep_requests = max_batch, load, on_event, keep_requests
        self.in_call = in_call
        self.device_lock = device_lock or threading.Lock()
        self._driving = threading.Lock()             # in_call: one reader runs the passes at a time
        self._decoders = DecoderBook(keep, running=self._running_decoder)
        self._models: dict[str, Any] = {}
        self._servers: dict[str, Server] = {}
        self._loading: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._rows = RowBook(keep)
        self._requests: dict[str, Any] = {}          # request id -> the server's Request, while it runs
        self._closed = False

    def model(self, name: str) -> Any:
        """The model served under `name`, loaded on first use (a ValueError for an unknown
        name; a DecodeError if it could not be loaded)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"model: expected a model name, got {name!r}")
        with self._lock:
            if name in self._models:
                return self._models[name]
            loading = self._loading.setdefault(name, threading.Lock())
        with loading:                                 # one load per name; other models go on
            with self._lock:
                if name in self._models:
                    return self._models[name]
            try:
                model = self._load(name)
            except ValueError:
                raise
            except Exception as exc:
                raise DecodeError(f"the model {name} could not be loaded ({type(exc).__name__}: {exc}); "
                                  "please try again") from exc
            with self._lock:
                self._models[name] = model
                self._servers[name] = self.new_server(model)
            return model

    def new_server(self, model) -> Server:
        """The server of a model this client loaded (no thread of its own when `in_call`)."""
        return Server(model, max_batch=self.max_batch, device_lock=self.device_lock,
                      on_pass=None if self._on_event is None else self._on_pass, threaded=not self.in_call)

    def server(self, name: str) -> tuple[Any, Server]:
        """The model served under `name` and its server (loading it on first use)."""
        model = self.model(name)
        with self._lock:
            return model, self._servers[name]

    def num_tokens(self, name: str) -> int:
        """Tokens in a grid of this model (loads it)."""
        return math.prod(int(s) for s in self.model(name).grid)

    def model_info(self, name: str) -> ModelInfo:
        """What a front end must know of the model (loads it)."""
        with self.serving(name) as (loaded, _):
            return ModelInfo.of(name, loaded)

    def pictures(self, model: str, canvases, size: int | None = None,
                 requests: Sequence[str | None] | None = None, clip: bool = False) -> Frames:
        """Canvases of `model` decoded here, each with its row's own decoder (see
        `scd_core.client.DecodeClient.pictures`), between two passes of the device."""
        with self.serving(model) as (loaded, _):
            with self.device_lock:
                return self._decoders.pictures(loaded, canvases, size, requests, clip)

    def decoder(self, request: str) -> str:
        """How `pictures` names the row's own decoder: its request id."""
        return request

    def keep_models(self, models) -> None:
        """Forget the ended rows' decoders of every model but these (ones this client's
        loader no longer serves: each decoder holds its model)."""
        self._decoders.keep_models(models)

    def forget_model(self, name: str, model) -> None:
        """Let go of every reference to `model`, served as `name`, that this client keeps
        after its rows end (before it is unloaded): the ended rows' server requests and
        decoders. Its rows must have ended."""
        with self._lock:
            ended = [rid for rid, request in self._requests.items()
                     if request.future.done() and getattr(self._rows.find(rid), "model", name) == name]
            for rid in ended:
                del self._requests[rid]
            if self._models.get(name) is model:
                del self._models[name]
                self._servers.pop(name, None)
        self._decoders.forget(model)

    def submit(self, model: str, prompt: str, seed: int, settings: Settings | None = None,
               request_id: str | None = None) -> str:
        """Queue one row; returns its request id (`request_id`, or a fresh uuid4 hex). A
        ValueError names a bad argument at once. `settings` None: `Settings()`."""
        return self.submit_rows(model, prompt, [seed], settings, None if request_id is None else [request_id])[0]

    def submit_rows(self, model: str, prompt: str, seeds, settings: Settings | None = None,
                    request_ids: list[str] | None = None) -> list[str]:
        """Queue one row per seed, together: they start in the same pass. Their request ids,
        in the seeds' order; a ValueError names a bad argument at once."""
        if self._closed:
            raise DecodeError("the decoding service is closed")
        try:
            seeds = list(seeds)
        except TypeError:
            raise ValueError(f"seeds: expected a list of whole numbers, got {seeds!r}") from None
        rids = list(request_ids) if request_ids else [uuid.uuid4().hex for _ in seeds]
        with self.serving(model, rows=True) as (loaded, server):
            rows = [RowLog(model, math.prod(int(s) for s in loaded.grid)) for _ in rids]
            requests = server.submit_rows(prompt, seeds, settings,            # checks prompt, seeds, settings
                                          on_record=[row.append for row in rows], tags=rids)
            for rid, request, row in zip(rids, requests, rows):
                row.server = server                   # the passes an in-call reader runs
                self._rows.add(rid, row)
                with self._lock:
                    self._requests[rid] = request
                request.future.add_done_callback(lambda future, rid=rid, request=request, row=row:
                                                 self._ended(rid, request, row))
        return rids

    @contextlib.contextmanager
    def serving(self, name: str, rows: bool = False) -> Iterator[tuple[Any, Server]]:
        """The model served under `name` and its server, for one call (`rows`: one that
        submits rows): a subclass that unloads models keeps it while a call uses it."""
        yield self.server(name)

    def records(self, request: str) -> Iterator[Iteration]:
        """The row's records (one `Iteration` of batch 1 per pass), from its first; ends
        with the row, or raises DecodeError after the last record if the row was lost.
        `in_call`: reading them runs the passes, in the reader's thread."""
        row = self._rows.get(request)
        return self._driven(row) if self.in_call else row.records()

    def _driven(self, row: RowLog) -> Iterator[Iteration]:
        read = row.records()
        while True:
            seen = row.count
            self._drive(row, lambda: row.count > seen or row.ended)
            try:
                yield next(read)
            except StopIteration:
                return

    def _drive(self, row: RowLog, ready: Callable[[], bool], deadline: float | None = None) -> None:
        """Run the passes of the row's server in this thread until `ready()` (another reader
        may run them meanwhile: then this one waits for its pass) or the deadline."""
        while not ready() and (deadline is None or time.monotonic() < deadline):
            with self._driving:
                server = row.server                   # None once the row has ended
                if ready() or server is None:
                    return
                if not server.step() and not ready():        # nothing to run, yet the row has not ended
                    row.end("the decoding of this row stopped before its end; please try again")

    def cancel(self, request: str) -> None:
        """The row leaves at its next pass boundary; its records so far stay. Nothing
        happens to a row that has ended."""
        row = self._rows.get(request)
        row.cancel_requested = True
        with self._lock:
            running = self._requests.get(request)
        if running is not None:
            running.cancel()

    def result(self, request: str, timeout: float | None = None) -> RowResult:
        """Wait for the row to end (TimeoutError after `timeout` s); partial if cancelled.
        `in_call`: waiting runs the passes, in the caller's thread."""
        row = self._rows.get(request)
        if self.in_call:
            deadline = None if timeout is None else time.monotonic() + timeout
            self._drive(row, lambda: row.ended, deadline)
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        return row.result(timeout)

    def release(self, request: str) -> None:
        """Forget a finished row (its records and result); a running row is kept."""
        with self._lock:
            running = self._requests.get(request)
            if running is not None and running.future.done():
                del self._requests[request]
        self._rows.release(request)

    def close(self) -> None:
        """Cancel the rows still running and stop the servers (at their next pass boundary)."""
        self._closed = True
        with self._lock:
            running, servers = list(self._requests.values()), list(self._servers.values())
        for row in self._rows.running():
            row.cancel_requested = True
        for request in running:
            request.cancel()
        for server in servers:
            server.close()

    def _running_decoder(self, request: str):
        with self._lock:
            running = self._requests.get(request)
        return getattr(running, "decode", None)

    def _on_pass(self, record: Iteration, rows: list) -> None:
        """The server's pass, as this client's event (rows named by their request ids)."""
        self._on_event(("pass", record, [(b, request.tag, request.records[-1]) for b, request in rows]))

    def _ended(self, rid: str, request, row: RowLog) -> None:
        """The row's server request has ended (its last record delivered; or its batch
        failed, or its start was refused): end its log, stop keeping the request."""
        error = request.future.exception()
        message = None if error is None else failure_message(error)
        self._decoders.ended(rid, request.decode, getattr(row.server, "model", None))   # for pictures after its end
        if not self._keep_requests:
            with self._lock:
                self._requests.pop(rid, None)
        batch_sizes = tuple(request.batch_sizes)
        row.end(message, batch_sizes)
        row.server = None                             # an ended row keeps its tokens, not its model
        self._rows.finished(rid)
        if self._on_event is not None:
            self._on_event(("end", rid, message, batch_sizes))
