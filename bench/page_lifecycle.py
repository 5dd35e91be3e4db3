"""The served page's life as a Space lives it: start `python app.py` on a loopback port
(decode workers, `bench.served`), a first Generate on tiny through gradio_client and a second
(warm), each worker's memory; then visitors in flight (two Generates in slow motion, a race
in slow motion and a Lossless comparison, one running and one waiting, each its own client)
and SIGTERM (to the page, or with --group to its whole process group): the exit status, the
seconds to exit, what each visitor in flight was told last, whether every one was told that
the page is restarting, and whether any worker outlived the page. `--idle`: the same page
with a worker for each of four models and nothing running, then SIGTERM: the seconds to
exit. Prints one JSON line per trial.

    python -m bench page-lifecycle                          # this checkout, one trial
    python -m bench page-lifecycle --trials 5               # five pages, one after the other
    python -m bench page-lifecycle --idle                   # the idle stop
    python -m bench page-lifecycle --app-dir /tmp/other     # another checkout's app.py, same Python
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench import ROOT, procs, served

TINY = served.GENERATE | {"prompt": "red heart", "seed": 1}
LOSSLESS = served.LOSSLESS                     # 1,024 samples: still running at the stop
RESTARTING = "the page is restarting"


def generate(client, **override) -> tuple[float, str]:
    t = time.perf_counter()
    job = client.submit(**(TINY | override), api_name="/generate")
    job.result(timeout=300)
    return time.perf_counter() - t, job.outputs()[-1][1]


def last_status(job, index: int) -> str | None:
    said = [o[index] for o in job.outputs() if len(o) > index and isinstance(o[index], str) and o[index]]
    return said[-1] if said else None


def wait_for(condition, timeout: float, step: float = 0.02) -> bool:
    """Whether `condition()` came true within `timeout` seconds, asked every `step`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def measure(app_dir: Path = ROOT, start_timeout: float = 240.0, group: bool = False, firsts: bool = True) -> dict:
    """Everything the module docstring says but --idle, by name (`group`: SIGTERM to the page's
    whole process group, its workers included, not to the page alone; `firsts`: the first and
    second Generate timed)."""
    with served.Page(app_dir, {"SCD_THREADS": "1"}, start_timeout) as page:
        out = {"page_start_s": round(page.start_s, 1), "page_rss_mb": round(procs.rss_bytes(page.pid) / 2**20)}
        if firsts:
            client = served.visitor(page.url)
            first, _ = generate(client)                  # on tiny: the page started only its first model's worker
            warm, _ = generate(client, seed=2)
            out["first_generate_s"], out["warm_generate_s"] = round(first, 2), round(warm, 2)
        visitors = {f"generate-{i}": (served.visitor(page.url), "/generate", TINY | {"seed": 3 + i, "pace": 2.0}, 1)
                    for i in range(2)}
        visitors["race"] = (served.visitor(page.url), "/race", TINY | {"samples": 2, "pace": 0.5}, 0)
        visitors["lossless"] = (served.visitor(page.url), "/lossless", LOSSLESS, 0)
        jobs = {name: (c.submit(**inputs, api_name=api), index) for name, (c, api, inputs, index) in visitors.items()}
        out["in_flight_seen"] = wait_for(lambda: all(job.status().code.name in ("IN_QUEUE", "PROCESSING", "ITERATING", "PROGRESS")
                                                     for job, _ in jobs.values())
                                         and last_status(*jobs["generate-0"]) and last_status(*jobs["generate-1"])
                                         and (last_status(*jobs["race"]) or last_status(*jobs["lossless"])), 120)
        workers = procs.spawned_workers(page.pid)
        out["workers"] = [{"pid": w, "rss_mb": round(procs.rss_bytes(w) / 2**20)} for w in sorted(workers)]
        started = page.processes()                       # the workers and any helper process
        code, seconds = page.stop(group)
        out["sigterm_exit_code"], out["sigterm_exit_s"] = code, round(seconds, 2)
        out["page_log_tail"] = page.log_tail()
        time.sleep(1.0)
        out["orphans"] = [p for p in sorted(started) if procs.alive(p)]
        told = {}
        for name, (job, index) in jobs.items():
            try:
                job.result(timeout=10)
            except Exception as exc:                    # noqa: BLE001: what the visitor got
                out.setdefault("in_flight_errors", {})[name] = str(exc)[:200]
            told[name] = last_status(job, index)
        out["in_flight_last_status"] = told
        out["in_flight_told"] = sum(RESTARTING in (said or "") for said in told.values())
        out["in_flight"] = len(told)
        return out


def idle(app_dir: Path = ROOT, start_timeout: float = 240.0,
         models: tuple[str, ...] = ("texture", "tiny", "tiny-64", "tiny-video")) -> dict:
    """A page with a worker per model and nothing running, then SIGTERM: its seconds to exit."""
    with served.Page(app_dir, {"SCD_THREADS": "1"}, start_timeout) as page:
        client = served.visitor(page.url)
        for m in models:                                 # one after the other: one job per visitor
            generate(client, model=m, prompt="a red ball")
        workers = procs.spawned_workers(page.pid)
        started = page.processes()
        time.sleep(1.0)
        code, seconds = page.stop(False)
        time.sleep(1.0)
        return {"page_start_s": round(page.start_s, 1), "workers": len(workers), "sigterm_exit_code": code,
                "sigterm_exit_s": round(seconds, 2), "orphans": [p for p in sorted(started) if procs.alive(p)],
                "page_log_tail": page.log_tail(400)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    served.app_dir_argument(parser)
    parser.add_argument("--start-timeout", type=float, default=240.0)
    parser.add_argument("--group", action="store_true", help="SIGTERM to the whole process group, workers included")
    parser.add_argument("--idle", action="store_true", help="the idle stop: a worker per model, nothing running")
    parser.add_argument("--trials", type=int, default=1)
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error(f"--trials: expected an integer >= 1, got {args.trials}")
    for _ in range(args.trials):
        out = idle(args.app_dir, args.start_timeout) if args.idle else \
            measure(args.app_dir, args.start_timeout, args.group)
        print(json.dumps(out), flush=True)
