"""The page in a real browser (tests/browser_util.py): a first visit at three sizes, then one
visitor's session on one page at 1400x1000 (`page`, its tests in order): generate, stop,
a refused field, a race, greedy, a clip model's race, a draft tree.
"""
from __future__ import annotations

import os
import re
import time

import pytest

from demo import models, run_view, texts
from scd_core import race
from browser_util import browser  # noqa: F401  (a fixture)
from browser_util import (error_badges, fill, image_src, open_page, pick_model, placeholders, race_cells,
                          text, unreachable_cells, wait_text, SHOTS, STRAYS)
from legend_check import unnamed_colours

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page(browser):
    pg = open_page(browser, 1400, 1000)
    yield pg
    pg.close()


def tab_bar(pg) -> list[str]:
    """The tabs a person sees in the tab bar (not behind a "more" menu)."""
    return [t.strip() for t in pg.locator("button[role=tab]").all_inner_texts()
            if t.strip()] if not pg.locator("button[aria-label='More tabs']").is_visible() else \
        ["(some behind a menu)"]


@pytest.mark.parametrize("size", [(1400, 1000), pytest.param((900, 1000), marks=pytest.mark.slow), (390, 844)])
def test_first_visit_shows_the_controls_first_every_tab_and_no_placeholder(browser, size):
    """Generate, Race and Stop without scrolling; on a phone or a tablet, model, prompt, method
    and Settings (one tap away) before them and the results after, as wide as the page allows
    (two columns left a 900 px window's results 348 px wide); every tab in the tab bar;
    every view of the Generate tab says what it will show, none is an empty placeholder; the
    strip's layout said the same in its title and in "How it works"; the model list's labels
    whole and honest; a clip model shows no empty heading."""
    pg = open_page(browser, *size)
    try:
        for button in ("generate", "race", "stop"):
            box = pg.locator(f"#{button}").bounding_box()
            assert box["y"] + box["height"] <= size[1], button
        pg.screenshot(path=os.path.join(SHOTS, f"scd_first_visit_{size[0]}.png"))
        assert tab_bar(pg) == ["Generate", "Race", "Lossless", "How it works"]
        assert placeholders(pg) == []
        assert pg.evaluate(STRAYS) == []
        ys = [pg.locator(f"#{e}").bounding_box()["y"] for e in
              ("model", "prompt", "method", "settings", "generate", "live-image")]
        if size[0] <= texts.NARROW_PX:        # one column: the controls, then the results
            assert ys == sorted(ys), ys
            assert pg.locator("#results").bounding_box()["width"] >= pg.locator("#main").bounding_box()["width"] - 24
            assert pg.locator("#settings button.label-wrap").is_visible()
        layout = texts.FILM_LAYOUT
        assert layout in text(pg, "film-title")
        pg.get_by_role("tab", name="How it works").click()
        assert layout in text(pg, "how-it-works") and "one line per pass" not in text(pg, "how-it-works")
        pg.get_by_role("tab", name="Generate").click()
        pg.locator("#model input").click()                            # the list as a person reads it
        options = [o.split("\n")[-1] for o in pg.get_by_role("option").all_inner_texts()]   # no tick
        pg.keyboard.press("Escape")
        pg.locator("#header").click()
        for label in options:
            name = label.split(" · ")[0].strip()
            if "download" in label:                  # a download offered is one that can happen
                assert models.unavailable(name) is None, label
        longest = max(models.listed_models(), key=lambda n: len(models.model_label(n)))
        picks = dict.fromkeys([longest, "cosmos-1-ar-5b-video2world", "tiny-video"])   # in order, once
        for name in picks:
            init = "previous frame (video)" if name == "tiny-video" else None
            pick_model(pg, name)
            for elem in ("model", "init"):                            # the chosen text is not cut
                if not pg.locator(f"#{elem} input").is_visible():
                    pg.locator("#settings button.label-wrap").click()
                box = pg.locator(f"#{elem} input")
                assert box.evaluate("el => el.scrollWidth <= el.clientWidth"), (elem, box.input_value())
            if init:
                assert pg.locator("#init input").input_value() == init
            if models.takes_clip(name):          # no "Example prompts" over nothing; words whole
                assert not pg.get_by_text("Example prompts").is_visible()
                upload = pg.locator("#prompt-clip").get_by_text("Click to Upload")
                assert upload.evaluate("el => el.scrollWidth <= el.clientWidth + 1")
    finally:
        pg.close()


@pytest.mark.smoke
def test_generate_shows_the_picture_with_nothing_over_it(page):
    fill(page, "pace", 0)
    page.locator("#generate").click()
    wait_text(page, "status", "done")
    assert "576/576 tokens" in text(page, "status")
    img = page.locator("#live-image img")
    img.evaluate("""el => el.complete || new Promise(done => {      // loaded, or 10 s at most
        el.addEventListener('load', done, {once: true}); setTimeout(done, 10000); })""")
    assert img.evaluate("el => [el.naturalWidth, el.naturalHeight]") == [384, 384]
    covered = img.evaluate("""el => { const r = el.getBoundingClientRect();
        return [[r.left + 3, r.top + 3], [r.right - 3, r.top + 3]].map(
            ([x, y]) => document.elementFromPoint(x, y) === el); }""")
    assert covered == [True, True]                       # first token row: no label, no toolbar
    page.screenshot(path=os.path.join(SHOTS, "scd_generate_1400.png"), full_page=True)


def test_stop_mid_run_keeps_the_picture_and_says_stopped(page):
    fill(page, "pace", 0.2)
    page.locator("#generate").click()
    wait_text(page, "status", "decoding")
    page.locator("#stop").click()
    wait_text(page, "status", "stopped at NFE", timeout=10_000)
    frozen = text(page, "status")
    page.wait_for_timeout(1200)
    assert text(page, "status") == frozen and "/576 tokens" in frozen
    assert image_src(page, "live-image") and error_badges(page) == 0
    assert page.locator("#chart-committed .js-plotly-plot").count() == 1
    fill(page, "pace", 0)


STOP_LIMIT_S = 0.5    # the click on Stop to the run's end (its "stopped" status, made in the server)
SHOWN_NOISE_S = 0.5   # ... and on to the browser showing it: 15 stops in slow motion on 2 cores at a


STOP_AND_WATCH = """() => {
  const status = document.querySelector('#status [data-testid=markdown]');
  window.__stopped = window.__shown = null;
  new MutationObserver(() => {
    if (!window.__stopped && /stopped at NFE/.test(status.innerText)) {
      window.__stopped = performance.now();
      window.__shown = document.querySelector('#live-image img')?.src || null;
    }
  }).observe(status, {subtree: true, childList: true, characterData: true});
  window.__t0 = performance.now();
  window.__clicked_at = Date.now();
  document.querySelector('#stop').click();
}"""


def test_stop_in_slow_motion_ends_the_run_within_half_a_second_keeping_the_picture_shown(page, monkeypatch):
    ended = []                                                # when the server said "stopped"
    said = run_view.run_status

    def status(label, stats, wall, state, *rest, **named):
        ended.extend([time.time()] if state == "stopped" else [])
        return said(label, stats, wall, state, *rest, **named)

    monkeypatch.setattr(run_view, "run_status", status)
    fill(page, "pace", 0.5)
    page.locator("#generate").click()
    wait_text(page, "status", "decoding")
    page.wait_for_timeout(1600)                               # a few passes shown
    page.evaluate(STOP_AND_WATCH)
    page.wait_for_function("() => window.__stopped", timeout=10_000)
    page.wait_for_timeout(1500)                               # a picture sent after the stop would land now
    clicked = page.evaluate("() => window.__clicked_at") / 1000          # the same clock as the server's
    assert len(ended) == 1 and ended[0] - clicked <= STOP_LIMIT_S, (ended, clicked)
    took = page.evaluate("() => (window.__stopped - window.__t0) / 1000")
    assert took <= STOP_LIMIT_S + SHOWN_NOISE_S, took
    assert page.evaluate("() => window.__shown && document.querySelector('#live-image img')?.src "
                         "=== window.__shown")                # the picture shown then is kept
    fill(page, "pace", 0)


def test_an_input_error_after_a_good_run_keeps_the_picture(page):
    """A refused field gets its message beside it in the page's words, naming the field and
    its range (on Race too, which runs every method); nothing starts, the last picture stays,
    and the browser's console has no error; once right, Enter in the prompt starts Generate."""
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.locator("#generate").click()
    wait_text(page, "status", "done")
    before, status = image_src(page, "live-image"), text(page, "status")
    fill(page, "window", 0)
    fill(page, "top-k", 10 ** 9)
    for button in ("generate", "race"):
        page.locator(f"#{button}").click()
        wait_text(page, "window", "Window L: a whole number from 2 to 1,024, got 0.", timeout=20_000)
        wait_text(page, "top-k", "Top-k: a whole number from 0 to ", timeout=10_000)    # beside the field
        said = text(page, "input-message")                                       # and by the buttons
        assert "Window L: a whole number from 2 to 1,024, got 0." in said and "1,000,000,000" in said
        assert "method" not in said and "scd-mc" not in said and "[" not in said, said
    page.wait_for_timeout(800)
    assert image_src(page, "live-image") == before and text(page, "status") == status
    assert error_badges(page) == 0 and errors == []
    fill(page, "window", 16)
    fill(page, "top-k", 0)
    page.locator("#prompt textarea").fill("lava marble")
    page.locator("#prompt textarea").press("Enter")                    # Enter starts Generate
    page.wait_for_function("() => !document.querySelector('#input-message').innerText.trim()",
                           timeout=10_000)                                 # and gone once right
    page.wait_for_function(f"() => document.querySelector('#live-image img')?.src !== {before!r}",
                           timeout=60_000)
    wait_text(page, "status", "done")
    assert "Window L:" not in text(page, "window")
    page.locator("#prompt textarea").fill("ocean waves")


TIME = re.compile(r"(\d+\.\d+) s(?: \((\d+\.\d+)–(\d+\.\d+)\))?")


def seconds_range(cell: str) -> tuple[float, float]:
    """A time cell's range over the rounds ("0.35 s (0.33–0.53) · 4.36x"; all rounds alike: "0.12 s")."""
    median, low, high = TIME.search(cell).groups()
    return (float(low), float(high)) if low else (float(median), float(median))


def test_race_opens_its_tab_and_reports_k_samples_with_spread(page):
    """The race leads with passes; its times are medians of rounds with their range, and a
    method is called faster than another only where the table's ranges do not overlap; the
    check against AR only in greedy mode; the benchmark's commands out of the way; every cell
    in reach."""
    fill(page, "samples", 3)
    page.locator("#race").click()
    page.wait_for_function("() => document.querySelector('#race-status')?.offsetParent !== null",
                           timeout=10_000)                    # the Race tab is showing
    wait_text(page, "race-status", "Done", timeout=300_000)
    wait_text(page, "race-summary", "Gumbel")
    rows = race_cells(page)
    assert list(rows) == ["AR", "SJD", "SCD maximal coupling", "SCD Gumbel coupling"]
    for row in list(rows.values())[1:]:
        nfe = row["NFE: mean (min–max)"]
        assert "(" in nfe and "–" in nfe                      # mean (min–max)
    assert "same tokens as AR" not in rows["AR"] and "n/a" not in text(page, "race-summary")   # sampling
    note = text(page, "race-note")
    assert note.startswith("Passes (the same for these seeds on any machine)") and "3 samples per method" in note
    rounds = race.TIMING_ROUNDS
    assert f"median of {rounds} rounds" in note and "printf" not in note
    spans = {m: seconds_range(r["one image: seconds (vs AR)"]) for m, r in rows.items()}
    said = note.split("One image:")[1].split("A batch of")[0]   # a method ahead only where apart
    best = said.split(" is done soonest" if "soonest" in said else " has the best median")[0].strip()
    ahead = said.split("clearly ahead of ")[1].rstrip(". ") if "clearly ahead of" in said else ""
    for other in (m for m in rows if m != best):
        if spans[best][1] == spans[other][0]:
            continue                        # one figure to two decimals: apart or not, the table cannot say
        apart = spans[best][1] < spans[other][0]
        assert (f"{other} (" in ahead) == apart, (best, other, spans, said)
    assert not page.locator("#race-bench").is_visible()       # the commands, one click away
    page.get_by_text("The same figures from the benchmark").click()
    wait_text(page, "race-bench", "python -m scd_core.bench")
    assert unreachable_cells(page, "#race-table td") == []
    page.screenshot(path=os.path.join(SHOTS, "scd_race_1400.png"), full_page=True)


def test_every_race_table_column_is_visible_at_1400px(page):
    table = page.locator("#race-table")
    assert table.evaluate("el => el.scrollWidth <= el.parentElement.clientWidth + 1")
    heads = page.locator("#race-table th")
    assert heads.nth(0).inner_text() == "method"
    for i in range(heads.count()):
        box = heads.nth(i).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 1400


def test_every_chart_names_each_colour_it_draws(page):
    for tab in ("Race", "Generate"):
        page.get_by_role("tab", name=tab).click()
        page.wait_for_timeout(600)
        plots = page.locator(".js-plotly-plot")
        for i in range(plots.count()):
            if not plots.nth(i).is_visible():
                continue
            figure = plots.nth(i).evaluate("el => ({data: el.data})")
            assert unnamed_colours(figure) == [], (tab, i)


def test_greedy_sets_temperature_zero(page):
    temperature = "() => Number(document.querySelector('#temperature input').value)"
    page.locator("#greedy input").check()
    page.wait_for_function(f"() => ({temperature})() === 0", timeout=30_000)
    page.locator("#greedy input").uncheck()
    page.wait_for_function(f"() => ({temperature})() === 1", timeout=30_000)


def test_video_race_frames_are_at_least_96px(page):
    page.locator("#model input").click()
    page.get_by_role("option", name=re.compile(r"^tiny-video ")).click()
    page.wait_for_timeout(1500)
    fill(page, "samples", 1)
    fill(page, "pace", 0)
    page.locator("#race").click()
    wait_text(page, "race-status", "all done at NFE 512", timeout=180_000)   # this race's AR
    page.wait_for_function("() => document.querySelector('#race-sjd img')?.naturalWidth > 0",
                           timeout=20_000)
    img = page.locator("#race-sjd img")
    width = img.evaluate("el => el.getBoundingClientRect().width")
    assert width / 4 >= 96                                    # four frames to a line


def test_the_words_a_model_ignores_are_marked_under_the_prompt(page):
    page.locator("#model input").click()
    page.get_by_role("option", name=re.compile(r"^tiny ")).click()
    page.wait_for_timeout(1200)
    page.locator("#prompt textarea").fill("red heart 🦄 foo")
    wait_text(page, "prompt-words", "not known to tiny, ignored: 🦄 foo", timeout=10_000)
    page.locator("#prompt textarea").fill("🦄")
    wait_text(page, "prompt-words", "runs unconditioned", timeout=10_000)
    page.locator("#prompt textarea").fill("red heart")
    page.wait_for_function("() => !document.querySelector('#prompt-words').innerText.trim()", timeout=10_000)
    page.locator("#model input").click()
    page.get_by_role("option", name=re.compile(r"^texture ")).click()
    page.wait_for_timeout(1200)


def test_the_acceptance_rate_is_drawn_live_and_no_view_is_a_placeholder_while_running(page):
    """In slow motion the acceptance rate is drawn pass by pass, before the run ends, next to
    the tokens-vs-NFE chart's AR line; the other views say in words what they will show."""
    page.get_by_role("tab", name="Generate").click()
    page.locator("#method").get_by_text("SCD maximal coupling", exact=True).click()
    fill(page, "pace", 0.1)
    page.locator("#generate").click()
    wait_text(page, "status", "decoding")
    page.wait_for_function("""() => { const el = document.querySelector('#chart-rate .js-plotly-plot');
        return el && el.data && el.data.some(t => (t.y || []).filter(v => v !== null).length > 2); }""",
                           timeout=30_000)
    assert "decoding" in text(page, "status")                    # drawn while the run goes
    names = page.locator("#chart-committed .js-plotly-plot").evaluate("el => el.data.map(t => t.name)")
    assert "one token per pass (AR)" in names
    assert placeholders(page) == [] and text(page, "summary").strip()   # the metrics' place says when
    page.locator("#stop").click()
    wait_text(page, "status", "stopped at NFE", timeout=10_000)
    fill(page, "pace", 0)


def test_a_draft_tree_says_token_ids_and_its_passes_against_the_chain(page):
    page.get_by_role("tab", name="Generate").click()
    fill(page, "pace", 0)
    page.locator("#tree input").click()
    page.get_by_role("option", name="chain (no tree)").click()
    page.locator("#generate").click()
    wait_text(page, "status", "done")
    chain = re.search(r"NFE (\d+)", text(page, "status")).group(1)
    page.locator("#tree input").click()
    page.get_by_role("option", name="2 x 2").click()
    page.locator("#generate").click()
    wait_text(page, "status", "tree 2 x 2: a sibling taken")
    said = text(page, "status")
    assert f"against {chain} on the chain" in said
    assert "token id" in text(page, "tree-view") and "#" not in text(page, "tree-view")
    wait_text(page, "summary", "for this session's chain run")
    page.locator("#tree input").click()
    page.get_by_role("option", name="chain (no tree)").click()
