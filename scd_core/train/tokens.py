"""Tokenize the emoji data for the priors: image sequences, video clips, word vocabulary.

    python -m scd_core.train.tokens --data data/emoji32 --vq checkpoints/vq --out data/tokens
    python -m scd_core.train.tokens --vq scd_core/assets/tiny --what image    # the shipped tokenizer's tokens

The geometry is the tokenizer's (its checkpoint JSON holds the `VQConfig`): S px images,
G x G codes (G = S // patch), codes < codebook_size. The shipped tokenizer is S = 32, G = 8, 512
codes; below, pixel amounts are given for 32 px and scale with S.
Images: each emoji at 9 placements (unshifted and the 8 shifts of +-2 px at 32 px, +-4 px at
64 px), G x G codes each.
Clips: each emoji under 2 motions drawn by `--seed` from `MOTIONS` (pan, zoom, bounce,
tilt, still), T frames rendered from the big source on white (affine transform at the big
size, 96 px for 32 px data, then average pooling to S px), each frame G x G codes; the prompt is
the emoji's name plus the motion words ("cat face moving left").
Outputs: `image.safetensors`, `video.safetensors` (their metadata record the tokenizer's
config, the grid and the codebook size, which the priors read), `vocab.json`.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from scd_core.models.tiny import VQLite, WordVocab, prompt_words
from scd_core.train.augment import affine_white, shift_white
from scd_core.train.common import parse_device, set_threads
from scd_core.train.data import load_dataset
from scd_core.train.tokenizer import images_to_tensor, load_vq

SHIFTS = [(0, 0)] + [(dx, dy) for dy in (-2, 0, 2) for dx in (-2, 0, 2) if (dx, dy) != (0, 0)]   # at 32 px
MOTION_SIZE = 32   # `SHIFTS` and `motion_path` are in pixels of a 32 px frame


def shifts_for(image_size: int) -> list[tuple[int, int]]:
    """`SHIFTS` scaled to an image of `image_size` px (the same fraction of the frame)."""
    k = image_size / MOTION_SIZE
    return [(int(round(dx * k)), int(round(dy * k))) for dx, dy in SHIFTS]


BASE_SCALE = 0.8   # clip emoji span about 0.8 * 28/32 of the frame (the tokenizer saw 0.75-1.15)


def motion_path(motion: str, frames: int) -> list[tuple[float, float, float, float]]:
    """(dx px, dy px, scale, angle deg) per frame at 32 px; +dx right, +dy down."""
    out = []
    for t in range(frames):
        u = t / (frames - 1)
        dx = dy = angle = 0.0
        scale = BASE_SCALE
        span = 10.0
        if motion == "moving left":
            dx = span / 2 - span * u
        elif motion == "moving right":
            dx = -span / 2 + span * u
        elif motion == "moving up":
            dy = span / 2 - span * u
        elif motion == "moving down":
            dy = -span / 2 + span * u
        elif motion == "zooming in":
            scale = 0.55 + 0.45 * u
        elif motion == "zooming out":
            scale = 1.0 - 0.45 * u
        elif motion == "bouncing":
            dy = 4 - 8 * abs(math.sin(math.pi * t / 4))
        elif motion == "tilting left":
            angle = -24 * u
        elif motion == "tilting right":
            angle = 24 * u
        elif motion != "still":
            raise ValueError(f"motion: unknown {motion!r}")
        out.append((dx, dy, scale, angle))
    return out


MOTIONS = ["moving left", "moving right", "moving up", "moving down", "zooming in", "zooming out",
           "bouncing", "tilting left", "tilting right", "still"]


def render_clip(big: torch.Tensor, motion: str, frames: int, image_size: int = 32) -> torch.Tensor:
    """big [3, B, B] in [0, 1] -> frames [T, 3, S, S] (S = image_size, B a multiple of S; the
    shipped data: 96 -> 32). Motions are fractions of the frame: `motion_path` pixels at 32 px
    are scaled to the big render (`main` checks that B is a multiple of S)."""
    path = torch.tensor(motion_path(motion, frames))
    factor = big.shape[-1] // image_size
    move = big.shape[-1] / MOTION_SIZE
    x = big.unsqueeze(0).expand(frames, -1, -1, -1)
    moved = affine_white(x, path[:, 0] * move, path[:, 1] * move, path[:, 2], -path[:, 3])
    return F.avg_pool2d(moved, factor)


@torch.no_grad()
def encode_all(vq: VQLite, x: torch.Tensor, batch: int = 1024) -> torch.Tensor:
    """Codes of CPU images x, encoded on the tokenizer's device, returned on the CPU."""
    device = vq.codebook.device
    return torch.cat([vq.encode(x[i:i + batch].to(device)).cpu() for i in range(0, len(x), batch)])


def token_metadata(vq: VQLite, grid: tuple[int, ...]) -> dict[str, str]:
    """safetensors metadata of a token file: what the priors need to know about the tokenizer."""
    return {"vq_config": json.dumps(asdict(vq.cfg)), "grid": json.dumps(list(grid)),
            "codebook_size": str(vq.cfg.codebook_size)}


def token_dtype(vq: VQLite) -> torch.dtype:
    return torch.int16 if vq.cfg.codebook_size <= 2 ** 15 else torch.int32


def pad_word_ids(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(1, max(len(r) for r in rows))
    ids = torch.zeros(len(rows), width, dtype=torch.int32)
    lens = torch.tensor([len(r) for r in rows], dtype=torch.int32)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.int32)
    return ids, lens


def video_prompt(entry: dict, motion: str) -> str:
    return " ".join(prompt_words(entry["name"]) + motion.split())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data/emoji32")
    ap.add_argument("--vq", default="checkpoints/vq")
    ap.add_argument("--out", default="data/tokens")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--motions-per-emoji", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--what", choices=["image", "video", "all"], default="all")
    ap.add_argument("--device", type=parse_device, default="cpu",
                    help="where the tokenizer encodes (default cpu, as for the shipped tokens; cuda is "
                         "much faster for 64 px data); images and clips are rendered on the CPU")
    args = ap.parse_args(argv)
    set_threads(args.threads)
    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    vq = load_vq(args.vq).to(args.device)
    images, meta = load_dataset(args.data)
    bigs = load_dataset(args.data, big=True)[0] if args.what in ("video", "all") else None
    size = vq.cfg.image_size
    if tuple(images.shape[1:3]) != (size, size):
        raise SystemExit(f"--vq {args.vq}: the tokenizer takes {size} px images but {args.data} holds "
                         f"{images.shape[1]}x{images.shape[2]} px ones")
    if args.what in ("video", "all") and bigs.shape[1] % size:
        raise SystemExit(f"--what video: the big renders in {args.data} ({bigs.shape[1]} px) are not a multiple "
                         f"of the tokenizer's {size} px; re-render with python -m scd_core.train.data --big")
    gen = torch.Generator().manual_seed(args.seed)
    clips = [(i, MOTIONS[int(m)]) for i in range(len(meta))
             for m in torch.randperm(len(MOTIONS), generator=gen)[: args.motions_per_emoji]]
    prompts_img = [m["prompt"] for m in meta]
    prompts_vid = [video_prompt(meta[i], motion) for i, motion in clips]
    words = sorted({w for p in prompts_img + prompts_vid for w in prompt_words(p)})
    vocab = WordVocab(words)
    (out / "vocab.json").write_text(json.dumps({"words": words}, indent=0))

    if args.what in ("image", "all"):
        write_images(vq, images, meta, vocab, out, t0)
    if args.what in ("video", "all"):
        write_clips(vq, bigs, meta, clips, prompts_vid, vocab, out, args.frames, t0)


def write_images(vq: VQLite, images, meta: list[dict], vocab: WordVocab, out: Path, t0: float) -> None:
    x = images_to_tensor(images)
    shifts = shifts_for(vq.cfg.image_size)
    img_tokens = torch.stack([encode_all(vq, shift_white(x, dx, dy)) for dx, dy in shifts], 1)
    save_image_tokens(vq, img_tokens, meta, vocab, out)
    print(f"images: {tuple(img_tokens.shape)} ({vq.grid}x{vq.grid} codes of {vq.cfg.codebook_size}), "
          f"vocab {len(vocab)} words ({time.time() - t0:.0f} s)", flush=True)


def save_image_tokens(vq: VQLite, img_tokens: torch.Tensor, meta: list[dict], vocab: WordVocab, out: Path) -> None:
    """`out`/image.safetensors: codes [N, placements, G*G] with each image's prompt word ids,
    sampling weight and split (what `prior --kind image` reads)."""
    from safetensors.torch import save_file

    ids, lens = pad_word_ids([vocab.ids(m["prompt"]) for m in meta])
    save_file({"tokens": img_tokens.to(token_dtype(vq)), "word_ids": ids, "word_lens": lens,
               "weights": torch.tensor([m["weight"] for m in meta]),
               "val": torch.tensor([m["split"] == "val" for m in meta])}, str(out / "image.safetensors"),
              metadata=token_metadata(vq, (vq.grid, vq.grid)))


def write_clips(vq: VQLite, bigs, meta: list[dict], clips: list, prompts_vid: list[str], vocab: WordVocab,
                out: Path, frames_per_clip: int, t0: float) -> None:
    from safetensors.torch import save_file

    xb = images_to_tensor(bigs)
    vid = []
    for k in range(0, len(clips), 256):
        frames = torch.cat([render_clip(xb[i], motion, frames_per_clip, vq.cfg.image_size)
                            for i, motion in clips[k:k + 256]])
        vid.append(encode_all(vq, frames).view(-1, frames_per_clip * vq.grid ** 2))
    vid_tokens = torch.cat(vid)
    ids, lens = pad_word_ids([vocab.ids(p) for p in prompts_vid])
    save_file({"tokens": vid_tokens.to(token_dtype(vq)), "word_ids": ids, "word_lens": lens,
               "weights": torch.tensor([meta[i]["weight"] for i, _ in clips]),
               "val": torch.tensor([meta[i]["split"] == "val" for i, _ in clips])}, str(out / "video.safetensors"),
              metadata=token_metadata(vq, (frames_per_clip, vq.grid, vq.grid)))
    (out / "video_prompts.json").write_text(json.dumps(prompts_vid, indent=0))
    per = vq.grid ** 2
    same = (vid_tokens[:, per:] == vid_tokens[:, :-per]).float().mean().item()
    bg = (vid_tokens == 0).float().mean().item()
    print(f"clips: {tuple(vid_tokens.shape)}; {same:.0%} of tokens equal the previous frame's; "
          f"{bg:.0%} background code ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
