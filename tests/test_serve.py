"""Serving: rows join and leave a running batch, and a row's tokens never depend on it."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

import scd_core
from scd_core.chain import Plan
from scd_core.serve import Policy, Scheduler, Server

METHODS = ["ar", "sjd", "scd-mc", "scd-gumbel"]
PROMPTS = ["a cat", "a dog", "a red apple", "a cat", "a boat", "a tree"]


@pytest.fixture(scope="module")
def grid():
    return scd_core.load_model("toy-grid", grid=(8, 8), vocab_size=64, hidden=64)


def run_until_idle(scheduler: Scheduler, joins: dict[int, list[tuple[str, int]]] | None = None):
    """Step the scheduler; `joins` maps a step number to requests submitted before it."""
    requests, step = [], 0
    joins = joins or {}
    while True:
        for prompt, seed in joins.get(step, []):
            requests.append(scheduler.submit(prompt, seed))
        if not scheduler.busy and step > max(joins, default=0):
            return requests
        scheduler.step()
        step += 1


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("init", ["random", "repeat-above"])
def test_rows_that_join_a_running_batch_equal_the_same_prompt_alone(grid, method, init):
    kw = dict(method=method, window=1 if method == "ar" else 6, init=init, top_k=30, cfg_scale=2.0)
    scheduler = Scheduler(grid, **kw)
    joins = {0: [(PROMPTS[0], 5), (PROMPTS[1], 9)], 3: [(PROMPTS[2], 2)], 4: [(PROMPTS[3], 7), (PROMPTS[4], 1)],
             9: [(PROMPTS[5], 3)]}
    requests = run_until_idle(scheduler, joins)
    for request in requests:
        run = request.result()
        alone = scd_core.generate(grid, [request.prompt], seed=request.seed, **kw)
        assert torch.equal(run.tokens, alone.tokens), (request.prompt, request.seed)
        assert run.nfe == alone.nfe == len(run.iterations)
        assert [it.nfe for it in run.iterations] == list(range(1, run.nfe + 1))
    assert scheduler.passes < sum(r.result().nfe for r in requests)            # passes were shared


def test_a_row_leaves_as_soon_as_its_grid_is_complete(grid):
    kw = dict(method="scd-mc", window=6, top_k=30)
    nfe = {seed: scd_core.generate(grid, ["a cat"], seed=seed, **kw).nfe for seed in range(6)}
    fast_seed, slow_seed = min(nfe, key=nfe.get), max(nfe, key=nfe.get)
    assert nfe[fast_seed] < nfe[slow_seed]
    scheduler = Scheduler(grid, **kw)
    fast, slow = scheduler.submit("a cat", fast_seed), scheduler.submit("a cat", slow_seed)
    while not fast.finished.is_set():
        scheduler.step()
    assert fast.records[-1].n_after[0] == grid.N and len(fast.records) == nfe[fast_seed]
    assert not slow.finished.is_set()
    assert scheduler.batch_size == 1 and scheduler.state.n.shape == (1,)        # the row left the batch
    run_until_idle(scheduler)
    assert slow.result().nfe == nfe[slow_seed]


def test_cancel_drops_only_that_row(grid):
    scheduler = Scheduler(grid, method="sjd", window=6, top_k=30)
    kept, cancelled = scheduler.submit("a cat", 3), scheduler.submit("a dog", 4)
    scheduler.step()
    scheduler.step()
    cancelled.cancel()
    run_until_idle(scheduler)
    partial = cancelled.result()
    assert partial.iterations[-1].n_after[0] < grid.N and len(partial.iterations) == 3   # prefill, 2 passes
    alone = scd_core.generate(grid, ["a cat"], method="sjd", window=6, seed=3, top_k=30)
    assert torch.equal(kept.result().tokens, alone.tokens)


class FixedBatchModel:
    """The toy grid model behind a session that cannot add or drop rows."""

    def __init__(self, inner):
        self.inner, self.vocab_size, self.grid = inner, inner.vocab_size, inner.grid

    def start(self, prompts, cfg_scale):
        session = self.inner.start(prompts, cfg_scale)

        class Plain:
            first_logits = session.first_logits
            step = staticmethod(session.step)
        return Plain()

    def decode(self, tokens):
        return self.inner.decode(tokens)


def test_a_model_without_resizable_sessions_serves_one_batch_at_a_time(grid):
    model = FixedBatchModel(grid)
    scheduler = Scheduler(model, method="scd-mc", window=6, top_k=30)
    requests = run_until_idle(scheduler, {0: [("a cat", 0), ("a dog", 1)], 2: [("a boat", 2)]})
    for request in requests:
        alone = scd_core.generate(grid, [request.prompt], method="scd-mc", window=6, seed=request.seed, top_k=30)
        assert torch.equal(request.result().tokens, alone.tokens)
    late = requests[2].result()
    assert late.nfe == scd_core.generate(grid, ["a boat"], method="scd-mc", window=6, seed=2, top_k=30).nfe


def test_bad_requests_are_refused_at_submit_and_harm_no_one(grid):
    scheduler = Scheduler(grid, method="scd-mc", window=6)
    good = scheduler.submit("a cat", 0)
    with pytest.raises(ValueError, match="seed"):
        scheduler.submit("a dog", -1)
    with pytest.raises(ValueError, match="prompts"):
        scheduler.submit(3, 0)
    with pytest.raises(ValueError, match="window"):
        Scheduler(grid, method="sjd", window=1)
    run_until_idle(scheduler)
    assert good.result().tokens.shape == (1, grid.N)


def test_server_shares_passes_between_threads_and_keeps_groups_apart(grid):
    server = Server(grid)
    results, errors = {}, []

    def visitor(i: int) -> None:
        try:
            method = "scd-mc" if i % 3 else "sjd"
            request = server.submit(PROMPTS[i % len(PROMPTS)], seed=i, method=method, window=6, top_k=30)
            results[i] = (method, request.result(timeout=60))
        except Exception as exc:                                           # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=visitor, args=(i,)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    server.close()
    assert not errors and len(results) == 9
    for i, (method, run) in results.items():
        alone = scd_core.generate(grid, [PROMPTS[i % len(PROMPTS)]], method=method, window=6, seed=i, top_k=30)
        assert torch.equal(run.tokens, alone.tokens)
    assert len(server.schedulers) <= 2


def test_policy_picks_the_window_with_the_most_tokens_per_second():
    # one pass costs 1 ms + 0.1 ms per token fed: speculation wins alone, AR in a big batch
    seconds = {(B, L): 1e-3 + 1e-4 * B * L for B in (1, 8, 32) for L in (1, 4, 16)}
    policy = Policy(seconds, tokens_per_pass={1: 1.0, 4: 2.0, 16: 5.0})
    assert policy.window(1) == 16                    # 5 / 2.6 ms beats 2 / 1.4 ms and 1 / 1.1 ms
    assert policy.window(8) == policy.window(40) == 1                        # 1 / 1.8 ms beats 2 / 4.2 ms


def test_a_policy_that_changes_the_window_keeps_every_row_complete_and_exact(grid):
    """The window follows the batch size: every row is still a full grid, and the greedy
    tokens (the same for any window) equal AR's."""
    class Alternating(Policy):
        def __init__(self):
            self.calls = 0

        def window(self, batch):
            self.calls += 1
            return (1, 6, 3)[self.calls % 3]

    scheduler = Scheduler(grid, method="scd-mc", window=6, top_k=1, policy=Alternating())
    requests = run_until_idle(scheduler, {0: [("a cat", 0), ("a dog", 1)], 2: [("a boat", 2)]})
    for request in requests:
        ar = scd_core.generate(grid, [request.prompt], method="ar", top_k=1)
        assert torch.equal(request.result().tokens, ar.tokens)


def test_policy_measure_times_every_batch_and_window(grid):
    """Measured: a positive time per (batch, window), AR's one token per pass, more with a
    window; and each batch size runs the measured window with the most tokens per second."""
    plan, _ = scd_core.validate(grid, [""], scd_core.Settings("scd-mc", 4, top_k=30))
    policy = Policy.measure(grid, plan, batches=(1, 4), windows=(1, 4), samples=2, repeats=1)
    assert all(s > 0 for s in policy.seconds.values()) and len(policy.seconds) == 4
    assert policy.tokens_per_pass[1] == pytest.approx(1.0) and policy.tokens_per_pass[4] > 1.0
    for batch, measured in ((1, 1), (3, 1), (4, 4), (9, 4)):                # a batch runs as the largest measured below it
        rate = {L: policy.tokens_per_pass[L] / policy.seconds[(measured, L)] for L in (1, 4)}
        assert policy.window(batch) == max(rate, key=rate.get)


class RefusingModel(FixedBatchModel):
    """The toy grid model, whose sessions can resize, refusing the prompt "refused"."""

    def start(self, prompts, cfg_scale):
        if "refused" in prompts:
            raise ValueError("prompts: this model refuses 'refused'")
        session = self.inner.start(prompts, cfg_scale)
        outer = self

        class Refusing:
            first_logits = session.first_logits
            step = staticmethod(session.step)
            keep_rows = staticmethod(session.keep_rows)

            @staticmethod
            def add_rows(new):
                outer.start(new, cfg_scale)                    # refuses before anything changes
                return session.add_rows(new)
        return Refusing()


def test_a_request_the_model_refuses_fails_alone(grid):
    model = RefusingModel(grid)
    scheduler = Scheduler(model, method="scd-mc", window=6, top_k=30)
    requests = run_until_idle(scheduler, {0: [("a cat", 0)], 2: [("refused", 1)], 3: [("a dog", 2)]})
    good, refused, late = requests
    with pytest.raises(ValueError, match="refuses"):
        refused.result()
    for request in (good, late):
        alone = scd_core.generate(grid, [request.prompt], method="scd-mc", window=6, seed=request.seed, top_k=30)
        assert torch.equal(request.result().tokens, alone.tokens)
    first = run_until_idle(Scheduler(model, method="sjd", window=4), {0: [("refused", 0)]})[0]
    with pytest.raises(ValueError, match="refuses"):
        first.result()


def test_each_request_decodes_with_its_own_rows_decoder(grid):
    class PerRow(FixedBatchModel):
        def start(self, prompts, cfg_scale):
            session = self.inner.start(prompts, cfg_scale)
            session.row_decoder = lambda row, prompts=list(prompts): (lambda tokens: [f"row of {prompts[row]}"])
            return session

    scheduler = Scheduler(PerRow(grid), method="sjd", window=4)
    cat, dog = run_until_idle(scheduler, {0: [("a cat", 0), ("a dog", 1)]})
    assert cat.result().images == ["row of a cat"] and dog.result().images == ["row of a dog"]


def test_the_server_waits_while_another_user_holds_the_device(grid):
    lock = threading.Lock()
    server = Server(grid, device_lock=lock)
    with lock:
        request = server.submit("a cat", seed=0, method="sjd", window=4)
        assert not request.finished.wait(0.3) and not request.records      # no pass while held
    assert request.result(timeout=30).tokens.shape == (1, grid.N)
    server.close()


def test_each_record_says_how_many_rows_its_pass_decoded(grid):
    scheduler = Scheduler(grid, method="sjd", window=6, top_k=30)
    cat, dog, boat = run_until_idle(scheduler, {0: [("a cat", 0), ("a dog", 1)], 2: [("a boat", 2)]})
    assert cat.batch_sizes[:3] == dog.batch_sizes[:3] == [2, 2, 2]      # prefill, 2 passes together
    assert boat.batch_sizes[:2] == [1, 3]           # its own prefill, then the running batch's pass
    for request in (cat, dog, boat):
        assert len(request.batch_sizes) == len(request.records)
    alone = run_until_idle(Scheduler(grid, method="sjd", window=6, top_k=30), {0: [("a cat", 0)]})[0]
    assert set(alone.batch_sizes) == {1}


@pytest.mark.parametrize("resizable", [True, False])
def test_a_refused_request_that_joins_with_others_fails_alone(grid, resizable):
    model = RefusingModel(grid)
    if not resizable:
        model.start = lambda prompts, cfg_scale, start=model.start: FixedBatchModel.start(
            SimpleNamespace(inner=SimpleNamespace(start=start)), prompts, cfg_scale)
    scheduler = Scheduler(model, method="scd-mc", window=6, top_k=30)
    requests = run_until_idle(scheduler, {0: [("a cat", 0), ("refused", 1), ("a dog", 2)],
                                          2: [("a boat", 3), ("refused", 4)]})
    for request in requests:
        if request.prompt == "refused":
            with pytest.raises(ValueError, match="refuses"):
                request.result()
            continue
        alone = scd_core.generate(grid, [request.prompt], method="scd-mc", window=6, seed=request.seed, top_k=30)
        assert torch.equal(request.result().tokens, alone.tokens), request.prompt
