"""The page in a real browser (tests/browser_util.py) under a visitor's hands: what is in
sight while a run goes, the words a newcomer reads, the page before any run, accessibility
(axe-core), the keyboard, a visitor's hostile text and an unplayable clip.
"""
from __future__ import annotations

import os
import re
import time

import pytest

from demo import models, texts
from browser_util import browser  # noqa: F401  (a fixture)
from browser_util import (axe_findings, error_badges, fill, in_sight, open_page, pick_model, placeholders, said,
                          selected_tab, text, wait_text, LISTEN, LISTS, MARKS, PICTURES, RING, SHOTS, SIZES, SIZES_ONCE)
from fakehub import empty_hub_cache  # noqa: F401  (a fixture)

pytestmark = pytest.mark.browser


EMPTY_CHARTS = """() => [...document.querySelectorAll('.js-plotly-plot')]     // drawn frames with nothing in them
    .filter(el => el.offsetParent !== null && !(el.data || []).some(t => (t.x || t.y || t.z || []).length))
    .map(el => el.closest('[id]')?.id || '?')"""


def lines_of(pg, selector: str) -> int:
    """How many lines the element's text takes."""
    return pg.locator(selector).evaluate("""el => { const r = document.createRange(); r.selectNodeContents(el);
        return new Set([...r.getClientRects()].filter(b => b.width > 0).map(b => Math.round(b.top))).size; }""")


@pytest.mark.parametrize("size", SIZES_ONCE)
def test_the_live_charts_and_the_status_are_in_sight_while_a_run_goes(browser, size):
    """At both sizes, as a run goes, without scrolling after the click: the status next to the
    picture is in sight with the acceptance so far and the tokens per pass; on a desktop the
    two live charts (tokens against passes, acceptance) are in sight and drawn; the live region
    says the run started and, after Stop, where it stopped."""
    pg = open_page(browser, *size)
    try:
        fill(pg, "pace", 0.1)
        pg.evaluate("window.scrollTo(0, 0)")
        pg.evaluate(LISTEN)
        pg.locator("#generate").click()
        wait_text(pg, "status", "decoding", timeout=60_000)
        pg.wait_for_function("""() => { const el = document.querySelector('#chart-rate .js-plotly-plot');
            return el && el.data && el.data.some(t => (t.y || []).filter(v => v !== null).length > 2); }""",
                             timeout=30_000)
        assert in_sight(pg, "#status") == "ok" and in_sight(pg, "#live-image img") == "ok", size
        if size[0] > texts.NARROW_PX:
            for chart in ("#chart-committed .js-plotly-plot", "#chart-rate .js-plotly-plot"):
                assert in_sight(pg, chart) == "ok", chart
        status = text(pg, "status")                                # a live strip on a phone
        assert "decoding" in status and "tokens per pass so far" in status and "acceptance so far" in status, status
        pg.screenshot(path=os.path.join(SHOTS, f"scd_live_{size[0]}.png"))
        pg.locator("#stop").click()
        wait_text(pg, "status", "stopped at NFE", timeout=10_000)
        pg.wait_for_function("() => (window.__said || []).some(w => w.startsWith('Generate stopped: '))",
                             timeout=10_000)
        assert said(pg)[0] == "Generate started: SCD maximal coupling on texture, 576 tokens to decode.", said(pg)
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


@pytest.mark.parametrize("size", SIZES_ONCE)
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


TIMERS = """() => {   // Gradio's timer text drawn in a slot for the page's words (not a run's status), from now on
  window.__timers = [];
  const seen = () => { for (const t of document.querySelectorAll('[data-testid=status-tracker] .progress-text')) {
    const box = t.closest('.block[id]');
    if (box && box.querySelector('[data-testid=markdown-wrapper]') && !['status', 'race-status', 'lossless-status']
        .includes(box.id) && t.getClientRects().length && t.innerText.trim()) window.__timers.push(box.id + ': ' + t.innerText);
  } };
  new MutationObserver(seen).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


@pytest.mark.parametrize("size", SIZES_ONCE)
def test_before_any_run_no_empty_frame_and_a_model_pick_is_heard_at_once(browser, monkeypatch, size):
    """At both sizes: before any run no tab shows a chart frame with nothing drawn in
    it, nor the race's panels of empty grids (the text says what will come); a model picked is
    acknowledged under the model within a second, even where finding out where it stands takes
    seconds (a Hub that does not answer), and no slot for the page's words shows Gradio's timer
    ("0.5s") meanwhile."""
    def slow_hub() -> bool:
        time.sleep(2)
        return False

    monkeypatch.setattr(models, "hub_reachable", slow_hub)
    pg = open_page(browser, *size)
    try:
        for tab in ("Generate", "Race", "Lossless"):
            pg.get_by_role("tab", name=tab).click()
            pg.wait_for_timeout(400)
            assert pg.evaluate(EMPTY_CHARTS) == [], (size, tab)
            assert placeholders(pg) == []
        assert not pg.locator("#race-ar").is_visible()           # no grey grids before a race
        pg.get_by_role("tab", name="Generate").click()
        pg.evaluate(TIMERS)
        pick_model(pg, "janus-pro-1b", wait=0)
        clicked = time.monotonic()
        wait_text(pg, "model-info", "janus-pro-1b", timeout=5_000)
        assert time.monotonic() - clicked < 1.0
        assert in_sight(pg, "#model-info") == "ok", size
        wait_text(pg, "model-info", "Janus-Pro", timeout=30_000)    # then where it stands
        pick_model(pg, "texture", wait=6000)
        assert pg.evaluate("() => window.__timers") == []
    finally:
        pg.close()


ANNOUNCERS = """() => [...document.querySelectorAll('[aria-live]')]     // live regions a screen reader hears
    .filter(e => !e.closest('[aria-hidden=true]')).map(e => e.id || e.className)"""


@pytest.mark.parametrize("size,theme", [(SIZES[0], "light"), (SIZES[1], "dark"),      # the hardest contrast: a dark phone
                                        pytest.param(SIZES[0], "dark", marks=pytest.mark.slow),
                                        pytest.param(SIZES[1], "light", marks=pytest.mark.slow)])
def test_axe_finds_nothing_critical_serious_or_moderate_and_a_generate_is_announced_in_words(browser, size, theme):
    """On a first visit and after a Generate: axe finds nothing critical, serious or moderate;
    every picture and every chart named by what it shows; text at AA contrast and every chart
    mark at 3:1 in both themes, one h1, the charts in the page's theme. The run is said in words
    in the page's own polite live region, and Gradio's announcer (its "Loading" and untranslated
    "common.complete") is not heard."""
    pg = open_page(browser, *size, theme)
    try:
        assert pg.evaluate("() => document.body.classList.contains('dark')") == (theme == "dark")
        assert axe_findings(pg) == []
        assert pg.locator("h1").count() == 1
        fill(pg, "pace", 0)
        pg.evaluate(LISTEN)
        pg.locator("#generate").click()
        wait_text(pg, "status", "done")
        pg.wait_for_function("() => document.querySelector('#live-image img')?.alt.includes('done') && "
                             "document.querySelector('#film img')?.alt", timeout=10_000)
        pictures = dict(pg.evaluate(PICTURES))
        assert set(pictures) == {"live-image", "film"}, pictures
        assert pictures["live-image"].startswith("Committed tokens + current drafts. ") and "done" in pictures["live-image"]
        assert pictures["film"].startswith("Drafts after each pass")
        pg.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')].filter(p => p.offsetParent)"
                             ".every(p => p.getAttribute('role') === 'img' && p.getAttribute('aria-label'))",
                             timeout=10_000)
        words = said(pg)
        assert words[-1].startswith("Generate done: SCD maximal coupling on texture, 576 tokens in "), words
        assert all(w.startswith("Generate started") for w in words[:1] if len(words) > 1), words   # too quick to show one
        assert pg.evaluate(ANNOUNCERS) == ["page-said"]
        assert "not measured: your first run on this model here" in text(pg, "summary")   # no cold reference
        assert axe_findings(pg) == []
        assert pg.evaluate(MARKS) == []
        backgrounds = pg.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot .main-svg:first-of-type')]
            .filter(s => s.getBoundingClientRect().width > 0).map(s => getComputedStyle(s).backgroundColor)""")
        assert backgrounds and all((b == "rgb(255, 255, 255)") == (theme == "light") for b in backgrounds), backgrounds
        pg.screenshot(path=os.path.join(SHOTS, f"scd_axe_{theme}_{size[0]}.png"), full_page=True)
    finally:
        pg.close()


FOCUSED = """() => { const e = document.activeElement, ring = el => getComputedStyle(el).outlineStyle !== 'none';
    const box = e.closest('label') || e.closest('.wrap-inner') || e, drawn = ring(e) ? e : box;
    return [e.closest('[id]')?.id || '', e.tagName.toLowerCase() + (e.type ? '/' + e.type : ''), ring(e) || ring(box),
            ring(drawn) ? (""" + RING + """)(drawn) : 0]; }"""


def tab_stops(pg, start: str, until: str, most: int = 60) -> list[tuple[str, str, bool, float]]:
    """The Tab stops from `start` to the one inside `#until` (`most` at most): each one's id,
    tag/type, whether it shows a focus ring, and the ring's contrast."""
    pg.locator(start).focus()
    stops = []
    while len(stops) < most and (not stops or stops[-1][0] != until):
        pg.keyboard.press("Tab")
        pg.wait_for_timeout(150)            # a person's pace: a ring fades in (a button's transition)
        stops.append(tuple(pg.evaluate(FOCUSED)))
    return stops


@pytest.mark.parametrize("size", SIZES_ONCE)
def test_every_control_works_from_the_keyboard_and_the_replay_follows_the_pass_slider(browser, size):
    """Every control a Tab stop with a ring at 3:1 against what surrounds it (the tabs' inside
    them); a dropdown's list gone once the focus leaves it, by Tab, Escape or a click elsewhere;
    the replay opens on a pass that rejected a draft, follows its slider by keys and a typed
    number, and its drafts' p(x) and q(x) are a table the keyboard opens."""
    pg = open_page(browser, *size)
    try:
        pg.wait_for_timeout(1000)                   # a phone's Settings closed (load.js) ...
        fill(pg, "pace", 0)                         # ... and opened here
        assert pg.locator("#pace input").is_visible()
        stops = tab_stops(pg, "#model input", "pace")
        ids = ["model"] + [s[0] for s in stops]
        assert all(ring for _, _, ring, _ in stops), stops                # every stop shows its focus
        assert [s for s in stops if s[3] < 3] == []                       # ... at 3:1
        for name in ("model", "prompt", "generate", "race", "stop", "method", "init", "tree", "window", "seed",
                     "temperature", "greedy", "top-k", "top-p", "cfg", "samples", "pace"):
            assert name in ids, (name, stops)
        assert ids.count("method") == 1                                  # the radio group: one stop
        assert pg.evaluate(LISTS) == []                                  # no list left drawn past a dropdown
        pg.locator("#model input").focus()
        pg.wait_for_function(f"() => ({LISTS})().includes('model')")      # its list opens with the focus ...
        pg.keyboard.press("Escape")
        pg.wait_for_function(f"() => ({LISTS})().length === 0")           # ... and Escape closes it
        pg.locator("#init input").click()
        pg.wait_for_function(f"() => ({LISTS})().includes('init')")
        pg.locator("#header").click()                                    # so does a click elsewhere
        pg.wait_for_function(f"() => ({LISTS})().length === 0")
        pg.locator("#method input[value=scd-mc]").focus()
        pg.keyboard.press("ArrowRight")                                  # ... whose arrows choose
        pg.wait_for_function("() => document.querySelector('#method input[value=scd-gumbel]').checked")
        pg.keyboard.press("ArrowLeft")
        pg.wait_for_function("() => document.querySelector('#method input[value=scd-mc]').checked")
        pg.locator("#model input").focus()
        pg.wait_for_function(f"() => ({LISTS})().includes('model')")     # its list open: the name cleared
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
        assert tab.evaluate("el => getComputedStyle(el).outlineOffset") == "-3px"   # the ring inside the tab
        pg.locator("#replay button.label-wrap").focus()
        pg.keyboard.press("Enter")                                        # the replay opens on a pass that rejected a draft ...
        wait_text(pg, "replay-text", "pass ", timeout=20_000)
        slider = pg.locator("#replay-slider input[type=range]")
        last, opened = int(slider.get_attribute("max")), int(slider.input_value())
        caption = text(pg, "replay-text")
        assert last > 5 and f"pass {opened} of {last}" in caption and "first rejection replaced" in caption
        assert opened == last or "The replay opens here" in caption
        summary = pg.locator("#replay-text summary")
        summary.focus()
        pg.keyboard.press("Enter")                                        # ... its drafts a table, by the keyboard
        cells = pg.locator("#replay-text td")
        cells.first.wait_for(state="visible", timeout=10_000)
        assert "rejected; the residual drew token" in pg.locator("#replay-text table").inner_text()
        slider.focus()
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


HOSTILE_PROMPT = ('red heart <img src=x onerror="window.hit=1"> **giant** <script>window.hit=2</script> '
                  '$$x^2$$ [link](http://example.com)')
MARKUP = """() => [...document.querySelectorAll('#ID img, #ID script, #ID strong, #ID em, #ID a, #ID .katex, #ID h1')]
    .filter(e => e.tagName !== 'STRONG' || e.innerText.includes('giant')).length"""     # the page's own bold words stay


@pytest.mark.parametrize("size", SIZES_ONCE)
def test_a_prompt_with_html_markdown_and_script_shows_as_text_wherever_it_is_echoed(browser, size):
    """Under the prompt box, in the run's summary and in a switch's note: the characters typed,
    nothing the browser fetches, runs or formats; the run on tiny said in words in the live
    region (no prompt in them)."""
    pg = open_page(browser, *size)
    try:
        pick_model(pg, "tiny")
        fill(pg, "pace", 0)
        pg.locator("#prompt textarea").fill(HOSTILE_PROMPT)
        wait_text(pg, "prompt-words", "not known to tiny, ignored: <img **giant**", timeout=10_000)
        pg.evaluate(LISTEN)
        pg.locator("#generate").click()
        wait_text(pg, "status", "done")
        pg.wait_for_function("() => (window.__said || []).some(w => w.startsWith("
                             "'Generate done: SCD maximal coupling on tiny, 64 tokens in '))", timeout=10_000)
        wait_text(pg, "summary", "ignored: <img **giant**.")
        for where in ("prompt-words", "summary"):
            assert pg.evaluate(MARKUP.replace("ID", where)) == 0, where
        pick_model(pg, "texture")
        wait_text(pg, "settings-changed", f"Prompt \u201c{HOSTILE_PROMPT}\u201d", timeout=20_000)
        assert pg.evaluate(MARKUP.replace("ID", "settings-changed")) == 0
        assert pg.evaluate("() => window.hit") is None
    finally:
        pg.close()


@pytest.mark.parametrize("size", SIZES_ONCE)
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
