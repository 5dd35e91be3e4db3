"""Train the VQ-lite tokenizer of the tiny models.

    python -m scd_core.train.tokenizer --data data/emoji32 --ckpt checkpoints/vq --steps 4000
    python -m scd_core.train.tokenizer --data data/emoji64 --ckpt checkpoints/vq64 --image-size 64 --patch 4

The geometry comes from `--image-size` (must match the data folder's images), `--patch`
(token grid = image_size // patch per side) and `--codebook-size`; the defaults (32, 4, 512)
are the shipped 8x8-token tokenizer. The checkpoint's JSON records the whole `VQConfig`, and
every later step (tokens, priors, export, loader) reads the geometry from there.

Loss: MSE + 0.5 L1 on pixels, codebook + 0.25 commitment on unit-norm latents (cosine
codebook), straight-through estimator, dead codes restarted from batch latents every 100
steps. Flat-white patches take the reserved code 0 (see `scd_core.models.tiny`). Half of
each batch is shifted/zoomed/rotated on white so that video frames stay in distribution.
Resumes from `--ckpt` when it exists (saved on any device). `--init-from` starts a new run from
another tokenizer's weights (a checkpoint or an exported folder such as `scd_core/assets/tiny`)
of the same architecture: the shipped 32 px tokenizer is fully convolutional, so it is a good
start for 64 px images with the same patch size. Trains on `--device` (default
cuda when available); batches are sampled and augmented on the CPU, so on the CPU a run is
deterministic given `--seed` and the thread count.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from scd_core.models.tiny import VQConfig, VQLite, flat_white_mask, load_weights
from scd_core.train.augment import random_affine
from scd_core.train.common import (CheckpointClock, add_device_argument, cosine_lr, load_checkpoint, model_tensors,
                                   save_checkpoint, set_threads)
from scd_core.train.data import load_dataset


def images_to_tensor(images) -> torch.Tensor:
    return torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255


def load_vq(path: str) -> VQLite:
    """A tokenizer checkpoint (`path`.json / .safetensors), or the tokenizer of an exported
    model folder (`scd_core/assets/tiny`: config.json and vq.safetensors)."""
    folder = Path(path)
    if (folder / "config.json").exists() and (folder / "vq.safetensors").exists():
        cfg = json.loads((folder / "config.json").read_text())["vq"]
        return load_weights(VQLite(VQConfig(**cfg)), folder / "vq.safetensors", "cpu", torch.float32)
    record = folder.with_suffix(".json")
    if not record.exists():
        raise ValueError(f"vq: no {record}; run python -m scd_core.train.tokenizer")
    cfg = json.loads(record.read_text())["config"]
    vq = VQLite(VQConfig(**cfg))
    vq.load_state_dict(model_tensors(path))
    return vq.eval()


def vq_losses(model: VQLite, x: torch.Tensor) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """Total loss, its parts, and the codes used (for dead-code bookkeeping)."""
    z = model.encode_latent(x)
    white = flat_white_mask(x, model.cfg.patch)
    idx = model.quantize(z.detach(), white)
    e = model.codes()[idx]
    keep = (~white).unsqueeze(-1).float()
    n_keep = keep.sum().clamp(min=1) * z.shape[-1]
    codebook = (((z.detach() - e) ** 2) * keep).sum() / n_keep
    commit = (((z - e.detach()) ** 2) * keep).sum() / n_keep
    zq = torch.where(white.unsqueeze(-1), e, z + (e - z).detach())
    rec = model.decode_latent(zq)
    mse = F.mse_loss(rec, x)
    l1 = F.l1_loss(rec, x)
    loss = mse + 0.5 * l1 + codebook + 0.25 * commit
    return loss, {"mse": mse.item(), "l1": l1.item(), "cb": codebook.item()}, (idx, z.detach(), white)


@torch.no_grad()
def restart_dead_codes(model: VQLite, usage: torch.Tensor, z: torch.Tensor, white: torch.Tensor,
                       gen: torch.Generator) -> int:
    """Re-seed codes 1..K-1 unused since the last restart with latents of the current batch
    (random draws from the CPU generator `gen`, applied on the model's device)."""
    dead = (usage[1:] == 0).nonzero().flatten() + 1
    pool = z[~white]
    if len(dead) == 0 or len(pool) == 0:
        return 0
    pick = torch.randint(len(pool), (len(dead),), generator=gen).to(pool.device)
    noise = 0.01 * torch.randn(len(dead), z.shape[-1], generator=gen)
    model.codebook.data[dead] = pool[pick] + noise.to(pool.device)
    return len(dead)


@torch.no_grad()
def evaluate(model: VQLite, val: torch.Tensor, train_sample: torch.Tensor) -> dict:
    """Held-out PSNR (clamped output) and codebook use on training images, on the model's device."""
    model.eval()
    device = model.codebook.device
    val, train_sample = val.to(device), train_sample.to(device)
    rec = model.decode_codes(model.encode(val)).clamp(0, 1)
    mse = ((rec - val) ** 2).flatten(1).mean(1)
    psnr = (10 * torch.log10(1 / mse.clamp(min=1e-10))).mean().item()
    codes = torch.cat([model.encode(train_sample[i:i + 512]) for i in range(0, len(train_sample), 512)])
    counts = torch.bincount(codes.flatten(), minlength=model.cfg.codebook_size).float()
    p = counts / counts.sum()
    ppl = torch.exp(-(p[p > 0] * p[p > 0].log()).sum()).item()
    model.train()
    return {"val_psnr": round(psnr, 3), "codes_used": int((counts > 0).sum()),
            "code_frac": round((counts > 0).float().mean().item(), 4), "perplexity": round(ppl, 1),
            "background_frac": round(p[0].item(), 3)}


def check_geometry(image_size: int, patch: int, codebook_size: int) -> None:
    """Reject tokenizer shapes VQLite cannot build, naming the option (SystemExit)."""
    if image_size < 1:
        raise SystemExit(f"--image-size: expected a positive number of pixels, got {image_size}")
    if patch < 1 or image_size % patch:
        raise SystemExit(f"--patch {patch}: must be a positive divisor of --image-size {image_size}")
    if codebook_size < 2:
        raise SystemExit(f"--codebook-size: expected at least 2 codes (code 0 is the white background), "
                         f"got {codebook_size}")


def init_from_tokenizer(model: VQLite, path: str) -> None:
    """Copy another tokenizer's weights into `model`; everything but the image size must match."""
    source = load_vq(path)
    mine, theirs = asdict(model.cfg), asdict(source.cfg)
    mine.pop("image_size"), theirs.pop("image_size")
    if mine != theirs:
        raise SystemExit(f"--init-from {path}: that tokenizer is {theirs}, this one {mine} (image size aside)")
    model.load_state_dict(source.state_dict())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data/emoji32")
    ap.add_argument("--ckpt", default="checkpoints/vq")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads")
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--ckpt-minutes", type=float, default=3.0)
    ap.add_argument("--max-minutes", type=float, default=0.0, help="stop (with a checkpoint) after this long; 0: no limit")
    ap.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint")
    ap.add_argument("--image-size", type=int, default=32,
                    help="image side in pixels; must equal the data folder's (default 32)")
    ap.add_argument("--patch", type=int, default=4, help="pixels per token side (default 4: 32 px -> 8x8 tokens)")
    ap.add_argument("--codebook-size", type=int, default=512,
                    help="codes in the codebook, code 0 reserved for flat white (default 512)")
    ap.add_argument("--init-from", default=None,
                    help="start a new run from this tokenizer's weights (checkpoint or exported folder; "
                         "same channels, patch and codebook size, any image size)")
    add_device_argument(ap)
    args = ap.parse_args(argv)
    check_geometry(args.image_size, args.patch, args.codebook_size)
    set_threads(args.threads)
    torch.manual_seed(args.seed)

    images, meta = load_dataset(args.data)
    x_all = images_to_tensor(images)
    is_val = torch.tensor([m["split"] == "val" for m in meta])
    train, val = x_all[~is_val], x_all[is_val]
    weights = torch.tensor([m["weight"] for m in meta])[~is_val]

    if tuple(images.shape[1:3]) != (args.image_size, args.image_size):
        raise SystemExit(f"--image-size {args.image_size}: the images in {args.data} are "
                         f"{images.shape[1]}x{images.shape[2]} px; pass --image-size {images.shape[1]} "
                         f"or render the data with python -m scd_core.train.data --size {args.image_size}")
    cfg = VQConfig(image_size=args.image_size, patch=args.patch, codebook_size=args.codebook_size)
    device = torch.device(args.device)
    model = VQLite(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=0.0)
    gen = torch.Generator().manual_seed(args.seed)          # CPU: batches are sampled on the CPU
    n_params = sum(p.numel() for p in model.parameters())
    print(f"tokenizer: {n_params / 1e6:.2f} M params, {len(train)} train / {len(val)} held-out images, "
          f"device {args.device}", flush=True)
    step = 0
    ckpt = args.ckpt
    if Path(ckpt + ".safetensors").exists() and not args.fresh:
        saved = json.loads(Path(ckpt + ".json").read_text()).get("config", asdict(cfg))
        if saved != asdict(cfg):
            raise SystemExit(f"--ckpt {ckpt}: that tokenizer was trained with {saved}, not {asdict(cfg)}; "
                             "pass its --image-size/--patch/--codebook-size, another --ckpt, or --fresh")
        step = load_checkpoint(ckpt, model, opt, gen)["step"]
        print(f"resumed from {ckpt} at step {step}", flush=True)
    elif args.init_from:
        init_from_tokenizer(model, args.init_from)
        print(f"started from the tokenizer {args.init_from}", flush=True)
    info = {"config": asdict(cfg), "args": vars(args)}
    usage = torch.zeros(cfg.codebook_size, device=device)
    clock = CheckpointClock(args.ckpt_minutes, args.max_minutes)
    model.train()
    while step < args.steps:
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, args.steps, args.lr)
        batch = train[torch.multinomial(weights, args.batch, replacement=True, generator=gen)]
        x = random_affine(batch, gen).to(device)
        loss, parts, (idx, z, white) = vq_losses(model, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        usage += torch.bincount(idx.flatten(), minlength=cfg.codebook_size).float()
        step += 1
        if step % 100 == 0:
            n = restart_dead_codes(model, usage, z, white, gen) if step < 0.8 * args.steps else 0
            usage.zero_()
            print(f"step {step} loss {loss.item():.4f} mse {parts['mse']:.5f} restarted {n} "
                  f"({clock.elapsed():.0f} s)", flush=True)
        if step % args.eval_every == 0 or step == args.steps:
            ev = evaluate(model, val, train[::3])
            info["eval"] = ev
            print(f"eval step {step}: {json.dumps(ev)}", flush=True)
        if clock.save_if_due(lambda: save_checkpoint(ckpt, model, opt, gen, step, info), step, args.steps):
            break
    print(f"done at step {step} in {clock.elapsed():.0f} s", flush=True)


if __name__ == "__main__":
    main()
