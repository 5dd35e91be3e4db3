"""How far p moves along the window when one token is redrawn: the influence curve of a model.

    python -m bench influence-curve --model tiny --model texture --out docs/img/influence.png
    python -m bench influence-curve --model tiny-64 --prompts scd_core/assets/tiny64/heldout_prompts.txt

For each model: AR samples at the model's own sampling settings (`default_settings`; top-k 100
and CFG 3 for a model without them), one per prompt and seed. Then, at every `--every`-th
position n of every sample, the token at n is redrawn from its own p (an independent draw,
which is the same token with probability sum(p^2)) and p at n + d is recomputed, the tokens
in between kept; the curve is the mean total variation TV(p_{n+d}, p'_{n+d}) over samples and
positions n, for d = 1 .. `--max-d`. Its shape is what SCD's coupling lives on: a coupled
draft at n + d survives a redrawn token at n with probability 1 - TV. A model whose p depends
only on its left and upper neighbours (`texture`) has TV 0 except at d = 1 and d = W; a model
that reads its whole prefix keeps a tail at every d.

Also printed per model: the mean entropy of p, the collision probability sum(p^2), how often
the redraw changes the token, and the mean TV given that it did. `--csv` writes one row per
model and d; `--out` draws the curves (PNG, Pillow only).
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

import torch

import scd_core
from bench.figures import line_chart
from scd_core.bench import parse_model_args
from scd_core.prompts import load_prompt_records
from scd_core.protocols import optional
from scd_core.sampling import SamplingConfig, processed_probs

PROMPTS = ["red apple", "grinning face", "cat face", "flag france", "rocket", "pizza", "dog face", "red heart"]


def model_settings(model, top_k: int | None, cfg_scale: float | None) -> dict:
    """The model's own sampling settings, else top-k 100 and CFG 3; top_k / cfg_scale override."""
    settings = dict(top_k=100, top_p=1.0, temperature=1.0, cfg_scale=3.0)
    settings.update({k: v for k, v in optional(model, "default_settings", {}).items() if k in settings})
    settings.update({k: v for k, v in (("top_k", top_k), ("cfg_scale", cfg_scale)) if v is not None})
    return settings


@torch.no_grad()
def influence(model, prompts: list[str], settings: dict, max_d: int, every: int, seed: int) -> dict:
    """Mean TV(p_{n+d}, p_{n+d} | token n redrawn) for d = 1..max_d, and the statistics above.

    One session holds the AR sample; for each position n (increasing), one window of the
    sample with token n replaced gives p' at n+1..n+max_d, and a second window of the sample
    itself gives p there and puts the sample back into the cache."""
    run = scd_core.generate(model, prompts, method="ar", seed=seed, **settings)
    tokens = run.tokens
    rows, n_tokens = tokens.shape
    sampling = SamplingConfig(temperature=settings["temperature"], top_k=settings["top_k"], top_p=settings["top_p"])
    session = model.start(prompts, settings["cfg_scale"])
    zero = torch.zeros(rows, dtype=torch.long)
    logits = torch.cat([session.first_logits.unsqueeze(1), session.step(tokens[:, :-1], zero)], 1)
    p = processed_probs(logits, sampling)                                  # [B, N, V]
    gen = torch.Generator().manual_seed(seed + 1)
    redrawn = torch.multinomial(p.reshape(-1, p.shape[-1]), 1, generator=gen).view(rows, n_tokens)
    total, count = torch.zeros(max_d, dtype=torch.float64), torch.zeros(max_d, dtype=torch.float64)
    total_changed, count_changed = torch.zeros(max_d, dtype=torch.float64), torch.zeros(max_d, dtype=torch.float64)
    for site in range(0, n_tokens - 1, every):
        width = min(max_d, n_tokens - 1 - site)                           # p exists up to position N-1
        window = tokens[:, site:site + width].clone()
        window[:, 0] = redrawn[:, site]
        start = torch.full((rows,), site, dtype=torch.long)
        moved = processed_probs(session.step(window, start), sampling)     # p' at site+1 .. site+width
        kept = processed_probs(session.step(tokens[:, site:site + width], start), sampling)
        tv = 0.5 * (moved - kept).abs().sum(-1).double()                   # [B, width]
        changed = (redrawn[:, site] != tokens[:, site]).unsqueeze(1)
        total[:width] += tv.sum(0)
        count[:width] += rows
        total_changed[:width] += (tv * changed).sum(0)
        count_changed[:width] += changed.sum()
    return {"tv": (total / count.clamp(min=1)).tolist(),
            "tv_if_changed": (total_changed / count_changed.clamp(min=1)).tolist(),
            "entropy": float(-(p * p.clamp_min(1e-30).log()).sum(-1).mean()),
            "collision": float((p * p).sum(-1).mean()),
            "changed": float((redrawn != tokens).float().mean()),
            "width": int(model.grid[-1]), "tokens": n_tokens, "samples": rows}


def plot(curves: dict[str, list[float]], path: Path, title: str) -> None:
    """The influence curves: TV against d = 1 .. max_d."""
    max_d = max(len(c) for c in curves.values())
    line_chart({name: [(d + 1, v) for d, v in enumerate(values)] for name, values in curves.items()}, path, title,
               "d: positions after the redrawn token", [1] + list(range(4, max_d + 1, 4)))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="model name or folder (repeatable)")
    ap.add_argument("--model-arg", action="append", default=[], metavar="KEY=VALUE",
                    help="loader argument for every model, e.g. grid=8,8")
    ap.add_argument("--prompts", default=None,
                    help="a file with one prompt per line (default: each model's example prompts, at most 8)")
    ap.add_argument("--max-prompts", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=2, help="AR samples per prompt")
    ap.add_argument("--max-d", type=int, default=32)
    ap.add_argument("--every", type=int, default=2, help="redraw every n-th position (default 2)")
    ap.add_argument("--top-k", type=int, default=None, help="default: the model's (else 100)")
    ap.add_argument("--cfg-scale", type=float, default=None, help="default: the model's (else 3)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--csv", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help="PNG of the curves")
    ap.add_argument("--title", default="mean TV of p at n + d after the token at n is redrawn")
    args = ap.parse_args(argv)
    for name in ("seeds", "every", "threads", "max_d", "max_prompts"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: expected an integer >= 1, got {getattr(args, name)}")
    torch.set_num_threads(args.threads)
    results = {}
    try:
        for name in args.model:
            model = scd_core.load_model(name, **parse_model_args(args.model_arg))
            default = list(optional(model, "example_prompts") or PROMPTS)
            prompts = [p.text for p in load_prompt_records(args.prompts, [], default=default)][: args.max_prompts]
            settings = model_settings(model, args.top_k, args.cfg_scale)
            batch = [p for p in prompts for _ in range(args.seeds)]
            results[name] = influence(model, batch, settings, args.max_d, args.every, seed=0)
            r = results[name]
            print(f"# {name}: {r['samples']} samples of {r['tokens']} tokens (W = {r['width']}), {settings}")
            print(f"  entropy {r['entropy']:.3f} nats, collision {r['collision']:.3f}, "
                  f"redraw changes the token {r['changed']:.0%}")
            print("  TV  d=1..: " + " ".join(f"{v:.3f}" for v in r["tv"]))
            print("  TV | changed: " + " ".join(f"{v:.3f}" for v in r["tv_if_changed"]), flush=True)
    except ValueError as err:
        ap.error(str(err))
    if args.csv:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["model", "d", "tv", "tv_if_changed", "entropy", "collision", "changed", "width"])
            for name, r in results.items():
                for d, (tv, tvc) in enumerate(zip(r["tv"], r["tv_if_changed"]), 1):
                    out.writerow([name, d, f"{tv:.5f}", f"{tvc:.5f}", f"{r['entropy']:.4f}", f"{r['collision']:.4f}",
                                  f"{r['changed']:.4f}", r["width"]])
    if args.out:
        plot({f"{n} (W={r['width']})": r["tv"] for n, r in results.items()}, args.out, args.title)
        print(f"wrote {args.out}")
