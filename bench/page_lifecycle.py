"""The served page's life as a Space lives it: start `python app.py` on a loopback port
(decode workers, `bench.served`), one Generate on tiny through gradio_client (its worker
starts), a second (warm), each worker's memory, then a slow Generate in flight and SIGTERM
(to the page, or with --group to its whole process group): the exit status, the seconds to
exit, what the visitor in flight was told last and whether any worker outlived the page.
Prints one JSON line.

    python -m bench page-lifecycle                          # this checkout
    python -m bench page-lifecycle --app-dir /tmp/other     # another checkout's app.py, same Python
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench import ROOT, procs, served

TINY = served.GENERATE | {"prompt": "red heart", "seed": 1}


def generate(client, **override) -> tuple[float, str]:
    t = time.perf_counter()
    job = client.submit(**(TINY | override), api_name="/generate")
    job.result(timeout=300)
    return time.perf_counter() - t, job.outputs()[-1][1]


def measure(app_dir: Path = ROOT, start_timeout: float = 240.0, group: bool = False) -> dict:
    """Everything the module docstring says, by name (`group`: SIGTERM to the page's whole
    process group, its workers included, not to the page alone)."""
    with served.Page(app_dir, {"SCD_THREADS": "1"}, start_timeout) as page:
        out = {"page_start_s": round(page.start_s, 1), "page_rss_mb": round(procs.rss_bytes(page.pid) / 2**20)}
        client = served.visitor(page.url)
        first, _ = generate(client)                      # its worker starts, loads tiny
        warm, _ = generate(client, seed=2)
        out["first_generate_s"], out["warm_generate_s"] = round(first, 2), round(warm, 2)
        workers = procs.spawned_workers(page.pid)
        out["workers"] = [{"pid": w, "rss_mb": round(procs.rss_bytes(w) / 2**20)} for w in sorted(workers)]
        started = page.processes()                       # the workers and any helper process
        job = client.submit(**(TINY | {"seed": 3, "pace": 0.5}), api_name="/generate")
        deadline = time.time() + 60
        while not any("decoding" in str(o[1]) for o in job.outputs() if len(o) > 1) and time.time() < deadline:
            time.sleep(0.05)
        code, seconds = page.stop(group)
        out["sigterm_exit_code"], out["sigterm_exit_s"] = code, round(seconds, 2)
        out["page_log_tail"] = page.log_tail()
        time.sleep(1.0)
        out["orphans"] = [p for p in sorted(started) if procs.alive(p)]
        try:
            job.result(timeout=10)
        except Exception as exc:                        # noqa: BLE001: what the visitor got
            out["in_flight_error"] = str(exc)[:200]
        statuses = [o[1] for o in job.outputs() if len(o) > 1 and isinstance(o[1], str) and o[1]]
        out["in_flight_last_status"] = statuses[-1] if statuses else None
        return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    served.app_dir_argument(parser)
    parser.add_argument("--start-timeout", type=float, default=240.0)
    parser.add_argument("--group", action="store_true", help="SIGTERM to the whole process group, workers included")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.app_dir, args.start_timeout, args.group)))
