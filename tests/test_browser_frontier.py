"""`tiny` and `tiny-64` side by side in a real browser: a visitor who wonders why tiny-64 draws
colour fields follows the link under its note and finds both models' samples, their leads and
the frontier figure, whole and named, at a desktop's and a phone's size. The served page and
its helpers are tests/browser_util.py's."""
from __future__ import annotations

import os

import pytest
from PIL import Image

from demo import frontier_view as fv
from browser_util import REACHABLE, SHOTS, axe_findings, browser, open_page, pick_model, text  # noqa: F401 (a fixture)

pytestmark = pytest.mark.browser

PICTURES = """() => Object.fromEntries([...document.querySelectorAll('#frontier img')].map(i =>
    [i.closest('[id]').id, [i.complete ? i.naturalWidth : 0, i.alt, Math.round(i.getBoundingClientRect().width)]]))"""


@pytest.mark.parametrize("size, theme", [((1400, 1000), "light"), ((390, 844), "dark")])
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
        with Image.open(fv.FIGURE) as figure:
            width, alt, drawn = pictures["frontier-figure"]
            assert width == figure.size[0] and alt == fv.FIGURE_TITLE
        assert drawn >= 700, pictures                    # its words legible: on a phone its box swipes sideways
        assert pg.locator("#frontier-figure").evaluate(REACHABLE) == "ok"
        assert pg.evaluate("() => document.documentElement.scrollWidth") <= size[0]   # the page itself does not
        assert axe_findings(pg) == []
        pg.locator("#frontier").screenshot(path=os.path.join(SHOTS, f"scd_frontier_{theme}_{size[0]}.png"))
    finally:
        pg.close()
