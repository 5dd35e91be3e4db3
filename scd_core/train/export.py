"""Export trained checkpoints into the shipped assets (fp16 safetensors + JSON).

    python -m scd_core.train.export --vq checkpoints/vq --image checkpoints/image_prior \
        --video checkpoints/video_prior --vocab data/tokens/vocab.json --out scd_core/assets/tiny

Writes `vq.safetensors`, `image_prior.safetensors`, `video_prior.safetensors` (fp16),
`vocab.json` (the prompt words) and `config.json` (architectures, training steps and
held-out metrics, the commit of the training code; with `--image-settings`, the image model's
own sampling settings, which the loader gives as `default_settings`). A prior whose checkpoint is missing
is skipped, and the one already in `--out` is kept. The geometry (image size, token grid,
codebook size) is whatever the checkpoints' configs say, so a 64 px / 16x16-token model exports
the same way (to its own `--out`, e.g. assets_64); a prior whose vocabulary or frame grid does
not match the tokenizer's is refused.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import torch

from scd_core.train.common import model_tensors


def export_weights(ckpt: str, dst: Path) -> dict:
    """Write the checkpoint's model weights as fp16 safetensors; return its JSON record."""
    from safetensors.torch import save_file

    tensors = {k: v.to(torch.float16).contiguous() for k, v in model_tensors(ckpt).items()}
    save_file(tensors, str(dst), metadata={"format": "pt"})
    return json.loads(Path(ckpt).with_suffix(".json").read_text())


def check_prior_matches_vq(key: str, prior: dict, vq: dict) -> None:
    """A prior must speak the tokenizer's codes on its token grid (per frame for a clip)."""
    grid = vq["image_size"] // vq["patch"]
    if prior["vocab_size"] != vq["codebook_size"]:
        raise SystemExit(f"export: {key} has vocab_size {prior['vocab_size']} but the tokenizer has "
                         f"{vq['codebook_size']} codes; train the prior on this tokenizer's tokens")
    if list(prior["grid"][-2:]) != [grid, grid]:
        raise SystemExit(f"export: {key} has grid {prior['grid']} but the tokenizer makes {grid}x{grid} codes "
                         f"per image; train the prior on this tokenizer's tokens")


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vq", default="checkpoints/vq")
    ap.add_argument("--image", default="checkpoints/image_prior", help="'none': do not export an image prior")
    ap.add_argument("--video", default="checkpoints/video_prior", help="'none': do not export a video prior")
    ap.add_argument("--vocab", default="data/tokens/vocab.json")
    ap.add_argument("--out", default="scd_core/assets/tiny")
    ap.add_argument("--image-settings", default=None, metavar="JSON",
                    help='the image model\'s own sampling settings, e.g. \'{"cfg_scale": 2.0}\' (default: the '
                         "family's, top-k 100 and CFG 3)")
    args = ap.parse_args(argv)
    image_settings = None
    if args.image_settings:
        try:
            image_settings = json.loads(args.image_settings)
        except ValueError:
            raise SystemExit(f"--image-settings: not JSON: {args.image_settings!r}") from None
        allowed = {"top_k", "top_p", "temperature", "cfg_scale"}
        if not isinstance(image_settings, dict) or not set(image_settings) <= allowed:
            raise SystemExit(f"--image-settings: expected an object with keys among {sorted(allowed)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    old = json.loads((out / "config.json").read_text()) if (out / "config.json").exists() else {}
    config = {"family": "scd-tiny-emoji", "exported_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "training_code_commit": git_commit(), "training": dict(old.get("training", {}))}
    vq_cfg = json.loads(Path(args.vq).with_suffix(".json").read_text())["config"]
    present = {key: ckpt for key, ckpt in (("image_prior", args.image), ("video_prior", args.video))
               if ckpt.lower() != "none" and Path(ckpt + ".safetensors").exists()}
    for key, ckpt in present.items():     # check everything before writing anything
        check_prior_matches_vq(key, json.loads(Path(ckpt).with_suffix(".json").read_text())["config"], vq_cfg)
    for key in ("image_prior", "video_prior"):
        if key not in present and key in old:
            check_prior_matches_vq(f"the already exported {key} in {out}", old[key], vq_cfg)
    vq = export_weights(args.vq, out / "vq.safetensors")
    config["vq"] = vq["config"]
    config["training"]["vq"] = {"step": vq["step"], **vq.get("eval", {}), "args": vq["args"]}
    (out / "vocab.json").write_text(json.dumps(json.loads(Path(args.vocab).read_text()), indent=0))
    for key, ckpt in (("image_prior", args.image), ("video_prior", args.video)):
        if key in present:
            rec = export_weights(ckpt, out / f"{key}.safetensors")
            config[key] = rec["config"]
            config["training"][key] = {"step": rec["step"], "val_nll": rec.get("val_nll"),
                                       "train_nll": rec.get("train_nll"), "args": rec["args"]}
        elif key in old:
            config[key] = old[key]
            print(f"{key}: no checkpoint at {ckpt}; keeping the exported one")
    settings = dict(old.get("default_settings", {}))
    if image_settings is not None:
        settings["image"] = image_settings
    if settings:
        config["default_settings"] = settings
    (out / "config.json").write_text(json.dumps(config, indent=1))
    sizes = {p.name: round(p.stat().st_size / 1e6, 2) for p in sorted(out.glob("*.safetensors"))}
    g = vq_cfg["image_size"] // vq_cfg["patch"]
    print(f"exported to {out} ({vq_cfg['image_size']} px, {g}x{g} tokens, {vq_cfg['codebook_size']} codes): "
          f"{sizes} MB, total {sum(sizes.values()):.2f} MB")


if __name__ == "__main__":
    main()
