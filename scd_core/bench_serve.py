"""The serving benchmark: requests per second and latency of a `scd_core.serve.Server` as
visitors share its passes, and a burst of requests at once against the same requests one
after another with `generate`.

    python -m scd_core.bench_serve --model tiny --methods ar,sjd,scd-mc --visitors 1,4,8,16
    python -m scd_core.bench_serve --model tiny --methods scd-mc --burst 16

(`scd-serve` with the same arguments runs this.)
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import threading
import time

import torch

from scd_core.decoding import validate
from scd_core.settings import Settings
from scd_core.protocols import optional
from scd_core.serve import Policy, Server


def _visitors(server: Server, prompts: list[str], visitors: int, per_visitor: int, settings: dict):
    """`visitors` threads, each submitting `per_visitor` requests one after another; returns
    (seconds for all, latency of each request, NFE of each)."""
    latencies, nfes, lock = [], [], threading.Lock()
    counter = itertools.count()

    def visitor() -> None:
        for _ in range(per_visitor):
            i = next(counter)
            request = server.submit(prompts[i % len(prompts)], seed=i, **settings)
            run = request.result()
            with lock:
                latencies.append(time.perf_counter() - request.submitted)
                nfes.append(run.nfe)

    threads = [threading.Thread(target=visitor) for _ in range(visitors)]
    t = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - t, latencies, nfes


def burst(model, prompts: list[str], settings: dict, policy: Policy | None = None, repeats: int = 3) -> dict:
    """Seconds for len(prompts) requests (seeds 0, 1, ...) run one after another with
    `generate`, and submitted at once to a Server: the median of `repeats` alternations."""
    from scd_core.decoding import generate

    sequential, concurrent = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        for i, prompt in enumerate(prompts):
            generate(model, [prompt], seed=i, **settings)
        sequential.append(time.perf_counter() - t)
        server = Server(model, policy=policy)
        t = time.perf_counter()
        requests = [server.submit(prompt, seed=i, **settings) for i, prompt in enumerate(prompts)]
        for request in requests:
            request.result()
        concurrent.append(time.perf_counter() - t)
        server.close()
    return {"sequential": statistics.median(sequential), "concurrent": statistics.median(concurrent)}


def _quantile(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q * 100) - 1] if len(xs) > 1 else xs[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scd_core.bench_serve", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--methods", default="ar,sjd,scd-mc,scd-gumbel")
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--init", default="random")
    ap.add_argument("--visitors", default="1,4,8,16", help="concurrent visitors (comma-separated)")
    ap.add_argument("--requests", type=int, default=16, help="requests per row of the table")
    ap.add_argument("--policy", action="store_true", help="let the measured policy choose each batch's window")
    ap.add_argument("--burst", type=int, default=0,
                    help="instead of the table: N requests one after another vs N submitted at once")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="run the passes compiled (scd_core.passes)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from scd_core.models import load_model

    model = load_model(args.model)
    base = Settings.for_model(model, window=args.window, init=args.init)
    settings = {k: getattr(base, k) for k in ("temperature", "top_k", "top_p", "cfg_scale")}
    settings["compile"] = args.compile
    prompts = list(optional(model, "example_prompts") or ["a red apple"])
    print(f"# {args.model}: window {args.window}, init {args.init}, {settings}, threads {torch.get_num_threads()}, "
          f"{args.requests} requests per row", file=sys.stderr)
    if args.burst:
        return _print_burst(model, prompts, settings, args)
    print("| method | visitors | policy | images/s | p50 latency s | p95 latency s | mean NFE |")
    print("|---|---|---|---|---|---|---|")
    for method in args.methods.split(","):
        window = 1 if method == "ar" else args.window
        group = dict(method=method, window=window, init=args.init, **settings)
        policy = None
        if args.policy and method != "ar":
            plan, _ = validate(model, [""], base.replace(method=method, window=window))
            policy = Policy.measure(model, plan, windows=sorted({1, 4, 8, window}))
        for visitors in (int(v) for v in args.visitors.split(",")):
            server = Server(model, policy=policy)
            _visitors(server, prompts, 1, 1, group)                              # warm-up
            seconds, latencies, nfes = _visitors(server, prompts, visitors, max(1, args.requests // visitors), group)
            server.close()
            print(f"| {method} | {visitors} | {'measured' if policy else 'fixed'} | {len(latencies) / seconds:.2f} | "
                  f"{_quantile(latencies, 0.5):.3f} | {_quantile(latencies, 0.95):.3f} | "
                  f"{statistics.fmean(nfes):.1f} |", flush=True)
    return 0


def _print_burst(model, prompts: list[str], settings: dict, args: argparse.Namespace) -> int:
    base = Settings.for_model(model, window=args.window, init=args.init)
    batch = [prompts[i % len(prompts)] for i in range(args.burst)]
    print(f"| method | L | policy | {args.burst} one after another s | {args.burst} at once s | speed-up |")
    print("|---|---|---|---|---|---|")
    for method in args.methods.split(","):
        window = 1 if method == "ar" else args.window
        group = dict(method=method, window=window, init=args.init, **settings)
        policies = {"fixed": None}
        if args.policy and method != "ar":
            plan, _ = validate(model, [""], base.replace(method=method, window=window))
            policies["measured"] = Policy.measure(model, plan, windows=sorted({1, 4, 8, window}))
        for name, policy in policies.items():
            times = burst(model, batch, group, policy)
            print(f"| {method} | {window} | {name} | {times['sequential']:.2f} | {times['concurrent']:.2f} | "
                  f"{times['sequential'] / times['concurrent']:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
