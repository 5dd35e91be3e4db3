"""The served page under load, with and without one abusive client.

    python -m bench page-load                          # 64 visitors, 3 bursts, each way
    python -m bench page-load --visitors 16 --bursts 2
    python -m bench page-load --app-dir /path/to/another/checkout

`python app.py` (the checkout measured) in a process of its own, decode workers as deployed
(`bench.served`). Each burst: --visitors gradio_client visitors press Generate at once (tiny,
the page's defaults at full speed, one seed each) and fetch their final picture.
First --bursts bursts alone, then --bursts more while one abusive client, with one session,
does what one client can: it submits Lossless comparisons of 1,024 samples and races again
and again, several at once, and cancels each a moment later. Printed per way: the visitors
served and failed, their latency p50 and p95 (nearest rank, over every burst), the page's
memory and threads after, and what the abuser got (started, refused before the queue).
Then a flood (--flood, default 70): one client submits that many Lossless comparisons at once
and cancels them all 2 s later; printed: the page's memory and threads before and 10 s
after, and one other visitor's Generate alone before it and while it is cancelled.
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time

from bench import procs, served
from bench.served import LOSSLESS, RACE, request, visitor
from bench.stats import percentile


def status(pid: int) -> dict[str, float]:
    """The page's resident memory (MB) and threads."""
    st = procs.status(pid)
    return {"rss_mb": st.get("VmRSS", 0) / 1024, "threads": st.get("Threads", 0)}


class Abuser:
    """One client (one session) that keeps submitting long jobs, several at once, and
    cancelling them (what a closed tab, or a script, does), until `stop`."""

    def __init__(self, url: str) -> None:
        self.client, self.stop = visitor(url), threading.Event()
        self.started = self.refused = self.other = 0
        self.others: list[str] = []                    # what the other answers said, the first few
        self.thread = threading.Thread(target=self.run, name="abuser", daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            jobs = [self.client.submit(**LOSSLESS, api_name="/lossless") for _ in range(3)] + \
                [self.client.submit(**RACE, api_name="/race")]
            time.sleep(0.5)
            for job in jobs:
                job.cancel()
                try:
                    job.result(timeout=10)
                    self.started += 1
                except Exception as exc:                   # noqa: BLE001: counted
                    if "still waiting in the queue or running" in str(exc):
                        self.refused += 1
                    elif ("Cancelled" in type(exc).__name__ or "cancel" in str(exc).lower()
                          or "Response received: {}" in str(exc)):   # a running job, cancelled: it ends with no data
                        self.started += 1
                    else:
                        self.other += 1
                        if len(self.others) < 3:
                            self.others.append(f"{type(exc).__name__}: {str(exc)[:100]}")


def flood(page: served.Page, count: int) -> dict:
    """One client's `count` Lossless comparisons at once, cancelled 2 s later (see the docstring)."""
    other = visitor(page.url)
    before = status(page.pid) | {"generate_s": request(other, 1000)}
    abuser = visitor(page.url)
    jobs = [abuser.submit(**LOSSLESS, api_name="/lossless") for _ in range(count)]
    time.sleep(2.0)
    for job in jobs:
        job.cancel()
    during = request(other, 1001)
    refused = 0
    for job in jobs:
        try:
            job.result(timeout=30)
        except Exception as exc:                           # noqa: BLE001: counted
            refused += "still waiting in the queue or running" in str(exc)
    time.sleep(10.0)
    return {"before": before, "after": status(page.pid), "generate_during_s": during, "refused": refused}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--visitors", type=int, default=64)
    ap.add_argument("--bursts", type=int, default=3)
    served.app_dir_argument(ap)
    ap.add_argument("--flood", type=int, default=70, help="Lossless comparisons one client submits at once (0: none)")
    args = ap.parse_args(argv)
    if args.visitors < 1 or args.bursts < 1:
        ap.error("--visitors and --bursts: whole numbers >= 1")
    rows = []
    with served.Page(args.app_dir) as page:
        request(visitor(page.url))                             # warm-up: the worker starts
        for abusive in (False, True):
            abuser = Abuser(page.url) if abusive else None
            if abuser:
                abuser.thread.start()
                time.sleep(2.0)
            bursts = [served.burst(page, args.visitors) for _ in range(args.bursts)]
            latencies = sorted(t for b in bursts for t in b.latencies)
            failures = [f for b in bursts for f in b.failures]
            if abuser:
                abuser.stop.set()
                abuser.thread.join(60)
            time.sleep(2.0)
            rows.append((abusive, latencies, failures, status(page.pid), abuser))
            for said in abuser.others if abuser else []:
                print(f"  the abuser also got: {said}")
            for f in sorted(set(failures))[:5]:
                print(f"  failed: {f}")
        flooded = flood(page, args.flood) if args.flood else None
    print(f"{args.visitors} visitors at once, {args.bursts} bursts each way (tiny, full speed)")
    print("| abuser | served | failed | p50 | p95 | page RSS after | page threads after | abuser: started, refused, other |")
    print("|---|---|---|---|---|---|---|---|")
    for abusive, latencies, failures, st, abuser in rows:
        p50 = statistics.median(latencies) if latencies else float("nan")
        p95 = percentile(latencies, 0.95)
        said = f"{abuser.started}, {abuser.refused}, {abuser.other}" if abuser else ""
        print(f"| {'yes' if abusive else 'no'} | {len(latencies)} | {len(failures)} | {p50:.2f} s | {p95:.2f} s | "
              f"{st.get('rss_mb', 0):.0f} MB | {st.get('threads', 0)} | {said} |", flush=True)
    if flooded:
        b, a = flooded["before"], flooded["after"]
        print(f"flood of {args.flood} Lossless comparisons from one client, cancelled: {flooded['refused']} refused "
              f"before the queue; page {b['rss_mb']:.0f} MB, {b['threads']} threads before, {a['rss_mb']:.0f} MB, "
              f"{a['threads']} threads 10 s after; another visitor's Generate {b['generate_s']:.2f} s alone, "
              f"{flooded['generate_during_s']:.2f} s during")
