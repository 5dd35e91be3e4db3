"""The benchmark's cells and the resumable file of their rows (no Ray here).

A cell is one (prompt, seed, method, window, init) of the benchmark's grid: one `generate`
call (`--batch` rows, the prompt repeated), as the single-process bench runs it. Its row
holds the cell's keys, its metrics (`bench_rows.RunMetrics`), a sha256 of its tokens, and how it
ended: "ok", or "failed" with the error of its last attempt. A row's tokens depend only on
its prompt, seed and settings, so a cell gives the same row (but its times) on any worker.

The row file is a CSV, appended to and flushed one row at a time. On a restart, the cells
with an "ok" row are skipped, failed cells are tried again (their new row comes later in the
file; the last row of a cell counts), and a row cut short by a killed writer is dropped.
The file's first row names its configuration (model, loader arguments, batch, sampling): a
file of another configuration is refused, never mixed in.
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch

import scd_core
from scd_core import bench_rows
from scd_core.settings import Settings

KEYS = ["prompt", "category", "seed", "method", "window", "init"]
METRICS = ["nfe", "step_compression", "mean_accepted_length", "acceptance_rate", "draft_stability",
           "wall_s", "step_s", "engine_s"]
COLUMNS = ["config"] + KEYS + METRICS + ["tokens_sha256", "status", "attempts", "error"]
DEFAULT_RETRIES = 2          # attempts after the first, for a cell whose decode raised


@dataclass(frozen=True)
class Cell:
    prompt: str
    category: str
    seed: int
    method: str
    window: int          # 1 for AR, as the table labels it
    init: str            # "-" for AR

    @property
    def key(self) -> tuple:
        return (self.prompt, self.seed, self.method, self.window, self.init)

    def settings(self, base: Settings) -> Settings:
        """This cell's settings: the single-process bench's for the same method, window and init."""
        if self.method == "ar":
            return base.replace(method="ar", init="random")
        return base.replace(method=self.method, window=self.window, init=self.init)


@dataclass(frozen=True)
class Spec:
    """What every worker needs to decode any cell: the model, how to load it, the base settings."""
    model: str
    load_kwargs: dict
    base: Settings
    batch: int = 1
    threads: int = 1

    @property
    def config(self) -> str:
        """A short digest of everything besides the cell that a row's tokens depend on."""
        text = json.dumps([self.model, sorted((k, repr(v)) for k, v in self.load_kwargs.items()),
                           self.batch, self.base.as_dict()], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def load(self):
        torch.set_num_threads(self.threads)
        return scd_core.load_model(self.model, **self.load_kwargs)


def grid(records, seeds: int, methods: list[str], windows: list[int], inits: list[str]) -> list[Cell]:
    """Every cell, in the single-process bench's order (AR first, then method x window x
    init, each prompt-major over seeds)."""
    cases = [("ar", 1, "-")] if "ar" in methods else []
    cases += [(m, w, i) for m in methods if m != "ar" for w in windows for i in inits]
    return [Cell(p.text, p.category, s, m, w, i) for m, w, i in cases for p in records for s in range(seeds)]


def token_hash(tokens: torch.Tensor) -> str:
    """sha256 of a run's tokens [B, N] as little-endian int64, row-major."""
    return hashlib.sha256(tokens.to(torch.int64).contiguous().cpu().numpy().astype("<i8").tobytes()).hexdigest()


def decode(model, spec: Spec, cell: Cell) -> dict:
    """Run one cell; its metrics and token hash."""
    run = scd_core.generate(model, [cell.prompt] * spec.batch, seed=cell.seed, settings=cell.settings(spec.base))
    m = bench_rows.RunMetrics.of(run)
    return {"nfe": m.nfe, "step_compression": m.step_compression, "mean_accepted_length": m.mean_accepted_length,
            "acceptance_rate": m.acceptance_rate, "draft_stability": m.draft_stability, "wall_s": m.wall_time,
            "step_s": m.step_time, "engine_s": m.engine_time, "tokens_sha256": token_hash(run.tokens)}


def attempt(decode_fn, model, spec: Spec, cell: Cell, retries: int = DEFAULT_RETRIES) -> dict:
    """The cell's row: decoded, tried again up to `retries` times if it raised, else "failed"
    with the last error (never dropped)."""
    row = {"config": spec.config, **{k: getattr(cell, k) for k in KEYS}}
    error = None
    for n in range(1, retries + 2):
        try:
            return {**row, **decode_fn(model, spec, cell), "status": "ok", "attempts": n, "error": ""}
        except Exception as exc:                      # noqa: BLE001 - reported in the row
            error = f"{type(exc).__name__}: {exc}"
    return {**row, **{k: "" for k in METRICS}, "tokens_sha256": "", "status": "failed", "attempts": retries + 1,
            "error": error}


class RowFile:
    """The CSV of cell rows: read what a killed or finished run left, then append row by row."""

    def __init__(self, path: Path, config: str) -> None:
        self.path, self.config = Path(path), config
        self.rows: dict[tuple, dict] = {}                # cell key -> its last complete row
        kept = self._read()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")          # rewritten without a cut-short row
        with tmp.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(kept)
        os.replace(tmp, self.path)
        self._file = self.path.open("a", newline="", encoding="utf-8")
        self._writer = csv.DictWriter(self._file, fieldnames=COLUMNS)

    def _read(self) -> list[dict]:
        if not self.path.exists():
            return []
        with self.path.open(newline="", encoding="utf-8") as f:
            rows = [r for r in csv.DictReader(f) if _complete(r)]
        other = {r["config"] for r in rows} - {self.config}
        if other:
            raise ValueError(f"--out: {self.path} holds rows of another configuration (model, loader arguments, "
                             f"batch or sampling differ); choose another --out")
        for r in rows:
            self.rows[_key(r)] = r
        return rows

    def done(self, cell: Cell) -> bool:
        row = self.rows.get(cell.key)
        return row is not None and row["status"] == "ok"

    def append(self, row: dict) -> None:
        row = {k: _text(row[k]) for k in COLUMNS}
        self._writer.writerow(row)
        self._file.flush()
        os.fsync(self._file.fileno())
        self.rows[_key(row)] = row

    def close(self) -> None:
        self._file.close()


def _text(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _complete(row: dict) -> bool:
    """A row a killed writer did not cut short: every column, a known status."""
    if None in row or any(row.get(k) is None for k in COLUMNS):
        return False
    if row["status"] == "ok":
        return len(row["tokens_sha256"]) == 64
    return row["status"] == "failed"


def _key(row: dict) -> tuple:
    return (row["prompt"], int(row["seed"]), row["method"], int(row["window"]), row["init"])


def metrics_of(row: dict) -> bench_rows.RunMetrics:
    f = lambda k: float(row[k])  # noqa: E731
    return bench_rows.RunMetrics(f("wall_s"), f("step_s"), f("engine_s"), int(float(row["nfe"])), f("step_compression"),
                            f("mean_accepted_length"), f("acceptance_rate"), f("draft_stability"))


def table(cells: list[Cell], rows: dict[tuple, dict]) -> list[bench_rows.Row]:
    """The single-process bench's table from the cells' "ok" rows (a case with a failed cell
    averages its other cells; a case with none is left out)."""
    cases: dict[tuple, list[bench_rows.RunMetrics]] = {}
    for cell in cells:
        row = rows.get(cell.key)
        runs = cases.setdefault((cell.method, cell.window, cell.init), [])
        if row is not None and row["status"] == "ok":
            runs.append(metrics_of(row))
    ar = cases.get(("ar", 1, "-")) or []
    ar_wall = statistics.fmean(r.wall_time for r in ar) if ar else float("nan")
    return [bench_rows.summarise(m, w, i, runs, ar_wall) for (m, w, i), runs in cases.items() if runs]
