"""Train a tiny prior (decoder-only transformer over prompt words and VQ tokens).

    python -m scd_core.train.prior --kind image --tokens data/tokens --ckpt checkpoints/image_prior
    python -m scd_core.train.prior --kind video --tokens data/tokens --ckpt checkpoints/video_prior

The token grid and the vocabulary (the tokenizer's codebook size) come from the token file's
metadata, written by `scd_core.train.tokens` from the tokenizer's config (8x8 / 512 for the
shipped tokenizer, 16x16 for a 64 px one with --patch 4); token files written before that
metadata existed are read as the shipped 8x8 / 512 tokenizer's.

Condition dropout for classifier-free guidance: every prompt word is dropped with
probability 0.15 and the whole prompt with probability 0.1 (the empty prompt is the
unconditional branch). Skin-tone variants are sampled at their data weight (0.2). Images
use a random one of the 9 placements per sample. Held-out NLL (nats/token, full prompts,
unshifted) is printed every `--eval-every` steps. `--attention` makes layers local in 2-D (each
image token sees the prompt, a few tokens to its left and a few rows above) or per-position.
Resumes from `--ckpt` (saved on any device); trains on `--device` (default cuda when
available) with batches sampled on the CPU, and on the CPU is deterministic given `--seed` and
the thread count.
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from scd_core.models.tiny import GPTConfig, TinyGPT
from scd_core.train.common import (CheckpointClock, add_device_argument, cosine_lr, load_checkpoint,
                                   model_tensors, save_checkpoint, set_threads)

WORD_DROP, PROMPT_DROP = 0.15, 0.10
LEGACY_FRAME, LEGACY_VOCAB = (8, 8), 512     # token files without metadata: the shipped tokenizer


def token_file_metadata(path: str | Path) -> dict[str, str]:
    """The string metadata of a token file ({} for files written before it was recorded)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return dict(f.metadata() or {})


def load_tokens(folder: str | Path, kind: str) -> dict:
    """Token tensors; `grid` (tuple) and `codebook_size` (int) from the file's metadata."""
    from safetensors.torch import load_file

    path = Path(folder) / f"{kind}.safetensors"
    if not path.exists():
        raise ValueError(f"tokens: no {path}; run python -m scd_core.train.tokens")
    meta = token_file_metadata(path)
    data = load_file(str(path))
    data["tokens"] = data["tokens"].long()
    if data["tokens"].dim() == 2:
        data["tokens"] = data["tokens"].unsqueeze(1)     # [N, placements=1, L]
    data["word_ids"] = data["word_ids"].long()
    length = data["tokens"].shape[-1]
    data["grid"] = tuple(json.loads(meta["grid"])) if "grid" in meta else grid_of(kind, length)
    data["codebook_size"] = int(meta.get("codebook_size", LEGACY_VOCAB))
    if math.prod(data["grid"]) != length:
        raise ValueError(f"tokens: {path} holds sequences of {length} tokens, not grid {data['grid']}")
    if data["tokens"].numel() and int(data["tokens"].max()) >= data["codebook_size"]:
        raise ValueError(f"tokens: {path} holds codes >= its codebook size {data['codebook_size']}")
    return data


def grid_of(kind: str, length: int, frame: tuple[int, int] = LEGACY_FRAME) -> tuple[int, ...]:
    """The grid of `length` tokens: one frame for an image, length / frame tokens frames for a clip."""
    per = frame[0] * frame[1]
    if kind == "image":
        if length != per:
            raise ValueError(f"tokens: {length} image tokens do not fill a {frame[0]}x{frame[1]} grid")
        return tuple(frame)
    if length % per:
        raise ValueError(f"tokens: {length} video tokens are not whole {frame[0]}x{frame[1]} frames")
    return (length // per, *frame)


def sample_batch(data: dict, rows: torch.Tensor, batch: int, gen: torch.Generator):
    """Tokens [B, L], word ids [B, Lw] and the word mask after condition dropout."""
    pick = rows[torch.multinomial(data["weights"][rows], batch, replacement=True, generator=gen)]
    variant = torch.randint(data["tokens"].shape[1], (batch,), generator=gen)
    tokens = data["tokens"][pick, variant]
    ids = data["word_ids"][pick]
    present = torch.arange(ids.shape[1]).unsqueeze(0) < data["word_lens"][pick].unsqueeze(1)
    keep_word = torch.rand(ids.shape, generator=gen) >= WORD_DROP
    keep_prompt = torch.rand(batch, 1, generator=gen) >= PROMPT_DROP
    return tokens, ids, present & keep_word & keep_prompt


def to_device(tensors: tuple[torch.Tensor, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(device) for t in tensors)


@torch.no_grad()
def held_out_nll(model: TinyGPT, data: dict, rows: torch.Tensor, batch: int = 64) -> float:
    """Mean NLL over `rows` (CPU data), computed on the model's device."""
    model.eval()
    device = model.head.weight.device
    total, count = 0.0, 0
    for k in range(0, len(rows), batch):
        r = rows[k:k + batch]
        tokens = data["tokens"][r, 0]
        ids = data["word_ids"][r]
        mask = torch.arange(ids.shape[1]).unsqueeze(0) < data["word_lens"][r].unsqueeze(1)
        tokens, ids, mask = to_device((tokens, ids, mask), device)
        logits = model(ids, mask, tokens)
        total += F.cross_entropy(logits.flatten(0, 1), tokens.flatten(), reduction="sum").item()
        count += tokens.numel()
    model.train()
    return total / count


def warm_start_from_image_prior(model: TinyGPT, image_weights: dict[str, torch.Tensor]) -> None:
    """Start a video prior from a trained image prior of the same width.

    Every weight of matching shape is copied; each frame gets the image prior's position
    embeddings (frame t, token i <- image token i) and its row/column axis embeddings, so
    that every frame starts as a good image model and training only has to learn time.
    """
    own = model.state_dict()
    if own["tok_emb.weight"].shape != image_weights["tok_emb.weight"].shape:
        raise ValueError("init-from: the image prior's width differs from --d-model")
    frame = image_weights["pos_emb"].shape[0] - 1
    T = model.cfg.grid[0]
    new = {k: v for k, v in image_weights.items() if k in own and own[k].shape == v.shape}
    new["pos_emb"] = torch.cat([image_weights["pos_emb"][:1], image_weights["pos_emb"][1:].repeat(T, 1)])
    new["axis_emb.1"], new["axis_emb.2"] = image_weights["axis_emb.0"], image_weights["axis_emb.1"]
    if new["pos_emb"].shape != own["pos_emb"].shape or frame != own["axis_emb.1"].shape[0] * own["axis_emb.2"].shape[0]:
        raise ValueError("init-from: the image prior's grid does not match one video frame")
    model.load_state_dict(new, strict=False)


def make_optimizer(model: TinyGPT, lr: float) -> torch.optim.AdamW:
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "emb" not in n]
    other = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "emb" not in n)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=["image", "video"], default="image")
    ap.add_argument("--tokens", default="data/tokens")
    ap.add_argument("--ckpt", default=None, help="default checkpoints/<kind>_prior")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--attention", default="",
                    help="what each layer attends to, comma-separated, one per layer: full, local or self "
                         "(see scd_core.models.tiny.GPTConfig); default: every layer full")
    ap.add_argument("--local-rows", type=int, default=2, help="a local layer: rows above it sees (default 2)")
    ap.add_argument("--local-cols", type=int, default=2,
                    help="a local layer: columns either side above it, and tokens to its left (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads")
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--max-eval", type=int, default=160, help="held-out sequences used for the NLL")
    ap.add_argument("--ckpt-minutes", type=float, default=3.0)
    ap.add_argument("--max-minutes", type=float, default=0.0)
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--stop-at", type=int, default=0,
                    help="stop (with a checkpoint) at this step, the learning-rate schedule still that of "
                         "--steps: the first part of a longer run (0: run to --steps)")
    ap.add_argument("--snapshots", default="",
                    help="comma-separated steps at which a copy of the checkpoint is kept as <ckpt>_step<N> "
                         "(to measure the model at several training lengths)")
    ap.add_argument("--init-from", default=None,
                    help="video only: start a new run from this image prior checkpoint (same width)")
    add_device_argument(ap)
    args = ap.parse_args(argv)
    set_threads(args.threads)
    torch.manual_seed(args.seed)
    ckpt = args.ckpt or f"checkpoints/{args.kind}_prior"
    try:
        snapshots = {int(s) for s in args.snapshots.split(",") if s.strip()}
    except ValueError:
        raise SystemExit(f"--snapshots: expected comma-separated step numbers, got {args.snapshots!r}") from None

    data = load_tokens(args.tokens, args.kind)
    vocab = json.loads((Path(args.tokens) / "vocab.json").read_text())["words"]
    train_rows = (~data["val"]).nonzero().flatten()
    val_rows = data["val"].nonzero().flatten()[: args.max_eval]
    attention = tuple(a.strip() for a in args.attention.split(",") if a.strip())
    try:
        cfg = GPTConfig(vocab_size=data["codebook_size"], grid=data["grid"], n_words=len(vocab),
                        d_model=args.d_model, n_layers=args.layers, n_heads=args.heads, dropout=args.dropout,
                        attention=attention, local_rows=args.local_rows, local_cols=args.local_cols)
    except ValueError as err:
        raise SystemExit(f"--{str(err).split(':')[0].replace('_', '-')}: {err}") from None
    device = torch.device(args.device)
    model = TinyGPT(cfg).to(device)
    opt = make_optimizer(model, args.lr)
    gen = torch.Generator().manual_seed(args.seed)          # CPU: batches are sampled on the CPU
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.kind} prior: {n_params / 1e6:.2f} M params, grid {cfg.grid}, vocab {cfg.vocab_size}, "
          f"{len(train_rows)} train / "
          f"{len(val_rows)} held-out sequences, device {args.device}", flush=True)
    step, last_eval = 0, {}
    if Path(ckpt + ".safetensors").exists() and not args.fresh:
        record = load_checkpoint(ckpt, model, opt, gen)
        step = record["step"]
        last_eval = {k: record[k] for k in ("val_nll", "train_nll", "val_step") if k in record}
        print(f"resumed from {ckpt} at step {step}", flush=True)
    elif args.init_from:
        if args.kind != "video":
            raise SystemExit("--init-from: only a video prior starts from an image prior")
        warm_start_from_image_prior(model, model_tensors(args.init_from))
        print(f"started from the image prior {args.init_from}", flush=True)
    info = {"config": asdict(cfg), "args": vars(args), **last_eval}     # the last NLLs, kept through a resume
    clock = CheckpointClock(args.ckpt_minutes, args.max_minutes)
    running = None
    model.train()
    if 0 < args.stop_at <= step:
        print(f"already at step {step} (--stop-at {args.stop_at})", flush=True)
        return
    while step < args.steps:
        for g in opt.param_groups:
            g["lr"] = cosine_lr(step, args.steps, args.lr, warmup=200)
        tokens, ids, mask = to_device(sample_batch(data, train_rows, args.batch, gen), device)
        logits = model(ids, mask, tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), tokens.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        running = loss.item() if running is None else 0.98 * running + 0.02 * loss.item()
        if step % 50 == 0:
            print(f"step {step} train_nll {running:.4f} lr {opt.param_groups[0]['lr']:.2e} "
                  f"({clock.elapsed():.0f} s)", flush=True)
        if step % args.eval_every == 0 or step == args.steps:
            info["val_nll"] = round(held_out_nll(model, data, val_rows), 4)
            info["train_nll"] = round(running, 4)
            info["val_step"] = step
            print(f"eval step {step}: held-out nll {info['val_nll']:.4f} nats/token", flush=True)
        if step in snapshots:
            save_checkpoint(f"{ckpt}_step{step}", model, opt, gen, step, info)
        last = args.stop_at if 0 < args.stop_at < args.steps else args.steps
        if clock.save_if_due(lambda: save_checkpoint(ckpt, model, opt, gen, step, info), step, last) or step == last:
            break
    print(f"done at step {step} in {clock.elapsed():.0f} s", flush=True)


if __name__ == "__main__":
    main()
