"""Many requests on shared forward passes.

A `Scheduler` decodes the requests of one model and one group of settings (method, window,
init, sampling, guidance) as one batch. A request that arrives while the batch runs joins
it at the next pass boundary; a row leaves as soon as its grid is complete (its stream of
records ends then, not when the batch ends) or when its request is cancelled. Rows draw
from their own random streams, so a request's tokens for a seed are the same however many
others share its passes. Joining and leaving need a `ResizableSession`; with a model whose
session cannot change its batch, a scheduler decodes one batch at a time. A batch never holds
more rows than one pass of its model may (`scd_core.memory`: rows x window x vocabulary under
the model's cap); requests beyond them wait for rows to leave.

A `Server` runs the schedulers of several groups on one worker thread, a pass of each in
turn; or, made with `threaded=False`, on no thread of its own: its caller runs the passes
(`step`), as a decode that must happen inside one call does. A `Policy` lets a library user trade the group's window for throughput as the batch
grows (window 1 is plain AR, which samples the same law): `Policy.measure` times the model's
forward passes at several batch sizes and windows on this device.

    python -m scd_core.bench_serve --model tiny --methods ar,sjd,scd-mc --visitors 1,4,8,16   # the benchmark
"""
from __future__ import annotations

import atexit
import dataclasses
import queue
import threading
import time
import weakref
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from typing import Callable, Iterator, Sequence

import torch

from scd_core import passes
from scd_core.chain import Plan, State, resize, start_rows
from scd_core.clocks import TimedSession
from scd_core.decoding import generate, no_autograd, settings_of, validate
from scd_core.memory import rows_per_pass
from scd_core.protocols import can_resize, optional, row_decoder
from scd_core.settings import CHAIN, Settings, tree_nodes
from scd_core.trace import Iteration, Run

_END = object()


class Request:
    """One prompt decoded by a scheduler. Iterate it for its row's records (one per pass it
    took part in, its prefill first); the iteration ends when its grid is complete or after
    `cancel`, and raises what the scheduler raised if its batch failed. `batch_sizes[i]` is
    the number of rows the pass of `records[i]` decoded (1: this row alone). Its end (or its
    batch's error) is a `concurrent.futures.Future`, `future`; `finished` is an event-like
    view of it (`is_set`, `wait`) for callers that poll.

    `on_record`, if given, is called with each record on the scheduler's thread as soon as
    it is made (before iteration sees it), so a consumer needs no thread of its own per row:
    it must be quick (a list append, a queue put) and must not raise. `tag` is the caller's
    name for the request (a request id), for a server's `on_pass`."""

    def __init__(self, prompt: str, seed: int, on_record: Callable[[Iteration], None] | None = None,
                 tag=None) -> None:
        self.prompt, self.seed, self.on_record, self.tag = prompt, seed, on_record, tag
        self.decode = None                  # the decoder of this row's tokens, set when it starts
        self.records: list[Iteration] = []
        self.batch_sizes: list[int] = []    # rows decoded by the pass of each record (1: alone)
        self.cancelled = threading.Event()
        self.submitted = time.perf_counter()
        self.future: Future = Future()      # result None when the row ended; else its batch's error
        self.finished = _Finished(self.future)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._wall = self._step = 0.0

    @property
    def error(self) -> BaseException | None:
        """What the scheduler raised if this request's batch failed (None until it ends)."""
        return self.future.exception() if self.future.done() else None

    def cancel(self) -> None:
        """Leave the batch at the next pass boundary (the records so far stay)."""
        self.cancelled.set()

    def __iter__(self) -> Iterator[Iteration]:
        while True:
            item = self._queue.get()
            if item is _END:
                self.future.result()        # raises the batch's error, if any
                return
            yield item

    def result(self, timeout: float | None = None) -> Run:
        """Wait for the request to end; its run (partial if cancelled). TimeoutError after
        `timeout` seconds; the batch's error if it failed."""
        self.future.result(timeout)
        return Run.from_iterations(self.records, decode=self.decode)

    def _deliver(self, record: Iteration, wall: float, step: float, batch: int) -> None:
        self._wall += wall
        self._step += step
        passes = len(self.records) + 1
        record = dataclasses.replace(record, index=passes - 1, nfe=passes, wall_time=self._wall, step_time=self._step)
        self.batch_sizes.append(batch)
        self.records.append(record)
        if self.on_record is not None:
            self.on_record(record)
        self._queue.put(record)

    def _end(self, error: BaseException | None = None) -> None:
        if error is None:
            self.future.set_result(None)
        else:
            self.future.set_exception(error)
        self._queue.put(_END)


class _Finished:
    """`is_set()` / `wait(timeout)` of a future, as of a `threading.Event` set when it is done."""

    def __init__(self, future: Future) -> None:
        self._future = future

    def is_set(self) -> bool:
        return self._future.done()

    def wait(self, timeout: float | None = None) -> bool:
        futures_wait([self._future], timeout)
        return self._future.done()


class Policy:
    """Which window a batch of B rows runs with: the one with the most tokens per second,
    from measured forward times and tokens per pass (window 1: plain AR)."""

    def __init__(self, seconds: dict[tuple[int, int], float], tokens_per_pass: dict[int, float]) -> None:
        self.seconds, self.tokens_per_pass = seconds, tokens_per_pass      # (B, L) -> s; L -> tokens
        self.batches = sorted({b for b, _ in seconds})

    def window(self, batch: int) -> int:
        B = max([b for b in self.batches if b <= batch], default=self.batches[0])
        return max(self.tokens_per_pass, key=lambda L: self.tokens_per_pass[L] / self.seconds[(B, L)])

    @classmethod
    def measure(cls, model, plan: Plan, batches: Sequence[int] = (1, 2, 4, 8, 16, 32),
                windows: Sequence[int] = (1, 4, 8, 16, 32), samples: int = 4, repeats: int = 3) -> "Policy":
        """Time one forward pass at each (batch, window) on this device, and decode `samples`
        grids at each window (with `generate`) to measure the tokens a pass commits with the
        group's method."""
        prompt = (optional(model, "example_prompts") or ["a red apple"])[0]
        seconds = {}
        for B in batches:
            session = TimedSession.start(model, [prompt] * B, plan.cfg_scale)
            for L in windows:
                W = min(L, plan.N)
                tokens = torch.zeros(B, W, dtype=torch.long, device=session.first_logits.device)
                start = torch.zeros(B, dtype=torch.long, device=tokens.device)
                with torch.inference_mode():
                    session.step(tokens, start)                                   # warm-up
                    before = session.seconds
                    for _ in range(repeats):
                        session.step(tokens, start)
                seconds[(B, L)] = (session.seconds - before) / repeats
        tokens_per_pass = {}
        for L in windows:
            p = _plan_with_window(plan, L)
            run = generate(model, [prompt] * samples, seed=list(range(samples)), settings=p.settings)
            tokens_per_pass[L] = (plan.N - 1) / (run.nfe - 1)      # the prefill commits token 0
        return cls(seconds, tokens_per_pass)


def _plan_with_window(plan: Plan, window: int) -> Plan:
    """The group's plan at another window; window 1 is plain AR (the same law). The group's
    draft tree stays where it fits in the window; elsewhere the window is a chain."""
    method = plan.method if window > 1 else "ar"
    tree = plan.settings.tree if method != "ar" and 1 + tree_nodes(plan.settings.tree) <= window else CHAIN
    return dataclasses.replace(plan, settings=plan.settings.replace(window=window, method=method, tree=tree))


PassListener = Callable[[Iteration, list[tuple[int, "Request"]]], None]


class Scheduler:
    """Decodes the requests of one model and one settings group on shared passes (see the
    module docstring). `submit` may be called from any thread; `step` runs one pass boundary
    and is called by one thread (a `Server`'s worker, or a loop of the caller's)."""

    def __init__(self, model, settings: Settings | None = None, *, max_batch: int = 32,
                 policy: Policy | None = None, on_pass: PassListener | None = None, **keywords) -> None:
        """`settings`, or the keywords of `generate` (method, window, ...) on top of them;
        `on_pass`: see `Server`."""
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be a positive integer, got {max_batch!r}")
        self.model, self.policy, self.on_pass = model, policy, on_pass
        self.plan, _ = validate(model, [""], settings_of(settings, **keywords))
        self.max_batch = min(max_batch, rows_per_pass(model, self.plan.method, self.plan.settings.window,
                                                          self.plan.settings.top_p))   # memory cap
        self._waiting: list[Request] = []
        self._lock = threading.Lock()
        self.session: TimedSession | None = None
        self.state: State | None = None
        self.rows: list[Request | None] = []          # aligned with the state's rows; None: left
        self.passes = 0                               # forward passes run, prefills included
        self.last_plan = self.plan                    # the plan of the last pass (a policy's window)

    def submit(self, prompt: str, seed: int = 0, on_record: Callable[[Iteration], None] | None = None,
               tag=None) -> Request:
        """Queue a prompt; a ValueError names a bad argument at once (`on_record`, `tag`: see Request)."""
        validate(self.model, [prompt], self.plan.settings, seed)
        request = Request(prompt, seed, on_record, tag)
        with self._lock:
            self._waiting.append(request)
        return request

    @property
    def busy(self) -> bool:
        with self._lock:
            return bool(self._waiting) or any(r is not None for r in self.rows)

    @property
    def batch_size(self) -> int:
        return sum(r is not None for r in self.rows)

    def step(self) -> None:
        """One pass boundary: cancelled rows leave, waiting requests join, one forward pass
        of the batch, each row gets its record, finished rows leave."""
        try:
            self._leave([b for b, r in enumerate(self.rows) if r is not None and r.cancelled.is_set()])
            self._join()
            if self.batch_size == 0:
                return
            plan = self.plan if self.policy is None else self._fitting(
                _plan_with_window(self.plan, self.policy.window(self.batch_size)))
            if plan.D != self.state.drafts.shape[1]:
                self.state = resize(self.state, plan)
            self.last_plan = plan                     # the plan of the running rows' drafts
            entered, step_before = time.perf_counter(), self.session.seconds
            with no_autograd(plan):
                before = self.state
                self.state, verdict = passes.pass_for(self.session, plan)(self.session, self.state, plan)
                record = Iteration.from_pass(0, plan.method, before, self.state, verdict, 0)
            self.passes += 1
            self._deliver(record, time.perf_counter() - entered, self.session.seconds - step_before)
            done = record.n_after >= self.plan.N
            self._leave([b for b, r in enumerate(self.rows) if r is not None and bool(done[b])])
        except Exception as exc:                      # the batch is lost; every request in it hears why
            self._fail(exc)

    def _fitting(self, plan: Plan) -> Plan:
        """`plan` at the largest window, its own or less, whose pass holds the batch under the
        model's memory cap (a policy may choose a window wider than the group's)."""
        window = plan.settings.window
        while window > 1 and rows_per_pass(self.model, plan.method, window, plan.settings.top_p) < self.batch_size:
            window //= 2
        return plan if window == plan.settings.window else _plan_with_window(plan, window)

    def _join(self) -> None:
        """Start the waiting requests: a new batch, or new rows of the running one."""
        if self.session is not None and not can_resize(self.session.session):
            return                                    # one batch at a time: wait for it to end
        with self._lock:
            room = self.max_batch - self.batch_size
            joining, self._waiting = self._waiting[:room], self._waiting[room:]
        if joining:
            self._start(joining)

    def _start(self, joining: list[Request]) -> None:
        """Start these requests as new rows. If the model refuses their start (a bad prompt),
        only the request it refuses hears why: a group that fails starts again one by one."""
        groups = [joining]
        while groups:
            group = groups.pop(0)
            if self.session is not None and not can_resize(self.session.session):
                with self._lock:                              # the rest wait for this batch
                    self._waiting[:0] = [r for g in [group, *groups] for r in g]
                return
            error = self._start_group(group)
            if error is not None and len(group) == 1:
                group[0]._end(error)
            elif error is not None:
                groups[:0] = [[request] for request in group]

    def _start_group(self, joining: list[Request]) -> Exception | None:
        """Start these requests as new rows in one pass; the error if the model refused them
        (the session is then as it was)."""
        prompts, seeds = [r.prompt for r in joining], [r.seed for r in joining]
        entered, running, added = time.perf_counter(), len(self.rows), False
        try:
            with no_autograd(self.plan):
                step_before = 0.0
                if self.session is None:
                    self.session = TimedSession.start(self.model, prompts, self.plan.cfg_scale)
                    self.plan.check_session(self.session.session)
                    first = self.session.first_logits
                else:
                    step_before = self.session.seconds
                    first, added = self.session.timed(self.session.session.add_rows, prompts), True
                state, verdict = start_rows(first, seeds, self.plan)
                # on the host: the prefill ran
                record = Iteration.from_pass(0, self.plan.method, None, state, verdict, 0)
                step = self.session.seconds - step_before
        except Exception as exc:
            if not running:
                self.session = None
            elif added:                                       # rows added, then a failure
                self.session.session.keep_rows(torch.arange(running, device=self.state.n.device))
            return exc
        self.passes += 1
        if self.state is not None and state.drafts.shape[1] != self.state.drafts.shape[1]:   # a policy's window
            state = resize(state, self.last_plan)
        self.state = state if self.state is None else State.cat([self.state, state])
        self.rows += joining
        wall = time.perf_counter() - entered
        for b, request in enumerate(joining):
            request.decode = row_decoder(self.model, self.session.session, running + b)
            request._deliver(record.row(b), wall, step, len(joining))
        if self.on_pass is not None:
            self.on_pass(record, list(enumerate(joining)))
        self._leave([running + b for b in range(len(joining)) if int(record.n_after[b]) >= self.plan.N])
        return None

    def _deliver(self, record: Iteration, wall: float, step: float) -> None:
        batch, rows = self.batch_size, [(b, r) for b, r in enumerate(self.rows) if r is not None]
        for b, request in rows:
            request._deliver(record.row(b), wall, step, batch)
        if self.on_pass is not None:
            self.on_pass(record, rows)

    def _leave(self, rows: list[int]) -> None:
        """End these rows' requests; drop the rows from the batch when the session can."""
        if not rows:
            return
        for b in rows:
            self.rows[b]._end()
            self.rows[b] = None
        keep = [b for b, r in enumerate(self.rows) if r is not None]
        if not keep:
            self.session = self.state = None
            self.rows = []
        elif can_resize(self.session.session):
            index = torch.tensor(keep, dtype=torch.long, device=self.state.n.device)
            self.session.session.keep_rows(index)
            self.state = self.state.select(index)
            self.rows = [self.rows[b] for b in keep]

    def _fail(self, error: BaseException) -> None:
        for request in self.rows:
            if request is not None and not request.future.done():
                request._end(error)
        self.session = self.state = None
        self.rows = []


_LIVE: "weakref.WeakSet[Server]" = weakref.WeakSet()


@atexit.register
def _close_servers() -> None:
    """At exit, every live server's requests are cancelled and its worker joined: a worker
    thread still inside torch when the interpreter ends would abort the process."""
    for server in list(_LIVE):
        server.close(cancel=True, timeout=10)


class Server:
    """Schedulers of one model, one per settings group, run by one worker thread that takes
    one pass of each busy group in turn. Requests with the same settings share passes.

    `device_lock`, if given, is held for each pass: another user of the device (a benchmark
    that must be timed alone) takes the same lock, and the server waits between passes.

    `on_pass(record, rows)`, if given, is called on the server's thread after each pass (the
    prefill of joining rows included) with the pass's record of all its rows and `rows`, the
    (row b of the record, Request) of the rows that had a request; each request's newest
    record is then its row's record of this pass. It lets a transport send one pass of many
    rows at once; it must be quick and must not raise.

    `threaded=False`: the server starts no thread; the passes run when its caller calls
    `step` (one caller at a time), in the caller's thread."""

    def __init__(self, model, max_batch: int = 32, policy: Policy | None = None,
                 device_lock: threading.Lock | None = None, on_pass: PassListener | None = None,
                 threaded: bool = True) -> None:
        self.model, self.max_batch, self.policy, self.on_pass = model, max_batch, policy, on_pass
        self.threaded = threaded
        self.device_lock = device_lock or threading.Lock()
        self.schedulers: dict[Settings, Scheduler] = {}
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        _LIVE.add(self)

    def submit(self, prompt: str, seed: int = 0, settings: Settings | None = None,
               on_record: Callable[[Iteration], None] | None = None, tag=None, **keywords) -> Request:
        """Queue a prompt with its settings (`settings`, or the keywords of `generate` on top
        of them); a ValueError names a bad argument at once. Requests whose settings are
        equal share passes. `on_record`: called with each of the row's records as it is made;
        `tag`: the caller's name for it (see Request)."""
        group = settings_of(settings, **keywords)
        with self._wake:
            scheduler = self.schedulers.get(group)
            if scheduler is None:
                scheduler = Scheduler(self.model, group, max_batch=self.max_batch, policy=self.policy,
                                      on_pass=self.on_pass)
                self.schedulers[group] = scheduler
            request = scheduler.submit(prompt, seed, on_record, tag)
            if self.threaded and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._work, name="scd-server", daemon=True)
                self._thread.start()
            self._wake.notify()
        return request

    def submit_rows(self, prompt: str, seeds, settings: Settings | None = None,
                    on_record: Sequence[Callable[[Iteration], None]] | None = None,
                    tags: Sequence | None = None) -> list[Request]:
        """One request per seed, queued together: they start in the same pass (as one batch
        of `generate` would), not one after another. A ValueError names a bad argument
        before any is queued. `on_record`, `tags`: one per seed (see Request)."""
        seeds, group = list(seeds), settings_of(settings)
        per_seed = {}
        for name, given in (("on_record", on_record), ("tags", tags)):
            per_seed[name] = [None] * len(seeds) if given is None else list(given)
            if len(per_seed[name]) != len(seeds):
                raise ValueError(f"{name}: expected one per seed ({len(seeds)}), got {len(per_seed[name])}")
        for seed in seeds:
            validate(self.model, [prompt], group, seed)
        with self._wake:                              # the worker reads the queue only after all are in
            return [self.submit(prompt, seed, group, callback, tag)
                    for seed, callback, tag in zip(seeds, per_seed["on_record"], per_seed["tags"])]

    def close(self, cancel: bool = False, timeout: float | None = None) -> None:
        """Stop the worker once the requests already submitted are done (`cancel`: cancel
        them first, so that they end at the next pass boundary)."""
        with self._wake:
            if cancel:
                for scheduler in self.schedulers.values():
                    with scheduler._lock:
                        requests = [r for r in scheduler.rows + scheduler._waiting if r is not None]
                    for request in requests:
                        request.cancel()
            self._closed = True
            self._wake.notify()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def step(self) -> bool:
        """One pass of each busy settings group, in the caller's thread (a server made with
        `threaded=False`; one caller at a time); False when no group had anything to run."""
        with self._wake:
            busy = [s for s in self.schedulers.values() if s.busy]
            if not busy:                              # groups without rows are forgotten, as the thread does
                self.schedulers = {g: s for g, s in self.schedulers.items() if s.session is not None}
        for scheduler in busy:
            with self.device_lock:
                scheduler.step()
        return bool(busy)

    def _work(self) -> None:
        while True:
            with self._wake:
                busy = [s for s in self.schedulers.values() if s.busy]
                if not busy and self._closed:
                    self._thread = None
                    return
                if not busy:
                    self.schedulers = {g: s for g, s in self.schedulers.items() if s.session is not None}
                    if not self._wake.wait(timeout=30):
                        self._thread = None
                        return
                    continue
            for scheduler in busy:
                with self.device_lock:
                    scheduler.step()

