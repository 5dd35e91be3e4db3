"""When coupling helps: the race's figures on each model at the page's race defaults (its first
example prompt, seed 0, K samples, the page's window and draft init, the model's own sampling),
as the page's race gives them: SJD's and SCD-MC's NFE (mean, min-max), the lead, the draft
stability, and how far p moves when one token of an AR sample changes
(`scd_core.race.context_sensitivity`).

    python -m bench race-figures                       # texture, tiny, tiny-video; about 2 min
    python -m bench race-figures --models tiny --samples 16
"""
from __future__ import annotations

import argparse
import math

import torch

import scd_core
from demo.models import page_defaults
from scd_core import race


def figures(name: str, samples: int) -> str:
    """The table's row for model `name`."""
    model = scd_core.load_model(name)
    page = page_defaults(name)
    settings = scd_core.Settings.for_model(model, window=page["window"], init=page["init"])
    the = race.Race(model.example_prompts[0], settings, seed=0)
    runs = {m: list(race.decode(model, the, m, samples))[-1] for m in ("ar", "sjd", "scd-mc")}
    sjd, mc = ({s.method: s for s in race.summarise(runs, greedy=False)}[m] for m in ("sjd", "scd-mc"))
    moved = race.context_sensitivity(model, the, sample=runs["ar"].tokens()[0])
    tokens = math.prod(int(g) for g in model.grid)
    spread = lambda s: f"{s.nfe.mean:.1f} ({s.nfe.low:.0f}-{s.nfe.high:.0f})"      # noqa: E731
    return (f"| `{name}` (\"{the.prompt}\", {tokens} tokens) | {spread(sjd)} | {spread(mc)} | "
            f"{sjd.nfe.mean / mc.nfe.mean:.2f}x | {sjd.draft_stability.mean:.2f} / {mc.draft_stability.mean:.2f} | "
            f"{moved.tv_next:.2f} / {moved.tv_further:.2f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="texture,tiny,tiny-video")
    ap.add_argument("--samples", type=int, default=8, help="K, the race's samples per method (default 8)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    if args.samples < 1:
        ap.error(f"--samples: expected an integer >= 1, got {args.samples}")
    torch.set_num_threads(args.threads)
    print("| model | SJD mean NFE (min-max) | SCD-MC mean NFE (min-max) | SJD / SCD-MC | "
          "draft stability SJD / SCD-MC | TV of p, next / further on |\n|---|---|---|---|---|---|")
    for name in args.models.split(","):
        print(figures(name, args.samples), flush=True)
