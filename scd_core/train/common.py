"""Shared training plumbing: seeded RNG, the training device, checkpoints in safetensors + JSON
(never pickle).

Checkpoints hold CPU tensors only and are loaded onto the CPU first, so one saved on a GPU
resumes on the CPU and vice versa; the batch sampling generator always lives on the CPU.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch


def set_threads(n: int) -> None:
    torch.set_num_threads(max(1, n))
    os.environ.setdefault("OMP_NUM_THREADS", str(n))


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def parse_device(name: str) -> str:
    """argparse type of --device: a usable torch device, as a string (it goes into the JSON record)."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"{name!r} is not a device (use cpu, cuda or cuda:N)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{name!r}: CUDA is not available on this machine")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{name!r}: only {torch.cuda.device_count()} CUDA device(s) here")
    if device.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"{name!r}: training runs on cpu or cuda only")
    return str(device)


def add_device_argument(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--device", type=parse_device, default=default_device(),
                    help="where the model trains: cpu, cuda or cuda:N (default: cuda when available); "
                         "batches are still sampled on the CPU")


def cosine_lr(step: int, total: int, peak: float, warmup: int = 100, floor: float = 0.1) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


def cpu_tensor(value: torch.Tensor) -> torch.Tensor:
    return value.detach().cpu().contiguous()


def optimizer_tensors(opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    out = {}
    for idx, state in opt.state_dict()["state"].items():
        for key, value in state.items():
            out[f"opt.{idx}.{key}"] = cpu_tensor(value if torch.is_tensor(value) else torch.tensor(value))
    return out


def load_optimizer_tensors(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> None:
    """Restore the optimizer state; `load_state_dict` moves each state tensor to its parameter's
    device (the `step` counters of a non-fused AdamW stay on the CPU, as PyTorch wants them)."""
    sd = opt.state_dict()
    state: dict[int, dict] = {}
    for name, value in tensors.items():
        if name.startswith("opt."):
            _, idx, key = name.split(".", 2)
            state.setdefault(int(idx), {})[key] = value
    sd["state"] = state
    opt.load_state_dict(sd)


def save_checkpoint(path: str | Path, model: torch.nn.Module, opt: torch.optim.Optimizer,
                    gen: torch.Generator, step: int, info: dict) -> None:
    """model/optimizer/RNG tensors (copied to the CPU) to `path`.safetensors, the rest to `path`.json (atomic)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": cpu_tensor(v) for k, v in model.state_dict().items()}
    tensors.update(optimizer_tensors(opt))
    tensors["rng"] = gen.get_state()
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, path.with_suffix(".safetensors"))
    meta = dict(info, step=step, saved_at=time.strftime("%Y-%m-%d %H:%M:%S"))
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1))


def load_checkpoint(path: str | Path, model: torch.nn.Module, opt: torch.optim.Optimizer | None,
                    gen: torch.Generator | None) -> dict:
    """Load a checkpoint saved on any device into `model`/`opt` wherever they are (tensors are read
    onto the CPU, then copied to the parameters' device); `gen` is a CPU generator."""
    from safetensors.torch import load_file

    path = Path(path)
    tensors = load_file(str(path.with_suffix(".safetensors")), device="cpu")
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    if opt is not None:
        load_optimizer_tensors(opt, tensors)
    if gen is not None:
        gen.set_state(tensors["rng"])
    return json.loads(path.with_suffix(".json").read_text())


def model_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Only the model weights of a checkpoint."""
    from safetensors.torch import load_file

    tensors = load_file(str(Path(path).with_suffix(".safetensors")), device="cpu")
    return {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}


class CheckpointClock:
    """When to save (every `every_minutes`, at the last step, at the time limit) and when to stop."""

    def __init__(self, every_minutes: float, max_minutes: float):
        self.every, self.limit = 60 * every_minutes, 60 * max_minutes
        self.t0 = self.last = time.time()

    def elapsed(self) -> float:
        return time.time() - self.t0

    def save_if_due(self, save, step: int, last_step: int) -> bool:
        """Call `save()` when a checkpoint is due; True when the time limit has been reached."""
        out_of_time = bool(self.limit) and self.elapsed() > self.limit
        if time.time() - self.last > self.every or step == last_step or out_of_time:
            save()
            self.last = time.time()
        if out_of_time:
            print("time limit reached", flush=True)
        return out_of_time
