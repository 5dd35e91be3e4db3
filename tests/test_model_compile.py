"""Every shipped model's and adapter's session compiles with the pass: `compile=True` builds one
graph a pass (`torch.compile(fullgraph=True)` of the pass with the model's step inside it: a
graph break would be an error) and gives the eager run's tokens and passes, on the embedded
models as shipped and the adapters' tiny configs; and, read as CUDA-graph trees read it
(`scd_core.testing.unmarked_writes`), each graph writes in place only into static tensors
(tests/test_static_writes.py: the rest of what CUDA graphs need). The same for each session's
tree step and kept path.

A cold compile costs 15-60 s of a small CPU's time, so each model compiles its chain pass
once: the adapters with SCD-MC, the method whose pass draws the most, the embedded models each
with another method (every method at least once; the pass is the engine's, the step the
model's: `tests/test_compiled.py` compiles every kind of pass on texture and tiny). Trees on
every session of its own kind (tiny-64 and tiny-video are tiny's session at other sizes).
"""
from __future__ import annotations

import pytest
import torch
import torch._dynamo

import scd_core
from models_util import built  # noqa: F401 (a fixture)
from scd_core.testing import unmarked_writes

pytestmark = pytest.mark.compile

MODELS = ["texture", "tiny", "tiny-64", "tiny-video", "janus-pro", "emu3", "lumina-mgpt", "llamagen", "cosmos"]
# each model once: a cold compile is tens of seconds, so not the whole matrix. CI's lanes compile
# tiny (an embedded model's session) and llamagen (an adapter's); the others, 20-70 s each, are
# also `slow` (every adapter's GPU-path rules are read in CI by tests/test_static_writes.py,
# without inductor; tests/test_compiled.py compiles every kind of pass on texture and tiny)
CI_MODELS = ("tiny", "llamagen")
METHOD = {"texture": "scd-gumbel", "tiny": "sjd", "tiny-64": "ar", "tiny-video": "scd-mc"}
CASES = [pytest.param(name, METHOD.get(name, "scd-mc"), id=f"{name}-{METHOD.get(name, 'scd-mc')}",
                      marks=() if name in CI_MODELS else pytest.mark.slow)
         for name in MODELS]
# trees: tiny's and llamagen's in the compile lane, the other sessions' also `slow`
TREE_MODELS = [pytest.param(name, marks=() if name in ("tiny", "llamagen") else pytest.mark.slow)
               for name in MODELS if name not in ("tiny-64", "tiny-video")]


@pytest.mark.parametrize("name,method", CASES)
def test_the_compiled_pass_is_one_graph_with_the_eager_tokens(built, name, method):
    model, prompts, cfg = built(name)
    kw = dict(method=method, window=1 if method == "ar" else 6, seed=3, cfg_scale=cfg, top_k=40)
    if name == "cosmos":
        kw["init"] = "random"
    assert getattr(model.start(prompts[:1], cfg), "compilable", False), f"{name}: its session is not compilable"
    eager = scd_core.generate(model, prompts, **kw)
    stats = torch._dynamo.utils.counters["stats"]
    graphs = stats["unique_graphs"]
    with unmarked_writes() as read:                  # the graph read as CUDA-graph trees read it, cold
        compiled = scd_core.generate(model, prompts, compile=True, **kw)
    built_now = stats["unique_graphs"] - graphs
    # nothing it writes in place is left unmarked (tests/test_static_writes.py: the SCD-MC pass of the
    # models this file compiles with it is checked here, once, not compiled again there)
    assert read and not [w for g in read for w in g], f"{name}, {method}: writes into tensors not static: {read}"
    # one graph: the pass and the step fused (the pass compiled around an eager step is two)
    assert built_now == 1, f"{name}, {method}: {built_now} graphs built for one run's passes"
    assert torch.equal(compiled.tokens.cpu(), eager.tokens.cpu()) and compiled.nfe == eager.nfe
    assert [int(it.num_accepted.sum()) for it in compiled.iterations] == \
        [int(it.num_accepted.sum()) for it in eager.iterations]
    again = scd_core.generate(model, prompts, compile=True, **kw)      # the graph is reused, not rebuilt
    assert stats["unique_graphs"] - graphs == 1 and torch.equal(again.tokens, compiled.tokens)


@pytest.mark.parametrize("name", TREE_MODELS)
def test_a_tree_step_and_its_kept_path_trace_as_one_graph(built, name):
    """`step_tree` then `keep_path` compile whole (`fullgraph=True`: a graph break is an
    error), write in place only into static tensors (the tree slots `reserve_tree` made), give
    the eager logits, and the session afterwards steps as the eager one."""
    model, prompts, cfg = built(name)
    B = len(prompts)
    parents = torch.tensor([[-1, 0, 0, 1, 1, 2, 2]] * B)
    tokens = torch.randint(0, model.vocab_size, (B, 7), generator=torch.Generator().manual_seed(0))
    nodes = torch.tensor([[0, 1, 4]] * B)

    def tree_pass(session, tokens, parents, start, nodes):
        logits = session.step_tree(tokens, parents, start)
        session.keep_path(nodes)
        return logits

    outs = []
    torch._dynamo.reset()                 # one code object compiled per model: not a recompile of the last's
    for fn in (tree_pass, torch.compile(tree_pass, fullgraph=True)):
        with torch.no_grad():
            session = model.start(prompts, cfg)
            if hasattr(session, "reserve_tree"):           # as the engine does: tree slots before the first tree
                session.reserve_tree(7)
            session.step(tokens[:, :3], torch.zeros(B, dtype=torch.long))
            with unmarked_writes() as read:
                logits = fn(session, tokens, parents, torch.full((B,), 2), nodes)
            outs.append((logits, session.step(tokens[:, :2], torch.full((B,), 5))))
    assert read and not [w for g in read for w in g], f"{name}: the tree step writes into tensors not static: {read}"
    for got, want in zip(outs[1], outs[0]):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
