"""The frontier: coupling's lead at the best window against how well a prior draws.

    python scripts/frontier_figure.py ~/scd-frontier/results.csv --point "tiny=1.30,0.20" \
        --out docs/img/frontier.png

One point per trained prior: x is its nearest-emoji rate (`scripts/nearest_emoji.py`, top 10,
training designs: how often its own design is among the ten renders nearest a sample), y its
lead at its best window (SJD's passes / SCD-MC's on the held-out prompts; `results.csv` from
`scripts/train_frontier.py`). `--point NAME=LEAD,RATE` adds a prior measured elsewhere. The two
goals are drawn as dashed lines: a lead of `--lead-goal` and the drawing rate `--rate-goal`
(`tiny`'s); a prior up and to the right of both meets them. `--reference NAME=LEAD` draws a
model with no emoji rate (a real model's lead, e.g. Lumina-mGPT's 1.82x at L 64 in the paper)
as a dotted line across. Prints the points as a table, and with `--details` every column of the
results CSVs as the markdown table of docs/embedded-models.md.
"""
from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from influence_curve import COLOURS  # noqa: E402


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


def scatter(points: list[tuple[str, float, float]], references: list[tuple[str, float]], path: Path,
            title: str, lead_goal: float, rate_goal: float | None, size=(820, 460)) -> None:
    """Labelled points (x: rate in [0, 1], y: lead) with the goals and references as lines (Pillow only)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    left, right, top, bottom = 60, 30, 34, 46
    w, h = size[0] - left - right, size[1] - top - bottom
    x_max = max([x for _, x, _ in points] + [rate_goal or 0.0, 0.05])
    x_step = next(s for s in (0.01, 0.02, 0.05, 0.1, 0.2) if x_max / s <= 8)
    x_max = x_step * math.ceil(x_max / x_step + 0.25)
    ys = [y for _, _, y in points] + [y for _, y in references] + [lead_goal]
    y_lo = max(0.0, math.floor(min(ys) * 4 - 1) / 4)
    y_hi = math.ceil(max(ys) * 4 + 1) / 4

    def xy(x: float, y: float) -> tuple[float, float]:
        return left + w * x / x_max, top + h * (1 - (y - y_lo) / (y_hi - y_lo))

    draw.text((left, 10), title, fill="black")
    for i in range(int(round((y_hi - y_lo) / 0.25)) + 1):
        y = y_lo + 0.25 * i
        py = xy(0, y)[1]
        draw.line([(left, py), (left + w, py)], fill=(230, 230, 230))
        draw.text((8, py - 6), f"{y:.2f}x", fill="black")
    for i in range(int(round(x_max / x_step)) + 1):
        px = xy(i * x_step, y_lo)[0]
        draw.line([(px, top + h), (px, top + h + 4)], fill="black")
        draw.text((px - 8, top + h + 8), f"{i * x_step:.0%}", fill="black")
    draw.text((left + w // 2 - 150, size[1] - 18), "nearest-emoji rate (own design among the 10 nearest)",
              fill="black")
    draw.rectangle([left, top, left + w, top + h], outline="black")

    def dashed(a: tuple[float, float], b: tuple[float, float], colour, dash: int) -> None:
        length = math.dist(a, b)
        for k in range(0, int(length), 2 * dash):
            t0, t1 = k / length, min(1.0, (k + dash) / length)
            draw.line([(a[0] + (b[0] - a[0]) * t0, a[1] + (b[1] - a[1]) * t0),
                       (a[0] + (b[0] - a[0]) * t1, a[1] + (b[1] - a[1]) * t1)], fill=colour, width=1)

    grey = (120, 120, 120)
    y = xy(0, lead_goal)[1]
    dashed((left, y), (left + w, y), grey, 6)
    draw.text((left + w - 110, y + 3), f"lead goal {lead_goal:.2f}x", fill=grey)
    if rate_goal is not None:
        x = xy(rate_goal, y_lo)[0]
        dashed((x, top), (x, top + h), grey, 6)
        draw.text((x + 4, top + 4), f"draws like tiny ({rate_goal:.0%})", fill=grey)
    for name, lead in references:
        y = xy(0, lead)[1]
        dashed((left, y), (left + w, y), (150, 60, 150), 2)
        label = f"{name} {lead:.2f}x"
        draw.text((left + w - 6 - 6 * len(label), y - 14), label, fill=(150, 60, 150))
    for k, (name, x, y) in enumerate(points):
        colour = COLOURS[k % len(COLOURS)]
        px, py = xy(x, y)
        draw.ellipse([px - 5, py - 5, px + 5, py + 5], fill=colour)
        draw.text((px + 8, py - 6), name, fill="black")
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="*", type=Path, help="results CSVs of scripts/train_frontier.py")
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


if __name__ == "__main__":
    main()
