"""What a model list shows without loading anything, and how long a run holds a GPU.

- `model_status(name) -> ModelStatus`: "embedded", "cached", "downloadable", "needs GPU" or
  "unavailable", with a one-line reason a person can act on. Reads the local cache only:
  no weights are loaded and no request is made.
- `availability(name)`: None when `model_status(name).usable` (the model loads here, perhaps
  after a download), else the reason.
- `gpu_seconds(model_name, window, samples, ...)`: a duration for ZeroGPU's
  `@spaces.GPU(duration=...)`, which may be a function of the decorated call's inputs.
"""
from __future__ import annotations

import importlib
import math
import os
from dataclasses import dataclass

from .registry import REGISTRY, entry_for_folder
from .hub import HubFiles, cached, offline

STATES = ("embedded", "cached", "downloadable", "needs GPU", "unavailable")
USABLE_STATES = ("embedded", "cached", "downloadable")
ZERO_GPU_ENV = "SPACES_ZERO_GPU"      # set to "true" by Hugging Face on ZeroGPU Spaces


@dataclass(frozen=True)
class ModelStatus:
    """Where a model stands on this machine. `reason` is one full line, never truncated."""

    name: str
    state: str                          # one of STATES
    reason: str
    needs_gpu: bool                     # it needs a CUDA GPU, whether or not this machine has one
    repos: tuple[str, ...] = ()         # the Hub repositories its files come from
    download_gb: float | None = None    # about how much its first use downloads (None: nothing)

    @property
    def usable(self) -> bool:
        """It loads here: shipped, cached, or downloaded on first use."""
        return self.state in USABLE_STATES

    @property
    def label(self) -> str:
        """For a model list: the state, with the reason when the model cannot be used."""
        return self.state if self.usable else f"{self.state}: {self.reason}"


def gpu_available() -> bool:
    """A CUDA GPU is here, or this is a ZeroGPU Space (which attaches one per decorated call)."""
    import torch

    return torch.cuda.is_available() or os.environ.get(ZERO_GPU_ENV, "").lower() == "true"


def model_status(name: str) -> ModelStatus:
    """The state of `name` (a registry name or a local folder) on this machine. Cheap."""
    entry = REGISTRY.get(name) if isinstance(name, str) else None
    if entry is None:
        if isinstance(name, str) and os.path.isdir(name) and entry_for_folder(name) is not None:
            return ModelStatus(name, "cached", f"local folder {name}", needs_gpu=False)
        return ModelStatus(str(name), "unavailable", f"unknown model {name!r}", needs_gpu=False)
    try:
        module = importlib.import_module(f"scd_core.models.{entry.module}")
    except ImportError as exc:
        return ModelStatus(name, "unavailable", f"its adapter cannot be imported here ({exc})", needs_gpu=False)
    if not entry.needs_weights:
        check = getattr(module, "availability", None)
        problem = check(name) if check is not None else None
        if problem:
            return ModelStatus(name, "unavailable", problem, needs_gpu=False)
        return ModelStatus(name, "embedded", "shipped with the project", needs_gpu=False)
    return _hub_status(name, module)


def _hub_status(name: str, module) -> ModelStatus:
    files: tuple[HubFiles, ...] = module.hub_files(name)
    repos = tuple(f.repo_id for f in files)
    find_missing = getattr(module, "missing_files", None)
    missing = find_missing(name) if find_missing is not None else [f for f in files if cached(f) is None]
    gb = sum(f.approx_gb or 0.0 for f in missing) or None
    gpu = module.gpu_reason(name)
    to_fetch = _describe_download(missing)
    if gpu and not gpu_available():
        tail = "its files are cached" if not missing else f"first use downloads {to_fetch}"
        return ModelStatus(name, "needs GPU", f"{gpu}, and no CUDA GPU is here; {tail}", True, repos, gb)
    manual = getattr(module, "manual_missing", None)
    problem = manual(name) if manual is not None else None
    if problem:
        return ModelStatus(name, "unavailable", problem, bool(gpu), repos, gb)
    if not missing:
        return ModelStatus(name, "cached", f"files cached ({', '.join(repos)})", bool(gpu), repos, None)
    if offline():
        commands = "; ".join(f"`{f.prefetch_command()}`" for f in missing)
        return ModelStatus(name, "unavailable",
                           f"not in the Hugging Face cache and downloads are off (HF_HUB_OFFLINE=1): "
                           f"prefetch with {commands}", bool(gpu), repos, gb)
    licences = " ".join(f.licence + " first." for f in missing if f.licence)
    reason = f"first use downloads {to_fetch}" + (f". {licences}" if licences else "")
    return ModelStatus(name, "downloadable", reason, bool(gpu), repos, gb)


def _describe_download(missing: list[HubFiles]) -> str:
    return ", ".join(f"{f.size_text()} from {f.repo_id}" for f in missing)


def availability(name: str) -> str | None:
    """None when `name` can be used here (shipped, cached, or downloaded on first use);
    otherwise the reason (`model_status(name).reason`). Cheap: never loads weights."""
    status = model_status(name)
    return None if status.usable else status.reason


# ------------------------------------------------------------------------ GPU time

GPU_OVERHEAD_S = 20.0      # weights onto the GPU, prefill, decoding the pixels
GPU_SAFETY = 1.5           # the estimate is a bound: a run that outlives it is cut off
SPECULATIVE_SPEEDUP = 1.5  # passes saved by SJD/SCD, taken below what they measure (2x and more)
MIN_GPU_SECONDS = 15
MAX_GPU_SECONDS = 300      # the longest duration ZeroGPU grants one call (5 minutes)


def gpu_seconds(model_name: str, window: int = 1, samples: int = 1, method: str = "sjd",
                pace: float = 0.0, clamp: bool = True) -> int:
    """Seconds of GPU one decoding run needs: a duration for `@spaces.GPU(duration=...)`.

    `samples` rows are decoded together (one batch), `window` is L, `pace` any pause per
    forward pass (the app's slow motion). `method` is a decoding method's name: "ar" commits
    one token per pass, any other is speculative (which names exist is the decoder's business,
    checked where the run is made). The estimate assumes the per-pass cost of the model's
    registry entry, a larger cost for wider windows and batches, and a speculative run saving
    fewer passes than it does, then adds a margin: better to hold the GPU a little long than
    to be cut off. With `clamp`, the result lies in [MIN_GPU_SECONDS, MAX_GPU_SECONDS]; a
    larger raw estimate (`clamp=False`) means the run may not fit one ZeroGPU call.
    """
    entry = REGISTRY.get(model_name) if isinstance(model_name, str) else None
    if entry is None:
        raise ValueError(f"model_name: unknown model {model_name!r}; known: {', '.join(REGISTRY)}")
    if not isinstance(method, str) or not method:
        raise ValueError(f"method: expected a decoding method's name, got {method!r}")
    for label, value in (("window", window), ("samples", samples)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label}: expected a whole number >= 1, got {value!r}")
    if not isinstance(pace, (int, float)) or not math.isfinite(pace) or pace < 0:
        raise ValueError(f"pace: expected seconds >= 0, got {pace!r}")
    speculative = method != "ar" and window > 1
    passes = entry.tokens / SPECULATIVE_SPEEDUP if speculative else entry.tokens
    width = window if speculative else 1
    per_pass = entry.gpu_ms / 1000.0 * (1.0 + width / 128.0) * (1.0 + 0.5 * (samples - 1)) + pace
    seconds = math.ceil(GPU_OVERHEAD_S + passes * per_pass * GPU_SAFETY)
    return min(MAX_GPU_SECONDS, max(MIN_GPU_SECONDS, seconds)) if clamp else seconds
