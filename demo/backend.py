"""Where Generate decodes: the decode client that `SCD_DECODE` names, parsed once here, and
the page's requests on it (one per running Generate, by visitor, so that Stop cancels it).

    SCD_DECODE=process        (the default) one worker process per model (`scd_core.workers`),
                              SCD_THREADS torch threads each (default 1)
    SCD_DECODE=local          in the page's process, on the page's own models and servers
    SCD_DECODE=call           in the page's process, inside the call that asks (no thread of
                              its own): the default, and the only choice, on ZeroGPU
                              (SPACES_ZERO_GPU set), whose GPU a call holds only in its process
    SCD_DECODE=ray://local    Ray Serve (`scd_core.distributed.service.client_from_env`)
    SCD_DECODE=ray://HOST:PORT

and how much of a device the page's models may hold (`memory`):

    SCD_GPU_BYTES             bytes of large models resident at once per device (a GPU, or the
                              CPU without one), e.g. 40GB; unset: one large model at a time
    SCD_IDLE_S                seconds a worker process may go unused before it is closed
                              (default 600; 0: never)
"""
from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable

from scd_core.settings import Settings

ENV = "SCD_DECODE"
BACKENDS = ("process", "local", "call", "ray://local", "ray://HOST:PORT")
ZERO_GPU = "SPACES_ZERO_GPU"
GPU_BYTES, IDLE = "SCD_GPU_BYTES", "SCD_IDLE_S"
IDLE_S = 600                  # the default: a worker unused for 10 minutes is closed
UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20,
         "gib": 2**30, "tib": 2**40}


@dataclass(frozen=True)
class Memory:
    """How much of a device the page's models may hold: `gpu_bytes` of large models resident
    at once per device (None: one large model at a time), and `idle_s`, the seconds a worker
    process may go unused before it is closed (None: never)."""

    gpu_bytes: int | None = None
    idle_s: float | None = IDLE_S


def env_count(name: str, default: int) -> int:
    """A whole number >= 1 from environment variable `name` (unset or empty: `default`)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name}: expected a whole number >= 1, got {raw!r}")
    return int(raw)


def env_flag(name: str) -> bool:
    """On or off from environment variable `name`: 1/true/yes, or 0/false/no (unset or empty: off)."""
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise ValueError(f"{name}: expected 1 or 0, got {raw!r}")


# SCD_COMPILE=1: every run's pass is compiled (scd_core.passes; the first run of each setting
# pays its compile). Off by default: a cold compile takes 20-60 s per setting on a small CPU.


def memory(environ=os.environ) -> Memory:
    """SCD_GPU_BYTES and SCD_IDLE_S, read once here; a ValueError naming the variable."""
    raw = (environ.get(GPU_BYTES) or "").strip()
    gpu_bytes = None
    if raw:
        match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", raw)
        if match is None or match.group(2).lower() not in UNITS or \
                int(float(match.group(1)) * UNITS[match.group(2).lower()]) < 1:
            raise ValueError(f"{GPU_BYTES}: expected a size such as 40GB or 40000000000 (bytes), got {raw!r}")
        gpu_bytes = int(float(match.group(1)) * UNITS[match.group(2).lower()])
    raw = (environ.get(IDLE) or "").strip()
    if raw and not raw.isdigit():
        raise ValueError(f"{IDLE}: expected a whole number of seconds (0: never), got {raw!r}")
    idle_s = IDLE_S if not raw else int(raw) or None
    return Memory(gpu_bytes, idle_s)


def on_zero_gpu(environ=os.environ) -> bool:
    """Whether this is a ZeroGPU Space (SPACES_ZERO_GPU, read as the `spaces` package reads it)."""
    return (environ.get(ZERO_GPU) or "").strip().lower() in ("1", "t", "true")


def backend_kind(environ=os.environ) -> str:
    """`process`, `local`, `call` or `ray` from SCD_DECODE (unset or empty: `process`, or
    `call` on ZeroGPU); a ValueError naming SCD_DECODE otherwise, or for a decode outside the
    calls on ZeroGPU (it would never hold the GPU)."""
    value = (environ.get(ENV) or "").strip() or ("call" if on_zero_gpu(environ) else "process")
    if on_zero_gpu(environ) and value != "call":
        raise ValueError(f"{ENV}={value} cannot decode on ZeroGPU ({ZERO_GPU} is set): its GPU is held "
                         f"only inside a @spaces.GPU call, in that call's process. Unset {ENV} (or set "
                         "it to call) to decode inside the calls.")
    if value in ("process", "local", "call"):
        return value
    if value.startswith("ray://") and value != "ray://":
        return "ray"
    raise ValueError(f"{ENV} must be one of {', '.join(BACKENDS)}, got {value!r}")


# What a decode worker imports before it is forked (`worker_start`): torch and the page's model
# loading, never the page itself.
WORKER_PRELOAD = ("torch", "torch._dynamo", "scd_core.workers", "demo.models")


def worker_start() -> str:
    """How the decode workers start: forked from a server process that has imported
    WORKER_PRELOAD once ("forkserver"), so that a worker starts in about a second, not the
    seconds a fresh interpreter takes to import torch, and ends without the interpreter's
    teardown; "spawn" where the system has no forkserver."""
    import multiprocessing
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(WORKER_PRELOAD))
    return "forkserver"


def make_client(kind: str, local: Callable[[bool], Any], load: Callable[[str], Any], max_batch: int,
                environ=os.environ):
    """The decode client of this kind: `local(in_call)` makes the in-process one (`in_call`:
    no thread, for `call`); the worker processes load their model with `load(name)` (a
    module-level function: it is sent to them)."""
    if kind in ("local", "call"):
        return local(kind == "call")
    if kind == "process":
        from scd_core.models.cache import Residency
        from scd_core.workers import ProcessClient
        limits = memory(environ)
        return ProcessClient(max_batch=max_batch, threads=env_count("SCD_THREADS", 1), load=load,
                             residency=Residency(limits.gpu_bytes), idle_timeout=limits.idle_s,
                             start_method=worker_start())
    from scd_core.distributed.service import client_from_env
    return client_from_env(environ)


class Requests:
    """The page's running Generate requests on one decode client: by visitor (Stop cancels
    theirs at once) and by model (how many rows of it the page is decoding now)."""

    def __init__(self, client) -> None:
        self.client = client
        self._lock = threading.Lock()
        self._running: dict[str, tuple[str, str]] = {}     # request id -> (visitor, model name)

    def submit(self, visitor: str, name: str, prompt: str, seed: int, settings: Settings) -> str:
        rid = self.client.submit(name, prompt, seed, settings)
        with self._lock:
            self._running[rid] = (visitor, name)
        return rid

    def done(self, rid: str) -> None:
        with self._lock:
            self._running.pop(rid, None)

    def cancel_visitor(self, visitor: str) -> None:
        """Cancel the visitor's running rows (at once: each leaves at its next pass boundary)."""
        with self._lock:
            mine = [rid for rid, (v, _) in self._running.items() if v == visitor]
        for rid in mine:
            try:
                self.client.cancel(rid)
            except ValueError:                       # it ended and was forgotten meanwhile
                pass

    def rows_of(self, name: str) -> int:
        """The page's rows of this model decoding now."""
        with self._lock:
            return sum(1 for _, n in self._running.values() if n == name)


class Row:
    """One Generate row on the decode client, as the page reads it: the name of its decoder
    (its request id: the client draws its pictures with it) and the batch sizes of its
    passes, live where the client tells them (the in-process clients), else at its end."""

    def __init__(self, requests: Requests, rid: str, name: str) -> None:
        self.requests, self.rid, self.name, self.client = requests, rid, name, requests.client
        self.final: tuple[int, ...] | None = None

    def decode(self):
        """How the client names the row's decoder for its pictures (None: the model's own)."""
        return getattr(self.client, "decoder", lambda rid: None)(self.rid)

    def batch_sizes(self) -> list[int]:
        if self.final is not None:
            return list(self.final)
        live = getattr(self.client, "batch_sizes", None)
        return live(self.rid) if live else []

    def share(self, record) -> int:
        """The rows that decoded this record's pass (the page's rows of the model, if not told)."""
        sizes = self.batch_sizes()
        return sizes[record.index] if record.index < len(sizes) else max(1, self.requests.rows_of(self.name))

    def shared(self, records: int) -> int:
        """The most other rows that one of its first `records` passes decoded with it."""
        return max(self.batch_sizes()[:records], default=1) - 1

    def end(self) -> None:
        """Cancel it if it still runs (it leaves at its next pass boundary), read its batch
        sizes from its result, then forget it."""
        try:
            self.client.cancel(self.rid)
            self.final = tuple(self.client.result(self.rid, timeout=5.0).batch_sizes)
        except (TimeoutError, RuntimeError, ValueError):   # DecodeError is a RuntimeError
            pass
        self.requests.done(self.rid)
        getattr(self.client, "release", lambda rid: None)(self.rid)
