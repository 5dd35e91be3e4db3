"""The page in a real browser: Playwright drives Debian's chromium against the app served
in-process (one server for the module), at 1400x1000 and at a phone's 390x844. Where chromium
or playwright is missing the tests fail in CI (CI set) and are skipped elsewhere, with the
reason and the command that installs it.

Screenshots land in $SCD_SCREENSHOT_DIR (default: the system temp folder) for a look.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import time

from pathlib import Path

import axe_playwright_python
import pytest

import app
from fakehub import empty_hub_cache  # noqa: F401  (a fixture)
from legend_check import unnamed_colours
from scd_core.models import REGISTRY

pytestmark = pytest.mark.browser

CHROMIUM = next((p for p in (os.environ.get("CHROMIUM"), shutil.which("chromium"),
                             shutil.which("chromium-browser"), "/usr/bin/chromium")
                 if p and os.path.exists(p)), None)
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
SHOTS = os.environ.get("SCD_SCREENSHOT_DIR", tempfile.gettempdir())
SIZES = [(1400, 1000), (390, 844)]


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        missing("chromium is not installed (as root: apt-get install chromium; or set CHROMIUM to its path)")
    try:
        from playwright import sync_api
    except ImportError:
        missing("playwright is not installed (pip install -e '.[dev]')")
    app.demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **app.LAUNCH)
    try:
        with sync_api.sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                yield b
            finally:
                b.close()
    finally:
        app.demo.close()


def missing(reason: str) -> None:
    """In CI a missing browser is a failure; elsewhere the tests are skipped with the reason."""
    if IN_CI:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def open_page(browser, width: int, height: int, theme: str = "light"):
    pg = browser.new_page(viewport={"width": width, "height": height}, color_scheme=theme)
    pg.goto(app.demo.local_url + ("?__theme=dark" if theme == "dark" else ""))
    pg.wait_for_selector("#generate", timeout=60_000)
    pg.wait_for_timeout(500)
    return pg


@pytest.fixture(scope="module")
def page(browser):
    pg = open_page(browser, 1400, 1000)
    yield pg
    pg.close()


def fill(pg, elem_id: str, value) -> None:
    box = pg.locator(f"#{elem_id} input")
    if not box.is_visible() and pg.locator("#settings button.label-wrap").count():
        pg.locator("#settings button.label-wrap").click()          # a phone starts with Settings closed
    box.fill(str(value))
    box.press("Tab")


def pick_model(pg, name: str, wait: int = 1500) -> None:
    pg.locator("#model input").click()
    pg.get_by_role("option", name=re.compile(rf"^{re.escape(name)} ")).click()
    pg.wait_for_timeout(wait)


PLACEHOLDERS = """() => [...document.querySelectorAll('[aria-label="Empty value"]')]
    .filter(e => e.offsetParent !== null).map(e => e.closest('[id]')?.id || '?')"""   # Gradio's empty icon


STRAYS = """() => [...document.querySelectorAll('.gradio-container .block')]    // outside the page's layout
    .filter(b => b.offsetParent !== null && !b.closest('#header, #main')).map(b => b.innerText.slice(0, 30))"""


def placeholders(pg) -> list[str]:
    """The views showing Gradio's empty placeholder icon where a person can see them."""
    return pg.evaluate(PLACEHOLDERS)


REACHABLE = """el => {   // scroll the page (not the element's boxes) to it, swipe the boxes a person can
  const rect = () => el.getBoundingClientRect();
  window.scrollBy(0, rect().top - innerHeight / 2 + rect().height / 2);
  for (let box = el.parentElement; box && box !== document.body; box = box.parentElement) {
    const b = box.getBoundingClientRect(), r = rect(), style = getComputedStyle(box);
    if (r.left >= b.left - 1 && r.right <= b.right + 1) continue;           // not clipped by it
    if (style.overflowX === 'visible') continue;
    if (style.overflowX !== 'auto' && style.overflowX !== 'scroll') return 'clipped, no swipe';
    box.scrollLeft += r.left < b.left ? r.left - b.left : r.right - b.right;    // a sideways swipe
  }
  const r = rect(), hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
  if (r.width === 0 || r.left < -1 || r.right > innerWidth + 1) return 'off the page';
  return hit && (hit === el || el.contains(hit)) ? 'ok' : 'covered';
}"""


def unreachable_cells(pg, selector: str) -> list[tuple[str, str]]:
    """The cells under `selector` a person cannot bring into sight and read (scrolling the
    page, swiping only boxes that scroll), or whose words break in two, with why."""
    out = []
    cells = pg.locator(selector)
    for i in range(cells.count()):
        cell = cells.nth(i)
        said = cell.evaluate(REACHABLE)
        broken = cell.evaluate(BROKEN_WORDS)
        if said != "ok" or broken:
            out.append((cell.inner_text()[:40], said if said != "ok" else f"broken: {broken}"))
    return out


def tab_bar(pg) -> list[str]:
    """The tabs a person sees in the tab bar (not behind a "more" menu)."""
    return [t.strip() for t in pg.locator("button[role=tab]").all_inner_texts()
            if t.strip()] if not pg.locator("button[aria-label='More tabs']").is_visible() else \
        ["(some behind a menu)"]


def text(pg, elem_id: str) -> str:
    return pg.locator(f"#{elem_id}").inner_text()


def wait_text(pg, elem_id: str, words: str, timeout: int = 120_000) -> None:
    pg.wait_for_function(f"() => (document.querySelector('#{elem_id}')?.innerText || '')"
                         f".includes({words!r})", timeout=timeout)


def image_src(pg, elem_id: str) -> str | None:
    img = pg.locator(f"#{elem_id} img")
    return img.get_attribute("src") if img.count() else None


def error_badges(pg) -> int:
    """Gradio's red error state on any component."""
    return pg.locator(".error").count() + pg.get_by_text("Error", exact=True).count()


@pytest.mark.parametrize("size", [(1400, 1000), (900, 1000), (390, 844)])
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
        if size[0] <= app.texts.NARROW_PX:        # one column: the controls, then the results
            assert ys == sorted(ys), ys
            assert pg.locator("#results").bounding_box()["width"] >= pg.locator("#main").bounding_box()["width"] - 24
            assert pg.locator("#settings button.label-wrap").is_visible()
        layout = app.texts.FILM_LAYOUT
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
                assert app.models.unavailable(name) is None, label
        longest = max(app.models.listed_models(), key=lambda n: len(app.models.model_label(n)))
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
            if app.models.takes_clip(name):          # no "Example prompts" over nothing; words whole
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
                      # load average of 6-9 were shown 0.08-0.72 s after the click, the server
                      # ending each within 15 ms of hearing it (scripts/page_timing.py --only stop)

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
    said = app.run_view.run_status

    def status(label, stats, wall, state, *rest, **named):
        ended.extend([time.time()] if state == "stopped" else [])
        return said(label, stats, wall, state, *rest, **named)

    monkeypatch.setattr(app.run_view, "run_status", status)
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


def race_cells(pg) -> dict[str, dict[str, str]]:
    """The race table as a person reads it: each method's figures by their column's name."""
    return {row[0]: dict(zip(heads, row)) for heads in [pg.locator("#race-table th").all_inner_texts()]
            for row in (r.locator("td").all_inner_texts() for r in pg.locator("#race-table tbody tr").all())}


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
    rounds = app.race.TIMING_ROUNDS
    assert f"median of {rounds} rounds" in note and "printf" not in note
    spans = {m: seconds_range(r["one image: seconds (vs AR)"]) for m, r in rows.items()}
    said = note.split("One image:")[1].split("A batch of")[0]   # a method ahead only where apart
    best = said.split(" is done soonest" if "soonest" in said else " has the best median")[0].strip()
    ahead = said.split("clearly ahead of ")[1].rstrip(". ") if "clearly ahead of" in said else ""
    for other in (m for m in rows if m != best):
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
    page.locator("#greedy input").check()
    page.wait_for_timeout(500)
    assert float(page.locator("#temperature input").input_value()) == 0
    page.locator("#greedy input").uncheck()
    page.wait_for_timeout(500)
    assert float(page.locator("#temperature input").input_value()) == 1


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


def test_every_method_generates_without_an_error_on_every_embedded_model(browser):
    """In the page, AR too (AR once crashed encoding its empty drafts strip): no view of a
    finished run is an empty placeholder, AR's draft views say it has none, and the metrics
    name the device the header names."""
    page = open_page(browser, 1400, 1000)
    device = re.search(r"Engine: (\S+ \(\d+ threads?\))", text(page, "header")).group(1)
    for name in [n for n in app.models.listed_models() if not REGISTRY[n].needs_weights]:
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


BROKEN_WORDS = """el => {   // words (between spaces and dashes) of the element's text drawn on two lines
  const out = [];
  const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walk.nextNode(); node; node = walk.nextNode()) {
    for (const m of node.data.matchAll(/[^\\s\u2013-]+/g)) {
      const r = document.createRange();
      r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
      const tops = new Set([...r.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top)));
      if (tops.size > 1) out.push(m[0]);
    }
  }
  return out;
}"""


def test_phone_race_keeps_the_page_width_every_panel_reachable_and_words_whole(browser):
    """On a phone every figure of the race table can be brought into sight and read (the page
    scrolled, only boxes that scroll swiped), words whole."""
    pg = open_page(browser, 390, 844)
    try:
        fill(pg, "pace", 0)
        fill(pg, "samples", 2)
        pg.locator("#race").click()
        wait_text(pg, "race-summary", "Gumbel", timeout=300_000)
        pg.wait_for_timeout(800)
        assert pg.evaluate("() => document.documentElement.scrollWidth") <= 390
        for m in ("ar", "sjd", "scd-mc", "scd-gumbel"):              # each panel on the page, whole
            box = pg.locator(f"#race-{m}").bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= 390 and box["width"] > 200, m
        assert len(race_cells(pg)) == 4
        assert unreachable_cells(pg, "#race-table td") == []
        for elem in ("race-status", "race-note", "race-why"):
            assert pg.locator(f"#{elem}").evaluate(BROKEN_WORDS) == [], elem
        pg.screenshot(path=os.path.join(SHOTS, "scd_race_390.png"), full_page=True)
    finally:
        pg.close()


@pytest.mark.parametrize("size", SIZES)
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
            pg.wait_for_timeout(1500)
            assert placeholders(pg) == [], (size, run)
            assert run or pg.locator("#clip-video video").is_visible(), size     # the finished clip
        pick_model(pg, "texture")
        assert not pg.locator("#clip-video").is_visible()
    finally:
        pg.close()


def test_phone_run_brings_stop_and_the_picture_into_sight_and_every_view_in_reach(browser):
    """On a phone a run brings Stop and the picture into sight; after it, nothing is an
    empty placeholder, every metric can be read whole, and the replay opens on the last pass
    drawn; a typo's message shows where one looks."""
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
        pg.wait_for_timeout(800)
        last = re.search(r"NFE (\d+)", text(pg, "status")).group(1)
        assert f"pass {int(last) - 1} of {int(last) - 1}" in text(pg, "replay-text")
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


def test_lossless_on_a_phone_reads_whole_and_shows_where_the_pictures_differ(browser):
    pg = open_page(browser, 390, 844)
    try:
        pg.get_by_role("tab", name="Lossless").click()
        fill(pg, "loss-samples", 16)
        pg.locator("#lossless").click()
        wait_text(pg, "lossless-status", "Done", timeout=300_000)
        pg.wait_for_function("() => document.querySelectorAll('#lossless-chart .annotation-text').length === 4",
                             timeout=20_000)
        titles = pg.locator("#lossless-chart .annotation-text").all()
        boxes = [t.bounding_box() for t in titles]
        assert len(boxes) == 4
        for i, a in enumerate(boxes):                      # no panel's title over another's
            for b in boxes[i + 1:]:
                apart = a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"] or \
                    a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"]
                assert apart, (a, b)
        assert pg.locator("#lossless-summary").evaluate(BROKEN_WORDS) == []
        assert unreachable_cells(pg, "#lossless-summary li") == []
        assert "red where their tokens differ" in text(pg, "lossless-diff-title")
        assert pg.locator("#lossless-diff img").evaluate("el => el.getBoundingClientRect().width") > 200
        pg.screenshot(path=os.path.join(SHOTS, "scd_lossless_390.png"), full_page=True)
    finally:
        pg.close()


@pytest.mark.parametrize("size", [(1400, 1000), (390, 844)])
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
        assert grid == list(app.pictures.blank_picture(tuple(app.MODELS.get("tiny").grid)).shape[1::-1])
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
        cannot = next((n for n in app.models.listed_models() if app.models.unavailable(n)), None)
        if cannot:                                   # one that cannot run here (never a download)
            pick_model(pg, cannot)
            wait_text(pg, "status", cannot)
            assert not pg.locator("#live-image img").is_visible() or \
                image_src(pg, "live-image") != texture_picture
            assert "texture" not in text(pg, "status") + text(pg, "chart-committed")
    finally:
        pg.close()


# ---------------------------------------------------------------- the page under a visitor's hands


IN_SIGHT = """el => {   // shown, inside the window, and what is drawn at its middle and corners is its own
  const r = el.getBoundingClientRect();
  if (r.width < 1 || r.height < 1) return 'not shown';
  if (r.top < -1 || r.bottom > innerHeight + 1 || r.left < -1 || r.right > innerWidth + 1)
    return `out of sight (${Math.round(r.top)}..${Math.round(r.bottom)} of ${innerHeight})`;
  for (const [x, y] of [[(r.left + r.right) / 2, (r.top + r.bottom) / 2], [r.left + 3, r.top + 3],
                        [r.right - 3, r.bottom - 3]]) {
    const hit = document.elementFromPoint(x, y);
    if (!hit || !(hit === el || el.contains(hit))) return 'covered by ' + (hit ? hit.outerHTML.slice(0, 60) : 'nothing');
  }
  return 'ok';
}"""

BROKEN_RANGES = """el => {   // ranges such as 0.71–0.86 drawn on two lines
  const out = [];
  const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  let text = '', nodes = [];
  for (let node = walk.nextNode(); node; node = walk.nextNode()) { nodes.push([node, text.length]); text += node.data; }
  for (const m of text.matchAll(/\\d[\\d.,]*\\s?\\u2013\\s?\\d[\\d.,]*/g)) {
    const at = i => { let k = nodes.length - 1; while (nodes[k][1] > i) k--; return [nodes[k][0], i - nodes[k][1]]; };
    const r = document.createRange();
    r.setStart(...at(m.index)); r.setEnd(...at(m.index + m[0].length - 1)); r.setEnd(r.endContainer, r.endOffset + 1);
    const tops = new Set([...r.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top)));
    if (tops.size > 1) out.push(m[0]);
  }
  return out;
}"""

EMPTY_CHARTS = """() => [...document.querySelectorAll('.js-plotly-plot')]     // drawn frames with nothing in them
    .filter(el => el.offsetParent !== null && !(el.data || []).some(t => (t.x || t.y || t.z || []).length))
    .map(el => el.closest('[id]')?.id || '?')"""

TITLES_COVERED = """el => {   // a chart, hovered: the points of its title that something else covers (Plotly's tool bar)
  const title = el.querySelector('.gtitle');
  if (!title) return [];
  const r = title.getBoundingClientRect(), out = [];
  for (const f of [0.05, 0.25, 0.5, 0.75, 0.95]) {
    const hit = document.elementFromPoint(r.left + f * r.width, (r.top + r.bottom) / 2);
    if (hit && hit.closest('.modebar, .modebar-container')) out.push(f);
  }
  return out;
}"""

PANELS_APART = """el => {   // a chart of several panels: tick labels on another panel's plot, or cut by the chart's edge
  const svg = el.querySelector('svg.main-svg').getBoundingClientRect(), out = [];
  const panels = [...el.querySelectorAll('.cartesianlayer .subplot')].map(s => {
    const area = s.querySelector('.plotbg rect, .bg');
    return {name: [...s.classList].join(' '), area: (el.querySelector(`.nsewdrag[data-subplot="${s.classList[1]}"]`)
            || area).getBoundingClientRect(), labels: [...s.querySelectorAll('.xtick text, .ytick text')]};
  });
  const meet = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  for (const p of panels)
    for (const label of p.labels) {
      const b = label.getBoundingClientRect();
      if (b.width === 0) continue;
      if (b.left < svg.left - 1 || b.right > svg.right + 1 || b.bottom > svg.bottom + 1) out.push(`${label.textContent} cut`);
      for (const q of panels) if (q !== p && meet(b, q.area)) out.push(`${label.textContent} of ${p.name} on ${q.name}`);
    }
  return out;
}"""


def in_sight(pg, selector: str) -> str:
    return pg.locator(selector).first.evaluate(IN_SIGHT)


def lines_of(pg, selector: str) -> int:
    """How many lines the element's text takes."""
    return pg.locator(selector).evaluate("""el => { const r = document.createRange(); r.selectNodeContents(el);
        return new Set([...r.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top))).size; }""")


def selected_tab(pg) -> str:
    return pg.locator("button[role=tab][aria-selected=true]").inner_text().strip()


def ranges_of(cell: str) -> tuple[float, float]:
    """A figure's range, 'mean (min–max)' or the value alone."""
    found = re.search(r"([\d.]+) \(([\d.]+)–([\d.]+)\)", cell)
    if found:
        return float(found.group(2)), float(found.group(3))
    value = float(re.match(r"[\d.]+", cell).group(0))
    return value, value


@pytest.mark.parametrize("size", SIZES)
def test_one_run_at_a_time_a_second_click_is_refused_and_a_model_switch_stops_the_run(browser, size):
    """One run at a time, at both sizes: a second Generate (or Race) while a run goes is
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
        assert grid == app.pictures.blank_picture(tuple(app.MODELS.get("tiny").grid)).shape[1], size
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


@pytest.mark.parametrize("size", SIZES)
def test_a_race_names_no_winner_inside_the_noise_announces_its_replay_and_keeps_ranges_whole(browser, size):
    """At both sizes, on tiny, where the methods' passes overlap: a method is said to need
    the fewest passes (or fewer than SJD) only where
    its range over the samples, as the table shows it, overlaps no other's; the replay says it
    is one, in sight; no range is drawn broken at its dash."""
    pg = open_page(browser, *size)
    try:
        pick_model(pg, "tiny")
        fill(pg, "samples", 8)
        fill(pg, "pace", 0.05)
        pg.locator("#race").click()
        pg.wait_for_function("() => /Replay|Done/.test(document.querySelector('#race-status')?.innerText || '')",
                             timeout=300_000)
        said = text(pg, "race-status")
        assert said.startswith("Replay") and "finished" in said and in_sight(pg, "#race-status") == "ok", said
        wait_text(pg, "race-status", "Done", timeout=120_000)
        wait_text(pg, "race-summary", "Gumbel")
        spans = {m: ranges_of(r["NFE: mean (min–max)"]) for m, r in race_cells(pg).items()}
        apart = lambda a, b: spans[a][1] < spans[b][0] or spans[b][1] < spans[a][0]  # noqa: E731
        note = text(pg, "race-note").split("\n")[0]
        named = re.match(r"Passes \(the same for these seeds on any machine\): ([^,:]+?) needs the fewest", note)
        if named:                                             # named only if apart from every other
            assert all(apart(named.group(1), m) for m in spans if m != named.group(1)), (spans, note)
        else:
            assert "no method clearly needs the fewest" in note or "one sample each" in note, note
        assert any(not apart(a, b) for a in spans for b in spans if a != b), spans   # tiny: some overlap
        why = text(pg, "race-why")
        fewer = "fewer passes" in why and "about as many" not in why
        assert fewer == apart("SCD maximal coupling", "SJD"), (spans, why)
        for elem in ("race-table", "race-note", "race-why"):
            assert pg.locator(f"#{elem}").evaluate(BROKEN_RANGES) == [], (size, elem)
        pick_model(pg, "texture")
    finally:
        pg.close()


@pytest.mark.parametrize("size", SIZES)
def test_charts_show_no_tool_bar_over_a_title_and_the_lossless_panels_read_apart_with_progress(browser, size):
    """At both sizes: hovered (a phone shows Plotly's tool
    bar always), no chart's title is covered; the Lossless chart's panels keep their labels off
    each other's bars and inside the chart; while it runs, its status counts the samples, with
    the time so far, in sight."""
    pg = open_page(browser, *size)
    try:
        fill(pg, "pace", 0)
        pg.locator("#generate").click()
        wait_text(pg, "status", "done")
        wait_text(pg, "summary", "wall time")
        pg.wait_for_timeout(800)
        plots = pg.locator(".js-plotly-plot")
        for i in range(plots.count()):
            plot = plots.nth(i)
            if not plot.is_visible():
                continue
            plot.scroll_into_view_if_needed()
            plot.hover()
            pg.wait_for_timeout(250)
            assert plot.evaluate(TITLES_COVERED) == [], (size, plot.evaluate("el => el.closest('[id]').id"))
        pg.get_by_role("tab", name="Lossless").click()
        fill(pg, "loss-samples", 128)
        pg.locator("#lossless").click()
        wait_text(pg, "lossless-status", "of 128", timeout=20_000)
        assert "so far" in text(pg, "lossless-status") and in_sight(pg, "#lossless-status") == "ok", size
        wait_text(pg, "lossless-status", "Done", timeout=300_000)
        chart = pg.locator("#lossless-chart .js-plotly-plot")
        chart.scroll_into_view_if_needed()
        pg.wait_for_timeout(800)
        assert chart.evaluate(PANELS_APART) == [], size
        chart.hover()
        pg.wait_for_timeout(250)
        assert chart.evaluate(TITLES_COVERED) == [], size
    finally:
        pg.close()


@pytest.mark.parametrize("size", SIZES)
def test_the_live_charts_and_the_status_are_in_sight_while_a_run_goes(browser, size):
    """At both sizes, as a run goes, without scrolling after the click: the status next to the
    picture is in sight with the acceptance so far and the tokens per pass; on a desktop the
    two live charts (tokens against passes, acceptance) are in sight and drawn."""
    pg = open_page(browser, *size)
    try:
        fill(pg, "pace", 0.1)
        pg.evaluate("window.scrollTo(0, 0)")
        pg.locator("#generate").click()
        wait_text(pg, "status", "decoding", timeout=60_000)
        pg.wait_for_function("""() => { const el = document.querySelector('#chart-rate .js-plotly-plot');
            return el && el.data && el.data.some(t => (t.y || []).filter(v => v !== null).length > 2); }""",
                             timeout=30_000)
        assert in_sight(pg, "#status") == "ok" and in_sight(pg, "#live-image img") == "ok", size
        if size[0] > app.texts.NARROW_PX:
            for chart in ("#chart-committed .js-plotly-plot", "#chart-rate .js-plotly-plot"):
                assert in_sight(pg, chart) == "ok", chart
        said = text(pg, "status")                                  # a live strip on a phone
        assert "decoding" in said and "tokens per pass so far" in said and "acceptance so far" in said, said
        pg.screenshot(path=os.path.join(SHOTS, f"scd_live_{size[0]}.png"))
        pg.locator("#stop").click()
        wait_text(pg, "status", "stopped at NFE", timeout=10_000)
    finally:
        pg.close()


WORDS_ON_ONE_LINE = """el => {   // the element's words (between spaces) drawn on two lines
  const out = [];
  const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walk.nextNode(); node; node = walk.nextNode())
    for (const m of node.data.matchAll(/\\S+/g)) {
      const r = document.createRange();
      r.setStart(node, m.index); r.setEnd(node, m.index + m[0].length);
      if (new Set([...r.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top))).size > 1) out.push(m[0]);
    }
  return out;
}"""


@pytest.mark.parametrize("size", SIZES)
def test_words_a_newcomer_reads_at_first_sight(browser, empty_hub_cache, size):
    """At both sizes: AR spelled out in the header; "Race all methods" on one line;
    a download command whole, no option split; slow motion's one meaning (0 is off, full
    speed; a pace below the shortest is raised, never called the fastest); NFE and step
    compression said in words where the status first names them; "1 draft", not "1 drafts";
    the file names of an export whole."""
    pg = open_page(browser, *size)
    try:
        assert "AR (autoregressive" in text(pg, "header") and in_sight(pg, "#header") == "ok"
        assert lines_of(pg, "#race") == 1 and in_sight(pg, "#race") == "ok", size
        pick_model(pg, "janus-pro-1b", wait=0)
        wait_text(pg, "model-info", "--include", timeout=15_000)
        command = pg.locator("#model-info code", has_text="hf download").first
        assert command.evaluate(WORDS_ON_ONE_LINE) == [], size               # no option split
        assert command.evaluate("el => el.closest('pre, p').scrollWidth <= el.closest('pre, p').clientWidth + 1")
        pick_model(pg, "tiny")
        pg.locator("#method").get_by_text("SJD", exact=True).click()
        fill(pg, "window", 2)
        fill(pg, "pace", 0.05)
        pg.locator("#generate").click()
        wait_text(pg, "status", "decoding", timeout=60_000)
        said = text(pg, "status")
        assert "0.05 s asked" in said and "0 turns it off" in said and "fastest" not in said, said
        wait_text(pg, "status", "done", timeout=120_000)
        said = text(pg, "status")
        assert re.search(r"NFE \d+ \(forward passes\)", said) and "(step compression)" in said, said
        wait_text(pg, "summary", "wall time")
        pg.get_by_text("Replay and export the last run").click()
        wait_text(pg, "replay-text", "verified", timeout=10_000)
        caption = text(pg, "replay-text")
        count = int(re.search(r"(\d+) drafts? verified", caption).group(1))
        assert count == 1 and "1 draft verified" in caption, caption       # window 2: one draft a pass
        pg.locator("#export").click()
        pg.wait_for_function("() => document.querySelectorAll('#export-files .filename').length >= 2",
                             timeout=120_000)
        for name in pg.locator("#export-files .filename .stem").all():
            name.scroll_into_view_if_needed()
            assert name.evaluate("el => el.scrollWidth <= el.clientWidth + 1"), (size, name.inner_text())
        fill(pg, "window", 16)
        fill(pg, "pace", 0)
        pg.locator("#method").get_by_text("SCD maximal coupling", exact=True).click()
        pick_model(pg, "texture")
    finally:
        pg.close()


@pytest.mark.parametrize("size", SIZES)
def test_before_any_run_no_empty_frame_and_a_model_pick_is_heard_at_once(browser, monkeypatch, size):
    """At both sizes: before any run no tab shows a chart frame with nothing drawn in
    it, nor the race's panels of empty grids (the text says what will come); a model picked is
    acknowledged under the model within a second, even where finding out where it stands takes
    seconds (a Hub that does not answer)."""
    def slow_hub() -> bool:
        time.sleep(2)
        return False

    monkeypatch.setattr(app.models, "hub_reachable", slow_hub)
    pg = open_page(browser, *size)
    try:
        for tab in ("Generate", "Race", "Lossless"):
            pg.get_by_role("tab", name=tab).click()
            pg.wait_for_timeout(400)
            assert pg.evaluate(EMPTY_CHARTS) == [], (size, tab)
            assert placeholders(pg) == []
        assert not pg.locator("#race-ar").is_visible()           # no grey grids before a race
        pg.get_by_role("tab", name="Generate").click()
        pick_model(pg, "janus-pro-1b", wait=0)
        clicked = time.monotonic()
        wait_text(pg, "model-info", "janus-pro-1b", timeout=5_000)
        assert time.monotonic() - clicked < 1.0
        assert in_sight(pg, "#model-info") == "ok", size
        wait_text(pg, "model-info", "Janus-Pro", timeout=30_000)    # then where it stands
        pick_model(pg, "texture", wait=6000)
    finally:
        pg.close()


# ------------------------------------------------------------------------ accessibility

AXE = (Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text(encoding="utf-8")   # axe-core 4
AXE_RUN = """() => axe.run(document, {resultTypes: ['violations']}).then(r => r.violations
    .filter(v => v.impact === 'critical' || v.impact === 'serious')
    .flatMap(v => v.nodes.map(n => `${v.id}: ${n.target.join(' ')} ${(n.failureSummary || '').split('\\n')[1] || ''}`)))"""
PICTURES = """() => [...document.querySelectorAll('.bare img')].filter(i => i.offsetParent !== null)
    .map(i => [i.closest('[id]').id, i.alt])"""


def axe_findings(pg) -> list[str]:
    """What axe-core finds critical or serious on the page as it is now, a line a node."""
    if not pg.evaluate("() => typeof axe !== 'undefined'"):
        pg.evaluate(AXE)
    return pg.evaluate(AXE_RUN)


@pytest.mark.parametrize("theme", ["light", "dark"])
@pytest.mark.parametrize("size", SIZES)
def test_axe_finds_nothing_critical_or_serious_on_a_first_visit_and_after_a_generate(browser, size, theme):
    """Every picture named by what it shows and where its run stands, text at AA contrast in
    both themes, one h1, and the charts in the page's theme."""
    pg = open_page(browser, *size, theme)
    try:
        assert pg.evaluate("() => document.body.classList.contains('dark')") == (theme == "dark")
        assert axe_findings(pg) == []
        assert pg.locator("h1").count() == 1
        fill(pg, "pace", 0)
        pg.locator("#generate").click()
        wait_text(pg, "status", "done")
        pg.wait_for_function("() => document.querySelector('#live-image img')?.alt.includes('done') && "
                             "document.querySelector('#film img')?.alt", timeout=10_000)
        pictures = dict(pg.evaluate(PICTURES))
        assert set(pictures) == {"live-image", "film"}, pictures
        assert pictures["live-image"].startswith("Committed tokens + current drafts. ") and "done" in pictures["live-image"]
        assert pictures["film"].startswith("Drafts after each pass")
        assert axe_findings(pg) == []
        backgrounds = pg.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot .main-svg:first-of-type')]
            .filter(s => s.getBoundingClientRect().width > 0).map(s => getComputedStyle(s).backgroundColor)""")
        assert backgrounds and all((b == "rgb(255, 255, 255)") == (theme == "light") for b in backgrounds), backgrounds
        pg.screenshot(path=os.path.join(SHOTS, f"scd_axe_{theme}_{size[0]}.png"), full_page=True)
    finally:
        pg.close()


def test_axe_finds_nothing_critical_or_serious_after_a_race_and_a_lossless_comparison_on_a_dark_phone(browser):
    """The race's panels, table cards and charts and the Lossless pictures, in the theme whose
    contrast was the hardest (dark, cards on a phone)."""
    pg = open_page(browser, 390, 844, "dark")
    try:
        fill(pg, "pace", 0)
        fill(pg, "samples", 2)
        pg.locator("#race").click()
        wait_text(pg, "race-status", "Done", timeout=300_000)
        pg.wait_for_function("() => document.querySelector('#race-scd-gumbel img')?.alt.includes('all done')",
                             timeout=10_000)                    # renamed as the status changes
        pictures = dict(pg.evaluate(PICTURES))
        assert {f"race-{m}" for m in app.METHODS} <= set(pictures), pictures
        assert pictures["race-scd-gumbel"].startswith("SCD Gumbel coupling. SCD Gumbel coupling all done"), pictures
        assert axe_findings(pg) == []
        pg.locator("button[role=tab]", has_text="Lossless").click()
        fill(pg, "loss-samples", 32)
        pg.locator("#lossless").click()
        wait_text(pg, "lossless-status", "Done", timeout=300_000)
        pg.wait_for_function("() => document.querySelector('#lossless-ar img')?.alt.includes('Done')", timeout=10_000)
        assert axe_findings(pg) == []
    finally:
        pg.close()


# ----------------------------------------------------------------------------- keyboard

FOCUSED = """() => { const e = document.activeElement, ring = el => getComputedStyle(el).outlineStyle !== 'none';
    const box = e.closest('label') || e.closest('.wrap-inner') || e;
    return [e.closest('[id]')?.id || '', e.tagName.toLowerCase() + (e.type ? '/' + e.type : ''), ring(e) || ring(box)]; }"""


def tab_stops(pg, start: str, until: str, most: int = 60) -> list[tuple[str, str, bool]]:
    """The Tab stops from `start` to the one inside `#until` (`most` at most): each one's id,
    tag/type, and whether it shows a focus ring."""
    pg.locator(start).focus()
    stops = []
    while len(stops) < most and (not stops or stops[-1][0] != until):
        pg.keyboard.press("Tab")
        stops.append(tuple(pg.evaluate(FOCUSED)))
    return stops


@pytest.mark.parametrize("size", SIZES)
def test_every_control_works_from_the_keyboard_and_the_replay_follows_the_pass_slider(browser, size):
    pg = open_page(browser, *size)
    try:
        pg.wait_for_timeout(1000)                   # a phone's Settings closed (load.js) ...
        fill(pg, "pace", 0)                         # ... and opened here
        assert pg.locator("#pace input").is_visible()
        stops = tab_stops(pg, "#model input", "pace")
        ids = ["model"] + [s[0] for s in stops]
        assert all(ring for _, _, ring in stops), stops                   # every stop shows its focus
        for name in ("model", "prompt", "generate", "race", "stop", "method", "init", "tree", "window", "seed",
                     "temperature", "greedy", "top-k", "top-p", "cfg", "samples", "pace"):
            assert name in ids, (name, stops)
        assert ids.count("method") == 1                                  # the radio group: one stop
        pg.locator("#method input[value=scd-mc]").focus()
        pg.keyboard.press("ArrowRight")                                  # ... whose arrows choose
        pg.wait_for_function("() => document.querySelector('#method input[value=scd-gumbel]').checked")
        pg.keyboard.press("ArrowLeft")
        pg.wait_for_function("() => document.querySelector('#method input[value=scd-mc]').checked")
        pg.locator("#model input").focus()
        pg.keyboard.type("tin")                                          # typing replaces the name shown
        assert pg.locator("#model input").input_value() == "tin"
        pg.keyboard.press("Escape")
        pg.locator("#generate").focus()
        pg.keyboard.press("Enter")
        wait_text(pg, "status", "done")
        tab = pg.locator("button[role=tab]").first
        tab.focus()
        pg.keyboard.press("ArrowRight")                                   # the tabs' arrows
        assert selected_tab(pg) == "Race"
        pg.keyboard.press("ArrowLeft")
        assert selected_tab(pg) == "Generate"
        pg.locator("#replay button.label-wrap").focus()
        pg.keyboard.press("Enter")                                        # the replay opens ...
        slider = pg.locator("#replay-slider input[type=range]")
        slider.focus()
        last = int(slider.get_attribute("max"))
        pg.keyboard.press("Home")                                          # ... and follows the keys
        wait_text(pg, "replay-text", f"pass 0 of {last}", timeout=20_000)
        pg.keyboard.press("ArrowRight")
        wait_text(pg, "replay-text", f"pass 1 of {last}", timeout=20_000)
        for key in ("ArrowRight",) * 4:                                     # quick presses: the last one drawn
            pg.keyboard.press(key)
        wait_text(pg, "replay-text", f"pass 5 of {last}", timeout=20_000)
        number = pg.locator("#replay-slider input[type=number]")
        number.fill("3")                                                    # ... and a typed number
        number.press("Enter")
        wait_text(pg, "replay-text", f"pass 3 of {last}", timeout=20_000)
        assert pg.evaluate("() => document.querySelector('#replay-image img')?.alt || ''").startswith(
            "The replayed pass")
    finally:
        pg.close()


# ----------------------------------------------------------------------- a visitor's text

HOSTILE_PROMPT = ('red heart <img src=x onerror="window.hit=1"> **giant** <script>window.hit=2</script> '
                  '$$x^2$$ [link](http://example.com)')
MARKUP = """() => [...document.querySelectorAll('#ID img, #ID script, #ID strong, #ID em, #ID a, #ID .katex, #ID h1')]
    .filter(e => e.tagName !== 'STRONG' || e.innerText.includes('giant')).length"""     # the page's own bold words stay


@pytest.mark.parametrize("size", SIZES)
def test_a_prompt_with_html_markdown_and_script_shows_as_text_wherever_it_is_echoed(browser, size):
    """Under the prompt box, in the run's summary and in a switch's note: the characters typed,
    nothing the browser fetches, runs or formats."""
    pg = open_page(browser, *size)
    try:
        pick_model(pg, "tiny")
        fill(pg, "pace", 0)
        pg.locator("#prompt textarea").fill(HOSTILE_PROMPT)
        wait_text(pg, "prompt-words", "not known to tiny, ignored: <img **giant**", timeout=10_000)
        pg.locator("#generate").click()
        wait_text(pg, "status", "done")
        wait_text(pg, "summary", "ignored: <img **giant**.")
        for where in ("prompt-words", "summary"):
            assert pg.evaluate(MARKUP.replace("ID", where)) == 0, where
        pick_model(pg, "texture")
        wait_text(pg, "settings-changed", f"Prompt \u201c{HOSTILE_PROMPT}\u201d", timeout=20_000)
        assert pg.evaluate(MARKUP.replace("ID", "settings-changed")) == 0
        assert pg.evaluate("() => window.hit") is None
    finally:
        pg.close()


@pytest.mark.parametrize("size", SIZES)
def test_a_clip_the_browser_cannot_play_is_refused_beside_the_field_which_keeps_its_label(browser, size, tmp_path):
    from demo import texts

    bad = tmp_path / "notes.mp4"
    bad.write_text("not a video\n" * 20)
    pg = open_page(browser, *size)
    try:
        pick_model(pg, "cosmos-1-ar-4b", wait=2500)
        pg.locator("#prompt-clip input[type=file]").set_input_files(str(bad))
        wait_text(pg, "clip-refused", texts.UNPLAYABLE_CLIP, timeout=20_000)
        assert error_badges(pg) == 0 and not pg.locator("#prompt-clip .error").is_visible()
        label = pg.locator("#prompt-clip label[data-testid=block-label]")
        assert label.is_visible() and "Prompt clip" in label.inner_text()
    finally:
        pg.close()


def test_closing_the_tab_mid_run_stops_the_comparison_and_the_generate(browser):
    """A visitor who closes the tab during a Lossless comparison or a Generate in slow motion
    leaves nothing running: Gradio notices the closed connection and closes the handler, whose
    comparison thread or row ends within a pass (both gone within CLOSED_S of the close)."""
    import threading
    CLOSED_S = 3.0
    name = app.models.listed_models()[0]

    def gone(what, timeout: float = CLOSED_S) -> float:
        started = time.monotonic()
        while what() and time.monotonic() - started < timeout:
            time.sleep(0.02)
        assert not what()
        return time.monotonic() - started

    comparing = lambda: [t for t in threading.enumerate() if t.name == "scd-lossless"]  # noqa: E731
    pg = open_page(browser, 1400, 1000)
    pg.get_by_role("tab", name="Lossless").click()
    fill(pg, "loss-samples", 1024)
    pg.locator("#lossless").click()
    wait_text(pg, "lossless-status", "Decoding", timeout=60_000)
    assert comparing()
    pg.close()
    print(f"comparison gone {gone(comparing):.2f} s after the tab closed")
    pg = open_page(browser, 1400, 1000)
    fill(pg, "pace", 0.5)
    pg.locator("#generate").click()
    wait_text(pg, "status", "decoding", timeout=60_000)
    assert app.REQUESTS.rows_of(name) == 1
    pg.close()
    print(f"row gone {gone(lambda: app.REQUESTS.rows_of(name)):.2f} s after the tab closed")
