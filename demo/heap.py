"""The page's freed memory given back to the system. glibc's malloc keeps what a thread frees for
later use, in one arena per thread that allocated at once (up to 8 per core): after a burst of
64 visitors (about 100 threads) the page held a few hundred MB it no longer used, which no
later, quieter hour gave back. So the arenas are capped when the page starts (`cap_arenas`)
and the free memory is returned every `EVERY_S` seconds (`Trimmer`: `malloc_trim`, 2-10 ms on a
heap of a few hundred MB). With another C library (not Linux) both do nothing.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Callable

M_ARENA_MAX = -8      # mallopt's parameter for the arenas' number (glibc's malloc.h)
ARENAS = 2            # arenas at most: the page's threads mostly wait, and two cores share them
EVERY_S = 5.0         # seconds between two returns of the free memory (a burst's is back within them)


def _libc():
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None
    except OSError:
        return None


def cap_arenas(count: int = ARENAS) -> bool:
    """At most `count` malloc arenas for the threads started from now on; whether it applied."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(M_ARENA_MAX, count))


def trim() -> bool:
    """Give the heap's free memory back to the system now; whether any was."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))


class Trimmer:
    """`trim()` every `every_s` seconds in a thread of its own, until `stop` is set."""

    def __init__(self, every_s: float = EVERY_S, trim: Callable[[], bool] = trim) -> None:
        self.every_s, self.trim, self.passes = every_s, trim, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="scd-heap-trim", daemon=True)

    def start(self) -> "Trimmer":
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            self.trim()
            self.passes += 1
