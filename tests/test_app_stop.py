"""A clean stop, as a Space restarts: every visitor in flight told that the page is restarting
(two Generates in slow motion, a race and a Lossless comparison, one of these two running and
the other waiting, each first in one trial) at the page's stop in this process; and `python app.py`
served on loopback with decode workers, the same visitors in flight, then SIGTERM
(`python -m bench page-lifecycle`): the process exits 0 within 10 s, every visitor told, no worker
outlives it."""
from __future__ import annotations

import time

import pytest
from gradio_client import Client

from bench import page_lifecycle

pytestmark = pytest.mark.served

RESTARTING = "the page is restarting"


def test_every_visitor_in_flight_is_told_the_page_is_restarting_in_every_trial():
    from demo import config, page, queues

    lifecycle = page_lifecycle
    try:
        for trial in range(2):
            page.demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **config.LAUNCH)
            url = page.demo.local_url
            visitors = {f"generate-{i}": ("/generate", lifecycle.TINY | {"seed": i, "pace": 2.0}, 1) for i in range(2)}
            decode = [("race", ("/race", lifecycle.TINY | {"samples": 2, "pace": 2.0}, 0)),
                      ("lossless", ("/lossless", lifecycle.LOSSLESS, 0))]
            visitors |= dict(decode[::1 if trial % 2 else -1])          # each of them first, in turn
            jobs = {name: (Client(url, verbose=False).submit(**inputs, api_name=api), index)
                    for name, (api, inputs, index) in visitors.items()}
            assert lifecycle.wait_for(lambda: all(lifecycle.last_status(*jobs[f"generate-{i}"]) for i in range(2))
                                      and len(config.CONTROL.runs.all()) == 3             # one decode job runs,
                                      and len(queues.sessions(page.demo)) == 4, 120)      # the other waits
            t = time.monotonic()
            page.shut_down()
            assert time.monotonic() - t < config.DRAIN_S + config.FLUSH_S + 3
            told = {name: ended(job, index) for name, (job, index) in jobs.items()}
            assert all(RESTARTING in (said or "") for said in told.values()), (trial, told)
            config.CONTROL.closing = ""
    finally:
        config.CONTROL.closing = ""
        page.demo.close()


def ended(job, index: int) -> str | None:
    """A job's last status once it has ended, whatever it ended with (the server is gone)."""
    try:
        job.result(timeout=10)
    except Exception:                                       # noqa: BLE001: its last status is what counts
        pass
    return page_lifecycle.last_status(job, index)


def test_sigterm_tells_every_visitor_closes_the_workers_and_exits_0_within_10_s():
    out = page_lifecycle.measure(firsts=False)
    assert out["workers"], out                                   # workers ran the Generates
    assert out["sigterm_exit_code"] == 0 and out["sigterm_exit_s"] < 10, out
    assert out["orphans"] == [], out
    assert out["in_flight_seen"] and out["in_flight_told"] == out["in_flight"] == 4, out
