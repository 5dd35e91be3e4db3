"""The served page's life as a Space lives it: start `python app.py` on a loopback port
(decode workers: SCD_DECODE=process), a first Generate on tiny through gradio_client and a
second (warm), each worker's memory; then visitors in flight (two Generates in slow motion,
a race in slow motion and a Lossless comparison, one running and one waiting, each its own
client) and SIGTERM (to the page,
or with --group to its whole process group): the exit status, the seconds to exit, what each
visitor in flight was told last, whether every one was told that the page is restarting, and
whether any worker outlived the page. `--idle`: the same page with a worker for each of four
models and nothing running, then SIGTERM: the seconds to exit. Prints one JSON line per trial.

    python scripts/page_lifecycle.py                    # this checkout, one trial
    python scripts/page_lifecycle.py --trials 5         # five pages, one after the other
    python scripts/page_lifecycle.py --idle             # the idle stop
    python scripts/page_lifecycle.py --dir /tmp/other   # another checkout's app.py, same Python
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
from gradio_client import Client

TINY = dict(model="tiny", prompt="red heart", method="scd-mc", window=16, top_k=100, cfg=3.0, seed=1,
            pace=0.0)
LOSSLESS = dict(model="tiny", prompt="red heart", method="scd-mc", window=16, init="random", temperature=1.0,
                top_k=100, top_p=1.0, cfg=3.0, seed=0, lossless_samples=1024)
RESTARTING = "the page is restarting"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    """The processes under `pid`, its children and theirs (Linux /proc): the decode workers
    are forked by a server process the page starts."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found, level = [], [pid]
    while level:
        level = [p for p, parent in parents.items() if parent in level]
        found += level
    return found


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def generate(client: Client, **override) -> tuple[float, str]:
    t = time.perf_counter()
    job = client.submit(**(TINY | override), api_name="/generate")
    job.result(timeout=300)
    return time.perf_counter() - t, job.outputs()[-1][1]


def start_page(checkout: str, start_timeout: float) -> tuple[subprocess.Popen, str, float]:
    """`python app.py` of `checkout` on a free loopback port, in its own process group; its URL
    and the seconds until it answered."""
    port = free_port()
    env = os.environ | {"SCD_DECODE": "process", "GRADIO_SERVER_PORT": str(port), "SCD_THREADS": "1",
                        "GRADIO_ANALYTICS_ENABLED": "False"}
    started = time.perf_counter()
    page = subprocess.Popen([sys.executable, "app.py"], cwd=checkout, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return page, url, time.perf_counter() - started
        except httpx.HTTPError:
            pass
        if page.poll() is not None or time.perf_counter() - started > start_timeout:
            page.kill()
            raise RuntimeError(f"the page did not start: {page.stderr.read()[-2000:]}")
        time.sleep(0.2)


def last_status(job, index: int) -> str | None:
    said = [o[index] for o in job.outputs() if len(o) > index and isinstance(o[index], str) and o[index]]
    return said[-1] if said else None


def stop(page: subprocess.Popen, group: bool) -> tuple[int, float]:
    """SIGTERM (to the page's process group with `group`, as a terminal's Ctrl-C or a
    container's stop may do: the workers get it too); its exit status and seconds to exit."""
    t = time.perf_counter()
    if group:
        os.killpg(page.pid, signal.SIGTERM)
    else:
        page.send_signal(signal.SIGTERM)
    return page.wait(timeout=60), round(time.perf_counter() - t, 2)


def wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def measure(checkout: str = ".", start_timeout: float = 240.0, group: bool = False, firsts: bool = True) -> dict:
    """Everything the module docstring says but --idle, by name (`group`: SIGTERM to the page's
    whole process group, its workers included, not to the page alone; `firsts`: the first and
    second Generate timed)."""
    page, url, start_s = start_page(checkout, start_timeout)
    workers: list[int] = []
    try:
        out = {"page_start_s": round(start_s, 1), "page_rss_mb": round(rss_mb(page.pid))}
        if firsts:
            client = Client(url, verbose=False)
            first, _ = generate(client)                  # on tiny: the page started only its first model's worker
            warm, _ = generate(client, seed=2)
            out["first_generate_s"], out["warm_generate_s"] = round(first, 2), round(warm, 2)
        visitors = {f"generate-{i}": (Client(url, verbose=False), "/generate", TINY | {"seed": 3 + i, "pace": 2.0}, 1)
                    for i in range(2)}
        visitors["race"] = (Client(url, verbose=False), "/race", TINY | {"samples": 2, "pace": 0.5}, 0)
        visitors["lossless"] = (Client(url, verbose=False), "/lossless", LOSSLESS, 0)
        jobs = {name: (c.submit(**inputs, api_name=api), index) for name, (c, api, inputs, index) in visitors.items()}
        out["in_flight_seen"] = wait_for(lambda: all(job.status().code.name in ("IN_QUEUE", "PROCESSING", "ITERATING", "PROGRESS")
                                                     for job, _ in jobs.values())
                                         and last_status(*jobs["generate-0"]) and last_status(*jobs["generate-1"])
                                         and (last_status(*jobs["race"]) or last_status(*jobs["lossless"])), 120)
        out["workers"] = [{"pid": w, "rss_mb": round(rss_mb(w))} for w in children(page.pid)]
        workers = sorted(set(workers) | set(children(page.pid)))
        out["sigterm_exit_code"], out["sigterm_exit_s"] = stop(page, group)
        out["page_log_tail"] = page.stderr.read()[-600:] if not os.environ.get("PAGE_LOG") else \
            open(os.environ["PAGE_LOG"], "w").write(page.stderr.read())
        time.sleep(1.0)
        out["orphans"] = [w for w in workers if alive(w)]
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
    finally:
        if page.poll() is None:
            page.kill()
        for w in workers:
            if alive(w):
                os.kill(w, signal.SIGKILL)


def idle(checkout: str = ".", start_timeout: float = 240.0,
         models: tuple[str, ...] = ("texture", "tiny", "tiny-64", "tiny-video")) -> dict:
    """A page with a worker per model and nothing running, then SIGTERM: its seconds to exit."""
    page, url, start_s = start_page(checkout, start_timeout)
    workers: list[int] = []
    try:
        client = Client(url, verbose=False)
        threads = [threading.Thread(target=generate, args=(client,), kwargs={"model": m, "prompt": "a red ball"})
                   for m in models]
        for t in threads:                                # one after the other: one job per visitor
            t.start()
            t.join()
        workers = children(page.pid)
        time.sleep(1.0)
        code, seconds = stop(page, False)
        time.sleep(1.0)
        return {"page_start_s": round(start_s, 1), "workers": len(workers), "sigterm_exit_code": code,
                "sigterm_exit_s": seconds, "orphans": [w for w in workers if alive(w)],
                "page_log_tail": page.stderr.read()[-400:]}
    finally:
        if page.poll() is None:
            page.kill()
        for w in workers:
            if alive(w):
                os.kill(w, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=".", help="the checkout whose app.py runs (default: this one)")
    parser.add_argument("--start-timeout", type=float, default=240.0)
    parser.add_argument("--group", action="store_true", help="SIGTERM to the whole process group, workers included")
    parser.add_argument("--idle", action="store_true", help="the idle stop: a worker per model, nothing running")
    parser.add_argument("--trials", type=int, default=1)
    args = parser.parse_args()
    for _ in range(args.trials):
        out = idle(args.dir, args.start_timeout) if args.idle else measure(args.dir, args.start_timeout, args.group)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
