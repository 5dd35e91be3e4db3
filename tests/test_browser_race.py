"""The page in a real browser (tests/browser_util.py): the race and the Lossless comparison at
both sizes (words, ranges and panels whole, no winner inside the noise, no chart title
covered), axe on their views, and a tab closed mid-run.
"""
from __future__ import annotations

import os
import re
import time

import pytest

from demo import config, models
from scd_core.settings import METHODS
from browser_util import browser  # noqa: F401  (a fixture)
from browser_util import (axe_findings, fill, in_sight, open_page, pick_model, race_cells, said, text,
                          unreachable_cells, wait_text, BROKEN_WORDS, LISTEN, MARKS, PICTURES, SHOTS, SIZES, SIZES_ONCE)

pytestmark = pytest.mark.browser


def test_phone_race_keeps_the_page_width_every_panel_reachable_and_words_whole(browser):
    """On a phone every figure of the race table can be brought into sight and read (the page
    scrolled, only boxes that scroll swiped), words whole; the race said in words in the live
    region, its start, a step and its end."""
    pg = open_page(browser, 390, 844)
    try:
        fill(pg, "pace", 0)
        fill(pg, "samples", 2)
        pg.evaluate(LISTEN)
        pg.locator("#race").click()
        wait_text(pg, "race-summary", "Gumbel", timeout=300_000)
        pg.wait_for_function("() => (window.__said || []).some(w => w.startsWith('Race done on texture.'))",
                             timeout=20_000)
        words = said(pg)
        assert words[0] == "Race started on texture: each method decodes 2 samples, then is timed.", words
        assert any(w.startswith("Race: ") for w in words) and "Passes (the same" in words[-1], words
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


def test_lossless_on_a_phone_reads_whole_and_shows_where_the_pictures_differ(browser):
    pg = open_page(browser, 390, 844)
    try:
        pg.get_by_role("tab", name="Lossless").click()
        fill(pg, "loss-samples", 16)
        pg.evaluate(LISTEN)
        pg.locator("#lossless").click()
        wait_text(pg, "lossless-status", "Done", timeout=300_000)
        pg.wait_for_function("() => (window.__said || []).some(w => w.startsWith('Lossless comparison done'))",
                             timeout=10_000)
        words = said(pg)
        # how long it will take, then that it started (`demo.lossless.estimate_note`, `Comparing`);
        # the default's estimate may still be heard first, from before the samples were set
        started = next((i for i, w in enumerate(words) if w.startswith("Lossless comparison started: 16 samples of AR")), None)
        assert started is not None, words
        assert any(w.startswith("16 samples of each method on texture: about") for w in words[:started]), words
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
        summary = text(pg, "lossless-summary")                  # where the samples vary, with the test's power
        assert "where the samples, pooled, vary most" in summary and summary.count("catches, 8 times in 10") >= 1
        assert "red where their tokens differ" in text(pg, "lossless-diff-title")
        assert pg.locator("#lossless-diff img").evaluate("el => el.getBoundingClientRect().width") > 200
        pg.screenshot(path=os.path.join(SHOTS, "scd_lossless_390.png"), full_page=True)
    finally:
        pg.close()


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


def ranges_of(cell: str) -> tuple[float, float]:
    """A figure's range, 'mean (min–max)' or the value alone."""
    found = re.search(r"([\d.]+) \(([\d.]+)–([\d.]+)\)", cell)
    if found:
        return float(found.group(2)), float(found.group(3))
    value = float(re.match(r"[\d.]+", cell).group(0))
    return value, value


@pytest.mark.parametrize("size", SIZES_ONCE)
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


@pytest.mark.parametrize("size", SIZES_ONCE)
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
        assert {f"race-{m}" for m in METHODS} <= set(pictures), pictures
        assert pictures["race-scd-gumbel"].startswith("SCD Gumbel coupling. SCD Gumbel coupling all done"), pictures
        assert axe_findings(pg) == []
        assert pg.evaluate(MARKS) == []                         # the race's charts too: every mark 3:1
        pg.locator("button[role=tab]", has_text="Lossless").click()
        fill(pg, "loss-samples", 32)
        pg.locator("#lossless").click()
        wait_text(pg, "lossless-status", "Done", timeout=300_000)
        pg.wait_for_function("() => document.querySelector('#lossless-ar img')?.alt.includes('Done')", timeout=10_000)
        assert axe_findings(pg) == []
    finally:
        pg.close()


def test_closing_the_tab_mid_run_stops_the_comparison_and_the_generate(browser):
    """A visitor who closes the tab during a Lossless comparison or a Generate in slow motion
    leaves nothing running: Gradio notices the closed connection and closes the handler, whose
    comparison thread or row ends within a pass (both gone within CLOSED_S of the close)."""
    import threading
    CLOSED_S = 3.0
    name = models.listed_models()[0]

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
    assert config.REQUESTS.rows_of(name) == 1
    pg.close()
    print(f"row gone {gone(lambda: config.REQUESTS.rows_of(name)):.2f} s after the tab closed")
