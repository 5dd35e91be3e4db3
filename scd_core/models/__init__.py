"""Model registry: `load_model(name_or_path)` resolves a name lazily to a TokenModel.

Each entry names a module and a loader function; the module is imported only when the
model is requested, so importing scd_core never imports transformers or loads weights.

A family module whose models come from the Hugging Face Hub provides, for its registry names:
- `hub_files(name) -> tuple[hub.HubFiles, ...]`: the repositories and files it downloads;
- `gpu_reason(name) -> str | None`: why it needs a CUDA GPU, or None;
- optionally `missing_files(name) -> list[HubFiles]` (files found outside the Hugging Face
  cache count as present) and `manual_missing(name) -> str | None` (what no download gives).

`model_status(name)` reads these without loading weights or touching the network, so the app
can label its model list; `load_model` downloads on first use (`local_files_only`,
`progress`, `trust_pickle` are passed to the adapters that fetch files).
"""
from __future__ import annotations

import importlib
import inspect
import os

from .registry import REGISTRY, ModelEntry, available_models, entry_for_folder, register
from .status import STATES, ModelStatus, availability, gpu_available, gpu_seconds, model_status

# Options about where files come from; passed only to the loaders of models with files.
HUB_OPTIONS = ("local_files_only", "progress", "trust_pickle")


def load_model(name_or_path: str, **kwargs):
    """Load a TokenModel by registry name, or from a local folder holding a known model.

    Registry models whose weights are not shipped are downloaded from the Hugging Face Hub on
    first use (terminal progress bars; `progress=callable(done, total, repo)` for a GUI), and
    read from its cache afterwards without any request. `local_files_only=True` (or
    HF_HUB_OFFLINE=1) never downloads. `trust_pickle=` names checkpoint files that may be
    loaded with full pickle when `torch.load(weights_only=True)` refuses them.
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ValueError(f"model: expected a model name or a path, got {name_or_path!r}; "
                         f"known names: {', '.join(REGISTRY)}")
    entry = REGISTRY.get(name_or_path)
    if entry is None and os.path.isdir(name_or_path):
        entry = entry_for_folder(name_or_path)
    if entry is None:
        raise ValueError(f"model: unknown model {name_or_path!r}; known names: {', '.join(REGISTRY)} "
                         "or a local folder of a supported model")
    module = importlib.import_module(f"scd_core.models.{entry.module}")
    loader = getattr(module, entry.loader)
    hub = {key: kwargs.pop(key) for key in HUB_OPTIONS if key in kwargs}
    if entry.needs_weights:
        accepted = inspect.signature(loader).parameters
        for key, value in hub.items():
            if key in accepted:
                kwargs[key] = value
            elif value is not None:
                raise ValueError(f"{key}: {entry.name} does not take it (its files are read without pickle)")
    return loader(name_or_path, **kwargs)


__all__ = ["REGISTRY", "ModelEntry", "register", "available_models", "load_model", "availability",
           "ModelStatus", "STATES", "model_status", "gpu_available", "gpu_seconds", "HUB_OPTIONS"]
