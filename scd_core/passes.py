"""Which pass a run runs: a chain or a draft tree, eager or compiled. The one place that chooses.

`pass_for(session, plan)` returns the function a run (`scd_core.decoding.decode`) or a server
(`scd_core.serve`) calls once per forward pass:

- eager: `chain.decode_pass`, or `tree_pass.decode_pass` when the plan feeds a draft tree;
- compiled (`Settings.compile`: `generate(..., compile=True)`, `scd-bench --compile`,
  `scd-serve --compile`, the page's `SCD_COMPILE=1`), with `torch.compile(fullgraph=True)`:
  when the session says its steps can be traced (`Session.compilable`), the whole pass, the
  model's step included (a tree's `step_tree` and `keep_path`), is one graph (`fused_pass`);
  otherwise the pass's two halves are compiled around the model's own eager step
  (`split_pass`, `split_tree_pass`).

On a GPU the graphs are compiled with `mode="reduce-overhead"` and replayed as CUDA graphs
(`replays`), so a pass costs one launch instead of hundreds. CUDA-graph trees free a replay's
outputs at the next replay, so no replay reads what the one before returned: the pass writes
the new state in place into static buffers (`state_buffers`: two States, read and written in
turn), and what else it returns (the verdict) is cloned as it returns. The model's session
follows the same rules (`scd_core.models.static`). On the CPU the same `fullgraph` graph runs
as compiled C++ and returns its state.

The pass has no operation that waits for the device and no shape that depends on data, so
each function is one graph. A graph is compiled for the shapes and settings it first meets; a
new batch size compiles once more with the batch dimension dynamic, so a server that sees many
batch sizes compiles a few graphs, never one per pass (`tests/test_compiled.py` counts them).
Compiling takes tens of seconds on a small CPU; inductor keeps what it compiled on disk
(`TORCHINDUCTOR_CACHE_DIR`, by default a folder under the system's temporary directory), so a
second process starts warm (docs/benchmarks.md has both times). The compiled pass computes p
with fused kernels whose float32 rounding may differ from eager's in the last bit: the tokens
are the same as eager's on every golden case (`tests/test_compiled.py`), not bit for bit by
construction.

Where nothing can compile (no C++ compiler for the CPU, no Triton for a GPU), `problem`
says why; the run then warns once, in one line, and runs the eager pass.
"""
from __future__ import annotations

import functools
import os
import shutil
import warnings
import weakref
from typing import Callable

import torch

from scd_core import chain, memory, tree_pass
from scd_core.chain import Plan, State, Verdict
from scd_core.clocks import TimedSession
from scd_core.models.static import Buffers
from scd_core.protocols import Session

PassFunction = Callable[[TimedSession, State, Plan], tuple[State, Verdict]]
RECOMPILE_LIMIT = 64      # graphs kept per function: the settings and batch sizes a server meets


def pass_for(session: TimedSession, plan: Plan) -> PassFunction:
    """The function that runs one pass of this run (see the module's docstring). A session
    that keeps tree slots in its cache (`reserve_tree`) gets room for this plan's tree first,
    so that no pass allocates."""
    if plan.uses_tree and hasattr(session.session, "reserve_tree"):
        session.session.reserve_tree(tree_pass.nodes(plan))
    eager = eager_pass(plan)
    if not plan.settings.compile:
        return eager
    device = session.first_logits.device
    reason = problem(device)
    if reason is not None:
        _warn_once(f"compile: {reason}; the pass runs eager")
        return eager
    if fusable(session.session, plan):
        return functools.partial(fused_pass, eager)
    return split_tree_pass if plan.uses_tree else split_pass


def eager_pass(plan: Plan) -> PassFunction:
    """The pass as written: a chain's, or a draft tree's."""
    return tree_pass.decode_pass if plan.uses_tree else chain.decode_pass


def fusable(session: Session, plan: Plan) -> bool:
    """Whether the model's step compiles with the pass (a chain's, or a tree's with
    `step_tree` and `keep_path`): the session says its steps can be traced
    (`Session.compilable`)."""
    return bool(getattr(session, "compilable", False))


@functools.cache
def problem(device: torch.device | str = "cpu") -> str | None:
    """Why the pass cannot be compiled on this device, in one line; None when it can (asked
    once per device and process: a server asks at every pass)."""
    device = torch.device(device)
    if device.type == "cuda":
        from torch.utils._triton import has_triton
        return None if has_triton() else "no Triton for this GPU (pip install triton)"
    if device.type != "cpu":
        return f"compiling is not supported here on {device.type}"
    compilers = [os.environ.get("CXX"), "g++", "c++", "clang++"]
    if not any(c and shutil.which(c) for c in compilers):
        return "no C++ compiler found (install g++, or set CXX)"
    return None


def replays(device: torch.device) -> bool:
    """Whether a compiled pass on `device` is replayed as a CUDA graph: on a GPU
    (`scd_core.testing.recorded_passes` says yes on the CPU, to check that path there)."""
    return device.type == "cuda"


def compiled(fn: Callable, device: torch.device) -> Callable:
    """`fn` compiled whole for `device` (a graph break is an error, not a silent slow path);
    where it `replays` as a CUDA graph, its outputs cloned as it returns."""
    if not replays(device):
        return _compiled(fn, "default")
    graph = _compiled(fn, "reduce-overhead")

    def replayed(*args):
        torch.compiler.cudagraph_mark_step_begin()          # a new pass: the last one's outputs are ours
        return _clone_tensors(graph(*args))
    return replayed


@functools.cache
def _compiled(fn: Callable, mode: str) -> Callable:
    import torch._dynamo
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    return torch.compile(fn, fullgraph=True, mode=mode)


def _clone_tensors(out):
    """`out` with every tensor cloned (a CUDA graph's outputs are overwritten by its next replay)."""
    if isinstance(out, torch.Tensor):
        return out.clone()
    if isinstance(out, tuple):
        items = [_clone_tensors(o) for o in out]
        return type(out)(*items) if hasattr(out, "_fields") else tuple(items)
    return out


def advanced(session: TimedSession, fn: Callable, *args) -> tuple:
    """`fn(*args)` compiled, `fn` returning (the new State, ...) from the State among `args`.
    Where it `replays`, the State is read from one of the session's two state buffers and the
    new one written into the other in place (`state_buffers`), so that no replay reads the
    one before's output and the state is not copied out and back in."""
    state = next(a for a in args if isinstance(a, State))
    device = state.n.device
    if not replays(device):
        return compiled(fn, device)(*args)
    before, after = state_buffers(session, state)
    return (after, *compiled(written, device)(after, fn, *[before if a is state else a for a in args]))


def written(after: State, fn: Callable, *args) -> tuple:
    """`fn(*args)` with the State it returns first copied into `after`'s tensors, the rest
    returned: what `advanced` compiles."""
    state, *rest = fn(*args)
    for mine, value in zip(_tensors(after), _tensors(state)):
        mine.copy_(value)
    return tuple(rest)


_STATES: "weakref.WeakKeyDictionary[TimedSession, list[State]]" = weakref.WeakKeyDictionary()
_STATE_BUFFERS = Buffers(memory.idle_cap(None))


def state_buffers(session: TimedSession, state: State) -> tuple[State, State]:
    """The two States in static tensors, borrowed for `session`, that its replayed passes read
    and write in turn: (the one holding `state`, the other). `state` is copied in unless it is
    one of them (a run's first pass, or rows that joined or left: new shapes borrow a new pair).
    Both stay readable until the pass after next: a record reads the state before and after
    its pass."""
    pair = _STATES.get(session)
    if pair is None or [t.shape for t in _tensors(pair[0])] != [t.shape for t in _tensors(state)]:
        if pair is not None:
            _STATE_BUFFERS.give_back(_tensors(pair[0]) + _tensors(pair[1]))
        flat = _STATE_BUFFERS.zeros(session, [(t.shape, t.dtype) for t in _tensors(state)] * 2, state.n.device)
        half = len(flat) // 2
        pair = _STATES[session] = [State(*flat[:half]), State(*flat[half:])]
    if state is pair[1]:
        pair.reverse()
    elif state is not pair[0]:
        for mine, value in zip(_tensors(pair[0]), _tensors(state)):
            mine.copy_(value)
    return pair[0], pair[1]


def _tensors(state: State) -> list[torch.Tensor]:
    return [getattr(state, name) for name in State.__dataclass_fields__]


def fused_pass(pass_fn: Callable, session: TimedSession, state: State, plan: Plan) -> tuple[State, Verdict]:
    """`pass_fn` (a chain's or a tree's pass) compiled with the model's step: one graph. Its
    time counts as the model's (`TimedSession.seconds`): the two cannot be told apart inside it."""
    return session.timed(advanced, session, pass_fn, session.session, state, plan)


def split_pass(session: TimedSession, state: State, plan: Plan) -> tuple[State, Verdict]:
    """`chain.decode_pass` with its halves compiled around the model's eager step."""
    device = state.n.device
    start, fed = compiled(chain.window, device)(state, plan)
    logits = session.step(fed, start)
    state, verdict = advanced(session, chain.advance, state, logits, start, plan)
    return state, verdict._replace(fed=fed)


def split_tree_pass(session: TimedSession, state: State, plan: Plan) -> tuple[State, Verdict]:
    """`tree_pass.decode_pass` with its halves compiled around the model's eager step."""
    device = state.n.device
    start, fed, parents, tree = compiled(tree_pass.feed, device)(state, plan)
    logits = session.step_tree(fed, parents, start)
    state, verdict, path = advanced(session, tree_pass.advance, state, logits, start, plan, tree)
    session.keep_path(path)
    return state, verdict._replace(fed=fed, parents=parents)


@functools.cache
def _warn_once(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)
