"""Do a model's samples look like the emoji they were asked for? The nearest-emoji rate.

    python -m bench nearest-emoji --model tiny --model tiny-64 --data data/emoji32
    python -m bench nearest-emoji --model tiny --json rates.json     # the rates as JSON too

For every model, `--designs` emoji designs seen in training (a fixed random choice, skin-tone
variants left out) and every held-out design are drawn `--samples` times each from their
training prompt (name plus group words, as `scd_core.train.data` writes it) at the model's
own sampling settings (SCD-MC, L = 16: the same distribution as AR). Each sample is
average-pooled to the data's size (32 px for `data/emoji32`, so that models of every size are
compared alike) and its nearest render among all the renders in `--data` (pixel MSE) is
looked up. The top-1 rate is how often that render is the prompt's own design (any of its
skin-tone variants); chance is about 1 in 1,900 designs. The top-10 rate is how often the
prompt's own design is among the `TOP` nearest renders (chance about 0.27%: ten of the 3,655
renders). Held-out designs were never seen, so their rates say how far the prompt's words
alone carry.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

import scd_core
from scd_core.train.data import design_key, load_dataset

TOP = 10   # the wider rate: the prompt's own design among this many nearest renders


def pick_designs(meta: list[dict], count: int, seed: int) -> tuple[list[int], list[int]]:
    """Indices of `count` training designs (random, fixed by `seed`) and of every held-out design
    (skin-tone variants left out of both)."""
    plain = [i for i, m in enumerate(meta) if "skin tone" not in m["name"]]
    train = [i for i in plain if meta[i]["split"] == "train"]
    held = [i for i in plain if meta[i]["split"] == "val"]
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))[:count]
    return [train[int(k)] for k in order], held


def to_size(pixels: torch.Tensor, size: int) -> torch.Tensor:
    """[B, 3, S, S] in [0, 1] -> [B, 3, size, size] by average pooling (S a multiple of size)."""
    if pixels.shape[-1] % size:
        raise ValueError(f"--data: the model's {pixels.shape[-1]} px images are not a multiple of {size} px")
    return F.avg_pool2d(pixels, pixels.shape[-1] // size) if pixels.shape[-1] != size else pixels


@torch.no_grad()
def own_rates(model, meta: list[dict], renders: torch.Tensor, picks: list[int], samples: int,
              batch: int = 16, top: int = TOP) -> tuple[float, float]:
    """The fraction of samples whose nearest render is of the prompt's own design, and the
    fraction whose own design is among the `top` nearest renders."""
    keys = [design_key(m["name"]) for m in meta]
    flat = renders.flatten(1)                                            # [R, 3*s*s]
    settings = dict(getattr(model, "default_settings", {}))
    hits, hits_top, total = 0, 0, 0
    prompts = [meta[i]["prompt"] for i in picks for _ in range(samples)]
    owners = [keys[i] for i in picks for _ in range(samples)]
    for k in range(0, len(prompts), batch):
        run = scd_core.generate(model, prompts[k:k + batch], method="scd-mc", window=16, seed=k, **settings)
        pix = to_size(model.decode_pixels(run.tokens), renders.shape[-1]).flatten(1)
        first, among = nearest_hits(pix, flat, keys, owners[k:k + batch], top)
        hits, hits_top, total = hits + first, hits_top + among, total + len(pix)
    return hits / total, hits_top / total


def nearest_hits(pix: torch.Tensor, flat: torch.Tensor, keys: list[str], owners: list[str],
                 top: int = TOP) -> tuple[int, int]:
    """Samples pix [B, P] against renders flat [R, P] (keys[r]: render r's design): how many
    samples have their owner's design as the nearest render, and how many among the `top` nearest."""
    nearest = torch.cdist(pix, flat).topk(top, dim=1, largest=False).indices      # [B, top], nearest first
    first = sum(keys[row[0]] == owner for row, owner in zip(nearest.tolist(), owners))
    among = sum(any(keys[j] == owner for j in row) for row, owner in zip(nearest.tolist(), owners))
    return first, among


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="model name or folder (repeatable)")
    ap.add_argument("--data", default="data/emoji32", help="the renders to compare with (default data/emoji32)")
    ap.add_argument("--designs", type=int, default=64, help="training designs drawn from (default 64)")
    ap.add_argument("--samples", type=int, default=2, help="samples per design (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="also write the rates here, one entry per model")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    images, meta = load_dataset(args.data)
    renders = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255
    train, held = pick_designs(meta, args.designs, args.seed)
    print(f"# {len(renders)} renders at {renders.shape[-1]} px; {len(train)} training and {len(held)} held-out "
          f"designs x {args.samples} samples")
    print(f"| model | training designs, top 1 | held-out, top 1 | training, top {TOP} | held-out, top {TOP} |\n"
          "|---|---|---|---|---|")
    out = {}
    for name in args.model:
        model = scd_core.load_model(name)
        (train1, train10), (held1, held10) = [own_rates(model, meta, renders, picks, args.samples)
                                              for picks in (train, held)]
        out[name] = {"top1_train": train1, "top1_heldout": held1, f"top{TOP}_train": train10,
                     f"top{TOP}_heldout": held10, "train_designs": len(train), "heldout_designs": len(held),
                     "samples": args.samples}
        print(f"| {name} | {train1:.1%} | {held1:.1%} | {train10:.1%} | {held10:.1%} |", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
