"""The served page's life as a Space lives it: start `python app.py` on a loopback port
(decode workers: SCD_DECODE=process), one Generate on tiny through gradio_client (its worker
starts), a second (warm), each worker's memory, then a slow Generate in flight and SIGTERM
(to the page, or with --group to its whole process group):
the exit status, the seconds to exit, what the visitor in flight was told last and whether
any worker outlived the page. Prints one JSON line.

    python scripts/page_lifecycle.py                    # this checkout
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
import time

import httpx
from gradio_client import Client

TINY = dict(model="tiny", prompt="red heart", method="scd-mc", window=16, top_k=100, cfg=3.0, seed=1,
            pace=0.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
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


def measure(checkout: str = ".", start_timeout: float = 240.0, group: bool = False) -> dict:
    """Everything the module docstring says, by name (`group`: SIGTERM to the page's whole
    process group, its workers included, not to the page alone)."""
    port = free_port()
    env = os.environ | {"SCD_DECODE": "process", "GRADIO_SERVER_PORT": str(port), "SCD_THREADS": "1",
                        "GRADIO_ANALYTICS_ENABLED": "False"}
    started = time.perf_counter()
    page = subprocess.Popen([sys.executable, "app.py"], cwd=checkout, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)   # its own process group
    url = f"http://127.0.0.1:{port}/"
    workers: list[int] = []
    try:
        while True:
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if page.poll() is not None or time.perf_counter() - started > start_timeout:
                raise RuntimeError(f"the page did not start: {page.stderr.read()[-2000:]}")
            time.sleep(0.5)
        out = {"page_start_s": round(time.perf_counter() - started, 1), "page_rss_mb": round(rss_mb(page.pid))}
        client = Client(url, verbose=False)
        first, _ = generate(client)                      # its worker starts, loads tiny
        warm, _ = generate(client, seed=2)
        out["first_generate_s"], out["warm_generate_s"] = round(first, 2), round(warm, 2)
        workers = children(page.pid)
        out["workers"] = [{"pid": w, "rss_mb": round(rss_mb(w))} for w in workers]
        job = client.submit(**(TINY | {"seed": 3, "pace": 0.5}), api_name="/generate")
        deadline = time.time() + 60
        while not any("decoding" in str(o[1]) for o in job.outputs() if len(o) > 1) and time.time() < deadline:
            time.sleep(0.05)
        t = time.perf_counter()
        if group:                                        # as a terminal's Ctrl-C or a container's stop may
            os.killpg(page.pid, signal.SIGTERM)          # do: the workers get it too
        else:
            page.send_signal(signal.SIGTERM)
        out["sigterm_exit_code"] = page.wait(timeout=60)
        out["sigterm_exit_s"] = round(time.perf_counter() - t, 2)
        out["page_log_tail"] = page.stderr.read()[-600:]
        time.sleep(1.0)
        out["orphans"] = [w for w in workers if alive(w)]
        try:
            job.result(timeout=10)
        except Exception as exc:                        # noqa: BLE001: what the visitor got
            out["in_flight_error"] = str(exc)[:200]
        statuses = [o[1] for o in job.outputs() if len(o) > 1 and isinstance(o[1], str) and o[1]]
        out["in_flight_last_status"] = statuses[-1] if statuses else None
        return out
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
    args = parser.parse_args()
    print(json.dumps(measure(args.dir, args.start_timeout, args.group)))


if __name__ == "__main__":
    main()
