"""Where LlamaGen's files are: $SCD_LLAMAGEN_DIR, a folder, the Hugging Face cache or the
Hub (downloaded on first use); the registry's questions about them (`hub_files`,
`gpu_reason`, `missing_files`, `claims_folder`)."""
from __future__ import annotations

import glob
import os
import re
from typing import Sequence

from ..checkpoints import WeightsNotFoundError
from ..hub import HubFiles, ProgressFn, cached, fetch

DIR_ENV = "SCD_LLAMAGEN_DIR"
DEFAULT_FILES = {
    "llamagen-c2i": ("c2i_B_256.pt", "vq_ds16_c2i.pt"),
    "llamagen-t2i": ("t2i_XL_stage2_512.pt", "vq_ds16_t2i.pt"),
}
# Where the published files really live: the class-conditional models and their VQ in
# FoundationVision/LlamaGen, the text-conditional ones and their VQ in peizesun/llamagen_t2i
# (as LlamaGen's README links them); the text encoder is Google's FLAN-T5-XL.
HUB_FILES = {
    "llamagen-c2i": HubFiles("FoundationVision/LlamaGen", DEFAULT_FILES["llamagen-c2i"],
                             tuple((f,) for f in DEFAULT_FILES["llamagen-c2i"]), approx_gb=0.7),
    "llamagen-t2i": HubFiles("peizesun/llamagen_t2i", DEFAULT_FILES["llamagen-t2i"],
                             tuple((f,) for f in DEFAULT_FILES["llamagen-t2i"]), approx_gb=3.4),
}
T5_FILES = HubFiles.transformers("google/flan-t5-xl", approx_gb=11.4, what="the FLAN-T5-XL text encoder")
HUB_REPO = HUB_FILES["llamagen-c2i"].repo_id
T5_REPO = T5_FILES.repo_id


def _find_file(folder: str, patterns: Sequence[str]) -> str | None:
    for pattern in patterns:
        hits = sorted(glob.glob(os.path.join(folder, pattern)))
        if hits:
            return hits[0]
    return None


def _in_dir_env(name: str) -> tuple[str | None, str | None]:
    """(GPT, VQ) checkpoints of registry `name` in $SCD_LLAMAGEN_DIR, where present."""
    folder = os.environ.get(DIR_ENV)
    if not folder:
        return None, None
    gpt_name, vq_name = DEFAULT_FILES[name]
    return _find_file(folder, [gpt_name]), _find_file(folder, [vq_name])


def locate_files(name_or_path: str, gpt_ckpt: str | None = None, vq_ckpt: str | None = None, *,
                 local_files_only: bool = False, progress: ProgressFn | None = None) -> tuple[str, str | None, str]:
    """(GPT checkpoint, VQ checkpoint or None, model type) on this machine.

    A registry name is looked up in $SCD_LLAMAGEN_DIR, then the Hugging Face cache, and
    downloaded from its repository (`HUB_FILES`) when neither has it.
    """
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ValueError(f"name_or_path: expected 'llamagen-c2i', 'llamagen-t2i' or a folder, got {name_or_path!r}")
    kind_hint = "t2i" if "t2i" in os.path.basename(os.path.normpath(name_or_path)) else "c2i"
    if name_or_path in DEFAULT_FILES:
        gpt_name, vq_name = DEFAULT_FILES[name_or_path]
        env_gpt, env_vq = _in_dir_env(name_or_path)
        gpt, vq = gpt_ckpt or env_gpt, vq_ckpt or env_vq
        if gpt is None or vq is None:
            folder = fetch(HUB_FILES[name_or_path], local_files_only=local_files_only, progress=progress,
                           needed_by=name_or_path)
            gpt = gpt or os.path.join(folder, gpt_name)
            vq = vq or os.path.join(folder, vq_name)
    elif os.path.isdir(name_or_path):
        c2i_files = glob.glob(os.path.join(name_or_path, "c2i_*"))
        t2i_files = glob.glob(os.path.join(name_or_path, "t2i_*"))
        kind = "t2i" if (kind_hint == "t2i" and t2i_files) or (t2i_files and not c2i_files) else "c2i"
        gpt = gpt_ckpt or _find_file(name_or_path, [f"{kind}_*.pt", f"{kind}_*.safetensors", "*gpt*.pt",
                                                    "*gpt*.safetensors"])
        vq = vq_ckpt or _find_file(name_or_path, [f"vq_ds16_{kind}.pt", "vq_ds16_*.pt", "vq*.pt", "vq*.safetensors"])
        if gpt is None:
            raise WeightsNotFoundError(f"name_or_path: no LlamaGen GPT checkpoint (c2i_*.pt / t2i_*.pt) in {name_or_path!r}")
    elif gpt_ckpt is None and os.path.isfile(name_or_path):
        gpt, vq = name_or_path, vq_ckpt
    else:
        raise WeightsNotFoundError(f"name_or_path: no folder or file at {name_or_path!r}")
    if vq is not None and not os.path.isfile(vq):
        raise WeightsNotFoundError(f"vq_ckpt: no file at {vq!r}")
    base = os.path.basename(gpt)
    kind = "t2i" if base.startswith("t2i") else ("c2i" if base.startswith("c2i") else kind_hint)
    return gpt, vq, kind


def _size_from_filename(path: str) -> int | None:
    m = re.search(r"_(256|384|512)(?:\D|$)", os.path.basename(path))
    return int(m.group(1)) if m else None


def find_t5(t5_path: str | None, folder_hint: str | None, *, download: bool = False,
            local_files_only: bool = False, progress: ProgressFn | None = None) -> str | None:
    """A local FLAN-T5-XL folder: t5_path, <weights folder>/t5-ckpt/flan-t5-xl, the HF cache,
    or (with `download=True`) google/flan-t5-xl fetched from the Hub."""
    candidates = [t5_path]
    if folder_hint:
        candidates += [os.path.join(folder_hint, "t5-ckpt", "flan-t5-xl"), os.path.join(folder_hint, "flan-t5-xl")]
    for c in candidates:
        if c and os.path.isfile(os.path.join(c, "config.json")):
            return c
    if t5_path:
        raise WeightsNotFoundError(f"t5_path: no T5 model folder at {t5_path!r}")
    if download:
        return fetch(T5_FILES, local_files_only=local_files_only, progress=progress, needed_by="LlamaGen t2i")
    return cached(T5_FILES)


def hub_files(name: str) -> tuple[HubFiles, ...]:
    return (HUB_FILES[name], T5_FILES) if name == "llamagen-t2i" else (HUB_FILES[name],)


def gpu_reason(name: str) -> str | None:
    """The t2i model runs FLAN-T5-XL (3B) beside its 775M GPT; the c2i GPT-B (111M) runs on a CPU."""
    return "775M GPT plus the 3B FLAN-T5-XL text encoder" if name == "llamagen-t2i" else None


def missing_files(name: str) -> list[HubFiles]:
    """The Hub files of `name` not on this machine ($SCD_LLAMAGEN_DIR or the HF cache). Cheap."""
    env_gpt, env_vq = _in_dir_env(name)
    missing = [] if (env_gpt and env_vq) or cached(HUB_FILES[name]) else [HUB_FILES[name]]
    if name == "llamagen-t2i":
        folder_hint = os.path.dirname(env_gpt) if env_gpt else None
        if find_t5(None, folder_hint) is None:
            missing.append(T5_FILES)
    return missing


def claims_folder(path: str) -> bool:
    """A folder holding published LlamaGen GPT checkpoints (c2i_*.pt / t2i_*.pt)."""
    return bool(glob.glob(os.path.join(path, "c2i_*.pt")) or glob.glob(os.path.join(path, "t2i_*.pt")))
