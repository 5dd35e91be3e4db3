"""Small shared helpers for adapters built on Hugging Face transformers.

Importing this module imports torch only; transformers and huggingface_hub are imported
inside the functions that need them. Downloads go through `hub.fetch`.

- `crop_to(cache, keep_len)`: crop a transformers `Cache` to `keep_len` tokens (5.x API).
- `pick_device_dtype(device, dtype)`: CUDA + bf16 when a GPU is present, else CPU + float32.
- `resolve_weights(name_or_path, files)`: a local folder holding the weights of a folder path,
  a registry name (its `hub.HubFiles`, downloaded on first use) or a Hub id.
- `config_model_type(path)`: the `model_type` in a folder's config.json (for `claims_folder`).
- `check_prompts`, `check_cfg`, `check_tokens`, `check_step`, `left_pad`: argument checks
  (ValueError naming the argument) and prompt padding shared by adapters.
- `RowSlots`: bookkeeping that lets the rows of one `DynamicCache` sit at different
  generated positions (per-row forgetting through the attention mask, explicit position ids).
"""
from __future__ import annotations

import glob
import json
import os

from collections.abc import Sequence

import torch

from .hub import HubFiles, ProgressFn, fetch, looks_like_hub_id
from .hub import WeightsNotFoundError  # noqa: F401  (adapters and callers import it from here)

WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")


def crop_to(cache, keep_len: int) -> None:
    """Drop cached tokens beyond `keep_len` (transformers 5.x `crop` takes a negative count).

    Guards against over-cropping (transformers issue #47433): never crops below zero.
    """
    n = int(cache.get_seq_length()) - int(keep_len)
    if n > 0:
        cache.crop(-n)


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


# ---------------------------------------------------------------- argument checks shared by adapters

def check_prompts(prompts: Sequence[str]) -> list[str]:
    if isinstance(prompts, str) or not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise ValueError(f"prompts: expected a non-empty list of strings, got {prompts!r}")
    if not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompts: every prompt must be a string")
    return list(prompts)


def check_cfg(cfg_scale: float) -> float:
    try:
        value = float(cfg_scale)
    except (TypeError, ValueError):
        raise ValueError(f"cfg_scale: expected a number, got {cfg_scale!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"cfg_scale: expected a finite number, got {cfg_scale!r}")
    return value


def check_tokens(tokens, vocab_size: int, name: str) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name}: expected an integer torch tensor, got {type(tokens).__name__}")
    if tokens.ndim != 2 or tokens.shape[1] == 0:
        raise ValueError(f"{name}: expected shape [B, W] with W >= 1, got {list(tokens.shape)}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{name}: values must lie in [0, {vocab_size})")
    return tokens.long()


def check_step(tokens, start, batch: int, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate `Session.step` arguments: tokens [batch, W] in [0, V), start [batch] >= 0."""
    tokens = check_tokens(tokens, vocab_size, "tokens")
    if tokens.shape[0] != batch:
        raise ValueError(f"tokens: expected {batch} rows, got {tokens.shape[0]}")
    if not isinstance(start, torch.Tensor):
        start = torch.as_tensor(start)
    start = start.reshape(-1).long()
    if start.shape[0] != batch:
        raise ValueError(f"start: expected {batch} entries, got {start.shape[0]}")
    if int(start.min()) < 0:
        raise ValueError("start: positions must be >= 0")
    return tokens, start


def left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-id rows of different lengths -> left-padded ids [R, P] and mask [R, P]."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids.to(device), mask.to(device)


class RowSlots:
    """Per-row bookkeeping of a transformers `DynamicCache` whose rows advance independently.

    One DynamicCache appends the same number of slots to every row, so rows cannot be
    cropped separately. Instead each slot records which sequence offset of its row it holds
    (`off`, -1 for prompt slots) and whether it is still valid. Forgetting a row's offsets
    >= f just marks those slots invalid; the 2-D attention mask hides them and explicit
    position ids keep every row's positions right. Slots invalid in every row at the end
    of the cache are cropped away, so for a batch of one the cache stays exactly as long as
    the sequence; with rows at different positions it holds at most the union of holes.

    Offsets are counted from the first generated token of the row's sequence (an adapter
    may feed extra forced tokens, such as end-of-row markers, as offsets of their own).
    """

    def __init__(self, prompt_mask: torch.Tensor):
        """`prompt_mask` [R, P]: 1 for real prompt tokens, 0 for (left) padding."""
        if prompt_mask.ndim != 2:
            raise ValueError("prompt_mask: expected [rows, prompt_len]")
        self.valid = prompt_mask.bool().clone()
        self.off = torch.full(prompt_mask.shape, -1, dtype=torch.long, device=prompt_mask.device)
        self.base = prompt_mask.long().sum(-1)          # position id of offset 0, per row

    @staticmethod
    def prompt_position_ids(prompt_mask: torch.Tensor) -> torch.Tensor:
        """Position ids of a left-padded prompt: 0 at each row's first real token."""
        return (prompt_mask.long().cumsum(-1) - 1).clamp(min=0)

    def fed_length(self) -> torch.Tensor:
        """[R]: how many generated offsets each row currently holds (they are 0..n-1)."""
        return (self.valid & (self.off >= 0)).sum(-1)

    def prepare(self, cache, forget_from: torch.Tensor, offsets: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Forget offsets >= `forget_from` [R], then lay out the new entries `offsets` [R, W].

        `offsets[r, j]` is the sequence offset that the j-th fed entry of row r takes, or -1
        for a padding entry (fed but never attended to). Returns the 2-D `attention_mask`
        [R, cache_len + W] and `position_ids` [R, W] for the forward call that appends
        them, and records the new slots. Call it right before that forward.
        """
        forget_from = forget_from.to(self.off.device).long()
        offsets = offsets.to(self.off.device).long()
        self.valid &= ~(self.off >= forget_from[:, None])
        held = self.fed_length()
        if bool((held < forget_from).any()):
            r = int((held < forget_from).nonzero()[0, 0])
            raise ValueError(f"start: row {r} asks to continue from offset {int(forget_from[r])}, "
                             f"but only offsets 0..{int(held[r]) - 1} were fed")
        self._crop_dead_tail(cache)
        new_valid = offsets >= 0
        mask = torch.cat([self.valid, new_valid], dim=1).long()
        position_ids = self.base[:, None] + offsets.clamp(min=0)
        self.valid = torch.cat([self.valid, new_valid], dim=1)
        self.off = torch.cat([self.off, offsets], dim=1)
        return mask, position_ids

    def _crop_dead_tail(self, cache) -> None:
        alive = self.valid.any(0).nonzero()
        keep = int(alive[-1]) + 1 if len(alive) else 0
        if keep < self.valid.shape[1]:
            crop_to(cache, keep)
            self.valid = self.valid[:, :keep]
            self.off = self.off[:, :keep]


def load_pretrained(folder: str, model_cls, processor_cls, device, dtype, family: str):
    """(model on `device` in eval mode, processor) from a local folder (already downloaded)."""
    try:
        processor = processor_cls.from_pretrained(folder, local_files_only=True)
        model = model_cls.from_pretrained(folder, dtype=dtype, local_files_only=True)
    except OSError as exc:
        raise WeightsNotFoundError(f"model: could not load {family} from {folder!r}: {exc}") from exc
    return model.to(device).eval(), processor
