"""A visitor's walk through the demo page, with screenshots to look at: every method on every
embedded model, a model switch during a run, a race and the Lossless comparison, at each
window size in each theme; each step's status and what would be wrong with it, printed as it
goes.

    python -m bench page-walk                 # 1400x1000 and 390x844, light and dark, ~20 min on 2 cores
    python -m bench page-walk --sizes 390x844 --themes dark --models tiny --out /tmp/walk

Printed for each run: its status, the views showing Gradio's empty placeholder, the error
badges, whether the status is in sight; at the end, the browser console's errors. The
screenshots (`--out`, default a new temporary folder) are named WIDTH_THEME_MODEL_METHOD.png,
WIDTH_THEME_switch.png, WIDTH_THEME_race.png and WIDTH_THEME_lossless.png. Needs playwright and
Chromium (CHROMIUM or /usr/bin/chromium), as the browser tests do; it uses their helpers
(`tests/browser_util.py`), which serve the page in this process.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from bench import ROOT

METHODS = {"ar": "AR", "sjd": "SJD", "scd-mc": "SCD maximal coupling", "scd-gumbel": "SCD Gumbel coupling"}
EMBEDDED = ["texture", "tiny", "tiny-64", "tiny-video"]


def say(*parts) -> None:
    print(*(str(p).replace("\n", " ") for p in parts), flush=True)


def walk(browser, width: int, height: int, theme: str, models: list[str], out: str) -> int:
    """One window size in one theme; the number of steps that showed something wrong."""
    from browser_util import (error_badges, fill, in_sight, open_page, pick_model, placeholders, text,
                              wait_text)

    pg = open_page(browser, width, height, theme)
    where = f"{width}x{height} {theme}"
    errors, wrong = [], 0
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

    def check(what: str, status_view: str | None = None) -> None:
        nonlocal wrong
        empty, badges = placeholders(pg), error_badges(pg)
        sight = in_sight(pg, f"#{status_view}") if status_view else "ok"
        wrong += bool(empty or badges or sight != "ok")
        say(where, what, "| placeholders", empty, "| error badges", badges, "| status", sight)

    def shot(name: str, full: bool = False) -> None:
        pg.screenshot(path=os.path.join(out, f"{width}_{theme}_{name}.png"), full_page=full)

    shot("first")
    check("first visit")
    for name in models:
        pick_model(pg, name)
        for method, label in METHODS.items():
            if not pg.locator("#method").is_visible() and pg.locator("#settings button.label-wrap").count():
                pg.locator("#settings button.label-wrap").click()          # a phone starts with Settings closed
            pg.locator("#method").get_by_text(label, exact=True).click()
            fill(pg, "pace", 0)
            started = time.monotonic()
            pg.locator("#generate").click()
            pg.wait_for_function(f"() => {{ const s = document.querySelector('#status').innerText; "   # this run's
                                 f"return s.startsWith({label!r}) && s.includes('done'); }}", timeout=300_000)
            wait_text(pg, "summary", "wall time", timeout=60_000)         # the final views are in
            pg.locator("#live-image").scroll_into_view_if_needed()
            shot(f"{name}_{method}")
            say(where, name, method, f"{time.monotonic() - started:.1f} s:", text(pg, "status")[:140])
            check(f"{name} {method}", "status")
    switch_from, switch_to = models[-1], models[0]
    if switch_from != switch_to:                                       # a model picked during a run
        # the page is on switch_from already: the walk's last model
        fill(pg, "pace", 0.2)
        pg.locator("#generate").click()
        wait_text(pg, "status", "decoding", timeout=60_000)
        pg.wait_for_timeout(1500)
        pick_model(pg, switch_to, wait=0)
        wait_text(pg, "status", f"ended when you picked {switch_to}", timeout=10_000)
        pg.wait_for_timeout(2500)
        shot("switch")
        say(where, "switch:", text(pg, "status")[:200])
        check("switch", "settings-changed")                            # said under the model, where one looks
    def compare(button: str, prefix: str, note: str, what: str) -> None:
        """Press `button`, wait for its status's Done, shoot the page and say its note."""
        started = time.monotonic()
        pg.locator(f"#{button}").click()
        wait_text(pg, f"{prefix}-status", "Done", timeout=900_000)
        pg.wait_for_timeout(1500)
        shot(button, full=True)
        say(where, f"{what}, {time.monotonic() - started:.1f} s:", text(pg, f"{prefix}-{note}")[:300])
        check(what)

    fill(pg, "pace", 0)
    fill(pg, "samples", 3)
    compare("race", "race", "note", f"race on {switch_to}")
    pg.get_by_role("tab", name="Lossless").click()
    pg.wait_for_timeout(800)
    compare("lossless", "lossless", "summary", "lossless")
    say(where, "console errors:", errors)
    pg.close()
    return wrong + bool(errors)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1400x1000,390x844", help="window sizes, WIDTHxHEIGHT, comma-separated")
    ap.add_argument("--themes", default="light,dark", help="light, dark or both, comma-separated")
    ap.add_argument("--models", default=",".join(EMBEDDED), help="models, comma-separated (the switch: last to first)")
    ap.add_argument("--out", default=None, help="the screenshots' folder (default: a new temporary one)")
    args = ap.parse_args(argv)
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    out = args.out or tempfile.mkdtemp(prefix="scd-walk-")
    os.makedirs(out, exist_ok=True)
    os.chdir(ROOT)

    from demo import config, page
    from playwright import sync_api
    from browser_util import ARGS, CHROMIUM

    if CHROMIUM is None:
        raise SystemExit("chromium is not installed (apt-get install chromium, or set CHROMIUM)")
    page.demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **config.LAUNCH)
    try:
        with sync_api.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            wrong = sum(walk(browser, w, h, theme, args.models.split(","), out)
                        for w, h in sizes for theme in args.themes.split(","))
            browser.close()
    finally:
        page.demo.close()
    say(f"screenshots in {out}; steps with something wrong: {wrong}")
    return 1 if wrong else 0
