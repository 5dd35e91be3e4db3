# Built by hub/vendor.py from scd_core/models/tree.py: edit the library, then rebuild.
"""The model side of a draft tree (`protocols.TreeSession`): depths, positions and the
attention mask of a tree given by parent links, for every model and adapter to share.

A tree of T nodes per row is `parents` [B, T]: -1 for the root (node 0), else the index of
the node's parent, always smaller than its own. Ancestors follow from the parent links by
repeated squaring (ceil(log2(T - 1)) matrix products, a number fixed by T), never a loop per
node. Every function here has shapes fixed by (B, T) and reads no value back: a step that
feeds a tree never waits for the device. Argument checks of values run where that is free,
the CPU (`checks.device_check`), and never abort a pass elsewhere.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .checks import check_start, check_token_tensor, device_check


def check_parents(parents: torch.LongTensor) -> None:
    """A ValueError unless `parents` [B, T] is a tree: node 0 the root (-1), every other
    node's parent an earlier node."""
    if parents.dim() != 2 or parents.shape[1] == 0:
        raise ValueError(f"parents: expected [B, T] with T >= 1, got shape {tuple(parents.shape)}")
    index = torch.arange(parents.shape[1], device=parents.device)
    ok = torch.where(index == 0, parents == -1, (parents >= 0) & (parents < index))
    device_check(ok, "parents: node 0 must be the root (-1) and every other node's parent an earlier node")


def squarings(T: int) -> int:
    """How many squarings of the parent relation cover a path of T nodes (T - 1 links)."""
    return math.ceil(math.log2(T - 1)) if T > 2 else (1 if T == 2 else 0)


def ancestors(parents: torch.LongTensor) -> torch.BoolTensor:
    """[B, T, T] whether node j is node i or one of its ancestors (what node i may attend to
    within the tree: the tree attention mask). Each squaring doubles the path length
    covered, so ceil(log2(T - 1)) matrix products cover any tree of T nodes, a chain included."""
    B, T = parents.shape
    link = F.one_hot(parents.clamp(min=0), T).bool() & (parents >= 0).unsqueeze(2)      # [B, T, T]: its parent
    seen = (link | torch.eye(T, dtype=torch.bool, device=parents.device)).float()       # itself and its parent
    for _ in range(squarings(T)):
        seen = ((seen @ seen) > 0).float()                                             # up to twice as far
    return seen > 0


def depths(parents: torch.LongTensor) -> torch.LongTensor:
    """[B, T] each node's depth: 0 for the root, its parent's plus one."""
    return ancestors(parents).sum(2) - 1


def positions(start: torch.LongTensor, parents: torch.LongTensor) -> torch.LongTensor:
    """[B, T] the generated position of each node: start[b] + depth."""
    return start.unsqueeze(1) + depths(parents)


def path_tokens(tokens: torch.LongTensor, parents: torch.LongTensor) -> torch.LongTensor:
    """[B, T, T] the tokens of each node's root-to-node path, by depth: out[b, i, d] is the
    token at depth d on node i's path (-1 past its own depth). For models that compute a
    node's logits from its context's tokens rather than from a cache.

    Node i's path holds one node at each depth up to its own, so out[b, i, d] is a sum over
    the ancestors j of i of [depth j = d] * token j, one term at most: a matrix product
    (in float64: exact for any token id)."""
    seen = ancestors(parents)                                                  # [B, T, T]
    T = tokens.shape[1]
    at_depth = F.one_hot(seen.sum(2) - 1, T).double()                          # [B, T(j), T(d)]
    on_path = seen.double()
    value = on_path @ (at_depth * tokens.unsqueeze(2).double())                # [B, T(i), T(d)]
    held = (on_path @ at_depth) > 0
    return torch.where(held, value.round().long(), -1)


@dataclass
class Tree:
    """One `step_tree` call's tree, checked, with what a `keep_path` after it needs.

    tokens, parents, depth [B, T]; start [B]; seen [B, T, T] (`ancestors`)."""

    tokens: torch.LongTensor
    parents: torch.LongTensor
    start: torch.LongTensor
    depth: torch.LongTensor
    seen: torch.BoolTensor

    @property
    def positions(self) -> torch.LongTensor:
        """[B, T] the generated position of each node: start[b] + depth."""
        return self.start.unsqueeze(1) + self.depth

    def repeat(self, reps: int) -> "Tree":
        """The same tree for `reps` blocks of rows (a guided model's unconditional rows)."""
        return Tree(self.tokens.repeat(reps, 1), self.parents.repeat(reps, 1), self.start.repeat(reps),
                    self.depth.repeat(reps, 1), self.seen.repeat(reps, 1, 1))


def check_tree(tokens, parents, start, batch: int, vocab_size: int, device: torch.device | str | None = None,
               fed: torch.Tensor | None = None, length: int | None = None) -> Tree:
    """Validate `step_tree` arguments (a ValueError naming the argument; values checked on the
    device): tokens [batch, T] in [0, V), parents [batch, T] a tree (`check_parents`), start
    [batch] >= 0 (and <= `fed`, the positions each row holds, and every node's position
    start + depth < `length`, when given). The tree is moved to `device` (default: the tokens')."""
    try:
        tokens = check_token_tensor(tokens, "tokens", batch)
    except ValueError:
        raise ValueError(f"tokens: expected an integer tensor [B={batch}, T] with T >= 1, got "
                         f"{getattr(tokens, 'shape', type(tokens).__name__)}") from None
    tokens = tokens.to(device) if device is not None else tokens
    if not isinstance(parents, torch.Tensor) or parents.dtype not in (torch.int64, torch.int32) \
            or tuple(parents.shape) != tuple(tokens.shape):
        raise ValueError(f"parents: expected an integer tensor of the tokens' shape {tuple(tokens.shape)}, got "
                         f"{getattr(parents, 'shape', type(parents).__name__)}")
    start = check_start(start, batch, tokens.device)
    device_check((tokens >= 0) & (tokens < vocab_size), "tokens: values must lie in [0, {V})", V=vocab_size)
    parents = parents.long().to(tokens.device)
    check_parents(parents)
    seen = ancestors(parents)
    depth = seen.sum(2) - 1
    ok = start >= 0
    if fed is not None:
        ok = ok & (start <= fed)
    if length is not None:
        ok = ok & (start + depth.amax(1) < length)
    device_check(ok, "start: positions must be >= 0" + ("" if fed is None else ", at most the positions fed so far")
                 + ("" if length is None else ", with every node's position start + depth < {length}"),
                 **({} if length is None else {"length": length}))
    return Tree(tokens, parents, start, depth, seen)


def check_path(tree: Tree | None, nodes) -> tuple[torch.LongTensor, torch.BoolTensor]:
    """Validate `keep_path(nodes)` against the tree it follows: nodes [B, P], each row a
    root-to-node path of that tree (node 0 first, each next node a child of the one before)
    padded with -1. Returns (index [B, P] with the padding as 0, kept [B, P] bool)."""
    if tree is None:
        raise ValueError("nodes: keep_path follows a step_tree, and none is pending")
    B, T = tree.parents.shape
    if not isinstance(nodes, torch.Tensor) or nodes.dtype not in (torch.int64, torch.int32) \
            or nodes.ndim != 2 or nodes.shape[0] != B or nodes.shape[1] == 0:
        raise ValueError(f"nodes: expected an integer tensor [B={B}, P] with P >= 1, got "
                         f"{getattr(nodes, 'shape', type(nodes).__name__)}")
    nodes = nodes.long().to(tree.parents.device)
    kept = nodes >= 0
    device_check((nodes < T) & (nodes >= -1), "nodes: node indices must lie in [0, {T}) or be -1 (padding)", T=T)
    device_check((nodes[:, 0] == 0) & ~(kept[:, 1:] & ~kept[:, :-1]).any(1),
                 "nodes: each row must start at the root (0), padded with -1 at the end only")
    index = nodes.clamp(0, T - 1)
    parent = tree.parents.gather(1, index[:, 1:])
    device_check(~(kept[:, 1:] & (parent != index[:, :-1])), "nodes: each node of a path must be a child of the node before it")
    return index, kept


def tree_mask(prefix: torch.BoolTensor, seen: torch.BoolTensor) -> torch.BoolTensor:
    """[R, 1, T, L + T] what each node attends to: the visible prefix slots `prefix` [R, L]
    (the same for every node), then its ancestors and itself among the T nodes (`seen`)."""
    R, T = seen.shape[:2]
    return torch.cat([prefix[:, None, :].expand(R, T, -1), seen], dim=2)[:, None]


def gather_nodes(x: torch.Tensor, index: torch.LongTensor, dim: int) -> torch.Tensor:
    """Entries `index` [R, P] of per-node tensor `x` (node axis `dim`, rows first): e.g. the
    kept path's keys [R, H, P, D] out of a tree's keys [R, H, T, D] with dim=2."""
    shape = [1] * x.dim()
    shape[0], shape[dim] = index.shape
    idx = index.view(shape).expand(*[index.shape[1] if d == dim else s for d, s in enumerate(x.shape)])
    return x.gather(dim, idx)


@dataclass
class Forced:
    """A tree with a forced token (an end-of-row marker) fed after some of its nodes.

    Entries 0..T-1 are the T nodes; entry T + j is the forced token after node j, fed for
    every node and used where `forced` [R, T] (a fixed number of entries, 2T, whatever the
    tree's positions). A forced token sits between its node and that node's children: the
    children and the forced token itself see it, its own node and the node's siblings do not."""

    seen: torch.BoolTensor       # [R, 2T, 2T] what each entry attends to among the entries
    out: torch.LongTensor        # [R, T] the entry whose output predicts the next node's token
    forced: torch.BoolTensor     # [R, T] node j is followed by its forced token (entry T + j)


def force_after(seen: torch.BoolTensor, after: torch.BoolTensor) -> Forced:
    """The entries of a tree (`seen` [R, T, T], `ancestors`) with a forced token after each
    node where `after` [R, T] (see `Forced`)."""
    R, T = after.shape
    node = torch.arange(T, device=after.device)
    strict = seen & (node[:, None] != node[None, :])                            # [R, T, T]: a strict ancestor
    top = torch.cat([seen, strict & after[:, None, :]], 2)                      # a node sees its path's forced tokens
    bottom = torch.cat([seen, seen & after[:, None, :]], 2)                     # a forced token: its node's path, and
    out = torch.where(after, T + node, node)                                    # the forced tokens on it, itself included
    return Forced(torch.cat([top, bottom], 1), out, after)


def path_entries(forced: Forced, index: torch.LongTensor, kept: torch.BoolTensor
                 ) -> tuple[torch.LongTensor, torch.BoolTensor]:
    """The entries of a kept path (`check_path`'s index, kept [R, P]) in sequence order: each
    kept node, then its forced token's entry (used where it has one). Returns (entries
    [R, 2P], valid [R, 2P]): entry 2i is path node i, entry 2i + 1 its forced token."""
    T = forced.out.shape[1]
    has = forced.forced.gather(1, index) & kept                                 # node followed by its forced token
    entries = torch.stack([index, T + index], 2).flatten(1)
    valid = torch.stack([kept, has], 2).flatten(1)
    return entries, valid


def node_histories(history: torch.LongTensor, tokens: torch.LongTensor, parents: torch.LongTensor,
                   start: torch.LongTensor) -> torch.LongTensor:
    """[B, T, H] each node's context as a token history: `history` [B, H] (the committed
    tokens by position) with the node's root-to-node path written at positions start[b] + d.
    For models that compute logits from the tokens around a position rather than a cache."""
    path = path_tokens(tokens, parents)                                        # [B, T, T] by depth
    B, T = tokens.shape
    H = history.shape[1]
    room = F.pad(history, (0, T), value=-1)                                    # positions past H: dropped below
    out = room.unsqueeze(1).expand(B, T, H + T).clone()                        # [B, T, H + T]
    at = (start.view(B, 1, 1) + torch.arange(T, device=tokens.device)).expand(B, T, T)
    out.scatter_(2, at, torch.where(path >= 0, path, out.gather(2, at)))
    return out[:, :, :H]
