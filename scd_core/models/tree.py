"""The model side of a draft tree (`protocols.TreeSession`): depths, positions and the
attention mask of a tree given by parent links, for every model and adapter to share.

A tree of T nodes per row is `parents` [B, T]: -1 for the root (node 0), else the index of
the node's parent, always smaller than its own. Ancestors follow from the parent links by
repeated squaring (about log2(depth) matrix products), never a loop per node.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def check_parents(parents: torch.LongTensor) -> None:
    """A ValueError unless `parents` [B, T] is a tree: node 0 the root (-1), every other
    node's parent an earlier node."""
    if parents.dim() != 2 or parents.shape[1] == 0:
        raise ValueError(f"parents: expected [B, T] with T >= 1, got shape {tuple(parents.shape)}")
    index = torch.arange(parents.shape[1], device=parents.device)
    if bool((parents[:, 0] != -1).any()) or bool(((parents[:, 1:] < 0) | (parents[:, 1:] >= index[1:])).any()):
        raise ValueError("parents: node 0 must be the root (-1) and every other node's parent an earlier node")


def ancestors(parents: torch.LongTensor) -> torch.BoolTensor:
    """[B, T, T] whether node j is node i or one of its ancestors (what node i may attend to
    within the tree: the tree attention mask). Each squaring doubles the path length
    covered, so a tree of depth D takes about log2(D) matrix products, a chain included."""
    B, T = parents.shape
    seen = torch.eye(T, dtype=torch.bool, device=parents.device).repeat(B, 1, 1)
    b, i = (parents >= 0).nonzero(as_tuple=True)
    seen[b, i, parents[b, i]] = True                                           # itself and its parent
    while True:
        reach = (seen.float() @ seen.float()) > 0                              # up to twice as far
        if torch.equal(reach, seen):
            return seen
        seen = reach


def depths(parents: torch.LongTensor) -> torch.LongTensor:
    """[B, T] each node's depth: 0 for the root, its parent's plus one."""
    return ancestors(parents).sum(2) - 1


def positions(start: torch.LongTensor, parents: torch.LongTensor) -> torch.LongTensor:
    """[B, T] the generated position of each node: start[b] + depth."""
    return start.unsqueeze(1) + depths(parents)


def path_tokens(tokens: torch.LongTensor, parents: torch.LongTensor) -> torch.LongTensor:
    """[B, T, T] the tokens of each node's root-to-node path, by depth: out[b, i, d] is the
    token at depth d on node i's path (-1 past its own depth). For models that compute a
    node's logits from its context's tokens rather than from a cache."""
    seen = ancestors(parents)                                                  # [B, T, T]
    d = depths(parents)                                                        # [B, T]
    B, T = tokens.shape
    out = torch.full((B, T, T), -1, dtype=torch.long, device=tokens.device)
    b, i, j = seen.nonzero(as_tuple=True)
    out[b, i, d[b, j]] = tokens[b, j]
    return out


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


def check_tree(tokens, parents, start, batch: int, vocab_size: int) -> Tree:
    """Validate `step_tree` arguments (a ValueError naming the argument): tokens [batch, T] in
    [0, V), parents [batch, T] a tree (`check_parents`), start [batch] >= 0."""
    if not isinstance(tokens, torch.Tensor) or tokens.dtype not in (torch.int64, torch.int32) \
            or tokens.ndim != 2 or tokens.shape[0] != batch or tokens.shape[1] == 0:
        raise ValueError(f"tokens: expected an integer tensor [B={batch}, T] with T >= 1, got "
                         f"{getattr(tokens, 'shape', type(tokens).__name__)}")
    if int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size:
        raise ValueError(f"tokens: values must lie in [0, {vocab_size})")
    if not isinstance(parents, torch.Tensor) or parents.dtype not in (torch.int64, torch.int32) \
            or tuple(parents.shape) != tuple(tokens.shape):
        raise ValueError(f"parents: expected an integer tensor of the tokens' shape {tuple(tokens.shape)}, got "
                         f"{getattr(parents, 'shape', type(parents).__name__)}")
    start = torch.as_tensor(start).reshape(-1).long()
    if start.shape[0] != batch:
        raise ValueError(f"start: expected {batch} entries, got {start.shape[0]}")
    if int(start.min()) < 0:
        raise ValueError("start: positions must be >= 0")
    parents = parents.long().to(tokens.device)
    check_parents(parents)
    seen = ancestors(parents)
    return Tree(tokens.long(), parents, start.to(tokens.device), seen.sum(2) - 1, seen)


def check_path(tree: Tree, nodes) -> tuple[torch.LongTensor, torch.BoolTensor]:
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
    if bool((nodes >= T).any()) or bool((nodes < -1).any()):
        raise ValueError(f"nodes: node indices must lie in [0, {T}) or be -1 (padding)")
    if bool((nodes[:, 0] != 0).any()) or bool((kept[:, 1:] & ~kept[:, :-1]).any()):
        raise ValueError("nodes: each row must start at the root (0), padded with -1 at the end only")
    index = nodes.clamp(min=0)
    parent = tree.parents.gather(1, index[:, 1:])
    if bool((kept[:, 1:] & (parent != index[:, :-1])).any()):
        raise ValueError("nodes: each node of a path must be a child of the node before it")
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

    The T nodes are entries 0..T-1; the forced tokens are entries T..T+E-1, `owner` [R, E]
    the node each follows (`forced` [R, E] False for padding: rows have different counts).
    A forced token sits between its node and that node's children: the children and the
    forced token itself see it, its own node and the node's siblings do not."""

    seen: torch.BoolTensor       # [R, T+E, T+E] what each entry attends to among the entries
    out: torch.LongTensor        # [R, T] the entry whose output predicts the next node's token
    owner: torch.LongTensor      # [R, E]
    forced: torch.BoolTensor     # [R, E]


def force_after(seen: torch.BoolTensor, after: torch.BoolTensor) -> Forced:
    """The entries of a tree (`seen` [R, T, T], `ancestors`) with a forced token after each
    node where `after` [R, T] (see `Forced`)."""
    R, T = after.shape
    rank = after.long().cumsum(1) - 1                                          # [R, T]
    E = int(after.sum(1).max()) if T else 0
    owner = torch.zeros(R, E, dtype=torch.long, device=after.device)
    forced = torch.zeros(R, E, dtype=torch.bool, device=after.device)
    b, j = after.nonzero(as_tuple=True)
    owner[b, rank[b, j]], forced[b, rank[b, j]] = j, True
    of_owner = seen.gather(2, owner[:, None, :].expand(R, T, E))               # [R, T, E]: node i sees owner
    strict = of_owner & (owner[:, None, :] != torch.arange(T, device=after.device)[None, :, None])
    owner_seen = seen.gather(1, owner[:, :, None].expand(R, E, T))             # [R, E, T]: owner sees node j
    owner_owner = owner_seen.gather(2, owner[:, None, :].expand(R, E, E))      # [R, E, E]
    top = torch.cat([seen, strict & forced[:, None, :]], 2)
    bottom = torch.cat([owner_seen, owner_owner & forced[:, None, :]], 2)
    out = torch.where(after, T + rank.clamp(min=0), torch.arange(T, device=after.device))
    return Forced(torch.cat([top, bottom], 1), out, owner, forced)


def path_entries(forced: Forced, index: torch.LongTensor, kept: torch.BoolTensor
                 ) -> tuple[torch.LongTensor, torch.BoolTensor]:
    """The entries of a kept path (`check_path`'s index, kept [R, P]) in sequence order: each
    kept node, then its forced token if it has one. Returns (entries [R, Q], valid [R, Q])."""
    R, P = index.shape
    T = forced.out.shape[1]
    has = (forced.out.gather(1, index) >= T) & kept                              # node followed by its forced token
    count = kept.long() + has.long()
    slot = count.cumsum(1) - count                                              # entry slot of each kept node
    Q = max(int(count.sum(1).max()), 1)
    entries = torch.zeros(R, Q, dtype=torch.long, device=index.device)
    valid = torch.zeros(R, Q, dtype=torch.bool, device=index.device)
    b, i = kept.nonzero(as_tuple=True)
    entries[b, slot[b, i]], valid[b, slot[b, i]] = index[b, i], True
    b, i = has.nonzero(as_tuple=True)
    entries[b, slot[b, i] + 1], valid[b, slot[b, i] + 1] = forced.out.gather(1, index)[b, i], True
    return entries, valid


def node_histories(history: torch.LongTensor, tokens: torch.LongTensor, parents: torch.LongTensor,
                   start: torch.LongTensor) -> torch.LongTensor:
    """[B, T, H] each node's context as a token history: `history` [B, H] (the committed
    tokens by position) with the node's root-to-node path written at positions start[b] + d.
    For models that compute logits from the tokens around a position rather than a cache."""
    path = path_tokens(tokens, parents)                                        # [B, T, T] by depth
    B, T = tokens.shape
    out = history.unsqueeze(1).expand(B, T, history.shape[1]).clone()         # [B, T, H]
    b, i, d = (path >= 0).nonzero(as_tuple=True)
    out[b, i, start[b] + d] = path[b, i, d]
    return out
