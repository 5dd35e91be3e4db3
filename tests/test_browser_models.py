"""The page in a real browser (tests/browser_util.py): every method on every embedded model,
a clip model's frames, a phone's run, a model switch, and one run at a time.
"""
from __future__ import annotations

import os
import re
import time

import pytest

from demo import config, models, pictures
from browser_util import browser  # noqa: F401  (a fixture)
from browser_util import (error_badges, fill, image_src, in_sight, open_page, pick_model, placeholders,
                          selected_tab, text, unreachable_cells, wait_text, SHOTS, SIZES, SIZES_ONCE, STRAYS)
from scd_core.models import REGISTRY

pytestmark = pytest.mark.browser


def test_every_method_generates_without_an_error_on_every_embedded_model(browser):
    """In the page, AR too (AR once crashed encoding its empty drafts strip): no view of a
    finished run is an empty placeholder, AR's draft views say it has none, and the metrics
    name the device the header names."""
    page = open_page(browser, 1400, 1000)
    device = re.search(r"Engine: (\S+ \(\d+ threads?\))", text(page, "header")).group(1)
    for name in [n for n in models.listed_models() if not REGISTRY[n].needs_weights]:
        pick_model(page, name, wait=1200)
        fill(page, "pace", 0)
        for label in ("AR", "SJD", "SCD maximal coupling", "SCD Gumbel coupling"):
            page.locator("#method").get_by_text(label, exact=True).click()
            page.locator("#generate").click()
            page.wait_for_function(f"() => {{ const s = document.querySelector('#status').innerText; "   # this one's
                                   f"return s.startsWith({label!r}) && s.includes('done'); }}", timeout=180_000)
            wait_text(page, "summary", "wall time")                           # the final views are in
            said = text(page, "status")
            assert said.startswith(label) and error_badges(page) == 0, (name, label, said)
            assert ("no drafts (AR)" in said) == (label == "AR") and ("acceptance" in said) != (label == "AR")
            assert placeholders(page) == [], (name, label)
            assert f"on {device}" in text(page, "summary"), (device, name)
            if label == "AR":
                for elem in ("chart-flicker", "chart-rate", "heat-unchanged", "film-title"):
                    assert "AR feeds no drafts" in text(page, elem), elem
                assert "0.00" not in text(page, "chart-flicker") + text(page, "chart-length")
    page.close()


@pytest.mark.parametrize("size", SIZES_ONCE)
def test_a_video_model_shows_no_empty_clip_frames_before_or_during_a_run_and_its_clip_after(browser, size):
    """On a video model the finished clip's player and downloads appear with the clip: not as
    two empty frames before a run, nor while one forms, nor while the next one does."""
    pg = open_page(browser, *size)
    try:
        pick_model(pg, "tiny-video")
        assert placeholders(pg) == [] and not pg.locator("#clip-video").is_visible()
        for run in range(2):
            fill(pg, "pace", 0.1)
            pg.locator("#generate").click()
            wait_text(pg, "status", "decoding")
            pg.wait_for_timeout(800)
            assert placeholders(pg) == [] and not pg.locator("#clip-video").is_visible(), (size, run)
            pg.locator("#stop").click() if run else None
            wait_text(pg, "status", "stopped at NFE" if run else "done", timeout=120_000)
            if not run:                                        # the finished clip, however long it takes to come
                pg.locator("#clip-video video").wait_for(state="visible", timeout=120_000)
            pg.wait_for_timeout(1500)                          # nothing empty comes after it either
            assert placeholders(pg) == [], (size, run)
        pick_model(pg, "texture")
        assert not pg.locator("#clip-video").is_visible()
    finally:
        pg.close()


def test_phone_run_brings_stop_and_the_picture_into_sight_and_every_view_in_reach(browser):
    """On a phone a run brings Stop and the picture into sight; after it, nothing is an
    empty placeholder, every metric can be read whole, and the replay opens drawn on a pass that
    rejected a draft, saying where the last one is; a typo's message shows where one looks."""
    pg = open_page(browser, 390, 844)
    try:
        fill(pg, "pace", 0)
        pg.locator("#generate").click()
        wait_text(pg, "status", "done")
        wait_text(pg, "summary", "wall time")
        picture = pg.locator("#live-image").bounding_box()["y"]
        assert pg.locator("#stop").bounding_box()["y"] < picture
        stop = pg.locator("#stop").evaluate("el => el.getBoundingClientRect().top")
        assert 0 <= stop < 844                                  # Stop still in sight
        assert placeholders(pg) == []
        assert unreachable_cells(pg, "#summary td") == []
        pg.get_by_text("Replay and export the last run").click()
        last = int(re.search(r"NFE (\d+)", text(pg, "status")).group(1)) - 1
        wait_text(pg, "replay-text", f" of {last} · NFE", timeout=60_000)
        caption = text(pg, "replay-text")
        assert "the first rejection replaced by a residual sample" in caption and f"the last pass, {last}" in caption
        pg.wait_for_function("() => document.querySelector('#replay-image img')?.getAttribute('src')", timeout=60_000)
        assert placeholders(pg) == [] and image_src(pg, "replay-image")
        pg.screenshot(path=os.path.join(SHOTS, "scd_generate_390.png"), full_page=True)
        pg.evaluate("window.scrollTo(0, 0)")
        pg.locator("#prompt textarea").fill("")                # a typo: the message where one looks
        pg.locator("#generate").click()
        wait_text(pg, "input-message", "please type a prompt", timeout=10_000)
        box = pg.locator("#input-message").bounding_box()
        assert 0 <= box["y"] and box["y"] + box["height"] <= 844
    finally:
        pg.close()


@pytest.mark.parametrize("size", SIZES_ONCE)
def test_a_model_switch_keeps_the_visitors_settings_and_leaves_no_view_of_the_last_model(browser, size):
    """After a run on texture, switching to tiny: the status, the picture and the tokens chart
    are tiny's (nothing of texture's run stays under tiny's name), the settings the visitor
    set stay and one line says which changed, also on the way back; a run then names its model."""
    pg = open_page(browser, *size)
    try:
        fill(pg, "window", 8)
        fill(pg, "pace", 0)
        pg.locator("#generate").click()
        wait_text(pg, "status", "done")
        assert "on texture" in text(pg, "status")
        texture_picture = image_src(pg, "live-image")
        pick_model(pg, "tiny")
        wait_text(pg, "settings-changed", "Settings for tiny")
        said = text(pg, "settings-changed")
        assert "kept as you set them: Window L 8, Slow motion 0." in said and "CFG scale 1 → 3" in said
        assert text(pg, "status").startswith("tiny ·") and "texture" not in text(pg, "status")
        assert image_src(pg, "live-image") != texture_picture
        grid = pg.locator("#live-image img").evaluate("el => [el.naturalWidth, el.naturalHeight]")
        assert grid == list(pictures.blank_picture(tuple(config.MODELS.get("tiny").grid)).shape[1::-1])
        ar_line = pg.locator("#chart-committed .js-plotly-plot").evaluate("el => el.data[0].x")
        assert ar_line == [0, 64] and placeholders(pg) == [] and pg.evaluate(STRAYS) == []
        assert pg.locator("#window input").input_value() == "8"
        pg.locator("#generate").click()
        wait_text(pg, "status", "on tiny")
        wait_text(pg, "status", "done")
        assert "slow motion" not in text(pg, "status")          # full speed, as the visitor set
        pick_model(pg, "texture")
        wait_text(pg, "settings-changed", "Settings for texture")
        assert pg.locator("#window input").input_value() == "8"
        assert "kept as you set them: Window L 8" in text(pg, "settings-changed")
        cannot = next((n for n in models.listed_models() if models.unavailable(n)), None)
        if cannot:                                   # one that cannot run here (never a download)
            pick_model(pg, cannot)
            wait_text(pg, "status", cannot)
            assert not pg.locator("#live-image img").is_visible() or \
                image_src(pg, "live-image") != texture_picture
            assert "texture" not in text(pg, "status") + text(pg, "chart-committed")
    finally:
        pg.close()


@pytest.mark.parametrize("size", SIZES_ONCE)
def test_one_run_at_a_time_a_second_click_is_refused_and_a_model_switch_stops_the_run(browser, size):
    """One run at a time (both sizes in the slow lane): a second Generate (or Race) while a run goes is
    refused beside the buttons, in sight; a model picked during a run stops it at once, its
    status says so under the new model's name and nothing of the old run comes back; Generate
    on the new model then starts at once. The same for a race, and for the Lossless tab."""
    pg = open_page(browser, *size)
    try:
        fill(pg, "pace", 0.1)
        pg.locator("#generate").click()
        wait_text(pg, "status", "decoding", timeout=60_000)
        for button in ("generate", "race"):
            pg.locator(f"#{button}").click()
            wait_text(pg, "input-message", "is still going", timeout=5_000)
            assert in_sight(pg, "#input-message") == "ok", size
        pg.wait_for_timeout(2000)                              # the race's click started nothing either
        assert "on texture" in text(pg, "status") and selected_tab(pg) == "Generate"
        pick_model(pg, "tiny", wait=0)
        wait_text(pg, "status", "ended when you picked tiny", timeout=5_000)
        wait_text(pg, "settings-changed", "ended when you picked tiny", timeout=5_000)
        assert in_sight(pg, "#settings-changed") == "ok", size     # said where the visitor looks
        pg.wait_for_timeout(2500)                              # nothing of the texture run comes back
        said = text(pg, "status")
        assert "ended when you picked tiny" in said and "on texture ·" not in said, said
        grid = pg.locator("#live-image img").evaluate("el => el.naturalWidth")
        assert grid == pictures.blank_picture(tuple(config.MODELS.get("tiny").grid)).shape[1], size
        started = time.monotonic()
        pg.locator("#generate").click()                       # tiny's run starts at once, not after texture's
        wait_text(pg, "status", "on tiny ·", timeout=20_000)
        assert time.monotonic() - started < 15
        wait_text(pg, "status", "done", timeout=60_000)
        fill(pg, "pace", 0)
        fill(pg, "samples", 8)
        pg.locator("#race").click()                           # a race, switched away from
        pg.wait_for_function("() => /Warming|Decoding|Timing/.test(document.querySelector('#race-status')"
                             "?.innerText || '')", timeout=60_000)
        pick_model(pg, "texture", wait=0)
        wait_text(pg, "race-status", "your race on tiny ended when you picked texture", timeout=10_000)
        pg.wait_for_timeout(1500)
        assert "Decoding" not in text(pg, "race-status") and not pg.locator("#race-ar img").is_visible()
        pg.get_by_role("tab", name="Lossless").click()        # a comparison: one at a time too
        fill(pg, "loss-samples", 128)
        pg.locator("#lossless").click()
        wait_text(pg, "lossless-status", "Decoding", timeout=20_000)
        pg.locator("#lossless").click()
        wait_text(pg, "lossless-message", "is still going", timeout=5_000)
        assert in_sight(pg, "#lossless-message") == "ok", size
        pick_model(pg, "tiny", wait=0)
        wait_text(pg, "lossless-status", "ended when you picked tiny", timeout=10_000)
        pg.wait_for_timeout(1500)
        assert "Decoding" not in text(pg, "lossless-status")
        pick_model(pg, "texture")
    finally:
        pg.close()
