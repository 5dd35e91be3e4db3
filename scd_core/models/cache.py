"""One copy of each model per process, and at most one large model resident at a time.

    from scd_core.models import cache
    model = cache.get("janus-pro-1b", device="cuda")     # loads (downloads) once, then reuses

`get(name, **load_kwargs)` loads a model on first use and returns the same object afterwards;
it is thread-safe: loads run one at a time, and callers asking for a model being loaded wait
for it instead of loading it twice. Shipped (embedded) models stay resident. A large model
(weights from the Hub, or a local folder) is resident alone: before loading another, the
cache drops its reference to the previous one, runs `gc.collect()` and, with CUDA,
`torch.cuda.empty_cache()`, so the memory is free before the new weights arrive. A caller
still holding the old model keeps it alive until it lets go.

`load_kwargs` other than `progress` are part of the key (the same model on another device is
another entry). `put(name, model)` places a ready model (tests, embedders).
"""
from __future__ import annotations

import gc
import os
import threading
from collections.abc import Callable

from . import REGISTRY, load_model

NOT_IN_KEY = ("progress",)   # how a load reports progress does not change the model


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


class ModelCache:
    """Models by (name, load arguments); at most one for which `large(name)` is true."""

    def __init__(self, loader: Callable[..., object] = load_model, large: Callable[[str], bool] = is_large):
        self._loader = loader
        self._large = large
        self._models: dict[tuple, object] = {}
        self._lock = threading.Lock()        # guards _models
        self._load_lock = threading.Lock()   # one load at a time: each may download and allocate GBs

    @staticmethod
    def key(name: str, load_kwargs: dict) -> tuple:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name: expected a model name or path, got {name!r}")
        args = tuple(sorted((k, repr(v)) for k, v in load_kwargs.items() if k not in NOT_IN_KEY))
        return (os.fspath(name), args)

    def get(self, name: str, **load_kwargs):
        """The model `name` loaded with `load_kwargs`, loading it on first use."""
        key = self.key(name, load_kwargs)
        with self._lock:
            if key in self._models:
                return self._models[key]
        with self._load_lock:
            with self._lock:
                if key in self._models:          # loaded by another caller meanwhile
                    return self._models[key]
            if self._large(name):
                self._drop_large()
            model = self._loader(name, **load_kwargs)
            with self._lock:
                self._models[key] = model
            return model

    def put(self, name: str, model, **load_kwargs) -> None:
        """Keep a ready `model` under `name` (a large one replaces the large one held)."""
        key = self.key(name, load_kwargs)
        if self._large(name):
            self._drop_large()
        with self._lock:
            self._models[key] = model

    def peek(self, name: str, **load_kwargs):
        """The model if it is loaded, else None (never loads)."""
        with self._lock:
            return self._models.get(self.key(name, load_kwargs))

    def names(self) -> list[str]:
        """The names of the models held, in loading order."""
        with self._lock:
            return [name for name, _ in self._models]

    def clear(self) -> None:
        with self._lock:
            self._models.clear()
        release_memory()

    def _drop_large(self) -> None:
        with self._lock:
            dropped = [key for key in self._models if self._large(key[0])]
            for key in dropped:
                del self._models[key]
        if dropped:
            release_memory()


_default = ModelCache()
get = _default.get
put = _default.put
peek = _default.peek
names = _default.names
clear = _default.clear
