"""The run control the page's three decoding tabs share (Generate, the race, the Lossless
comparison; export and model loads too): each visitor's one run in progress, their Stop stamps,
their places on the page's queues, the time limits, and how a run ends however it is left.

- One run at a time: a second click while one goes is refused with a word (`Control.busy`);
  a model switch, or a new prompt or method, stops it at once (`Control.halt`): after a
  switch nothing more of it is shown (its last update is the new model's empty views: Gradio
  repeats a stream's last update when it ends, so that is what stays), after a new prompt or
  method its stopped status says why.
- Stop (`Stops`): a run clicked at or before the visitor's last Stop is stopped, running or
  still waiting in the queue.
- Places on each queue (`demo.queues`): a request is admitted before it joins the queue
  only within its queue's caps (one job per visitor, a few per client address, so many
  waiting); a refusal is a sentence (the API has no buttons to grey out). A place is held
  while Gradio holds the job: a job cancelled while it waits gives it back at once.
- Time limits (`LIMITS`, settings read at start): a run still going at its limit is stopped as
  a Stop would stop it, its status saying why (`Control` watches the runs).
- Cancelled means stopped: a handler Gradio closes (the tab closed, the client cancelled the
  event) ends its rows and threads in its `finally` (`Control.one_run` closes the whole chain
  of generators).
- A clean stop (`Control.drain`): every run in flight is told why and stopped, and the page
  waits for their last updates to leave before it closes.

The page's process keeps all of this (on ZeroGPU too: the handler that forwards a call's
updates runs here), keyed by the visitor's session.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from demo.queues import Admissions, Caps
from demo.labels import METHOD_LABELS

KINDS = {"generate": "Generate", "race": "race", "lossless": "Lossless comparison"}
BUTTONS = {"generate": "Generate", "race": "Race all methods", "lossless": "Compare"}

# The page's queues (Gradio concurrency ids). Generate's rows share the passes of one server per
# model (up to its batch side by side); a race, a comparison and an export run one at a time on
# the decode queue, a model load one at a time on its own.
GENERATE_QUEUE, DECODE_QUEUE, LOAD_QUEUE = "generate", "decode", "load"
# How long a job may run, in seconds (each a setting, SCD_<JOB>_LIMIT_S, read at start): a
# Generate in slow motion on the largest embedded model (tiny-video, AR, 1 s a pass) takes
# about 9 minutes; a race's replay is shortened to end within its limit; a comparison of 1,024
# samples of tiny takes 2-4 minutes on two cores, the length of one ZeroGPU call.
LIMITS_S = {"generate": 600, "race": 300, "lossless": 300, "export": 120, "load": 600}
JOBS = {"generate": "a Generate", "race": "a race", "lossless": "a Lossless comparison", "export": "an export",
        "load": "a model load"}
CLOSING = "the page is restarting (the Space was stopped or updated); try again in a minute."
BUSY_WAIT_S = 1.0        # a click while a run goes waits this long for it to end (its final charts) before refusing
SWITCH_QUIET_S = 1.5     # a model switch waits this long at most for the run it stops to show nothing more
FUTURE_STOP_MS = 60_000  # a Stop stamped this far past the server's clock counts as now (a client's clock is off)
WATCH_S = 0.25           # the runs are looked at this often for their time limits


def limits(environ=os.environ) -> dict[str, int]:
    """Each job's time limit in seconds: LIMITS_S, or its setting SCD_<JOB>_LIMIT_S (a whole number >= 1)."""
    out = {}
    for job, default in LIMITS_S.items():
        name = f"SCD_{job.upper()}_LIMIT_S"
        raw = (environ.get(name) or "").strip()
        if raw and (not raw.isdigit() or int(raw) < 1):
            raise ValueError(f"{name}: expected a whole number of seconds >= 1, got {raw!r}")
        out[job] = int(raw) if raw else default
    return out


FITS = {"generate": "lower the slow motion to fit", "race": "lower the slow motion or the race samples K to fit",
        "lossless": "lower the samples per method to fit", "export": "please try again when the page is less busy",
        "load": "it goes on loading: a run on it waits for it"}


def limit_message(job: str, seconds: float) -> str:
    """A job's words when it reached its time limit."""
    return (f"**Stopped:** {JOBS[job]} may run {seconds:g} s at most on this page, so that every visitor gets "
            f"their turn; {FITS[job]}.")


def session_key(request) -> str:
    """The visitor's key: their Gradio session ("" for a caller without one)."""
    return getattr(request, "session_hash", None) or ""


@dataclass
class Run:
    """A visitor's run: what it is (`kind`, a key of KINDS), on which model, with which method
    and prompt; `why` it was stopped from elsewhere ("" while it was not); `left`: its model
    was switched away (to model `left`), so nothing more of it is shown; `deadline`: when its
    time limit stops it; `quiet` is set once it has ended."""

    kind: str
    model: str
    method: str = ""
    prompt: str = ""
    why: str = ""
    left: str = ""
    deadline: float = math.inf    # time.monotonic() at which its time limit stops it
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


def queue_message(what: str, cap: str, caps: Caps) -> str:
    """The sentence for a request a queue's caps refuse (`cap`: which, `demo.queues.Admissions.admit`)."""
    if cap == "session":
        return (f"Not started: your earlier {what} is still waiting in the queue or running (one at a time "
                "per visitor); wait for it to end, or press Stop.")
    if cap == "client":
        return (f"Not started: your address already has {caps.client} jobs like this {what} waiting or running "
                f"(at most {caps.client} per address, so that one client cannot fill the queue); wait for one "
                "to end.")
    return (f"Not started: {caps.waiting} jobs are already waiting in the queue for this {what}; please try "
            "again in a minute.")


UNCAPPED = Caps(session=10**9, client=10**9, waiting=10**9)


# --------------------------------------------------------------------------- control

class Control:
    """The page's run control: `runs` (the run each visitor has going), `stops`, `admissions`
    (places on the queues, `demo.queues`), `limits` (each job's time limit, s) and
    `requests` (`demo.backend.Requests`: the visitors' rows on the decode client, which a
    stop cancels)."""

    def __init__(self, stops: Stops, requests, admissions: Admissions | None = None,
                 limits: dict[str, float] | None = None) -> None:
        self.runs, self.stops, self.requests = Runs(), stops, requests
        self.admissions = admissions or Admissions({}, default=UNCAPPED)
        self.limits = dict(LIMITS_S) | (limits or {})
        self.closing = ""                 # set when the page stops: what every run in flight is told
        self._watching: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------- before a run

    def busy(self, key: str, wait_s: float = BUSY_WAIT_S) -> str | None:
        """A click while the visitor's run goes: the refusal in words; None when no run goes.
        A run that ends within `wait_s` (a finished run drawing its final charts, after its
        status said "done"; one stopped a moment ago) lets it through."""
        run = self.runs.going(key)
        if run is not None and run.quiet.wait(wait_s):
            run = self.runs.going(key)
        return busy_message(run) if run is not None else None

    def admit(self, request, queue: str, what: str) -> str | None:
        """Before a job joins `queue` (Gradio's validator): None when it may (its place is
        taken), else the sentence why not (`what`: the job, in words)."""
        if self.closing:
            return f"Not started: {self.closing}"
        cap = self.admissions.admit(request, queue)
        return None if cap is None else queue_message(what, cap, self.admissions.caps_of(queue))

    # ---------------------------------------------------------------- stopping

    def stopped(self, key: str, ticket) -> Callable[[], bool]:
        """Whether a run clicked at `ticket` (the browser's stamp, or None) has been stopped since."""
        stamp = self.stops.stamp(ticket)
        return lambda: bool(self.closing) or self.stops.stopped(key, stamp)

    def stop(self, key: str, at=None) -> None:
        """The visitor's Stop: their runs clicked before `at` end (running: their rows leave at
        the next pass boundary; queued: at once when they start, their places given back now)."""
        self.stops.stop(key, at)
        self.admissions.release_waiting(key)
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

    def drain(self, why: str, timeout: float) -> int:
        """The page stops: every run in flight is stopped, its status saying `why`, new ones
        are refused; waits up to `timeout` s for them to end (their last update yielded). The
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

    # ------------------------------------------------------------- time limits

    def limited(self, job: str) -> Callable[[], bool]:
        """For a job with no run of its own (an export, a model load): whether its time limit,
        counted from now, has passed, or the page stops."""
        deadline = time.monotonic() + self.limits[job]
        return lambda: bool(self.closing) or time.monotonic() >= deadline

    def _watch(self) -> None:
        """Stop each run at its time limit, as its visitor's Stop would, its status saying why;
        ends when no run goes."""
        while True:
            time.sleep(WATCH_S)
            now = time.monotonic()
            for key, run in self.runs.all():
                if now >= run.deadline and not run.why:
                    self.halt(key, limit_message(run.kind, self.limits[run.kind]), kinds=(run.kind,))
            with self._lock:
                if not self.runs.all():
                    self._watching = None
                    return

    # ------------------------------------------------------------------- a run

    def one_run(self, kind: str, status: Callable[[], object], left_views: Callable[[Run], dict]):
        """A decoding event's generator handler as the visitor's one run (`kind` a key of
        KINDS; `status()`: its status component): while it goes a second click is refused,
        and a model switch, a new prompt or method, or its time limit stops it (`halt`). After a
        switch it ends at its next update with the new model's views (`left_views(run)`):
        Gradio repeats a stream's last update when it ends, so nothing of the old model comes
        back after the switch's own update. After another stop its status says why. However it
        ends (also closed by Gradio: the event cancelled, the tab closed), the handler it wraps
        is closed at once, whose `finally` ends its rows and threads. It runs in the page's
        process, around the ZeroGPU call (`demo.zerogpu`)."""
        def wrap(fn):
            @functools.wraps(fn)
            def handler(request=None, **inputs):
                key = session_key(request)
                run = self.runs.start(key, Run(kind, str(inputs.get("model") or ""), str(inputs.get("method") or ""),
                                               str(inputs.get("prompt") or ""),
                                               deadline=time.monotonic() + self.limits[kind]))
                with self._lock:
                    if self._watching is None:
                        self._watching = threading.Thread(target=self._watch, name="scd-time-limits", daemon=True)
                        self._watching.start()
                updates = fn(request, **inputs)
                try:
                    for update in updates:
                        if run.left:
                            break                         # its rows were cancelled: they leave at once
                        if self.closing and not run.why:  # the page stops (its run may have seen it first)
                            run.why = f"**Stopped:** {self.closing}"
                        if run.why and status() in update:
                            said = f"{update[status()]}  \n{run.why}"
                            if self.closing:              # the page stops: its status says why, nothing more
                                yield {status(): said}    # (no picture to fetch from a page going away)
                                break
                            update = update | {status(): said}
                        yield update
                    updates.close()
                    if run.left:
                        yield left_views(run)
                finally:
                    updates.close()                       # GeneratorExit in the handler: its rows end
                    self.runs.end(key, run)
            return handler
        return wrap
