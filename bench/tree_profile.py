"""Draft trees against the chain: passes per image and the acceptance profile that says why.

    python -m bench tree-profile                       # tiny, tiny-video, texture; 8 seeds
    python -m bench tree-profile --models tiny --seeds 16 --windows 16,19

For each model (its default settings), method (SJD, SCD-MC), window L (tokens fed per pass)
and tree (k x depth; 1x0 is the chain), the mean NFE over the seeds with its standard error,
how often the first draft after the last committed token is rejected (where a tree's
siblings get their chance), and how often a sibling is taken instead. One thread.
"""
from __future__ import annotations

import argparse
import statistics

import torch

import scd_core


def profile(model, prompt: str, settings: scd_core.Settings, seeds: list[int]) -> dict:
    nfe, passes, first_rejected, sibling = [], 0, 0, 0
    for seed in seeds:
        records = list(scd_core.stream(model, [prompt], settings=settings, seed=seed))
        nfe.append(records[-1].nfe)
        for it in records[1:]:
            passes += 1
            if it.branches is not None and it.branches.shape[1]:
                taken = int(it.branches[0, 0])           # candidate taken at the first draft (-1: none)
                first_rejected += taken != 0
                sibling += taken > 0
            else:
                first_rejected += int(it.num_accepted[0]) == 0
    se = statistics.stdev(nfe) / len(nfe) ** 0.5 if len(nfe) > 1 else 0.0
    return dict(nfe=statistics.mean(nfe), se=se, first_rejected=first_rejected / passes, sibling=sibling / passes)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tiny,tiny-video,texture")
    ap.add_argument("--methods", default="sjd,scd-mc")
    ap.add_argument("--windows", default="16,19")
    ap.add_argument("--trees", default="1x0,2x1,4x1,2x2")
    ap.add_argument("--seeds", type=int, default=8)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    trees = [tuple(int(v) for v in t.split("x")) for t in args.trees.split(",")]
    seeds = [1000 * i for i in range(args.seeds)]       # spaced: row streams never overlap
    print("| model | method | L | tree | NFE (se) | first draft rejected | sibling taken |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        model = scd_core.load_model(name)
        base = scd_core.Settings.for_model(model)
        prompt = scd_core.protocols.optional(model, "example_prompts", ["red apple"])[0]
        for method in args.methods.split(","):
            for L in (int(w) for w in args.windows.split(",")):
                for tree in trees:
                    try:
                        settings = base.replace(method=method, window=L, tree=tree)
                    except ValueError:
                        continue                         # the tree does not fit this window
                    r = profile(model, prompt, settings, seeds)
                    print(f"| {name} | {method} | {L} | {tree[0]}x{tree[1]} | {r['nfe']:.2f} ({r['se']:.2f}) | "
                          f"{r['first_rejected']:.0%} | {r['sibling']:.0%} |", flush=True)
