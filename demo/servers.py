"""The servers whose forward passes visitors share (and the page's in-process decode client on them),
and the pace of live updates: when a Generate run shows a picture or its charts, and how a race replays."""
from __future__ import annotations

import collections
import contextlib
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from scd_core.client import DecodeError
from scd_core.local import LocalClient
from scd_core.models.cache import busy_message, wait_until
from scd_core.serve import Request, Server
from scd_core.settings import Settings
from scd_core.trace import Iteration

@dataclass(frozen=True)
class Clock:
    """The clock the page paces its updates by (seconds); tests give one that never waits."""
    now: Callable[[], float] = time.perf_counter
    sleep: Callable[[float], None] = time.sleep


CLOCK = Clock()


IMAGE_EVERY, PLOT_EVERY, STATUS_EVERY = 0.1, 0.5, 0.5       # seconds between live updates
FULL_SPEED_EVERY = 0.25  # full speed: a picture at most this often, none before (a faster run
                         # shows its final picture only: the eye would not follow)
RACE_YIELD_S = 5.0       # a race's timing round waits this long at most, before each method, for
                         # visitors' Generate rows to end: they go first, and the method is timed alone
FIRST_PAINT = 0.3        # seconds for the browser to show the final picture (and a stopped status)
                         # before the charts come: at 0.1 s, on 2 busy cores, a Stop was seen up
                         # to 0.75 s after the click, the charts' update close behind it
SLOW_PLOT_EVERY = 2.0    # slow motion: live charts this often. Redrawing the two live charts costs
                         # the browser 150-450 ms on 2 busy cores (a picture, 60-120 ms): with
                         # them at every pass, the updates queued behind them held a Stop up
                         # for up to 0.8 s (python -m bench page-timing --only stop)


# ----------------------------------------------------------------------------- serving

class Servers:
    """One `scd_core.serve.Server` per loaded model, made on first use: requests with the same
    settings share its forward passes, and each row keeps its method, window and seed (no
    serving policy), so a seed gives the same sample however busy the page is.

    Every server holds `device_lock` for each pass; a run that must be timed alone (the race)
    takes it for its whole decode. Servers are keyed by the model object: `keep(models)`
    closes the servers of any other model (one the model cache dropped, or replaced), once
    their requests are done, so that nothing here keeps a dropped model alive.
    """

    def __init__(self, max_batch: int = 32, threaded: bool = True) -> None:
        self.max_batch, self.threaded = max_batch, threaded   # threaded=False: the callers run the passes
        self.device_lock = threading.Lock()
        self.timing_alone = threading.Event()          # set while a run timed alone holds the device
        self._lock = threading.Lock()
        self._servers: dict[int, Server] = {}          # id(model) -> its server (which holds it)

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Hold the device for a run timed alone: no shared pass runs meanwhile."""
        with self.device_lock:
            self.timing_alone.set()
            try:
                yield
            finally:
                self.timing_alone.clear()

    def get(self, model) -> Server:
        with self._lock:
            server = self._servers.get(id(model))
            if server is None:
                server = Server(model, self.max_batch, device_lock=self.device_lock, threaded=self.threaded)
                self._servers[id(model)] = server
            return server

    def submit(self, model, settings: Settings, method: str) -> Request:
        """One row on the model's server; a ValueError names a bad argument at once."""
        return self.get(model).submit(settings.prompt, settings.seed, settings.of(method))

    def close_model(self, model, timeout: float = 10.0) -> None:
        """Close the model's server now (rows still in it end, cancelled, at their next pass
        boundary) and forget it: nothing here holds the model any more."""
        with self._lock:
            server = self._servers.pop(id(model), None)
        if server is not None:
            server.close(cancel=True, timeout=timeout)

    def keep(self, models: Iterable) -> None:
        """Close the servers of every model not in `models` (in the background: a server
        finishes the requests it has)."""
        live = {id(m) for m in models if m is not None}
        with self._lock:
            gone = [server for key, server in self._servers.items() if key not in live]
            self._servers = {key: server for key, server in self._servers.items() if key in live}
        for server in gone:
            threading.Thread(target=server.close, name="scd-server-close", daemon=True).start()

    def models(self) -> list:
        with self._lock:
            return [server.model for server in self._servers.values()]


class PageClient(LocalClient):
    """The page's in-process decode client (`demo.backend`): `scd_core.local.LocalClient` on
    the page's own `Servers` and the models `get_model(name)` gives (the page's, so a model
    the page replaces is the one decoded). `local`: its servers' threads run the passes;
    `in_call` (ZeroGPU): no thread, the call that reads a row runs its passes. It keeps a
    row's server request until `release`, so that it can tell the batch of each of its
    passes, also after its end; its rows' pictures come from `pictures`, by request id.

    Unloading a model (`demo.models.Models` does, to make room for another): `retire` waits
    until no call uses it (no row running, no submit or picture under way, none for a few
    seconds), new rows of it waiting meanwhile; it then closes its server and lets go of its
    rows' requests and decoders; `unloaded` ends the swap, after which a new row of it loads
    it again. `swap_lock` is held for a whole swap (unloads and the load they make room for)."""

    decodes_here = True                            # the page's models are the ones it decodes

    def __init__(self, servers: Servers, get_model: Callable[[str], object], in_call: bool = False) -> None:
        super().__init__(load=get_model, max_batch=servers.max_batch, device_lock=servers.device_lock,
                         keep_requests=True, in_call=in_call)
        self.servers, self._get = servers, get_model
        self.swap_lock = threading.Lock()
        self._use_lock = threading.Lock()          # guards the four below
        self._pending: collections.Counter[str] = collections.Counter()   # calls using a model now, by name
        self._last_used: dict[str, float] = {}      # when a call let go of it, or a row of it ended
        self._leaving: set[str] = set()             # being unloaded: new rows wait for the swap
        self._closing: set[str] = set()             # unused and being unloaded: every call waits

    def server(self, name: str):
        loaded = self._get(name)
        return loaded, self.servers.get(loaded)

    def model(self, name: str):
        return self._get(name)

    @contextlib.contextmanager
    def serving(self, name: str, rows: bool = False) -> Iterator[tuple[Any, Server]]:
        """The model and its server for one call, not unloaded while the call uses it; new
        `rows` of a model being unloaded wait for the swap to end (then load it again)."""
        loaded = self._acquire(name, rows)
        try:
            yield loaded, self.servers.get(loaded)
        finally:
            with self._use_lock:
                self._pending[name] -= 1
                self._last_used[name] = time.monotonic()

    def _acquire(self, name: str, rows: bool):
        while True:
            if rows and self.leaving(name):
                with self.swap_lock:                # wait for the swap under way
                    pass
            loaded = self._get(name)
            with self._use_lock:
                if name not in self._closing and not (rows and name in self._leaving):
                    self._pending[name] += 1
                    self._last_used[name] = time.monotonic()
                    return loaded
            time.sleep(0.01)                        # being unloaded: its swap ends soon

    def leaving(self, name: str) -> bool:
        with self._use_lock:
            return name in self._leaving

    def retire(self, name: str, model, arriving: str | None, drain_s: float, quiet_s: float) -> None:
        """Stop serving `model` (served as `name`) once no call uses it: no row running, no
        call under way, none for `quiet_s` s (a run's last pictures come after its last
        pass); then close its server and let go of what its rows kept. New rows of it wait
        meanwhile. A DecodeError (for `arriving`) if it is still in use after `drain_s` s: it
        stays."""
        with self._use_lock:
            self._leaving.add(name)

        def settled() -> bool:                      # unused, and from now on no call takes it
            running = any(row.model == name for row in self._rows.running())
            with self._use_lock:
                if self._pending[name] or running or time.monotonic() - self._last_used.get(name, 0.0) < quiet_s:
                    return False
                self._closing.add(name)
                return True
        if not wait_until(settled, drain_s):
            self.unloaded(name)
            raise DecodeError(busy_message(name, arriving or "another model", drain_s))
        self.servers.close_model(model)
        self.forget_model(name, model)

    def unloaded(self, name: str) -> None:
        """The swap that unloaded `name` is over: new rows of it load it again."""
        with self._use_lock:
            self._leaving.discard(name)
            self._closing.discard(name)

    def _ended(self, rid: str, request, row) -> None:
        super()._ended(rid, request, row)
        with self._use_lock:
            self._last_used[row.model] = time.monotonic()

    def batch_sizes(self, request: str) -> list[int]:
        with self._lock:
            running = self._requests.get(request)
        return list(running.batch_sizes) if running is not None else []

    def release(self, request: str) -> None:
        """Forget a row once the page is done with it."""
        with self._lock:
            self._requests.pop(request, None)
        self._rows.release(request)

    def close(self) -> None:
        """Cancel the rows still running (the page's servers stay: they are the page's)."""
        for row in self._rows.running():
            row.cancel_requested = True
        with self._lock:
            running = list(self._requests.values())
        for request in running:
            request.cancel()


def follow(client, request: str, stopped: Callable[[], bool], poll: float = 0.05,
           waiting: Callable[[], bool] = lambda: False) -> Iterator[Iteration | None]:
    """A row's records (`client.records(request)`) as they arrive. Ends when the row ends
    (raising its DecodeError if it was lost), or within `poll` seconds of `stopped()` turning
    true even while no pass runs. Before the first record it yields None once if `waiting()`
    turns true (a run timed alone holds the device). However it ends (the caller may stop
    reading), the row is cancelled: it leaves at its next pass boundary."""
    feed: queue.Queue = queue.Queue()

    def read() -> None:
        try:
            for record in client.records(request):
                feed.put(("record", record))
            feed.put(("end", None))
        except Exception as exc:                      # noqa: BLE001: raised to the reader below
            feed.put(("error", exc))

    threading.Thread(target=read, name="scd-follow", daemon=True).start()
    seen, told = 0, False
    try:
        while not stopped():
            try:
                kind, value = feed.get(timeout=poll)
            except queue.Empty:
                if not seen and not told and waiting():
                    told = True
                    yield None
                continue
            if kind == "error":
                raise value
            if kind == "end":
                return
            seen += 1
            yield value
    finally:
        try:
            client.cancel(request)
        except ValueError:                            # it ended and was forgotten meanwhile
            pass


def shown(records: Iterable[Iteration | None], pace: float, stopped: Callable[[], bool],
          share: Callable[[Iteration], int] = lambda record: 1,
          clock: Clock = CLOCK) -> Iterator[tuple[Iteration | None, bool, bool]]:
    """A row's records (as `follow` gives them) as a Generate run shows them: (record,
    picture due, charts due), and (None, False, False) for follow's None. Slow motion (pace > 0)
    shows every pass, `max(pace, IMAGE_EVERY)` seconds apart, the live charts every
    SLOW_PLOT_EVERY; a Stop cuts the wait short and ends it there (what is shown stays). Full speed shows a picture at most every
    FULL_SPEED_EVERY * B seconds and none before, the live charts every PLOT_EVERY * B, where
    B = `share(record)` rows share the pass: B visitors together get the updates one would,
    so that drawing them does not slow the shared decoding."""
    picture = Pacer(IMAGE_EVERY, pace, stopped, clock=clock) if pace else \
        Pacer(FULL_SPEED_EVERY, wait_first=True, clock=clock)
    charts = Pacer(SLOW_PLOT_EVERY if pace else PLOT_EVERY, wait_first=True, clock=clock)
    for record in records:
        if record is None:
            yield None, False, False
            continue
        rows = share(record)
        due = picture(share=rows)
        if stopped():                 # a record that arrived during the wait is never shown
            return
        yield record, due, due and charts(share=rows)


def shown_pace(pace: float) -> float:
    """The seconds per pass slow motion shows at: `pace`, or IMAGE_EVERY if faster (0: full speed)."""
    return max(pace, IMAGE_EVERY) if pace > 0 else 0.0


# ----------------------------------------------------------------------------- pace

class Pacer:
    """When a live view may update.

    Full speed (pace 0): at most once every `every * share` seconds, where `share` is the
    caller's part of the work (a row in a batch of B: B, so that B visitors together get the
    updates one would); forced calls always pass; the first passes too, unless `wait_first`.
    Slow motion: every call passes, `max(pace, every)` seconds after the previous one; the
    wait is cut short when `stopped()` turns true, so a stop is seen within a pass.
    """

    def __init__(self, every: float, pace: float = 0.0, stopped: Callable[[], bool] = lambda: False,
                 wait_first: bool = False, clock: Clock = CLOCK):
        self.every, self.pace, self.stopped, self.clock = every, pace, stopped, clock
        self.last = clock.now() if wait_first else -1e9

    def __call__(self, force: bool = False, share: float = 1.0) -> bool:
        now = self.clock.now()
        if self.pace > 0:
            until = self.last + max(self.pace, self.every)
            while now < until and not self.stopped():
                self.clock.sleep(min(0.02, until - now))
                now = self.clock.now()
            self.last = now
            return True
        if force or now - self.last >= self.every * share:
            self.last = now
            return True
        return False


def now(clock: Clock = CLOCK) -> float:
    return clock.now()


def sleep_until(deadline: float, stopped: Callable[[], bool] = lambda: False,
                clock: Clock = CLOCK) -> None:
    """Sleep until `deadline` (the clock's seconds) in short steps, waking early on a stop."""
    while not stopped():
        left = deadline - clock.now()
        if left <= 0:
            return
        clock.sleep(min(0.02, left))


def wait_while(busy: Callable[[], bool], limit_s: float, stopped: Callable[[], bool] = lambda: False,
               clock: Clock = CLOCK) -> float:
    """Wait while `busy()`, at most `limit_s` seconds, waking early on a stop; the seconds waited."""
    start = clock.now()
    while busy() and not stopped() and clock.now() - start < limit_s:
        clock.sleep(min(0.05, limit_s - (clock.now() - start)))
    return clock.now() - start


def replay_ticks(last: int, pace: float, every: float, stopped: Callable[[], bool],
                 clock: Clock = CLOCK):
    """NFE ticks of a lockstep replay lasting last * pace seconds, at most one per `every`
    seconds (later ticks skip ahead); ends early on a stop."""
    start, tick = clock.now(), 0
    while tick < last and not stopped():
        tick = min(last, 1 + int((clock.now() - start) / pace))
        yield tick
        sleep_until(max(start + tick * pace, clock.now() + every), stopped, clock)
