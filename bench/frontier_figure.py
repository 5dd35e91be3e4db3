"""The frontier: coupling's lead at the best window against how well a prior draws.

    python -m bench frontier-figure ~/scd-frontier/results.csv --point "tiny=1.30,0.20" \
        --out docs/img/frontier.png

One point per trained prior: x is its nearest-emoji rate (`python -m bench nearest-emoji`, top 10,
training designs: how often its own design is among the ten renders nearest a sample), y its
lead at its best window (SJD's passes / SCD-MC's on the held-out prompts; `results.csv` from
`python -m bench train-frontier`). `--point NAME=LEAD,RATE` adds a prior measured elsewhere. The two
goals are drawn as dashed lines: a lead of `--lead-goal` and the drawing rate `--rate-goal`
(`tiny`'s); a prior up and to the right of both meets them. `--reference NAME=LEAD` draws a
model with no emoji rate (a real model's lead, e.g. Lumina-mGPT's 1.82x at L 64 in the paper)
as a dotted line across. Prints the points as a table, and with `--details` every column of the
results CSVs as the markdown table of docs/embedded-models.md.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

from bench.figures import scatter


def read_points(path: Path, rate_column: str) -> list[tuple[str, float, float]]:
    """(name, rate, lead) for each row of a `train_frontier.py` results CSV."""
    with path.open(newline="") as f:
        return [(r["prior"], float(r[rate_column]), float(r["best_lead"])) for r in csv.DictReader(f)]


def details_table(paths: list[Path]) -> str:
    """Every prior of the results CSVs as a markdown table: architecture, steps, NLL, lead at
    each window, nearest-emoji rates and the trainer's command."""
    lines = ["| prior | attention | d_model x layers | steps | held-out NLL | lead at L 16 / 32 / 64 | "
             "nearest top 1, training / held-out | top 10, training / held-out | command |",
             "|---|---|---|---|---|---|---|---|---|"]
    for path in paths:
        with path.open(newline="") as f:
            for r in csv.DictReader(f):
                steps = r["step"] if r["step"] == r["steps"] else f"{r['step']} of {r['steps']}"
                nll = f"{float(r['val_nll']):.3f}" if r["val_nll"] else "not evaluated"
                leads = " / ".join(f"{float(r[f'lead_L{w}']):.2f}x" for w in (16, 32, 64))
                rates = [f"{float(r[k]):.1%}" for k in ("top1_train", "top1_heldout", "top10_train", "top10_heldout")]
                lines.append(f"| `{r['prior']}` | {r['attention']} ({r['local_rows']} row, {r['local_cols']} col) | "
                             f"{r['d_model']} x {r['layers']} | {steps} | {nll} | {leads} | "
                             f"{rates[0]} / {rates[1]} | {rates[2]} / {rates[3]} | `python {r['command']}` |")
    return "\n".join(lines)


def parse_pair(item: str, what: str) -> tuple[str, list[float]]:
    name, sep, values = item.partition("=")
    try:
        numbers = [float(v) for v in values.split(",")]
    except ValueError:
        numbers = []
    if not sep or not name or not numbers:
        raise ValueError(f"{what}: expected NAME={'LEAD,RATE' if what == '--point' else 'LEAD'}, got {item!r}")
    return name, numbers


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="*", type=Path, help="results CSVs of `python -m bench train-frontier`")
    ap.add_argument("--point", action="append", default=[], metavar="NAME=LEAD,RATE",
                    help="a prior measured elsewhere: its lead at its best window and its rate (0-1)")
    ap.add_argument("--reference", action="append", default=[], metavar="NAME=LEAD",
                    help="a model without an emoji rate, drawn as a line at its lead")
    ap.add_argument("--rate", default="top10_train",
                    help="the results column on x (default top10_train; top1_train, top10_heldout, ...)")
    ap.add_argument("--lead-goal", type=float, default=1.6)
    ap.add_argument("--rate-goal", type=float, default=None, help="the drawing goal on x (e.g. tiny's rate)")
    ap.add_argument("--details", action="store_true", help="also print every column of the results as markdown")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--title", default="lead at the best window against the nearest-emoji rate")
    ap.add_argument("--leave-out", action="append", default=[], metavar="NAME",
                    help="a prior printed in the table but not drawn (e.g. one far off the others' scale)")
    args = ap.parse_args(argv)
    points = []
    for path in args.results:
        try:
            points += read_points(path, args.rate)
        except KeyError as err:
            ap.error(f"--rate: {path} has no column {err}")
    try:
        for item in args.point:
            name, numbers = parse_pair(item, "--point")
            if len(numbers) != 2:
                raise ValueError(f"--point: expected NAME=LEAD,RATE, got {item!r}")
            points.append((name, numbers[1], numbers[0]))
        references = []
        for item in args.reference:
            name, numbers = parse_pair(item, "--reference")
            references.append((name, numbers[0]))
    except ValueError as err:
        ap.error(str(err))
    if not points:
        ap.error("no points: give a results CSV or --point")
    print(f"| prior | lead at the best window | nearest-emoji rate ({args.rate}) | both goals |\n|---|---|---|---|")
    for name, x, y in points:
        both = "n/a (no --rate-goal)" if args.rate_goal is None else \
            "yes" if y >= args.lead_goal and x >= args.rate_goal else "no"
        print(f"| {name} | {y:.2f}x | {x:.1%} | {both} |")
    if args.details and args.results:
        print("\n" + details_table(args.results))
    unknown = sorted(set(args.leave_out) - {name for name, _, _ in points})
    if unknown:
        ap.error(f"--leave-out: no prior named {unknown}")
    drawn = [p for p in points if p[0] not in args.leave_out]
    scatter(drawn, references, args.out, args.title, args.lead_goal, args.rate_goal)
    print(f"wrote {args.out}")
