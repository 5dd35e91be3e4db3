"""Check a model of your own against the contract the engine relies on (`scd_core.protocols`,
docs/models.md "Bring your own model"): the checks every shipped model and adapter passes.

    from scd_core.testing import check_model, check_tree_session

    check_model(model, ["a prompt", "another prompt"], cfg_scale=3.0)         # TokenModel, Session
    check_tree_session(model, ["a prompt", "another prompt"], cfg_scale=3.0)  # TreeSession (tree=)
    check_static_writes(model, ["a prompt"], cfg_scale=3.0)                   # compile=True on a GPU
    check_graph_inputs(model, ["a prompt"], cfg_scale=3.0)                    # the same, run after run

Each call raises an AssertionError saying what differs, and returns None when the model
follows the contract: call them from a test of yours, or from a script. Both compare a
session fed in pieces (rows at different starts, re-fed after a rejection, fed a tree)
with sessions of each prompt alone fed the same tokens as one chain by `step`, to float32
rounding relative to the logits' scale (`rel`; a model computing in bfloat16 needs a larger
one, e.g. 0.05). They need two prompts, and a grid of at least 12 tokens for the trees.
`check_static_writes` compiles a run's pass (seconds to a minute on a CPU) and checks that
every tensor it writes in place is static, as a CUDA graph needs (`unmarked_writes`);
`check_graph_inputs` runs the GPU's path on the CPU, its graphs traced but not compiled
(`recorded_passes`), and checks that no pass reads what the pass before returned and that a
second run borrows the first run's buffers (`scd_core.models.static`'s rules).
Nothing here needs pytest.
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch

from scd_core.protocols import can_resize, can_tree, row_decoder

REL = 1e-5
# Two trees of 8 nodes, parents before children: a root with 2 children, 4 grandchildren
# under them (3 + 1 or 2 + 2) and a chain tail at depth 3; the two rows' shapes differ.
BREADTH_FIRST = [-1, 0, 0, 1, 1, 1, 2, 3]
INTERLEAVED = [-1, 0, 1, 0, 1, 3, 2, 2]
# A root-to-node path of each shape (padded with -1): the deepest one, and root + one child.
DEEP = {tuple(BREADTH_FIRST): [0, 1, 3, 7], tuple(INTERLEAVED): [0, 1, 2, 6]}
SHORT = {tuple(BREADTH_FIRST): [0, 2, -1, -1], tuple(INTERLEAVED): [0, 3, -1, -1]}


def assert_close_logits(got: torch.Tensor, want: torch.Tensor, what: str, rel: float = REL) -> None:
    """Equal to `rel` times the scale of the finite logits; -inf (a token the model rules
    out) and any other infinity at the same places."""
    finite = torch.isfinite(want)
    assert torch.equal(finite, torch.isfinite(got)), f"{what}: infinite logits (ruled-out tokens) at other places"
    assert torch.equal(got[~finite], want[~finite]), f"{what}: other infinities"
    scale = max(1.0, float(want[finite].abs().max())) if bool(finite.any()) else 1.0
    torch.testing.assert_close(got[finite].float(), want[finite].float(), atol=rel * scale, rtol=0,
                               msg=lambda m: f"{what}: {m}")


def chain_logits(model, prompt: str, cfg_scale: float, fed: Sequence[int]) -> torch.Tensor:
    """[len(fed), V]: a session of `prompt` alone fed `fed` by one `step` from position 0."""
    session = model.start([prompt], cfg_scale)
    return session.step(torch.tensor([list(fed)]), torch.zeros(1, dtype=torch.long))[0]


# ------------------------------------------------------------------------------ chains

@torch.no_grad()
def check_model(model, prompts: Sequence[str], cfg_scale: float, *, seed: int = 0, rel: float = REL,
                deterministic: bool = True) -> None:
    """The TokenModel and Session contract, fed as the engine feeds chains:

    - `vocab_size` is an int V > 1 and `grid` (H, W) or (T, H, W) of positive ints;
    - `start(prompts, cfg_scale)` gives `first_logits` [B, V], equal for each row to those of
      its prompt started alone (a row does not depend on its batch-mates);
    - `step(tokens [B, 4], start 0)` returns [B, 4, V]; a second `step` at starts 1 and 2
      (rows rejected at different places) first forgets what was fed at and after them: row
      b's logits equal those of its prompt alone fed the same prefix in one `step`, so
      `logits[b, j]` predicts position `start[b] + j + 1`;
    - `decode` (or the session's `row_decoder`) turns [B, N] tokens into one output per row.

    `deterministic=False` checks only the shapes (a model whose logits are drawn at random).
    """
    V, grid = model.vocab_size, tuple(model.grid)
    assert isinstance(V, int) and V > 1, f"vocab_size: expected an int > 1, got {V!r}"
    assert len(grid) in (2, 3) and all(isinstance(g, int) and g > 0 for g in grid), \
        f"grid: expected (H, W) or (T, H, W) of positive ints, got {grid!r}"
    N, B = math.prod(grid), len(prompts)
    assert N >= 6, f"grid: the check feeds 6 positions, the grid has {N}"
    g = torch.Generator().manual_seed(seed)
    session = model.start(list(prompts), cfg_scale)
    assert tuple(session.first_logits.shape) == (B, V), \
        f"first_logits: expected [{B}, {V}], got {list(session.first_logits.shape)}"
    fed = torch.randint(0, V, (B, 4), generator=g)
    out = session.step(fed, torch.zeros(B, dtype=torch.long))
    assert tuple(out.shape) == (B, 4, V), f"step: expected logits [{B}, 4, {V}], got {list(out.shape)}"
    start = 1 + torch.arange(B) % 2                            # rows rejected at different places
    refeed = torch.randint(0, V, (B, 2), generator=g)
    out = session.step(refeed, start)
    assert tuple(out.shape) == (B, 2, V), f"step: expected logits [{B}, 2, {V}], got {list(out.shape)}"
    if deterministic:
        for b in range(B):
            alone = model.start([prompts[b]], cfg_scale)
            assert_close_logits(session.first_logits[b], alone.first_logits[0],
                                f"first_logits of row {b} against its prompt started alone", rel)
            s = int(start[b])
            ref = chain_logits(model, prompts[b], cfg_scale, fed[b, :s].tolist() + refeed[b].tolist())
            assert_close_logits(out[b], ref[s:], f"row {b} re-fed at start {s} against its prefix fed alone "
                                "(does step forget what was fed at positions >= start?)", rel)
    tokens = torch.randint(0, V, (B, N), generator=g)
    decoders = [row_decoder(model, session, b) for b in range(B)]
    decoded = [out for b, d in enumerate(decoders) for out in d(tokens[b:b + 1])]
    assert len(decoded) == B, f"decode: expected one output per row ({B}), got {len(decoded)}"


# ------------------------------------------------------------------------------ trees

def node_paths(parents: Sequence[int]) -> list[list[int]]:
    """Each node's root-to-node path (node indices)."""
    paths: list[list[int]] = []
    for j, p in enumerate(parents):
        paths.append([j] if p < 0 else paths[p] + [j])
    return paths


def check_nodes(model, prompts, cfg_scale, history: list[list[int]], tokens: torch.Tensor,
                parents: torch.Tensor, start: torch.Tensor, out: torch.Tensor, what: str,
                rel: float = REL) -> None:
    """Node j's logits equal the chain logits at the end of history[:start] + its path,
    checked once per leaf (a leaf's chain covers every node on its path)."""
    B, T = tokens.shape
    assert tuple(out.shape) == (B, T, model.vocab_size), f"{what}: logits of shape {tuple(out.shape)}"
    for b in range(B):
        par = parents[b].tolist()
        paths = node_paths(par)
        s = int(start[b])
        for leaf in [j for j in range(T) if j not in par]:
            path = paths[leaf]
            ref = chain_logits(model, prompts[b], cfg_scale, history[b][:s] + tokens[b, path].tolist())
            for depth, node in enumerate(path):
                assert_close_logits(out[b, node], ref[s + depth], f"{what}: row {b}, node {node} (depth {depth}) "
                                    "against its root-to-node path fed as a chain", rel)


def _keep(session, history, tokens, start, paths) -> None:
    session.keep_path(torch.tensor(paths))
    for b, path in enumerate(paths):
        kept = [n for n in path if n >= 0]
        history[b] = history[b][:int(start[b])] + tokens[b, kept].tolist()


def _check_steps(model, session, prompts, cfg_scale, history, start, window, what, rel) -> None:
    out = session.step(window, start)
    for b in range(len(history)):
        history[b] = history[b][:int(start[b])] + window[b].tolist()
        ref = chain_logits(model, prompts[b], cfg_scale, history[b])
        assert_close_logits(out[b], ref[int(start[b]):], f"{what}, row {b}", rel)


@torch.no_grad()
def check_tree_session(model, prompts: Sequence[str], cfg_scale: float, *, seed: int = 0,
                       rel: float = REL) -> None:
    """The whole tree contract (`protocols.TreeSession`) with two prompts, positions inside a
    grid of 12 tokens; every check against sessions of each prompt alone fed chains by `step`:

    (a) every node's logits equal the chain logits at the end of its root-to-node path, for
        two rows at different starts with trees of different shapes (guidance as asked);
    (b) after `keep_path`, a `step` gives the logits of a session fed that path by `step` (also
        when it forgets part of the kept path), a second tree on top of it passes (a) again,
        and rows joining and leaving afterwards (a `ResizableSession`) keep giving them;
    (c) a chain (`parents[b, j] == j - 1`) gives what `step` gives.
    """
    assert len(prompts) == 2, "check_tree_session takes two prompts"
    prompts = list(prompts)
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
    assert_close_logits(chain.step_tree(toks, line, start), stepped.step(toks, start), "a chain as a tree", rel)
    chain.keep_path(torch.arange(5).expand(2, -1))
    again = torch.randint(0, V, (2, 2), generator=g)
    assert_close_logits(chain.step(again, start + 5), stepped.step(again, start + 5), "a step after a chain kept",
                        rel)

    # (a) trees at different starts, after a prefix fed by `step` (the tree forgets its tail)
    fed = torch.randint(0, V, (2, 4), generator=g)
    session.step(fed, zeros)
    history = fed.tolist()
    shapes = torch.tensor([BREADTH_FIRST, INTERLEAVED])
    tokens = torch.randint(0, V, (2, 8), generator=g)
    start = torch.tensor([1, 2])
    out = session.step_tree(tokens, shapes, start)
    check_nodes(model, prompts, cfg_scale, history, tokens, shapes, start, out, "first tree", rel)

    # (b) keep a deep path and a short one; a step then forgets the last kept node
    _keep(session, history, tokens, start, [DEEP[tuple(BREADTH_FIRST)], SHORT[tuple(INTERLEAVED)]])
    start = torch.tensor([len(h) - 1 for h in history])
    _check_steps(model, session, prompts, cfg_scale, history, start, torch.randint(0, V, (2, 2), generator=g),
                 "a step after keep_path", rel)

    # a second tree on top of the kept path, shapes swapped between the rows
    shapes = shapes.flip(0)
    tokens = torch.randint(0, V, (2, 8), generator=g)
    start = torch.tensor([len(h) for h in history])
    out = session.step_tree(tokens, shapes, start)
    check_nodes(model, prompts, cfg_scale, history, tokens, shapes, start, out, "second tree", rel)
    _keep(session, history, tokens, start, [SHORT[tuple(INTERLEAVED)], DEEP[tuple(BREADTH_FIRST)]])

    if can_resize(session):                     # rows leave and join after keep_path
        session.keep_rows(torch.tensor([1, 0]))
        prompts, history = [prompts[1], prompts[0]], [history[1], history[0]]
        session.add_rows([prompts[0]])
        prompts, history = prompts + [prompts[0]], history + [[]]
    start = torch.tensor([len(h) for h in history])
    _check_steps(model, session, prompts, cfg_scale, history, start,
                 torch.randint(0, V, (len(history), 2), generator=g), "a step after the second keep_path", rel)


# ------------------------------------------------------------------------------ compiled passes

@dataclass(frozen=True)
class UnmarkedWrite:
    """An input of a compiled graph that the graph writes in place and that is not static (a
    parameter, a buffer, or a tensor marked with `torch._dynamo.mark_static_address`): on a
    GPU, CUDA-graph trees skip capturing such a graph (torch/_inductor/cudagraph_utils.py,
    `check_for_mutation`), silently."""

    graph: int                  # which graph compiled inside `unmarked_writes`, from 0
    index: int                  # the input's place among the graph's inputs
    shape: tuple[int, ...]
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"graph {self.graph}, input {self.index}: {self.dtype} {list(self.shape)}"


@contextlib.contextmanager
def unmarked_writes() -> Iterator[list[list[UnmarkedWrite]]]:
    """Inside: every graph inductor compiles is read as CUDA-graph trees read it, from the
    compiled graph's mutated and static inputs; yields a list that gets one list of
    `UnmarkedWrite` per graph (empty: the graph would be captured on a GPU). On any device:
    the same compiled graph is checked on the CPU. The compile caches on disk are off inside
    (a graph loaded from them may carry another compile's static inputs), so each graph
    compiles cold."""
    import torch._functorch.config
    import torch._inductor.config
    from torch._inductor.output_code import CompiledFxGraph

    graphs: list[list[UnmarkedWrite]] = []
    post_compile = CompiledFxGraph.post_compile

    def recorded(self, example_inputs, constants, graph_kwargs):
        static = set(graph_kwargs.get("static_input_idxs") or ())
        n = len(graphs)
        graphs.append([UnmarkedWrite(n, i, tuple(example_inputs[i].shape), example_inputs[i].dtype)
                       for i in sorted(self.mutated_input_idxs) if i not in static])
        return post_compile(self, example_inputs, constants, graph_kwargs)

    CompiledFxGraph.post_compile = recorded
    try:
        with torch._inductor.config.patch(fx_graph_cache=False), \
                torch._functorch.config.patch(enable_autograd_cache=False):
            yield graphs
    finally:
        CompiledFxGraph.post_compile = post_compile


def check_static_writes(model, prompts: Sequence[str], cfg_scale: float, **settings) -> int:
    """`generate(model, prompts, compile=True, **settings)` (SCD-MC, window 6 unless `settings`
    say otherwise; `tree=(2, 2)` checks a tree's pass) compiles its pass, and no graph
    compiled for it writes in place into a tensor that is not static. Returns how many graphs
    were checked (at least one: a run that compiled nothing fails)."""
    import torch._dynamo

    import scd_core

    kw = dict(method="scd-mc", window=6, seed=0, cfg_scale=cfg_scale) | settings
    torch._dynamo.reset()                       # compile again here, where the graphs are read
    with unmarked_writes() as graphs:
        scd_core.generate(model, list(prompts), compile=True, **kw)
    assert graphs, "compile=True compiled no graph (did the pass run eager?)"
    unmarked = [w for g in graphs for w in g]
    assert not unmarked, (f"{len(unmarked)} tensors the compiled pass writes in place are not static (on a GPU "
                          "the pass would not be captured as a CUDA graph; mark each where it is allocated with "
                          "torch._dynamo.mark_static_address): " + "; ".join(map(str, unmarked)))
    return len(graphs)


# ------------------------------------------------------------------------------ run after run, as a GPU replays

@dataclass(frozen=True)
class GraphInput:
    """One tensor a recorded call of a compiled graph took: dynamo's name for where it came from
    (e.g. `L['session'].fed`), whether it is static, and its storage (kept alive by the
    recording, so that no other tensor takes its address)."""

    name: str
    static: bool
    parameter: bool
    storage: torch.UntypedStorage = field(repr=False)


@dataclass
class Call:
    """One call of a compiled graph: what it took and the storages of what it returned."""

    graph: int
    inputs: list[GraphInput]
    outputs: list[torch.UntypedStorage] = field(repr=False)


class Recording:
    """The calls of the graphs compiled inside `recorded_passes`, in order."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.graphs = 0

    def backend(self, gm, example_inputs):
        """A dynamo backend: the graph as traced (no inductor), each call recorded. Static
        inputs are those inductor's CUDA-graph trees take as static: marked, a parameter, or
        a tensor attribute of a module (dynamo marks those), as seen when traced."""
        graph = self.graphs
        self.graphs += 1
        placeholders = list(gm.graph.find_nodes(op="placeholder"))
        names = [getattr(getattr(p, "_dynamo_source", None), "name", p.name) for p in placeholders]
        static = [bool(p.meta.get("tensor_dict", {}).get("_dynamo_static_input_type")) for p in placeholders]

        def run(*args):
            inputs = [GraphInput(n, s, isinstance(a, torch.nn.Parameter), a.untyped_storage())
                      for n, s, a in zip(names, static, args) if isinstance(a, torch.Tensor)]
            out = gm(*args)
            flat = out if isinstance(out, (list, tuple)) else [out]
            self.calls.append(Call(graph, inputs, [o.untyped_storage() for o in flat if isinstance(o, torch.Tensor)]))
            return out
        return run


def fed_back(calls: Sequence[Call]) -> list[str]:
    """The inputs (dynamo's names) whose storage an earlier call returned (made: an output
    that is one of the call's own inputs is the caller's): on a GPU that storage is a
    CUDA-graph output, freed at the next replay, so the call would read freed memory or fail
    ("accessing tensor output of CUDAGraphs that has been overwritten")."""
    returned, found = set(), []
    for call in calls:
        found += [i.name for i in call.inputs if i.storage.data_ptr() in returned]
        own = {i.storage.data_ptr() for i in call.inputs}
        returned |= {o.data_ptr() for o in call.outputs if o.data_ptr() not in own}
    return sorted(set(found))


def moved(first: Sequence[Call], second: Sequence[Call]) -> tuple[list[str], int]:
    """The static inputs (not parameters) of `first`'s calls that `second`'s calls, of a run
    of the same shapes, took at another address (dynamo's names), and how many static
    storages `first` took: on a GPU each move makes CUDA-graph trees record the graph again
    and keep both recordings."""
    assert [c.graph for c in first] == [c.graph for c in second], "the two runs called other graphs"
    seen, gone = set(), {}
    for a, b in zip(first, second):
        for x, y in zip(a.inputs, b.inputs):
            if x.static and not x.parameter:
                seen.add(x.storage.data_ptr())
                if x.storage.data_ptr() != y.storage.data_ptr():
                    gone[x.storage.data_ptr()] = x.name
    return sorted(set(gone.values())), len(seen)


@contextlib.contextmanager
def recorded_passes() -> Iterator[Recording]:
    """Inside: every pass `scd_core.passes` compiles takes the GPU's path on any device (it
    `replays`: the state in static buffers, the outputs cloned), traced by dynamo as for
    inductor but run as traced (seconds, not a minute, a graph), and every call recorded
    (`Recording`). Dynamo's caches are reset on the way in and out."""
    import torch._dynamo

    from scd_core import passes

    recording = Recording()
    replays, compile_ = passes.replays, passes._compiled

    @functools.cache
    def traced(fn, mode):
        return torch.compile(fn, backend=recording.backend, fullgraph=True)

    torch._dynamo.reset()
    passes.replays, passes._compiled = (lambda device: True), traced
    try:
        yield recording
    finally:
        passes.replays, passes._compiled = replays, compile_
        torch._dynamo.reset()


@dataclass(frozen=True)
class GraphInputs:
    """What `check_graph_inputs` read: per run, the calls of compiled graphs; the inputs fed
    back (`fed_back`) and the static buffers that moved between the runs (`moved`) of the
    `static` storages the first run took."""

    calls: int
    fed_back: list[str]
    moved: list[str]
    static: int


def read_graph_inputs(model, prompts: Sequence[str], cfg_scale: float, **settings) -> GraphInputs:
    """Two runs of `generate(model, prompts, compile=True, **settings)` inside
    `recorded_passes`, each giving eager's tokens and passes, read (SCD-MC, window 6 unless
    `settings` say otherwise)."""
    import scd_core

    kw = dict(method="scd-mc", window=6, seed=0, cfg_scale=cfg_scale) | settings
    eager = scd_core.generate(model, list(prompts), **kw)
    runs = []
    with recorded_passes() as recording:
        for _ in range(2):
            begin = len(recording.calls)
            run = scd_core.generate(model, list(prompts), compile=True, **kw)
            assert torch.equal(run.tokens.cpu(), eager.tokens.cpu()) and run.nfe == eager.nfe, \
                "the compiled passes (as a GPU replays them) gave other tokens than eager"
            runs.append(recording.calls[begin:])
    assert runs[0], "compile=True compiled no graph (did the pass run eager?)"
    gone, static = moved(*runs)
    return GraphInputs(len(runs[0]), fed_back(runs[0] + runs[1]), gone, static)


def check_graph_inputs(model, prompts: Sequence[str], cfg_scale: float, **settings) -> GraphInputs:
    """`read_graph_inputs`, checked: no compiled pass takes as an input a tensor a pass before
    returned or left on the session (`fed_back`: on a GPU it fails at the second pass), and the second run takes every static input at the first run's address
    (`moved`: on a GPU a static buffer at a new address records the graph again, kept
    forever). Returns what was read."""
    read = read_graph_inputs(model, prompts, cfg_scale, **settings)
    assert not read.fed_back, ("a compiled pass reads what an earlier one returned (write session tensors in place, "
                               "never assign them: scd_core.models.static): " + ", ".join(read.fed_back))
    assert not read.moved, (f"a second run took {len(read.moved)} of {read.static} static buffers at new addresses "
                            "(borrow them from the model's buffers: scd_core.models.static): " + ", ".join(read.moved))
    return read


# ------------------------------------------------------------------------------ on a GPU

def cuda_graphs_recorded(device: torch.device | str) -> int:
    """How many CUDA graphs CUDA-graph trees hold on `device` (every recording they keep);
    0 off a GPU."""
    device = torch.device(device)
    if device.type != "cuda":
        return 0
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.get_manager(device.index if device.index is not None else torch.cuda.current_device(),
                                          create_if_none_exists=False)
    if manager is None or manager.roots is None:
        return 0

    def count(nodes) -> int:
        return sum(1 + count([c for children in n.children.values() for c in children]) for n in nodes)
    return count([n for nodes in manager.roots.values() for n in nodes])


def check_cuda_graphs(model, prompts: Sequence[str], cfg_scale: float, **settings) -> int:
    """On the model's GPU: `generate(model, prompts, compile=True, **settings)` (SCD-MC, window 6
    unless `settings` say otherwise) replays its passes as CUDA graphs and gives eager's tokens,
    run after run. It fails, rather than passing without a graph, where the pass cannot
    compile (`scd_core.passes.problem`), where a capture is skipped (inductor's
    `cudagraph_or_error`), where the first run records no CUDA graph (the pass ran eager),
    and where a second run of the same shapes records any (a static buffer moved). Returns
    how many graphs the first run recorded."""
    import torch._dynamo
    import torch._inductor.config

    import scd_core
    from scd_core import passes

    kw = dict(method="scd-mc", window=6, seed=0, cfg_scale=cfg_scale) | settings
    eager = scd_core.generate(model, list(prompts), **kw)
    device = _device_of(model, prompts, cfg_scale)
    reason = passes.problem(device)
    assert reason is None, f"compile=True cannot compile on {device} ({reason}): the pass would run eager"
    torch._dynamo.reset()
    recorded = []
    with torch._inductor.config.patch({"triton.cudagraph_or_error": True}):
        for _ in range(2):
            run = scd_core.generate(model, list(prompts), compile=True, **kw)
            recorded.append(cuda_graphs_recorded(device) - sum(recorded))
            assert torch.equal(run.tokens.cpu(), eager.tokens.cpu()) and run.nfe == eager.nfe, \
                "the passes replayed as CUDA graphs gave other tokens than eager"
    assert recorded[0] > 0, f"no CUDA graph was recorded on {device} (did the pass run eager?)"
    assert recorded[1] == 0, f"a second run of the same shapes recorded {recorded[1]} more CUDA graphs (a static buffer moved)"
    return recorded[0]


def _device_of(model, prompts: Sequence[str], cfg_scale: float) -> torch.device:
    """The device a session of the model computes on (its first logits')."""
    return model.start(list(prompts), cfg_scale).first_logits.device
