"""Draft trees (`Settings.tree`): the model side on the toy models (step_tree / keep_path), the
tree a pass feeds, the chain as the tree with one candidate, greedy decoding, row
independence, rows near the grid's end, the trace, serving, the bench and the errors. The
law of the tokens, by exact enumeration: tests/test_exactness.py."""
from __future__ import annotations

import csv

import pytest
import torch

import scd_core
from scd_core import bench, tree_pass
from scd_core.models import tree as tree_lib
from scd_core.models.toy import RandomLogitsModel, ToyGridModel, ToyModel
from scd_core.protocols import can_tree
from scd_core.serve import Scheduler

SPECULATIVE = ["sjd", "scd-mc", "scd-gumbel"]
TREES = [((2, 1), 6), ((3, 1), 6), ((2, 2), 8)]          # (tree, window L)
PROMPTS = ["a cat", "a dog", "a red apple"]


@pytest.fixture(scope="module")
def grid() -> ToyGridModel:
    return ToyGridModel(vocab_size=32, grid=(6, 6), dim=32, hidden=64, seed=1)


def random_parents(B: int, T: int, g: torch.Generator) -> torch.LongTensor:
    """A random tree per row: node j's parent uniform among the earlier nodes."""
    parents = torch.full((B, T), -1, dtype=torch.long)
    for j in range(1, T):
        parents[:, j] = torch.randint(0, j, (B,), generator=g)
    return parents


# ------------------------------------------------------------------- the model side

def _models():
    return [("toy", ToyModel(vocab_size=3, grid=(3, 3), seed=2), 2.0),
            ("toy-grid", ToyGridModel(vocab_size=16, grid=(4, 4), dim=16, hidden=32), 1.0),
            ("toy-grid-cfg", ToyGridModel(vocab_size=16, grid=(4, 4), dim=16, hidden=32), 2.5)]


@pytest.mark.parametrize("name,model,cfg", _models(), ids=[m[0] for m in _models()])
def test_tree_logits_equal_the_chain_logits_of_every_path(name, model, cfg):
    """step_tree's logits at node j are those `step` gives at the end of the root-to-j path fed
    as a chain after the same prefix; a chain of parents is `step`; after keep_path the session
    is as if the path had been fed by `step`."""
    g = torch.Generator().manual_seed(0)
    V, N, B, T = model.vocab_size, int(torch.tensor(model.grid).prod()), 2, 5
    start = torch.tensor([1, 3])
    prefix = torch.randint(0, V, (B, N - 1), generator=g)
    session = model.start(PROMPTS[:B], cfg)
    session.step(prefix, torch.zeros(B, dtype=torch.long))              # fed beyond start: forgotten
    tokens, parents = torch.randint(0, V, (B, T), generator=g), random_parents(B, T, g)
    depth = tree_lib.depths(parents)
    assert int((start + depth.max(1).values).max()) < N
    logits = session.step_tree(tokens, parents, start)
    assert logits.shape == (B, T, V)
    path = tree_lib.path_tokens(tokens, parents)
    for b in range(B):
        for j in range(T):
            fresh = model.start([PROMPTS[b]], cfg)
            fed = torch.cat([prefix[b, :start[b]], path[b, j, : depth[b, j] + 1]]).unsqueeze(0)
            chain = fresh.step(fed, torch.zeros(1, dtype=torch.long))
            torch.testing.assert_close(logits[b, j], chain[0, -1], atol=1e-5, rtol=1e-5)

    # keep a root-to-leaf path per row, then a step continues it exactly
    leaf = depth.argmax(1)
    nodes = torch.full((B, T), -1, dtype=torch.long)
    for b in range(B):
        chain_nodes, j = [], int(leaf[b])
        while j >= 0:
            chain_nodes.insert(0, j)
            j = int(parents[b, j])
        nodes[b, : len(chain_nodes)] = torch.tensor(chain_nodes)
    session.keep_path(nodes)
    kept = (nodes >= 0).sum(1)
    nxt = torch.randint(0, V, (B, 1), generator=g)
    after = session.step(nxt, start + kept)
    for b in range(B):
        fresh = model.start([PROMPTS[b]], cfg)
        fed = torch.cat([prefix[b, :start[b]], tokens[b, nodes[b, : kept[b]]], nxt[b]]).unsqueeze(0)
        torch.testing.assert_close(after[b, 0], fresh.step(fed, torch.zeros(1, dtype=torch.long))[0, -1],
                                   atol=1e-5, rtol=1e-5)

    # a chain of parents is step
    chain_parents = torch.arange(-1, T - 1).expand(B, T)
    again = model.start(PROMPTS[:B], cfg)
    again.step(prefix, torch.zeros(B, dtype=torch.long))
    torch.testing.assert_close(again.step_tree(tokens, chain_parents, start), session.step(tokens, start))


def test_every_toy_session_can_feed_a_tree():
    for model in (ToyModel(), ToyGridModel(vocab_size=16, grid=(4, 4), dim=16, hidden=32),
                  RandomLogitsModel(vocab_size=64, grid=(4, 4))):
        assert can_tree(model.start(["a cat"], 1.0))
    run = scd_core.generate(RandomLogitsModel(vocab_size=64, grid=(4, 4)), ["x", "y"], method="scd-mc",
                            window=8, tree=(2, 2), seed=0)
    assert run.tokens.shape == (2, 16) and bool((run.tokens >= 0).all())


def test_the_tree_shape_puts_the_main_line_first():
    shape = tree_pass.tree_shape(2, 2, 5)
    tree_lib.check_parents(shape.parents.unsqueeze(0))
    assert shape.parents.shape == (1 + 2 + 4 + 5 - 3,)                  # root + 6 tree nodes + chain of 2
    depth = tree_lib.depths(shape.parents.unsqueeze(0))[0]
    assert depth[:5].tolist() == [0, 1, 2, 3, 4]                        # the line: node j at depth j
    assert [lv.tolist()[0] for lv in shape.levels] == [0, 1, 2]          # branch 0 of each level is on the line
    for d, level in enumerate(shape.levels[1:], 1):
        assert depth[level].tolist() == [d] * 2 ** d
        assert shape.parents[level].tolist() == [shape.levels[d - 1][j // 2].item() for j in range(2 ** d)]


# ----------------------------------------------------------------------- decoding

@pytest.mark.parametrize("method", SPECULATIVE)
@pytest.mark.parametrize("window,depth", [(4, 1), (6, 3)])
def test_the_chain_is_the_tree_with_one_candidate(grid, method, window, depth):
    """tree (1, depth) feeds a tree (step_tree) that is the chain, and decodes exactly the chain's tokens."""
    kw = dict(method=method, window=window, seed=[3, 8], top_k=8, cfg_scale=2.0)
    chain = scd_core.generate(grid, PROMPTS[:2], **kw)
    tree = scd_core.generate(grid, PROMPTS[:2], tree=(1, depth), **kw)
    assert torch.equal(tree.tokens, chain.tokens) and tree.nfe == chain.nfe
    assert tree.iterations[1].parents is not None and chain.iterations[1].parents is None


@pytest.mark.parametrize("method", SPECULATIVE)
@pytest.mark.parametrize("tree,window", TREES)
@pytest.mark.parametrize("greedy", [{"temperature": 0.0}, {"top_k": 1}])
def test_greedy_every_tree_returns_ar_tokens(grid, method, tree, window, greedy):
    ar = scd_core.generate(grid, PROMPTS, method="ar", seed=0, cfg_scale=2.0, **greedy)
    run = scd_core.generate(grid, PROMPTS, method=method, window=window, tree=tree, seed=0, cfg_scale=2.0, **greedy)
    assert torch.equal(run.tokens, ar.tokens)


@pytest.mark.parametrize("method", SPECULATIVE)
@pytest.mark.parametrize("tree,window", TREES)
@pytest.mark.parametrize("init", ["random", "repeat-above"])
def test_a_rows_tokens_do_not_depend_on_its_batch_with_a_tree(grid, method, tree, window, init):
    kw = dict(method=method, window=window, tree=tree, init=init, top_k=10, cfg_scale=2.0)
    seeds = [5, 9, 2]
    batch = scd_core.generate(grid, PROMPTS, seed=seeds, **kw)
    for b, (prompt, seed) in enumerate(zip(PROMPTS, seeds)):
        alone = scd_core.generate(grid, [prompt], seed=seed, **kw)
        assert torch.equal(batch.tokens[b], alone.tokens[0]), (prompt, seed)
        assert int(batch.row_nfe[b]) == alone.nfe


def test_rows_near_the_grid_end_feed_only_their_line(grid):
    """A row whose main line would pass the grid's end re-feeds committed tokens as the chain
    does, and its pass tests no tree (branches all -1); before that its passes use the tree."""
    run = scd_core.generate(grid, PROMPTS, method="scd-mc", window=8, tree=(2, 2), seed=1, top_k=10)
    line, N = 8 - (2 + 4 - 2), grid.N                                    # line of 4: 3 drafts
    near = used = 0
    for it in run.iterations[1:]:
        assert it.window == 8 and it.line == line and it.branches.shape == (3, 2)
        fits = it.n_before + line - 1 <= N
        assert bool((it.branches[~fits] == -1).all())
        assert bool((it.start[fits] == it.n_before[fits] - 1).all())
        near += int((~fits & it.active).sum())
        used += int((it.branches[fits & it.active] >= 0).any(1).sum())
    assert near > 0 and used > 0


def test_the_trace_records_the_path_through_the_tree(grid):
    k, depth, L = 2, 2, 8
    run = scd_core.generate(grid, PROMPTS, method="sjd", window=L, tree=(k, depth), seed=4, top_k=10)
    shape = tree_pass.tree_shape(k, depth, L - (k + k * k - depth))
    off_line = 0
    for it in run.iterations[1:]:
        taken = (it.branches >= 0).sum(1)
        assert bool((taken <= it.num_accepted).all()) and bool((it.num_accepted <= shape.line - 1).all())
        assert bool((it.committed <= it.num_accepted + 1).all())
        left = (it.branches > 0).any(1)
        assert bool((it.num_accepted[left] == taken[left]).all())       # a path off the line ends in the tree
        assert bool((it.accept_prob[~torch.isnan(it.accept_prob)] <= 1).all())
        for b in torch.nonzero(left).flatten().tolist():                 # the committed tokens are the path's nodes
            index = 0
            for d in range(int(taken[b])):
                index = index * k + int(it.branches[b, d])
                node = int(shape.levels[d + 1][index])
                assert int(it.committed_tokens[b, d]) == int(it.window_tokens[b, node])
            off_line += 1
    assert off_line > 0
    assert 0 <= run.acceptance_rate <= 1 and 0 <= run.draft_stability <= 1


@pytest.mark.parametrize("method", SPECULATIVE)
def test_rows_that_join_a_running_batch_with_a_tree_equal_the_same_prompt_alone(grid, method):
    kw = dict(method=method, window=6, tree=(2, 1), top_k=10, cfg_scale=2.0)
    scheduler = Scheduler(grid, **kw)
    joins = {0: [("a cat", 5), ("a dog", 9)], 2: [("a red apple", 2)], 3: [("a cat", 7)]}
    requests, step = [], 0
    while True:
        for prompt, seed in joins.get(step, []):
            requests.append(scheduler.submit(prompt, seed))
        if not scheduler.busy and step > max(joins):
            break
        scheduler.step()
        step += 1
    for request in requests:
        alone = scd_core.generate(grid, [request.prompt], seed=request.seed, **kw)
        assert torch.equal(request.result().tokens, alone.tokens)


# ------------------------------------------------------------------------- errors

@pytest.mark.parametrize("tree", [(0, 1), (2, -1), (2.0, 1), "2x1", (2, 1, 1), (True, 1)])
def test_a_bad_tree_is_refused_by_name(tree):
    with pytest.raises(ValueError, match="tree"):
        scd_core.Settings(tree=tree)


def test_tree_settings_are_checked_against_the_method_and_window():
    assert scd_core.Settings(tree=None) == scd_core.Settings() and scd_core.Settings().tree == (1, 0)
    assert scd_core.Settings(tree=[2, 1]).tree == (2, 1)
    with pytest.raises(ValueError, match="tree.*window"):
        scd_core.Settings(window=6, tree=(2, 2))                        # needs 7 tokens per pass
    scd_core.Settings(window=7, tree=(2, 2))                            # the root and the full tree fit
    with pytest.raises(ValueError, match="tree"):
        scd_core.Settings(method="ar", tree=(2, 1))
    assert scd_core.Settings(method="ar", window=1).tree == (1, 0)


class _ChainOnly:
    """A model whose sessions have `step` only (no step_tree / keep_path)."""

    def __init__(self, model):
        self.model, self.vocab_size, self.grid = model, model.vocab_size, model.grid

    def start(self, prompts, cfg_scale):
        session = self.model.start(prompts, cfg_scale)
        return type("ChainSession", (), {"first_logits": session.first_logits, "step": staticmethod(session.step)})()

    def decode(self, tokens):
        return self.model.decode(tokens)


def test_a_session_without_step_tree_is_refused_before_any_pass(grid):
    model = _ChainOnly(grid)
    with pytest.raises(ValueError, match="tree"):
        scd_core.generate(model, ["a cat"], method="sjd", window=6, tree=(2, 1))
    with pytest.raises(ValueError, match="tree"):
        next(iter(scd_core.stream(model, ["a cat"], method="sjd", window=6, tree=(2, 1))))
    assert scd_core.generate(model, ["a cat"], method="sjd", window=6).tokens.shape == (1, grid.N)


# -------------------------------------------------------------------------- bench

SMALL = ["--model", "toy-grid", "--model-arg", "grid=4,6", "--model-arg", "hidden=64", "--seeds", "1",
         "--top-k", "20", "--threads", "1", "--max-prompts", "1"]


def test_the_bench_has_a_tree_column(tmp_path):
    out = tmp_path / "b.csv"
    assert bench.main(SMALL + ["--methods", "ar,scd-mc", "--windows", "8", "--tree", "1x0,2x1,3x2",
                               "--csv", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [(r["method"], r["window"], r["tree"]) for r in rows] == [("ar", "1", "-"), ("scd-mc", "8", "1x0"),
                                                                    ("scd-mc", "8", "2x1")]   # 3x2 needs 13


def test_the_bench_refuses_a_bad_tree(capsys):
    assert bench.main(SMALL + ["--tree", "2y1"]) == 2
    assert "tree" in capsys.readouterr().err


# ------------------------------------------------------------------- the samplers

def _ordered_pairs_pvalue(pairs: torch.LongTensor, q: torch.Tensor) -> float:
    """Chi-square of ordered pairs (a, b) against sampling two without replacement from q."""
    from stats_util import chi_square_pvalue
    V = q.shape[0]
    exact = (q.unsqueeze(1) * q.unsqueeze(0) / (1 - q).unsqueeze(1)).fill_diagonal_(0).flatten()
    return chi_square_pvalue(pairs[:, 0] * V + pairs[:, 1], exact)


def test_sibling_samplers_draw_without_replacement():
    """sample_siblings after a draw from q, and gumbel_siblings after the Gumbel argmax, give
    ordered candidates with the law of sampling without replacement; -1 once q is exhausted."""
    from scd_core import coupling
    g = torch.Generator().manual_seed(3)
    q = torch.tensor([0.5, 0.2, 0.15, 0.1, 0.05])
    R = 200_000
    first = coupling.sample(q.expand(R, -1), torch.rand(R, generator=g, dtype=torch.float64))
    drawn = coupling.sample_siblings(q.expand(R, -1), first, torch.rand(R, 2, generator=g, dtype=torch.float64))
    assert _ordered_pairs_pvalue(drawn[:, :2], q) > 1e-4
    assert bool((drawn[:, 0] != drawn[:, 1]).all() & (drawn[:, 1] != drawn[:, 2]).all() & (drawn[:, 0] != drawn[:, 2]).all())
    gumbel = -(-torch.rand(R, 5, generator=g).clamp(min=1e-12).log()).log()
    top = coupling.gumbel_siblings(q.expand(R, -1), coupling.gumbel_argmax(q.expand(R, -1), gumbel), gumbel, 3)
    assert _ordered_pairs_pvalue(top[:, :2], q) > 1e-4
    sparse = torch.tensor([[0.7, 0.3, 0.0, 0.0]])
    assert coupling.sample_siblings(sparse, torch.tensor([1]), torch.full((1, 2), 0.5, dtype=torch.float64)).tolist() == [[1, 0, -1]]
    assert coupling.gumbel_siblings(sparse, torch.tensor([0]), torch.zeros(1, 4), 3).tolist() == [[0, 1, -1]]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_recursive_rejection_of_candidates_without_replacement_samples_p(k):
    """The first candidate that passes, or else the residual after the last, is a draw from p,
    whatever q; one candidate is plain speculative sampling."""
    from scd_core import coupling
    from stats_util import chi_square_pvalue
    g = torch.Generator().manual_seed(k)
    p = torch.tensor([0.05, 0.4, 0.3, 0.25, 0.0])
    q = torch.tensor([0.4, 0.1, 0.1, 0.2, 0.2])
    R = 200_000
    uniform = lambda *shape: torch.rand(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    first = coupling.sample(q.expand(R, -1), uniform(R))
    cand = coupling.sample_siblings(q.expand(R, -1), first, uniform(R, k - 1))
    passed, p_last, q_last = coupling.recursive_rejection(p.expand(R, -1), q.expand(R, -1), cand, uniform(R, k))
    chosen = cand.gather(1, passed.long().argmax(1, keepdim=True)).squeeze(1)
    out = torch.where(passed.any(1), chosen, coupling.resample(p_last, q_last, uniform(R)))
    assert chi_square_pvalue(out, p) > 1e-4
    u1 = uniform(R, 1)                                   # one candidate: speculative sampling's test
    one, p1, q1 = coupling.recursive_rejection(p.expand(R, -1), q.expand(R, -1), cand[:, :1], u1)
    assert torch.equal(one[:, 0], u1[:, 0] < coupling.accept_prob(p.expand(R, -1), q.expand(R, -1), cand[:, 0]))
    assert torch.equal(p1, p.expand(R, -1)) and torch.equal(q1, q.expand(R, -1))


def test_a_tree_record_crosses_the_client_transport(grid):
    """A row's record keeps its tree (parents, branches) through pack_record / unpack_record."""
    from scd_core.client import pack_record, unpack_record
    run = scd_core.generate(grid, PROMPTS[:2], method="scd-mc", window=8, tree=(2, 2), seed=2, top_k=10)
    record = run.iterations[2].row(1)
    back = unpack_record(pack_record(record), torch.full((1, grid.N), -1, dtype=torch.long))
    assert torch.equal(back.branches, record.branches) and torch.equal(back.parents, record.parents)
    assert back.line == record.line == 4 and int(back.num_accepted) == int(record.num_accepted)
