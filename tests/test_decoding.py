"""Engine behaviour: greedy equivalence, determinism, invariants, batching, bad input."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import scd_core
from scd_core import trace
from scd_core.sampling import processed_probs, validate_sampling

METHODS = ["ar", "sjd", "scd-mc", "scd-gumbel"]
SPECULATIVE = METHODS[1:]


@pytest.fixture(scope="module")
def grid():
    return scd_core.load_model("toy-grid", grid=(8, 8), vocab_size=64, hidden=64)


@pytest.mark.parametrize("init", ["random", "repeat-above"])
@pytest.mark.parametrize("cfg_scale", [1.0, 3.0])
def test_greedy_every_method_returns_ar_tokens(grid, init, cfg_scale):
    prompts = ["a cat", "a dog", "a red apple"]
    ar = scd_core.generate(grid, prompts, method="ar", top_k=1, cfg_scale=cfg_scale, seed=0)
    for method in SPECULATIVE:
        for window in (2, 5, 16):
            run = scd_core.generate(grid, prompts, method=method, window=window, top_k=1,
                                    cfg_scale=cfg_scale, init=init, seed=window)
            assert torch.equal(run.tokens, ar.tokens), (method, window)
    zero_temp = scd_core.generate(grid, prompts, method="scd-gumbel", temperature=0, cfg_scale=cfg_scale)
    assert torch.equal(zero_temp.tokens, ar.tokens)


@pytest.mark.parametrize("method", METHODS)
def test_same_seed_same_tokens_other_seed_other_tokens(grid, method):
    a = scd_core.generate(grid, ["a cat", "a dog"], method=method, window=8, seed=3, top_k=20)
    b = scd_core.generate(grid, ["a cat", "a dog"], method=method, window=8, seed=3, top_k=20)
    c = scd_core.generate(grid, ["a cat", "a dog"], method=method, window=8, seed=4, top_k=20)
    assert torch.equal(a.tokens, b.tokens) and a.nfe == b.nfe
    assert not torch.equal(a.tokens, c.tokens)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("init", ["random", "repeat-above"])
def test_trace_invariants(grid, method, init):
    L = 6
    run = scd_core.generate(grid, ["a", "b", "c", "d"], method=method, window=L, seed=1, init=init,
                            top_k=30, cfg_scale=2.0)
    N = grid.N
    assert run.tokens.shape == (4, N) and (run.tokens >= 0).all() and (run.tokens < grid.vocab_size).all()
    assert run.nfe == len(run.iterations)                    # the prefill included
    assert [it.nfe for it in run.iterations] == list(range(1, run.nfe + 1))
    window = 1 if method == "ar" else L
    for it in run.iterations[1:]:
        active = it.n_before < N
        assert ((it.committed >= 1) | ~active).all() and (it.committed <= window).all()
        assert (it.committed[~active] == 0).all()
        assert (it.num_accepted <= it.num_verified).all()
        assert (it.accepted & ~it.verified).sum() == 0
        ok = it.accept_prob[~it.accept_prob.isnan()]
        assert ((ok >= 0) & (ok <= 1)).all()
        assert_derived_fields_match_positions(it, N)
    assert torch.equal(run.iterations[-1].canvas, run.tokens)
    assert 0 <= run.acceptance_rate <= 1
    ar = scd_core.generate(grid, ["a", "b", "c", "d"], method="ar", seed=1, top_k=30, cfg_scale=2.0)
    assert ar.nfe == N and ar.step_compression == 1                    # AR: one pass per token
    assert run.step_compression == trace.step_compression(N, len(run.iterations))   # AR's N passes over the records
    assert run.wall_time >= run.step_time > 0


def assert_derived_fields_match_positions(it, N):
    """The record's lazily derived masks, recomputed row by row from absolute positions."""
    D = it.drafts_after.shape[1]
    for b in range(it.n_before.shape[0]):
        nb, na, start = int(it.n_before[b]), int(it.n_after[b]), int(it.start[b])
        fed = {start + j: int(t) for j, t in enumerate(it.window_tokens[b])}          # position -> token fed
        drafts_fed = [pos for pos in fed if pos >= nb]
        k, rejected = int(it.num_accepted[b]), bool(it.resampled[b])
        assert it.accepted[b].tolist() == [i < k for i in range(D)]
        assert it.verified[b].tolist() == [i < k + rejected for i in range(D)]
        assert bool(it.bonus[b]) == (na - nb == k + 1 and not rejected)
        carried = [na + i in fed and na + i >= nb and na + i < N and it.drafts_after[b, i] >= 0
                   for i in range(D)]
        assert it.carried[b].tolist() == carried
        same = sum(c and int(it.drafts_after[b, i]) == fed[na + i] for i, c in enumerate(carried))
        assert int(it.unchanged[b]) == same and len(drafts_fed) == int(it.drafts_fed[b])


def test_rows_advance_by_their_own_accepted_length(grid):
    run = scd_core.generate(grid, [f"prompt {i}" for i in range(6)], method="scd-mc", window=12, seed=0, top_k=50)
    differs = [it for it in run.iterations[1:] if len(set(it.committed[it.n_before < grid.N].tolist())) > 1]
    assert differs, "rows never committed different counts in one pass"
    assert (run.row_nfe < run.nfe).any()                    # some row finished before the slowest


def test_batch_row_alone_equals_single_row_under_greedy(grid):
    batch = scd_core.generate(grid, ["x", "a longer prompt"], method="scd-mc", window=8, top_k=1)
    single = scd_core.generate(grid, ["a longer prompt"], method="scd-mc", window=8, top_k=1)
    assert torch.equal(batch.tokens[1], single.tokens[0])


def test_coupling_raises_draft_stability_and_acceptance(grid):
    kw = dict(window=16, top_k=40, cfg_scale=2.0)
    prompts = [f"p{i}" for i in range(8)]
    sjd = scd_core.generate(grid, prompts, method="sjd", seed=0, **kw)
    for method in ("scd-mc", "scd-gumbel"):
        scd = scd_core.generate(grid, prompts, method=method, seed=0, **kw)
        assert scd.draft_stability > sjd.draft_stability
        assert scd.acceptance_rate > sjd.acceptance_rate


def test_stream_yields_the_same_records_generate_collects(grid):
    records = list(scd_core.stream(grid, ["a cat"], method="sjd", window=4, seed=9))
    run = scd_core.generate(grid, ["a cat"], method="sjd", window=4, seed=9)
    assert len(records) == run.nfe and records[0].index == 0
    assert torch.equal(records[-1].canvas, run.tokens)
    assert len(run.images) == 1 and run.images[0].size == (32, 32)


@pytest.mark.parametrize("method", METHODS)
def test_each_record_keeps_its_own_pass_state(grid, method):
    """Read during the run or after it, a record's tokens_after holds the tokens committed up
    to that pass and -1 after them, and committed_tokens those of that pass."""
    records, during = [], []
    for it in scd_core.stream(grid, ["a cat", "a dog"], method=method, window=6, seed=2, top_k=20):
        records.append(it)
        during.append((it.tokens_after.clone(), it.committed_tokens.clone()))
    final = records[-1].tokens_after
    N = final.shape[1]
    for it, (seen, committed) in zip(records, during):
        fresh = dataclasses.replace(it)                          # its derived fields not yet cached
        assert torch.equal(fresh.tokens_after, seen) and torch.equal(fresh.committed_tokens, committed)
        assert committed.shape == (2, it.drafts_after.shape[1] + 1)
        for b in range(2):
            n0, n = int(it.n_before[b]), int(it.n_after[b])
            assert torch.equal(seen[b, :n], final[b, :n]) and (seen[b, n:] == -1).all() and n <= N
            assert torch.equal(committed[b, :n - n0], final[b, n0:n]) and (committed[b, n - n0:] == -1).all()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("init", ["random", "repeat-above"])
def test_a_rows_tokens_do_not_depend_on_its_batch(grid, method, init):
    """Per-row random streams: each row of a mixed batch, at any row index, equals the same
    prompt and seed decoded alone."""
    prompts, seeds = ["a cat", "a dog", "a red apple", "a cat"], [5, 9, 2, 7]
    kw = dict(method=method, window=6, init=init, top_k=30, cfg_scale=2.0)
    batch = scd_core.generate(grid, prompts, seed=seeds, **kw)
    for b in range(len(prompts)):
        alone = scd_core.generate(grid, [prompts[b]], seed=seeds[b], **kw)
        assert torch.equal(alone.tokens[0], batch.tokens[b]), b
        assert int(alone.nfe) == int(batch.row_nfe[b])
    reordered = scd_core.generate(grid, prompts[::-1], seed=seeds[::-1], **kw)
    assert torch.equal(reordered.tokens.flip(0), batch.tokens)
    assert not torch.equal(batch.tokens[0], batch.tokens[3])     # same prompt, other seed


def test_an_int_seed_gives_row_b_the_seed_plus_b(grid):
    batch = scd_core.generate(grid, ["a cat"] * 3, method="scd-mc", window=6, seed=10, top_k=30)
    listed = scd_core.generate(grid, ["a cat"] * 3, method="scd-mc", window=6, seed=[10, 11, 12], top_k=30)
    assert torch.equal(batch.tokens, listed.tokens)


@pytest.mark.parametrize("seed", [[1], [1, 2, 3], [1, -2], [1, "2"], [1, True], 2**63 - 1])
def test_bad_seed_lists_name_the_seed(grid, seed):
    with pytest.raises(ValueError, match="seed"):
        scd_core.generate(grid, ["a", "b"], method="sjd", window=4, seed=seed)


def test_metrics_are_their_definitions_over_the_rows_passes(grid):
    """Each metric, recomputed here in plain Python from what the engine recorded per row and
    pass (drafts accepted, whether one was rejected, tokens committed): acceptance rate =
    accepted / verified drafts, mean accepted length = accepted drafts per pass of an
    unfinished row, the committed histogram, and row 2's own count."""
    run = scd_core.generate(grid, ["a", "b", "c"], method="sjd", window=8, seed=0, top_k=30)
    its = run.iterations
    accepted = verified = passes = row_accepted = 0
    histogram = [0] * 9
    for it in its[1:]:
        for b in range(3):
            if int(it.n_before[b]) >= grid.N:
                continue                                                # finished: not a pass of this row
            a, rejected = int(it.num_accepted[b]), int(it.resampled[b])
            accepted, verified, passes = accepted + a, verified + a + rejected, passes + 1
            histogram[int(it.n_after[b]) - int(it.n_before[b])] += 1
            row_accepted += a if b == 2 else 0
    assert 0 < run.acceptance_rate < 1 and run.acceptance_rate == pytest.approx(accepted / verified)
    assert run.mean_accepted_length == pytest.approx(accepted / passes)
    assert trace.committed_histogram(its) == histogram
    assert sum(j * h for j, h in enumerate(histogram)) == 3 * grid.N - 3    # all but the prefill's token
    assert trace.accepted_drafts(its, row=2) == row_accepted
    carried = same = 0                                  # drafts still drafts after a pass, and those kept as fed
    for it in its[1:]:
        for b in range(3):
            nb, na = int(it.n_before[b]), int(it.n_after[b])
            fed = {int(it.start[b]) + j: int(t) for j, t in enumerate(it.window_tokens[b])}   # position -> token fed
            kept = [int(t) == fed[na + i] for i, t in enumerate(it.drafts_after[b].tolist())
                    if nb <= na + i < grid.N and na + i in fed and t >= 0]
            carried, same = carried + len(kept), same + sum(kept)
            assert int(it.changed[b]) == len(kept) - sum(kept)
        assert torch.equal(it.row(1).num_accepted, it.num_accepted[1:2])
    assert carried > 0 and run.draft_stability == pytest.approx(same / carried)


def test_processed_probs_filters():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    top2 = processed_probs(logits, validate_sampling(1.0, 2, 1.0))
    assert (top2[0, 2:] == 0).all() and top2.sum().item() == pytest.approx(1.0)
    nucleus = processed_probs(logits, validate_sampling(1.0, 0, 0.5))
    assert nucleus[0].tolist() == [1.0, 0.0, 0.0, 0.0]       # the top token alone has mass >= 0.5
    nucleus = processed_probs(logits, validate_sampling(1.0, 0, 0.8))
    assert (nucleus[0, :2] > 0).all() and (nucleus[0, 2:] == 0).all()
    greedy = processed_probs(logits, validate_sampling(0.0, 0, 1.0))
    assert greedy[0].tolist() == [1.0, 0.0, 0.0, 0.0]
    cold = processed_probs(logits, validate_sampling(0.5, 0, 1.0))
    assert cold[0, 0] > processed_probs(logits, validate_sampling(1.0, 0, 1.0))[0, 0]


@pytest.mark.parametrize("kwargs,name", [
    (dict(method="beam"), "method"), (dict(window=1), "window"), (dict(window=0), "window"),
    (dict(window=5000), "window"), (dict(window=2.5), "window"), (dict(init="zeros"), "init"),
    (dict(init="repeat-frame"), "init"), (dict(seed=-1), "seed"), (dict(seed="1"), "seed"),
    (dict(temperature=-0.1), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(top_k=-1), "top_k"), (dict(top_k=1.5), "top_k"), (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"), (dict(cfg_scale=-1), "cfg_scale"),
])
def test_bad_arguments_name_themselves(grid, kwargs, name):
    args = dict(method="sjd", window=4) | kwargs
    with pytest.raises(ValueError, match=name):
        scd_core.generate(grid, ["a cat"], **args)


@pytest.mark.parametrize("prompts", [[], "a cat", [1, 2], None])
def test_bad_prompts(grid, prompts):
    with pytest.raises(ValueError, match="prompts"):
        scd_core.generate(grid, prompts)


def test_unknown_model_name():
    with pytest.raises(ValueError, match="unknown model"):
        scd_core.load_model("no-such-model")


def test_run_tokens_are_an_ordinary_tensor_and_autograd_is_left_as_it_was(grid):
    run = scd_core.generate(grid, ["a"], method="scd-mc", window=8, seed=0)
    assert not run.tokens.is_inference() and torch.is_grad_enabled()
    run.tokens[0, 0] = 7                                   # a user may edit the result in place
    assert int(run.tokens[0, 0]) == 7
    records = scd_core.stream(grid, ["a"], method="sjd", window=8, seed=0)
    next(records)
    assert not torch.is_inference_mode_enabled()           # not leaked into the consumer between records


def test_generate_refuses_a_prompt_over_the_limit_and_says_which_words_it_ignores():
    import warnings

    from scd_core.prompts import MAX_PROMPT_CHARS, UnknownWordsWarning

    tiny = scd_core.load_model("tiny")
    with pytest.raises(ValueError, match="prompts"):
        scd_core.generate(tiny, ["red apple " * (MAX_PROMPT_CHARS // 10 + 1)], window=4)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        scd_core.generate(tiny, ["red apple zxqv"], window=4)
    said = [str(w.message) for w in seen if issubclass(w.category, UnknownWordsWarning)]
    assert len(said) == 1 and "zxqv" in said[0] and "apple" not in said[0]


@pytest.mark.parametrize("top_k", [0, 30])
def test_ar_is_the_general_pass_with_no_drafts(grid, top_k):
    """`advance_ar`, AR's short form, gives the tokens and records of the general pass run with
    a window of one token (no draft slots), pass by pass."""
    from scd_core import chain
    plan, seeds = scd_core.validate(grid, ["a", "b", "c"], scd_core.Settings("ar", top_k=top_k, cfg_scale=2.0), 4)
    session = grid.start(["a", "b", "c"], plan.cfg_scale)
    state, _ = chain.start_rows(session.first_logits, seeds, plan)
    for _ in range(grid.N - 1):
        start, fed = chain.window(state, plan)
        logits = session.step(fed, start)
        short, short_verdict = chain.advance_ar(state, logits, start, plan)
        general, general_verdict = chain.advance_drafts(state, logits, start, plan)
        for name in chain.State.__dataclass_fields__:
            assert torch.equal(getattr(short, name), getattr(general, name)), name
        for name in ("start", "num_accepted", "resampled", "accept_prob", "p_draft", "q_draft"):
            assert torch.equal(getattr(short_verdict, name), getattr(general_verdict, name)), name
        state = short
    assert (state.n == grid.N).all()


@pytest.mark.parametrize("method", SPECULATIVE)
@pytest.mark.parametrize("tree", [(1, 0), (2, 2)])
def test_records_hold_p_and_q_of_each_draft(grid, method, tree):
    """p(x) and q(x) of each fed draft sit beside min(1, p/q) in the record: NaN where it is,
    recombined to it exactly elsewhere, and at the first speculative pass (every draft drawn by
    the random init) q(x) is the uniform 1/V."""
    run = scd_core.generate(grid, ["a", "b", "c"], method=method, window=8, seed=3, top_k=30,
                            cfg_scale=2.0, tree=tree)
    V = grid.vocab_size
    for it in run.iterations[1:]:
        assert it.p_draft.shape == it.q_draft.shape == it.accept_prob.shape
        fed = ~it.accept_prob.isnan()
        assert torch.equal(fed, ~it.p_draft.isnan()) and torch.equal(fed, ~it.q_draft.isnan())
        assert torch.equal((it.p_draft[fed] / it.q_draft[fed]).clamp(max=1.0), it.accept_prob[fed])
        assert ((it.p_draft[fed] >= 0) & (it.p_draft[fed] <= 1) & (it.q_draft[fed] > 0)).all()
    first = run.iterations[1]
    fed = ~first.q_draft.isnan()
    assert fed.any() and torch.equal(first.q_draft[fed], torch.full_like(first.q_draft[fed], 1.0 / V))


def test_scd_mc_records_q_of_a_redraft_as_p_of_the_pass_that_drew_it(grid):
    """SCD-MC carries each redraft with the law of the pass that drew it: a draft redrawn after
    a rejection (and one the coupling kept) shows, at the next pass, q(x) = that pass's p(x),
    here recomputed from that pass's logits."""
    from scd_core import chain
    plan, seeds = scd_core.validate(grid, ["a", "b", "c"], scd_core.Settings("scd-mc", window=6, top_k=30, cfg_scale=2.0), 5)
    session = grid.start(["a", "b", "c"], plan.cfg_scale)
    state, _ = chain.start_rows(session.first_logits, seeds, plan)
    previous = None                                         # (state, start, fed, p [B, W, V]) of the last pass
    redrawn = 0
    while bool((state.n < grid.N).any()):
        start, fed = chain.window(state, plan)
        logits = session.step(fed, start)
        after, verdict = chain.advance(state, logits, start, plan)
        if previous is not None:
            before, start_p, fed_p, p_p = previous
            for b in range(state.n.shape[0]):
                for i in range(plan.D):
                    pos = int(state.n[b]) + i
                    if torch.isnan(verdict.q_draft[b, i]) or pos >= grid.N or pos < int(before.n[b]) + 1:
                        continue
                    x, row = int(state.drafts[b, i]), pos - int(start_p[b]) - 1     # row: the logits that predicted pos
                    if row >= p_p.shape[1]:                         # past the last window: the random init's
                        assert verdict.q_draft[b, i] == 1.0 / grid.vocab_size, (b, i)
                        continue
                    assert verdict.q_draft[b, i] == p_p[b, row, x], (b, i)
                    j = pos - int(start_p[b])                       # its index in the last window
                    redrawn += int(j < fed_p.shape[1] and int(fed_p[b, j]) != x and bool(previous_rejected[b]))
        previous, previous_rejected = (state, start, fed, processed_probs(logits, plan.sampling)), verdict.resampled
        state = after
    assert redrawn > 0                                      # the case at hand occurred
