"""One copy of each model per process, and a bounded set of large models resident per device.

    from scd_core.models import cache
    model = cache.get("janus-pro-1b", device="cuda")     # loads (downloads) once, then reuses

`get(name, **load_kwargs)` loads a model on first use and returns the same object afterwards;
it is thread-safe: loads run one at a time, and callers asking for a model being loaded wait
for it instead of loading it twice. Shipped (embedded) models stay resident. Large models
(weights from the Hub, or a local folder) are resident by the rule of a `Residency`: by default
one per device, or as many as fit a byte budget per device. Before loading a large model the
cache drops the ones that must go (`room_for`), runs `gc.collect()` and, with CUDA,
`torch.cuda.empty_cache()`, so their memory is free before the new weights arrive. A caller
still holding a dropped model keeps it alive until it lets go: a front end that serves the
model (servers, row decoders, worker processes) lets go of it first, then calls `unload`
(`demo.models.Models` does; `scd_core.workers.ProcessClient` keeps its own `Residency` of
worker processes). A large model never loads while one it replaces on the same device is
still alive: the cache collects again a few times (`GC_RETRIES`), then refuses the load with
a `StillHeldError` (a `DecodeError`: its message is for the visitor who asked), and the old
model, still held, stays usable (asked for again, it is the same object, not a second copy).

`load_kwargs` other than `progress` are part of the key (the same model on another device is
another entry). `put(name, model)` places a ready model (tests, embedders).
"""
from __future__ import annotations

import gc
import logging
import os
import threading
import time
import types
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from . import REGISTRY, load_model

log = logging.getLogger(__name__)

from scd_core.client import DecodeError

NOT_IN_KEY = ("progress",)   # how a load reports progress does not change the model
DRAIN_S = 120.0     # longest wait for a model's running work to end before it is unloaded for another
GC_RETRIES = 3      # collections more, GC_RETRY_S apart, before a load is refused for a model still alive
GC_RETRY_S = 0.5
QUIET_S = 5.0       # seconds without a use (a row, a picture) before a model counts as unused: a
                    # run's last pictures come after its last pass, a slow-motion run's every 2 s at most


def is_large(name: str) -> bool:
    """Weights that are not shipped: a Hub model of the registry, or anything given by path."""
    entry = REGISTRY.get(name)
    return entry.needs_weights if entry is not None else True


def release_memory() -> None:
    """Collect unreferenced objects and hand cached CUDA blocks back to the driver."""
    gc.collect()
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def device_of(load_kwargs: dict) -> str:
    """The device a load with these arguments places the model on, as one name per device
    ("cuda:0", "cpu"): None and "auto" are the loaders' default (the GPU if there is one)."""
    import torch

    device = load_kwargs.get("device")
    if device is None or device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        return str(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return str(device)


_NOT_HOLDERS = (types.ModuleType, type, types.FunctionType, types.MethodType, types.BuiltinFunctionType)


def model_bytes(model) -> int:
    """Bytes of the weights a model holds: the parameters and buffers of the torch modules
    among its attributes (two levels deep, and in lists, tuples and dicts there), each storage
    once, on any device."""
    import torch

    seen_objects: set[int] = set()
    storages: dict[tuple, int] = {}

    def visit(obj, depth: int) -> None:
        if id(obj) in seen_objects or depth > 3:
            return
        seen_objects.add(id(obj))
        if isinstance(obj, torch.nn.Module):
            for t in [*obj.parameters(), *obj.buffers()]:
                if not t.is_meta:
                    storage = t.untyped_storage()
                    storages[(t.device.type, t.device.index, storage.data_ptr())] = storage.nbytes()
            return
        if isinstance(obj, torch.Tensor):
            if not obj.is_meta:
                storage = obj.untyped_storage()
                storages[(obj.device.type, obj.device.index, storage.data_ptr())] = storage.nbytes()
            return
        if isinstance(obj, (list, tuple)):
            values = obj
        elif isinstance(obj, dict):
            values = obj.values()
        else:
            values = getattr(obj, "__dict__", {}).values()
        for value in values:
            if isinstance(value, (torch.nn.Module, torch.Tensor, list, tuple, dict)) or \
                    (hasattr(value, "__dict__") and not isinstance(value, _NOT_HOLDERS)):
                visit(value, depth + 1)

    visit(model, 0)
    return sum(storages.values())


# ------------------------------------------------------------------------- residency

@dataclass(frozen=True)
class Swap:
    """Large models being unloaded (`leaving`) to make room for another (`arriving`), since
    `since` (time.monotonic())."""

    leaving: tuple[str, ...]
    arriving: str
    since: float


@dataclass(frozen=True)
class Unloaded:
    """Why a model is no longer resident: to make room for `arriving`, or (None) after
    `idle_s` seconds without a use; `at` is time.monotonic()."""

    name: str
    arriving: str | None
    idle_s: float | None
    at: float


def _name(key: Hashable) -> str:
    """A resident's model name (a cache key is (name, load arguments))."""
    return key[0] if isinstance(key, tuple) else key


class Residency:
    """Which models are resident on each device, and which large ones must go to make room for
    another. `budget`: bytes of large models per device; None: one large model per device.
    A model's bytes are those measured when it was last loaded (`model_bytes`); one never
    loaded here counts as the whole budget, so loading it first unloads every other. Small
    (embedded) models are listed but never unloaded for room.

    It also keeps what a front end tells a visitor: the swap under way (`swap`), and why a
    model is no longer resident (`why_not_resident`). `drain_s` and `quiet_s`: how long a swap
    waits for the leaving model's work to end, and how long a model must be unused to count
    as done with (`DRAIN_S`, `QUIET_S`). Thread-safe."""

    def __init__(self, budget: int | None = None, drain_s: float = DRAIN_S, quiet_s: float = QUIET_S) -> None:
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise ValueError(f"budget: expected a whole number of bytes >= 1 or None, got {budget!r}")
        self.budget, self.drain_s, self.quiet_s = budget, drain_s, quiet_s
        self._lock = threading.Lock()
        self._resident: dict[Hashable, _Entry] = {}      # least recently used first
        self._measured: dict[str, int] = {}              # name -> bytes at its last load
        self._unloaded: dict[str, Unloaded] = {}
        self._swap: Swap | None = None

    def room_for(self, key: Hashable, device: str) -> list[Hashable]:
        """The large residents of `device` to unload, least recently used first, before the
        large model `key` loads there."""
        with self._lock:
            others = [(k, e.nbytes) for k, e in self._resident.items() if e.device == device and e.large and k != key]
            if self.budget is None:
                return [k for k, _ in others]
            cost = lambda nbytes: self.budget if nbytes is None else nbytes  # noqa: E731
            need, held = self._measured.get(_name(key), self.budget), sum(cost(n) for _, n in others)
            out = []
            for k, nbytes in others:
                if held + need <= self.budget:
                    break
                out.append(k)
                held -= cost(nbytes)
            return out

    def loaded(self, key: Hashable, device: str, nbytes: int | None = None, large: bool = True) -> None:
        """`key` is resident on `device` (`nbytes`: measured; None until it is, `measured`,
        meanwhile what its last load measured, if any)."""
        with self._lock:
            self._resident.pop(key, None)
            if nbytes is None:
                nbytes = self._measured.get(_name(key))
            self._resident[key] = _Entry(device, nbytes, large)
            self._unloaded.pop(_name(key), None)
            if nbytes is not None:
                self._measured[_name(key)] = nbytes

    def measured(self, key: Hashable, nbytes: int) -> None:
        with self._lock:
            if key in self._resident:
                self._resident[key].nbytes = nbytes
            self._measured[_name(key)] = nbytes

    def used(self, key: Hashable) -> None:
        """`key` was just used: the last of its device to be unloaded."""
        with self._lock:
            if key in self._resident:
                self._resident[key] = self._resident.pop(key)

    def device_of(self, key: Hashable) -> str | None:
        """The device `key` is resident on (None: not resident)."""
        with self._lock:
            entry = self._resident.get(key)
            return None if entry is None else entry.device

    def unloaded(self, key: Hashable, arriving: str | None = None, idle_s: float | None = None) -> None:
        """`key` is no longer resident: unloaded for `arriving`, or after `idle_s` s unused."""
        with self._lock:
            self._resident.pop(key, None)
            self._unloaded[_name(key)] = Unloaded(_name(key), arriving, idle_s, time.monotonic())

    def resident(self) -> dict[str, int | None]:
        """The resident large models' names -> bytes (None: not measured yet), least recently used first."""
        with self._lock:
            return {_name(k): e.nbytes for k, e in self._resident.items() if e.large}

    def is_resident(self, name: str) -> bool:
        with self._lock:
            return any(_name(k) == name for k in self._resident)

    def why_not_resident(self, name: str) -> Unloaded | None:
        """Why `name` was unloaded, if it was and has not been loaded since."""
        with self._lock:
            return self._unloaded.get(name)

    @property
    def swap(self) -> Swap | None:
        with self._lock:
            return self._swap

    def swapping(self, leaving, arriving: str) -> "_Swapping":
        """A context in which `leaving` (keys) are unloaded for `arriving` (a name)."""
        return _Swapping(self, Swap(tuple(_name(k) for k in leaving), arriving, time.monotonic()))


@dataclass
class _Entry:
    device: str
    nbytes: int | None
    large: bool


class _Swapping:
    def __init__(self, residency: Residency, swap: Swap) -> None:
        self.residency, self.value = residency, swap

    def __enter__(self) -> Swap:
        with self.residency._lock:
            self.residency._swap = self.value
        return self.value

    def __exit__(self, *exc) -> None:
        with self.residency._lock:
            self.residency._swap = None


def wait_until(done: Callable[[], bool], timeout: float, every: float = 0.02) -> bool:
    """Poll `done()` until it is true (True) or `timeout` s have passed (False)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)
    return True


def busy_message(leaving: str, arriving: str, drain_s: float) -> str:
    """What a request for `arriving` is told when `leaving` stayed busy for the whole drain."""
    return (f"{arriving} could not be loaded: {leaving} is still in use here after {drain_s:.0f} s, and the "
            f"device has no room for both; please try again in a minute")


class StillHeldError(DecodeError):
    """A large model was not loaded: a model it replaces on the same device is still alive
    (something holds it), and the device has no room for both."""


def held_message(leaving: str, arriving: str) -> str:
    """What a request for `arriving` is told when `leaving` is still held in memory."""
    return (f"{arriving} could not be loaded: {leaving} is still held in memory here, and the device has no "
            f"room for both; please try again in a minute")


def unloaded_message(leaving: str, arriving: str | None) -> str:
    """What a row of `leaving` is told if it is still running when its model goes."""
    why = f" to make room for {arriving}" if arriving else ""
    return f"{leaving} was unloaded{why} before this picture was finished; please try again"


# ------------------------------------------------------------------------------ cache

class ModelCache:
    """Models by (name, load arguments); large ones (`large(name)`) resident by `residency`'s
    rule (default: one per device)."""

    def __init__(self, loader: Callable[..., object] = load_model, large: Callable[[str], bool] = is_large,
                 residency: Residency | None = None):
        self._loader = loader
        self._large = large
        self.residency = residency or Residency()
        self._models: dict[tuple, object] = {}
        self._alive: dict[tuple, tuple[weakref.ref, str]] = {}   # unloaded large models still held: (ref, device)
        self._lock = threading.Lock()        # guards _models and _alive
        self._load_lock = threading.Lock()   # one load at a time: each may download and allocate GBs

    @staticmethod
    def key(name: str, load_kwargs: dict) -> tuple:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name: expected a model name or path, got {name!r}")
        args = tuple(sorted((k, repr(v)) for k, v in load_kwargs.items() if k not in NOT_IN_KEY))
        return (os.fspath(name), args)

    def is_large(self, name: str) -> bool:
        return self._large(name)

    def get(self, name: str, **load_kwargs):
        """The model `name` loaded with `load_kwargs`, loading it on first use (after
        unloading the large models `room_for` names; a `StillHeldError` if one of them, or
        another large model unloaded from the device, is still alive)."""
        key = self.key(name, load_kwargs)
        with self._lock:
            if key in self._models:
                self.residency.used(key)
                return self._models[key]
        with self._load_lock:
            with self._lock:
                if key in self._models:          # loaded by another caller meanwhile
                    return self._models[key]
            large, device = self._large(name), device_of(load_kwargs)
            if large and (model := self._adopt(key, device)) is not None:
                return model
            if large:
                self._make_room(key, name, device)
            model = self._loader(name, **load_kwargs)
            with self._lock:
                self._models[key] = model
            self.residency.loaded(key, device, model_bytes(model), large)
            return model

    def put(self, name: str, model, **load_kwargs) -> None:
        """Keep a ready `model` under `name` (a large one takes the room `room_for` gives it)."""
        key = self.key(name, load_kwargs)
        with self._load_lock:
            large, device = self._large(name), device_of(load_kwargs)
            if large:
                self._make_room(key, name, device, refuse=False)
            self.residency.loaded(key, device, model_bytes(model), large)
            with self._lock:
                self._models[key] = model

    def _make_room(self, key: tuple, name: str, device: str, refuse: bool = True) -> None:
        """Unload the large models `room_for` names; then, unless every large model unloaded
        from `device` is gone (after `GC_RETRIES` more collections), a `StillHeldError`."""
        for old in self.residency.room_for(key, device):
            self._unload(old, arriving=name)
        for _ in range(GC_RETRIES):
            if not self._still_alive(device):
                return
            time.sleep(GC_RETRY_S)
            release_memory()
        alive = self._still_alive(device)
        if alive and refuse:
            log.warning("%s not loaded: %s is still held in memory", name, ", ".join(alive))
            raise StillHeldError(held_message(" and ".join(alive), name))

    def _still_alive(self, device: str) -> list[str]:
        """The names of the large models unloaded from `device` that something still holds."""
        with self._lock:
            for k in [k for k, (ref, _) in self._alive.items() if ref() is None]:
                del self._alive[k]
            return [_name(k) for k, (_, d) in self._alive.items() if d == device]

    def _adopt(self, key: tuple, device: str):
        """The model under `key` if it was unloaded but is still alive: cached again (no
        second copy), else None."""
        with self._lock:
            ref, _ = self._alive.pop(key, (None, None))
            model = ref() if ref is not None else None
            if model is not None:
                self._models[key] = model
        if model is not None:
            self.residency.loaded(key, device, model_bytes(model), True)
        return model

    def peek(self, name: str, **load_kwargs):
        """The model if it is loaded, else None (never loads)."""
        with self._lock:
            return self._models.get(self.key(name, load_kwargs))

    def held(self, key: tuple):
        """The model under a key (from `room_for`), or None."""
        with self._lock:
            return self._models.get(key)

    def names(self) -> list[str]:
        """The names of the models held, in loading order."""
        with self._lock:
            return [name for name, _ in self._models]

    def room_for(self, name: str, **load_kwargs) -> list[tuple]:
        """The keys of the large models that loading `name` would unload (none for a small one)."""
        if not self._large(name):
            return []
        return [k for k in self.residency.room_for(self.key(name, load_kwargs), device_of(load_kwargs))
                if k in self._models]

    def unload(self, key: tuple, arriving: str | None = None, idle_s: float | None = None) -> bool:
        """Drop the model under `key` (from `room_for`) and return its memory; True when no
        reference to it is left anywhere (False: a caller still holds it, logged)."""
        with self._load_lock:
            return self._unload(key, arriving, idle_s)

    def clear(self) -> None:
        with self._lock:
            keys = list(self._models)
            self._models.clear()
            self._alive.clear()
        for key in keys:
            self.residency.unloaded(key)
        release_memory()

    def _unload(self, key: tuple, arriving: str | None = None, idle_s: float | None = None) -> bool:
        device = self.residency.device_of(key)
        with self._lock:
            model = self._models.pop(key, None)
        self.residency.unloaded(key, arriving, idle_s)
        if model is None:
            return True
        try:
            gone = weakref.ref(model)
        except TypeError:                        # an object without weak references: not checked
            gone = None
        del model
        release_memory()
        if gone is not None and gone() is not None:
            log.warning("%s was unloaded but is still referenced: its memory is not returned", _name(key))
            if device is not None and self._large(_name(key)):
                with self._lock:
                    self._alive[key] = (gone, device)
            return False
        return True


_default = ModelCache()
get = _default.get
put = _default.put
peek = _default.peek
names = _default.names
clear = _default.clear
room_for = _default.room_for
held = _default.held
unload = _default.unload
residency = _default.residency
