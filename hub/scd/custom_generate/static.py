# Built by hub/vendor.py from scd_core/models/static.py: edit the library, then rebuild.
"""Session state that a compiled pass writes in place: allocated once, marked static.

On a GPU, `compile=True` replays a pass as a CUDA graph only if every tensor the pass writes
in place is static: a parameter, a buffer, or a tensor marked with
`torch._dynamo.mark_static_address` (as transformers' `StaticCache` marks its tensors);
otherwise CUDA-graph trees skip capture without an error. So every cache a session keeps (the
KV caches, texture's `history`) is made here: allocated once at the session's start with a
fixed capacity and written by position, and marked again wherever rows join or leave and a
new tensor takes its place (`static`). Marking is cheap and changes nothing eager; a new
tensor at the same place (a new session) makes the CUDA graph re-record, not recompile.

`scd_core.testing.check_static_writes` checks a model's compiled pass against this.
"""
from __future__ import annotations

import torch


def static(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor`, marked as state whose address a compiled pass may keep (returned as is; not
    marked while a graph is traced: a tensor made inside a graph is the graph's own)."""
    if not torch.compiler.is_compiling():
        torch._dynamo.mark_static_address(tensor)
    return tensor


def zeros(*shape: int, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A static tensor of zeros: a cache of fixed size, allocated once."""
    return static(torch.zeros(shape, dtype=dtype, device=device))


# -- a tree's entries in tree slots at the end of a cache -----------------------------------
# A cache [R, heads, C + tree slots, head_dim]: slots [0, C) hold the sequence (and a scratch
# slot), the tree slots a tree's entries for one pass, entry j in slot C + j. A tree pass
# writes its T entries there and attends to slots [0, C + T) through the tree's mask; the
# kept path's entries then move to their sequence slots by position. No pass copies the
# cache: a tree pass writes O(T) entries a layer.

def with_tree_slots(cache: torch.Tensor, more: int) -> torch.Tensor:
    """`cache` [R, heads, S, head_dim] with `more` slots added at the end: a new static tensor
    (before a run's first tree; never inside a pass the engine runs)."""
    return static(torch.nn.functional.pad(cache, (0, 0, 0, more)))


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
