"""`LocalClient`: the decode client that decodes in this process.

One `scd_core.serve.Server` per model name, the model loaded on its first request; rows
with equal settings share passes. It is what `ProcessClient`'s workers run, and what a
library user embedding the engine (or a test) uses directly.

    client = LocalClient()
    request = client.submit("tiny", "red heart", 3, Settings.for_model(model))
    for record in client.records(request): ...
    row = client.result(request, timeout=60)
"""
from __future__ import annotations

import math
import threading
import uuid
from typing import Any, Callable, Iterator

from scd_core.client import DecodeError, RowBook, RowLog, RowResult, failure_message
from scd_core.models import load_model
from scd_core.serve import Server
from scd_core.settings import Settings
from scd_core.trace import Iteration


class LocalClient:
    """A `DecodeClient` on this process's device (thread-safe). `load(name)` gives the model
    for a name (`scd_core.load_model` by default); `device_lock` is held for each pass of
    every model's server, so two models' passes never overlap on the device; `keep` is how
    many finished rows stay readable (see `RowBook`)."""

    def __init__(self, load: Callable[[str], Any] = load_model, max_batch: int = 32,
                 device_lock: threading.Lock | None = None, keep: int = 1024) -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive integer, got {max_batch!r}")
        self.max_batch, self._load = max_batch, load
        self.device_lock = device_lock or threading.Lock()
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
                self._servers[name] = Server(model, max_batch=self.max_batch, device_lock=self.device_lock)
            return model

    def server(self, name: str) -> tuple[Any, Server]:
        """The model served under `name` and its server (loading it on first use)."""
        model = self.model(name)
        with self._lock:
            return model, self._servers[name]

    def num_tokens(self, name: str) -> int:
        """Tokens in a grid of this model (loads it)."""
        return math.prod(int(s) for s in self.model(name).grid)

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
        loaded, server = self.server(model)
        requests = server.submit_rows(prompt, seeds, settings)   # checks prompt, seeds, settings
        rids = request_ids or [uuid.uuid4().hex for _ in requests]
        for rid, request in zip(rids, requests):
            row = RowLog(model, math.prod(int(s) for s in loaded.grid))
            with self._lock:
                self._requests[rid] = request
            self._rows.add(rid, row)
            threading.Thread(target=self._pump, args=(rid, request, row), name=f"scd-row-{rid[:8]}",
                             daemon=True).start()
        return rids

    def records(self, request: str) -> Iterator[Iteration]:
        """The row's records (one `Iteration` of batch 1 per pass), from its first; ends
        with the row, or raises DecodeError after the last record if the row was lost."""
        return self._rows.get(request).records()

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
        """Wait for the row to end (TimeoutError after `timeout` s); partial if cancelled."""
        return self._rows.get(request).result(timeout)

    def release(self, request: str) -> None:
        """Forget a finished row (its records and result); a running row is kept."""
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

    def _pump(self, rid: str, request, row: RowLog) -> None:
        """Move the server's records of one row into its log, then end it."""
        error = None
        try:
            for record in request:
                row.append(record)
        except Exception as exc:                      # its batch failed, or its start was refused
            error = failure_message(exc)
        self._ended(rid)
        row.end(error, tuple(request.batch_sizes))
        self._rows.finished(rid)

    def _ended(self, rid: str) -> None:
        """A row's server request has ended: it is no longer kept."""
        with self._lock:
            self._requests.pop(rid, None)
