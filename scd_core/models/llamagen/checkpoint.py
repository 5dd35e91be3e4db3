"""Published LlamaGen checkpoints -> state dicts and the configurations they imply."""
from __future__ import annotations

import argparse
import re
from typing import Mapping

import torch
import torch.nn as nn

from ..hub import read_checkpoint as read_file
from .config import GPT_SIZES, HEADS_BY_DIM, GPTConfig


def read_checkpoint(path: str, trust_pickle=None) -> dict[str, torch.Tensor]:
    """A published LlamaGen checkpoint -> its model state dict (safetensors, or torch.load with
    weights_only=True: the stored training `args` Namespace is allowed; anything else only when
    `trust_pickle` names the file, see `hub.read_checkpoint`). The file is memory-mapped: a
    tensor is read when it is first used. Inference-only buffers a checkpoint may hold
    (`freqs_cis`, `causal_mask`, KV caches) are left out, and a `torch.compile` prefix removed."""
    ckpt = read_file(path, trust_pickle=trust_pickle, safe_globals=[argparse.Namespace], mmap=True,
                     what="checkpoint")
    for key in ("model", "module", "state_dict", "ema"):
        if isinstance(ckpt, dict) and isinstance(ckpt.get(key), dict):
            return _weights(ckpt[key])
    if isinstance(ckpt, dict) and all(isinstance(v, torch.Tensor) for v in ckpt.values()):
        return _weights(ckpt)
    raise ValueError(f"checkpoint: {path} holds no model state dict")


_IGNORED = re.compile(r"(^|\.)(freqs_cis|causal_mask|kv_cache\.[kv]_cache)$")


def _weights(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k.removeprefix("_orig_mod."): v for k, v in state_dict.items() if not _IGNORED.search(k)}


def load_strict(module: nn.Module, state_dict: Mapping[str, torch.Tensor], what: str, *,
                assign: bool = False) -> None:
    """load_state_dict(strict=True) after dropping inference-only buffers a checkpoint may hold;
    with `assign`, the tensors themselves become the module's (a module built on the meta device)."""
    sd = _weights(state_dict)
    try:
        missing, unexpected = module.load_state_dict(sd, strict=False, assign=assign)
    except RuntimeError as exc:      # shape mismatches
        raise ValueError(f"{what}: checkpoint does not match the architecture: {str(exc)[:400]}") from None
    if missing or unexpected:
        raise ValueError(f"{what}: checkpoint does not match (missing {missing[:5]}, unexpected {unexpected[:5]})")


def vq_config_from_state_dict(sd: Mapping[str, torch.Tensor]) -> dict:
    """VQModel keyword arguments of a VQ checkpoint (VQ-16 published: 16384 x 8, ch 128, 1,1,2,2,4)."""
    try:
        n_e, e_dim = sd["quantize.embedding.weight"].shape
        ch = sd["encoder.conv_in.weight"].shape[0]
        levels = 1 + max(int(m.group(1)) for k in sd if (m := re.match(r"encoder\.conv_blocks\.(\d+)\.", k)))
        ch_mult = tuple(sd[f"encoder.conv_blocks.{i}.res.0.conv1.weight"].shape[0] // ch for i in range(levels))
        n_res = 1 + max(int(m.group(1)) for k in sd if (m := re.match(r"encoder\.conv_blocks\.0\.res\.(\d+)\.", k)))
        z = sd["post_quant_conv.weight"].shape[0]
    except (KeyError, ValueError) as exc:
        raise ValueError(f"vq_ckpt: not a LlamaGen VQ checkpoint ({exc})") from None
    return dict(codebook_size=n_e, codebook_embed_dim=e_dim, ch=ch, ch_mult=ch_mult,
                num_res_blocks=n_res, z_channels=z)


def gpt_config_from_state_dict(sd: Mapping[str, torch.Tensor], image_size: int,
                               gpt_model: str | None = None, downsample: int = 16,
                               n_head: int | None = None) -> GPTConfig:
    """Infer the GPT architecture of a published checkpoint (sizes from tensor shapes)."""
    vocab, dim = sd["tok_embeddings.weight"].shape
    n_layer = 1 + max(int(m.group(1)) for k in sd if (m := re.match(r"layers\.(\d+)\.", k)))
    if n_head is not None:
        pass
    elif gpt_model is not None:
        if gpt_model not in GPT_SIZES:
            raise ValueError(f"gpt_model: expected one of {sorted(GPT_SIZES)}, got {gpt_model!r}")
        n_head = GPT_SIZES[gpt_model][1]
    elif dim in HEADS_BY_DIM:
        n_head = HEADS_BY_DIM[dim]
    else:
        raise ValueError(f"gpt_model: cannot tell the head count of a dim-{dim} model; pass gpt_model=")
    head_dim = dim // n_head
    qkv = sd["layers.0.attention.wqkv.weight"].shape[0]
    n_kv = (qkv // head_dim - n_head) // 2
    hidden = sd["layers.0.feed_forward.w1.weight"].shape[0]
    grid = image_size // downsample
    if "cls_embedding.embedding_table.weight" in sd:
        return GPTConfig(dim=dim, n_layer=n_layer, n_head=n_head, n_kv_head=n_kv, ffn_hidden=hidden,
                         model_type="c2i", vocab_size=vocab, cls_token_num=1, block_size=grid * grid,
                         num_classes=sd["cls_embedding.embedding_table.weight"].shape[0] - 1)
    unc = sd["cls_embedding.uncond_embedding"]
    return GPTConfig(dim=dim, n_layer=n_layer, n_head=n_head, n_kv_head=n_kv, ffn_hidden=hidden,
                     model_type="t2i", vocab_size=vocab, cls_token_num=unc.shape[0],
                     caption_dim=unc.shape[1], block_size=grid * grid)
