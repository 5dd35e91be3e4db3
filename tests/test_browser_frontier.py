"""`tiny` and `tiny-64` side by side in a real browser: a visitor who wonders why tiny-64 draws
colour fields follows the link under its note and finds both models' samples, their leads and
the frontier figure, whole and named, at a desktop's and a phone's size, and "How it works"
passes axe (nothing critical, serious or moderate) with its charts' marks at 3:1. The served
page and its helpers are tests/browser_util.py's."""
from __future__ import annotations

import os

import pytest
from demo import charts, frontier_view as fv
from browser_util import MARKS, REACHABLE, SHOTS, axe_findings, browser, open_page, pick_model, text  # noqa: F401

pytestmark = pytest.mark.browser

PICTURES = """() => Object.fromEntries([...document.querySelectorAll('#frontier img')].map(i =>
    [i.closest('[id]').id, [i.complete ? i.naturalWidth : 0, i.alt, Math.round(i.getBoundingClientRect().width)]]))"""


@pytest.mark.parametrize("size, theme", [((1400, 1000), "light"), pytest.param((390, 844), "dark", marks=pytest.mark.slow)])
def test_the_note_under_tiny_64_leads_to_both_models_samples_their_leads_and_the_frontier_figure(
        browser, size, theme):
    pg = open_page(browser, *size, theme)
    try:
        pick_model(pg, "tiny-64")
        link = pg.locator(f"#model-info a[href='#{fv.ANCHOR}']")
        assert link.inner_text() == "Why it draws colour fields: beside tiny"
        link.click()
        pg.wait_for_function("() => document.activeElement?.closest('#frontier')?.tagName !== undefined",
                             timeout=10_000)                          # the tab opened, its heading focused
        pg.wait_for_function(f"() => {{ const y = document.querySelector('#frontier h2').getBoundingClientRect().top;"
                             f" return y >= -2 && y <= {size[1] // 4}; }}", timeout=5_000)   # ... and brought into sight
        pg.wait_for_function("() => [...document.querySelectorAll('#frontier img')].every(i => i.alt)", timeout=5_000)
        pg.wait_for_function("() => [...document.querySelectorAll('#frontier img')].every(i => i.complete)",
                             timeout=10_000)                        # each fetched (a broken one reads 0 wide)
        pictures = pg.evaluate(PICTURES)
        for name in fv.MODELS:
            shown = fv.read_samples(name)
            width, alt, drawn = pictures[f"frontier-{name}"]
            assert width == shown.picture.shape[1] and drawn >= width - 1, (name, pictures)   # loaded, not shrunk
            assert alt == fv.title(shown)
            lead = fv.best_lead(fv.BENCH[name])
            assert f"{lead.lead:.2f}x fewer passes than SJD at its best window, L {lead.window}" in \
                text(pg, f"frontier-lead-{name}")
            assert pg.locator(f"#frontier-{name} img").evaluate(REACHABLE) == "ok", name
        said = text(pg, "frontier-sentence")
        assert "No model trained here so far does both" in said and "tiny-64 leads by" in said
        assert "measured three ways" in text(pg, "frontier-lead-tiny")        # tiny's three leads, together
        chart = pg.locator("#frontier-figure .js-plotly-plot")                 # the frontier, a chart of the page
        pg.wait_for_function("() => document.querySelector('#frontier-figure .js-plotly-plot')?.getAttribute('aria-label')",
                             timeout=10_000)
        assert chart.get_attribute("aria-label") == charts.alt_of(fv.figure()) and chart.get_attribute("role") == "img"
        legend = chart.locator(".legendtext").evaluate_all("texts => texts.map(t => t.textContent)")
        assert [name for name, _, _ in fv.frontier_points()] == legend[:len(fv.frontier_points())]
        assert not any("_" in name or "deep-local" in name for name in legend)   # named in words, not run ids
        assert chart.evaluate(REACHABLE) == "ok"                               # whole on a phone: no swipe
        assert chart.evaluate("""el => { const c = el.getBoundingClientRect();      // every name whole, in the chart
            return [...el.querySelectorAll('.legendtext, .g-xtitle text, .g-ytitle text')].filter(t => {
              const r = t.getBoundingClientRect(); return r.left < c.left - 1 || r.right > c.right + 1
                || r.top < c.top - 1 || r.bottom > c.bottom + 1; }).map(t => t.textContent); }""") == []
        sizes = chart.evaluate("el => [...el.querySelectorAll('.legendtext, .xtick text, .ytick text')]"
                               ".map(t => parseFloat(getComputedStyle(t).fontSize))")
        assert min(sizes) >= 11, sizes
        assert pg.evaluate("() => document.documentElement.scrollWidth") <= size[0]   # the page itself does not
        assert pg.evaluate(MARKS) == []
        pg.wait_for_function("() => document.querySelector('#coupling-figure .js-plotly-plot')?.getAttribute('aria-label')")
        coupling = pg.locator("#coupling-figure .js-plotly-plot").get_attribute("aria-label")
        assert "kept with probability 1.00" in coupling and "redrawn from the residual" in coupling
        assert axe_findings(pg) == []
        pg.locator("#frontier").screenshot(path=os.path.join(SHOTS, f"scd_frontier_{theme}_{size[0]}.png"))
    finally:
        pg.close()
