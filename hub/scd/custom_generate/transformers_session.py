# Built by hub/vendor.py from scd_core/models/transformers_session.py: edit the library, then rebuild.
"""Sessions of transformers models (Janus-Pro, Emu3, Lumina-mGPT's Chameleon) on a KV cache
of fixed size, written by position.

- `SlotCache`: every layer's keys and values in slots fixed at the start, written at
  explicit per-row slots, so that rows sit at different positions and forgetting is
  masking; the model sees it as a transformers `Cache` and gets a 4-D mask and position ids.
- `RowEnds`: the layout of a model that closes every grid row with a forced end-of-row token
  (Emu3, Lumina-mGPT); `RowEndsSession`: the chain and tree passes over it.
- `ResizableRows`: rows joining and leaving such a session.

Nothing in a `step`, `step_tree` or `keep_path` built on these reads a value back or copies
to the device, and every tensor they read or write is borrowed from the model's buffers
(`static`). Importing this module imports torch only.
"""
from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .sampling import guide

from . import static
from .checks import check_step, left_pad
from .hub import WeightsNotFoundError
from .rows import GuidedRows
from .tree import Forced, Tree, check_path, check_tree, force_after, gather_nodes, path_entries


@functools.cache
def slot_layer_class() -> type:
    """`SlotLayer`, defined on first use (transformers is imported only then)."""
    from transformers.cache_utils import CacheLayerMixin

    class SlotLayer(CacheLayerMixin):
        """One attention layer of a `SlotCache`: keys/values [R, heads, C + tree slots, head_dim],
        borrowed from its `SlotCache`'s buffers at the first forward, written at the slots its
        `SlotCache` names for this forward (`owner.slots` [R, T]); the forward sees slots
        [0, `owner.view`)."""

        is_compileable = True
        is_sliding = False

        def __init__(self, owner: "SlotCache") -> None:
            super().__init__()
            self.owner = owner

        def take(self, keys: torch.Tensor, values: torch.Tensor) -> None:
            self.keys, self.values, self.device = keys, values, keys.device
            self.is_initialized = True

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            self.take(*self.owner.zeros_like(key_states, value_states))

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            slots, view = self.owner.slots, self.owner.view
            self.keys.scatter_(2, _along(slots, key_states), key_states.to(self.keys.dtype))
            self.values.scatter_(2, _along(slots, value_states), value_states.to(self.values.dtype))
            return self.keys[:, :, :view], self.values[:, :, :view]

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.owner.view, 0

        def get_seq_length(self) -> int:
            return self.owner.capacity

        def get_max_length(self) -> int:
            return self.owner.capacity

    return SlotLayer


def _along(slots: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
    """Slots [R, T] as a scatter index for states [R, heads, T, head_dim]."""
    return slots[:, None, :, None].expand(-1, states.shape[1], -1, states.shape[3])


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A boolean mask (True = attend) as the additive float mask transformers' attention adds."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, torch.finfo(dtype).min)


class SlotCache:
    """Keys and values of every layer, R rows of C = P + S + 1 slots each and `tree_slots`
    more, fixed at the start (or by `reserve`, before a run's first tree):

    - slots [0, P): the prompt region, left-padded (row r's prompt in [P - plen[r], P));
    - slots [P, P + S): the sequence, generated offset s of a row in slot P + s;
    - slot P + S: scratch, where entries that are not kept write (padding of a window, the
      nodes of a tree path not kept); no query ever sees it;
    - slots [C, C + tree_slots): a tree's entries, entry j in slot C + j, seen only by that
      tree's entries that the tree's mask lets see it.

    A forward writes where `slots` [R, T] says: a chain's entries at their sequence slots
    (`write_at`, the forward sees slots [0, C)), a tree's in the tree slots (`write_tree`, the
    forward sees [0, C + T)), from which `keep_path` moves the kept path's entries to their
    sequence slots by position. `cache` is what the model is given. Its tensors (and `plen`)
    are borrowed from `buffers` for `owner` (a session; by default a cache of its own, nothing
    reused) and given back as rows join or leave (`join`, `select`).
    """

    def __init__(self, num_layers: int, plen: torch.Tensor, P: int, S: int, tree_slots: int = 0,
                 buffers: static.Buffers | None = None, owner=None) -> None:
        from transformers.cache_utils import Cache

        self.buffers = buffers if buffers is not None else static.Buffers(idle_cap=0)
        self.owner = weakref.ref(owner if owner is not None else self)
        self.plen, = self.buffers.holding(self.owner(), [plen])
        self.P, self.S, self.tree_slots = int(P), int(S), int(tree_slots)
        self.slots: torch.Tensor | None = None
        self.view = self.capacity                               # the slots a forward sees
        layer = slot_layer_class()
        self.cache = Cache(layers=[layer(self) for _ in range(num_layers)])

    @property
    def capacity(self) -> int:
        return self.P + self.S + 1

    @property
    def scratch(self) -> int:
        return self.P + self.S

    @property
    def rows(self) -> int:
        return int(self.plen.shape[0])

    def tensors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(layer.keys, layer.values) for layer in self.cache.layers]

    def zeros_like(self, *states: torch.Tensor) -> list[torch.Tensor]:
        """Borrowed zeros for a layer's keys and values like `states` [R, heads, T, head_dim],
        over every slot."""
        slots = self.capacity + self.tree_slots
        return self.buffers.zeros(self.owner(), [((t.shape[0], t.shape[1], slots, t.shape[3]), t.dtype)
                                                 for t in states], states[0].device)

    def give_back(self) -> None:
        """Give every tensor back to the buffers (the cache is not used again)."""
        for layer in self.cache.layers:
            if layer.is_initialized:
                self.buffers.give_back([layer.keys, layer.values])
        self.buffers.give_back([self.plen])

    def reserve(self, entries: int) -> None:
        """Room for a tree of `entries` entries (the tree slots grow to it, never shrink):
        called before a run's first tree, so that no pass allocates (`step_tree` of a
        session calls it too, for a caller that did not)."""
        if entries <= self.tree_slots:
            return
        more = entries - self.tree_slots
        self.tree_slots = entries
        for layer in self.cache.layers:
            if layer.is_initialized:
                layer.take(*self.buffers.holding(self.owner(), [static.with_tree_slots(t, more) for t in
                                                                (layer.keys, layer.values)], old=[layer.keys, layer.values]))

    # -- what a forward writes, and what it sees ---------------------------------------------
    def prefill(self, dtype: torch.dtype, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the prompts, left-padded to `width` tokens (default P), in the last `width`
        slots of the prompt region: (additive mask [R, 1, width, C], position ids [R, width]).
        A prompt token sees its row's prompt up to itself; padding sees itself only."""
        width = self.P if width is None else width
        dev = self.plen.device
        q = torch.arange(self.P - width, self.P, device=dev)
        k = torch.arange(self.capacity, device=dev)
        first = (self.P - self.plen)[:, None, None]                                # [R, 1, 1]
        allowed = ((k >= first) & (k <= q[:, None])) | (k == q[:, None])           # [R, width, C]
        self.slots, self.view = q.expand(self.rows, -1), self.capacity
        return additive(allowed[:, None], dtype), (q - first[:, :, 0]).clamp(min=0)

    def prompt_seen(self, k: torch.Tensor) -> torch.Tensor:
        """[R, len(k)]: slot k holds a prompt token of the row."""
        return (k >= (self.P - self.plen)[:, None]) & (k < self.P)

    def write_at(self, offsets: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Entries at sequence offsets [R, T] (-1: padding, fed but never seen): set where the
        forward writes, and return (additive mask [R, 1, T, C], position ids [R, T]). An entry
        sees the row's prompt and the sequence up to and including its own offset (what the
        same forward writes before it included); padding sees the prompt."""
        k = torch.arange(self.capacity, device=offsets.device)
        seq = (k >= self.P) & (k <= self.P + offsets[:, :, None])                   # [R, T, C]
        allowed = self.prompt_seen(k)[:, None, :] | seq
        self.slots = torch.where(offsets >= 0, self.P + offsets, self.scratch)
        self.view = self.capacity
        return additive(allowed[:, None], dtype), self.plen[:, None] + offsets.clamp(min=0)

    def write_tree(self, begin: torch.Tensor, offsets: torch.Tensor, seen: torch.Tensor,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """A tree's entries at offsets [R, T] (-1: padding), written in the tree slots (entry j
        in slot C + j): each sees the row's prompt, the sequence before offset `begin` [R],
        and the entries `seen` [R, T, T] marks. Returns (additive mask [R, 1, T, C + T],
        position ids [R, T])."""
        R, T = offsets.shape
        self.reserve(T)
        k = torch.arange(self.capacity, device=offsets.device)
        prefix = self.prompt_seen(k) | ((k >= self.P) & (k < self.P + begin[:, None]))    # [R, C]
        allowed = torch.cat([prefix[:, None, :].expand(-1, T, -1), seen], 2)
        self.slots = (self.capacity + torch.arange(T, device=offsets.device)).expand(R, -1)
        self.view = self.capacity + T
        return additive(allowed[:, None], dtype), self.plen[:, None] + offsets.clamp(min=0)

    def keep_path(self, entries: torch.Tensor, valid: torch.Tensor, offsets: torch.Tensor) -> None:
        """After `write_tree`'s forward: move its entries `entries` [R, Q] from the tree slots
        to sequence offsets `offsets` [R, Q] where `valid`, the others to the scratch slot."""
        slots = torch.where(valid, self.P + offsets, self.scratch)
        C, T = self.capacity, self.view - self.capacity
        for layer in self.cache.layers:
            for cache in (layer.keys, layer.values):
                nodes = gather_nodes(cache[:, :, C:C + T], entries, 2)             # [R, heads, Q, d]: a copy
                cache.scatter_(2, _along(slots, nodes), nodes)
        self.view = self.capacity

    # -- rows joining and leaving ---------------------------------------------------------
    def _padded(self, P: int, tree_slots: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every layer's keys and values with the prompt region left-padded to P slots and
        `tree_slots` tree slots."""
        pad = (0, 0, P - self.P, tree_slots - self.tree_slots)
        return [(F.pad(k, pad), F.pad(v, pad)) for k, v in self.tensors()]

    def _like(self, plen: torch.Tensor, P: int, tree_slots: int,
              kv: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> "SlotCache":
        """A cache of this one's buffers and owner holding `kv` (new contents); this one's
        tensors given back."""
        cache = SlotCache(len(kv), plen, P, self.S, tree_slots, self.buffers, self.owner())
        for layer, (k, v) in zip(cache.cache.layers, kv):
            layer.take(*cache.buffers.holding(cache.owner(), [k, v]))
        self.give_back()
        return cache

    @staticmethod
    def join(first: "SlotCache", second: "SlotCache", order: torch.Tensor) -> "SlotCache":
        """One cache of the rows cat([first's, second's])[order], the prompt regions left-padded
        to the longer one (and the tree slots to the more), in first's buffers."""
        P, tree_slots = max(first.P, second.P), max(first.tree_slots, second.tree_slots)
        order = order.to(first.plen.device)
        kv = [(torch.cat([ka, kb])[order], torch.cat([va, vb])[order])
              for (ka, va), (kb, vb) in zip(first._padded(P, tree_slots), second._padded(P, tree_slots))]
        return first._like(torch.cat([first.plen, second.plen])[order], P, tree_slots, kv)

    def select(self, index: torch.Tensor) -> "SlotCache":
        """The cache of rows `index` (in that order), its prompt region cut to the bucket of
        the longest of their prompts (read on the host: rows leave between passes)."""
        index = index.to(self.plen.device)
        plen = self.plen[index]
        P = min(self.P, static.bucket(int(plen.max()))) if len(plen) else self.P
        cut = self.P - P                                     # prompt slots no kept row uses
        kv = [(k[index][:, :, cut:], v[index][:, :, cut:]) for k, v in self.tensors()]
        return self._like(plen, P, self.tree_slots, kv)


@dataclass(frozen=True)
class RowEnds:
    """The sequence layout of a model that closes every grid row with a forced end-of-row
    token (Emu3's `<|extra_200|>`, Lumina-mGPT's 8803): grid position g sits at sequence
    offset g + g // W, and the end-of-row token of grid row y at offset (y + 1)(W + 1) - 1.
    The engine sees only the grid; the adapter feeds the end-of-row tokens itself (p is
    one-hot there, so leaving them out of the engine's view changes no distribution)."""

    width: int          # W: codes per grid row
    eol: int            # the end-of-row token id
    pad: int            # the id fed at padding entries (never seen)

    def offset(self, g: torch.Tensor) -> torch.Tensor:
        """Sequence offset of grid position g."""
        return g + g // self.width

    def chain(self, ids: torch.Tensor, start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A window of W codes (as model ids [B, W]) at grid positions start[b] + j, with the
        end-of-row tokens inserted: (ids [B, T], offsets [B, T] with -1 for padding, out
        [B, W] the entry whose output predicts the next code). T = W + the most row ends W
        positions can hold, whatever `start` is; the entries past a row's last are padding."""
        B, W = ids.shape
        gw = self.width
        T = W + min(W, (W - 1) // gw + 1)
        dev = ids.device
        g = start[:, None] + torch.arange(W, device=dev)                    # grid positions [B, W]
        s_tok = self.offset(g)                                               # their sequence offsets
        is_end = (g % gw) == gw - 1
        s0 = s_tok[:, :1]
        s = s0 + torch.arange(T, device=dev)                                 # [B, T]
        valid = s <= s_tok[:, -1:] + is_end[:, -1:].long()
        eol = (s + 1) % (gw + 1) == 0
        j = (s - s // (gw + 1) - start[:, None]).clamp(0, W - 1)            # window index of a code entry
        out_ids = torch.where(eol, self.eol, ids.gather(1, j))
        out_ids = torch.where(valid, out_ids, self.pad)
        return out_ids, torch.where(valid, s, -1), s_tok - s0 + is_end.long()

    def tree(self, ids: torch.Tensor, tree: Tree) -> tuple[torch.Tensor, torch.Tensor, Forced]:
        """A tree of T nodes (model ids [B, T]), each node that ends a grid row followed by its
        end-of-row entry (`tree.force_after`: entries T..2T-1, used where a node ends a row):
        (ids [B, 2T], offsets [B, 2T] with -1 for unused entries, the `Forced` layout)."""
        g = tree.positions
        forced = force_after(tree.seen, (g % self.width) == self.width - 1)
        s = self.offset(g)
        offsets = torch.cat([s, torch.where(forced.forced, s + 1, -1)], 1)
        return torch.cat([ids, torch.full_like(ids, self.eol)], 1), offsets, forced

    @staticmethod
    def kept(forced: Forced, offsets: torch.Tensor, index: torch.Tensor, kept: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A kept path's entries (`tree.path_entries`) with their sequence offsets:
        (entries [B, Q], valid [B, Q], offsets [B, Q])."""
        entries, valid = path_entries(forced, index, kept)
        return entries, valid, offsets.gather(1, entries)


def entries_of(hidden: torch.Tensor, out: torch.Tensor, reps: int) -> torch.Tensor:
    """The hidden states [reps * B, W, D] of entries `out` [B, W] of `hidden` [reps * B, T, D]
    (the same entries in every block of B rows: the conditional and unconditional rows)."""
    out = out.repeat(reps, 1)
    return torch.gather(hidden, 1, out[:, :, None].expand(-1, -1, hidden.shape[-1]))


def head_rows(weight: torch.Tensor, ids: Sequence[int]) -> torch.Tensor:
    """The rows `ids` (a list, as the model's vocabulary mapping gives them) of a head's weight
    [vocab, hidden]: a view when they are consecutive ids in order (no copy), else a copy
    made once."""
    ids = [int(i) for i in ids]
    if ids and ids == list(range(ids[0], ids[0] + len(ids))):
        return weight.detach()[ids[0]: ids[0] + len(ids)]
    return weight.detach()[torch.tensor(ids, device=weight.device)]


class ResizableRows(GuidedRows):
    """`add_rows` / `keep_rows` for a session whose rows share one `SlotCache` (`kv`), laid out
    as `reps` blocks of `batch` rows (conditional rows, then unconditional ones), with `fed`
    [batch] the generated positions each prompt's rows hold (borrowed from `buffers`, the
    model's: a step writes it in place). The session provides `tm` (whose
    `start(prompts, cfg_scale)` makes a session of the same kind), `cfg_scale`, `batch`,
    `reps`, `buffers`, `kv`, `fed` and `first_logits`."""

    entries_per_node = 1                 # cache entries a tree node writes (RowEnds: its end-of-row entry too)

    def borrow_cache(self, rows: list[list[int]], pad_id: int, num_layers: int, S: int, dtype: torch.dtype
                     ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Borrow `kv` from the model's buffers (the prompts `rows` left-padded in a prompt region
        of `static.bucket` slots, then S sequence slots) and `fed`; returns the prompt ids
        [R, P0] and the prefill's (mask, position ids) for them."""
        self.buffers = static.buffers_of(self.tm)
        ids, mask = left_pad(rows, pad_id, self.tm.device)
        self.kv = SlotCache(num_layers, mask.sum(1), static.bucket(ids.shape[1]), S, buffers=self.buffers, owner=self)
        self.fed, = self.buffers.zeros(self, [((self.batch,), torch.long)], self.tm.device)
        return ids, self.kv.prefill(dtype, ids.shape[1])

    def reserve_tree(self, nodes: int) -> None:
        """Room in the cache for trees of `nodes` nodes (`protocols.TreeSession`)."""
        self.kv.reserve(self.entries_per_node * nodes)

    def start_like(self, prompts: Sequence[str]) -> "ResizableRows":
        return self.tm.start(prompts, self.cfg_scale)

    def join_state(self, new: "ResizableRows", order: torch.Tensor) -> None:
        self.kv = SlotCache.join(self.kv, new.kv, order)
        self.fed, = self.buffers.holding(self, [torch.cat([self.fed, new.fed.to(self.fed.device)])], old=[self.fed])

    def select_state(self, index: torch.Tensor) -> None:
        self.kv = self.kv.select(index)
        kept = self.fed[index[: len(index) // self.reps].to(self.fed.device)]
        self.fed, = self.buffers.holding(self, [kept], old=[self.fed])


class RowEndsSession(ResizableRows):
    """`step`, `step_tree` and `keep_path` of a session whose sequence closes every grid row
    with a forced end-of-row token (`RowEnds`), its `reps` blocks of rows guided by CFG. The
    session provides, beside what `ResizableRows` asks: `row_ends` (the `RowEnds` layout),
    `code_ids` ([V] the model id of each image code), `decoder` (the transformers module that
    takes `input_ids`, a 4-D `attention_mask`, `position_ids` and the cache), and `tree` and
    `forced` (None until a `step_tree`); `tm` gives `vocab_size`, `grid`, `device`,
    `image_head` and `image_logits(hidden)`."""

    entries_per_node = 2                 # a node, and the end-of-row entry after it where it ends a row

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        out = self.decoder(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                           cache=self.kv.cache, use_cache=True)
        return out.last_hidden_state

    def _guided(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states of all rows -> guided image-code logits of the B prompts (float32)."""
        scores = self.tm.image_logits(hidden)
        if self.reps == 1:
            return scores
        return guide(scores[: self.batch], scores[self.batch:], self.cfg_scale)

    @torch.no_grad()
    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        tm = self.tm
        tokens, start = check_step(tokens, start, self.batch, tm.vocab_size, device=tm.device, fed=self.fed,
                                   length=tm.grid[0] * tm.grid[1])
        ids, offsets, out = self.row_ends.chain(self.code_ids[tokens], start)   # end-of-row tokens inserted
        mask, position_ids = self.kv.write_at(offsets.repeat(self.reps, 1), tm.image_head.dtype)
        hidden = self._forward(ids.repeat(self.reps, 1), mask, position_ids)
        self.fed.copy_(start + tokens.shape[1])
        self.tree = None
        return self._guided(entries_of(hidden, out, self.reps))

    # a tree of drafts (`protocols.TreeSession`): the nodes, then an end-of-row entry after
    # each node that ends a row (`tree.force_after`: seen by that node's children only); a
    # 4-D mask shows each entry the prompt, the sequence before its start and its own path;
    # the entries' keys/values go to the cache's tree slots until `keep_path` moves the
    # kept path's to their sequence slots (`SlotCache.write_tree` / `keep_path`)
    @torch.no_grad()
    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor,
                  start: torch.LongTensor) -> torch.Tensor:
        tm = self.tm
        tree = check_tree(tokens, parents, start, self.batch, tm.vocab_size, device=tm.device, fed=self.fed,
                          length=tm.grid[0] * tm.grid[1])
        ids, self.entry_offsets, forced = self.row_ends.tree(self.code_ids[tree.tokens], tree)
        reps = self.reps                                 # the unconditional rows: the same tree
        mask, position_ids = self.kv.write_tree(self.row_ends.offset(tree.start).repeat(reps),
                                          self.entry_offsets.repeat(reps, 1), forced.seen.repeat(reps, 1, 1),
                                          tm.image_head.dtype)
        hidden = self._forward(ids.repeat(reps, 1), mask, position_ids)
        self.tree, self.forced = tree, forced
        self.fed.copy_(tree.start)                       # the nodes are not kept until keep_path
        return self._guided(entries_of(hidden, forced.out, self.reps))

    def keep_path(self, nodes: torch.LongTensor) -> None:
        index, kept = check_path(self.tree, nodes)
        entries, valid, offsets = RowEnds.kept(self.forced, self.entry_offsets, index, kept)
        self.kv.keep_path(entries.repeat(self.reps, 1), valid.repeat(self.reps, 1), offsets.repeat(self.reps, 1))
        self.fed.copy_(self.tree.start + kept.sum(1))
        self.tree = self.forced = self.entry_offsets = None


def load_pretrained(folder: str, model_cls, processor_cls, device, dtype, family: str):
    """(model on `device` in eval mode, processor) from a local folder (already downloaded)."""
    try:
        processor = processor_cls.from_pretrained(folder, local_files_only=True)
        model = model_cls.from_pretrained(folder, dtype=dtype, local_files_only=True)
    except OSError as exc:
        raise WeightsNotFoundError(f"model: could not load {family} from {folder!r}: {exc}") from exc
    return model.to(device).eval(), processor
