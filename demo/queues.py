"""The page's queues as the page reads Gradio's: admission (how many places a visitor and a
client hold on each queue, and how many jobs wait there, counted before a request joins,
Gradio's validator, and only while Gradio still holds the job), and, at a clean stop, every job
let through to be told why (`open_all`) and its last updates seen to leave (`unsent`).

- A visitor is one Gradio session (a browser tab, a gradio_client `Client`). A client is the
  visitor's address (`client_address`): many sessions of one address are one client, and so
  is a call with no session at all (plain HTTP).
- A place is taken when the validator admits a request and given back when Gradio lets go of
  its job: it ended, it was cancelled while it waited (`job.cancel()`, the tab closed), or it
  never joined. Gradio makes the job right after its validator returns, holding the very
  request the validator saw; a place is matched to its job by that request (`Place.seen`).
- Each queue has its own caps (`Caps`): a queue's waiting jobs never take another queue's places.

Gradio's queue is read here only (`gradio_jobs`, `unsent`, `open_all`: Gradio 6.31, pinned in
requirements.txt); `tests/test_app_control.py` and `tests/test_app_stop.py` fail the day it changes.
"""
from __future__ import annotations

import ipaddress
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

PROXY_HOPS = "SCD_PROXY_HOPS"
JOIN_S = 10.0         # a place whose job Gradio has not made by then never joined (the join failed)
LOOK_S = 0.05         # while a place waits for its job, Gradio's queue is read this often


@dataclass(frozen=True)
class Caps:
    """A queue's caps: places one visitor (`session`) and one client (`client`) hold on it,
    queued or running, and jobs waiting on it from everyone (`waiting`)."""

    session: int
    client: int
    waiting: int


@dataclass(frozen=True)
class Job:
    """A job Gradio holds: the request that asked, its queue (Gradio's concurrency id), and
    whether it still waits for its turn."""

    request: object
    queue: str
    waiting: bool


@dataclass(eq=False)
class Place:
    request: object         # the HTTP request that asked (Gradio's job holds the same object)
    queue: str
    session: str
    client: str
    at: float
    seen: bool = False      # Gradio has made its job
    waiting: bool = True


def gradio_jobs(blocks) -> list[Job]:
    """The jobs Gradio's queue holds now, waiting or running (read from another thread: each
    collection is copied whole first)."""
    queue = getattr(blocks, "_queue", None)
    if queue is None:
        return []
    waiting = {id(event) for lane in list(queue.event_queue_per_concurrency_id.values()) for event in list(lane.queue)}
    return [Job(event.request, event.concurrency_id, id(event) in waiting)
            for event in list(queue.event_ids_to_events.values())]


def sessions(blocks) -> set[str]:
    """The sessions whose jobs Gradio holds, waiting or running."""
    queue = getattr(blocks, "_queue", None)
    return set() if queue is None else {event.session_hash for event in list(queue.event_ids_to_events.values())}


def open_all(blocks) -> None:
    """Let every waiting job start now, whatever its queue's concurrency (the page stops: each
    one ends at once, saying why)."""
    queue = getattr(blocks, "_queue", None)
    for lane in list(queue.event_queue_per_concurrency_id.values()) if queue is not None else ():
        lane.concurrency_limit = None


def unsent(blocks, sessions: set[str]) -> int:
    """Of these sessions, those whose jobs Gradio still holds or whose streams have not yet
    sent their jobs' ends (a clean stop waits for none to be left)."""
    queue = getattr(blocks, "_queue", None)
    if queue is None:
        return 0
    holding = {event.session_hash for event in list(queue.event_ids_to_events.values())}
    return sum(s in holding or bool(queue.pending_event_ids_session.get(s))
               or not getattr(queue.pending_messages_per_session.get(s), "empty", lambda: True)() for s in sessions)


def proxy_hops(environ=os.environ) -> int:
    """How many proxies in front of the page add to X-Forwarded-For (SCD_PROXY_HOPS): unset,
    1 on a Hugging Face Space (SPACE_ID set: the Space's proxy), else 0."""
    raw = (environ.get(PROXY_HOPS) or "").strip()
    if not raw:
        return 1 if environ.get("SPACE_ID") else 0
    if not raw.isdigit():
        raise ValueError(f"{PROXY_HOPS}: expected a whole number of proxies (0: none), got {raw!r}")
    return int(raw)


def client_address(request, hops: int = 0) -> str:
    """The visitor's address: with `hops` proxies in front of the page, the one the farthest
    of them was connected from (X-Forwarded-For's `hops`-th entry from the right: each proxy
    appends the address it was connected from, so what a client writes there itself stays to
    the left); with none, the socket's (uvicorn already puts there X-Forwarded-For's entry
    from a proxy on this machine, FORWARDED_ALLOW_IPS)."""
    raw = getattr(request, "request", None) or request          # a gr.Request, or the HTTP request itself
    socket = getattr(getattr(raw, "client", None), "host", None) or ""
    if hops > 0:
        headers = getattr(raw, "headers", None)
        values = headers.getlist("x-forwarded-for") if hasattr(headers, "getlist") else []
        forwarded = [h.strip() for value in values for h in value.split(",") if h.strip()]
        if forwarded:
            return _address(forwarded[-hops] if len(forwarded) >= hops else forwarded[0])
    return socket or "unknown"


def _address(text: str) -> str:
    """An address as written in X-Forwarded-For, without a port; anything else as it came, cut short."""
    text = text.strip().strip('"')
    for candidate in (text, text.rsplit(":", 1)[0], text.strip("[]"), text.split("]")[0].lstrip("[")):
        try:
            return str(ipaddress.ip_address(candidate))
        except ValueError:
            continue
    return text[:64]


class Admissions:
    """The places taken on the page's queues (see the module docstring). `caps`: each queue's
    `Caps` (`default` for a queue not named); `jobs()`: the jobs Gradio holds (`gradio_jobs`)."""

    def __init__(self, caps: dict[str, Caps], default: Caps, jobs: Callable[[], Iterable[Job]] = list,
                 hops: int = 0, clock=time.monotonic, join_s: float = JOIN_S, look_s: float = LOOK_S) -> None:
        self.caps, self.default, self.jobs, self.hops = caps, default, jobs, hops
        self.clock, self.join_s, self.look_s = clock, join_s, look_s
        self._lock = threading.Lock()
        self._places: list[Place] = []
        self._looking: threading.Thread | None = None

    def caps_of(self, queue: str) -> Caps:
        return self.caps.get(queue, self.default)

    def admit(self, request, queue: str) -> str | None:
        """Take a place on `queue` for this request: None when taken, else which cap refused it
        ("session", "client" or "waiting"). A call from outside Gradio (no request) is not counted."""
        if request is None:
            return None
        session = getattr(request, "session_hash", None) or ""
        client = client_address(request, self.hops)
        caps = self.caps_of(queue)
        with self._lock:
            jobs = self._settle()
            mine = [p for p in self._places if p.queue == queue]
            if session and sum(p.session == session for p in mine) >= caps.session:
                return "session"
            if sum(p.client == client for p in mine) >= caps.client:
                return "client"
            waiting = sum(j.waiting and j.queue == queue for j in jobs) + sum(not p.seen for p in mine)
            if waiting >= caps.waiting:
                return "waiting"
            self._places.append(Place(getattr(request, "request", None) or request, queue, session, client,
                                      self.clock()))
            self._look()
        return None

    def held(self, queue: str, session: str | None = None, client: str | None = None) -> int:
        """Places taken on `queue` (by that visitor, or that client)."""
        with self._lock:
            self._settle()
            return sum(p.queue == queue and session in (None, p.session) and client in (None, p.client)
                       for p in self._places)

    def release_waiting(self, session: str) -> None:
        """Give back the visitor's places whose jobs still wait (they were stopped: each ends at
        once when its turn comes)."""
        if not session:
            return
        with self._lock:
            self._settle()
            self._places = [p for p in self._places if p.session != session or (p.seen and not p.waiting)]

    def _settle(self) -> list[Job]:
        """Match the places to Gradio's jobs; drop those whose job is gone or never came. Gradio's
        jobs, as read (with self._lock held)."""
        jobs = list(self.jobs())
        held = {id(j.request): j for j in jobs}
        now, kept = self.clock(), []
        for place in self._places:
            job = held.get(id(place.request))
            if job is not None and job.request is place.request:
                place.seen, place.waiting = True, job.waiting
                kept.append(place)
            elif not place.seen and now - place.at < self.join_s:
                kept.append(place)
        self._places = kept
        return jobs

    def _look(self) -> None:
        """Read Gradio's queue often while a place waits for its job (with self._lock held): a job
        cancelled a moment after it joined then gives its place back at once too."""
        if self._looking is None:
            self._looking = threading.Thread(target=self._watch, name="scd-admissions", daemon=True)
            self._looking.start()

    def _watch(self) -> None:
        while True:
            time.sleep(self.look_s)
            with self._lock:
                self._settle()
                if all(p.seen for p in self._places):
                    self._looking = None
                    return
