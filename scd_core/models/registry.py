"""The registry of model names: what each name loads (`ModelEntry`), and which family claims a
local folder (`entry_for_folder`). Read by `load_model` and by `status` without loading
anything."""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelEntry:
    name: str
    module: str            # module under scd_core.models
    loader: str            # function in that module: loader(name_or_path, **kwargs) -> TokenModel
    kind: str              # "image" or "video"
    description: str
    needs_weights: bool    # True when weights are not shipped (downloaded from the Hub)
    tokens: int = 0        # tokens generated per sample with the default settings (N)
    gpu_ms: float = 0.0    # estimated ms per forward pass on a GPU (bf16, CFG pair, small window)
    test_only: bool = False  # for tests and timing, nothing to look at: demos leave it out
    vocab: int = 0         # V: the image tokens its logits cover (the loaded model's vocab_size)


REGISTRY: dict[str, ModelEntry] = {}


def register(entry: ModelEntry) -> None:
    REGISTRY[entry.name] = entry


def _builtin_entries() -> list[ModelEntry]:
    e = ModelEntry
    # gpu_ms: Janus-Pro-7B's 36.4 ms per forward is the SCD paper's figure; the others are
    # scaled from it by parameters and sequence length (estimates: no GPU run behind them).
    return [
        e("toy", "toy", "load_toy", "image", "exactly enumerable toy model (V=3, N=6)", False, 6, 1.0,
          test_only=True),
        e("toy-grid", "toy", "load_toy_grid", "image", "fast synthetic grid model with tunable entropy", False,
          256, 1.0, test_only=True),
        e("random-logits", "toy", "load_random_logits", "image", "instant random logits: times the engine alone",
          False, 576, 1.0, test_only=True),
        e("texture", "texture", "load_texture", "image",
          "synthetic textures (hand-built, not trained): where coupling helps most", False, 576, 1.0, vocab=2048),
        e("tiny", "tiny", "load_tiny", "image", "embedded emoji model (32x32, 8x8 tokens)", False, 64, 2.0, vocab=512),
        e("tiny-video", "tiny", "load_tiny_video", "video", "embedded emoji clip model", False, 512, 2.0, vocab=512),
        e("tiny-64", "tiny", "load_tiny_64", "image", "embedded emoji model (64x64, 16x16 tokens)", False, 256, 2.0, vocab=512),
        e("janus-pro-1b", "janus", "load_janus", "image", "Janus-Pro 1B (deepseek-community/Janus-Pro-1B)", True,
          576, 15.0, vocab=16384),
        e("janus-pro-7b", "janus", "load_janus", "image", "Janus-Pro 7B (deepseek-community/Janus-Pro-7B)", True,
          576, 36.4, vocab=16384),
        e("emu3-gen", "emu3", "load_emu3", "image", "Emu3-Gen (BAAI/Emu3-Gen-hf)", True, 8100, 45.0, vocab=32768),
        e("lumina-mgpt-7b-512", "lumina", "load_lumina", "image", "Lumina-mGPT 7B, 512 px", True, 1024, 36.0, vocab=8192),
        e("lumina-mgpt-7b-768", "lumina", "load_lumina", "image", "Lumina-mGPT 7B, 768 px", True, 2304, 38.0, vocab=8192),
        e("lumina-mgpt-7b-1024", "lumina", "load_lumina", "image", "Lumina-mGPT 7B, 1024 px", True, 4096, 42.0, vocab=8192),
        e("llamagen-c2i", "llamagen", "load_llamagen", "image", "LlamaGen class-conditional (GPT-B, 256 px)",
          True, 256, 6.0, vocab=16384),
        e("llamagen-t2i", "llamagen", "load_llamagen", "image", "LlamaGen text-conditional (XL, 256/512 px)",
          True, 1024, 12.0, vocab=16384),
        e("cosmos-1-ar-4b", "cosmos", "load_cosmos", "video", "Cosmos-1.0-Autoregressive-4B video continuation",
          True, 7680, 30.0, vocab=64000),
        e("cosmos-1-ar-5b-video2world", "cosmos", "load_cosmos", "video",
          "Cosmos-1.0-Autoregressive-5B-Video2World", True, 7680, 40.0, vocab=64000),
    ]


for _entry in _builtin_entries():
    register(_entry)


def available_models() -> list[str]:
    return list(REGISTRY)


def entry_for_folder(path: str) -> ModelEntry | None:
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
