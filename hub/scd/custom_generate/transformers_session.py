# Built by hub/vendor.py from scd_core/models/transformers_session.py: edit the library, then rebuild.
"""Sessions of transformers models (Janus-Pro, Emu3, Lumina-mGPT's Chameleon) on a KV cache
of fixed size, written by position.

Importing this module imports torch only; transformers is imported inside the functions
that need it.

- `SlotCache`: every layer's keys and values [R, heads, C, head_dim], C fixed at the start
  (the prompt region, the whole image sequence, one scratch slot), written at explicit
  per-row slots: generated sequence offset s of a row lives in slot P + s, so rows sit at
  different positions, forgetting is masking (and overwriting later), and no shape depends
  on what was fed. The model sees it as a transformers `Cache` built from its public
  constructor (`Cache(layers=...)`) with a layer class of this module (`slot_layer_class()`); every
  forward gets an explicit 4-D mask (transformers uses one as given) and position ids.
  A tree's entries are written into tree slots reserved at the end of the same cache
  (`reserve`, `hold`), masked so that no other query sees them, and the kept path's moved
  into place by position afterwards (`SlotCache.keep`): no pass copies the cache. Rows join
  (`join`) and leave (`select`). Every tensor of it is static (`scd_core.models.static`):
  marked with `torch._dynamo.mark_static_address` where it is allocated and wherever rows
  join or leave, so that on a GPU a compiled pass that writes it replays as a CUDA graph;
  any session built on it (the adapters here, `scd_core.hf`) inherits that.
- `RowEnds`: the sequence layout of a model that closes every grid row with a forced
  end-of-row token (Emu3, Lumina-mGPT), for a window (`chain`) and for a tree (`tree`),
  with shapes fixed by the window or the tree's size.
- `ResizableRows`: `add_rows` / `keep_rows` for such a session (through `rows.GuidedRows`).
- `RowEndsSession`: the chain and tree passes of a guided session over a `RowEnds` layout
  (Emu3's and Lumina-mGPT's sessions).
- `head_rows`: a head's rows of the image codes, as a view where they are contiguous.
- `load_pretrained`: a transformers model and processor from a downloaded folder.

Nothing in a `step`, `step_tree` or `keep_path` built on these reads a value back or copies
to the device.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .sampling import guide

from . import static
from .checks import check_step
from .hub import WeightsNotFoundError
from .rows import GuidedRows
from .tree import Forced, Tree, check_path, check_tree, force_after, gather_nodes, path_entries


@functools.cache
def slot_layer_class() -> type:
    """`SlotLayer`, defined on first use (transformers is imported only then)."""
    from transformers.cache_utils import CacheLayerMixin

    class SlotLayer(CacheLayerMixin):
        """One attention layer of a `SlotCache`: keys/values [R, heads, C + tree slots, head_dim],
        static (`static`), written at the slots its `SlotCache` names for this forward
        (`owner.slots` [R, T]); the forward sees slots [0, `owner.view`)."""

        is_compileable = True
        is_sliding = False

        def __init__(self, owner: "SlotCache", keys: torch.Tensor | None = None,
                     values: torch.Tensor | None = None) -> None:
            super().__init__()
            self.owner = owner
            if keys is not None:
                self.keys, self.values, self.device = static.static(keys), static.static(values), keys.device
                self.is_initialized = True

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            r, h, _, d = key_states.shape
            slots = self.owner.capacity + self.owner.tree_slots
            self.keys = static.zeros(r, h, slots, d, dtype=key_states.dtype, device=key_states.device)
            self.values = static.zeros(r, h, slots, value_states.shape[-1], dtype=value_states.dtype,
                                       device=value_states.device)
            self.device = key_states.device
            self.is_initialized = True

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
    more, fixed at the start (or by `reserve`, before a run's first tree), static:

    - slots [0, P): the prompt region, left-padded (row r's prompt in [P - plen[r], P));
    - slots [P, P + S): the sequence, generated offset s of a row in slot P + s;
    - slot P + S: scratch, where entries that are not kept write (padding of a window, the
      nodes of a tree path not kept); no query ever sees it;
    - slots [C, C + tree_slots): a tree's entries, entry j in slot C + j, seen only by that
      tree's entries that the tree's mask lets see it.

    A forward writes where `slots` [R, T] says: a chain's entries at their sequence slots
    (`write_at`, the forward sees slots [0, C)), a tree's in the tree slots (`hold`, the
    forward sees [0, C + T)), from which `keep` moves the kept path's entries to their
    sequence slots by position. `cache` is what the model is given.
    """

    def __init__(self, num_layers: int, plen: torch.Tensor, P: int, S: int,
                 tensors: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None, tree_slots: int = 0) -> None:
        from transformers.cache_utils import Cache

        self.plen, self.P, self.S = plen, int(P), int(S)
        self.tree_slots = int(tree_slots)
        self.slots: torch.Tensor | None = None
        self.view = self.capacity                               # the slots a forward sees
        layer = slot_layer_class()
        kv = tensors or [(None, None)] * num_layers
        self.cache = Cache(layers=[layer(self, k, v) for k, v in kv])

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
                layer.keys = static.static(F.pad(layer.keys, (0, 0, 0, more)))
                layer.values = static.static(F.pad(layer.values, (0, 0, 0, more)))

    # -- what a forward writes, and what it sees ---------------------------------------------
    def prefill(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Write the prompt region: (additive mask [R, 1, P, C], position ids [R, P]). A
        prompt token sees its row's prompt up to itself; padding sees itself only."""
        dev = self.plen.device
        q = torch.arange(self.P, device=dev)
        k = torch.arange(self.capacity, device=dev)
        first = (self.P - self.plen)[:, None, None]                                # [R, 1, 1]
        allowed = ((k >= first) & (k <= q[:, None])) | (k == q[:, None])           # [R, P, C]
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

    def hold(self, begin: torch.Tensor, offsets: torch.Tensor, seen: torch.Tensor,
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

    def keep(self, entries: torch.Tensor, valid: torch.Tensor, offsets: torch.Tensor) -> None:
        """After `hold`'s forward: move its entries `entries` [R, Q] from the tree slots to
        sequence offsets `offsets` [R, Q] where `valid`, the others to the scratch slot."""
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

    @staticmethod
    def join(first: "SlotCache", second: "SlotCache", order: torch.Tensor) -> "SlotCache":
        """One cache of the rows cat([first's, second's])[order], the prompt regions left-padded
        to the longer one (and the tree slots to the more)."""
        P, tree_slots = max(first.P, second.P), max(first.tree_slots, second.tree_slots)
        order = order.to(first.plen.device)
        kv = [(torch.cat([ka, kb])[order], torch.cat([va, vb])[order])
              for (ka, va), (kb, vb) in zip(first._padded(P, tree_slots), second._padded(P, tree_slots))]
        return SlotCache(len(kv), torch.cat([first.plen, second.plen])[order], P, first.S, kv, tree_slots)

    def select(self, index: torch.Tensor) -> "SlotCache":
        """The cache of rows `index` (in that order), its prompt region cut to the longest of
        their prompts (read on the host: rows leave between passes)."""
        index = index.to(self.plen.device)
        plen = self.plen[index]
        P = int(plen.max()) if len(plen) else self.P
        cut = self.P - P                                     # prompt slots no kept row uses
        kv = [(k[index][:, :, cut:], v[index][:, :, cut:]) for k, v in self.tensors()]
        return SlotCache(len(kv), plen, P, self.S, kv, self.tree_slots)


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
    [batch] the generated positions each prompt's rows hold. The session provides `tm` (whose
    `start(prompts, cfg_scale)` makes a session of the same kind), `cfg_scale`, `batch`,
    `reps`, `kv`, `fed` and `first_logits`."""

    entries_per_node = 1                 # cache entries a tree node writes (RowEnds: its end-of-row entry too)

    def reserve_tree(self, nodes: int) -> None:
        """Room in the cache for trees of `nodes` nodes (`protocols.TreeSession`)."""
        self.kv.reserve(self.entries_per_node * nodes)

    def start_like(self, prompts: Sequence[str]) -> "ResizableRows":
        return self.tm.start(prompts, self.cfg_scale)

    def join_state(self, new: "ResizableRows", order: torch.Tensor) -> None:
        self.kv = SlotCache.join(self.kv, new.kv, order)
        self.fed = torch.cat([self.fed, new.fed.to(self.fed.device)])

    def select_state(self, index: torch.Tensor) -> None:
        self.kv = self.kv.select(index)
        self.fed = self.fed[index[: len(index) // self.reps].to(self.fed.device)]


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
        self.fed = start + tokens.shape[1]
        self.tree = None
        return self._guided(entries_of(hidden, out, self.reps))

    # a tree of drafts (`protocols.TreeSession`): the nodes, then an end-of-row entry after
    # each node that ends a row (`tree.force_after`: seen by that node's children only); a
    # 4-D mask shows each entry the prompt, the sequence before its start and its own path;
    # the entries' keys/values go to the cache's tree slots until `keep_path` moves the
    # kept path's to their sequence slots (`SlotCache.hold` / `keep`)
    @torch.no_grad()
    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor,
                  start: torch.LongTensor) -> torch.Tensor:
        tm = self.tm
        tree = check_tree(tokens, parents, start, self.batch, tm.vocab_size, device=tm.device, fed=self.fed,
                          length=tm.grid[0] * tm.grid[1])
        ids, self.entry_offsets, forced = self.row_ends.tree(self.code_ids[tree.tokens], tree)
        reps = self.reps                                 # the unconditional rows: the same tree
        mask, position_ids = self.kv.hold(self.row_ends.offset(tree.start).repeat(reps),
                                          self.entry_offsets.repeat(reps, 1), forced.seen.repeat(reps, 1, 1),
                                          tm.image_head.dtype)
        hidden = self._forward(ids.repeat(reps, 1), mask, position_ids)
        self.tree, self.forced, self.fed = tree, forced, tree.start
        return self._guided(entries_of(hidden, forced.out, self.reps))

    def keep_path(self, nodes: torch.LongTensor) -> None:
        index, kept = check_path(self.tree, nodes)
        entries, valid, offsets = RowEnds.kept(self.forced, self.entry_offsets, index, kept)
        self.kv.keep(entries.repeat(self.reps, 1), valid.repeat(self.reps, 1), offsets.repeat(self.reps, 1))
        self.fed = self.tree.start + kept.sum(1)
        self.tree = self.forced = None


def load_pretrained(folder: str, model_cls, processor_cls, device, dtype, family: str):
    """(model on `device` in eval mode, processor) from a local folder (already downloaded)."""
    try:
        processor = processor_cls.from_pretrained(folder, local_files_only=True)
        model = model_cls.from_pretrained(folder, dtype=dtype, local_files_only=True)
    except OSError as exc:
        raise WeightsNotFoundError(f"model: could not load {family} from {folder!r}: {exc}") from exc
    return model.to(device).eval(), processor
