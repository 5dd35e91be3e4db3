"""Sample grids of the shipped tiny models, for people to look at.

    python -m scd_core.train.samples --model tiny --out scd_core/assets/tiny/samples_image.png
    python -m scd_core.train.samples --model tiny-video --out scd_core/assets/tiny/samples_video.png
    python -m scd_core.train.samples --model tiny-64            # into scd_core/assets/tiny64
    python -m scd_core.train.samples --model assets_64          # an exported folder: writes into it

Images: one row per prompt, `--per-prompt` samples across (seeds 0..), nearest upscale to about
96 px (3x for 32 px images),
the prompt written on the left. Video: one row per prompt, its frames across. Sampling is
the model's defaults (top-k 100, CFG 3) through `scd_core.generate`.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

LABEL_W = 190
TILE_PX = 96   # tiles are upscaled (nearest) to about this size: 3x for the shipped 32 px model


def label_row(text: str, tiles: list, scale: int | None = None):
    from PIL import Image, ImageDraw

    if scale is None:
        scale = max(1, TILE_PX // tiles[0].size[0])
    side = tiles[0].size[0] * scale
    row = Image.new("RGB", (LABEL_W + len(tiles) * (side + 2), side + 4), "white")
    ImageDraw.Draw(row).text((4, side // 2 - 6), text, fill="black")
    for i, tile in enumerate(tiles):
        row.paste(tile.resize((side, side), Image.NEAREST), (LABEL_W + i * (side + 2), 2))
    return row


def stack_rows(rows: list):
    from PIL import Image

    grid = Image.new("RGB", (max(r.size[0] for r in rows), sum(r.size[1] for r in rows)), "white")
    y = 0
    for r in rows:
        grid.paste(r, (0, y))
        y += r.size[1]
    return grid


def main(argv: list[str] | None = None) -> None:
    import scd_core
    from scd_core.models.tiny import ASSETS as TINY_ASSETS, OTHER_FOLDERS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--out", default=None)
    ap.add_argument("--prompts", default=None, help="comma-separated; default: the model's examples")
    ap.add_argument("--per-prompt", type=int, default=6)
    ap.add_argument("--method", default="scd-mc")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="where the model samples (cpu or cuda)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = scd_core.load_model(args.model, device=args.device, threads=args.threads)
    prompts = args.prompts.split(",") if args.prompts else model.example_prompts
    exported = args.model not in ("tiny", "tiny-video", *OTHER_FOLDERS) and Path(args.model).is_dir()
    folder = (Path(args.model) if exported                      # an exported folder: write into it
              else OTHER_FOLDERS[args.model][2] if args.model in OTHER_FOLDERS else TINY_ASSETS)
    out = args.out or str(folder / f"samples_{'video' if len(model.grid) == 3 else 'image'}.png")
    settings = dict(model.default_settings)
    t0 = time.time()
    rows = []
    for prompt in prompts:
        n = 1 if len(model.grid) == 3 else args.per_prompt
        run = scd_core.generate(model, [prompt] * n, method=args.method, window=16, seed=args.seed, **settings)
        tiles = run.images[0] if len(model.grid) == 3 else run.images
        rows.append(label_row(prompt, tiles))
    stack_rows(rows).save(out)
    print(f"wrote {out} ({len(prompts)} prompts, {time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
