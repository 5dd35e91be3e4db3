"""The page in a real browser, for the browser tests (tests/test_browser*.py): Playwright
drives Debian's chromium against the app served in-process (`browser`: one server and one
chromium for a test module), at 1400x1000 and at a phone's 390x844, and the helpers that read
the page as a person does. Where chromium or playwright is missing the tests fail in CI (CI
set) and are skipped elsewhere, with the reason and the command that installs it.

Screenshots land in $SCD_SCREENSHOT_DIR (default: the system temp folder) for a look.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile

from pathlib import Path

import axe_playwright_python
import pytest

from demo import config, page

CHROMIUM = next((p for p in (os.environ.get("CHROMIUM"), shutil.which("chromium"),
                             shutil.which("chromium-browser"), "/usr/bin/chromium")
                 if p and os.path.exists(p)), None)
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
SHOTS = os.environ.get("SCD_SCREENSHOT_DIR", tempfile.gettempdir())
SIZES = [(1400, 1000), (390, 844)]
# A check made at both sizes: at 1400 x 1000 in every lane, at 390 x 844 too in the `slow` lane,
# which CI leaves to the full run (docs/testing.md). The phone's own checks (the tests named for a
# phone, the first visit, axe on a dark phone) run in every lane.
SIZES_ONCE = [SIZES[0], pytest.param(SIZES[1], marks=pytest.mark.slow)]


@pytest.fixture(scope="module")
def browser():
    """One served page and one chromium for a test module. scripts/test.sh runs all the browser
    files in one test process (tests/conftest.py): two pages and two chromiums at once on two
    cores ran past their time-outs."""
    if CHROMIUM is None:
        missing("chromium is not installed (as root: apt-get install chromium; or set CHROMIUM to its path)")
    try:
        from playwright import sync_api
    except ImportError:
        missing("playwright is not installed (pip install -e '.[dev]')")
    page.demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **config.LAUNCH)
    try:
        with sync_api.sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                yield b
            finally:
                b.close()
    finally:
        page.demo.close()


def missing(reason: str) -> None:
    """In CI a missing browser is a failure; elsewhere the tests are skipped with the reason."""
    if IN_CI:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def open_page(browser, width: int, height: int, theme: str = "light"):
    pg = browser.new_page(viewport={"width": width, "height": height}, color_scheme=theme)
    pg.goto(page.demo.local_url + ("?__theme=dark" if theme == "dark" else ""))
    pg.wait_for_selector("#generate", timeout=60_000)
    pg.wait_for_timeout(500)
    return pg


def fill(pg, elem_id: str, value) -> None:
    box = pg.locator(f"#{elem_id} input")
    if not box.is_visible() and pg.locator("#settings button.label-wrap").count():
        pg.locator("#settings button.label-wrap").click()          # a phone starts with Settings closed
    box.fill(str(value))
    box.press("Tab")


def pick_model(pg, name: str, wait: int | None = None) -> None:
    """Pick `name` in the model list; by default, until the switch has landed (the Generate
    status names the model: its hint, or the run the pick stopped), else `wait` ms."""
    pg.locator("#model input").click()
    pg.get_by_role("option", name=re.compile(rf"^{re.escape(name)} ")).click()
    if wait is not None:
        pg.wait_for_timeout(wait)
        return
    pg.wait_for_function("name => { const said = (document.querySelector('#status [data-testid=markdown]')"
                         "?.textContent || '').trim(); return said.startsWith(name + ' ·') || "
                         "said.includes('picked ' + name); }", arg=name, timeout=60_000)


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


def race_cells(pg) -> dict[str, dict[str, str]]:
    """The race table as a person reads it: each method's figures by their column's name."""
    return {row[0]: dict(zip(heads, row)) for heads in [pg.locator("#race-table th").all_inner_texts()]
            for row in (r.locator("td").all_inner_texts() for r in pg.locator("#race-table tbody tr").all())}


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


def in_sight(pg, selector: str) -> str:
    return pg.locator(selector).first.evaluate(IN_SIGHT)


def selected_tab(pg) -> str:
    return pg.locator("button[role=tab][aria-selected=true]").inner_text().strip()


AXE = (Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text(encoding="utf-8")   # axe-core 4
AXE_RUN = """() => axe.run(document, {resultTypes: ['violations']}).then(r => r.violations
    .filter(v => ['critical', 'serious', 'moderate'].includes(v.impact))
    .flatMap(v => v.nodes.map(n => `${v.impact} ${v.id}: ${n.target.join(' ')} ${(n.failureSummary || '').split('\\n')[1] || ''}`)))"""
PICTURES = """() => [...document.querySelectorAll('.bare img')].filter(i => i.offsetParent !== null)
    .map(i => [i.closest('[id]').id, i.alt])"""


def axe_findings(pg) -> list[str]:
    """What axe-core finds critical, serious or moderate on the page as it is now, a line a node."""
    if not pg.evaluate("() => typeof axe !== 'undefined'"):
        pg.evaluate(AXE)
    return pg.evaluate(AXE_RUN)


LIGHTNESS = """const rgba = c => { const m = c.match(/rgba?\\(([^)]*)\\)/); if (!m) return null;
    const v = m[1].split(',').map(Number); return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; };
  const lum = ([r, g, b]) => [r, g, b].map(v => v / 255).map(v => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4)
    .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
  const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
  const over = (top, under) => top[3] >= 1 ? top : top.slice(0, 3).map((v, i) => v * top[3] + under[i] * (1 - top[3]));
  const behind = el => {        // the colour drawn behind an element: the first opaque background up its ancestors
    for (let e = el; e && e !== document.documentElement; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) return c.slice(0, 3);
    }
    return rgba(getComputedStyle(document.body).backgroundColor).slice(0, 3);
  };"""

MARKS = """() => {   // every mark of every chart in sight, below 3:1 against the panel it is drawn on
  """ + LIGHTNESS + """
  const out = [];
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    if (plot.offsetParent === null) continue;
    const svg = plot.querySelector('.main-svg'), bg = plot.querySelector('.bg');
    const fill = bg && rgba(getComputedStyle(bg).fill);
    const panel = fill && fill[3] > 0 ? over(fill, behind(svg)) : behind(svg);
    const marks = [...plot.querySelectorAll('.barlayer .point path')].map(e => ['bar', getComputedStyle(e).fill])
      .concat([...plot.querySelectorAll('.scatterlayer .js-line')].map(e => ['line', getComputedStyle(e).stroke]))
      .concat([...plot.querySelectorAll('.scatterlayer .point')].map(e => {
        const s = getComputedStyle(e); return ['marker', s.fill !== 'none' && rgba(s.fill)?.[3] ? s.fill : s.stroke]; }));
    for (const [kind, colour] of marks) {
      const c = rgba(colour);
      if (!c || c[3] === 0) continue;
      const r = ratio(over(c, panel), panel);
      if (r < 3) out.push([plot.closest('.block[id]')?.id || '?', kind, colour, Math.round(r * 100) / 100]);
    }
  }
  return out;
}"""

RING = """el => {   // the focus ring's colour against what is drawn around it
  """ + LIGHTNESS + """
  const ring = rgba(getComputedStyle(el).outlineColor);
  return Math.round(ratio(ring.slice(0, 3), behind(el.parentElement)) * 100) / 100;
}"""

LISTEN = """() => {   // what the page's live region says from now on, each change once
  window.__said = [];
  new MutationObserver(() => {
    const said = document.querySelector('#page-said')?.textContent || '';
    if (said && window.__said[window.__said.length - 1] !== said) window.__said.push(said);
  }).observe(document.body, {subtree: true, childList: true, characterData: true});
}"""

LISTS = """() => [...document.querySelectorAll('.options')]     // dropdown option lists drawn
    .filter(e => e.getBoundingClientRect().height > 0).map(e => e.closest('.block[id]')?.id || '?')"""


def said(pg) -> list[str]:
    """What the page's live region has said since `LISTEN` ran."""
    return pg.evaluate("() => window.__said || []")
