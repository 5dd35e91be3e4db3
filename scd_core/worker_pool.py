"""`WorkerPool`: which decoding workers run, the residency policy of
`scd_core.workers.ProcessClient` apart from its worker protocol.

A pool starts a model's worker on first use (`use`), after making room for it: the workers
share one device, whose large models (`scd_core.models.cache.is_large`) follow a
`scd_core.models.cache.Residency` (by default one at a time; or a byte budget): before a
worker for a large model starts, the workers that must make room are drained (their rows and
pictures end; new requests for them wait for the swap) and closed, their processes gone and
their memory with them. A worker unused for `idle_timeout` seconds is closed too.

A worker, to the pool, is what `start(model, on_ready)` returns (`scd_core.workers._Worker`):
`usable`, `alive`, `running` (its rows in flight), `nbytes`, `end_rows(reason)`,
`ask_to_close(reason)` and `join(timeout)`; the pool keeps on it `pending` (callers using it
now), `last_used`, `leaving` (new rows wait) and `closing` (every caller waits), under its lock.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any, Callable, Iterator

from scd_core.client import DecodeError
from scd_core.models.cache import Residency, busy_message, unloaded_message, wait_until

log = logging.getLogger("scd_core.workers")

WORKERS = "workers"   # the one device every worker of a pool loads on, as its Residency names it


class WorkerPool:
    """The running workers of one client, by model name (see the module docstring)."""

    def __init__(self, start: Callable[[str, Callable[[Any], None]], Any], residency: Residency | None = None,
                 large: Callable[[str], bool] = lambda name: False, idle_timeout: float | None = None,
                 close_s: float = 10.0) -> None:
        self._start, self.close_s = start, close_s
        self.residency, self._large, self.idle_timeout = residency or Residency(), large, idle_timeout
        self._workers: dict[str, Any] = {}
        self._lock = threading.Lock()                 # guards _workers, _closed and each worker's pending and leaving
        self._swap = threading.Lock()                 # one worker started or closed for room at a time
        self._closed = False
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None

    def get(self, model: str):
        """The model's worker, if it has one (closing ones included)."""
        with self._lock:
            return self._workers.get(model)

    def workers(self) -> list:
        with self._lock:
            return list(self._workers.values())

    def is_resident(self, model: str) -> bool:
        """Whether the model's worker runs and is not being closed (a request would not wait for a load)."""
        with self._lock:
            worker = self._workers.get(model)
            return worker is not None and worker.usable and not worker.leaving

    def unload(self, model: str) -> None:
        """Close the model's worker once its rows and pictures are done (at most
        `residency.drain_s` s; then its rows end with a DecodeError saying so)."""
        with self._swap:
            self.retire(model, arriving=None, idle_s=None, force=True)

    def close(self) -> list:
        """No worker starts any more; the workers it had, for the caller to close."""
        self._stop.set()
        with self._lock:
            self._closed = True
            workers, self._workers = list(self._workers.values()), {}
        return workers

    @contextlib.contextmanager
    def use(self, model: str, rows: bool = False) -> Iterator[Any]:
        """The model's worker for one call (started, after making room, if needed): while a
        call uses it, it is not closed for room or for idleness. New `rows` wait while it is
        being closed (then start it again); other calls (pictures, its info) are still
        answered by a worker being closed until it is gone."""
        worker = self._acquire(model, rows)
        try:
            yield worker
        finally:
            with self._lock:
                worker.pending -= 1
                worker.last_used = time.monotonic()

    def _acquire(self, model: str, rows: bool) -> Any:
        worker = self._running(model, rows)
        if worker is not None:
            return worker
        with self._swap:                              # after the swap under way, if any
            worker = self._running(model, rows)
            if worker is not None:
                return worker
            large = self._large(model)
            if large:
                leaving = self.residency.room_for(model, WORKERS)
                if leaving:
                    with self.residency.swapping(leaving, model):
                        for old in leaving:
                            self.retire(old, arriving=model)
            with self._lock:
                if self._closed:
                    raise DecodeError("the decoding service is closed")
                worker = self._start(model, lambda w: self.residency.measured(model, w.nbytes))
                self._workers[model] = worker
                worker.pending += 1
            self.residency.loaded(model, WORKERS, None, large)
            self._start_reaper()
            return worker

    def _running(self, model: str, rows: bool) -> Any | None:
        """The model's worker, counted as in use, if it runs (for new `rows`: and is not
        being closed)."""
        with self._lock:
            if self._closed:
                raise DecodeError("the decoding service is closed")
            worker = self._workers.get(model)
            if worker is None or not worker.usable or (rows and worker.leaving) or worker.closing:
                return None
            worker.pending += 1
            worker.last_used = time.monotonic()
        self.residency.used(model)
        return worker

    def _unused_for(self, worker) -> float:
        """Seconds the worker has gone without a caller or a row (0 while it has one); with
        self._lock held."""
        if worker.pending or worker.running:
            return 0.0
        return time.monotonic() - worker.last_used

    def retire(self, model: str, arriving: str | None, idle_s: float | None = None, force: bool = False) -> bool:
        """Close the model's worker (with self._swap held) once it is unused: no caller, no
        row, nothing for `residency.quiet_s` (a run's last pictures come after its last pass),
        or for `idle_s`. For room (`arriving`), a worker still in use after `residency.drain_s`
        stays and the request for `arriving` is refused (DecodeError); for idleness, one in use
        stays (False); `force` closes it anyway after the drain, its rows told why."""
        with self._lock:
            worker = self._workers.get(model)
            if worker is None:
                self.residency.unloaded(model, arriving, idle_s)
                return True
            worker.leaving = True                     # new rows wait for this to end

        def settled() -> bool:                        # unused, and from now on no caller takes it
            with self._lock:
                if worker.alive and self._unused_for(worker) < (idle_s or self.residency.quiet_s):
                    return False
                worker.closing = True
                return True
        drain = self.residency.drain_s
        if not (settled() if idle_s is not None else wait_until(settled, drain)):
            if force:
                with self._lock:
                    worker.closing = True
            else:
                with self._lock:
                    worker.leaving = False
                if idle_s is not None:
                    return False
                raise DecodeError(busy_message(model, arriving, drain))
        log.info("closing the decoding worker for %s (%s)", model,
                 f"room for {arriving}" if arriving else f"unused for {idle_s:g} s" if idle_s else "asked")
        reason = unloaded_message(model, arriving)
        worker.end_rows(reason)                       # none, unless forced
        worker.ask_to_close(reason)
        worker.join(self.close_s)                          # its process gone, its memory with it
        with self._lock:
            if self._workers.get(model) is worker:
                del self._workers[model]
        self.residency.unloaded(model, arriving, idle_s)
        return True

    def _start_reaper(self) -> None:
        if self.idle_timeout is None or (self._reaper is not None and self._reaper.is_alive()):
            return
        self._reaper = threading.Thread(target=self._reap, name="scd-idle-workers", daemon=True)
        self._reaper.start()

    def _reap(self) -> None:
        """Close the workers unused for `idle_timeout` seconds, looking every quarter of it (at most 5 s)."""
        every = min(5.0, max(0.05, self.idle_timeout / 4))
        while not self._stop.wait(every):
            with self._lock:
                names = list(self._workers)
            for model in names:
                with self._lock:
                    worker = self._workers.get(model)
                    if worker is None or self._unused_for(worker) < self.idle_timeout:
                        continue
                with self._swap:
                    if not self._stop.is_set():
                        self.retire(model, arriving=None, idle_s=self.idle_timeout)
