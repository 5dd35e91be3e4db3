"""The compiled pass against the eager one: the same tokens and NFE on every golden case
(tests/test_golden.py's), and how long compiling takes, cold and warm.

    python -m bench compile-check                      # every golden case, eager vs compiled
    python -m bench compile-check --cases texture      # only the cases of one model
    python -m bench compile-check --time texture/scd-mc --batch 1   # compile seconds of one pass

Each case decodes eager, then compiled: the first compiled run of a case pays its compile
(printed as "first"), a second one runs on the compiled graph. `--time MODEL/METHOD` only
times the first compiled run of that case in this process: run it twice with the same
`TORCHINDUCTOR_CACHE_DIR` to see a cold compile (an empty cache) and a warm one (a second
process finds the compiled code on disk and only traces the pass again).
"""
from __future__ import annotations

import argparse
import time
import warnings

import torch

import scd_core
from test_golden import MODELS, all_cases


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="", help="only the golden cases of this model")
    ap.add_argument("--time", default="", metavar="MODEL/METHOD", help="time one case's first compiled run")
    ap.add_argument("--batch", type=int, default=1, help="rows of the --time run")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    if args.time:
        name, method = args.time.split("/")
        model = scd_core.load_model(name, **MODELS.get(name, {}))
        prompts = (getattr(model, "example_prompts", None) or ["a red apple"])[:1] * args.batch
        t = time.perf_counter()
        run = scd_core.generate(model, prompts, method=method, window=16, seed=0, compile=True)
        print(f"{name}/{method}, B {args.batch}: first compiled run {time.perf_counter() - t:.1f} s "
              f"({run.nfe} passes)")
        return 0
    models = {name: scd_core.load_model(name, **kw) for name, kw in MODELS.items()}
    print("| case | same tokens and NFE | eager s | compiled s, first (compiling) | compiled s, next |\n|---|---|---|---|---|")
    differ = 0
    for key, (model, method, prompts, seed, window, extra) in all_cases():
        if args.cases and model != args.cases:
            continue
        kw = dict(method=method, window=window, seed=seed, **extra)
        times, runs = [], []
        for compile in (False, True, True):
            t = time.perf_counter()
            runs.append(scd_core.generate(models[model], list(prompts), compile=compile, **kw))
            times.append(time.perf_counter() - t)
        same = all(torch.equal(r.tokens, runs[0].tokens) and r.nfe == runs[0].nfe for r in runs[1:])
        differ += not same
        print(f"| {key} | {'yes' if same else 'NO'} | {times[0]:.2f} | {times[1]:.1f} | {times[2]:.2f} |", flush=True)
    print(f"{differ} cases differ")
    return 1 if differ else 0
