"""Sessions built on a Hugging Face transformers `DynamicCache` (Janus-Pro, Emu3).

Importing this module imports torch only; transformers is imported inside the functions
that need it.

- `crop_to(cache, keep_len)`: crop a transformers `Cache` to `keep_len` tokens (5.x API).
- `RowSlots`: bookkeeping that lets the rows of one `DynamicCache` sit at different
  generated positions (per-row forgetting through the attention mask, explicit position ids),
  and lets rows join (`RowSlots.join`) and leave (`RowSlots.keep`) a running cache;
  `ResizableRows` gives such a session `add_rows` and `keep_rows` (through `rows.GuidedRows`).
- `cache_from_tensors`, `cache_tensors`: a `DynamicCache` built from, and read as, per-layer
  key/value tensors (its constructor and its `layers`: public API).
- `load_pretrained`: a transformers model and processor from a downloaded folder.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .hub import WeightsNotFoundError
from .rows import GuidedRows


def crop_to(cache, keep_len: int) -> None:
    """Drop cached tokens beyond `keep_len` (transformers 5.x `crop` takes a negative count).

    Guards against over-cropping (transformers issue #47433): never crops below zero.
    """
    n = int(cache.get_seq_length()) - int(keep_len)
    if n > 0:
        cache.crop(-n)


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

    def prepare_tree(self, cache, forget_from: torch.Tensor, offsets: torch.Tensor, seen: torch.Tensor,
                     dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """As `prepare`, for the entries of a draft tree: `offsets` [R, T] (siblings share
        one), `seen` [R, T, T] what each entry attends to among them (`tree.ancestors`).
        Returns a 4-D additive float mask [R, 1, T, cache_len + T] in `dtype` (transformers
        uses a 4-D mask as given) and `position_ids` [R, T]. The entries' slots are pending:
        no later call sees them until `keep_tree` keeps some."""
        mask, position_ids = self.prepare(cache, forget_from, offsets)
        held = mask.shape[1] - offsets.shape[1]
        allowed = torch.cat([mask[:, None, :held].bool().expand(-1, offsets.shape[1], -1),
                             seen.to(mask.device)], dim=2)[:, None]
        self.valid[:, held:] = False
        self.tree_from = held
        additive = torch.zeros(allowed.shape, dtype=dtype, device=mask.device)
        return additive.masked_fill_(~allowed, torch.finfo(dtype).min), position_ids

    def keep_tree(self, cache, entries: torch.Tensor, kept: torch.Tensor, offsets: torch.Tensor) -> None:
        """After a `prepare_tree` forward: keep its entries `entries` [R, Q] where `kept`, at
        sequence offsets `offsets` [R, Q], in that order; forget the others. Each layer's
        kept keys/values are gathered to the front of the tree's slots (public `keys` /
        `values` of the cache's layers) and the rest cropped away."""
        held = self.tree_from
        width = entries.shape[1]
        for layer in cache.layers:
            idx = entries.to(layer.keys.device)[:, None, :, None]
            layer.keys[:, :, held:held + width] = layer.keys[:, :, held:].gather(
                2, idx.expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3]))
            layer.values[:, :, held:held + width] = layer.values[:, :, held:].gather(
                2, idx.expand(-1, layer.values.shape[1], -1, layer.values.shape[3]))
        crop_to(cache, held + width)
        kept = kept.to(self.off.device)
        self.valid = torch.cat([self.valid[:, :held], kept], dim=1)
        self.off = torch.cat([self.off[:, :held], torch.where(kept, offsets.to(self.off.device), -1)], dim=1)
        self._crop_dead_tail(cache)

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


class ResizableRows(GuidedRows):
    """`add_rows` / `keep_rows` for a session whose rows share one `DynamicCache` with
    `RowSlots` bookkeeping, laid out as `reps` blocks of `batch` rows (conditional rows, then
    unconditional ones). The session provides `tm` (whose `start(prompts, cfg_scale)` makes a
    session of the same kind), `cfg_scale`, `batch`, `reps`, `n_rows`, `cache`, `slots` and
    `first_logits`."""

    def start_like(self, prompts: Sequence[str]) -> "ResizableRows":
        return self.tm.start(prompts, self.cfg_scale)

    def join_state(self, new: "ResizableRows", order: torch.Tensor) -> None:
        self.cache, self.slots = RowSlots.join((self.cache, self.slots), (new.cache, new.slots), order)
        self.n_rows = self.reps * (self.batch + new.batch)

    def select_state(self, index: torch.Tensor) -> None:
        self.cache = self.slots.keep(self.cache, index)
        self.n_rows = int(index.numel())


def load_pretrained(folder: str, model_cls, processor_cls, device, dtype, family: str):
    """(model on `device` in eval mode, processor) from a local folder (already downloaded)."""
    try:
        processor = processor_cls.from_pretrained(folder, local_files_only=True)
        model = model_cls.from_pretrained(folder, dtype=dtype, local_files_only=True)
    except OSError as exc:
        raise WeightsNotFoundError(f"model: could not load {family} from {folder!r}: {exc}") from exc
    return model.to(device).eval(), processor
