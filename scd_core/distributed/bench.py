"""The benchmark on Ray Data: its cells spread over an actor pool, one row per cell in a
resumable CSV, the single-process bench's table printed from those rows.

    python -m scd_core.bench --model tiny --prompts parti:64 --seeds 4 \
        --ray local --workers 2 --out bench_out/tiny-cells.csv
    python -m scd_core.bench ... --ray auto --workers 8 --gpus-per-worker 1 --out /shared/tiny-cells.csv

`--ray local` starts a cluster on this machine (stopped at the end); any other address goes
to `ray.init` (`auto`: the cluster this machine belongs to). Each actor of the pool
(`map_batches` with a callable class, `concurrency=--workers`, `num_gpus=--gpus-per-worker`)
loads the model once and decodes one cell per batch; the driver appends each finished row to
`--out` and flushes it, so a killed run loses at most the cells in flight and a restart runs
only the cells without an "ok" row (see `cells`). A cell whose decode raises is tried again
`--retries` times, then written as "failed" with its error. Progress (cells done / total,
ETA) goes to stderr; the table to stdout, as the single-process bench prints it.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import ray

from scd_core import bench_rows
from scd_core.distributed import cells
from scd_core.distributed.cells import Cell, RowFile, Spec


def connect(address: str, num_cpus: int | None = None) -> bool:
    """Join (or, for "local", start) a Ray cluster unless this process already has one;
    True if this call started the connection (and its caller should shut it down). The
    workers import this checkout's scd_core: its root goes on their Python path."""
    if ray.is_initialized():
        return False
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    common = dict(runtime_env={"env_vars": {"PYTHONPATH": path}}, logging_level="warning", log_to_driver=True)
    if address == "local":
        ray.init(address="local", num_cpus=num_cpus or 2, include_dashboard=False, _node_ip_address="127.0.0.1",
                 **common)                            # loopback only
    else:
        ray.init(address=address, **common)
    return True


class CellWorker:
    """One actor of the pool: loads the model once, then decodes the cells it is given."""

    def __init__(self, spec: Spec, decode_fn=cells.decode, retries: int = cells.DEFAULT_RETRIES,
                 warm_up: dict | None = None) -> None:
        self.spec, self.decode_fn, self.retries = spec, decode_fn, retries
        self.model = spec.load()
        if warm_up:                                   # the first cell's settings, as the bench warms up
            cells.decode(self.model, spec, Cell(**warm_up))

    def __call__(self, batch: dict) -> dict:
        rows = [cells.attempt(self.decode_fn, self.model, self.spec, _cell(batch, i), self.retries)
                for i in range(len(batch["prompt"]))]
        return {k: [cells._text(r[k]) for r in rows] for k in cells.COLUMNS}


def _cell(batch: dict, i: int) -> Cell:
    return Cell(str(batch["prompt"][i]), str(batch["category"][i]), int(batch["seed"][i]), str(batch["method"][i]),
                int(batch["window"][i]), str(batch["init"][i]))


def plan(args: argparse.Namespace) -> tuple[Spec, list[Cell]]:
    """The run's spec and every cell of its grid, from the single-process bench's arguments."""
    load_kwargs = {k: v for k, v in (("device", args.device), ("dtype", args.dtype)) if v is not None}
    load_kwargs.update(bench_rows.parse_model_args(args.model_arg))
    spec0 = Spec(args.model, load_kwargs, None, args.batch, args.threads or 1)       # type: ignore[arg-type]
    model = spec0.load()                              # the model's prompts and defaults
    base = bench_rows.base_settings(model, args)
    records = bench_rows.prompt_records(model, args)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    windows = [int(w) for w in args.windows.split(",")] if args.windows else [base.window]
    inits = [i.strip() for i in args.inits.split(",") if i.strip()]
    grid = cells.grid(records, args.seeds, methods, windows, inits)
    for cell in grid:
        cell.settings(base).check_model(model)        # a bad window or init: a ValueError before any work
    if args.workers < 1 or args.gpus_per_worker < 0:
        raise ValueError(f"--workers must be >= 1 and --gpus-per-worker >= 0, got {args.workers}, "
                         f"{args.gpus_per_worker}")
    return Spec(args.model, load_kwargs, base, args.batch, args.threads or 1), grid


def run(args: argparse.Namespace, decode_fn=cells.decode) -> dict:
    """Decode the cells `--out` lacks; returns what this run did (cells, ran, failed, rows)."""
    spec, grid = plan(args)
    out = args.out or Path("bench_out") / f"{args.model.replace('/', '_')}-cells.csv"
    rows = RowFile(out, spec.config)
    todo = [c for c in grid if not rows.done(c)]
    skipped = len(grid) - len(todo)
    if args.max_cells is not None:
        todo = todo[: args.max_cells]
    print(f"# {args.model}: {len(grid)} cells, {skipped} already in {out}, {len(todo)} to run on "
          f"{args.workers} workers x {args.gpus_per_worker:g} GPU", file=sys.stderr)
    owned = connect(args.ray, num_cpus=max(2, args.workers)) if todo else False
    ran = failed = 0
    try:
        if todo:
            ran, failed = _compute(args, spec, todo, rows, decode_fn, done_before=skipped, total=len(grid))
    finally:
        rows.close()
        if owned:
            ray.shutdown()
    return {"cells": grid, "ran": ran, "failed": failed, "skipped": skipped, "rows": rows.rows, "out": out}


def _compute(args, spec: Spec, todo: list[Cell], rows: RowFile, decode_fn, done_before: int, total: int):
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False                  # our own progress line instead
    ctx.execution_options.preserve_order = False      # rows as they finish
    ds = ray.data.from_items([asdict(c) for c in todo], override_num_blocks=len(todo))
    remote = {"num_gpus": args.gpus_per_worker} if args.gpus_per_worker else {}
    ds = ds.map_batches(CellWorker, batch_size=1, batch_format="numpy", concurrency=args.workers, num_cpus=1,
                        fn_constructor_kwargs={"spec": spec, "decode_fn": decode_fn, "retries": args.retries,
                                               "warm_up": asdict(todo[0])}, **remote)
    t, ran, failed = time.perf_counter(), 0, 0
    for row in ds.iter_rows():
        rows.append(row)
        ran += 1
        failed += row["status"] != "ok"
        elapsed = time.perf_counter() - t
        eta = elapsed / ran * (len(todo) - ran)
        note = f", {failed} failed" if failed else ""
        print(f"  cells {done_before + ran}/{total} done{note}, {ran / elapsed:.2f} cells/s, ETA {eta:.0f} s",
              file=sys.stderr, flush=True)
    return ran, failed


def main(args: argparse.Namespace) -> int:
    try:
        result = run(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(bench_rows.markdown(cells.table(result["cells"], result["rows"])))
    failed = [r for r in result["rows"].values() if r["status"] != "ok"]
    for r in failed:
        print(f"failed: {r['method']} L={r['window']} {r['init']} prompt {r['prompt']!r} seed {r['seed']}: "
              f"{r['error']}", file=sys.stderr)
    if args.csv:
        bench_rows.write_csv(cells.table(result["cells"], result["rows"]), args.csv)
    print(f"\n{result['ran']} cells run, {result['skipped']} already written; rows in {result['out']}", file=sys.stderr)
    return 1 if failed else 0
