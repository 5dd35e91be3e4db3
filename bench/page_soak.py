"""The served page over many runs: do its files, memory, threads and descriptors stay flat?

    python -m bench page-soak                       # 500 runs
    python -m bench page-soak --runs 100 --every 20
    python -m bench page-soak --bursts 3 --visitors 64 --runs 200   # bursts first, then the soak
    python -m bench page-soak --app-dir /path/to/another/checkout

`python app.py` (the checkout measured) in a process of its own (`bench.served`), with a
temp folder of its own (TMPDIR and GRADIO_TEMP_DIR: every file the page and Gradio write
lands there) and SCD_FILES_S=--files-s (files older than that are swept: the page's default,
half an hour, would show nothing swept in a short soak). A few visitors take turns (a new one every 25 runs, as sessions come and go):
mostly Generate on tiny at full speed, every 10th a video Generate on tiny-video (it writes
its clip as MP4 and GIF), every 10th an export, every 25th a Lossless comparison cancelled
after a second. Every --every runs: the page's resident memory, threads, open descriptors,
and the files (count, MB) under its temp folder. Then SIGTERM: the exit status and what is
left in the temp folder. With --bursts, first that many bursts of --visitors visitors pressing
Generate at once (`bench.served.burst`), a sample after each; the last line then
says the page's memory at the end against after the first burst (`end_over_first_burst`), and
the same after --settle seconds at both ends, once the page has given back what it freed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench import procs, served
from bench.served import GENERATE, LOSSLESS, visitor
from demo import heap

VIDEO = GENERATE | {"model": "tiny-video", "window": 32, "init": "repeat-frame", "prompt": "a red ball"}
CANCELLED = LOSSLESS | {"lossless_samples": 256}


def files(folder: Path) -> tuple[int, float]:
    count, size = 0, 0
    for root, _, names in os.walk(folder):
        for n in names:
            try:
                size += os.path.getsize(os.path.join(root, n))
                count += 1
            except OSError:
                pass
    return count, size / 1e6


def sample(pid: int, folder: Path, runs: int, t0: float) -> dict:
    st = procs.status(pid)
    st = {"rss_mb": round(st.get("VmRSS", 0) / 1024), "threads": st.get("Threads", 0)}
    count, mb = files(folder)
    where = {entry.name.split("-")[0] if entry.name.startswith("scd-") is False else entry.name.rsplit("-", 1)[0]:
             files(entry)[0] for entry in folder.iterdir() if entry.is_dir()}
    return {"runs": runs, "s": round(time.perf_counter() - t0), **st, "fds": procs.descriptors(pid),
            "files": count, "files_mb": round(mb, 1), "by_folder": where}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--every", type=int, default=50, help="runs between two samples (default 50)")
    ap.add_argument("--bursts", type=int, default=0, help="bursts of --visitors at once before the soak (default 0)")
    ap.add_argument("--visitors", type=int, default=64)
    ap.add_argument("--settle", type=float, default=heap.EVERY_S + 5,
                    help="with --bursts, seconds to wait after the first burst and at the end before a second sample: "
                         f"one return of freed memory (demo/heap.py, every {heap.EVERY_S:g} s) "
                         f"(default {heap.EVERY_S + 5:g}; 0: none)")
    served.app_dir_argument(ap)
    ap.add_argument("--files-s", type=int, default=60,
                    help="the page's SCD_FILES_S: files kept this long (default 60, to see the sweep in a short soak)")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.every < 1 or args.bursts < 0 or args.visitors < 1:
        ap.error("--runs, --every and --visitors: whole numbers >= 1; --bursts >= 0")
    folder = Path(tempfile.mkdtemp(prefix="scd-soak-"))
    page = served.Page(args.app_dir, {"TMPDIR": str(folder), "GRADIO_TEMP_DIR": str(folder / "gradio"),
                                      "SCD_FILES_S": str(args.files_s)})
    t0, samples, failed = time.perf_counter(), [], []
    settled = []                    # after the first burst and at the end, once freed memory is given back

    def settle(runs: int) -> None:
        time.sleep(args.settle)
        settled.append(sample(page.pid, folder, runs, t0) | {"settled": True})
        print(json.dumps(settled[-1]), flush=True)

    try:
        client = visitor(page.url)
        client.submit(**GENERATE, api_name="/generate").result(timeout=600)    # warm-up: the worker starts
        samples.append(sample(page.pid, folder, 0, t0))
        print(json.dumps(samples[-1]), flush=True)
        bursts = []
        for b in range(args.bursts):
            crowd = served.burst(page, args.visitors)
            failed += [f"burst {b}: {r}" for r in crowd.failures]
            bursts.append(sample(page.pid, folder, 0, t0) | {"burst": b + 1, "served": len(crowd.latencies)})
            print(json.dumps(bursts[-1]), flush=True)
            if b == 0 and args.settle:
                settle(0)
        for run in range(1, args.runs + 1):
            if run % 25 == 0:
                client = visitor(page.url)                             # a new visitor
            try:
                if run % 25 == 12:
                    job = client.submit(**CANCELLED, api_name="/lossless")
                    time.sleep(1.0)
                    job.cancel()
                elif run % 10 == 5:
                    client.submit(**VIDEO | {"seed": run}, api_name="/generate").result(timeout=600)
                elif run % 10 == 9:
                    client.submit(api_name="/export").result(timeout=600)
                else:
                    client.submit(**GENERATE | {"seed": run}, api_name="/generate").result(timeout=600)
            except Exception as exc:                                   # noqa: BLE001: counted
                failed.append(f"run {run}: {repr(exc)[:120]}")
            if run % args.every == 0:
                samples.append(sample(page.pid, folder, run, t0))
                print(json.dumps(samples[-1]), flush=True)
        if bursts:
            print(json.dumps({"after_first_burst_mb": bursts[0]["rss_mb"], "end_mb": samples[-1]["rss_mb"],
                              "end_over_first_burst": round(samples[-1]["rss_mb"] / bursts[0]["rss_mb"], 2)}))
            if args.settle:
                settle(args.runs)
                print(json.dumps({"settled_after_first_burst_mb": settled[0]["rss_mb"], "settled_end_mb": settled[-1]["rss_mb"],
                                  "settled_end_over_first_burst": round(settled[-1]["rss_mb"] / settled[0]["rss_mb"], 2)}))
        code, seconds = page.stop()
        left = files(folder)
        print(json.dumps({"sigterm_exit_code": code, "exit_s": round(seconds, 2),
                          "files_left": left[0], "failed": len(failed)}))
        for f in failed[:10]:
            print("  " + f)
    finally:
        page.close()
        shutil.rmtree(folder, ignore_errors=True)
