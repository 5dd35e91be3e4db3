"""`load_llamagen`: published weights (and FLAN-T5-XL for t2i) -> a LlamaGenTokenModel."""
from __future__ import annotations

import os
import re

import torch

from ..checkpoints import WeightsNotFoundError, load_on_meta, pick_device_dtype, pretrained_converted, state_opener
from .adapter import LlamaGenTokenModel, TextEncoder
from .checkpoint import gpt_config_from_state_dict, load_strict, read_checkpoint, vq_config_from_state_dict
from .files import HUB_FILES, T5_REPO, _size_from_filename, find_t5, locate_files
from .network import Transformer
from .vq import VQModel
from ..hub import ProgressFn


def t5_text_encoder(folder: str, device, dtype, max_length: int = 120) -> TextEncoder:
    """FLAN-T5-XL states as LlamaGen's T5Embedder (max 120 tokens, padded to max_length). The
    encoder's tensors are read from the published float32 files into `dtype` a chunk at a time
    (`checkpoints.pretrained_converted`); the decoder's are never read.

    LlamaGen also runs PixArt's `clean_caption` (ftfy/bs4); here only lower-case + strip +
    whitespace collapse, which is what that cleaning does to ordinary prompts.
    """
    from transformers import AutoTokenizer, T5EncoderModel

    tok = AutoTokenizer.from_pretrained(folder)
    enc = pretrained_converted(T5EncoderModel, folder, device, dtype)      # the encoder's tensors only

    @torch.no_grad()
    def encode(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        texts = [re.sub(r"\s+", " ", t.strip().lower()) for t in texts]
        batch = tok(texts, max_length=max_length, padding="max_length", truncation=True,
                    add_special_tokens=True, return_tensors="pt").to(device)
        states = enc(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        return states, batch["attention_mask"]

    return encode


def load_llamagen(name_or_path: str, *, gpt_ckpt: str | None = None, vq_ckpt: str | None = None,
                  t5_path: str | None = None, image_size: int | None = None, gpt_model: str | None = None,
                  n_head: int | None = None, device=None, dtype=None,
                  text_encoder: TextEncoder | None = None, local_files_only: bool = False,
                  progress: ProgressFn | None = None, trust_pickle=None) -> LlamaGenTokenModel:
    """Load published LlamaGen weights: a registry name (from $SCD_LLAMAGEN_DIR, the HF cache,
    or downloaded on first use), a folder, or a checkpoint file.

    `llamagen-c2i` uses c2i_B_256.pt + vq_ds16_c2i.pt (FoundationVision/LlamaGen);
    `llamagen-t2i` t2i_XL_stage2_512.pt + vq_ds16_t2i.pt (peizesun/llamagen_t2i) and FLAN-T5-XL
    (`t5_path`, <folder>/t5-ckpt/flan-t5-xl, or google/flan-t5-xl). Other files: pass a folder
    (+ gpt_ckpt/vq_ckpt, image_size, gpt_model). `trust_pickle` names a checkpoint to load with
    full pickle when `torch.load(weights_only=True)` refuses it.
    """
    gpt_path, vq_path, kind = locate_files(name_or_path, gpt_ckpt, vq_ckpt, local_files_only=local_files_only,
                                           progress=progress)
    size = image_size or _size_from_filename(gpt_path)
    if size is None or size % 16:
        raise ValueError(f"image_size: cannot tell the resolution of {gpt_path!r}; pass image_size=256/384/512")
    device, dtype = pick_device_dtype(device, dtype)
    if kind == "t2i" and text_encoder is None:
        t5 = find_t5(t5_path, os.path.dirname(gpt_path), download=name_or_path in HUB_FILES,
                     local_files_only=local_files_only, progress=progress)
        if t5 is None:
            raise WeightsNotFoundError(
                "t5_path: LlamaGen t2i conditions on FLAN-T5-XL text states, and no local copy was found "
                f"(looked for <folder>/t5-ckpt/flan-t5-xl and the HF cache of {T5_REPO}); pass t5_path=")
        text_encoder = t5_text_encoder(t5, device, dtype)
    gpt_config = lambda sd: gpt_config_from_state_dict(sd, size, gpt_model, n_head=n_head)  # noqa: E731
    gpt = load_network(gpt_path, gpt_config, Transformer, device, dtype, "gpt_ckpt", trust_pickle)
    vq = None
    if vq_path is not None:       # the pixel decoder runs in float32 whatever the GPT's dtype
        vq = load_network(vq_path, vq_config_from_state_dict, lambda kw: VQModel(**kw), device, torch.float32,
                          "vq_ckpt", trust_pickle)
    return LlamaGenTokenModel(gpt, vq, text_encoder)


def load_network(path: str, config_of, build, device: torch.device, dtype: torch.dtype, what: str,
                 trust_pickle=None):
    """`build(config_of(state_dict))` for a checkpoint file, built on the meta device and given
    the checkpoint's tensors in `dtype` (`checkpoints.load_on_meta`): no random initialisation,
    and a float32 file read into bfloat16 a chunk at a time."""
    open_state = state_opener(path, lambda p: read_checkpoint(p, trust_pickle))
    config = config_of(open_state())             # from the tensors' shapes: nothing read yet
    return load_on_meta(lambda: build(config), open_state,
                        lambda module, sd: load_strict(module, sd, what, assign=True),
                        device=device, dtype=dtype, what=what)
