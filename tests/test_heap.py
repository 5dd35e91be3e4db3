"""The page's freed memory given back to the system (demo/heap.py)."""
from __future__ import annotations

import sys
import threading

import pytest

from demo import heap


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc only")
def test_on_linux_the_arenas_are_capped_and_free_memory_is_returned():
    assert heap.cap_arenas(8)                              # glibc's mallopt accepts the cap
    block = bytearray(64 << 20)                            # 64 MB freed below: something to return
    del block
    assert isinstance(heap.trim(), bool)


def test_the_trimmer_trims_every_period_until_stopped():
    calls = threading.Semaphore(0)
    trimmer = heap.Trimmer(every_s=0.01, trim=lambda: calls.release() or True).start()
    for _ in range(3):
        assert calls.acquire(timeout=5), "the trimmer stopped trimming"
    trimmer.stop.set()
    trimmer.thread.join(timeout=5)
    assert not trimmer.thread.is_alive() and trimmer.passes >= 2
