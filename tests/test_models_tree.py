"""The shared pieces of a draft tree (`scd_core.models.tree`) against per-node references,
and their argument checks."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from scd_core import testing
from scd_core.models import tree as tr

TREES = torch.tensor([[-1, 0, 0, 1, 1, 1, 2, 3],          # breadth first
                      [-1, 0, 1, 0, 1, 3, 2, 2],          # interleaved
                      [-1, 0, 1, 2, 3, 4, 5, 6]])         # a chain


def reference_paths(parents: list[int]) -> list[list[int]]:
    paths: list[list[int]] = []
    for j, p in enumerate(parents):
        paths.append([j] if p < 0 else paths[p] + [j])
    return paths


def test_ancestors_depths_and_path_tokens_follow_the_parent_links():
    seen, depth = tr.ancestors(TREES), tr.depths(TREES)
    tokens = torch.arange(100, 100 + TREES.numel()).view(TREES.shape)
    by_depth = tr.path_tokens(tokens, TREES)
    for b, parents in enumerate(TREES.tolist()):
        for i, path in enumerate(reference_paths(parents)):
            assert seen[b, i].nonzero().flatten().tolist() == sorted(path)
            assert int(depth[b, i]) == len(path) - 1
            assert by_depth[b, i, :len(path)].tolist() == tokens[b, path].tolist()
            assert bool((by_depth[b, i, len(path):] == -1).all())
    assert torch.equal(tr.positions(torch.tensor([2, 0, 5]), TREES), depth + torch.tensor([[2], [0], [5]]))


def test_tree_mask_shows_the_prefix_to_every_node_and_the_path_only():
    seen = tr.ancestors(TREES[:2])
    prefix = torch.tensor([[True, True, False], [True, False, False]])
    mask = tr.tree_mask(prefix, seen)
    assert mask.shape == (2, 1, 8, 11)
    assert torch.equal(mask[:, 0, :, :3], prefix[:, None, :].expand(2, 8, 3))
    assert torch.equal(mask[:, 0, :, 3:], seen)


def test_gather_nodes_takes_each_rows_own_nodes():
    x = torch.randn(2, 3, 8, 4)                                   # [R, H, T, D]
    index = torch.tensor([[0, 2, 5], [0, 1, 1]])
    got = tr.gather_nodes(x, index, 2)
    for b in range(2):
        assert torch.equal(got[b], x[b][:, index[b]])


def test_a_forced_token_is_seen_by_its_nodes_descendants_and_itself():
    """Node j's forced token is entry T + j, fed for every node (fixed shapes) and used where
    `after[j]`: the entries a node or a used forced token sees are those of the tree's rule."""
    parents = TREES[:2]
    seen = tr.ancestors(parents)
    after = torch.tensor([[False, True, False, True, False, False, False, False],
                          [False, False, True, False, False, False, False, False]])
    forced = tr.force_after(seen, after)
    T = 8
    assert forced.seen.shape == (2, 2 * T, 2 * T) and torch.equal(forced.forced, after)
    for b in range(2):
        owners = after[b].nonzero().flatten().tolist()
        for i in range(T):                                        # a node: its path, and the forced
            for o in owners:                                      # tokens of its strict ancestors
                assert bool(forced.seen[b, i, T + o]) == (bool(seen[b, i, o]) and o != i)
            assert torch.equal(forced.seen[b, i, :T], seen[b, i])
            assert int(forced.out[b, i]) == (T + i if i in owners else i)
        for o in owners:                                          # a forced token: its node's path,
            assert torch.equal(forced.seen[b, T + o, :T], seen[b, o])     # itself and those above
            for p in range(T):
                assert bool(forced.seen[b, T + o, T + p]) == (bool(seen[b, o, p]) and p in owners)
    entries, valid = tr.path_entries(forced, torch.tensor([[0, 1, 3, 7], [0, 1, 2, 6]]), torch.ones(2, 4, dtype=torch.bool))
    assert entries.shape == (2, 8)
    assert entries[0][valid[0]].tolist() == [0, 1, T + 1, 3, T + 3, 7]
    assert entries[1][valid[1]].tolist() == [0, 1, 2, T + 2, 6]


def test_tree_pieces_have_fixed_shapes_and_read_nothing_back():
    """On `device="meta"` nothing can be read back: every piece still gives its shapes."""
    parents = TREES.to("meta")
    tokens = torch.zeros(3, 8, dtype=torch.long, device="meta")
    tree = tr.check_tree(tokens, parents, torch.zeros(3, dtype=torch.long, device="meta"), 3, 16)
    assert tree.seen.shape == (3, 8, 8) and tree.depth.shape == (3, 8)
    assert tr.path_tokens(tokens, parents).shape == (3, 8, 8)
    forced = tr.force_after(tree.seen, tree.depth > 0)
    index, kept = tr.check_path(tree, torch.zeros(3, 4, dtype=torch.long, device="meta"))
    assert tr.path_entries(forced, index, kept)[0].shape == (3, 8)
    history = torch.zeros(3, 20, dtype=torch.long, device="meta")
    assert tr.node_histories(history, tokens, parents, tree.start).shape == (3, 8, 20)


def test_node_histories_write_each_nodes_path_over_the_history():
    history = torch.arange(12).view(1, 12) + 100
    tokens = torch.arange(8).view(1, 8)
    parents = TREES[:1]
    out = tr.node_histories(history, tokens, parents, torch.tensor([3]))
    for i, path in enumerate(reference_paths(parents[0].tolist())):
        want = history[0].clone()
        want[3:3 + len(path)] = tokens[0, path]
        assert torch.equal(out[0, i], want)
    edge = tr.node_histories(history, tokens, parents, torch.tensor([10]))   # paths past the history: dropped
    assert torch.equal(edge[0, 7, :10], history[0, :10]) and edge[0, 7, 10:].tolist() == [0, 1]


def test_bad_trees_and_paths_raise_value_errors_naming_the_argument():
    tokens = torch.zeros(2, 8, dtype=torch.long)
    start = torch.tensor([0, 1])
    tree = tr.check_tree(tokens, TREES[:2], start, 2, 16)
    with pytest.raises(ValueError, match="parents"):
        tr.check_tree(tokens, torch.tensor([[-1, 0, 2, 1, 1, 1, 2, 3]] * 2), start, 2, 16)   # a parent after its child
    with pytest.raises(ValueError, match="parents"):
        tr.check_tree(tokens, torch.tensor([[0, 0, 0, 1, 1, 1, 2, 3]] * 2), start, 2, 16)    # no root
    with pytest.raises(ValueError, match="tokens"):
        tr.check_tree(tokens + 16, TREES[:2], start, 2, 16)
    with pytest.raises(ValueError, match="start"):
        tr.check_tree(tokens, TREES[:2], torch.tensor([0]), 2, 16)
    index, kept = tr.check_path(tree, torch.tensor([[0, 1, 3, 7], [0, 3, -1, -1]]))
    assert index.tolist() == [[0, 1, 3, 7], [0, 3, 0, 0]] and kept.sum(1).tolist() == [4, 2]
    for nodes in ([[1, 3, -1, -1], [0, -1, -1, -1]],          # not from the root
                  [[0, 2, 3, -1], [0, -1, -1, -1]],           # 3 is not a child of 2
                  [[0, -1, 1, -1], [0, -1, -1, -1]],          # padding inside
                  [[0, 8, -1, -1], [0, -1, -1, -1]]):         # no such node
        with pytest.raises(ValueError, match="nodes"):
            tr.check_path(tree, torch.tensor(nodes))
    with pytest.raises(ValueError, match="nodes"):
        tr.check_path(None, torch.tensor([[0], [0]]))          # no step_tree before


def test_the_documented_example_model_passes_the_tree_checker():
    """docs/models.md's cache-free example, as written, follows the whole contract."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "models.md").read_text()
    block = next(b for b in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M) if "class Trigram" in b)
    space: dict = {}
    exec(compile(block, "docs/models.md", "exec"), space)
    testing.check_tree_session(space["Trigram"](), ["a", "b"], 1.0)


def test_a_tree_pass_writes_bytes_of_the_tree_not_of_the_cache():
    """`python -m bench cache-writes`: the bytes a 2x2 tree's pass (`step_tree` + `keep_path`) writes
    into the KV cache or into copies of it, per layer, are the same for a cache of 64 positions
    and one of 512 (its nodes into the tree slots, the kept path moved into place), a small
    part of a layer's keys; a chain pass of as many tokens writes about as much."""
    from bench.cache_writes import measure

    small, large = measure("tiny", 2, 2), measure("tiny-video", 2, 2)
    assert small["slots"] * 8 == large["slots"] and small["tree"] == large["tree"] > 0
    assert large["tree"] < large["cache"] / 10 and small["tree"] <= 2 * small["chain"]
