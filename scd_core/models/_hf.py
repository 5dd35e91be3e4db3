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
  generated positions (per-row forgetting through the attention mask, explicit position ids),
  and lets rows join (`RowSlots.join`) and leave (`RowSlots.keep`) a running cache;
  `ResizableRows` gives such a session `add_rows` and `keep_rows`.
- `check_rows`, `guided_order`, `guided_rows`: the row arguments of `add_rows`/`keep_rows` for
  sessions that keep conditional rows, then unconditional ones.
- `cache_from_tensors`, `cache_tensors`: a `DynamicCache` built from, and read as, per-layer
  key/value tensors (its constructor and its `layers`: public API).
"""
from __future__ import annotations

import glob
import json
import os

from collections.abc import Sequence

import torch
import torch.nn.functional as F

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


def check_rows(rows, batch: int) -> torch.Tensor:
    """The `rows` argument of `keep_rows`: distinct indices in [0, batch), as a 1-D LongTensor."""
    try:
        rows = torch.as_tensor(rows)
    except (TypeError, ValueError, RuntimeError):
        rows = None
    if rows is None or rows.ndim != 1 or rows.dtype.is_floating_point or rows.dtype.is_complex \
            or rows.dtype == torch.bool:
        raise ValueError("rows: expected a 1-D tensor of integer row indices")
    rows = rows.long().cpu()
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= batch):
        raise ValueError(f"rows: expected indices in [0, {batch}), got {rows.tolist()}")
    if rows.unique().numel() != rows.numel():
        raise ValueError(f"rows: each row may be kept once, got {rows.tolist()}")
    return rows


def guided_order(old: int, new: int, reps: int) -> torch.Tensor:
    """Cache rows of a batch of `old` prompts followed by one of `new` prompts, each laid out
    as `reps` blocks (conditional rows, then unconditional ones): the index into
    cat([old rows, new rows]) that gives one block layout again (old + new per block)."""
    blocks = []
    for r in range(reps):
        blocks.append(torch.arange(r * old, (r + 1) * old))
        blocks.append(reps * old + torch.arange(r * new, (r + 1) * new))
    return torch.cat(blocks)


def guided_rows(rows: torch.Tensor, batch: int, reps: int) -> torch.Tensor:
    """Cache rows of prompts `rows` in a block layout of `reps` blocks of `batch` rows."""
    return torch.cat([rows + r * batch for r in range(reps)])


def cache_from_tensors(layers: Sequence[tuple[torch.Tensor, torch.Tensor]]):
    """A transformers `DynamicCache` holding these key/value tensors [R, heads, S, head_dim],
    one pair per layer (the constructor's documented way of filling a cache from tensors)."""
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=[(k, v) for k, v in layers])


def cache_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The key/value tensors of every layer of a `DynamicCache` of full-attention layers."""
    if any(cache.is_sliding):
        raise ValueError("cache: rows can join and leave only a cache of full-attention layers")
    return [(layer.keys, layer.values) for layer in cache.layers]


class RowSlots:
    """Per-row bookkeeping of a transformers `DynamicCache` whose rows advance independently.

    One DynamicCache appends the same number of slots to every row, so rows cannot be
    cropped separately. Instead each slot records which sequence offset of its row it holds
    (`off`, -1 for prompt slots) and whether it is still valid. Forgetting a row's offsets
    >= f just marks those slots invalid; the 2-D attention mask hides them and explicit
    position ids keep every row's positions right. Slots invalid in every row at the end
    of the cache are cropped away, so for a batch of one the cache stays exactly as long as
    the sequence; with rows at different positions it holds at most the union of holes.

    Rows join a running cache with `join` (the newcomers' prompt slots sit after the running
    rows' slots, padded with invalid slots) and leave it with `keep`, which also drops the
    slots no remaining row uses.

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

    @classmethod
    def _of(cls, valid: torch.Tensor, off: torch.Tensor, base: torch.Tensor) -> "RowSlots":
        slots = cls.__new__(cls)
        slots.valid, slots.off, slots.base = valid, off, base
        return slots

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

    def keep(self, cache, rows: torch.Tensor):
        """Keep only cache rows `rows` (in that order), then drop the slots that no kept row
        uses any more. Returns the cache to use from now on (this one, or a compacted copy)."""
        tensors = cache_tensors(cache)
        rows = rows.to(self.off.device)
        self.valid, self.off, self.base = self.valid[rows], self.off[rows], self.base[rows]
        alive = self.valid.any(0)
        if bool(alive.all()):
            cache.batch_select_indices(rows)
            return cache
        cols = alive.nonzero().squeeze(1)
        self.valid, self.off = self.valid[:, cols], self.off[:, cols]
        return cache_from_tensors([(k[rows.to(k.device)][:, :, cols.to(k.device)],
                                    v[rows.to(v.device)][:, :, cols.to(v.device)]) for k, v in tensors])

    @staticmethod
    def join(first: tuple[object, "RowSlots"], second: tuple[object, "RowSlots"],
             order: torch.Tensor) -> tuple[object, "RowSlots"]:
        """One cache and its bookkeeping from two (rows joining a running batch): the shorter
        one's rows get invalid slots at the end, then cat([first rows, second rows])[order]."""
        width = max(slots.valid.shape[1] for _, slots in (first, second))
        layers, valid, off, base = [], [], [], []
        for cache, slots in (first, second):
            extra = width - slots.valid.shape[1]
            valid.append(F.pad(slots.valid, (0, extra), value=False))
            off.append(F.pad(slots.off, (0, extra), value=-1))
            base.append(slots.base)
            layers.append([(F.pad(k, (0, 0, 0, extra)), F.pad(v, (0, 0, 0, extra)))
                           for k, v in cache_tensors(cache)])
        order = order.to(first[1].off.device)
        kv = [(torch.cat([ka, kb])[order.to(ka.device)], torch.cat([va, vb])[order.to(va.device)])
              for (ka, va), (kb, vb) in zip(*layers)]
        slots = RowSlots._of(torch.cat(valid)[order], torch.cat(off)[order], torch.cat(base)[order])
        return cache_from_tensors(kv), slots


class ResizableRows:
    """`add_rows` / `keep_rows` for a session whose rows share one `DynamicCache` with
    `RowSlots` bookkeeping, laid out as `reps` blocks of `batch` rows (conditional rows, then
    unconditional ones). The session provides `tm` (whose `start(prompts, cfg_scale)` makes a
    session of the same kind), `cfg_scale`, `batch`, `reps`, `n_rows`, `cache`, `slots` and
    `first_logits`."""

    @torch.no_grad()
    def add_rows(self, prompts: Sequence[str]) -> torch.Tensor:
        """Start new rows after the existing ones (one forward pass over their prompts, with
        this session's guidance); returns their first logits [b, V]."""
        new = self.tm.start(prompts, self.cfg_scale)
        order = guided_order(self.batch, new.batch, self.reps)
        self.cache, self.slots = RowSlots.join((self.cache, self.slots), (new.cache, new.slots), order)
        self.batch += new.batch
        self.n_rows = self.reps * self.batch
        self.first_logits = torch.cat([self.first_logits, new.first_logits])
        return new.first_logits

    def keep_rows(self, rows: torch.LongTensor) -> None:
        """Keep only the rows listed, in that order; the others are forgotten."""
        rows = check_rows(rows, self.batch)
        self.cache = self.slots.keep(self.cache, guided_rows(rows, self.batch, self.reps))
        self.batch = int(rows.numel())
        self.n_rows = self.reps * self.batch
        self.first_logits = self.first_logits[rows.to(self.first_logits.device)]


def load_pretrained(folder: str, model_cls, processor_cls, device, dtype, family: str):
    """(model on `device` in eval mode, processor) from a local folder (already downloaded)."""
    try:
        processor = processor_cls.from_pretrained(folder, local_files_only=True)
        model = model_cls.from_pretrained(folder, dtype=dtype, local_files_only=True)
    except OSError as exc:
        raise WeightsNotFoundError(f"model: could not load {family} from {folder!r}: {exc}") from exc
    return model.to(device).eval(), processor
