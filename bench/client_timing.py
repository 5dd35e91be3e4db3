"""What a decode client costs: the same bursts of requests through `scd_core.serve.Server`
directly, through `LocalClient` (the same server, plus the client's row bookkeeping) and
through `ProcessClient` (the server in a worker process, records sent over a pipe).

    python -m bench client-timing                      # tiny, bursts of 1, 16 and 64: ~1 min idle
    python -m bench client-timing --bursts 1,16 --threads 1

Each burst submits C requests at once (the model's example prompts, seeds 0, 1, ...) at the
page's defaults (scd-mc, window 16, top-k 100, CFG 3 on tiny); one thread per request reads
its records as the page does. A burst of fewer than 8 requests is repeated until 8 have run.
Latency is from submission to the row's last record. Cancel: with 16 rows running, one row
is cancelled after its second record; the time from `cancel` to that row's last record, the
median of 5 tries. The worker's start (loading the model) is timed once and left out of the rest.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import torch

import scd_core
from bench.stats import percentile
from scd_core.local import LocalClient
from scd_core.protocols import optional
from scd_core.serve import Server
from scd_core.settings import Settings
from scd_core.workers import ProcessClient


class ServerBackend:
    """`Server` used directly, shaped like a client for the measurements."""

    def __init__(self, model) -> None:
        self.server = Server(model, max_batch=32)

    def submit(self, model: str, prompt: str, seed: int, settings: Settings):
        return self.server.submit(prompt, seed, settings)

    def records(self, request):
        return iter(request)

    def cancel(self, request) -> None:
        request.cancel()

    def close(self) -> None:
        self.server.close()


def burst(backend, name: str, prompts: list[str], settings: Settings, size: int, first_seed: int):
    """Submit `size` requests at once; (seconds for all, latency of each)."""
    latencies, lock = [], threading.Lock()

    def read(request, submitted: float) -> None:
        for _ in backend.records(request):
            pass
        with lock:
            latencies.append(time.perf_counter() - submitted)

    started = time.perf_counter()
    readers = []
    for i in range(size):
        submitted = time.perf_counter()
        request = backend.submit(name, prompts[i % len(prompts)], first_seed + i, settings)
        readers.append(threading.Thread(target=read, args=(request, submitted)))
        readers[-1].start()
    for reader in readers:
        reader.join()
    return time.perf_counter() - started, latencies


def cancel_latency(backend, name: str, prompts: list[str], settings: Settings, tries: int = 5) -> float:
    """Median seconds from `cancel` to the cancelled row's last record, 15 other rows running."""
    seconds = []
    for t in range(tries):
        others = [backend.submit(name, prompts[i % len(prompts)], 1000 + i, settings) for i in range(15)]
        request = backend.submit(name, prompts[0], 999, settings)
        cancelled_at = None
        for n, _ in enumerate(backend.records(request)):
            if n == 1:
                backend.cancel(request)
                cancelled_at = time.perf_counter()
        seconds.append(time.perf_counter() - cancelled_at)
        for other in others:
            for _ in backend.records(other):
                pass
    return statistics.median(seconds)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--bursts", default="1,16,64", help="concurrent requests per burst (comma-separated)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (here, and in the worker)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = scd_core.load_model(args.model)
    settings = Settings.for_model(model, method="scd-mc", window=16)
    prompts = list(optional(model, "example_prompts") or ["a red apple"])
    print(f"# {args.model}: {settings}, torch threads {args.threads}", file=sys.stderr)

    started = time.perf_counter()
    process = ProcessClient(models=[args.model], max_batch=32, threads=args.threads)
    for _ in process.records(process.submit(args.model, prompts[0], 0, settings)):
        pass
    print(f"# ProcessClient worker start and first row: {time.perf_counter() - started:.2f} s", file=sys.stderr)
    backends = {"Server": ServerBackend(model), "LocalClient": LocalClient(lambda _: model, max_batch=32),
                "ProcessClient": process}
    print("| backend | requests at once | wall s (one burst) | images/s | p50 latency s | p95 latency s |")
    print("|---|---|---|---|---|---|")
    for size in (int(b) for b in args.bursts.split(",")):
        for label, backend in backends.items():
            burst(backend, args.model, prompts, settings, 1, 0)                # warm-up
            walls, latencies = [], []
            for r in range(max(1, 8 // size)):
                wall, each = burst(backend, args.model, prompts, settings, size, r * size)
                walls.append(wall)
                latencies += each
            print(f"| {label} | {size} | {statistics.median(walls):.3f} | {len(latencies) / sum(walls):.2f} | "
                  f"{percentile(latencies, 0.5):.3f} | {percentile(latencies, 0.95):.3f} |", flush=True)
    print("\n| backend | cancel to last record s (median of 5, 16 rows running) |")
    print("|---|---|")
    for label, backend in backends.items():
        print(f"| {label} | {cancel_latency(backend, args.model, prompts, settings):.4f} |", flush=True)
    for backend in backends.values():
        backend.close()
    return 0
