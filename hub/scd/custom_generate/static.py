# Built by hub/vendor.py from scd_core/models/static.py: edit the library, then rebuild.
"""Session state that a compiled pass reads and writes: long-lived buffers, written in place.

On a GPU, `compile=True` replays a pass as a CUDA graph (CUDA-graph trees). Three rules keep
that true for a session whose steps compile with the pass (`compilable`):

1. Every tensor a step writes in place is static: a parameter, a buffer, or a tensor marked
   with `torch._dynamo.mark_static_address` where it is allocated (`mark`), as transformers'
   `StaticCache` marks its tensors. A graph that writes into any other input is not
   captured, silently.
2. A step writes the session's tensors in place and never assigns one that a later pass
   reads: `self.fed.copy_(start + W)`, never `self.fed = start + W`. A tensor made inside a
   graph is one of the graph's outputs, and CUDA-graph trees free those at the next replay:
   the pass after it would read freed memory. (What a step keeps for the rest of its own
   pass only, a tree until `keep_path` or the slots a forward writes, may be assigned.)
3. Buffers live per model and shape, not per session. A session borrows its caches and
   per-row tensors from its model's `Buffers` (`buffers_of(model)`), reset in place, and the
   next session of the same shapes gets the same tensors back, as gpt-fast's `setup_caches`
   and a reused transformers `StaticCache` do. A static tensor at a new address makes
   CUDA-graph trees record the graph again and keep every recording; reused buffers keep
   one recording per shape. For the same reason a prompt region is padded to a few sizes
   (`bucket`), and rows joining or leaving, or a tree's slots, move the session's state into
   other buffers of the same model (`Buffers.holding`), never into new tensors.

`scd_core.testing` checks a model's compiled pass against all three on the CPU
(`check_static_writes` for the first, `check_graph_inputs` for the other two).
"""
from __future__ import annotations

import gc
import itertools
import math
import sys
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch

Spec = tuple[tuple[int, ...], torch.dtype]     # a tensor's shape and dtype


def mark(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor`, marked static: a compiled pass may keep its address (returned as is; not marked
    while a graph is traced: a tensor made inside a graph is the graph's own).

    On the CPU, where no graph is replayed, a tensor is marked only once torch's compiler is
    loaded: a compiled run loads it before its session starts (`scd_core.decoding.no_autograd`),
    and so do the CPU checks of `scd_core.testing`. Loading it costs a process about 67 MB,
    which an eager run on the CPU (the page's Lossless comparison) need not pay."""
    if tensor.device.type == "cpu" and "torch._dynamo" not in sys.modules:
        return tensor
    if not torch.compiler.is_compiling():
        torch._dynamo.mark_static_address(tensor)
    return tensor


def zeros(*shape: int, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A static tensor of zeros, of a session's own (not borrowed: `Buffers` reuses them)."""
    return mark(torch.zeros(shape, dtype=dtype, device=device))


def bucket(n: int) -> int:
    """The size a region of `n` slots is padded to: a power of two, at least 16 (so prompts
    of any length meet a few shapes)."""
    return max(16, 1 << math.ceil(math.log2(max(n, 1))))


@dataclass(eq=False)
class _Set:
    key: tuple
    tensors: list[torch.Tensor]
    owner: weakref.ref | None = None
    used: int = 0

    @property
    def free(self) -> bool:
        return self.owner is None or self.owner() is None

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)


class Buffers:
    """Static tensors that sessions borrow and give back, reused: a set of tensors of given
    shapes and dtypes belongs to one owner (a session, held weakly) until the owner is gone or
    gives it back (`give_back`); the next `zeros` or `holding` of the same shapes gets the same
    tensors again. Whenever a set becomes free, the free sets past `idle_cap` bytes are
    dropped, the least recently lent first (None: no cap; 0: nothing is kept for reuse). Safe
    to share between threads."""

    def __init__(self, idle_cap: int | None = None) -> None:
        self.idle_cap = idle_cap
        self._sets: list[_Set] = []
        self._lock = threading.RLock()               # re-entered when an owner dies inside it (`_released`)
        self._clock = itertools.count()

    def zeros(self, owner, specs: Sequence[Spec], device: torch.device | str) -> list[torch.Tensor]:
        """Static tensors of zeros of these (shape, dtype), lent to `owner` (reset in place
        when reused)."""
        device = torch.device(device)
        key = (tuple((tuple(int(s) for s in shape), dtype) for shape, dtype in specs), device.type, device.index)
        lent = self._free(key)
        if lent is None and self._lent(key):
            # A finished session caught in a reference cycle (the one whose run compiled the
            # pass: the compiler's trace refers to it) gives its buffers back when the
            # collector frees it.
            gc.collect()
            lent = self._free(key)
        with self._lock:
            if lent is None or not lent.free or lent not in self._sets:
                with torch.inference_mode(False):             # ordinary tensors: any later run may use them
                    lent = _Set(key, [mark(torch.zeros(shape, dtype=dtype, device=device)) for shape, dtype in specs])
                self._sets.append(lent)
            else:
                for t in lent.tensors:
                    mark(t.zero_())               # made before the compiler was loaded, perhaps
            lent.owner, lent.used = weakref.ref(owner, self._released), next(self._clock)
            self._trim()
        return lent.tensors

    def _free(self, key: tuple) -> _Set | None:
        with self._lock:
            return next((s for s in self._sets if s.key == key and s.free), None)

    def _lent(self, key: tuple) -> bool:
        with self._lock:
            return any(s.key == key for s in self._sets)

    def holding(self, owner, values: Sequence[torch.Tensor], old: Sequence[torch.Tensor] = ()) -> list[torch.Tensor]:
        """Tensors lent to `owner` holding copies of `values` (same shapes and dtypes), with
        `old` given back: how a session's state moves when rows join or leave or tree slots
        are added (`values` are the new contents, made from the old tensors)."""
        lent = self.zeros(owner, [(v.shape, v.dtype) for v in values], values[0].device)
        for t, v in zip(lent, values):
            t.copy_(v)
        if old:
            self.give_back(old)
        return lent

    def give_back(self, tensors: Sequence[torch.Tensor]) -> None:
        """The set whose first tensor is `tensors[0]` is free again."""
        with self._lock:
            for s in self._sets:
                if s.tensors[0] is tensors[0]:
                    s.owner = None
            self._trim()

    def held_bytes(self) -> int:
        """Bytes of every tensor held, lent or free."""
        with self._lock:
            return sum(s.bytes for s in self._sets)

    def idle_bytes(self) -> int:
        """Bytes of the free sets, kept for reuse."""
        with self._lock:
            return sum(s.bytes for s in self._sets if s.free)

    def drop_idle(self) -> int:
        """Drop every free set now, whatever `idle_cap` keeps: for a process that runs the model
        rarely and has better use for the memory (the page after a Lossless comparison).
        Returns the bytes dropped; the sets lent stay lent."""
        with self._lock:
            idle = [s for s in self._sets if s.free]
            self._sets = [s for s in self._sets if not s.free]
        return sum(s.bytes for s in idle)

    def _released(self, owner: weakref.ref) -> None:
        """An owner is gone: its sets are free."""
        with self._lock:
            self._trim()

    def _trim(self) -> None:
        """Drop the least recently lent free sets past `idle_cap` (a new list: a caller may be
        going through the old one)."""
        if self.idle_cap is None:
            return
        free = sorted((s for s in self._sets if s.free), key=lambda s: s.used)
        idle, dropped = sum(s.bytes for s in free), set()
        for s in free:
            if idle <= self.idle_cap:
                break
            dropped.add(id(s))
            idle -= s.bytes
        if dropped:
            self._sets = [s for s in self._sets if id(s) not in dropped]


_POOLS: dict[int, Buffers] = {}
_POOLS_LOCK = threading.Lock()


def buffers_of(model) -> Buffers:
    """`model`'s `Buffers` (made on first use, dropped with the model), their free sets capped
    by `scd_core.memory.idle_cap(model)`. A model that cannot be referred to weakly gets a
    new one each call (nothing reused)."""
    from .memory import idle_cap

    with _POOLS_LOCK:
        pool = _POOLS.get(id(model))
        if pool is None:
            pool = Buffers(idle_cap(model))
            try:
                weakref.finalize(model, _POOLS.pop, id(model), None)
            except TypeError:
                return pool
            _POOLS[id(model)] = pool
        return pool


# -- a tree's entries in tree slots at the end of a cache -----------------------------------
# A cache [R, heads, C + tree slots, head_dim]: slots [0, C) hold the sequence (and a scratch
# slot), the tree slots a tree's entries for one pass, entry j in slot C + j. A tree pass
# writes its T entries there and attends to slots [0, C + T) through the tree's mask; the
# kept path's entries then move to their sequence slots by position. No pass copies the
# cache: a tree pass writes O(T) entries a layer.

def with_tree_slots(cache: torch.Tensor, more: int) -> torch.Tensor:
    """`cache` [R, heads, S, head_dim] with `more` slots added at the end, as a new tensor to
    copy into borrowed buffers (`Buffers.holding`: before a run's first tree, never inside a
    pass the engine runs)."""
    return torch.nn.functional.pad(cache, (0, 0, 0, more))


def write_tree(cache: torch.Tensor, C: int, entries: torch.Tensor) -> torch.Tensor:
    """Write a tree's `entries` [R, heads, T, head_dim] in the tree slots [C, C + T) of
    `cache`; returns the slots the tree's queries attend to, [0, C + T), as a view."""
    T = entries.shape[2]
    cache[:, :, C:C + T] = entries.to(cache.dtype)
    return cache[:, :, :C + T]


def keep_tree(cache: torch.Tensor, C: int, T: int, index: torch.Tensor, slots: torch.Tensor) -> None:
    """Move the tree entries `index` [R, P] (of the T in the tree slots) to slots [R, P]."""
    from .tree import gather_nodes

    kept = gather_nodes(cache[:, :, C:C + T], index, 2)                   # [R, heads, P, head_dim]: a copy
    cache.scatter_(2, slots[:, None, :, None].expand(-1, cache.shape[1], -1, cache.shape[3]), kept)
