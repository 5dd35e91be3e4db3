"""The run control the page's three decoding tabs share (Generate, the race, the Lossless
comparison; export too): each visitor's one run in progress, their Stop stamps, their place
on each of the page's queues, and how a run ends however it is left.

- One run at a time: a second click while one goes is refused with a word (`Control.busy`);
  a model switch, or a new prompt or method, stops it at once (`Control.halt`): after a
  switch nothing more of it is shown (its last update is the new model's empty views: Gradio
  repeats a stream's last update when it ends, so that is what stays), after a new prompt or
  method its stopped status says why.
- Stop (`Stops`): a run clicked at or before the visitor's last Stop is stopped, running or
  still waiting in the queue.
- One job per visitor on each queue (`Tickets`): a request is admitted before it joins the
  queue only if the visitor has none queued or running there; a second is refused with a
  sentence (the API has no buttons to grey out). A visitor is a session (the browser's tab, a
  gradio_client `Client`); a plain HTTP call with no session is bounded by the queue's size only.
- Cancelled means stopped: a handler Gradio closes (the tab closed, the client cancelled the
  event, the time limit passed) ends its rows and threads in its `finally` (`Control.one_run`
  closes the whole chain of generators), its place on the queue given back.
- A clean stop (`Control.drain`): every run in flight is told why and stopped, and the page
  waits a moment for their last updates before it closes.

The page's process keeps all of this (on ZeroGPU too: the handler that forwards a call's
updates runs here), keyed by the visitor's session.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import inspect
import math
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from demo.labels import METHOD_LABELS

KINDS = {"generate": "Generate", "race": "race", "lossless": "Lossless comparison"}
BUTTONS = {"generate": "Generate", "race": "Race all methods", "lossless": "Compare"}

# The page's queues (Gradio concurrency ids) and how long a job may hold one, in seconds.
# Generate's rows share the passes of one server per model (up to its batch side by side);
# a race, a comparison, an export or a model load runs one at a time. A Generate in slow
# motion on the largest embedded model (tiny-video, AR, 1 s a pass) takes about 10 minutes;
# the slowest sensible race (K = 8, slow motion 0.1 s a pass) and comparison (1,024 samples
# of tiny) take 2-4 minutes on two cores, the length of one ZeroGPU call.
GENERATE_QUEUE, DECODE_QUEUE = "generate", "decode"
TIME_LIMIT_S = {"generate": 600, "race": 300, "lossless": 300, "export": 120}
CLOSING = "the page is restarting (the Space was stopped or updated); try again in a minute."
PENDING_S = 900          # a request admitted but never started (cancelled while it waited) is forgotten then
BUSY_WAIT_S = 1.0        # a click while a run goes waits this long for it to end (its final charts) before refusing
SWITCH_QUIET_S = 1.5     # a model switch waits this long at most for the run it stops to show nothing more
FUTURE_STOP_MS = 60_000  # a Stop stamped this far past the server's clock counts as now (a client's clock is off)


def session_key(request) -> str:
    """The visitor's key: their Gradio session ("" for a caller without one)."""
    return getattr(request, "session_hash", None) or ""


@dataclass
class Run:
    """A visitor's run: what it is (`kind`, a key of KINDS), on which model, with which method
    and prompt; `why` it was stopped from elsewhere ("" while it was not); `left`: its model
    was switched away (to model `left`), so nothing more of it is shown; `quiet` is set once
    it has ended."""

    kind: str
    model: str
    method: str = ""
    prompt: str = ""
    why: str = ""
    left: str = ""
    quiet: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)

    def named(self) -> str:
        """The run in words: "your SJD run on texture", "your race on tiny"."""
        what = f"{METHOD_LABELS.get(self.method, self.method)} run" if self.kind == "generate" else KINDS[self.kind]
        return f"your {what} on {self.model}"


class Runs:
    """The run each visitor (by session key) has going; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}

    def going(self, key: str) -> Run | None:
        with self._lock:
            return self._runs.get(key)

    def all(self) -> list[tuple[str, Run]]:
        with self._lock:
            return list(self._runs.items())

    def start(self, key: str, run: Run) -> Run:
        with self._lock:
            self._runs[key] = run
        return run

    def end(self, key: str, run: Run) -> None:
        run.quiet.set()
        with self._lock:
            if self._runs.get(key) is run:
                del self._runs[key]

    def interrupt(self, key: str, why: str, left: str = "", kinds=tuple(KINDS)) -> Run | None:
        """Mark the visitor's run (one of `kinds`) as stopped from elsewhere, `why` in words
        (`left`: the model switched to); the caller stops it. The run, or None."""
        with self._lock:
            run = self._runs.get(key)
            if run is None or run.kind not in kinds or run.left:
                return None
            run.why, run.left = why, left
            return run


def busy_message(run: Run) -> str:
    """Beside the buttons, for a click while the visitor's run goes."""
    return (f"**Not started:** {run.named()} is still going: press **Stop** first, or wait for it to end "
            "(one run at a time).")


# ----------------------------------------------------------------------------- stops

class Stops:
    """Stop requests per visitor, by time stamps: a run clicked at or before the visitor's
    last Stop is stopped (running or still waiting in the queue), a later one is not. The
    page stamps both clicks with the browser's clock; a call without a stamp (the API) gets
    the server's, and so does a stamp far in the server's future (a Stop at 1e308 would stop
    every later run of that visitor).

    `shared`: each visitor's last Stop is also a small file in a folder made here, so that a
    run in another process forked from this one (a ZeroGPU call) hears the Stop this
    process was told."""

    def __init__(self, shared: bool = False) -> None:
        self._lock = threading.Lock()
        self._at: dict[str, float] = {}
        self.folder = tempfile.mkdtemp(prefix="scd-stops-") if shared else None

    @staticmethod
    def stamp(value=None) -> float:
        """A click's time stamp in milliseconds: the browser's, else (none, or one not
        within a minute of now or before) the server's clock now."""
        now = time.time() * 1000
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return float(value) if ok and 0 < value <= now + FUTURE_STOP_MS else now

    def stop(self, key: str, at=None) -> None:
        with self._lock:
            self._at[key] = max(self._at.get(key, float("-inf")), self.stamp(at))
            if self.folder is not None:
                path = self._file(key)
                with open(path + ".new", "w", encoding="utf-8") as f:
                    f.write(repr(self._at[key]))
                os.replace(path + ".new", path)          # a reader sees the old stamp or the new, whole

    def stopped(self, key: str, ticket: float) -> bool:
        return ticket <= max(self._at.get(key, float("-inf")), self._shared(key))

    def forget(self, key: str) -> None:
        with self._lock:
            self._at.pop(key, None)
            if self.folder is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self._file(key))

    def _file(self, key: str) -> str:
        return os.path.join(self.folder, hashlib.sha256(key.encode()).hexdigest()[:32])

    def _shared(self, key: str) -> float:
        if self.folder is None:
            return float("-inf")
        try:
            with open(self._file(key), encoding="utf-8") as f:
                return float(f.read())
        except (FileNotFoundError, ValueError):
            return float("-inf")


# --------------------------------------------------------------------------- tickets

class Tickets:
    """Each visitor's jobs on each queue: admitted (before the queue), started, ended. At
    most `per_visitor` jobs of one visitor are queued or running on a queue at once. A job
    cancelled while it waited never starts: its admission is forgotten after `pending_s`
    seconds, or at the visitor's Stop (the jobs still queued then end at once when they start)."""

    def __init__(self, per_visitor: int = 1, pending_s: float = PENDING_S, clock=time.monotonic) -> None:
        self.per_visitor, self.pending_s, self.clock = per_visitor, pending_s, clock
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], collections.deque] = {}     # (visitor, queue) -> admission times
        self._running: collections.Counter = collections.Counter()

    def _queued(self, slot: tuple[str, str]) -> int:
        """The slot's admissions not yet started and not forgotten (with self._lock held)."""
        pending = self._pending.get(slot)
        while pending and self.clock() - pending[0] > self.pending_s:
            pending.popleft()
        if pending is not None and not pending:
            del self._pending[slot]
        return len(pending or ())

    def admit(self, key: str, queue: str) -> bool:
        """Count a new job of the visitor on `queue` as queued; False (nothing counted) when
        they have `per_visitor` there already."""
        slot = (key, queue)
        with self._lock:
            if self._queued(slot) + self._running[slot] >= self.per_visitor:
                return False
            self._pending.setdefault(slot, collections.deque()).append(self.clock())
            return True

    def started(self, key: str, queue: str) -> None:
        slot = (key, queue)
        with self._lock:
            if self._queued(slot):
                self._pending[slot].popleft()
                self._queued(slot)
            self._running[slot] += 1

    def ended(self, key: str, queue: str) -> None:
        slot = (key, queue)
        with self._lock:
            self._running[slot] -= 1
            if self._running[slot] <= 0:
                del self._running[slot]

    def held(self, key: str, queue: str) -> int:
        """The visitor's jobs queued or running on `queue`."""
        slot = (key, queue)
        with self._lock:
            return self._queued(slot) + self._running[slot]

    def drop_pending(self, key: str) -> None:
        """Forget the visitor's queued jobs (they were stopped: each ends at once when it starts)."""
        with self._lock:
            for slot in [s for s in self._pending if s[0] == key]:
                del self._pending[slot]

    def forget(self, key: str) -> None:
        with self._lock:
            for slot in [s for s in self._pending if s[0] == key]:
                del self._pending[slot]
            for slot in [s for s in self._running if s[0] == key]:
                del self._running[slot]


def queue_message(what: str) -> str:
    """The sentence for a visitor's second job on a queue."""
    return (f"Not started: your earlier {what} is still waiting in the queue or running (one at a time "
            "per visitor); wait for it to end, or press Stop.")


# --------------------------------------------------------------------------- control

class Control:
    """The page's run control: `runs` (the run each visitor has going), `stops`, `tickets`
    (their jobs on each queue) and `requests` (`demo.backend.Requests`: their rows on the
    decode client, which a stop cancels)."""

    def __init__(self, stops: Stops, requests) -> None:
        self.runs, self.stops, self.requests, self.tickets = Runs(), stops, requests, Tickets()
        self.closing = ""                 # set when the page stops: what every run in flight is told

    # ------------------------------------------------------------- before a run

    def busy(self, key: str, wait_s: float = BUSY_WAIT_S) -> str | None:
        """A click while the visitor's run goes: the refusal in words; None when no run goes.
        A run that ends within `wait_s` (a finished run drawing its final charts, after its
        status said "done"; one stopped a moment ago) lets it through."""
        run = self.runs.going(key)
        if run is not None and run.quiet.wait(wait_s):
            run = self.runs.going(key)
        return busy_message(run) if run is not None else None

    def admit(self, key: str, queue: str, what: str) -> str | None:
        """Before a job joins `queue` (Gradio's validator): None when it may (it is counted),
        else the sentence why not (`what`: the job, in words)."""
        if self.closing:
            return f"Not started: {self.closing}"
        if not key:                       # a call with no session (plain HTTP): Gradio gives it one later
            return None
        return None if self.tickets.admit(key, queue) else queue_message(what)

    # ---------------------------------------------------------------- stopping

    def stopped(self, key: str, ticket) -> Callable[[], bool]:
        """Whether a run clicked at `ticket` (the browser's stamp, or None) has been stopped since."""
        stamp = self.stops.stamp(ticket)
        return lambda: bool(self.closing) or self.stops.stopped(key, stamp)

    def stop(self, key: str, at=None) -> None:
        """The visitor's Stop: their runs clicked before `at` end (running: their rows leave at
        the next pass boundary; queued: at once when they start)."""
        self.stops.stop(key, at)
        self.tickets.drop_pending(key)
        self.requests.cancel_visitor(key)

    def halt(self, key: str, why: str, at=None, left: str = "", kinds=tuple(KINDS),
             quiet_s: float = SWITCH_QUIET_S) -> Run | None:
        """Stop the visitor's run (one of `kinds`) from elsewhere, `why` in words: its row leaves
        at its next pass boundary. `left` (a model switch, to that model): wait until it has
        ended (its last update the new model's views), so that the switch's own update comes
        after it. The run stopped, or None."""
        run = self.runs.interrupt(key, why, left, kinds)
        if run is None:
            return None
        self.stop(key, at)
        if left:
            run.quiet.wait(quiet_s)
        return run

    def forget(self, key: str) -> None:
        """The visitor left (their session ended)."""
        self.stops.forget(key)
        self.tickets.forget(key)

    def drain(self, why: str, timeout: float) -> int:
        """The page stops: every run in flight is stopped, its status saying `why`, new ones
        are refused; waits up to `timeout` s for them to end (their last update sent). The
        runs still going after it."""
        self.closing = why
        going = self.runs.all()
        for key, run in going:
            self.runs.interrupt(key, f"**Stopped:** {why}")
            self.stop(key)
        deadline = time.monotonic() + timeout
        for _, run in going:
            run.quiet.wait(max(0.0, deadline - time.monotonic()))
        return sum(not run.quiet.is_set() for _, run in going)

    # ------------------------------------------------------------------- a run

    def queued(self, queue: str):
        """A handler as a job on `queue`: counted as started while it runs, ended however it
        ends (also when Gradio closes it, the event cancelled). Its visitor is its `request`
        argument, however Gradio passes it."""
        def wrap(fn):
            signature = inspect.signature(fn)

            def visitor(args, kwargs) -> str:
                return session_key(signature.bind_partial(*args, **kwargs).arguments.get("request"))

            if inspect.isgeneratorfunction(fn):
                @functools.wraps(fn)
                def stream(*args, **kwargs):
                    key = visitor(args, kwargs)
                    self.tickets.started(key, queue)
                    try:
                        yield from fn(*args, **kwargs)
                    finally:
                        self.tickets.ended(key, queue)
                return stream

            @functools.wraps(fn)
            def once(*args, **kwargs):
                key = visitor(args, kwargs)
                self.tickets.started(key, queue)
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.tickets.ended(key, queue)
            return once
        return wrap

    def one_run(self, kind: str, queue: str, status: Callable[[], object], left_views: Callable[[Run], dict]):
        """A decoding event's generator handler as the visitor's one run (`kind` a key of
        KINDS; `status()`: its status component): while it goes a second click is refused,
        and a model switch or a new prompt or method stops it (`halt`). After a switch it ends
        at its next update with the new model's views (`left_views(run)`): Gradio repeats a
        stream's last update when it ends, so nothing of the old model comes back after the
        switch's own update. After another stop its status says why. However it ends (also
        closed by Gradio: the event cancelled, the tab closed, its time limit), the handler it
        wraps is closed at once, whose `finally` ends its rows and threads. It runs in the
        page's process, around the ZeroGPU call (`demo.zerogpu`)."""
        def wrap(fn):
            @functools.wraps(fn)
            def handler(request=None, **inputs):
                key = session_key(request)
                run = self.runs.start(key, Run(kind, str(inputs.get("model") or ""), str(inputs.get("method") or ""),
                                               str(inputs.get("prompt") or "")))
                self.tickets.started(key, queue)
                updates = fn(request, **inputs)
                try:
                    for update in updates:
                        if run.left:
                            break                         # its rows were cancelled: they leave at once
                        if run.why and status() in update:
                            update = update | {status(): f"{update[status()]}  \n{run.why}"}
                            if self.closing:              # the page stops: its status says why, nothing more
                                yield update
                                break
                        yield update
                    updates.close()
                    if run.left:
                        yield left_views(run)
                finally:
                    updates.close()                       # GeneratorExit in the handler: its rows end
                    self.runs.end(key, run)
                    self.tickets.ended(key, queue)
            return handler
        return wrap
