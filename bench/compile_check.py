"""The compiled pass against the eager one: the same tokens and NFE on every golden case
(tests/test_golden.py's), and how long compiling takes, cold and warm.

    python -m bench compile-check                      # every golden case, eager vs compiled
    python -m bench compile-check --cases texture      # only the cases of one model
    python -m bench compile-check --time texture/scd-mc --batch 1   # compile seconds of one pass
    python -m bench compile-check --static-writes texture,tiny,janus-pro,emu3,lumina-mgpt,llamagen,cosmos
    python -m bench compile-check --graph-inputs texture,tiny,janus-pro,emu3,lumina-mgpt,llamagen,cosmos

Each case decodes eager, then compiled: the first compiled run of a case pays its compile
(printed as "first"), a second one runs on the compiled graph. `--time MODEL/METHOD` only
times the first compiled run of that case in this process: run it twice with the same
`TORCHINDUCTOR_CACHE_DIR` to see a cold compile (an empty cache) and a warm one (a second
process finds the compiled code on disk and only traces the pass again). `--static-writes`:
the tensors one compiled pass of each model (SCD-MC, L = 6; and SJD with a 2x2 tree, L = 8)
writes in place that are not static, read from inductor's graphs
(`scd_core.testing.unmarked_writes`; on a GPU such a pass is not captured as a CUDA graph).
`--graph-inputs`: for the same passes, two runs of the same prompts traced on the GPU's path
(`scd_core.testing.read_graph_inputs`): the inputs a pass took that an earlier pass returned,
and the static buffers the second run took at other addresses.
"""
from __future__ import annotations

import argparse
import time
import warnings

import torch

import scd_core
from bench.builds import tiny_config
from scd_core.testing import read_graph_inputs, unmarked_writes
from test_golden import MODELS, all_cases

CASES = {"SCD-MC, L = 6": dict(method="scd-mc", window=6), "SJD, 2x2 tree, L = 8": dict(method="sjd", window=8,
                                                                                        tree=(2, 2))}


def graph_inputs(names: list[str]) -> None:
    """Inputs fed back and static buffers moved, per model and setting (see the docstring)."""
    print("| model | setting | fed back | moved |\n|---|---|---|---|")
    for name in names:
        model, prompts, cfg = tiny_config(name)
        for setting, settings in CASES.items():
            kw = dict(seed=0, top_k=40) | settings | (dict(init="random") if name == "cosmos" else {})
            read = read_graph_inputs(model, prompts[:1], cfg, **kw)
            print(f"| {name} | {setting} | {', '.join(read.fed_back) or 'none'} | "
                  f"{len(read.moved)} of {read.static} |", flush=True)


def static_writes(names: list[str]) -> None:
    """Unmarked in-place writes of one compiled pass per model and setting (see the docstring)."""
    import torch._dynamo

    cases = CASES
    print("| model | " + " | ".join(cases) + " |\n|---|" + "---|" * len(cases))
    for name in names:
        model, prompts, cfg = tiny_config(name)
        cells = []
        for settings in cases.values():
            kw = dict(seed=0, cfg_scale=cfg, top_k=40) | settings | (dict(init="random") if name == "cosmos" else {})
            torch._dynamo.reset()
            with unmarked_writes() as graphs:
                scd_core.generate(model, prompts[:1], compile=True, **kw)
            cells.append(str(sum(len(g) for g in graphs)) if graphs else "not compiled")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="", help="only the golden cases of this model")
    ap.add_argument("--time", default="", metavar="MODEL/METHOD", help="time one case's first compiled run")
    ap.add_argument("--batch", type=int, default=1, help="rows of the --time run")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--static-writes", default="", metavar="MODELS",
                    help="instead: the unmarked in-place writes of these models' compiled passes (comma-separated)")
    ap.add_argument("--graph-inputs", default="", metavar="MODELS",
                    help="instead: the inputs fed back and buffers moved of these models' passes (comma-separated)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    if args.static_writes:
        static_writes(args.static_writes.split(","))
        return 0
    if args.graph_inputs:
        graph_inputs(args.graph_inputs.split(","))
        return 0
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
