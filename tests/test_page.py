"""scd_core.page: the page's own checks, widget numbers, stop stamps and the pace of updates."""
from __future__ import annotations

import time

import pytest

from scd_core import page


def test_widget_numbers_become_ints_only_when_whole():
    assert page.as_int(16.0) == 16 and isinstance(page.as_int(16.0), int)
    assert page.as_int(2.5) == 2.5 and page.as_int(None) is None
    assert page.as_float(3) == 3.0 and isinstance(page.as_float(3), float)


def test_settings_are_checked_by_the_library_which_names_the_argument():
    shape = page.shape_of("texture")
    s = page.settings(shape, "ocean waves", "scd-mc", 16.0, "random", 1, 0.0, 1, 1, 4.0)
    assert (s.window, s.top_k, s.seed, s.temperature) == (16, 0, 4, 1.0)
    for args, word in [((1.5,), "window"), ((0,), "window")]:
        with pytest.raises(ValueError, match=f"^{word}"):
            page.settings(shape, "x", "sjd", *args, "random", 1, 0, 1, 1, 0)
    with pytest.raises(ValueError, match="^init 'repeat-frame' needs a video"):
        page.settings(shape, "x", "sjd", 16, "repeat-frame", 1, 0, 1, 1, 0)
    page.settings(page.shape_of("tiny-video"), "x", "sjd", 16, "repeat-frame", 1, 0, 1, 1, 0)


def test_page_limits_are_its_own():
    with pytest.raises(ValueError, match="please type a prompt"):
        page.check_prompt("  ")
    assert page.check_prompt(" red apple ") == "red apple"
    with pytest.raises(ValueError, match="slow motion"):
        page.check_pace(page.MAX_PACE + 1)
    with pytest.raises(ValueError, match="samples must be"):
        page.check_samples(page.MAX_SAMPLES + 1)
    assert page.check_samples(8.0) == 8


def test_stop_reaches_runs_clicked_before_it_and_none_after():
    stops = page.Stops()
    stops.stop("a", at=2000.0)                    # browser time stamps, in milliseconds
    assert stops.stopped("a", 1000.0) and stops.stopped("a", 2000.0)     # running or waiting
    assert not stops.stopped("a", 2001.0) and not stops.stopped("b", 1000.0)
    stops.stop("a", at=1500.0)                    # an older stamp never undoes a newer stop
    assert stops.stopped("a", 1999.0)
    stamp = stops.stamp(None)                     # no stamp (the API): the server's clock
    assert abs(stamp - time.time() * 1000) < 1000 and stops.stamp(123.0) == 123.0
    stops.stop("idle")
    assert not stops.stopped("idle", stops.stamp(None) + 1)
    stops.forget("a")
    assert not stops.stopped("a", 1000.0)


def test_pacer_throttles_full_speed_and_paces_slow_motion():
    due = page.Pacer(every=0.05)
    assert due() and not due() and due(force=True)
    slow = page.Pacer(every=0.01, pace=0.05)
    t = time.perf_counter()
    for _ in range(4):
        assert slow()
    assert time.perf_counter() - t >= 0.15


def test_a_stop_cuts_the_slow_motion_wait_short():
    flag = {"stop": False}
    slow = page.Pacer(every=0.01, pace=1.5, stopped=lambda: flag["stop"])
    slow()
    flag["stop"] = True
    t = time.perf_counter()
    slow()
    page.sleep_until(time.perf_counter() + 5, lambda: flag["stop"])
    assert time.perf_counter() - t < 0.1
