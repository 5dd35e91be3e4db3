"""Shared training plumbing: seeded RNG, checkpoints in safetensors + JSON (never pickle)."""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import torch


def set_threads(n: int) -> None:
    torch.set_num_threads(max(1, n))
    os.environ.setdefault("OMP_NUM_THREADS", str(n))


def cosine_lr(step: int, total: int, peak: float, warmup: int = 100, floor: float = 0.1) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


def optimizer_tensors(opt: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    out = {}
    for idx, state in opt.state_dict()["state"].items():
        for key, value in state.items():
            out[f"opt.{idx}.{key}"] = value if torch.is_tensor(value) else torch.tensor(value)
    return out


def load_optimizer_tensors(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor]) -> None:
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
    """model/optimizer/RNG tensors to `path`.safetensors, the rest to `path`.json (atomic)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in model.state_dict().items()}
    tensors.update(optimizer_tensors(opt))
    tensors["rng"] = gen.get_state()
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, path.with_suffix(".safetensors"))
    meta = dict(info, step=step, saved_at=time.strftime("%Y-%m-%d %H:%M:%S"))
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1))


def load_checkpoint(path: str | Path, model: torch.nn.Module, opt: torch.optim.Optimizer | None,
                    gen: torch.Generator | None) -> dict:
    from safetensors.torch import load_file

    path = Path(path)
    tensors = load_file(str(path.with_suffix(".safetensors")))
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    if opt is not None:
        load_optimizer_tensors(opt, tensors)
    if gen is not None:
        gen.set_state(tensors["rng"])
    return json.loads(path.with_suffix(".json").read_text())


def model_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Only the model weights of a checkpoint."""
    from safetensors.torch import load_file

    tensors = load_file(str(Path(path).with_suffix(".safetensors")))
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
