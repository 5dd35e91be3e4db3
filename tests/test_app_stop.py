"""A clean stop, as a Space restarts: `python app.py` served on loopback with decode workers,
a run in flight, then SIGTERM (`python -m bench page-lifecycle`): the process exits 0 within 10 s,
its visitor is told why, and no worker outlives it."""
from __future__ import annotations

import pytest

from bench import page_lifecycle

pytestmark = pytest.mark.served


def test_sigterm_stops_the_runs_closes_the_workers_and_exits_0_within_10_s():
    out = page_lifecycle.measure()
    assert out["workers"], out                                   # a worker ran the Generate
    assert out["sigterm_exit_code"] == 0 and out["sigterm_exit_s"] < 10, out
    assert out["orphans"] == [], out
    assert "the page is restarting" in (out["in_flight_last_status"] or ""), out
