"""Losslessness by exact enumeration: every method samples exactly the AR joint law.

The toy model has V = 3 tokens and N = 6 positions (a 2 x 3 grid): 729 sequences whose
exact probabilities `ToyModel.exact_joint` computes. Each configuration decodes tens of
thousands of rows and compares the sequence histogram with the exact law by chi-square,
failing below p = 1e-4 after a Bonferroni correction for the number of tests.
"""
from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

import scd_core
from scd_core import chain, coupling, decoding, passes, tree_pass
from scd_core.models.toy import ToyModel
from scd_core.sampling import validate_sampling
from stats_util import chi_square_pvalue

METHODS = ["ar", "sjd", "scd-mc", "scd-gumbel"]
FILTERS = {"none": {}, "top-k": {"top_k": 2}, "top-p": {"top_p": 0.7}, "temp-0.7": {"temperature": 0.7}}
CFG = {"cfg-off": 1.0, "cfg-on": 2.5}
BATCH_CASES = list(itertools.product(METHODS, ["random", "repeat-above"], CFG, FILTERS))
VIDEO_CASES = [(m, "repeat-frame") for m in METHODS[1:]]
SINGLE_ROW_SETTINGS = {"cfg-on, top-k": (2.0, {"top_k": 2}),
                       "cfg-off, top-p, temp-0.7": (1.0, {"top_p": 0.8, "temperature": 0.7})}
SINGLE_ROW_CASES = list(itertools.product(METHODS, ["random", "repeat-above"], SINGLE_ROW_SETTINGS))
# draft trees (k, depth) with their window L: the 2 x 3 toy grid fits each main line
TREES = {"2x1": ((2, 1), 4), "3x1": ((3, 1), 5), "2x2": ((2, 2), 8), "3x2": ((3, 2), 13), "2x2-no-chain": ((2, 2), 7)}
TREE_CASES = list(itertools.product(METHODS[1:], TREES))
TREE_SETTING_CASES = list(itertools.product(METHODS[1:], ["random", "repeat-above"], SINGLE_ROW_SETTINGS))
NUM_TESTS = (len(BATCH_CASES) + len(VIDEO_CASES) + len(SINGLE_ROW_CASES) + len(METHODS) + 3
             + len(TREE_CASES) + len(TREE_SETTING_CASES) + len(METHODS[1:]) + 2)
ALPHA = 1e-4 / NUM_TESTS
PROMPTS = ("a red apple", "a cat")


def joint_pvalues(model: ToyModel, tokens: torch.LongTensor, prompts: list[str], cfg_scale: float,
                  sampling: dict) -> list[float]:
    """One p-value per distinct prompt: its rows against its exact joint."""
    cfg = validate_sampling(sampling.get("temperature", 1.0), sampling.get("top_k", 0), sampling.get("top_p", 1.0))
    out = []
    for prompt in dict.fromkeys(prompts):
        rows = torch.tensor([i for i, p in enumerate(prompts) if p == prompt])
        joint = model.exact_joint(prompt, cfg_scale, cfg)
        out.append(chi_square_pvalue(model.sequence_index(tokens[rows]), joint))
    return out


@pytest.fixture(scope="module")
def toy() -> ToyModel:
    return ToyModel(vocab_size=3, grid=(2, 3), scale=1.5)


@pytest.mark.parametrize("method,init,cfg,filt", BATCH_CASES)
def test_batch_rows_sample_the_exact_joint(toy, method, init, cfg, filt):
    """B = 24,000 rows, two prompts interleaved: each row's law is its prompt's AR law."""
    prompts = [PROMPTS[i % 2] for i in range(24_000)]
    run = scd_core.generate(toy, prompts, method=method, window=3, seed=11, cfg_scale=CFG[cfg],
                            init=init, **FILTERS[filt])
    for p in joint_pvalues(toy, run.tokens, prompts, CFG[cfg], FILTERS[filt]):
        assert p > ALPHA, f"{method}/{init}/{cfg}/{filt}: chi-square p = {p:.3g}"


@pytest.mark.parametrize("method,init", VIDEO_CASES)
def test_video_grid_with_repeat_frame(method, init):
    video = ToyModel(vocab_size=3, grid=(3, 1, 2), scale=1.5, seed=3)
    prompts = [PROMPTS[i % 2] for i in range(24_000)]
    run = scd_core.generate(video, prompts, method=method, window=4, seed=5, cfg_scale=2.0, init=init, top_k=2)
    for p in joint_pvalues(video, run.tokens, prompts, 2.0, {"top_k": 2}):
        assert p > ALPHA, f"{method}/{init}: chi-square p = {p:.3g}"


def test_wide_window_covers_the_whole_grid(toy):
    """L larger than N: windows shrink at the end of the grid without bias."""
    prompts = [PROMPTS[0]] * 24_000
    run = scd_core.generate(toy, prompts, method="scd-mc", window=8, seed=2, cfg_scale=2.0)
    (p,) = joint_pvalues(toy, run.tokens, prompts, 2.0, {})
    assert p > ALPHA


@pytest.mark.parametrize("method", METHODS)
def test_rows_that_join_a_running_batch_sample_the_exact_joint(toy, method):
    """Three cohorts of 8,000 rows join one running batch at passes 0, 1 and 2 (the way
    `scd_core.serve` admits requests); each cohort's rows sample their prompt's AR law."""
    plan, _ = decoding.validate(toy, ["x"], scd_core.Settings(method, 3, cfg_scale=2.0), 0)
    cohort = [PROMPTS[i % 2] for i in range(8_000)]
    session = toy.start(cohort, plan.cfg_scale)
    state, _ = chain.start_rows(session.first_logits, range(8_000), plan)
    for joined in (1, 2):
        state, _ = chain.decode_pass(session, state, plan)
        first = session.add_rows(cohort)
        seeds = range(joined * 8_000, (joined + 1) * 8_000)
        state = chain.State.cat([state, chain.start_rows(first, seeds, plan)[0]])
    while not bool((state.n >= plan.N).all()):
        state, _ = chain.decode_pass(session, state, plan)
    for joined in range(3):
        rows = state.tokens[joined * 8_000: (joined + 1) * 8_000]
        for p in joint_pvalues(toy, rows, cohort, 2.0, {}):
            assert p > ALPHA, f"{method}: cohort joining at pass {joined}: chi-square p = {p:.3g}"


@pytest.mark.parametrize("method", ["sjd", "scd-mc", "scd-gumbel"])
def test_a_window_that_changes_between_passes_keeps_the_law(toy, method):
    """A serving policy may change the batch's window at any pass boundary (1: plain AR);
    with `resize` the rows still sample the exact joint."""
    plan, _ = decoding.validate(toy, ["x"], scd_core.Settings(method, 3, cfg_scale=2.0), 0)
    prompts = [PROMPTS[i % 2] for i in range(24_000)]
    session = toy.start(prompts, plan.cfg_scale)
    state, _ = chain.start_rows(session.first_logits, range(24_000), plan)
    for window in itertools.cycle((2, 1, 4, 3)):
        if bool((state.n >= plan.N).all()):
            break
        now = dataclasses.replace(plan, settings=plan.settings.replace(window=window, method=method if window > 1 else "ar"))
        state, _ = chain.decode_pass(session, chain.resize(state, now), now)
    for p in joint_pvalues(toy, state.tokens, prompts, 2.0, {}):
        assert p > ALPHA, f"{method} with a changing window: chi-square p = {p:.3g}"


# -- the test has power: known biased variants of the reference code fail it -------------
# Each variant replaces a real function of the pass (or wraps it) with the biased version of a
# reference implementation, and the suite catches it.


def _biased_pvalue(toy, method: str) -> float:
    prompts = [PROMPTS[0]] * 24_000
    run = scd_core.generate(toy, prompts, method=method, window=3, seed=4, cfg_scale=2.0)
    (p,) = joint_pvalues(toy, run.tokens, prompts, 2.0, {})
    return p


def test_fresh_sample_at_rejection_is_detected(toy, monkeypatch):
    """Cosmos reference SJD: a fresh sample of p at the first rejection (rule 2)."""
    monkeypatch.setattr(coupling, "residual_mass", lambda p, q: p)
    assert _biased_pvalue(toy, "sjd") < ALPHA


def test_old_q_for_kept_drafts_is_detected(toy, monkeypatch):
    """Lumina/Janus reference SCD-MC: a draft kept by the coupling keeps its old q (rule 5).
    A carried draft equal to its slot's old draft was kept (a rejected one is redrawn from a
    residual that has no mass at it)."""
    real = chain.advance

    def old_q_for_kept(state, logits, start, plan):
        after, verdict = real(state, logits, start, plan)
        D = state.drafts.shape[1]
        c = (after.n - state.n).unsqueeze(1)                                    # [B, 1] committed
        m = logits.shape[1] - 1 - (state.n - 1 - start).unsqueeze(1)            # [B, 1] drafts fed
        src = c + torch.arange(D)                                               # [B, D] old slot of each new slot
        old = src.clamp(max=D - 1)
        kept = (src < m) & (after.drafts == state.drafts.gather(1, old))
        q_old = state.q.gather(1, old.unsqueeze(-1).expand_as(state.q))
        return dataclasses.replace(after, q=torch.where(kept.unsqueeze(-1), q_old, after.q)), verdict

    monkeypatch.setattr(chain, "advance", old_q_for_kept)
    assert _biased_pvalue(toy, "scd-mc") < ALPHA


def test_reused_gumbel_rows_are_detected(toy, monkeypatch):
    """Lumina reference SCD-Gumbel: noise indexed by window slot, not absolute position, so
    tokens at different positions share one Gumbel vector (rule 7)."""
    real = coupling.gumbel_noise
    monkeypatch.setattr(coupling, "gumbel_noise", lambda keys, positions, vocab, tokens=None:
                        real(keys, positions - positions[:, :1], vocab, tokens))
    assert _biased_pvalue(toy, "scd-gumbel") < ALPHA


# -- draft trees: every method x tree samples the exact joint ------------------------------

SHARP = dict(vocab_size=3, grid=(2, 3), scale=3.0)         # peaked p: siblings often both pass


@pytest.mark.parametrize("method,tree", TREE_CASES)
def test_trees_sample_the_exact_joint(toy, method, tree):
    """B = 24,000 rows, two prompts, guidance on: k candidates at each of the first depth
    positions, tested by recursive rejection, sample the AR law."""
    shape, window = TREES[tree]
    prompts = [PROMPTS[i % 2] for i in range(24_000)]
    run = scd_core.generate(toy, prompts, method=method, window=window, tree=shape, seed=13, cfg_scale=2.0)
    for p in joint_pvalues(toy, run.tokens, prompts, 2.0, {}):
        assert p > ALPHA, f"{method}/{tree}: chi-square p = {p:.3g}"


@pytest.mark.parametrize("method,init,setting", TREE_SETTING_CASES)
def test_trees_with_filters_inits_and_guidance_sample_the_exact_joint(toy, method, init, setting):
    """Tree 2x2 with no chain (L = 7) and 3x1 (L = 5) under top-k 2 (fewer tokens than
    candidates: the missing ones are never tested), top-p, temperature, copy inits (one-hot q:
    no siblings) and guidance off."""
    cfg_scale, sampling = SINGLE_ROW_SETTINGS[setting]
    prompts = [PROMPTS[i % 2] for i in range(24_000)]
    for shape, window in (TREES["2x2-no-chain"], TREES["3x1"]):
        run = scd_core.generate(toy, prompts, method=method, window=window, tree=shape, seed=17,
                                cfg_scale=cfg_scale, init=init, **sampling)
        for p in joint_pvalues(toy, run.tokens, prompts, cfg_scale, sampling):
            assert p > ALPHA, f"{method}/{init}/{setting}/{shape}: chi-square p = {p:.3g}"


@pytest.mark.parametrize("method", METHODS[1:])
def test_trees_on_a_peaked_model_sample_the_exact_joint(method):
    sharp = ToyModel(**SHARP)
    prompts = [PROMPTS[0]] * 32_000
    run = scd_core.generate(sharp, prompts, method=method, window=7, tree=(2, 2), seed=19, cfg_scale=2.0)
    (p,) = joint_pvalues(sharp, run.tokens, prompts, 2.0, {})
    assert p > ALPHA, f"{method}: chi-square p = {p:.3g}"


DEEP = dict(vocab_size=3, grid=(2, 3), scale=2.0)          # tree 2x3 in L = 16: 2 tree slots carried after a rejection


@pytest.mark.slow
def test_a_deep_tree_samples_the_exact_joint():
    deep = ToyModel(**DEEP)
    assert _tree_pvalue(deep, "scd-mc", (2, 3), 16, rows=48_000) > ALPHA


def test_a_tree_that_changes_between_passes_keeps_the_law(toy):
    """A serving policy may change the window, and with it the tree, at any pass boundary."""
    plan, _ = decoding.validate(toy, ["x"], scd_core.Settings("scd-mc", 3, cfg_scale=2.0), 0)
    prompts = [PROMPTS[i % 2] for i in range(24_000)]
    session = toy.start(prompts, plan.cfg_scale)
    state, _ = chain.start_rows(session.first_logits, range(24_000), plan)
    for window, tree in itertools.cycle(((4, (2, 1)), (8, (2, 2)), (1, (1, 0)), (5, (3, 1)), (3, (1, 0)))):
        if bool((state.n >= plan.N).all()):
            break
        method = "scd-mc" if window > 1 else "ar"
        now = dataclasses.replace(plan, settings=plan.settings.replace(window=window, method=method, tree=tree))
        state, _ = passes.eager_pass(now)(session, chain.resize(state, now), now)
    for p in joint_pvalues(toy, state.tokens, prompts, 2.0, {}):
        assert p > ALPHA, f"a changing tree: chi-square p = {p:.3g}"


# -- the tree tests have power: SJD-PAC's four departures (its public code) fail them ------

def _tree_pvalue(model, method: str, tree, window: int, rows: int = 24_000, seed: int = 4) -> float:
    prompts = [PROMPTS[0]] * rows
    run = scd_core.generate(model, prompts, method=method, window=window, tree=tree, seed=seed, cfg_scale=2.0)
    (p,) = joint_pvalues(model, run.tokens, prompts, 2.0, {})
    return p


def longest_path(tests, B, device):
    """SJD-PAC's path: the root-to-leaf path with the longest accepted prefix, whatever the
    order of the siblings (ties: the first)."""
    depth = len(tests)
    if not depth:
        return torch.zeros(B, 0, dtype=torch.long, device=device)
    k = tests[0].shape[2]
    best, choice = torch.zeros(B, k ** depth, dtype=torch.long, device=device), [None] * depth
    for d in reversed(range(depth)):                       # bottom-up: the longest run below each node
        length = (1 + best.view(B, k ** d, k)) * tests[d].long()
        choice[d] = torch.where(length.max(2).values > 0, length.argmax(2), -1)
        best = length.max(2).values
    rows, index = torch.arange(B, device=device), torch.zeros(B, dtype=torch.long, device=device)
    alive, branches = torch.ones(B, dtype=torch.bool, device=device), []
    for d in range(depth):
        c = choice[d][rows, index]
        alive = alive & (c >= 0)
        branches.append(torch.where(alive, c, -1))
        index = index * k + c.clamp(min=0)
    return torch.stack(branches, 1)


@pytest.mark.slow
def test_longest_accepted_path_is_detected(monkeypatch):
    """Departure 1: the path with the longest accepted prefix instead of the first child that
    passes at each node (rule 12)."""
    monkeypatch.setattr(tree_pass, "choose_path", longest_path)
    assert _tree_pvalue(ToyModel(**SHARP), "scd-mc", (2, 2), 7, rows=32_000) < ALPHA


def test_siblings_drawn_with_replacement_are_detected(toy, monkeypatch):
    """Departure 2: siblings drawn from q with replacement, not as the recursive test assumes;
    a duplicate has q = 0 without the earlier candidates and passes at once (rule 11)."""
    def with_replacement(q, first, u):
        return torch.stack([first] + [coupling.sample(q, u[..., i]) for i in range(u.shape[-1])], -1)

    monkeypatch.setattr(coupling, "sample_siblings", with_replacement)
    assert _tree_pvalue(toy, "sjd", (2, 1), 4) < ALPHA


@pytest.mark.slow
def test_redrafts_from_a_siblings_residual_are_detected(monkeypatch):
    """Departure 3: a carried draft rejected by its slot's own test is redrawn from the
    residual the siblings' tests left, not from its own (rule 13)."""
    real = tree_pass.walk_tree

    def sibling_residual(p, q, tree, u):
        walk = real(p, q, tree, u)
        left = []
        for d in range(tree.shape.depth):                     # main-line node d: all its candidates tested
            u_level = torch.cat([u.accept[:, d: d + 1], tree.u_accept[:, d]], 1).unsqueeze(1)
            _, p_last, q_last = coupling.recursive_rejection(p[:, d: d + 1], q[:, d: d + 1],
                                                             tree.candidates[:, d: d + 1], u_level)
            left.append(coupling.residual_mass(p_last, q_last))
        return walk._replace(line_residuals=torch.cat(left, 1))

    monkeypatch.setattr(tree_pass, "walk_tree", sibling_residual)
    assert _tree_pvalue(ToyModel(**DEEP), "scd-mc", (2, 3), 16, rows=48_000) < ALPHA


def test_an_unverified_bonus_is_detected(toy, monkeypatch):
    """Departure 4: after a fully accepted path the next token is a uniform guess, not a draw
    from p after the last accepted node (rule 14)."""
    real = tree_pass.walk_tree
    monkeypatch.setattr(tree_pass, "walk_tree", lambda p, q, tree, u: real(p, q, tree, u)._replace(
        p_leaf=torch.full_like(p[:, :1], 1.0 / p.shape[-1])))
    assert _tree_pvalue(toy, "sjd", (2, 1), 4) < ALPHA
