"""The tree contract (`protocols.TreeSession`), checked on any model: `check_tree_session(model,
prompts, cfg_scale)` is a model's whole tree test.

Every check compares a session fed trees with sessions fed the same tokens as chains by `step`
(each prompt started alone), to float32 rounding relative to the logit scale:
(a) every node's logits equal the chain logits at the end of its root-to-node path, for two
    rows at different starts with trees of different shapes (guidance as the caller asks);
(b) after `keep_path`, a `step` gives the logits of a session fed that path by `step` (also
    when it forgets part of the kept path), a second tree on top of it passes (a) again, and
    rows joining and leaving afterwards (a `ResizableSession`) keep giving those logits;
(c) a chain (`parents[b, j] == j - 1`) gives exactly what `step` gives.
The positions stay inside a grid of 12 tokens.
"""
from __future__ import annotations

import torch

from scd_core.protocols import can_resize, can_tree

REL = 1e-5


def assert_close_logits(got: torch.Tensor, want: torch.Tensor, what: str, rel: float = REL) -> None:
    """Equal to `rel` times the scale of the finite logits, with -inf (a masked token) at the
    same places."""
    finite = torch.isfinite(want)
    assert torch.equal(finite, torch.isfinite(got)), f"{what}: masked tokens differ"
    scale = max(1.0, float(want[finite].abs().max())) if bool(finite.any()) else 1.0
    torch.testing.assert_close(got[finite], want[finite], atol=rel * scale, rtol=0, msg=lambda m: f"{what}: {m}")
# Two trees of 8 nodes, parents before children: a root with 2 children, 4 grandchildren
# under them (3 + 1 or 2 + 2) and a chain tail at depth 3; the two rows' shapes differ.
BREADTH_FIRST = [-1, 0, 0, 1, 1, 1, 2, 3]
INTERLEAVED = [-1, 0, 1, 0, 1, 3, 2, 2]
# A root-to-node path of each shape (padded with -1): the deepest one, and root + one child.
DEEP = {tuple(BREADTH_FIRST): [0, 1, 3, 7], tuple(INTERLEAVED): [0, 1, 2, 6]}
SHORT = {tuple(BREADTH_FIRST): [0, 2, -1, -1], tuple(INTERLEAVED): [0, 3, -1, -1]}


def chain_logits(model, prompt: str, cfg_scale: float, fed: list[int]) -> torch.Tensor:
    """[len(fed), V]: a session of `prompt` alone fed `fed` by one `step` from position 0."""
    session = model.start([prompt], cfg_scale)
    return session.step(torch.tensor([fed]), torch.zeros(1, dtype=torch.long))[0]


def node_paths(parents: list[int]) -> list[list[int]]:
    """Each node's root-to-node path (node indices)."""
    paths: list[list[int]] = []
    for j, p in enumerate(parents):
        paths.append([j] if p < 0 else paths[p] + [j])
    return paths


def check_nodes(model, prompts, cfg_scale, history: list[list[int]], tokens: torch.Tensor,
                parents: torch.Tensor, start: torch.Tensor, out: torch.Tensor, what: str) -> None:
    """(a): node j's logits equal the chain logits at the end of history[:start] + its path,
    checked once per leaf (a leaf's chain covers every node on its path)."""
    B, T = tokens.shape
    assert tuple(out.shape) == (B, T, model.vocab_size), f"{what}: logits of shape {tuple(out.shape)}"
    for b in range(B):
        par = parents[b].tolist()
        paths = node_paths(par)
        leaves = [j for j in range(T) if j not in par]
        s = int(start[b])
        for leaf in leaves:
            path = paths[leaf]
            ref = chain_logits(model, prompts[b], cfg_scale, history[b][:s] + tokens[b, path].tolist())
            for depth, node in enumerate(path):
                assert_close_logits(out[b, node], ref[s + depth], f"{what}: row {b}, node {node} (depth {depth})",
                                    rel=REL)


def _keep(session, history, tokens, start, paths) -> torch.Tensor:
    nodes = torch.tensor(paths)
    session.keep_path(nodes)
    for b, path in enumerate(paths):
        kept = [n for n in path if n >= 0]
        history[b] = history[b][:int(start[b])] + tokens[b, kept].tolist()
    return nodes


def check_tree_session(model, prompts: list[str], cfg_scale: float, seed: int = 0) -> None:
    """The whole tree contract on `model` with two `prompts` (see the module docstring)."""
    assert len(prompts) == 2
    V = model.vocab_size
    g = torch.Generator().manual_seed(seed)
    session = model.start(prompts, cfg_scale)
    assert can_tree(session), f"{type(session).__name__} has no step_tree / keep_path"

    # (c) a chain is `step`, on two sessions fed the same prefix
    chain, stepped = model.start(prompts, cfg_scale), model.start(prompts, cfg_scale)
    prefix = torch.randint(0, V, (2, 3), generator=g)
    zeros = torch.zeros(2, dtype=torch.long)
    chain.step(prefix, zeros), stepped.step(prefix, zeros)
    toks = torch.randint(0, V, (2, 5), generator=g)
    start = torch.tensor([1, 3])
    line = torch.arange(-1, 4).expand(2, -1)
    assert_close_logits(chain.step_tree(toks, line, start), stepped.step(toks, start), "a chain as a tree", rel=REL)
    chain.keep_path(torch.arange(5).expand(2, -1))
    again = torch.randint(0, V, (2, 2), generator=g)
    assert_close_logits(chain.step(again, start + 5), stepped.step(again, start + 5), "after a chain kept", rel=REL)

    # (a) trees at different starts, after a prefix fed by `step` (the tree forgets its tail)
    fed = torch.randint(0, V, (2, 4), generator=g)
    session.step(fed, zeros)
    history = fed.tolist()
    shapes = torch.tensor([BREADTH_FIRST, INTERLEAVED])
    tokens = torch.randint(0, V, (2, 8), generator=g)
    start = torch.tensor([1, 2])
    out = session.step_tree(tokens, shapes, start)
    check_nodes(model, prompts, cfg_scale, history, tokens, shapes, start, out, "first tree")

    # (b) keep a deep path and a short one; a step then forgets the last kept node
    _keep(session, history, tokens, start, [DEEP[tuple(BREADTH_FIRST)], SHORT[tuple(INTERLEAVED)]])
    start = torch.tensor([len(h) - 1 for h in history])
    window = torch.randint(0, V, (2, 2), generator=g)
    out = session.step(window, start)
    for b in range(2):
        history[b] = history[b][:int(start[b])] + window[b].tolist()
        ref = chain_logits(model, prompts[b], cfg_scale, history[b])
        assert_close_logits(out[b], ref[int(start[b]):], f"step after keep_path, row {b}", rel=REL)

    # a second tree on top of the kept path, shapes swapped between the rows
    shapes = shapes.flip(0)
    tokens = torch.randint(0, V, (2, 8), generator=g)
    start = torch.tensor([len(h) for h in history])
    out = session.step_tree(tokens, shapes, start)
    check_nodes(model, prompts, cfg_scale, history, tokens, shapes, start, out, "second tree")
    _keep(session, history, tokens, start, [SHORT[tuple(INTERLEAVED)], DEEP[tuple(BREADTH_FIRST)]])

    if can_resize(session):                     # rows leave and join after keep_path
        session.keep_rows(torch.tensor([1, 0]))
        prompts, history = [prompts[1], prompts[0]], [history[1], history[0]]
        session.add_rows([prompts[0]])
        prompts, history = prompts + [prompts[0]], history + [[]]
    start = torch.tensor([len(h) for h in history])
    window = torch.randint(0, V, (len(history), 2), generator=g)
    out = session.step(window, start)
    for b in range(len(history)):
        history[b] = history[b] + window[b].tolist()
        ref = chain_logits(model, prompts[b], cfg_scale, history[b])
        assert_close_logits(out[b], ref[int(start[b]):], f"step after the second keep_path, row {b}", rel=REL)
