"""`ProcessClient`: the decode client whose decoding runs in worker processes.

Each model is served by its own worker process (started with `multiprocessing`, "spawn" by
default), which loads the model once and runs a `LocalClient` on it with torch set to
`threads` threads (the parent's torch settings are never touched). The parent talks to a
worker over two one-way pipes:

    parent -> worker   ("submit", ids, prompt, seeds, settings) | ("cancel", id) | ("close",)
                       ("pictures", ask, canvases, size, ids, clip)
    worker -> parent   ("ready", N, threads, info, bytes) | ("failed", kind, message)   once, after loading
                       ("events", [event, ...])                        then, about every GATHER s
    an event           ("ack", ids, kind, message)                     per submit (kind None: queued)
                       ("pass", packed)                                per pass, for all its rows
                       ("end", id, error, batch_sizes)                 per row
                       ("answer", ask, kind, value)                    per pictures (kind None: the frames)

The parent never loads the model: the worker's "ready" carries what a front end must know of
it (`scd_core.client.ModelInfo`), and "pictures" asks the worker to decode token canvases
beside the model, each with its row's own decoder (the worker keeps those of its last rows),
into small frames (`scd_core.frames`); a thread of the worker answers them, between passes.

The worker's decoding never waits for the pipe: its server hands each pass to one sender
thread (no thread per row), which gathers what the passes of the last GATHER seconds made
(all rows, all passes, in order) into one message. A pass crosses as what it changed
(`scd_core.client.pack_pass`): one array per field for all its rows, and the tokens each row
committed instead of its whole canvas; the parent keeps one token buffer per row and
rebuilds each row's `Iteration` as the worker had it (`unpack_pass`).

Which workers run (the residency policy: one large model at a time on the device, or a byte
budget; a worker unused for `idle_timeout` seconds closed) is `scd_core.worker_pool.WorkerPool`.

A worker that dies (killed, crashed, out of memory) is seen at once through its process
sentinel: its own rows end with a DecodeError, the other models' workers see nothing, and
the next request to that model starts a new worker. Every wait is bounded (`timeout`) or
woken by the worker's end. Scripts that use a ProcessClient must guard their entry point
with `if __name__ == "__main__":` (spawn imports the main module in each worker).
"""
from __future__ import annotations

import atexit
import logging
import multiprocessing
import pickle
import queue
import signal
import threading
import time
import uuid
import weakref
from multiprocessing.connection import wait
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from scd_core.client import (DecodeError, Frames, ModelInfo, RowBook, RowLog, RowResult, failure_message, pack_pass,
                             unpack_pass)
from scd_core.local import LocalClient
from scd_core.models import load_model
from scd_core.models.cache import Residency, is_large, model_bytes
from scd_core.worker_pool import WorkerPool
from scd_core.settings import Settings
from scd_core.trace import Iteration

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- worker

def serve_model(name: str, load: Callable[[str], Any], max_batch: int, threads: int, commands, events) -> None:
    """A worker process's life: load the model, then serve the parent's commands until it
    says close or is gone."""
    for sig in (signal.SIGINT, signal.SIGTERM):      # Ctrl-C (or a stop sent to the whole process group) reaches the
        signal.signal(sig, signal.SIG_IGN)            # workers too: their parent closes them (or they see it gone)
    torch.set_num_threads(threads)
    outbox: queue.SimpleQueue = queue.SimpleQueue()   # the server's events, in order
    client = LocalClient(load, max_batch=max_batch, on_event=outbox.put)
    sender = threading.Thread(target=_send_events, args=(client, outbox, events), name="scd-sender", daemon=True)
    asks: queue.SimpleQueue = queue.SimpleQueue()     # pictures to draw, answered by their own thread
    answerer = threading.Thread(target=_answer, args=(client, name, asks, outbox), name="scd-pictures", daemon=True)
    try:
        num_tokens = client.num_tokens(name)          # loads the model
        torch.set_num_threads(threads)                # again: a loader may set its own (tiny's does)
        events.send(("ready", num_tokens, torch.get_num_threads(), client.model_info(name),
                     model_bytes(client.model(name))))
    except ValueError as exc:
        events.send(("failed", "value", str(exc)))
        return
    except Exception as exc:
        events.send(("failed", "error", failure_message(exc)))
        return
    sender.start()
    answerer.start()
    while True:
        try:
            message = commands.recv()
        except (EOFError, OSError):                   # the parent is gone
            break
        if message[0] == "submit":                    # rows submitted together start in one pass
            _, rids, prompt, seeds, settings = message
            try:
                client.submit_rows(name, prompt, seeds, settings, request_ids=rids)
            except ValueError as exc:
                outbox.put(("ack", rids, "value", str(exc)))
                continue
            except Exception as exc:
                outbox.put(("ack", rids, "error", failure_message(exc)))
                continue
            outbox.put(("ack", rids, None, None))
        elif message[0] == "cancel":
            try:
                client.cancel(message[1])
            except ValueError:                        # it ended and was forgotten: nothing to stop
                pass
        elif message[0] == "pictures":
            asks.put(message[1:])
        elif message[0] == "close":
            break
    asks.put(None)
    client.close()                                    # its rows end, cancelled, at their next pass boundary
    outbox.put(_CLOSED)
    sender.join(5.0)                                  # their ends reach the parent


def _answer(client: LocalClient, name: str, asks: queue.SimpleQueue, outbox: queue.SimpleQueue) -> None:
    """The worker's pictures, one ask at a time (between passes: `LocalClient.pictures`)."""
    while (ask := asks.get()) is not None:
        key, canvases, size, requests, clip = ask
        try:
            frames = client.pictures(name, torch.from_numpy(np.array(canvases)), size, requests, clip)
            outbox.put(("answer", key, None, frames))
        except ValueError as exc:
            outbox.put(("answer", key, "value", str(exc)))
        except Exception as exc:                      # noqa: BLE001: told to the asker
            outbox.put(("answer", key, "error", failure_message(exc)))


_CLOSED = ("closed",)
GATHER = 0.02         # seconds between two messages of the sender at most (what came meanwhile goes in one)


def _send_events(client: LocalClient, outbox: queue.SimpleQueue, events) -> None:
    """The worker's one sender: what the server did since the last message (records of
    every row and pass, row ends, acks) as one ("events", [...]) message, in order. A pass
    crosses as what it changed (`pack_pass`); one that cannot be packed loses its rows only
    (each ends with why, its later records are dropped)."""
    lost: set[str] = set()
    sent = 0.0
    while True:
        first = outbox.get()
        wait_for = sent + GATHER - time.monotonic()   # at most one message a GATHER: the passes of a moment
        if wait_for > 0:                              # in one message, not one per row and pass
            time.sleep(wait_for)
        batch, closing = [first], False
        while True:
            try:
                batch.append(outbox.get_nowait())
            except queue.Empty:
                break
        message, ended = [], []
        for event in batch:
            if event is _CLOSED:
                closing = True
            elif event[0] == "pass":
                rows = [row for row in event[2] if row[1] not in lost]
                if not rows:
                    continue
                try:
                    message.append(("pass", pack_pass(event[1], rows)))
                except Exception as exc:              # a pass that cannot be sent loses its rows only
                    for _, rid, _ in rows:
                        lost.add(rid)
                        client.cancel(rid)
                        message.append(("end", rid, failure_message(exc), ()))
            elif event[0] == "end":
                if event[1] not in lost:
                    message.append(event)
                lost.discard(event[1])
                ended.append(event[1])
            elif event[0] in ("ack", "answer"):
                message.append(event)
        try:
            if message:
                events.send(("events", message))
                sent = time.monotonic()
        except OSError:                               # the parent is gone
            return
        for rid in ended:
            client.release(rid)
        if closing:
            return


# ---------------------------------------------------------------------------- parent

class WorkerGone(DecodeError):
    """The worker ended before it took a request: nothing of it started (`ProcessClient` asks a
    new worker once)."""


class _Worker:
    """One model's worker process, seen from the parent: its pipes, its rows in flight,
    and a reader thread that files what the worker sends."""

    def __init__(self, context, name: str, load, max_batch: int, threads: int, book: RowBook,
                 on_ready: Callable[["_Worker"], None] = lambda worker: None) -> None:
        self.name, self.book, self.on_ready = name, book, on_ready
        self.pending = 0                              # callers using it now (guarded by the client's lock)
        self.last_used = time.monotonic()             # when a caller last let go of it, or a row of it ended
        self.leaving = False                          # being closed: new callers wait for that to end
        self.nbytes: int | None = None                # its model's weights, measured in the worker
        commands_in, self._commands = context.Pipe(duplex=False)
        self._events, events_out = context.Pipe(duplex=False)
        self.process = context.Process(target=serve_model, name=f"scd-worker-{name}", daemon=True,
                                       args=(name, load, max_batch, threads, commands_in, events_out))
        self.process.start()
        commands_in.close()
        events_out.close()
        self.ready = threading.Event()
        self.num_tokens = self.torch_threads = 0
        self.info: ModelInfo | None = None
        self._answers: dict[str, list] = {}           # ask -> [Event, kind, value]
        self.failure: tuple[str, str] | None = None   # (kind, message) if it could not load
        self.alive, self.closing = True, False
        self.closing_reason: str | None = None        # what its rows still running hear when it is closed
        self._lock = threading.Lock()                 # guards alive, rows, tokens, acks and sending
        self._rows: dict[str, RowLog] = {}
        self._tokens: dict[str, torch.LongTensor] = {}
        self._acks: dict[str, list] = {}              # id -> [Event, kind, message]
        self._reader = threading.Thread(target=self._read, name=f"scd-reader-{name}", daemon=True)
        self._reader.start()

    @property
    def usable(self) -> bool:
        return self.alive and self.failure is None

    @property
    def running(self) -> int:
        """Its rows in flight."""
        with self._lock:
            return len(self._rows)

    def submit(self, rids: list[str], prompt: str, seeds: list[int], settings, timeout: float) -> list[RowLog]:
        """Queue one row per seed in the worker, together (they start in one pass)."""
        if not self.ready.wait(timeout):
            raise DecodeError(f"the decoding worker for {self.name} did not start in time; please try again")
        if self.failure is not None:
            kind, message = self.failure
            raise (ValueError if kind == "value" else DecodeError)(message)
        rows, ack, key = [RowLog(self.name, self.num_tokens) for _ in rids], [threading.Event(), None, None], rids[0]
        with self._lock:
            if not self.alive:
                raise WorkerGone(self._death_message())
            for rid, row in zip(rids, rows):
                self._rows[rid] = row
                self._tokens[rid] = torch.full((1, self.num_tokens), -1, dtype=torch.long)
            self._acks[key] = ack
            self._send(("submit", list(rids), prompt, list(seeds), settings))
        answered = ack[0].wait(timeout)
        with self._lock:
            self._acks.pop(key, None)
        if not answered:
            for rid in rids:
                self.cancel(rid)
                self._drop(rid)
            raise DecodeError(f"the decoding worker for {self.name} did not answer in time; please try again")
        if ack[1] is not None:
            for rid in rids:
                self._drop(rid)
            raise {"value": ValueError, "gone": WorkerGone}.get(ack[1], DecodeError)(ack[2])
        return rows

    def cancel(self, rid: str) -> None:
        with self._lock:
            if self.alive and rid in self._rows:
                self._send(("cancel", rid))

    def wait_ready(self, timeout: float) -> None:
        """Wait for the model to load; its refusal (ValueError) or failure (DecodeError)."""
        if not self.ready.wait(timeout):
            raise DecodeError(f"the decoding worker for {self.name} did not start in time; please try again")
        if self.failure is not None:
            kind, message = self.failure
            raise (ValueError if kind == "value" else DecodeError)(message)
        if not self.alive:
            raise WorkerGone(self._death_message())

    def pictures(self, canvases: np.ndarray, size, requests, clip: bool, timeout: float) -> Frames:
        """The worker's frames of these canvases (`LocalClient.pictures` there)."""
        self.wait_ready(timeout)
        key, answer = uuid.uuid4().hex, [threading.Event(), None, None]
        with self._lock:
            if not self.alive:
                raise WorkerGone(self._death_message())
            self._answers[key] = answer
            self._send(("pictures", key, canvases, size, requests, clip))
        answered = answer[0].wait(timeout)
        with self._lock:
            self._answers.pop(key, None)
        if not answered:
            raise DecodeError(f"the decoding worker for {self.name} did not draw the picture in time; "
                              "please try again")
        if answer[1] is not None:
            raise {"value": ValueError, "gone": WorkerGone}.get(answer[1], DecodeError)(answer[2])
        return answer[2]

    def end_rows(self, message: str) -> None:
        """End its rows in flight now, with a DecodeError of `message`, and cancel them."""
        with self._lock:
            rows, self._rows, self._tokens = self._rows, {}, {}
            for rid in rows:
                if self.alive:
                    self._send(("cancel", rid))
        for rid, row in rows.items():
            if row.end(message):
                self.book.finished(rid)

    def ask_to_close(self, reason: str | None = None) -> None:
        """Ask the worker to stop: its rows are cancelled and end at their next pass boundary
        (`reason`: what those rows are told)."""
        with self._lock:
            self.closing = True
            self.closing_reason = reason or self.closing_reason
            if self.alive:
                self._send(("close",))

    def join(self, timeout: float) -> None:
        """Wait for the worker to stop; terminate it if it does not within `timeout` s."""
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(2.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(2.0)
        self._reader.join(5.0)

    def _send(self, message: tuple) -> None:        # called with self._lock held
        try:
            self._commands.send(message)
        except OSError:                               # it is gone; the reader says so to its rows
            pass

    def _drop(self, rid: str) -> None:
        with self._lock:
            self._rows.pop(rid, None)
            self._tokens.pop(rid, None)

    def _read(self) -> None:
        while True:
            ready = wait([self._events, self.process.sentinel])
            if self._events not in ready:
                break                                 # the process ended and nothing is left to read
            try:
                message = self._events.recv()
            except (EOFError, OSError):
                break
            try:
                self._file(message)
            except Exception as exc:                  # a record that cannot be rebuilt loses its row only
                log.exception("a message from the decoding worker for %s could not be read", self.name)
                self._lose(message[1], failure_message(exc))
        self._ended()

    def _lose(self, rid: str, message: str) -> None:
        self.cancel(rid)
        with self._lock:
            row = self._rows.pop(rid, None)
            self._tokens.pop(rid, None)
        if row is not None and row.end(message):
            self.book.finished(rid)

    def _file(self, message: tuple) -> None:
        kind, rid = message[0], message[1]
        if kind == "events":                           # what the worker did since its last message, in order
            for event in message[1]:
                try:
                    self._file(event)
                except Exception as exc:              # a pass that cannot be rebuilt loses its rows only
                    log.exception("a message from the decoding worker for %s could not be read", self.name)
                    rids = [counters[0] for counters in event[1][3]] if event[0] == "pass" else [event[1]]
                    for rid in rids if event[0] not in ("ack", "answer") else []:
                        self._lose(rid, failure_message(exc))
        elif kind == "pass":                           # one pass of this worker's rows
            with self._lock:
                rows, tokens = dict(self._rows), dict(self._tokens)
            for rid, record in unpack_pass(message[1], tokens.get):
                if rid in rows:
                    rows[rid].append(record)
        elif kind == "end":
            with self._lock:
                row = self._rows.pop(rid, None)
                self._tokens.pop(rid, None)
                self.last_used = time.monotonic()
            if row is not None and row.end(message[2], message[3]):
                self.book.finished(rid)
        elif kind == "ack":                            # for the rows of one submit, by its first id
            with self._lock:
                ack = self._acks.get(rid[0])
            if ack is not None:
                ack[1], ack[2] = message[2], message[3]
                ack[0].set()
        elif kind == "answer":                         # the frames of one pictures ask
            with self._lock:
                answer = self._answers.get(rid)
            if answer is not None:
                answer[1], answer[2] = message[2], message[3]
                answer[0].set()
        elif kind == "ready":
            self.num_tokens, self.torch_threads, self.info = int(message[1]), int(message[2]), message[3]
            self.nbytes = int(message[4])
            self.on_ready(self)
            self.ready.set()
        elif kind == "failed":
            self.failure = (message[1], message[2])
            self.ready.set()

    def _death_message(self) -> str:
        if self.closing:
            return self.closing_reason or "the decoding service was closed before this picture was finished"
        return f"the decoding worker for {self.name} stopped unexpectedly; please try again"

    def _ended(self) -> None:
        """The worker is gone: its rows and waiting submits hear it; nothing waits on it."""
        with self._lock:
            self.alive = False
            rows, self._rows, acks = self._rows, {}, list(self._acks.values()) + list(self._answers.values())
            self._tokens = {}
        self.process.join(5.0)
        if not self.closing:
            log.warning("the decoding worker for %s ended (exit code %s)", self.name, self.process.exitcode)
        message = self._death_message()
        for ack in acks:                              # submits and pictures it never took
            ack[1], ack[2] = "gone", message
            ack[0].set()
        for rid, row in rows.items():
            if row.end(message):
                self.book.finished(rid)
        self.ready.set()


CLOSE_S = 10.0        # a closing worker that has not exited by then is terminated, then killed


class ProcessClient:
    """A `DecodeClient` whose models are each served by a worker process (see the module
    docstring). `models`: the names it serves (None: any name `load` knows); `threads`:
    torch threads in each worker; `timeout`: the longest wait for a worker to start (load
    its model) or to answer a submit, in seconds; `keep`: finished rows kept readable.

    `residency`: which large models' workers may run at once (`scd_core.models.cache.Residency`:
    by default one; or a byte budget for their weights together, as each worker measured
    them); `large(name)`: whether a model counts (default: its weights are not shipped);
    `idle_timeout`: seconds a worker may go unused (no row, no submit, no picture) before it
    is closed (None: never)."""

    def __init__(self, models: list[str] | None = None, max_batch: int = 32, threads: int = 1,
                 start_method: str = "spawn", load: Callable[[str], Any] = load_model,
                 timeout: float = 600.0, keep: int = 1024, residency: Residency | None = None,
                 large: Callable[[str], bool] = is_large, idle_timeout: float | None = None) -> None:
        for name, value in (("max_batch", max_batch), ("threads", threads)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if idle_timeout is not None and (isinstance(idle_timeout, bool) or not isinstance(idle_timeout, (int, float))
                                         or not idle_timeout > 0):
            raise ValueError(f"idle_timeout: expected seconds > 0 or None, got {idle_timeout!r}")
        self.models = None if models is None else tuple(models)
        self.max_batch, self.threads, self.timeout, self._load = max_batch, threads, timeout, load
        self._context = multiprocessing.get_context(start_method)
        self._rows = RowBook(keep)
        self._pool = WorkerPool(self._start_worker, residency, large, idle_timeout, CLOSE_S)
        self.residency, self.idle_timeout = self._pool.residency, idle_timeout
        _open_clients.add(self)

    def _start_worker(self, model: str, on_ready: Callable[[_Worker], None]) -> _Worker:
        return _Worker(self._context, model, self._load, self.max_batch, self.threads, self._rows, on_ready)

    def submit(self, model: str, prompt: str, seed: int, settings: Settings | None = None) -> str:
        """Queue one row in its model's worker (started if needed); returns its request id.
        A ValueError (the worker's own check) names a bad argument at once."""
        return self.submit_rows(model, prompt, [seed], settings)[0]

    def submit_rows(self, model: str, prompt: str, seeds, settings: Settings | None = None) -> list[str]:
        """Queue one row per seed, together: they start in the same pass (one message to the
        worker). Their request ids, in the seeds' order; a ValueError names a bad argument."""
        self._check_name(model)
        seeds = list(seeds)
        for name, value in (("prompt", prompt), ("seed", seeds), ("settings", settings)):
            try:
                pickle.dumps(value)
            except Exception as exc:
                raise ValueError(f"{name} must be a plain value (a string, an integer, a Settings), "
                                 f"got {type(value).__name__}") from exc
        rids = [uuid.uuid4().hex for _ in seeds]
        rows = self._on_worker(model, lambda worker: worker.submit(rids, prompt, seeds, settings, self.timeout),
                               rows=True)
        for rid, row in zip(rids, rows):
            self._rows.add(rid, row)
        return rids

    def records(self, request: str) -> Iterator[Iteration]:
        """As `LocalClient.records`; the records are rebuilt from what each pass changed."""
        return self._rows.get(request).records()

    def cancel(self, request: str) -> None:
        """The row leaves at its next pass boundary in its worker; nothing happens to a row
        that has ended."""
        row = self._rows.get(request)
        row.cancel_requested = True
        worker = self._pool.get(row.model)
        if worker is not None and not row.ended:
            worker.cancel(request)

    def result(self, request: str, timeout: float | None = None) -> RowResult:
        return self._rows.get(request).result(timeout)

    def release(self, request: str) -> None:
        self._rows.release(request)

    def model_info(self, model: str) -> ModelInfo:
        """What a front end must know of the model, from its worker (started, and the model
        loaded there, if needed); the parent never loads it."""
        self._check_name(model)

        def info(worker) -> ModelInfo:
            worker.wait_ready(self.timeout)
            return worker.info
        return self._on_worker(model, info)

    def pictures(self, model: str, canvases: torch.LongTensor, size: int | None = None,
                 requests: Sequence[str | None] | None = None, clip: bool = False) -> Frames:
        """Canvases of `model` decoded in its worker, each with its row's own decoder (see
        `scd_core.client.DecodeClient.pictures`); only the frames come back."""
        self._check_name(model)
        if not isinstance(canvases, torch.Tensor) or canvases.dtype != torch.long or canvases.dim() != 2:
            raise ValueError(f"canvases: expected a LongTensor [rows, tokens], got "
                             f"{getattr(canvases, 'dtype', type(canvases).__name__)}")
        requests = None if requests is None else [r if isinstance(r, str) else None for r in requests]
        return self._on_worker(model, lambda worker: worker.pictures(canvases.numpy(), size, requests, bool(clip),
                                                                     self.timeout))

    def _on_worker(self, model: str, call: Callable[[_Worker], Any], rows: bool = False):
        """`call(worker)` on the model's worker (started if needed); asked once more of a new
        worker if that one was found gone before it took the call (killed, crashed while idle):
        nothing of the call had started."""
        try:
            with self._pool.use(model, rows=rows) as worker:
                return call(worker)
        except WorkerGone:
            log.info("the decoding worker for %s was gone; asking a new one", model)
        with self._pool.use(model, rows=rows) as worker:
            return call(worker)

    def decoder(self, request: str) -> str:
        """How `pictures` names the row's own decoder (kept in its worker): its request id."""
        return request

    def pid(self, model: str) -> int | None:
        """The process id of the model's running worker (None if it has none)."""
        worker = self._pool.get(model)
        return worker.process.pid if worker is not None and worker.alive else None

    def pids(self) -> list[int]:
        """The process ids of every worker process still running (closing ones included)."""
        return [w.process.pid for w in self._pool.workers() if w.process.is_alive()]

    def worker_threads(self, model: str) -> int | None:
        """The torch threads the model's running worker decodes with (None before it is ready)."""
        worker = self._pool.get(model)
        return worker.torch_threads if worker is not None and worker.alive and worker.ready.is_set() else None

    def is_resident(self, model: str) -> bool:
        """Whether the model's worker runs and is not being closed (a request would not wait for a load)."""
        return self._pool.is_resident(model)

    def unload(self, model: str) -> None:
        """Close the model's worker once its rows and pictures are done (at most
        `residency.drain_s` s; then its rows end with a DecodeError saying so)."""
        self._pool.unload(model)

    def close(self, timeout: float = CLOSE_S) -> None:
        """Stop every worker: its rows are cancelled; one that does not stop within
        `timeout` s is terminated. Also run at interpreter exit."""
        workers = self._pool.close()
        for row in self._rows.running():
            row.cancel_requested = True
        for worker in workers:
            worker.ask_to_close()
        for worker in workers:
            worker.join(timeout)
        _open_clients.discard(self)

    def _check_name(self, model) -> None:
        if self.models is not None and model not in self.models:
            raise ValueError(f"model must be one of {', '.join(self.models)}, got {model!r}")
        if not isinstance(model, str) or not model:
            raise ValueError(f"model: expected a model name, got {model!r}")


_open_clients: "weakref.WeakSet[ProcessClient]" = weakref.WeakSet()


@atexit.register
def _close_open_clients() -> None:
    for client in list(_open_clients):
        client.close(timeout=2.0)
