"""What a benchmark measures and prints: one run's metrics, a table row summarising many
runs, the markdown table and the CSV files; and the pieces of a benchmark's command line that
every runner shares (model arguments, prompts, settings). `scd_core.bench` (one process) and
`scd_core.distributed` (cells on a Ray cluster) both build their tables from these.
"""
from __future__ import annotations

import argparse
import csv
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import scd_core
from scd_core import trace
from scd_core.prompts import Prompt, load_prompt_records
from scd_core.protocols import optional
from scd_core.settings import Settings

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


def write_csv(rows: list, path: Path, columns: list[str] = COLUMNS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for r in rows:
            writer.writerow(r if isinstance(r, dict) else asdict(r))
