"""The page in a real browser: Playwright drives Debian's chromium against the app served
in-process. Skipped (with the reason) only when chromium or playwright is absent.

The screenshot lands in $SCD_SCREENSHOT_DIR (default: the system temp folder) for a look.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

CHROMIUM = next((p for p in (os.environ.get("CHROMIUM"), shutil.which("chromium"),
                             shutil.which("chromium-browser"), "/usr/bin/chromium")
                 if p and os.path.exists(p)), None)
if CHROMIUM is None:
    pytest.skip("chromium is not installed (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")

import app  # noqa: E402

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def page():
    app.demo.queue(max_size=16, default_concurrency_limit=1).launch(
        server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                pg = browser.new_page(viewport={"width": 1400, "height": 1300})
                pg.goto(app.demo.local_url)
                pg.wait_for_selector("#generate", timeout=60_000)
                yield pg
            finally:
                browser.close()
    finally:
        app.demo.close()


def _status(pg) -> str:
    return pg.locator("#status").inner_text()


def test_generate_in_the_browser(page):
    page.locator("#model input").click()
    page.get_by_role("option", name="toy-grid", exact=True).click()
    page.locator("#prompt textarea").fill("a red apple")
    page.locator("#generate").click()
    page.wait_for_function(
        "() => (document.querySelector('#status')?.innerText || '').includes('done')",
        timeout=120_000)
    assert "256/256 tokens" in _status(page)

    img = page.locator("#live-image img")
    img.wait_for(timeout=10_000)
    size = img.evaluate("el => [el.naturalWidth, el.naturalHeight]")
    assert size == [320, 320]
    assert img.get_attribute("src").split("?")[0].endswith(".png")

    page.wait_for_selector("#chart-committed .js-plotly-plot", timeout=20_000)
    curves = page.locator("#chart-committed .js-plotly-plot .scatterlayer .trace").count()
    assert curves >= 2                                       # the AR diagonal + this run
    assert page.locator("#scd-legend").is_visible()
    assert "accepted this iteration" in page.locator("#scd-legend").inner_text()

    folder = os.environ.get("SCD_SCREENSHOT_DIR", tempfile.gettempdir())
    page.screenshot(path=os.path.join(folder, "scd_demo_generate.png"), full_page=True)


def test_bad_input_shows_an_error_and_the_page_keeps_working(page):
    page.locator("#prompt textarea").fill("")
    page.locator("#generate").click()
    toast = page.get_by_text("Please type a prompt")
    toast.first.wait_for(timeout=20_000)
    page.locator("#prompt textarea").fill("blue circle")
    page.locator("#method").get_by_text("SJD", exact=True).click()   # a status we can tell apart
    page.locator("#generate").click()
    page.wait_for_function(
        "() => { const s = document.querySelector('#status')?.innerText || '';"
        " return s.startsWith('SJD') && s.includes('done'); }", timeout=120_000)
    assert "256/256 tokens" in _status(page)


def test_stop_button_cancels_a_race(page):
    page.get_by_role("tab", name="Race").click()
    page.locator("#race").click()
    page.wait_for_function(
        "() => (document.querySelector('#race-status')?.innerText || '').includes('NFE')",
        timeout=60_000)
    page.locator("#stop").click()
    page.wait_for_timeout(1500)
    frozen = page.locator("#race-status").inner_text()
    page.wait_for_timeout(2000)
    assert page.locator("#race-status").inner_text() == frozen          # no more updates
    assert "Gumbel" not in page.locator("#race-summary").inner_text()   # never finished
    assert "AR: NFE" in frozen and "AR: NFE 256," not in frozen          # AR was cut short
