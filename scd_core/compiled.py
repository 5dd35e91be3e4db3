"""The pass, compiled: `torch.compile(fullgraph=True)` of the pure pass, at fixed shapes.

With `Settings.compile` (`generate(..., compile=True)`, `scd-bench --compile`, `scd-serve
--compile`, the page's `SCD_COMPILE=1`), a run's passes go through `pass_for(session, plan)`:

- a chain whose session can be traced (`Session.compilable`: the embedded models) compiles
  `decoding.decode_pass` whole, the model's step included: one graph per pass (on a GPU, the
  graph CUDA graphs capture);
- otherwise the pass's two halves are compiled around the model's own step: `decoding.window`
  and `decoding.advance` (a chain), or `tree_pass.feed` and `tree_pass.advance` (a tree).

The pass has no operation that waits for the device and no shape that depends on data, so
each half is one graph. A graph is compiled for the shapes and settings it first meets; a new
batch size compiles once more with the batch dimension dynamic, so a server that sees many
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
from typing import Callable

import torch

from scd_core import decoding, tree_pass
from scd_core.decoding import Plan, State, Verdict
from scd_core.protocols import Session

PassFunction = Callable[["decoding.TimedSession", State, Plan], tuple[State, Verdict]]
RECOMPILE_LIMIT = 64      # graphs kept per function: the settings and batch sizes a server meets


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


@functools.cache
def _compiled(fn: Callable) -> Callable:
    """`fn` compiled whole (a graph break is an error, not a silent slow path)."""
    import torch._dynamo
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    return torch.compile(fn, fullgraph=True)


def fusable(session: Session, plan: Plan) -> bool:
    """Whether the model's step compiles with the pass: a chain, on a session that says its
    step is traceable (`Session.compilable`)."""
    return not plan.uses_tree and bool(getattr(session, "compilable", False))


def pass_for(session: "decoding.TimedSession", plan: Plan) -> PassFunction:
    """The function that runs one pass of this run: the compiled pass, or `decoding.decode_pass`
    when the run is not compiled or nothing can compile here (said once, in a warning)."""
    if not plan.settings.compile:
        return decoding.decode_pass
    reason = problem(session.first_logits.device)
    if reason is not None:
        _warn_once(f"compile: {reason}; the pass runs eager")
        return decoding.decode_pass
    if fusable(session.session, plan):
        return fused_pass
    return split_tree_pass if plan.uses_tree else split_pass


def fused_pass(session: "decoding.TimedSession", state: State, plan: Plan) -> tuple[State, Verdict]:
    """`decoding.decode_pass` compiled with the model's step: one graph. Its time counts as
    the model's (`TimedSession.seconds`): the two cannot be told apart inside one graph."""
    return session.timed(_compiled(decoding.decode_pass), session.session, state, plan)


def split_pass(session: "decoding.TimedSession", state: State, plan: Plan) -> tuple[State, Verdict]:
    """`decoding.decode_pass` with its halves compiled around the model's eager step."""
    start, fed = _compiled(decoding.window)(state, plan)
    logits = session.step(fed, start)
    state, verdict = _compiled(decoding.advance)(state, logits, start, plan)
    return state, verdict._replace(fed=fed)


def split_tree_pass(session: "decoding.TimedSession", state: State, plan: Plan) -> tuple[State, Verdict]:
    """`tree_pass.decode_pass` with its halves compiled around the model's eager step."""
    start, fed, parents, tree = _compiled(tree_pass.feed)(state, plan)
    logits = session.step_tree(fed, parents, start)
    state, verdict, path = _compiled(tree_pass.advance)(state, logits, start, plan, tree)
    session.keep_path(path)
    return state, verdict._replace(fed=fed, parents=parents)


@functools.cache
def _warn_once(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)
