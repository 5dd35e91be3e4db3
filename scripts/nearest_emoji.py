"""Do a model's samples look like the emoji they were asked for? The nearest-emoji rate.

    python scripts/nearest_emoji.py --model tiny --model tiny-64 --data data/emoji32

For every model, `--designs` emoji designs seen in training (a fixed random choice, skin-tone
variants left out) and every held-out design are drawn `--samples` times each from their
training prompt (name plus group words, as `scd_core.train.data` writes it) at the model's
own sampling settings (SCD-MC, L = 16: the same distribution as AR). Each sample is
average-pooled to the data's size (32 px for `data/emoji32`, so that models of every size are
compared alike) and its nearest render among all the renders in `--data` (pixel MSE) is
looked up. The rate is how often that render is the prompt's own design (any of its
skin-tone variants); chance is about 1 in 1,900 designs. Held-out designs were never seen,
so their rate says how far the prompt's words alone carry.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import scd_core  # noqa: E402
from scd_core.train.data import design_key, load_dataset  # noqa: E402


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
def own_rate(model, meta: list[dict], renders: torch.Tensor, picks: list[int], samples: int,
             batch: int = 16) -> float:
    """The fraction of samples whose nearest render is of the prompt's own design."""
    keys = [design_key(m["name"]) for m in meta]
    flat = renders.flatten(1)                                            # [R, 3*s*s]
    settings = dict(getattr(model, "default_settings", {}))
    hits, total = 0, 0
    prompts = [meta[i]["prompt"] for i in picks for _ in range(samples)]
    owners = [keys[i] for i in picks for _ in range(samples)]
    for k in range(0, len(prompts), batch):
        run = scd_core.generate(model, prompts[k:k + batch], method="scd-mc", window=16, seed=k, **settings)
        pix = to_size(model.decode_pixels(run.tokens), renders.shape[-1]).flatten(1)
        nearest = torch.cdist(pix, flat).argmin(1)
        hits += sum(keys[int(j)] == owner for j, owner in zip(nearest, owners[k:k + batch]))
        total += len(nearest)
    return hits / total


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="model name or folder (repeatable)")
    ap.add_argument("--data", default="data/emoji32", help="the renders to compare with (default data/emoji32)")
    ap.add_argument("--designs", type=int, default=64, help="training designs drawn from (default 64)")
    ap.add_argument("--samples", type=int, default=2, help="samples per design (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    images, meta = load_dataset(args.data)
    renders = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255
    train, held = pick_designs(meta, args.designs, args.seed)
    print(f"# {len(renders)} renders at {renders.shape[-1]} px; {len(train)} training and {len(held)} held-out "
          f"designs x {args.samples} samples")
    print("| model | training designs | held-out designs |\n|---|---|---|")
    for name in args.model:
        model = scd_core.load_model(name)
        rates = [own_rate(model, meta, renders, picks, args.samples) for picks in (train, held)]
        print(f"| {name} | {rates[0]:.1%} | {rates[1]:.1%} |", flush=True)


if __name__ == "__main__":
    main()
