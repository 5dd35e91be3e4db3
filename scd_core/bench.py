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
import statistics
import sys
import time
from pathlib import Path

import torch

import scd_core
from scd_core.bench_rows import (PROMPT_COLUMNS, Row, base_settings, markdown, parse_model_args, parse_trees, prompt_records,
                                 prompt_rows, run_case, summarise, tree_label, write_csv)
from scd_core.settings import tree_nodes


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
                    help="run the passes compiled (scd_core.passes; each setting's first run compiles it)")
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
