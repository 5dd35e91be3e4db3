"""Counting the aten operations a decode dispatches, those that wait for the device, and the
tensors a pass makes from Python data or copies from the CPU to another device.

`OpCounter` is a `TorchDispatchMode`: every operation that reaches the dispatcher while it is
active is counted, and so is every operation that makes the host wait for the device (on a
GPU): reading a value (`item` / `_local_scalar_dense`), `nonzero`, and indexing or index
assignment with a boolean mask (their result's size depends on the data). It also counts
(`copies`) every copy of a CPU tensor to another device (`_to_copy`, `copy_`: on a GPU a
host-to-device copy; on `device="meta"` the only way a CPU tensor gets there), and, with a
`TorchFunctionMode` entered beside it, every tensor made from Python data (`made`:
`torch.tensor` / `torch.as_tensor` of a list or a number, which a dispatch mode sees only
when no device is given, as `lift_fresh`): on a GPU each is a host-to-device copy.

`counted(model)` wraps a model so that the operations inside its `start`, `step`,
`step_tree` and `keep_path` are left out: what is left is the engine's own. `model_only(model)`
does the opposite: only the operations inside its sessions' `step`, `step_tree` and
`keep_path` are counted (start the counter with `OpCounter(paused=True)`).
"""
from __future__ import annotations

import collections
from contextlib import contextmanager

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

SYNCING = {"aten._local_scalar_dense.default", "aten.item.default", "aten.nonzero.default",
           "aten.nonzero_static.default"}
COPYING = {"aten._to_copy.default", "aten.copy_.default", "aten.copy.default"}
FROM_DATA = {"tensor", "as_tensor", "asarray"}


class _PythonData(TorchFunctionMode):
    """Counts tensors made from Python data into its counter's `made`."""

    def __init__(self, counter: "OpCounter") -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.counter.paused and getattr(func, "__name__", "") in FROM_DATA and args \
                and not isinstance(args[0], torch.Tensor):
            self.counter.made[f"torch.{func.__name__}"] += 1
        return func(*args, **kwargs)


class OpCounter(TorchDispatchMode):
    def __init__(self, paused: bool = False) -> None:
        super().__init__()
        self.ops, self.syncs = collections.Counter(), collections.Counter()
        self.made, self.copies = collections.Counter(), collections.Counter()
        self.paused = int(paused)
        self._data = _PythonData(self)

    def __enter__(self):
        self._data.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._data.__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.paused:
            name = str(func)
            self.ops[name] += 1
            if name in SYNCING or (name.startswith(("aten.index.", "aten.index_put")) and _bool_index(args)):
                self.syncs[name] += 1
            if name in COPYING and _from_cpu(name, args, kwargs):
                self.copies[name] += 1
        return func(*args, **kwargs)

    @contextmanager
    def pause(self):
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1

    @contextmanager
    def resume(self):
        self.paused -= 1
        try:
            yield
        finally:
            self.paused += 1

    @property
    def total(self) -> int:
        return sum(self.ops.values())

    @property
    def total_syncs(self) -> int:
        return sum(self.syncs.values())


def _bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


def _from_cpu(name: str, args, kwargs) -> bool:
    """A copy whose source is a CPU tensor and whose result lies on another device."""
    if name == "aten._to_copy.default":
        source, target = args[0], kwargs.get("device")
    else:                                                   # copy_(destination, source)
        source, target = args[1], args[0].device
    return isinstance(source, torch.Tensor) and source.device.type == "cpu" \
        and target is not None and torch.device(target).type != "cpu"


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


class _Resumed:
    """A model whose sessions' `step`, `step_tree` and `keep_path` run with the counter resumed."""

    def __init__(self, inner, counter: OpCounter, calls: tuple[str, ...]) -> None:
        self._inner, self._counter, self._calls = inner, counter, calls

    def __getattr__(self, name: str):
        value = getattr(self._inner, name)
        if name == "start":
            return lambda *args, **kwargs: _Resumed(value(*args, **kwargs), self._counter,
                                                    ("step", "step_tree", "keep_path"))
        if name not in self._calls or not callable(value):
            return value

        def resumed(*args, **kwargs):
            with self._counter.resume():
                return value(*args, **kwargs)
        return resumed


def model_only(model, counter: OpCounter):
    """The model, with only its sessions' `step`, `step_tree` and `keep_path` counted (the
    counter made with `paused=True`)."""
    return _Resumed(model, counter, ())
