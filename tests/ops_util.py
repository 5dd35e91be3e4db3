"""Counting the aten operations a decode dispatches, and those that wait for the device.

`OpCounter` is a `TorchDispatchMode`: every operation that reaches the dispatcher while it is
active is counted, and so is every operation that makes the host wait for the device (on a
GPU): reading a value (`item` / `_local_scalar_dense`), `nonzero`, and indexing or index
assignment with a boolean mask (their result's size depends on the data). `counted(model)`
wraps a model so that the operations inside its `start`, `step`, `step_tree` and `keep_path`
are left out: what is left is the engine's own.
"""
from __future__ import annotations

import collections
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SYNCING = {"aten._local_scalar_dense.default", "aten.item.default", "aten.nonzero.default",
           "aten.nonzero_static.default"}


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops, self.syncs = collections.Counter(), collections.Counter()
        self.paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.paused:
            name = str(func)
            self.ops[name] += 1
            if name in SYNCING or (name.startswith(("aten.index.", "aten.index_put")) and _bool_index(args)):
                self.syncs[name] += 1
        return func(*args, **kwargs)

    @contextmanager
    def pause(self):
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def total_syncs(self) -> int:
        return sum(self.syncs.values())


def _bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


class _Paused:
    """An object whose methods named in `calls` run with the counter paused."""

    def __init__(self, inner, counter: OpCounter, calls: tuple[str, ...]) -> None:
        self._inner, self._counter, self._calls = inner, counter, calls

    def __getattr__(self, name: str):
        value = getattr(self._inner, name)
        if name not in self._calls or not callable(value):
            return value

        def paused(*args, **kwargs):
            with self._counter.pause():
                out = value(*args, **kwargs)
            return _Paused(out, self._counter, ("step", "step_tree", "keep_path")) if name == "start" else out
        return paused


def counted(model, counter: OpCounter):
    """The model, with the operations of its sessions left out of `counter`."""
    return _Paused(model, counter, ("start", "decode"))
