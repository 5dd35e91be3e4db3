"""What the demo page costs: end-to-end times in a real browser, many visitors at once, and
memory over many requests.

    python scripts/page_timing.py                       # all three, about 10 minutes on 2 cores
    python scripts/page_timing.py --only browser        # or: visitors, memory

1. browser: a `tiny` image at full speed (slow motion 0), from the click on Generate to the
   final picture loaded in Chromium, against the engine time the page reports for the run
   (median of --repeats runs after a warm-up); then the `tiny-video` race (K = 8) from the
   click to its table.
2. visitors: `python app.py` in a subprocess; 32 gradio_client visitors press Generate at
   once (tiny, the page's defaults at full speed, seeds 0-31: their rows share passes), in
   --bursts bursts: how many were served, p50 and p95 latency (nearest rank: the 31st of 32)
   of each burst, and their medians.
3. memory: the server's resident memory after 10 warm-up requests and after 100 more from
   the same visitor, then after one request from each of 100 new visitors.

Needs playwright and Chromium (CHROMIUM or /usr/bin/chromium) for the first.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TINY = ["tiny", "scd-mc", 16, "random", 1.0, 100, 1.0, 3.0, 0, "red apple", 0.0, 8, None, ""]

WATCH = """() => {
  window.__log = [];
  const status = document.querySelector('#status [data-testid=markdown]');
  const before = status.innerText;
  new MutationObserver(() => {
    const s = status.innerText;
    if (s !== before && s.includes('done') && !window.__done) {
      window.__done = performance.now();
      const img = document.querySelector('#live-image img');
      const loaded = () => { window.__picture = performance.now(); };
      if (img.complete && img.naturalWidth) loaded(); else img.addEventListener('load', loaded, {once: true});
    }
  }).observe(status, {subtree: true, childList: true, characterData: true});
  window.__done = window.__picture = null;
  window.__t0 = performance.now();
  document.querySelector('#generate').click();
}"""


def browser(repeats: int) -> None:
    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(ROOT))
    import app

    app.demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **app.LAUNCH)
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=ARGS)
        pg = b.new_page(viewport={"width": 1400, "height": 1000})
        pg.goto(app.demo.local_url)
        pg.wait_for_selector("#generate")
        pg.locator("#model input").click()
        pg.get_by_role("option", name=re.compile(r"^tiny ")).click()
        pg.wait_for_timeout(1500)
        for elem, value in (("pace", 0), ("prompt", "red apple")):
            box = pg.locator(f"#{elem} input, #{elem} textarea").first
            box.fill(str(value))
            box.press("Tab")
        rows = []
        for i in range(repeats + 1):
            box = pg.locator("#seed input")
            box.fill(str(i))
            box.press("Tab")
            pg.wait_for_timeout(300)
            pg.evaluate(WATCH)
            pg.wait_for_function("() => window.__picture", timeout=120_000)
            e2e = pg.evaluate("() => (window.__picture - window.__t0) / 1000")
            engine = float(re.search(r"done\W+in ([0-9.]+) s", pg.locator("#status").inner_text()).group(1))
            if i:                                   # the first run is the warm-up
                rows.append((e2e, engine))
                print(f"  tiny image: click to final picture {e2e:.3f} s, engine {engine:.3f} s")
            pg.wait_for_timeout(500)
        e2e, engine = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
        print(f"tiny image, median of {len(rows)}: click to final picture {e2e:.3f} s, engine "
              f"{engine:.3f} s ({e2e / engine:.1f}x)")
        pg.locator("#model input").click()
        pg.get_by_role("option", name=re.compile(r"^tiny-video ")).click()
        pg.wait_for_timeout(1500)
        for elem, value in (("pace", 0), ("samples", 8)):
            box = pg.locator(f"#{elem} input")
            box.fill(str(value))
            box.press("Tab")
        t = time.perf_counter()
        pg.locator("#race").click()
        pg.wait_for_function("() => (document.querySelector('#race-summary')?.innerText || '')"
                             ".includes('Gumbel')", timeout=600_000)
        print(f"tiny-video race, K = 8: click to table {time.perf_counter() - t:.1f} s")
        b.close()
    app.demo.close()


def serve(port: int) -> tuple[subprocess.Popen, str]:
    from gradio_client import Client

    env = {**os.environ, "GRADIO_SERVER_PORT": str(port)}
    server = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(180):
        try:
            Client(url, verbose=False)
            return server, url
        except Exception:                                      # noqa: BLE001: not up yet
            time.sleep(1)
    server.kill()
    raise SystemExit("the app did not start")


def request(client, seed: int = 0) -> float:
    t = time.perf_counter()
    client.submit(*TINY[:8], seed, *TINY[9:], api_name="/generate").result(timeout=600)
    return time.perf_counter() - t


def visitors(port: int, count: int = 32, bursts: int = 3) -> None:
    from gradio_client import Client

    server, url = serve(port)
    try:
        request(Client(url, verbose=False))                    # warm-up: the model loads
        p50s, p95s = [], []
        for burst in range(bursts):
            clients = [Client(url, verbose=False) for _ in range(count)]
            results: list = []

            def visit(c, seed):
                try:
                    results.append(request(c, seed))
                except Exception as exc:                       # noqa: BLE001: counted
                    results.append(repr(exc)[:80])

            threads = [threading.Thread(target=visit, args=(c, i)) for i, c in enumerate(clients)]
            t = time.perf_counter()
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            ok = sorted(r for r in results if isinstance(r, float))
            p50s.append(statistics.median(ok))
            p95s.append(ok[math.ceil(0.95 * len(ok)) - 1])
            print(f"  burst {burst + 1}: {count} visitors at once, {len(ok)} served in "
                  f"{time.perf_counter() - t:.1f} s; latency p50 {p50s[-1]:.2f} s, p95 {p95s[-1]:.2f} s "
                  f"({p95s[-1] / p50s[-1]:.2f}x)" + "".join(f"\n  refused: {r}" for r in results
                                                            if not isinstance(r, float)))
        p50, p95 = statistics.median(p50s), statistics.median(p95s)
        print(f"{count} visitors at once, median of {bursts} bursts: p50 {p50:.2f} s, p95 {p95:.2f} s "
              f"({p95 / p50:.2f}x)")
    finally:
        server.terminate()
        server.wait()


def rss(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    return float("nan")


def memory(port: int) -> None:
    from gradio_client import Client

    server, url = serve(port)
    try:
        client = Client(url, verbose=False)
        for seed in range(10):
            request(client, seed)
        before = rss(server.pid)
        for seed in range(10, 110):
            request(client, seed)
        after = rss(server.pid)
        print(f"server memory, one visitor: {before:.0f} MB after 10 requests, {after:.0f} MB "
              f"after 100 more ({100 * (after / before - 1):+.1f}%)")
        for seed in range(110, 210):
            request(Client(url, verbose=False), seed)
        visitors = rss(server.pid)
        print(f"then 100 new visitors, one request each: {visitors:.0f} MB "
              f"({(visitors - after) / 100:.2f} MB per visitor, kept for the last app.SESSIONS)")
    finally:
        server.terminate()
        server.wait()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["browser", "visitors", "memory"])
    ap.add_argument("--repeats", type=int, default=7, help="timed browser runs (default 7)")
    ap.add_argument("--bursts", type=int, default=3, help="bursts of 32 visitors (default 3)")
    ap.add_argument("--port", type=int, default=7871)
    args = ap.parse_args(argv)
    for name in ("repeats", "bursts"):
        if getattr(args, name) < 1:
            ap.error(f"--{name}: expected an integer >= 1, got {getattr(args, name)}")
    if args.only in (None, "browser"):
        browser(args.repeats)
    if args.only in (None, "visitors"):
        visitors(args.port, bursts=args.bursts)
    if args.only in (None, "memory"):
        memory(args.port)


if __name__ == "__main__":
    main()
