"""What the demo page costs: end-to-end times in a real browser, many visitors at once, and
memory over many requests.

    python -m bench page-timing                       # all four, about 15 minutes on 2 cores
    python -m bench page-timing --only browser        # or: stop, visitors, memory
    python -m bench page-timing --only visitors --visitors 1,16,64
    python -m bench page-timing --app-dir /path/to/another/checkout   # measure that copy's page

1. browser: a `tiny` image at full speed (slow motion 0), from the click on Generate to the
   final picture loaded in Chromium, against the engine time the page reports for the run
   (median of --repeats runs after a warm-up); then the `tiny-video` race (K = 8) from the
   click to its table.
2. stop: a `tiny` image in slow motion (--stop-pace seconds per pass), Stop clicked 1.5 s
   after Generate: the time from the Stop click to the status saying "stopped" (--repeats
   runs), whether the picture shown then is the one kept, and whether a picture sent before
   the server saw the stop landed after the click.
3. visitors: for each count of --visitors (default 1,16,64)
   that many gradio_client visitors press Generate at once (tiny, the page's defaults at full
   speed, seeds 0..N-1: their rows share passes) and fetches its final picture, in --bursts
   bursts: how many were served, p50 and p95 latency (nearest rank), the whole burst's time
   and the CPU seconds of the page, its decode workers and the visitors (this process,
   on the same cores), against the same requests
   submitted at once to one `scd_core.serve.Server` in this process (one torch thread, as the
   page's decode worker): the bursts' seconds, and their CPU seconds (the page's process and
   its workers against this process's for the library's burst), one against the other.
4. memory: the server's resident memory after 10 warm-up requests and after 100 more from
   the same visitor, then after one request from each of 100 new visitors.

The page is `python app.py` of --app-dir, served in a process of its own (`bench.served`).
Needs playwright and Chromium (CHROMIUM or /usr/bin/chromium) for the first two.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import time

from bench import procs, served
from bench.stats import percentile

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TINY = served.GENERATE

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


def tiny_page(b, url: str, pace: float):
    pg = b.new_page(viewport={"width": 1400, "height": 1000})
    pg.goto(url)
    pg.wait_for_selector("#generate")
    pg.locator("#model input").click()
    pg.get_by_role("option", name=re.compile(r"^tiny ")).click()
    pg.wait_for_timeout(1500)
    for elem, value in (("pace", pace), ("prompt", "red apple")):
        box = pg.locator(f"#{elem} input, #{elem} textarea").first
        box.fill(str(value))
        box.press("Tab")
    return pg


def browser(app_dir, repeats: int) -> None:
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    with served.Page(app_dir) as page, sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=ARGS)
        pg = tiny_page(b, page.url, 0)
        rows = []
        for i in range(repeats + 1):
            box = pg.locator("#seed input")
            box.fill(str(i))
            box.press("Tab")
            pg.wait_for_timeout(300)
            pg.evaluate(WATCH)
            pg.wait_for_function("() => window.__picture", timeout=120_000)
            e2e = pg.evaluate("() => (window.__picture - window.__t0) / 1000")
            engine = float(re.search(r"(?:done\W+in|decoded in) ([0-9.]+) s", pg.locator("#status").inner_text()).group(1))
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


STOP = """() => {
  const status = document.querySelector('#status [data-testid=markdown]');
  const picture = () => document.querySelector('#live-image img')?.src || null;
  window.__clicked = picture();
  window.__stopped = null;
  new MutationObserver(() => {
    if (!window.__stopped && /stopped/i.test(status.innerText)) {
      window.__stopped = performance.now();
      window.__shown = picture();
    }
  }).observe(status, {subtree: true, childList: true, characterData: true});
  window.__t0 = performance.now();
  document.querySelector('#stop').click();
}"""


def stop_probe(app_dir, repeats: int, pace: float) -> None:
    """Stop in slow motion: from the click on Stop to the status saying "stopped"."""
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    with served.Page(app_dir) as page, sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=ARGS)
        pg = tiny_page(b, page.url, pace)
        waits, kept, late = [], 0, 0
        for i in range(repeats):
            pg.locator("#seed input").fill(str(i))
            pg.locator("#seed input").press("Tab")
            pg.wait_for_timeout(300)
            pg.locator("#generate").click()
            pg.wait_for_function("() => /decoding/.test(document.querySelector('#status').innerText)",
                                 timeout=120_000)
            pg.wait_for_timeout(1500)
            pg.evaluate(STOP)
            pg.wait_for_function("() => window.__stopped", timeout=30_000)
            pg.wait_for_timeout(max(1000, int(3000 * pace)))   # a picture sent after the stop would land now
            waits.append(pg.evaluate("() => (window.__stopped - window.__t0) / 1000"))
            same, moved = pg.evaluate("() => [document.querySelector('#live-image img')?.src === window.__shown,"
                                      " window.__shown !== window.__clicked]")
            kept += bool(same)
            late += bool(moved)
            print(f"  stop at pace {pace}: click to 'stopped' {waits[-1]:.3f} s, picture kept after it: "
                  f"{same}, a picture sent before the stop landed after the click: {moved}")
        print(f"stop at pace {pace}, {repeats} runs: click to 'stopped' median {statistics.median(waits):.3f} s, "
              f"max {max(waits):.3f} s; picture kept {kept}/{repeats}; a picture landed after the click {late}/{repeats}")
        b.close()


def served_alone(count: int) -> tuple[float, float, float, float]:
    """The same `count` requests submitted at once to one `scd_core.serve.Server` here (one
    torch thread, as the page's decode worker): p50, p95, the whole burst's seconds and the
    CPU seconds this process used for it."""
    import torch

    from scd_core.models import load_model
    from scd_core.serve import Server
    from scd_core.settings import Settings

    torch.set_num_threads(1)
    model, prompt = load_model(TINY["model"]), TINY["prompt"]
    settings = Settings(method=TINY["method"], window=TINY["window"], init=TINY["init"],
                        temperature=TINY["temperature"], top_k=TINY["top_k"], top_p=TINY["top_p"],
                        cfg_scale=TINY["cfg"])
    server = Server(model, max_batch=32)
    try:
        server.submit(prompt, 0, settings).result(timeout=600)          # warm-up
        t, cpu = time.perf_counter(), time.process_time()
        requests = [server.submit(prompt, seed, settings) for seed in range(count)]
        done = []
        for r in requests:
            r.result(timeout=600)
            done.append(time.perf_counter() - t)
        # results arrive in any order; a request's latency is when its result was there
        return statistics.median(done), percentile(done, 0.95), max(done), time.process_time() - cpu
    finally:
        server.close()


def visitors(app_dir, counts: list[int], bursts: int = 3) -> None:
    table = []
    with served.Page(app_dir) as page:
        served.request(served.visitor(page.url))               # warm-up: the model loads
        for count in counts:
            p50s, p95s, walls, cpus, failed = [], [], [], [], 0
            for k in range(bursts):
                b = served.burst(page, count)
                walls.append(b.wall_s)
                cpus.append(b.cpu_s["page"] + b.cpu_s["workers"])
                failed += len(b.failures)
                if b.latencies:
                    p50s.append(statistics.median(b.latencies))
                    p95s.append(percentile(b.latencies, 0.95))
                print(f"  burst {k + 1}: {count} visitors at once, {len(b.latencies)} served in "
                      f"{b.wall_s:.1f} s" + (f"; latency p50 {p50s[-1]:.2f} s, p95 {p95s[-1]:.2f} s"
                                             if b.latencies else "")
                      + "; CPU s: " + ", ".join(f"{k} {v:.2f}" for k, v in b.cpu_s.items())
                      + "".join(f"\n  refused: {r}" for r in b.failures))
            table.append((count, statistics.median(p50s) if p50s else math.nan,
                          statistics.median(p95s) if p95s else math.nan, statistics.median(walls),
                          statistics.median(cpus), failed))
    print("| visitors | page p50 | page p95 | page burst | scd_core.serve burst | page / serve | "
          "page CPU | scd_core.serve CPU | CPU page / serve | failed |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for count, p50, p95, wall, cpu, failed in table:
        _, _, alone, alone_cpu = served_alone(count)
        print(f"| {count} | {p50:.2f} s | {p95:.2f} s | {wall:.2f} s | {alone:.2f} s | {wall / alone:.2f}x | "
              f"{cpu:.2f} s | {alone_cpu:.2f} s | {cpu / alone_cpu:.2f}x | {failed} |", flush=True)


def memory(app_dir) -> None:
    rss_mb = lambda: procs.rss_bytes(page.pid) / 2**20                   # noqa: E731
    with served.Page(app_dir) as page:
        client = served.visitor(page.url)
        for seed in range(10):
            served.request(client, seed)
        before = rss_mb()
        for seed in range(10, 110):
            served.request(client, seed)
        after = rss_mb()
        print(f"server memory, one visitor: {before:.0f} MB after 10 requests, {after:.0f} MB "
              f"after 100 more ({100 * (after / before - 1):+.1f}%)")
        for seed in range(110, 210):
            served.request(served.visitor(page.url), seed)
        many = rss_mb()
        print(f"then 100 new visitors, one request each: {many:.0f} MB "
              f"({(many - after) / 100:.2f} MB per visitor, kept for the page's last sessions)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["browser", "stop", "visitors", "memory"])
    ap.add_argument("--repeats", type=int, default=7, help="timed browser runs (default 7)")
    ap.add_argument("--bursts", type=int, default=3, help="bursts per visitor count (default 3)")
    ap.add_argument("--visitors", default="1,16,64", help="visitor counts (default 1,16,64)")
    ap.add_argument("--stop-pace", type=float, default=0.5, help="slow motion of the stop probe (default 0.5)")
    served.app_dir_argument(ap)
    args = ap.parse_args(argv)
    for name in ("repeats", "bursts"):
        if getattr(args, name) < 1:
            ap.error(f"--{name}: expected an integer >= 1, got {getattr(args, name)}")
    try:
        counts = [int(c) for c in args.visitors.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        ap.error(f"--visitors: expected whole numbers >= 1 separated by commas, got {args.visitors!r}")
    if args.only in (None, "browser"):
        browser(args.app_dir, args.repeats)
    if args.only in (None, "stop"):
        stop_probe(args.app_dir, args.repeats, args.stop_pace)
    if args.only in (None, "visitors"):
        visitors(args.app_dir, counts, bursts=args.bursts)
    if args.only in (None, "memory"):
        memory(args.app_dir)
