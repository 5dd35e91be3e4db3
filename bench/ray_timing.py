"""Ray on this machine, loopback only: the benchmark on 2 workers vs 1, the decode service on
2 replicas vs 1 at 16 concurrent clients, and a replica killed during a burst.

    python -m bench ray-timing [--part bench|service|kill|all] [--clients 16] [--requests 48]

Prints markdown tables (docs/scaling.md has the measured ones). Every wait is bounded.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time

import ray
import torch

import scd_core
from bench.stats import percentile
from scd_core import bench
from scd_core.client import DecodeError
from scd_core.distributed import bench as dbench
from scd_core.distributed.service import RayClient

BENCH = ["--model", "tiny", "--methods", "ar,sjd,scd-mc", "--seeds", "2", "--max-prompts", "4", "--threads", "1"]
PROMPTS = ["red apple", "cat face", "rocket", "red heart", "grinning face", "flag france"]


def time_bench() -> None:
    print("| workers | cells | seconds (pool start included) | cells/s | rows equal to 1 worker's |")
    print("|---|---|---|---|---|")
    first = None
    for workers in (1, 2):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            result = dbench.run(bench.parse_args(BENCH + ["--ray", "local", "--workers", str(workers),
                                                          "--out", f"{tmp}/c.csv"]))
            seconds = time.perf_counter() - t
        rows = {k: (r["nfe"], r["tokens_sha256"]) for k, r in result["rows"].items()}
        first = first or rows
        print(f"| {workers} | {result['ran']} | {seconds:.1f} | {result['ran'] / seconds:.2f} | {rows == first} |",
              flush=True)


def _burst(client, clients: int, requests: int, settings) -> tuple[float, list[float], list]:
    """`clients` threads, each submitting its share of `requests` one after another."""
    latencies, outcomes, lock, counter = [], [], threading.Lock(), iter(range(requests))

    def visitor():
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            t = time.perf_counter()
            rid = client.submit("tiny", PROMPTS[i % len(PROMPTS)], i, settings)
            try:
                client.result(rid, timeout=300)
                outcome = "ok"
            except DecodeError as exc:
                outcome = str(exc)
            with lock:
                latencies.append(time.perf_counter() - t)
                outcomes.append((rid, outcome))

    threads = [threading.Thread(target=visitor) for _ in range(clients)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=600)
    return time.perf_counter() - t, latencies, outcomes


def time_service(clients: int, requests: int) -> None:
    settings = scd_core.Settings(method="scd-mc", window=16)
    print("| replicas | clients | requests | images/s | p50 s | p95 s |")
    print("|---|---|---|---|---|---|")
    for replicas in (1, 2):
        client = RayClient("local", "tiny", replicas=replicas)
        _burst(client, replicas * 2, replicas * 2, settings)                      # warm-up
        seconds, lat, outcomes = _burst(client, clients, requests, settings)
        assert all(o == "ok" for _, o in outcomes), outcomes
        print(f"| {replicas} | {clients} | {requests} | {requests / seconds:.2f} | {percentile(lat, 0.5):.2f} | "
              f"{percentile(lat, 0.95):.2f} |", flush=True)
        client.close()


def kill_drill(clients: int) -> None:
    settings = scd_core.Settings(method="scd-mc", window=16)
    client = RayClient("local", "tiny", replicas=2, idle_timeout=60)
    _burst(client, 2, 2, settings)
    ids = [client.submit("tiny", PROMPTS[i % len(PROMPTS)], i, settings) for i in range(clients)]
    where = {i: client.replica(i) for i in ids}
    for i in ids:
        next(iter(client.records(i)))
    victim = where[ids[0]]
    t = time.perf_counter()
    ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
    lost, ok, reasons = [], 0, set()
    for i in ids:
        try:
            client.result(i, timeout=300)
            ok += 1
        except DecodeError as exc:
            lost.append(i)
            reasons.add(str(exc))
    settled = time.perf_counter() - t
    on_victim = [i for i in ids if where[i] == victim]
    t = time.perf_counter()
    seconds, _, after = _burst(client, 4, 8, settings)
    print("| rows in the burst | on the killed replica | lost | lost only its rows | served | all told why | "
          "s to settle | next 8 served | s for them |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {len(ids)} | {len(on_victim)} | {len(lost)} | {sorted(lost) == sorted(on_victim)} | {ok} | "
          f"{all('stopped' in r for r in reasons)} | {settled:.1f} | {sum(o == 'ok' for _, o in after)} | "
          f"{time.perf_counter() - t:.1f} |")
    print(f"reason given: {sorted(reasons)}", file=sys.stderr)
    client.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--part", default="all", choices=["bench", "service", "kill", "all"])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=48)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.part in ("bench", "all"):
        time_bench()
    if args.part in ("service", "all"):
        time_service(args.clients, args.requests)
    if args.part in ("kill", "all"):
        kill_drill(args.clients)
    return 0
