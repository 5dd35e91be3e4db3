"""The model side of a draft tree (`protocols.TreeSession`): depths, positions and the
attention mask of a tree given by parent links, for every model and adapter to share.

A tree of T nodes per row is `parents` [B, T]: -1 for the root (node 0), else the index of
the node's parent, always smaller than its own. Parents come before children, so depths and
ancestors follow in one sweep per tree level, never per node.
"""
from __future__ import annotations

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
    within the tree: the tree attention mask)."""
    B, T = parents.shape
    eye = torch.eye(T, dtype=torch.bool, device=parents.device).expand(B, T, T)
    up = torch.zeros(B, T, T, dtype=torch.bool, device=parents.device)        # [b, i, j]: j is i's parent
    rows = parents >= 0
    b, i = rows.nonzero(as_tuple=True)
    up[b, i, parents[b, i]] = True
    seen, reach = eye.clone(), eye.float()
    for _ in range(T - 1):                          # at most T - 1 levels; stops when nothing new
        reach = (reach @ up.float()).clamp(max=1)   # one level further up
        new = reach.bool() & ~seen
        if not bool(new.any()):
            break
        seen |= new
    return seen


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
