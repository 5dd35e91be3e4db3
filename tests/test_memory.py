"""A pass's memory is bounded by design (`scd_core.memory`): known from rows x window x
vocabulary before it runs, capped per model; a run over the cap is refused with what fits, a
server queues the rows over it, and the exactness of the rows is untouched."""
from __future__ import annotations

import pytest
import torch

import scd_core
from scd_core import memory
from scd_core.models import REGISTRY
from scd_core.serve import Scheduler
from bench import pass_memory


@pytest.fixture(scope="module")
def grid():
    return scd_core.load_model("toy-grid", grid=(6, 6), vocab_size=64, hidden=32)


class Capped:
    """A model whose passes may hold `max_pass_bytes` (the model's own cap)."""

    def __init__(self, model, max_pass_bytes: int) -> None:
        self.model, self.max_pass_bytes = model, max_pass_bytes
        self.vocab_size, self.grid = model.vocab_size, model.grid

    def start(self, prompts, cfg_scale):
        return self.model.start(prompts, cfg_scale)

    def decode(self, tokens):
        return self.model.decode(tokens)


def test_a_run_over_the_cap_is_refused_with_what_fits(grid, monkeypatch):
    capped = Capped(grid, memory.pass_bytes(3, 8, grid.vocab_size))        # three rows of window 8
    assert memory.rows_per_pass(capped, "scd-mc", 8) == 3
    assert memory.rows_per_pass(capped, "ar", 8) == 3 * 8                   # AR feeds one token a row
    scd_core.generate(capped, ["a"] * 3, method="scd-mc", window=8)
    with pytest.raises(ValueError, match=r"prompts: 4 rows x window 8 .* decode at most 3 prompts at a time"):
        scd_core.generate(capped, ["a"] * 4, method="scd-mc", window=8)
    scd_core.generate(capped, ["a"] * 4, method="scd-mc", window=4)          # a smaller window fits
    monkeypatch.setenv(memory.ENV, str(memory.pass_bytes(1, 8, grid.vocab_size)))
    with pytest.raises(ValueError, match="decode at most 1 prompts"):
        scd_core.generate(capped, ["a"] * 2, method="scd-mc", window=8)
    monkeypatch.setenv(memory.ENV, "lots")
    with pytest.raises(ValueError, match=memory.ENV):
        scd_core.generate(grid, ["a"], method="scd-mc", window=8)


def test_a_server_queues_the_rows_over_the_cap_and_each_row_keeps_its_tokens(grid):
    """Nine requests at once on a model whose pass fits three rows: no pass holds more, all
    nine finish, each with the tokens it has alone (the rows' exactness: tests/test_exactness.py
    checks rows joining a running batch)."""
    capped = Capped(grid, memory.pass_bytes(3, 6, grid.vocab_size))
    scheduler = Scheduler(capped, method="scd-mc", window=6, top_k=20, max_batch=32)
    assert scheduler.max_batch == 3
    requests = [scheduler.submit(f"prompt {i}", seed=i) for i in range(9)]
    while scheduler.busy:
        scheduler.step()
        assert scheduler.batch_size <= 3
    assert max(max(r.batch_sizes) for r in requests) == 3
    for r in requests:
        alone = scd_core.generate(grid, [r.prompt], seed=r.seed, method="scd-mc", window=6, top_k=20)
        assert torch.equal(r.result().tokens, alone.tokens)


def test_the_lossless_comparison_decodes_within_the_cap(grid, monkeypatch):
    from scd_core import lossless
    capped = Capped(grid, memory.pass_bytes(5, 4, grid.vocab_size))
    rows = []
    real = scd_core.stream
    monkeypatch.setattr(scd_core, "stream", lambda model, prompts, **kw: rows.append(len(prompts)) or real(model, prompts, **kw))
    tokens = lossless.sample_tokens(capped, "a", scd_core.Settings("sjd", 4), samples=12, seed=0, batch=64)
    assert rows == [5, 5, 2] and tokens.shape == (12, grid.N)


@pytest.mark.parametrize("name", ["texture", "tiny", "tiny-video"])
def test_the_registry_knows_each_shipped_models_vocabulary(name):
    assert REGISTRY[name].vocab == scd_core.load_model(name).vocab_size


@pytest.mark.drill
@pytest.mark.parametrize("method", ["sjd", "scd-mc", "scd-gumbel"])
def test_a_pass_holds_no_more_than_the_formula_says(method):
    """Measured in a process of its own (`python -m bench pass-memory`: the growth of its peak
    resident set over a warm-up run): the pass's peak, its state and the logits included, stays under `pass_bytes`, and
    is more than two thirds of it (the formula is the pass's size, not a loose bound)."""
    rows, window, vocab = 4, 32, 64000
    peak = pass_memory.measure(method, rows, window, vocab)
    formula = memory.pass_bytes(rows, window, vocab)
    assert 2 / 3 * formula < peak <= formula, f"{method}: {peak / 2**20:.0f} MiB, formula {formula / 2**20:.0f} MiB"


@pytest.mark.drill
@pytest.mark.parametrize("method", ["sjd", "scd-mc", "scd-gumbel"])
def test_a_top_p_pass_at_cosmos_page_settings_holds_no_more_than_the_formula_says(method):
    """Top-p sorts p over [B, W, V] (a float32 copy and int64 indices): a pass at Cosmos's page
    settings (top-p 0.8, window 128, V 64,000) stays under `pass_bytes` at that top-p, which is
    more than without it, and above two thirds of it."""
    rows, window, vocab, top_p = 2, 128, 64000, 0.8
    peak = pass_memory.measure(method, rows, window, vocab, top_p)
    formula = memory.pass_bytes(rows, window, vocab, top_p)
    assert formula > memory.pass_bytes(rows, window, vocab)
    assert 2 / 3 * formula < peak <= formula, f"{method}: {peak / 2**20:.0f} MiB, formula {formula / 2**20:.0f} MiB"


def test_the_cap_counts_the_sampling_settings(grid):
    """Fewer rows fit a pass with top-p than without, at the same cap: the refusal and the
    server's batch follow the settings."""
    capped = Capped(grid, memory.pass_bytes(3, 8, grid.vocab_size))
    assert memory.rows_per_pass(capped, "scd-mc", 8) == 3
    assert memory.rows_per_pass(capped, "scd-mc", 8, top_p=0.8) == 2
    scd_core.generate(capped, ["a", "b", "c"], method="scd-mc", window=8, top_k=1)
    with pytest.raises(ValueError, match="prompts: 3 rows"):
        scd_core.generate(capped, ["a", "b", "c"], method="scd-mc", window=8, top_p=0.8)
    assert Scheduler(capped, method="scd-mc", window=8, top_p=0.8).max_batch == 2


def test_a_policy_window_over_the_cap_is_narrowed(grid):
    """A policy may ask for a window wider than the group's: a pass then runs at the widest
    window that holds its batch under the cap (one row alone gets the policy's window), and the
    rows stay exact (greedy: AR's tokens)."""
    from scd_core.serve import Policy

    class Wide(Policy):
        def __init__(self):
            pass

        def window(self, batch):
            return 32

    capped = Capped(grid, memory.pass_bytes(4, 8, grid.vocab_size))
    scheduler = Scheduler(capped, method="scd-mc", window=8, top_k=1, policy=Wide())
    passes = []                                                       # (rows, tokens fed per row)
    scheduler.on_pass = lambda record, rows: passes.append(tuple(record.window_tokens.shape))
    requests = [scheduler.submit(f"p{i}", seed=i) for i in range(4)]
    while scheduler.busy:
        scheduler.step()
    requests.append(scheduler.submit("alone", seed=9))
    while scheduler.busy:
        scheduler.step()
    fed = [(rows, width) for rows, width in passes if width > 0]     # the prefills feed nothing
    assert all(memory.pass_bytes(rows, width, grid.vocab_size) <= capped.max_pass_bytes for rows, width in fed)
    assert max(width for rows, width in fed if rows == 4) <= 8 and max(width for rows, width in fed if rows == 1) == 32
    for r in requests:
        assert torch.equal(r.result().tokens, scd_core.generate(grid, [r.prompt], method="ar", top_k=1).tokens)
