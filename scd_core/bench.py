"""Benchmark: AR, SJD and SCD side by side, in one process, as a markdown table and CSV.

    python -m scd_core.bench --model toy-grid --methods ar,sjd,scd-mc,scd-gumbel \
        --windows 8,16,32 --seeds 4

    python -m scd_core.bench --model tiny --prompts parti:8        # 8 PartiPrompts, a fixed sample

    python -m scd_core.bench --model toy-grid --methods sjd,scd-mc --windows 16 --tree 1x0,2x1,2x2

Every row averages over prompts x seeds; a second CSV has one row per prompt x method x
window x tree x init (averaged over seeds). `--tree KxD` lists draft trees (k candidates at each
of the first D draft positions; 1x0 is the plain chain); a tree too big for a window is left
out of that window's rows. `--prompts` takes a text file (one prompt per line),
`parti` (the 1,632 PartiPrompts shipped in scd_core/assets/prompts) or `parti:N`; `--category` keeps
the Parti prompts of one or more categories. Latency speed-up divides AR's mean wall time by
the method's, both measured here; engine share is the time the engine spends outside
`Session.step` per forward pass, as a fraction of the forward time (the paper reports
1.66 ms of 36.41 ms, 4.6%, for its vectorised MRS on Janus-Pro-7B), and as a fraction of
the run's whole wall time (engine + forward).
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import scd_core
from scd_core import trace
from scd_core.prompts import Prompt, load_prompt_records
from scd_core.protocols import optional
from scd_core.settings import Settings, tree_nodes

DEFAULT_PROMPTS = ["grinning face", "red apple", "cat face", "flag france", "rocket", "red heart"]
COLUMNS = ["method", "window", "tree", "init", "nfe", "step_compression", "mean_accepted_length", "acceptance_rate",
           "draft_stability", "wall_s", "latency_speedup", "engine_ms_per_iter", "engine_share",
           "engine_wall_share"]
PROMPT_COLUMNS = ["prompt", "category", "method", "window", "tree", "init", "seeds", "nfe", "step_compression",
                  "mean_accepted_length", "acceptance_rate", "draft_stability", "wall_s"]


@dataclass
class Row:
    method: str
    window: int
    init: str
    nfe: float
    step_compression: float
    mean_accepted_length: float
    acceptance_rate: float
    draft_stability: float
    wall_s: float
    latency_speedup: float
    engine_ms_per_iter: float
    engine_share: float
    engine_wall_share: float
    tree: str = "1x0"                # the draft tree KxD ("-" for AR)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m scd_core.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="toy-grid", help="model name or local path (default: toy-grid)")
    ap.add_argument("--methods", default="ar,sjd,scd-mc,scd-gumbel")
    ap.add_argument("--windows", default=None,
                    help="comma-separated window sizes L (default: the model's own, else 16)")
    ap.add_argument("--tree", default="1x0",
                    help="comma-separated draft trees KxD: K candidates at each of the first D draft positions "
                         "(default 1x0: the plain chain), e.g. 1x0,2x1,2x2")
    ap.add_argument("--inits", default="random", help="comma-separated draft inits")
    ap.add_argument("--prompts", default=None,
                    help="a file with one prompt per line, 'parti' (all PartiPrompts) or 'parti:N' (a fixed "
                         "sample of N); default: the model's example prompts")
    ap.add_argument("--category", action="append", default=[], metavar="NAME",
                    help="keep the PartiPrompts of this category (repeatable), e.g. Animals")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per prompt")
    ap.add_argument("--batch", type=int, default=1, help="rows per generate call (prompt repeated)")
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--temperature", type=float, default=None)
    ap.add_argument("--cfg-scale", type=float, default=None)
    ap.add_argument("--device", default=None, help="cpu or cuda (default: the model's choice)")
    ap.add_argument("--dtype", default=None, help="float32 / bfloat16 / float16")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--compile", action="store_true",
                    help="run the passes compiled (scd_core.compiled; each setting's first run compiles it)")
    ap.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE",
                    help="extra loader argument, e.g. vocab_size=16384 or grid=24,24 (repeatable)")
    ap.add_argument("--csv", type=Path, default=None, help="write the table as CSV here")
    ap.add_argument("--prompts-csv", type=Path, default=None,
                    help="write one row per prompt x method x window x init here "
                         "(default: beside the table's CSV, named *-prompts.csv)")
    ap.add_argument("--max-prompts", type=int, default=None)
    dist = ap.add_argument_group("on a Ray cluster (scd_core.distributed.bench, docs/scaling.md)")
    dist.add_argument("--ray", default=None, metavar="ADDRESS",
                      help="spread the cells over Ray workers: 'local' starts a cluster here, else ray.init's address")
    dist.add_argument("--workers", type=int, default=2, help="actors in the pool, each with its own model copy")
    dist.add_argument("--gpus-per-worker", type=float, default=0, help="GPUs per actor (0: CPU)")
    dist.add_argument("--out", type=Path, default=None,
                      help="one row per cell, appended as cells finish; a restart skips the cells written")
    dist.add_argument("--max-cells", type=int, default=None, help="run at most this many cells (resume later)")
    dist.add_argument("--retries", type=int, default=2, help="attempts after the first for a cell that raised")
    return ap.parse_args(argv)


def parse_trees(text: str) -> list[tuple[int, int]]:
    """"1x0,2x1" -> [(1, 0), (2, 1)]; a ValueError names `tree`."""
    trees = []
    for item in (t.strip() for t in text.split(",")):
        k, sep, depth = item.lower().partition("x")
        if not sep or not k.isdigit() or not depth.isdigit():
            raise ValueError(f"tree must be KxD (e.g. 2x1), got {item!r}")
        trees.append((int(k), int(depth)))
    return trees


def tree_label(tree: tuple[int, int]) -> str:
    return f"{tree[0]}x{tree[1]}"


def parse_model_args(items: list[str]) -> dict:
    """KEY=VALUE strings -> loader kwargs: integers, floats, comma-separated integer tuples."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--model-arg: expected KEY=VALUE, got {item!r}")
        for convert in (int, float, lambda v: tuple(int(x) for x in v.split(","))):
            try:
                out[key] = convert(value)
                break
            except ValueError:
                continue
        else:
            out[key] = value
    return out


def base_settings(model, args: argparse.Namespace) -> Settings:
    """Command-line settings over the model's published defaults over the library's."""
    return Settings.for_model(model, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                              cfg_scale=args.cfg_scale, compile=getattr(args, "compile", False) or None)


def load_prompts(model, args: argparse.Namespace) -> list[str]:
    return [p.text for p in prompt_records(model, args)]


def prompt_records(model, args: argparse.Namespace) -> list[Prompt]:
    """The prompts of --prompts / --category (see scd_core.prompts), at most --max-prompts."""
    default = list(optional(model, "example_prompts") or DEFAULT_PROMPTS)
    records = load_prompt_records(args.prompts, args.category, default=default)
    return records[: args.max_prompts] if args.max_prompts else records


@dataclass(frozen=True)
class RunMetrics:
    """What the table needs from one run; its trace is dropped as soon as the run ends."""
    wall_time: float
    step_time: float
    engine_time: float
    nfe: int
    step_compression: float
    mean_accepted_length: float
    acceptance_rate: float
    draft_stability: float

    @classmethod
    def of(cls, run: scd_core.Run) -> "RunMetrics":
        return cls(run.wall_time, run.step_time, run.engine_time, run.nfe, run.step_compression,
                   run.mean_accepted_length, run.acceptance_rate, run.draft_stability)


def run_case(model, prompts: list[str], seeds: int, batch: int, settings: Settings) -> list[RunMetrics]:
    """Decode every prompt x seed. Only each run's metrics are kept: tens of thousands of live
    trace tensors from earlier runs would slow the later ones (on a CPU, by up to a third of
    the engine's time), which a user decoding one image never sees."""
    runs = []
    if settings.compile:                     # compile this setting's pass before anything is timed
        scd_core.generate(model, [prompts[0]] * batch, seed=0, settings=settings)
    for prompt in prompts:
        for seed in range(seeds):
            run = scd_core.generate(model, [prompt] * batch, seed=seed, settings=settings)
            runs.append(RunMetrics.of(run))
    return runs


def summarise(method: str, window: int, init: str, runs: list[RunMetrics], ar_wall: float,
              tree: str = "1x0") -> Row:
    mean = lambda xs: statistics.fmean(xs)  # noqa: E731
    wall = mean([r.wall_time for r in runs])
    iters = sum(r.nfe for r in runs)
    engine = sum(r.engine_time for r in runs)
    step = sum(r.step_time for r in runs)
    return Row(method, window, init, mean([r.nfe for r in runs]), mean([r.step_compression for r in runs]),
               mean([r.mean_accepted_length for r in runs]), mean([r.acceptance_rate for r in runs]),
               mean([r.draft_stability for r in runs]), wall, trace.latency_speedup(ar_wall, wall),
               1000 * engine / iters, engine / step if step else float("nan"),
               engine / (engine + step) if engine + step else float("nan"), tree)


def markdown(rows: list[Row]) -> str:
    header = ["method", "L", "tree", "init", "NFE", "step compr.", "mean acc. len", "acc. rate", "draft stab.",
              "wall s", "latency speed-up", "engine ms/iter", "engine/forward",
              "engine/wall"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        lines.append(f"| {r.method} | {r.window} | {r.tree} | {r.init} | {r.nfe:.1f} | {r.step_compression:.2f}x | "
                     f"{r.mean_accepted_length:.2f} | {r.acceptance_rate:.3f} | {r.draft_stability:.3f} | "
                     f"{r.wall_s:.3f} | {r.latency_speedup:.2f}x | {r.engine_ms_per_iter:.2f} | "
                     f"{100 * r.engine_share:.1f}% | {100 * r.engine_wall_share:.1f}% |")
    return "\n".join(lines)


def prompt_rows(method: str, window: int, init: str, prompts: list[Prompt], seeds: int,
                runs: list[RunMetrics], tree: str = "1x0") -> list[dict]:
    """One row per prompt: the means over its seeds (`runs` are prompt-major, as run_case makes them)."""
    rows = []
    for i, p in enumerate(prompts):
        mine = runs[i * seeds:(i + 1) * seeds]
        mean = lambda field: statistics.fmean(getattr(r, field) for r in mine)  # noqa: E731
        rows.append({"prompt": p.text, "category": p.category, "method": method, "window": window, "tree": tree,
                     "init": init,
                     "seeds": len(mine), "nfe": mean("nfe"), "step_compression": mean("step_compression"),
                     "mean_accepted_length": mean("mean_accepted_length"),
                     "acceptance_rate": mean("acceptance_rate"), "draft_stability": mean("draft_stability"),
                     "wall_s": mean("wall_time")})
    return rows


def benchmark(args: argparse.Namespace, per_prompt: list[dict] | None = None) -> list[Row]:
    """The table's rows; with `per_prompt`, its per-prompt rows are appended there too."""
    per_prompt = [] if per_prompt is None else per_prompt
    if args.threads:
        torch.set_num_threads(args.threads)
    load_kwargs = {k: v for k, v in (("device", args.device), ("dtype", args.dtype)) if v is not None}
    load_kwargs.update(parse_model_args(args.model_arg))
    model = scd_core.load_model(args.model, **load_kwargs)
    base = base_settings(model, args)
    records = prompt_records(model, args)
    prompts = [p.text for p in records]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    windows = [int(w) for w in args.windows.split(",")] if args.windows else [base.window]
    inits = [i.strip() for i in args.inits.split(",") if i.strip()]
    trees = parse_trees(args.tree)
    print(f"# {args.model}: grid {tuple(model.grid)}, V {model.vocab_size}, {len(prompts)} prompts x "
          f"{args.seeds} seeds, batch {args.batch}, {base}, threads {torch.get_num_threads()}", file=sys.stderr)
    run_case(model, prompts[:1], 1, args.batch,
             base.replace(method=methods[0], window=windows[0], init=inits[0]))     # warm-up
    t = time.perf_counter()
    ar_runs = run_case(model, prompts, args.seeds, args.batch, base.replace(method="ar", init="random"))
    ar_wall = statistics.fmean(r.wall_time for r in ar_runs)
    rows = []
    for method in methods:
        if method == "ar":
            rows.append(summarise("ar", 1, "-", ar_runs, ar_wall, tree="-"))
            per_prompt += prompt_rows("ar", 1, "-", records, args.seeds, ar_runs, tree="-")
            continue
        for window in windows:
            for tree in trees:
                if 1 + tree_nodes(tree) > window:
                    print(f"  tree {tree_label(tree)} does not fit in L={window}: left out", file=sys.stderr)
                    continue
                for init in inits:
                    runs = run_case(model, prompts, args.seeds, args.batch,
                                    base.replace(method=method, window=window, init=init, tree=tree))
                    rows.append(summarise(method, window, init, runs, ar_wall, tree_label(tree)))
                    per_prompt += prompt_rows(method, window, init, records, args.seeds, runs, tree_label(tree))
                    print(f"  {method} L={window} tree {tree_label(tree)} {init} done "
                          f"({time.perf_counter() - t:.1f} s since the start)", file=sys.stderr)
    return rows


def write_csv(rows: list, path: Path, columns: list[str] = COLUMNS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow(r if isinstance(r, dict) else asdict(r))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.ray:
        from scd_core.distributed.bench import main as distributed_main       # Ray only when asked for
        return distributed_main(args)
    per_prompt: list[dict] = []
    try:
        rows = benchmark(args, per_prompt)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown(rows))
    csv_path = args.csv or Path("bench_out") / f"{args.model.replace('/', '_')}.csv"
    prompts_path = args.prompts_csv or csv_path.with_name(f"{csv_path.stem}-prompts.csv")
    write_csv(rows, csv_path)
    write_csv(per_prompt, prompts_path, PROMPT_COLUMNS)
    print(f"\nCSV written to {csv_path}; per prompt to {prompts_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
