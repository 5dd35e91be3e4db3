"""A compiled pass keeps the three rules CUDA graphs need (`scd_core.models.static`), read on
the CPU for every shipped model, chain and tree:

1. every tensor it writes in place is static, read from inductor's compiled graph as CUDA-graph
   trees read it (`scd_core.testing.unmarked_writes`, `check_static_writes`): read where
   tests/test_model_compile.py compiles each model's pass and tree step, cold, once (tens of
   seconds a graph on a small CPU); here, the reading's own check;
2. no pass takes as an input a tensor a pass before returned or left on the session (on a
   GPU, freed at the next replay), and
3. a second run of the same prompts takes every static input at the first run's address (on a
   GPU, a new address records the graph again), both read from every call of the graphs as
   dynamo traces them, on the path a GPU takes (`scd_core.testing.check_graph_inputs`: seconds
   a model, no inductor).

Each reading has a test that plants the defect it is for and sees it caught.

On a GPU (`gpu`, scripts/gpu_check.sh runs it), the same runs replay as CUDA graphs, with
capture skips made errors: graphs are recorded, a second run records none, and the tokens are
eager's (`scd_core.testing.check_cuda_graphs`); the same check fails, on the CPU, on a pass that
falls back to eager.
"""
from __future__ import annotations

import pytest
import torch

import models_util
import scd_core
from models_util import built  # noqa: F401 (a fixture)
from scd_core import passes, testing
from scd_core.models import static
from scd_core.testing import check_graph_inputs, check_static_writes, unmarked_writes

pytestmark = pytest.mark.compile

TREE = dict(method="sjd", window=8, tree=(2, 2))
ADAPTERS = ["texture", "tiny", "janus-pro", "emu3", "lumina-mgpt", "llamagen", "cosmos"]
RUN_CASES = [pytest.param(name, {}, id=f"{name}-scd-mc") for name in ADAPTERS]
RUN_CASES += [pytest.param(name, TREE, id=f"{name}-sjd-tree-2x2") for name in ["tiny", "llamagen"]]


def _settings(name: str, settings: dict) -> dict:
    kw = dict(seed=3, top_k=40) | settings
    return kw | (dict(init="random") if name == "cosmos" else {})


# ------------------------------------------------------------------ 1. writes only into static tensors

def test_a_cache_that_is_not_marked_is_found():
    """The reading catches the defect it is for: a tensor the graph writes in place, not
    marked, is reported with its shape; marked, it is not."""
    def write(cache, at, value):
        cache.index_copy_(0, at, value)
        return cache.sum()

    compiled = torch.compile(write, fullgraph=True)
    at, value = torch.tensor([1]), torch.ones(1, 3)
    plain, marked = torch.zeros(4, 3), torch.zeros(4, 3)
    torch._dynamo.mark_static_address(marked)
    torch._dynamo.reset()
    with unmarked_writes() as graphs:
        compiled(plain, at, value)
    assert [[(w.shape, w.dtype) for w in g] for g in graphs] == [[((4, 3), torch.float32)]]
    torch._dynamo.reset()
    with unmarked_writes() as graphs:
        compiled(marked, at, value)
    assert graphs == [[]] and torch.equal(marked[1], value[0])


# ------------------------------------------------------------------ 2-3. run after run

class Planted:
    """A compilable model of the contract's smallest kind (p from a table by position and the
    row's last token), its session correct or with a planted defect: `assigned`, the fed
    count assigned inside the step (a graph output the next pass reads); `own`, its buffers
    allocated by the session (new addresses every run); `unmarked`, its history a plain
    tensor, not static."""

    vocab_size, grid = 5, (2, 3)

    def __init__(self, defect: str | None = None) -> None:
        self.defect = defect
        self.table = torch.randn(7, 5, generator=torch.Generator().manual_seed(0))

    def start(self, prompts, cfg_scale):
        return PlantedSession(self, len(prompts))

    def decode(self, tokens):
        return list(tokens)


class PlantedSession:
    compilable = True

    def __init__(self, model: Planted, rows: int) -> None:
        self.model = model
        specs = [((rows, 7), torch.long), ((rows,), torch.long)]
        if model.defect == "unmarked":
            self.history, self.fed = (torch.zeros(*shape, dtype=dtype) for shape, dtype in specs)
        elif model.defect == "own":
            self.history, self.fed = (static.zeros(*shape, dtype=dtype, device="cpu") for shape, dtype in specs)
        else:
            self.history, self.fed = static.buffers_of(model).zeros(self, specs, "cpu")
        self.first_logits = model.table[0].expand(rows, -1).clone()

    def step(self, tokens, start):
        start = torch.minimum(start, self.fed)                   # a read of `fed`, as a check of start makes
        pos = start[:, None] + torch.arange(tokens.shape[1])
        self.history.scatter_(1, pos, tokens)
        if self.model.defect == "assigned":
            self.fed = start + tokens.shape[1]
        else:
            self.fed.copy_(start + tokens.shape[1])
        return self.model.table[pos + 1] + self.history.gather(1, pos)[..., None] % 2


def test_the_run_reading_catches_a_fed_count_assigned_in_the_step_and_buffers_of_a_session_own():
    """Both defects found, by name, and the same model without them passes; the tokens are
    eager's in every case (the defects are GPU hazards, not wrong numbers)."""
    kw = dict(method="scd-mc", window=3, seed=1)
    assert check_graph_inputs(Planted(), ["a"], 1.0, **kw).static >= 2
    read = testing.read_graph_inputs(Planted("assigned"), ["a"], 1.0, **kw)
    assert read.fed_back == ["L['args'][0].fed"]             # (a new tensor each pass: it moves too)
    with pytest.raises(AssertionError, match="reads what an earlier one returned.*fed"):
        check_graph_inputs(Planted("assigned"), ["a"], 1.0, **kw)
    read = testing.read_graph_inputs(Planted("own"), ["a"], 1.0, **kw)
    assert sorted(read.moved) == ["L['args'][0].fed", "L['args'][0].history"] and not read.fed_back
    with pytest.raises(AssertionError, match="2 of .* static buffers at new addresses"):
        check_graph_inputs(Planted("own"), ["a"], 1.0, **kw)


def test_the_static_writes_check_passes_the_planted_model_and_names_a_history_not_marked():
    """`check_static_writes` compiles the pass with the planted session's step: marked buffers
    pass, a plain history (and count) written in place are named by shape."""
    kw = dict(window=3, seed=1)
    assert check_static_writes(Planted(), ["a"], 1.0, **kw) >= 1
    with pytest.raises(AssertionError, match=r"tensors the compiled pass writes in place are not static.*\[1, 7\]"):
        check_static_writes(Planted("unmarked"), ["a"], 1.0, **kw)


@pytest.mark.parametrize("name,settings", RUN_CASES)
def test_no_pass_reads_the_last_ones_output_and_a_second_run_takes_the_first_runs_buffers(built, name, settings):
    model, prompts, cfg = built(name)
    read = check_graph_inputs(model, prompts[:1], cfg, **_settings(name, settings))
    assert read.calls >= 2 and read.static >= 12            # the two states' 12 tensors, the session's buffers


# ------------------------------------------------------------------ on a GPU

def test_the_gpu_check_fails_on_a_pass_that_runs_eager(monkeypatch):
    """`check_cuda_graphs` cannot pass without CUDA graphs: where nothing compiles it fails
    instead of warning, and a pass that falls back to eager saying nothing records no graph
    (here, the CPU: none ever is)."""
    model = scd_core.load_model("texture", grid=(6, 6))
    monkeypatch.setattr(passes, "problem", lambda device="cpu": "no Triton for this GPU (pip install triton)")
    with pytest.raises(AssertionError, match="cannot compile.*no Triton"):
        testing.check_cuda_graphs(model, ["ocean waves"], 1.0)
    monkeypatch.setattr(passes, "problem", lambda device="cpu": None)
    monkeypatch.setattr(passes, "pass_for", lambda session, plan: passes.eager_pass(plan))
    with pytest.raises(AssertionError, match="no CUDA graph was recorded"):
        testing.check_cuda_graphs(model, ["ocean waves"], 1.0)


GPU_CASES = [pytest.param(name, {}, id=f"{name}-scd-mc") for name in ADAPTERS]
GPU_CASES += [pytest.param(name, TREE, id=f"{name}-sjd-tree-2x2") for name in ["tiny", "llamagen"]]


@pytest.mark.gpu
@pytest.mark.parametrize("name,settings", GPU_CASES)
def test_the_compiled_pass_replays_as_cuda_graphs_run_after_run_with_the_eager_tokens(tmp_path_factory, name, settings):
    small = dict(grid=(8, 8)) if name == "texture" else {}
    model, prompts, cfg = models_util.build(name, torch.float32, tmp_path_factory, device="cuda", **small)
    assert testing.check_cuda_graphs(model, prompts[:1], cfg, **_settings(name, settings)) >= 1
