"""One served page and its visitors: `python app.py` of a checkout in a process of its own, on a
free loopback port, with decode workers as deployed; gradio_client visitors (one session each)
pressing Generate; a burst of them at once. The page is driven through its served API only."""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench import ROOT, procs

# Generate's inputs by name: tiny at the page's defaults, full speed
GENERATE = dict(model="tiny", method="scd-mc", window=16, init="random", temperature=1.0, top_k=100, top_p=1.0,
                cfg=3.0, seed=0, prompt="red apple", pace=0.0, samples=8)
RACE = GENERATE | {"samples": 8, "pace": 0.5}
# a long job: a Lossless comparison of 1,024 samples
LOSSLESS = dict(model="tiny", prompt="red heart", method="scd-mc", window=16, init="random", temperature=1.0,
                top_k=100, top_p=1.0, cfg=3.0, seed=0, lossless_samples=1024)


def app_dir_argument(parser) -> None:
    """`--app-dir`: the checkout whose page is measured."""
    def checkout(text: str) -> Path:
        path = Path(text).resolve()
        if not (path / "app.py").is_file():
            raise argparse.ArgumentTypeError(f"no app.py in {path}")
        return path

    parser.add_argument("--app-dir", type=checkout, default=ROOT,
                        help="the checkout whose app.py is served (default this one; an older tree measures the page "
                             "as it was)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page:
    """`python app.py` of `app_dir` on a free loopback port, in a session of its own, its output
    in a log file; `env` adds to (or overrides) this process's environment, less the variables
    that start with one of `drop`. Returns once the page answers."""

    def __init__(self, app_dir: Path = ROOT, env: dict | None = None, start_timeout: float = 300.0,
                 drop: tuple[str, ...] = ()) -> None:
        app_dir = Path(app_dir).resolve()
        if not (app_dir / "app.py").is_file():
            raise ValueError(f"app_dir: no app.py in {app_dir}")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.log = Path(tempfile.mkdtemp(prefix="scd-page-")) / "page.log"
        full = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
        full.update(GRADIO_SERVER_PORT=str(self.port), GRADIO_ANALYTICS_ENABLED="False", SCD_DECODE="process",
                    PYTHONPATH=str(app_dir))
        full.update(env or {})
        started = time.perf_counter()
        with open(self.log, "w") as out:
            self.process = subprocess.Popen([sys.executable, "app.py"], cwd=app_dir, env=full, stdout=out,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.process.pid
        self.seen: set[int] = set()                      # every process of the page seen so far
        self._wait_up(started, start_timeout)
        self.start_s = time.perf_counter() - started

    def _wait_up(self, started: float, timeout: float) -> None:
        import httpx

        while True:
            try:
                if httpx.get(self.url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.process.poll() is not None or time.perf_counter() - started > timeout:
                self.close()
                raise RuntimeError(f"the page did not start: {self.log_tail(2000)}")
            time.sleep(0.5)

    def log_tail(self, chars: int = 600) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self, group: bool = False, timeout: float = 60) -> tuple[int, float]:
        """SIGTERM to the page (`group`: to its whole process group, its workers included, as a
        terminal's Ctrl-C or a container's stop may): its exit status and the seconds to exit."""
        t = time.perf_counter()
        if group:
            os.killpg(self.pid, signal.SIGTERM)
        else:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=timeout)
        return code, time.perf_counter() - t

    def processes(self) -> list[int]:
        """The processes the page started (its decode workers, ...), now."""
        now = procs.descendants(self.pid)
        self.seen.update(now)
        return now

    def close(self) -> None:
        """Kill the page, and any process of it still running (one left behind included)."""
        self.processes()
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pid in self.seen:
            if procs.alive(pid):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> "Page":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def visitor(url: str):
    """A gradio_client visitor (one session) that fetches only its final picture, as a browser
    shows it (`request`): left to download every file of every result itself, gradio_client cost
    the measuring process about 0.6 s of CPU a request on 2 cores, time the page's server lost."""
    from gradio_client import Client

    return Client(url, verbose=False, download_files=False)


PICTURES = threading.local()         # each visitor thread's HTTP connection for its pictures


def request(client, seed: int = 0, inputs: dict = GENERATE) -> float:
    """Seconds from pressing Generate to the final picture fetched."""
    import httpx

    t = time.perf_counter()
    out = client.submit(**inputs | {"seed": seed}, api_name="/generate").result(timeout=600)
    picture = out[0]
    if not isinstance(picture, dict) or not picture.get("url"):
        raise RuntimeError(f"no final picture in the result: {str(picture)[:80]}")
    if getattr(PICTURES, "http", None) is None:
        PICTURES.http = httpx.Client(timeout=60)
    PICTURES.http.get(picture["url"]).raise_for_status()
    return time.perf_counter() - t


@dataclass
class Burst:
    latencies: list[float]           # seconds to the final picture, of the visitors served, in order
    failures: list[str]              # what went wrong for the others (a short repr each)
    wall_s: float                    # the whole burst
    cpu_s: dict[str, float]          # CPU seconds the burst took: the page, its workers, the visitors


def burst(page: Page, count: int, inputs: dict = GENERATE) -> Burst:
    """`count` visitors press Generate at once (seeds 0, 1, ...), each in a thread of its own. The
    visitors are made first: a client's first requests (the page's config and API) are not
    part of a press."""
    clients = [visitor(page.url) for _ in range(count)]
    results: list = []

    def visit(client, seed: int) -> None:
        try:
            results.append(request(client, seed, inputs))
        except Exception as exc:                               # noqa: BLE001: counted
            results.append(repr(exc)[:120])

    threads = [threading.Thread(target=visit, args=(c, i)) for i, c in enumerate(clients)]
    used, t = procs.cpu_seconds(page.pid), time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t
    cpu = {k: v - used[k] for k, v in procs.cpu_seconds(page.pid).items()}
    return Burst(sorted(r for r in results if isinstance(r, float)), [r for r in results if not isinstance(r, float)],
                 wall, cpu)
