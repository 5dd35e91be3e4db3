"""Export trained checkpoints into the shipped assets (fp16 safetensors + JSON).

    python -m scd_core.train.export --vq checkpoints/vq --image checkpoints/image_prior \
        --video checkpoints/video_prior --vocab data/tokens/vocab.json --out assets/tiny

Writes `vq.safetensors`, `image_prior.safetensors`, `video_prior.safetensors` (fp16),
`vocab.json` (the prompt words) and `config.json` (architectures, training steps and
held-out metrics, the commit of the training code). A prior whose checkpoint is missing
is skipped, and the one already in `--out` is kept.
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


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vq", default="checkpoints/vq")
    ap.add_argument("--image", default="checkpoints/image_prior")
    ap.add_argument("--video", default="checkpoints/video_prior")
    ap.add_argument("--vocab", default="data/tokens/vocab.json")
    ap.add_argument("--out", default="assets/tiny")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    old = json.loads((out / "config.json").read_text()) if (out / "config.json").exists() else {}
    config = {"family": "scd-tiny-emoji", "exported_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
              "training_code_commit": git_commit(), "training": dict(old.get("training", {}))}
    vq = export_weights(args.vq, out / "vq.safetensors")
    config["vq"] = vq["config"]
    config["training"]["vq"] = {"step": vq["step"], **vq.get("eval", {}), "args": vq["args"]}
    (out / "vocab.json").write_text(json.dumps(json.loads(Path(args.vocab).read_text()), indent=0))
    for key, ckpt in (("image_prior", args.image), ("video_prior", args.video)):
        if Path(ckpt + ".safetensors").exists():
            rec = export_weights(ckpt, out / f"{key}.safetensors")
            config[key] = rec["config"]
            config["training"][key] = {"step": rec["step"], "val_nll": rec.get("val_nll"),
                                       "train_nll": rec.get("train_nll"), "args": rec["args"]}
        elif key in old:
            config[key] = old[key]
            print(f"{key}: no checkpoint at {ckpt}; keeping the exported one")
    (out / "config.json").write_text(json.dumps(config, indent=1))
    sizes = {p.name: round(p.stat().st_size / 1e6, 2) for p in sorted(out.glob("*.safetensors"))}
    print(f"exported to {out}: {sizes} MB, total {sum(sizes.values()):.2f} MB")


if __name__ == "__main__":
    main()
