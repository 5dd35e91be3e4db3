"""Where a model's files are and how they are read: local folders, the Hugging Face Hub
(through `hub.fetch`), device and dtype choice.

Importing this module imports torch only; huggingface_hub is imported inside `hub`'s
functions that need it.

- `pick_device_dtype(device, dtype)`: CUDA + bf16 when a GPU is present, else CPU + float32.
- `resolve_weights(name_or_path, files)`: a local folder holding the weights of a folder path,
  a registry name (its `hub.HubFiles`, downloaded on first use) or a Hub id.
- `config_model_type(path)`: the `model_type` in a folder's config.json (for `claims_folder`).
- `cached_file(files, filename)`: a file of a cached snapshot, or None (never the network).
"""
from __future__ import annotations

import glob
import json
import os

import torch

from .hub import HubFiles, ProgressFn, cached, fetch, looks_like_hub_id
from .hub import WeightsNotFoundError  # noqa: F401  (adapters and callers import it from here)

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


def pick_device_dtype(device: str | torch.device | None = None,
                      dtype: str | torch.dtype | None = None) -> tuple[torch.device, torch.dtype]:
    """Resolve `device`/`dtype`: default CUDA + bfloat16 when a GPU is present, else CPU + float32."""
    if device is None or device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device: cannot parse {device!r} ({exc})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {device!r} asked for, but no CUDA GPU is available here")
    if dtype is None or dtype == "auto":
        return dev, (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    if isinstance(dtype, torch.dtype):
        return dev, dtype
    if isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return dev, _DTYPES[dtype.lower()]
    raise ValueError(f"dtype: expected one of {sorted(_DTYPES)} or a torch.dtype, got {dtype!r}")


def has_weights(folder: str) -> bool:
    """True when `folder` holds a config.json and at least one weight file."""
    if not os.path.isfile(os.path.join(folder, "config.json")):
        return False
    return any(glob.glob(os.path.join(folder, pattern)) for pattern in WEIGHT_PATTERNS)


def resolve_weights(name_or_path: str, files: HubFiles | None, *, local_files_only: bool = False,
                    progress: ProgressFn | None = None) -> str:
    """A local folder holding the weights of `name_or_path`, downloading them on first use.

    `name_or_path` is an existing folder, a registry name whose files are `files`, or a Hub
    id ('org/name', a transformers checkpoint). Raises `WeightsNotFoundError` (a
    FileNotFoundError and a ValueError) saying what is missing and what to do.
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ValueError(f"model: expected a model name, hub id or folder, got {name_or_path!r}")
    path = os.path.expanduser(name_or_path)
    if os.path.isdir(path):
        if not has_weights(path):
            raise WeightsNotFoundError(f"model: folder {path!r} has no config.json and weight files")
        return path
    if files is None:
        if not looks_like_hub_id(name_or_path):
            raise WeightsNotFoundError(f"model: no folder at {name_or_path!r}")
        files = HubFiles.transformers(name_or_path)
    return fetch(files, local_files_only=local_files_only, progress=progress, needed_by=name_or_path)


def config_model_type(path: str) -> str | None:
    """`model_type` from `path`/config.json, or None when unreadable. Cheap."""
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            return json.load(f).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def cached_file(files: HubFiles, filename: str) -> str | None:
    """`filename` of the cached snapshot of `files`, or None (never the network)."""
    folder = cached(files)
    path = os.path.join(folder, filename) if folder else None
    return path if path and os.path.isfile(path) else None
