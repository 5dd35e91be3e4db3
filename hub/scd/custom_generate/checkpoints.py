# Built by hub/vendor.py from scd_core/models/checkpoints.py: edit the library, then rebuild.
"""Where a model's files are and how they are read: local folders, the Hugging Face Hub
(through `hub.fetch`), device and dtype choice.

Importing this module imports torch only; huggingface_hub is imported inside `hub`'s
functions that need it.

- `pick_device_dtype(device, dtype)`: CUDA + bf16 when a GPU is present, else CPU + float32.
- `resolve_weights(name_or_path, files)`: a local folder holding the weights of a folder path,
  a registry name (its `hub.HubFiles`, downloaded on first use) or a Hub id.
- `config_model_type(path)`: the `model_type` in a folder's config.json (for `claims_folder`).
- `cached_file(files, filename)`: a file of a cached snapshot, or None (never the network).
- `load_on_meta(build, open_state, ...)`: a network built on the meta device (no memory, no
  random initialisation), its weights read from a memory-mapped checkpoint straight into the
  dtype they are used in, a chunk of the file at a time (the compact implementations' loaders).
- `pretrained_converted(model_cls, folder, ...)`: the same reading for a transformers model,
  given to its `from_pretrained(state_dict=...)` (a text encoder from float32 files).
"""
from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable, Mapping

import torch
import torch.nn as nn

from .hub import HubFiles, ProgressFn, cached, fetch, looks_like_hub_id, mappable, read_checkpoint
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
    return dev, as_dtype(dtype, default=torch.bfloat16 if dev.type == "cuda" else torch.float32)


def as_dtype(dtype: str | torch.dtype | None, default: torch.dtype = torch.float32) -> torch.dtype:
    """A floating torch dtype from its name ("bfloat16", "bf16", "float32", ...) or itself;
    `default` for None or "auto"."""
    if dtype is None or dtype == "auto":
        return default
    if isinstance(dtype, torch.dtype) and dtype.is_floating_point:
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return _DTYPES[dtype.lower()]
    raise ValueError(f"dtype: expected one of {sorted(_DTYPES)} or a floating torch.dtype, got {dtype!r}")


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


# How much of a memory-mapped checkpoint is read before its map is dropped and opened anew.
# The pages read through a map count in the process's resident memory until the map is
# dropped, so at most this much of the file is held beside the converted weights.
CHUNK_BYTES = 64 * 2**20


def state_opener(path: str, read: Callable[[str], Mapping[str, torch.Tensor]]
                 ) -> Callable[[], Mapping[str, torch.Tensor]]:
    """`open_state` for `converted_state`: `read(path)` anew at each call when the file can be
    memory-mapped (safetensors, a zip-format `torch.save`), else read once and kept (an old
    pickle-format file cannot be mapped: reading it again per chunk would read it all again)."""
    if mappable(path):
        return lambda: read(path)
    state = read(path)
    return lambda: state


def converted_state(open_state: Callable[[], Mapping[str, torch.Tensor]], device: torch.device,
                    dtype: torch.dtype, *, chunk_bytes: int = CHUNK_BYTES) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint copied to `device`, its floating tensors in `dtype`.

    `open_state()` maps the file without reading it (`hub.read_checkpoint(..., mmap=True)`:
    `torch.load(mmap=True)` or safetensors) and returns its tensors under the names the
    network uses. The tensors are copied one at a time, and after each `chunk_bytes` of the
    file the map is dropped and opened anew, so the file's pages held never exceed one chunk
    and no returned tensor refers to the file: a float32 checkpoint read into bfloat16 never
    holds a float32 copy of the network.
    """
    state, held, out = open_state(), 0, {}
    for key in list(state):
        if held >= chunk_bytes:
            state, held = open_state(), 0          # the old map goes with the last reference to it
        tensor = state[key]
        held += tensor.nbytes
        out[key] = tensor.to(device=device, dtype=dtype if tensor.is_floating_point() else tensor.dtype, copy=True)
    return out


def load_on_meta(build: Callable[[], nn.Module], open_state: Callable[[], Mapping[str, torch.Tensor]],
                 load: Callable[[nn.Module, dict[str, torch.Tensor]], None], *, device: torch.device,
                 dtype: torch.dtype, what: str) -> nn.Module:
    """`build()` on the meta device (shapes only: no memory, no random initialisation), then
    the checkpoint's tensors (`converted_state`) put in place by `load(module, state)`, which
    must assign them (`load_state_dict(..., assign=True)`) and check that they match.

    Raises a ValueError naming `what` when a parameter or buffer was left unloaded.
    """
    with torch.device("meta"):
        module = build()
    load(module, converted_state(open_state, device, dtype))
    left = [name for name, t in [*module.named_parameters(), *module.named_buffers()] if t.is_meta]
    if left:
        raise ValueError(f"{what}: the checkpoint does not hold {', '.join(left[:5])}")
    return module.eval()


def pretrained_converted(model_cls, folder: str, device: torch.device, dtype: torch.dtype):
    """`model_cls` (a transformers class) from a local checkpoint folder, on `device` in eval
    mode: its tensors read by `converted_state` into `dtype` on the CPU and given to
    `model_cls.from_pretrained(None, config=..., state_dict=..., dtype=dtype)` (which ties
    weights and checks the names as usual, and places what it loads on the CPU: read onto the
    GPU, the tensors would be copied back), then moved to `device`.

    `from_pretrained(folder, dtype=...)` alone maps every weight file and keeps the pages it
    read mapped until it returns: a float32 text encoder loaded in bfloat16 then holds its
    float32 pages beside the bfloat16 copy. Here the float32 pages held never exceed a chunk,
    and the tensors the model does not take (an encoder-decoder's decoder) are never read.
    """
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    with torch.device("meta"):
        wanted = set(model_cls(config).state_dict())
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors"))) or \
        sorted(glob.glob(os.path.join(folder, "pytorch_model*.bin")))
    if not files:
        raise WeightsNotFoundError(f"model: no weight files (*.safetensors, pytorch_model*.bin) in {folder!r}")

    def open_state() -> dict[str, torch.Tensor]:
        state = {}
        for path in files:
            state.update({k: v for k, v in read_checkpoint(path, mmap=True).items() if k in wanted})
        return state

    state = converted_state(open_state, torch.device("cpu"), dtype)
    return model_cls.from_pretrained(None, config=config, state_dict=state, dtype=dtype).to(device).eval()
