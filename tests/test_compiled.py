"""The compiled pass (`Settings.compile`): the same tokens as eager, a few graphs for a server
whose batch changes (never one per pass), and eager with one warning where nothing compiles.

Compiling costs tens of seconds per graph on a small CPU, so these tests cover one case of
each kind of graph: the pass fused with an embedded model's step (texture's closed form, tiny's
KV cache; a draft tree's pass with texture's `step_tree` and `keep_path`), and the split pass
around a step that is not traced (toy-grid's: a draft tree here, a chain in the server test). Each checks that graphs were built, so a pass
that fell back to eager fails. `python -m bench compile-check` compares every golden case.
"""
from __future__ import annotations

import pytest
import torch
import torch._dynamo

import scd_core
from scd_core import chain, passes
from scd_core.clocks import TimedSession
from scd_core.serve import Scheduler

CASES = {   # name: (model, model kwargs, settings): one graph of each kind (the split chain: the server test)
    "texture fused, scd-gumbel, top-k": ("texture", dict(grid=(8, 8)), dict(method="scd-gumbel", window=8, top_k=100)),
    "tiny fused, scd-mc, guided": ("tiny", {}, dict(method="scd-mc", window=8, top_k=100, cfg_scale=3.0)),
    "texture tree fused, sjd": ("texture", dict(grid=(8, 8)), dict(method="sjd", window=8, tree=(2, 2))),
    "toy-grid tree split, scd-mc": ("toy-grid", dict(grid=(6, 6), vocab_size=64, hidden=32),
                                    dict(method="scd-mc", window=6, tree=(2, 1))),
}
pytestmark = pytest.mark.compile


@pytest.fixture(scope="module")
def models():
    return {}


def _model(models: dict, name: str, kwargs: dict):
    key = (name, tuple(sorted(kwargs.items())))
    if key not in models:
        models[key] = scd_core.load_model(name, **kwargs)
    return models[key]


@pytest.mark.parametrize("case", list(CASES))
def test_the_compiled_pass_gives_the_eager_tokens(models, case):
    """The run's passes are graphs (none built: a pass that ran eager), built once, and give
    eager's tokens and accepted lengths."""
    name, kwargs, settings = CASES[case]
    model = _model(models, name, kwargs)
    prompts = (getattr(model, "example_prompts", None) or ["a cat", "a dog"])[:2]
    eager = scd_core.generate(model, prompts, seed=5, **settings)
    session = TimedSession(model.start(prompts[:1], 1.0), 0.0)
    chosen = passes.pass_for(session, chain.Plan.of(scd_core.Settings(compile=True, **settings), model))
    assert (getattr(chosen, "func", None) is passes.fused_pass) == ("fused" in case)
    torch._dynamo.reset()
    stats = torch._dynamo.utils.counters["stats"]
    built = []
    for _ in range(2):
        before = stats["unique_graphs"]
        run = scd_core.generate(model, prompts, seed=5, compile=True, **settings)
        built.append(stats["unique_graphs"] - before)
        assert torch.equal(run.tokens, eager.tokens) and run.nfe == eager.nfe
        assert [int(it.num_accepted.sum()) for it in run.iterations] == [int(it.num_accepted.sum()) for it in eager.iterations]
    assert built[0] >= 1 and built[1] == 0, f"graphs built by the first and second run: {built}"


def test_a_server_whose_batch_changes_compiles_a_few_graphs_not_one_per_pass(models):
    """Rows join and leave a running batch (toy-grid's sessions resize): each half of the pass
    compiles for the first batch size, for a batch of one, and once more with the batch size
    dynamic; every other pass, at any size, runs what was compiled."""
    model = _model(models, "toy-grid", dict(grid=(6, 6), vocab_size=64, hidden=32))
    settings = scd_core.Settings(method="sjd", window=6, compile=True, top_k=20)
    scheduler = Scheduler(model, settings=settings)
    stats = torch._dynamo.utils.counters["stats"]
    before, compiling = stats["unique_graphs"], []
    requests = [scheduler.submit("a cat", seed=0)]
    for joining in (0, 2, 0, 1, 0, 3, 0, 1, 0, 0):
        requests += [scheduler.submit("a dog", seed=len(requests)) for _ in range(joining)]
        graphs = stats["unique_graphs"]
        scheduler.step()
        compiling.append(stats["unique_graphs"] - graphs)
    while scheduler.busy:
        graphs = stats["unique_graphs"]
        scheduler.step()
        compiling.append(stats["unique_graphs"] - graphs)
    sizes = {size for r in requests for size in r.batch_sizes}
    assert len(sizes) >= 4 and len(compiling) >= 20, sizes
    assert stats["unique_graphs"] - before <= 6 and sum(c > 0 for c in compiling) <= 3, compiling
    for r in requests:
        alone = scd_core.generate(model, [r.prompt], seed=r.seed, settings=settings.replace(compile=False))
        assert torch.equal(r.result().tokens, alone.tokens)


def test_without_a_compiler_the_pass_runs_eager_and_says_so_once(models, monkeypatch):
    monkeypatch.setattr(passes, "problem", lambda device="cpu": "no C++ compiler found (install g++, or set CXX)")
    passes._warn_once.cache_clear()
    model = _model(models, "texture", dict(grid=(8, 8)))
    eager = scd_core.generate(model, ["ocean waves"], method="scd-mc", window=6, seed=1)
    with pytest.warns(RuntimeWarning, match="no C.. compiler found.*runs eager") as seen:
        runs = [scd_core.generate(model, ["ocean waves"], method="scd-mc", window=6, seed=1, compile=True) for _ in range(2)]
    assert len([w for w in seen if issubclass(w.category, RuntimeWarning)]) == 1
    assert all(torch.equal(run.tokens, eager.tokens) for run in runs)


def test_the_compiler_check_names_what_is_missing(monkeypatch):
    check = passes.problem.__wrapped__                        # the check, not the process's cached answer
    assert check("cpu") is None and passes.problem("cpu") is None       # this machine has g++
    monkeypatch.setattr(passes.shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    assert "no C++ compiler" in check("cpu")


def test_compile_must_be_a_bool():
    with pytest.raises(ValueError, match="compile must be True or False"):
        scd_core.Settings(compile="yes")
