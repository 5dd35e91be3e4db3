"""Coupling's lead against the window, from benchmark CSVs (`python -m scd_core.bench --csv`).

    python -m bench lead-figure tiny=bench_out/tiny.csv texture=bench_out/texture.csv \
        --out docs/img/lead.png --compression-out docs/img/compression.png

The lead at window L is SJD's passes over SCD-MC's (equivalently SCD-MC's step compression over
SJD's): how many times fewer passes coupling needs. Prints the table (every method's step
compression and the lead, per model and window); `--out` draws one line per model, and
`--compression-out` a second chart of every method's step compression. Rows with another
init or tree than `--init` / 1x0 are left out.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

from bench.figures import line_chart


def read(path: Path, init: str) -> dict[tuple[str, int], float]:
    """(method, window) -> step compression."""
    out = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if row["method"] != "ar" and row["init"] == init and row.get("tree", "1x0") == "1x0":
                out[(row["method"], int(row["window"]))] = float(row["step_compression"])
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="NAME=CSV")
    ap.add_argument("--init", default="random")
    ap.add_argument("--windows", default=None, help="only these windows L (comma-separated; default every one)")
    ap.add_argument("--out", type=Path, default=None, help="the lead's chart (PNG; default: the table alone)")
    ap.add_argument("--compression-out", type=Path, default=None)
    ap.add_argument("--title", default="SCD-MC's lead: SJD's passes / SCD-MC's passes")
    args = ap.parse_args(argv)
    tables = {}
    for item in args.runs:
        name, sep, path = item.partition("=")
        if not sep:
            ap.error(f"expected NAME=CSV, got {item!r}")
        tables[name] = read(Path(path), args.init)
    windows = sorted({w for t in tables.values() for _, w in t})
    if args.windows:
        windows = [w for w in windows if str(w) in args.windows.split(",")]
    lead, compression = {}, {}
    print("| model | L | SJD | SCD-MC | SCD-Gumbel | lead (SCD-MC / SJD) |\n|---|---|---|---|---|---|")
    for name, t in tables.items():
        pts = []
        for w in windows:
            sjd, mc, gs = t.get(("sjd", w)), t.get(("scd-mc", w)), t.get(("scd-gumbel", w))
            if sjd and mc:
                pts.append((w, mc / sjd))
            if not (sjd or mc or gs):
                continue                                 # this model was not run at this window
            print(f"| {name} | {w} | {sjd or float('nan'):.2f}x | {mc or float('nan'):.2f}x | "
                  f"{gs or float('nan'):.2f}x | {mc / sjd if sjd and mc else float('nan'):.2f}x |")
        lead[name] = pts
        for method in ("sjd", "scd-mc", "scd-gumbel"):
            got = [(w, t[(method, w)]) for w in windows if (method, w) in t]
            if got:
                compression[f"{name} {method}"] = got
    if args.out:
        line_chart(lead, args.out, args.title, "window L", windows)
        print(f"wrote {args.out}")
    if args.compression_out:
        line_chart(compression, args.compression_out, "step compression (AR's passes / the method's)", "window L",
                   windows)
        print(f"wrote {args.compression_out}")
