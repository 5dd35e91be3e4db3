"""Model registry: `load_model(name_or_path)` resolves a name lazily to a TokenModel.

Each entry names a module and a loader function; the module is imported only when the
model is requested, so importing scd_core never imports transformers or loads weights.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelEntry:
    name: str
    module: str            # module under scd_core.models
    loader: str            # function in that module: loader(name_or_path, **kwargs) -> TokenModel
    kind: str              # "image" or "video"
    description: str
    needs_weights: bool    # True when weights must be present locally (not shipped)
    test_only: bool = False  # for tests and timing, nothing to look at: demos leave it out


REGISTRY: dict[str, ModelEntry] = {}


def register(entry: ModelEntry) -> None:
    REGISTRY[entry.name] = entry


def _builtin_entries() -> list[ModelEntry]:
    e = ModelEntry
    return [
        e("toy", "toy", "load_toy", "image", "exactly enumerable toy model (V=3, N=5)", False, test_only=True),
        e("toy-grid", "toy", "load_toy_grid", "image", "fast synthetic grid model with tunable entropy", False, test_only=True),
        e("random-logits", "toy", "load_random_logits", "image", "instant random logits: times the engine alone", False, test_only=True),
        e("texture", "texture", "load_texture", "image", "synthetic textures (hand-built, not trained): where coupling helps most", False),
        e("tiny", "tiny", "load_tiny", "image", "embedded emoji model (32x32, 8x8 tokens)", False),
        e("tiny-video", "tiny", "load_tiny_video", "video", "embedded emoji clip model", False),
        e("janus-pro-1b", "janus", "load_janus", "image", "Janus-Pro 1B (deepseek-community/Janus-Pro-1B)", True),
        e("janus-pro-7b", "janus", "load_janus", "image", "Janus-Pro 7B (deepseek-community/Janus-Pro-7B)", True),
        e("emu3-gen", "emu3", "load_emu3", "image", "Emu3-Gen (BAAI/Emu3-Gen-hf)", True),
        e("lumina-mgpt-7b-512", "lumina", "load_lumina", "image", "Lumina-mGPT 7B, 512 px", True),
        e("lumina-mgpt-7b-768", "lumina", "load_lumina", "image", "Lumina-mGPT 7B, 768 px", True),
        e("lumina-mgpt-7b-1024", "lumina", "load_lumina", "image", "Lumina-mGPT 7B, 1024 px", True),
        e("llamagen-c2i", "llamagen", "load_llamagen", "image", "LlamaGen class-conditional (GPT-B, 256 px)", True),
        e("llamagen-t2i", "llamagen", "load_llamagen", "image", "LlamaGen text-conditional (XL, 256/512 px)", True),
        e("cosmos-1-ar-4b", "cosmos", "load_cosmos", "video", "Cosmos-1.0-Autoregressive-4B video continuation", True),
        e("cosmos-1-ar-5b-video2world", "cosmos", "load_cosmos", "video", "Cosmos-1.0-Autoregressive-5B-Video2World", True),
    ]


for _entry in _builtin_entries():
    register(_entry)


def available_models() -> list[str]:
    return list(REGISTRY)


def availability(name: str) -> str | None:
    """None when `name` can be loaded here; otherwise a one-line reason (no weights, no GPU...).

    Cheap: never loads weights. Family modules may define `availability(name) -> str | None`.
    """
    entry = REGISTRY.get(name)
    if entry is None:
        return f"unknown model {name!r}"
    try:
        module = importlib.import_module(f"scd_core.models.{entry.module}")
    except ImportError as exc:
        return f"its adapter cannot be imported here ({exc})"
    check = getattr(module, "availability", None)
    return check(name) if check is not None else None


def load_model(name_or_path: str, **kwargs):
    """Load a TokenModel by registry name, or from a local folder holding a known model."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ValueError(f"model: expected a model name or a path, got {name_or_path!r}; "
                         f"known names: {', '.join(REGISTRY)}")
    entry = REGISTRY.get(name_or_path)
    if entry is None and os.path.isdir(name_or_path):
        entry = _entry_for_folder(name_or_path)
    if entry is None:
        raise ValueError(f"model: unknown model {name_or_path!r}; known names: {', '.join(REGISTRY)} "
                         "or a local folder of a supported model")
    module = importlib.import_module(f"scd_core.models.{entry.module}")
    return getattr(module, entry.loader)(name_or_path, **kwargs)


def _entry_for_folder(path: str) -> ModelEntry | None:
    """Pick the loader of a local folder by asking each family module whether it claims it."""
    for entry in REGISTRY.values():
        try:
            module = importlib.import_module(f"scd_core.models.{entry.module}")
        except ImportError:
            continue
        claims = getattr(module, "claims_folder", None)
        if claims is not None and claims(path):
            return entry
    return None
