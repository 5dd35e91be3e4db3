"""Compare this checkout's engine with the engine of an earlier commit, in one process.

    python -m bench engine-ab --rev <commit> --model toy-grid            # engine time per pass
    python -m bench engine-ab --rev <commit> --model tiny --nfe-seeds 32 # mean NFE, both engines
    python -m bench engine-ab --rev <commit> --model texture --batch 8 --windows 16 --methods scd-mc
    python -m bench engine-ab --rev <commit> --latency --model texture --top-k 0 --cfg-scale 1 \
        --windows 16 --batch 8                                        # AR vs SCD-MC wall time, both engines
    python -m bench engine-ab --rev <commit> --trace-memory --model random-logits \
        --model-arg grid=90,90 --model-arg vocab_size=64 --batch 2      # bytes an AR trace holds

The earlier commit's `scd_core` is imported as `scd_core_old` (`bench.builds.earlier_engine`),
next to this checkout's `scd_core`; both decode the same prompts
with the same settings, alternating run by run so that machine noise falls on both alike.
Engine time is a run's wall time outside `Session.step`, per forward pass (median over runs);
the last column says whether both engines gave the same tokens and NFE for every run.
The model itself is loaded once, from this checkout, and shared by both engines.

`--compile` runs this checkout's pass compiled (`scd_core.passes`, after one untimed run that
compiles it); the model's step stays outside the compiled graph, so the engine's time is still
what is measured.

`--clock cpu` counts the thread's CPU time instead of wall time (a run's CPU time less the
CPU time inside the model's `start` and `step`): on a machine that other jobs load, a run
waiting for a core then costs neither engine anything, and the ratio is far steadier.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import scd_core
from bench.builds import earlier_engine
from scd_core.bench_rows import parse_model_args
from scd_core.protocols import optional


class CpuTimed:
    """The model, with the thread CPU time of its `start` and of every session `step` added
    up in `seconds` (everything else is passed through)."""

    def __init__(self, model) -> None:
        self._model, self.seconds = model, 0.0

    def __getattr__(self, name: str):
        return getattr(self._model, name)

    def start(self, prompts, cfg_scale):
        t = time.thread_time()
        session = self._model.start(prompts, cfg_scale)
        self.seconds += time.thread_time() - t
        return _CpuTimedSession(session, self)


class _CpuTimedSession:
    compilable = False              # its step reads the clock: a compiled pass runs around it, not through it

    def __init__(self, session, clock: CpuTimed) -> None:
        self._session, self._clock = session, clock

    def __getattr__(self, name: str):
        return getattr(self._session, name)

    def step(self, tokens, start):
        t = time.thread_time()
        logits = self._session.step(tokens, start)
        self._clock.seconds += time.thread_time() - t
        return logits


def engine_seconds(eng, model, clock: str, *args, **kw):
    """(run, engine seconds): wall time outside `Session.step` (`clock` "wall"), or the
    thread's CPU time outside the model's `start` and `step` ("cpu")."""
    if clock == "wall":
        run = eng.generate(model, *args, **kw)
        return run, run.wall_time - run.step_time
    timed = CpuTimed(model)
    t = time.thread_time()
    run = eng.generate(timed, *args, **kw)
    return run, time.thread_time() - t - timed.seconds


def latency(engines: dict, model, rows: list[str], window: int, runs: int, compile: bool = False, **kw) -> None:
    """AR against SCD-MC for each engine: wall time (the engine's share) and thread CPU time
    of a run, medians over `runs` runs after a warm-up, with the latency speed-up and the
    step compression (AR's passes over SCD-MC's)."""
    times = {}
    for r in range(runs + 1):
        for name, eng in engines.items():
            for method in ("ar", "scd-mc"):
                t = time.thread_time()
                extra = dict(compile=True) if compile and name == "new" else {}
                run = eng.generate(model, rows, method=method, window=window, seed=0, **kw, **extra)
                if r:
                    times.setdefault((name, method), []).append(
                        (run.wall_time, run.wall_time - run.step_time, time.thread_time() - t, run.nfe))
    print("| engine | AR wall (CPU) | SCD-MC wall (engine; CPU) | passes AR / SCD-MC | wall speed-up (CPU) | "
          "step compression |\n|---|---|---|---|---|---|")
    for name in engines:
        ar, scd = ([statistics.median(x[i] for x in times[(name, m)]) for i in range(4)] for m in ("ar", "scd-mc"))
        print(f"| {name} | {ar[0]:.2f} s ({ar[2]:.2f} s) | {scd[0]:.2f} s ({scd[1]:.2f} s; {scd[2]:.2f} s) | "
              f"{ar[3]:.0f} / {scd[3]:.0f} | {ar[0] / scd[0]:.2f}x ({ar[2] / scd[2]:.2f}x) | {ar[3] / scd[3]:.2f}x |")


def trace_bytes(records) -> int:
    """Bytes of the distinct tensor storages the records of a run hold (a shared one once)."""
    storages = {}
    for record in records:
        for value in vars(record).values():
            for t in (value, getattr(value, "tokens", None)):
                if isinstance(t, torch.Tensor):
                    storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(storages.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rev", required=True, help="the earlier commit")
    ap.add_argument("--model", default="toy-grid")
    ap.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--methods", default="sjd,scd-mc,scd-gumbel")
    ap.add_argument("--windows", default="8,16,32")
    ap.add_argument("--inits", default="random,repeat-above")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per engine and case")
    ap.add_argument("--nfe-seeds", type=int, default=0, help="instead of timing: mean NFE over this many seeds")
    ap.add_argument("--top-k", type=int, default=100)
    ap.add_argument("--cfg-scale", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1, help="rows per run (B)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="engine time as wall time outside the model (default) or the thread's CPU time outside it")
    ap.add_argument("--latency", action="store_true",
                    help="instead of timing the engine: AR against SCD-MC wall time (first of --windows), seed 0")
    ap.add_argument("--trace-memory", action="store_true", help="instead of timing: bytes of an AR trace")
    ap.add_argument("--compile", action="store_true",
                    help="this checkout's engine runs its pass compiled (scd_core.passes; warmed up first)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    old = earlier_engine(args.rev)
    model = scd_core.load_model(args.model, **parse_model_args(args.model_arg))
    prompts = list(optional(model, "example_prompts") or ["a red apple"])
    engines = {"old": old, "new": scd_core}
    rows = lambda r: [prompts[(r + b) % len(prompts)] for b in range(args.batch)]   # noqa: E731
    if args.trace_memory:
        for name, eng in engines.items():
            records = list(eng.stream(model, rows(0), method="ar", seed=0))
            print(f"{name}: {len(records)} records of {args.batch} rows x {records[-1].tokens_after.shape[1]} "
                  f"tokens hold {trace_bytes(records) / 2**20:.1f} MiB")
        return 0
    print(f"# {args.model}, B {args.batch}, top-k {args.top_k}, CFG {args.cfg_scale}, rev {args.rev}, "
          f"threads {args.threads}, clock {args.clock}, new engine {'compiled' if args.compile else 'eager'}")
    if args.latency:
        latency(engines, model, rows(0), int(args.windows.split(",")[0]), args.runs, compile=args.compile,
                top_k=args.top_k, cfg_scale=args.cfg_scale)
        return 0
    if args.nfe_seeds:
        print("| method | L | init | mean NFE old | mean NFE new | sd new / sqrt(n) |\n|---|---|---|---|---|---|")
    else:
        print("| method | L | init | engine us/pass old | engine us/pass new | new/old | same tokens |\n"
              "|---|---|---|---|---|---|---|")
    for method in args.methods.split(","):
        for window in (int(w) for w in args.windows.split(",")):
            for init in args.inits.split(","):
                kw = dict(method=method, window=window, init=init, top_k=args.top_k, cfg_scale=args.cfg_scale)
                if args.nfe_seeds:
                    nfe = {name: [eng.generate(model, rows(s), seed=s, **kw).nfe
                                  for s in range(args.nfe_seeds)] for name, eng in engines.items()}
                    se = statistics.stdev(nfe["new"]) / len(nfe["new"]) ** 0.5
                    print(f"| {method} | {window} | {init} | {statistics.fmean(nfe['old']):.2f} | "
                          f"{statistics.fmean(nfe['new']):.2f} | {se:.2f} |")
                    continue
                per_pass, same = {name: [] for name in engines}, True
                compiled = dict(compile=True) if args.compile else {}
                if args.compile:                                           # compile before the first timed run
                    engine_seconds(scd_core, model, args.clock, rows(0), seed=0, **kw, **compiled)
                for r in range(args.runs + 1):
                    runs = {name: engine_seconds(eng, model, args.clock, rows(r), seed=r, **kw,
                                                 **(compiled if name == "new" else {}))
                            for name, eng in engines.items()}
                    same &= torch.equal(runs["old"][0].tokens, runs["new"][0].tokens) and runs["old"][0].nfe == runs["new"][0].nfe
                    if r:                                                      # the first run warms up
                        for name, (run, seconds) in runs.items():
                            per_pass[name].append(1e6 * seconds / run.nfe)
                o, n = statistics.median(per_pass["old"]), statistics.median(per_pass["new"])
                print(f"| {method} | {window} | {init} | {o:.0f} | {n:.0f} | {n / o:.2f} | {'yes' if same else 'NO'} |",
                      flush=True)
    return 0

