# Built by hub/vendor.py from scd_core/tree_pass.py: edit the library, then rebuild.
"""Draft trees: a pass that feeds k candidates at each of the first `depth` draft positions.

With `Settings.tree` = (k, depth), step 1 of the pass (`scd_core.chain`) feeds a full
k-ary tree under the last committed token, in which branch 0 of every level continues as the
chain (the main line). Candidate 0 of a position is its carried draft, the others are drawn
from the same stored law q without replacement. Step 3 then walks the tree top-down: at each
node its children are tested in order by recursive rejection sampling
(`coupling.recursive_rejection`) and the first that passes is taken; none passing commits a
draw from the residual left after the last; a path that reaches a leaf off branch 0 commits a
bonus token from the leaf's p. Steps 6-8 continue along the main line only, each slot with
its own test, exactly as on a chain (`chain.draw_line`, `chain.carry_and_fill`). The
chain is the tree with k = 1; a chain run never enters this module.

Like the chain, the pass has fixed shapes per (batch, window, tree) and no operation that
waits for the device.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import torch.nn.functional as F

from . import coupling
from .chain import (STREAM_SLOTS, Plan, State, Verdict, Verification, carry_and_fill, commit, draw_line,
                            pass_uniforms, window)
from .protocols import Session
from .sampling import probs_and_support

_TREE_STREAMS = ("sibling", "sibling-accept")   # per slot and sibling: each sibling's draw and its test


class TreeShape(NamedTuple):
    """Where the nodes of a pass's tree are fed. The main line comes first: node j < line is at
    depth j (the root, branch 0 of each tree level, then the chain), so a chain is the line
    alone. Then, level by level, the other nodes of each tree level."""
    k: int                           # candidates per tree position
    depth: int                       # tree positions
    line: int                        # nodes on the main line
    parents: torch.LongTensor        # [W] each node's parent (-1: the root)
    levels: tuple                    # [k^d] per level d = 0 .. depth: node of each base-k index (0: on the line)
    off_slot: torch.LongTensor       # [X] draft slot of each node off the line (its level - 1)
    off_candidate: torch.LongTensor  # [X] which of its slot's candidates it carries


@functools.lru_cache(maxsize=64)
def tree_shape(k: int, depth: int, line: int, device: torch.device | str = "cpu") -> TreeShape:
    """The fixed tree of (k, depth) with `line` nodes on the main line, its index tensors on
    `device` (made once per device: a pass copies nothing to the device). Level d's node with
    base-k index j (digits: the branch taken at each level) has the parent of index j // k
    on level d - 1 and carries candidate j % k of slot d - 1."""
    parents, levels, off_slot, off_candidate = list(range(-1, line - 1)), [[0]], [], []
    for d in range(1, depth + 1):
        level = []
        for j in range(k ** d):
            if j == 0:
                level.append(d)                            # branch 0: on the line
                continue
            level.append(len(parents))
            parents.append(levels[d - 1][j // k])
            off_slot.append(d - 1)
            off_candidate.append(j % k)
        levels.append(level)
    long = functools.partial(torch.tensor, dtype=torch.long, device=device)
    return TreeShape(k, depth, line, long(parents), tuple(long(lv) for lv in levels), long(off_slot),
                     long(off_candidate))


def shape_of(plan: Plan, device: torch.device) -> TreeShape:
    """The tree a pass of this plan feeds; a chain when the main line does not fit in the grid."""
    k, depth = plan.settings.tree
    if plan.L > plan.N:
        return tree_shape(1, 0, plan.N, device)
    return tree_shape(k, depth, plan.L, device)


def nodes(plan: Plan) -> int:
    """T: the nodes a pass of this plan feeds (`shape_of`'s), the main line included."""
    return len(shape_of(plan, torch.device("cpu")).parents)


class Tree(NamedTuple):
    """The candidates a pass fed beyond its main line."""
    shape: TreeShape
    candidates: torch.LongTensor     # [B, depth, k] candidates of each tree slot: 0 the carried draft; -1 none
    has_tree: torch.BoolTensor       # [B] the row was fed the tree (near the grid's end, only its line)
    u_accept: torch.Tensor           # [B, depth, k - 1] the uniforms of the siblings' tests


def decode_pass(session: Session, state: State, plan: Plan) -> tuple[State, Verdict]:
    """Feed every row's main line and the tree's other nodes, one forward pass (`step_tree`),
    then `advance`; the session keeps the committed path (`keep_path`)."""
    start, fed, parents, tree = feed(state, plan)
    logits = session.step_tree(fed, parents, start)                             # [B, W, V]
    state, verdict, path = advance(state, logits, start, plan, tree)
    session.keep_path(path)
    return state, verdict._replace(fed=fed, parents=parents)


def feed(state: State, plan: Plan) -> tuple[torch.LongTensor, torch.LongTensor, torch.LongTensor, "Tree"]:
    """Step 1 with a tree: where each row's window starts [B], the W tokens fed [B, W] (the
    main line, then the other nodes), their parents [B, W], and the tree's candidates."""
    start, line = window(state, plan)                                           # [B], [B, S]
    tree = draft_tree(state, plan, shape_of(plan, start.device), has_tree=start == state.n - 1)
    fed = torch.cat([line, tree_tokens(tree, line)], 1)                         # [B, W]
    return start, fed, tree.shape.parents.expand(fed.shape[0], -1), tree


def draft_tree(state: State, plan: Plan, shape: TreeShape, has_tree: torch.BoolTensor) -> Tree:
    """The candidates of the tree slots: each slot's carried draft, then k - 1 more drawn from
    its stored law q without replacement (SCD-Gumbel: the next largest log q + G of the slot's
    noise; the others: fresh draws from the row's "sibling" stream), so that the k candidates
    are exactly a sample of k from q without replacement, as the verification assumes."""
    k, depth = shape.k, shape.depth
    first, q = state.drafts[:, :depth], state.q[:, :depth]                      # [B, depth], [B, depth, V]
    u = tree_uniforms(state, depth, k)
    if plan.method == "scd-gumbel":
        positions = state.n.unsqueeze(1) + torch.arange(depth, device=state.n.device)           # [B, depth]
        candidates = coupling.gumbel_siblings(q, first, coupling.gumbel_noise(state.keys, positions, q.shape[-1]), k)
    else:
        candidates = coupling.sample_siblings(q, first, u["sibling"])            # [B, depth, k]
    return Tree(shape, candidates, has_tree, u["sibling-accept"])


def tree_tokens(tree: Tree, line: torch.LongTensor) -> torch.LongTensor:
    """[B, X] the tokens of the nodes off the main line: their candidates; a row not fed the
    tree, or a missing candidate, repeats the line's token at that depth (never tested)."""
    shape = tree.shape
    slot, which = shape.off_slot, shape.off_candidate
    tokens = tree.candidates[:, slot, which]                                     # [B, X]
    return torch.where(tree.has_tree.unsqueeze(1) & (tokens >= 0), tokens, line[:, slot + 1])


def advance(state: State, logits: torch.Tensor, start: torch.LongTensor, plan: Plan,
            tree: Tree) -> tuple[State, Verdict, torch.LongTensor]:
    """`chain.advance` for a pass that fed a tree: the logits [B, W, V] are those of the
    main line's S nodes, then of the X other nodes. Returns the new state, the verdict and the
    committed path [B, S] of fed nodes for `keep_path`."""
    B, W, V = logits.shape
    L, D, N = plan.L, plan.D, plan.N
    shape, depth = tree.shape, tree.shape.depth
    S = shape.line                                                              # main-line nodes fed: min(L, N)
    slots = torch.arange(L, device=logits.device)                               # [L]
    n = state.n.unsqueeze(1)                                                    # [B, 1]
    offset = n - 1 - start.unsqueeze(1)                                         # [B, 1] line index of position n
    m = S - 1 - offset                                                          # [B, 1] drafts fed on the line
    others = torch.arange(S, W, device=logits.device).expand(B, -1)             # [B, X]
    p, support = probs_and_support(logits, plan.sampling, torch.cat([(offset + slots).clamp(max=S - 1), others], 1))
    p_line = p[:, :L]                                                           # [B, L, V]; then [B, X, V]
    support = None if support is None else support[:, :L]
    u = pass_uniforms(state, L)

    # verify the main line as a chain, then walk the tree: where the walk decides (a
    # rejection inside the tree, or a path off the main line) it sets the accepted length
    x = state.drafts.clamp(min=0)                                               # [B, D]
    was_fed = slots[:D] < m                                                     # [B, D]
    p_x, q_x = coupling.masses_at(p_line[:, :D], state.q, x, was_fed)          # [B, D] p(x), q(x) (NaN: not fed)
    alpha = coupling.accept_ratio(p_x, q_x)                                     # [B, D] min(1, p/q) (NaN: not fed)
    kept = u.accept[:, :D] < alpha                                              # [B, D] fed and passed (never at a NaN)
    walk = walk_tree(p, state.q, tree, u)
    a = torch.where(walk.decides, walk.length, kept.cumprod(1).sum(1, keepdim=True))   # [B, 1]
    rejected = torch.where(walk.decides, walk.length < depth, a < m)            # [B, 1]

    # the line's tokens: drawn as on a chain (each redraft from its own slot's test), then
    # the accepted path's tokens and, where the walk decides, its last token
    residuals = torch.cat([walk.line_residuals, coupling.residual_mass(p_line[:, depth:D], state.q[:, depth:])], 1)
    tested = Verification(x, was_fed, kept, a, rejected & ~walk.decides, residuals, n + slots)
    line = draw_line(p_line, support, tested, u, state.keys, plan)
    from_residual = coupling.resample(walk.p_last, walk.q_last, u.residual.gather(1, a))           # [B, 1]
    if plan.method == "scd-gumbel":
        bonus = coupling.gumbel_argmax(walk.p_leaf, coupling.gumbel_noise(state.keys, n + a, V))  # [B, 1]
    else:
        bonus = coupling.sample(walk.p_leaf, u.fresh.gather(1, a))                                 # [B, 1]
    last = torch.where(walk.length < depth, from_residual, bonus)
    path_tokens = F.pad(torch.cat([walk.tokens, x[:, depth:]], 1), (0, L - D))  # [B, L]
    line = torch.where(slots < a, path_tokens, torch.where(walk.decides & (slots == a), last, line))
    c = (a + 1).clamp(max=N - n)                                                # [B, 1]
    tokens = commit(state.tokens, n, c, line)

    after = carry_and_fill(state, tokens, c, m, line, p_line, u, plan)
    j = torch.arange(S, device=logits.device)
    on_line = torch.where(j <= offset + a, j, -1)                               # [B, S] a row not fed the tree
    path = torch.where(tree.has_tree.unsqueeze(1), torch.where(walk.decides, walk.nodes, torch.where(slots <= a, slots, -1))[:, :S],
                       on_line)
    verdict = Verdict(start, None, a.squeeze(1), rejected.squeeze(1), alpha, p_x, q_x, walk.branches)
    return after, verdict, path


class Walk(NamedTuple):
    """What the tree walk decided, per row (`decides` False: the main line decides)."""
    decides: torch.BoolTensor        # [B, 1] the row's path stopped inside the tree or left the main line
    length: torch.LongTensor         # [B, 1] tree levels accepted on the path
    branches: torch.LongTensor       # [B, depth] candidate taken at each level (-1: none; all -1 off the tree)
    tokens: torch.LongTensor         # [B, depth] the path's token at each tree slot (the line's draft elsewhere)
    nodes: torch.LongTensor          # [B, L] fed node of the path at each depth (L = line slots)
    p_last: torch.Tensor             # [B, 1, V] the stop's last test: p and q, whose residual the stop draws from
    q_last: torch.Tensor             # [B, 1, V]
    p_leaf: torch.Tensor             # [B, 1, V] p after the path's leaf: the law of its bonus
    line_residuals: torch.Tensor     # [B, depth, V] max(0, p - q) of each main-line candidate's own test:
                                     # what SCD-MC redraws that slot from when its test fails


def walk_tree(p: torch.Tensor, q: torch.Tensor, tree: Tree, u) -> Walk:
    """Test every node's children by recursive rejection (every node of a level at once: all
    share the level's candidates), then follow the first child that passed from the root
    (`choose_path`). p [B, L + X, V] as in `advance`; q [B, D, V] the stored laws."""
    shape, cand = tree.shape, tree.candidates                                   # [B, depth, k]
    B, V, L, depth = p.shape[0], p.shape[2], shape.line, shape.depth
    device = p.device
    tests, lasts = [], []
    for d in range(depth):                                                      # slot d, level d + 1
        parents = p[:, shape.levels[d]]                              # [B, P, V] p after each level-d node
        P = parents.shape[1]
        u_level = torch.cat([u.accept[:, d: d + 1], tree.u_accept[:, d]], 1)    # [B, k]
        passed, p_last, q_last = coupling.recursive_rejection(
            parents, q[:, d: d + 1].expand(B, P, V), cand[:, d: d + 1].expand(B, P, -1), u_level.unsqueeze(1).expand(B, P, -1))
        tests.append(passed & tree.has_tree.view(B, 1, 1))
        lasts.append((p_last, q_last))
    branches = choose_path(tests, B, device)                                    # [B, depth]
    length = (branches >= 0).sum(1, keepdim=True)                               # [B, 1]
    off = tree.has_tree.unsqueeze(1) & (branches > 0).any(1, keepdim=True)           # [B, 1] left the main line
    decides = tree.has_tree.unsqueeze(1) & ((length < depth) | off)

    # the path's node at each level, and the laws at its stop
    index = torch.zeros(B, dtype=torch.long, device=device)                     # base-k index on the level
    nodes = [torch.zeros(B, dtype=torch.long, device=device)]
    p_last = p_leaf = p[:, :1]
    q_last = q[:, :1] if q.shape[1] else p[:, :1]
    rows = torch.arange(B, device=device)
    for d in range(depth + 1):
        here = (length.squeeze(1) == d).view(B, 1, 1)                           # the path stops after level d
        if d < depth:
            p_last = torch.where(here, lasts[d][0][rows, index].unsqueeze(1), p_last)
            q_last = torch.where(here, lasts[d][1][rows, index].unsqueeze(1), q_last)
            index = index * shape.k + branches[:, d].clamp(min=0)
            nodes.append(torch.where(branches[:, d] >= 0, shape.levels[d + 1][index], -1))
        else:
            p_leaf = p[rows, shape.levels[d][index]].unsqueeze(1)
    nodes = F.pad(torch.stack(nodes, 1), (0, L - depth - 1), value=-1)         # [B, L]
    taken = cand.gather(2, branches.clamp(min=0).unsqueeze(-1)).squeeze(-1)     # [B, depth]
    tokens = torch.where(branches >= 0, taken, cand[..., 0].clamp(min=0))
    line_residuals = coupling.residual_mass(p[:, :depth], q[:, :depth])         # the line's node d is node d
    return Walk(decides, length, branches, tokens, nodes, p_last, q_last, p_leaf, line_residuals)


def choose_path(tests: list[torch.BoolTensor], B: int, device) -> torch.LongTensor:
    """[B, depth] the candidate taken at each tree level, -1 from where none passed: from the
    root down, the first child that passed its test at the node reached (tests: per level,
    [B, P, k] whether child i of each node on the level passed)."""
    index = torch.zeros(B, dtype=torch.long, device=device)
    alive = torch.ones(B, dtype=torch.bool, device=device)
    rows, branches = torch.arange(B, device=device), []
    for passed in tests:
        here = passed[rows, index]                                              # [B, k] children of the node reached
        alive = alive & here.any(1)
        first = here.long().argmax(1)                                           # the first that passed
        branches.append(torch.where(alive, first, -1))
        index = index * passed.shape[2] + first
    return torch.stack(branches, 1) if branches else torch.zeros(B, 0, dtype=torch.long, device=device)


def tree_uniforms(state: State, depth: int, k: int) -> dict[str, torch.Tensor]:
    """This pass's uniforms [B, depth, k - 1] of the tree's siblings, per use (`_TREE_STREAMS`):
    sibling i of slot s of a use draws from its own sub-stream of the row's key at counter
    (pass count, slot), so the row's other numbers (`pass_uniforms`) are those of a chain."""
    counters = state.passes.unsqueeze(1) * STREAM_SLOTS + torch.arange(depth, device=state.n.device)   # [B, depth]
    out = {}
    for use, name in enumerate(_TREE_STREAMS):
        per_sibling = [coupling.uniforms(coupling.stream_keys(state.keys, 1 + use * STREAM_SLOTS + i), counters)
                       for i in range(1, k)]
        out[name] = torch.stack(per_sibling, 2) if per_sibling else counters.new_zeros(counters.shape + (0,)).double()
    return out
