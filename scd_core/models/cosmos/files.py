"""Where Cosmos' files are: $SCD_COSMOS_CHECKPOINTS (NVIDIA's checkpoints/ layout), a folder
or file, the Hugging Face cache or NVIDIA's Hub repositories; the registry's questions about
them (`hub_files`, `gpu_reason`, `missing_files`, `claims_folder`)."""
from __future__ import annotations

import os

from ..checkpoints import cached_file
from ..hub import HubFiles, cached

CHECKPOINT_FILES = ("model.pt", "model.safetensors", "model.pth")
# NVIDIA publishes the models under its Open Model License: the Hub asks a logged-in user to
# accept it on each repository's page before serving the files (NVIDIA's README: log in first).
_NVIDIA_LICENCE = ("Accept the NVIDIA Open Model License on https://huggingface.co/{repo} (logged in "
                   "to the Hub)")


def _nvidia(repo: str, patterns: tuple[str, ...], required: tuple[str, ...], gb: float, what: str) -> HubFiles:
    return HubFiles(repo, patterns, tuple((f,) for f in required), licence=_NVIDIA_LICENCE.format(repo=repo),
                    approx_gb=gb, what=what)


# The files NVIDIA's own download script fetches (model.pt, config.json; the tokenizer's *.jit).
HUB_FILES = {
    "cosmos-1-ar-4b": _nvidia("nvidia/Cosmos-1.0-Autoregressive-4B", ("model.pt", "config.json"),
                              ("model.pt",), 8.0, "weights"),
    "cosmos-1-ar-5b-video2world": _nvidia("nvidia/Cosmos-1.0-Autoregressive-5B-Video2World",
                                          ("model.pt", "config.json"), ("model.pt",), 10.0, "weights"),
}
TOKENIZER_FILES = _nvidia("nvidia/Cosmos-1.0-Tokenizer-DV8x16x16", ("encoder.jit", "decoder.jit"),
                          ("encoder.jit", "decoder.jit"), 0.5, "the DV8x16x16 video tokenizer")
T5_FILES = HubFiles.transformers("google-t5/t5-11b", approx_gb=45.0, what="the T5-11B text encoder")
HUB_IDS = {name: files.repo_id for name, files in HUB_FILES.items()}
TOKENIZER_HUB_ID = TOKENIZER_FILES.repo_id
TOKENIZER_FOLDER = "Cosmos-1.0-Tokenizer-DV8x16x16"
T5_HUB_ID = T5_FILES.repo_id
CHECKPOINTS_ENV = "SCD_COSMOS_CHECKPOINTS"   # a folder laid out as NVIDIA's checkpoints/ (optional)


def find_checkpoint(name_or_path: str) -> str | None:
    """A local checkpoint file for a registry name, a folder or a file (no network)."""
    if os.path.isfile(name_or_path):
        return name_or_path
    if os.path.isdir(name_or_path):
        for f in CHECKPOINT_FILES:
            if os.path.isfile(os.path.join(name_or_path, f)):
                return os.path.join(name_or_path, f)
        return None
    if name_or_path not in HUB_FILES:
        return None
    root = os.environ.get(CHECKPOINTS_ENV)
    if root:                                                  # NVIDIA's checkpoints/ layout
        found = find_checkpoint(os.path.join(root, HUB_IDS[name_or_path].split("/")[-1]))
        if found:
            return found
    return cached_file(HUB_FILES[name_or_path], "model.pt")


def find_tokenizer(checkpoint: str | None, tokenizer_path: str | None = None) -> str | None:
    """The folder holding encoder.jit/decoder.jit: given, beside the checkpoint, or cached."""
    candidates = [tokenizer_path] if tokenizer_path else []
    if checkpoint:
        folder = os.path.dirname(os.path.abspath(checkpoint))
        candidates += [folder, os.path.join(folder, TOKENIZER_FOLDER),
                       os.path.join(os.path.dirname(folder), TOKENIZER_FOLDER)]
    for c in candidates:
        if c and all(os.path.isfile(os.path.join(c, f)) for f in ("encoder.jit", "decoder.jit")):
            return c
    if tokenizer_path:
        return None
    return cached(TOKENIZER_FILES)


def claims_folder(path: str) -> bool:
    """A folder with a Cosmos AR checkpoint: model.pt (or .safetensors) and a Cosmos name."""
    name = os.path.abspath(path).lower()        # hub snapshots sit under models--nvidia--Cosmos-...
    return os.path.isdir(path) and find_checkpoint(path) is not None and "cosmos" in name \
        and ("autoregressive" in name or "-ar-" in name)


def hub_files(name: str) -> tuple[HubFiles, ...]:
    parts = (HUB_FILES[name], TOKENIZER_FILES)
    return parts + (T5_FILES,) if name == "cosmos-1-ar-5b-video2world" else parts


def gpu_reason(name: str) -> str | None:
    return "a 4-5B video model: 7,680 tokens per clip"


def missing_files(name: str) -> list[HubFiles]:
    """The Hub files of `name` not on this machine ($SCD_COSMOS_CHECKPOINTS or the HF cache). Cheap."""
    ckpt = find_checkpoint(name)
    missing = [] if ckpt else [HUB_FILES[name]]
    if find_tokenizer(ckpt) is None:
        missing.append(TOKENIZER_FILES)
    if name == "cosmos-1-ar-5b-video2world" and cached(T5_FILES) is None:
        missing.append(T5_FILES)
    return missing
