r"""Probe: does a photo-like background give SCD a larger lead over SJD on the emoji models?

The shipped `tiny` prior draws emoji on white, where a quarter of the tokens are the
near-certain white code and SCD-MC needs only about 1.2x fewer passes than SJD. This script
builds the same image-token data with every emoji alpha-composited over a random texture
(`waves`: a few low-frequency colour waves plus fine noise; `fractal`: a field with a natural
image's 1/f^2 power spectrum), seeded per image and placement, so that background tokens are
uncertain and depend on their neighbours, as in photos. The tokens come from the shipped
tokenizer (`scd_core/assets/tiny`), which never saw textures: fine for token statistics, not for
pretty pictures. Nothing here is part of the shipped models.

Textured tokens, a 700-step prior on them, a model folder, the benchmark (~15 min on one
CPU thread, nearly all of it the prior):

    python scripts/texture_probe.py --out data/tokens_tex                 # ~1 min
    python -m scd_core.train.prior --kind image --tokens data/tokens_tex --ckpt checkpoints/tex \
        --steps 700 --lr 0.0015 --threads 1 --fresh
    python scripts/texture_probe.py --export checkpoints/tex --out data/tokens_tex --model-out /tmp/tiny_tex
    python -m scd_core.bench --model /tmp/tiny_tex --methods ar,sjd,scd-mc --windows 16 \
        --seeds 4 --threads 1 --top-k 100 --cfg-scale 3

The same recipe on white, for comparison (the shipped tokenizer's tokens of the plain renders):

    python -m scd_core.train.data --out data/emoji32
    python -m scd_core.train.tokens --vq scd_core/assets/tiny --what image          # -> data/tokens
    python -m scd_core.train.prior --kind image --tokens data/tokens --ckpt checkpoints/white700 \
        --steps 700 --lr 0.0015 --threads 1 --fresh
    python scripts/texture_probe.py --export checkpoints/white700 --out data/tokens --model-out /tmp/tiny_white

and the same benchmark command on `/tmp/tiny_white`. `--texture fractal` (with its own
`--out`, `--ckpt` and `--model-out`) gives the 1/f^2 variant.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scd_core.models.tiny import ASSETS, WordVocab, prompt_words  # noqa: E402
from scd_core.train.data import (FONT_PATH, FONT_SIZE, read_emoji_test, render_all,  # noqa: E402
                                 render_glyph_rgba, to_square)
from scd_core.train.tokenizer import load_vq  # noqa: E402
from scd_core.train.tokens import encode_all, save_image_tokens, shifts_for  # noqa: E402


def texture(rng: np.random.Generator, size: int) -> np.ndarray:
    """A random smooth colour field [S, S, 3] in [0, 1]: a base colour, 3 low-frequency waves
    per channel, and fine noise."""
    yy, xx = np.mgrid[0:size, 0:size] / size
    out = np.empty((size, size, 3), dtype=np.float32)
    base = rng.uniform(0.2, 0.8, 3)
    for c in range(3):
        field = np.full((size, size), base[c])
        for _ in range(3):
            fx, fy = rng.uniform(-2.5, 2.5, 2)
            field += rng.uniform(0.05, 0.2) * np.sin(2 * math.pi * (fx * xx + fy * yy) + rng.uniform(0, 2 * math.pi))
        out[..., c] = field
    out += rng.normal(0, 0.04, out.shape)
    return out.clip(0, 1)


def fractal_texture(rng: np.random.Generator, size: int, beta: float = 2.0) -> np.ndarray:
    """A random field [S, S, 3] in [0, 1] with a natural image's power spectrum (1 / f^beta):
    every region continues its neighbours' colour, with detail at every scale. A luminance
    field and two weaker colour fields around a random base colour."""
    fy, fx = np.fft.fftfreq(size)[:, None], np.fft.rfftfreq(size)[None, :]
    f = np.sqrt(fx ** 2 + fy ** 2)
    f[0, 0] = 1.0
    amp = f ** (-beta / 2)
    amp[0, 0] = 0.0

    def field() -> np.ndarray:
        spectrum = (rng.normal(size=amp.shape) + 1j * rng.normal(size=amp.shape)) * amp
        x = np.fft.irfft2(spectrum, s=(size, size))
        return x / x.std()

    lum, chroma = field(), [field(), field()]
    base = rng.uniform(0.25, 0.75, 3)
    mix = np.array([[1.0, 0.0], [-0.5, 0.8], [-0.5, -0.8]])          # chroma axes per channel
    out = base + 0.15 * lum[..., None] + 0.06 * np.stack(chroma, -1) @ mix.T
    return out.clip(0, 1).astype(np.float32)


TEXTURES = {"waves": texture, "fractal": fractal_texture}


def shift(a: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """Integer shift of an [S, S, C] array with zero (transparent) fill."""
    out = np.zeros_like(a)
    s = a.shape[0]
    xs, xd = (slice(0, s - dx), slice(dx, s)) if dx >= 0 else (slice(-dx, s), slice(0, s + dx))
    ys, yd = (slice(0, s - dy), slice(dy, s)) if dy >= 0 else (slice(-dy, s), slice(0, s + dy))
    out[yd, xd] = a[ys, xs]
    return out


def pick_entries(limit: int | None):
    """The shipped data's emoji (those the font draws), with their prompts and split; with
    `limit`, a few of each split (a quick check)."""
    entries = read_emoji_test()
    if limit:
        from scd_core.train.data import is_held_out

        held = [e for e in entries if is_held_out(e.name)][: max(1, limit // 4)]
        entries = held + [e for e in entries if not is_held_out(e.name)][: limit - len(held)]
    return render_all(entries, 32, big=0)[2]


def build_tokens(out: Path, seed: int, limit: int | None = None, kind: str = "waves") -> None:
    from PIL import ImageFont

    t0 = time.time()
    vq = load_vq(str(ASSETS))                                    # the shipped tokenizer
    size = vq.cfg.image_size
    kept = pick_entries(limit)
    font = ImageFont.truetype(FONT_PATH, FONT_SIZE)
    shifts = shifts_for(size)
    rng = np.random.default_rng(seed)
    images = []
    for entry in kept:
        rgba = np.asarray(to_square(render_glyph_rgba(entry.emoji, font), size), dtype=np.float32) / 255
        for dx, dy in shifts:
            moved = shift(rgba, dx, dy)
            bg = TEXTURES[kind](rng, size)
            images.append(moved[..., :3] + (1 - moved[..., 3:]) * bg)
    x = torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float()
    tokens = encode_all(vq, x).view(len(kept), len(shifts), -1)
    words = sorted({w for e in kept for w in prompt_words(e.prompt)})
    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.json").write_text(json.dumps({"words": words}, indent=0))
    save_image_tokens(vq, tokens, [asdict(e) for e in kept], WordVocab(words), out)
    left_same = (tokens[..., 1:] == tokens[..., :-1]).float().mean().item()
    print(f"{tuple(tokens.shape)} tokens to {out}: {len(torch.unique(tokens))} codes used, "
          f"{(tokens == 0).float().mean().item():.1%} background code, {left_same:.1%} equal their left "
          f"neighbour ({time.time() - t0:.0f} s)")


def export_model(ckpt: str, tokens: Path, model_out: Path) -> None:
    """A loadable model folder: the shipped tokenizer and the probe's image prior."""
    from scd_core.train.export import export_weights

    model_out.mkdir(parents=True, exist_ok=True)
    shutil.copy(ASSETS / "vq.safetensors", model_out / "vq.safetensors")
    shutil.copy(tokens / "vocab.json", model_out / "vocab.json")
    config = json.loads((ASSETS / "config.json").read_text())
    rec = export_weights(ckpt, model_out / "image_prior.safetensors")
    config["image_prior"] = rec["config"]
    config["training"]["image_prior"] = {"step": rec["step"], "val_nll": rec.get("val_nll")}
    config.pop("video_prior", None)
    (model_out / "config.json").write_text(json.dumps(config, indent=1))
    print(f"model folder {model_out} (prior step {rec['step']}, held-out NLL {rec.get('val_nll')})")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("data/tokens_tex"), help="token folder to write / read")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=None, help="only this many emoji (a quick check)")
    ap.add_argument("--texture", choices=sorted(TEXTURES), default="waves",
                    help="waves: smooth colour waves plus fine noise; fractal: a 1/f^2 field (default waves)")
    ap.add_argument("--export", help="prior checkpoint to export into --model-out (skips building tokens)")
    ap.add_argument("--model-out", type=Path, default=Path("/tmp/tiny_tex"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.export:
        export_model(args.export, args.out, args.model_out)
    else:
        build_tokens(args.out, args.seed, args.limit, args.texture)


if __name__ == "__main__":
    main()
