"""Tokenize the emoji data for the priors: image sequences, video clips, word vocabulary.

    python -m scd_core.train.tokens --data data/emoji32 --vq checkpoints/vq --out data/tokens

Images: each emoji at 9 placements (unshifted and the 8 shifts of +-2 px), 8x8 codes each.
Clips: each emoji under 2 motions drawn by `--seed` from `MOTIONS` (pan, zoom, bounce,
tilt, still), T frames rendered from the 96 px source on white (affine transform at 96 px,
then 3x3 average pooling to 32 px), each frame 8x8 codes; the prompt is the emoji's name
plus the motion words ("cat face moving left").
Outputs: `image.safetensors`, `video.safetensors`, `vocab.json`.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from scd_core.models.tiny import VQConfig, VQLite, WordVocab, prompt_words
from scd_core.train.augment import affine_white, shift_white
from scd_core.train.common import model_tensors, set_threads
from scd_core.train.data import load_dataset
from scd_core.train.tokenizer import images_to_tensor

SHIFTS = [(0, 0)] + [(dx, dy) for dy in (-2, 0, 2) for dx in (-2, 0, 2) if (dx, dy) != (0, 0)]
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


def render_clip(big: torch.Tensor, motion: str, frames: int) -> torch.Tensor:
    """big [3, 96, 96] in [0, 1] -> frames [T, 3, 32, 32]."""
    path = torch.tensor(motion_path(motion, frames))
    factor = big.shape[-1] // 32
    x = big.unsqueeze(0).expand(frames, -1, -1, -1)
    moved = affine_white(x, path[:, 0] * factor, path[:, 1] * factor, path[:, 2], -path[:, 3])
    return F.avg_pool2d(moved, factor)


def load_vq(path: str) -> VQLite:
    cfg = json.loads(Path(path).with_suffix(".json").read_text())["config"]
    vq = VQLite(VQConfig(**cfg))
    vq.load_state_dict(model_tensors(path))
    return vq.eval()


@torch.no_grad()
def encode_all(vq: VQLite, x: torch.Tensor, batch: int = 1024) -> torch.Tensor:
    return torch.cat([vq.encode(x[i:i + batch]) for i in range(0, len(x), batch)])


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
    args = ap.parse_args(argv)
    set_threads(args.threads)
    t0 = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    vq = load_vq(args.vq)
    images, meta = load_dataset(args.data)
    bigs, _ = load_dataset(args.data, big=True)
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
    from safetensors.torch import save_file

    prompts_img = [m["prompt"] for m in meta]
    x = images_to_tensor(images)
    img_tokens = torch.stack([encode_all(vq, shift_white(x, dx, dy)) for dx, dy in SHIFTS], 1)
    ids, lens = pad_word_ids([vocab.ids(p) for p in prompts_img])
    save_file({"tokens": img_tokens.to(torch.int16), "word_ids": ids, "word_lens": lens,
               "weights": torch.tensor([m["weight"] for m in meta]),
               "val": torch.tensor([m["split"] == "val" for m in meta])}, str(out / "image.safetensors"))
    print(f"images: {tuple(img_tokens.shape)}, vocab {len(vocab)} words ({time.time() - t0:.0f} s)", flush=True)


def write_clips(vq: VQLite, bigs, meta: list[dict], clips: list, prompts_vid: list[str], vocab: WordVocab,
                out: Path, frames_per_clip: int, t0: float) -> None:
    from safetensors.torch import save_file

    xb = images_to_tensor(bigs)
    vid = []
    for k in range(0, len(clips), 256):
        frames = torch.cat([render_clip(xb[i], motion, frames_per_clip) for i, motion in clips[k:k + 256]])
        vid.append(encode_all(vq, frames).view(-1, frames_per_clip * vq.grid ** 2))
    vid_tokens = torch.cat(vid)
    ids, lens = pad_word_ids([vocab.ids(p) for p in prompts_vid])
    save_file({"tokens": vid_tokens.to(torch.int16), "word_ids": ids, "word_lens": lens,
               "weights": torch.tensor([meta[i]["weight"] for i, _ in clips]),
               "val": torch.tensor([meta[i]["split"] == "val" for i, _ in clips])}, str(out / "video.safetensors"))
    (out / "video_prompts.json").write_text(json.dumps(prompts_vid, indent=0))
    per = vq.grid ** 2
    same = (vid_tokens[:, per:] == vid_tokens[:, :-per]).float().mean().item()
    bg = (vid_tokens == 0).float().mean().item()
    print(f"clips: {tuple(vid_tokens.shape)}; {same:.0%} of tokens equal the previous frame's; "
          f"{bg:.0%} background code ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
