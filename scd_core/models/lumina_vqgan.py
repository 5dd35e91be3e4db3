"""Chameleon / Lumina-mGPT VQGAN as a diffusers `VQModel`, with a weight conversion.

transformers' `ChameleonVQVAE` has an encoder only, so tokens cannot be turned back into
pixels with it. Meta's original `vqgan.ckpt` (taming-transformers layout, shipped with
Chameleon and used by Lumina-mGPT) holds the full encoder + decoder. This module builds the
equivalent diffusers `VQModel` and renames the taming keys to diffusers keys:

    encoder.down.{i}.block.{j}.nin_shortcut  -> encoder.down_blocks.{i}.resnets.{j}.conv_shortcut
    encoder.down.{i}.attn.{j}.{q,k,v,proj_out,norm}
                                             -> encoder.down_blocks.{i}.attentions.{j}.{to_q,...}
    encoder.down.{i}.downsample.conv         -> encoder.down_blocks.{i}.downsamplers.0.conv
    {en,de}coder.mid.block_{1,2} / attn_1    -> {en,de}coder.mid_block.resnets.{0,1} / attentions.0
    decoder.up.{i}.*                         -> decoder.up_blocks.{n-1-i}.*  (taming counts up
                                                blocks from the highest resolution)
    {en,de}coder.norm_out                    -> {en,de}coder.conv_norm_out

1x1-conv attention projections become linear weights. Keys of the training loss
(`loss.*`, the discriminator / LPIPS) are dropped; anything else unknown is an error.
"""
from __future__ import annotations

import os
import re
from typing import Any, Mapping

import torch

# Chameleon's vqgan.yaml (ddconfig) and transformers' ChameleonVQVAEConfig defaults agree.
CHAMELEON_VQGAN_CONFIG: dict[str, Any] = {
    "embed_dim": 256,
    "n_embed": 8192,
    "z_channels": 256,
    "resolution": 512,
    "in_channels": 3,
    "out_ch": 3,
    "ch": 128,
    "ch_mult": [1, 1, 2, 2, 4],
    "num_res_blocks": 2,
    "attn_resolutions": [],
}

_ATTN_NAMES = {"norm": "group_norm", "q": "to_q", "k": "to_k", "v": "to_v", "proj_out": "to_out.0"}
_RESNET_NAMES = {"norm1": "norm1", "conv1": "conv1", "norm2": "norm2", "conv2": "conv2",
                 "nin_shortcut": "conv_shortcut", "conv_shortcut": "conv_shortcut"}
_IGNORED_PREFIXES = ("loss.",)


def _attn_level_flags(cfg: Mapping[str, Any]) -> list[bool]:
    """Per resolution level (highest resolution first): does taming put attention there?"""
    res = int(cfg["resolution"])
    levels = len(cfg["ch_mult"])
    attn = set(int(r) for r in (cfg.get("attn_resolutions") or []))
    return [res // (2 ** i) in attn for i in range(levels)]


def build_vqmodel(cfg: Mapping[str, Any] | None = None):
    """A diffusers VQModel with the architecture of a taming VQGAN ddconfig."""
    from diffusers import VQModel

    cfg = dict(CHAMELEON_VQGAN_CONFIG if cfg is None else cfg)
    flags = _attn_level_flags(cfg)
    down = tuple("AttnDownEncoderBlock2D" if f else "DownEncoderBlock2D" for f in flags)
    up = tuple("AttnUpDecoderBlock2D" if f else "UpDecoderBlock2D" for f in reversed(flags))
    return VQModel(
        in_channels=int(cfg["in_channels"]), out_channels=int(cfg["out_ch"]),
        down_block_types=down, up_block_types=up,
        block_out_channels=tuple(int(cfg["ch"]) * int(m) for m in cfg["ch_mult"]),
        layers_per_block=int(cfg["num_res_blocks"]), act_fn="silu",
        latent_channels=int(cfg["z_channels"]), sample_size=int(cfg["resolution"]),
        num_vq_embeddings=int(cfg["n_embed"]), vq_embed_dim=int(cfg["embed_dim"]),
        norm_num_groups=32, norm_type="group", mid_block_add_attention=True,
    )


def _rename_block_part(rest: str) -> str:
    """Rename the tail of a resnet / attention key ('conv1.weight', 'q.bias', ...)."""
    name, _, leaf = rest.rpartition(".")
    if name in _ATTN_NAMES:
        return f"{_ATTN_NAMES[name]}.{leaf}"
    if name in _RESNET_NAMES:
        return f"{_RESNET_NAMES[name]}.{leaf}"
    raise KeyError(rest)


def _rename_mid(rest: str) -> str:
    m = re.fullmatch(r"(block_1|block_2|attn_1)\.(.+)", rest)
    if m is None:
        raise KeyError(rest)
    part, tail = m.groups()
    target = {"block_1": "resnets.0", "block_2": "resnets.1", "attn_1": "attentions.0"}[part]
    return f"mid_block.{target}.{_rename_block_part(tail)}"


def taming_key_to_diffusers(key: str, num_levels: int) -> str:
    """Map one taming/Chameleon VQGAN key to the diffusers VQModel key (KeyError if unknown)."""
    if key in ("quantize.embedding.weight",) or re.fullmatch(r"(post_)?quant_conv\.(weight|bias)", key):
        return key
    m = re.fullmatch(r"(encoder|decoder)\.(.+)", key)
    if m is None:
        raise KeyError(key)
    side, rest = m.groups()
    if re.fullmatch(r"conv_(in|out)\.(weight|bias)", rest):
        return key
    if re.fullmatch(r"norm_out\.(weight|bias)", rest):
        return f"{side}.conv_norm_out.{rest.split('.')[-1]}"
    if rest.startswith("mid."):
        return f"{side}.{_rename_mid(rest[4:])}"
    m = re.fullmatch(r"(down|up)\.(\d+)\.(block|attn)\.(\d+)\.(.+)", rest)
    if m is not None:
        kind, level, part, idx, tail = m.groups()
        block = int(level) if kind == "down" else num_levels - 1 - int(level)
        group = "resnets" if part == "block" else "attentions"
        return f"{side}.{kind}_blocks.{block}.{group}.{idx}.{_rename_block_part(tail)}"
    m = re.fullmatch(r"down\.(\d+)\.downsample\.conv\.(weight|bias)", rest)
    if m is not None:
        return f"{side}.down_blocks.{m.group(1)}.downsamplers.0.conv.{m.group(2)}"
    m = re.fullmatch(r"up\.(\d+)\.upsample\.conv\.(weight|bias)", rest)
    if m is not None:
        return f"{side}.up_blocks.{num_levels - 1 - int(m.group(1))}.upsamplers.0.conv.{m.group(2)}"
    raise KeyError(key)


def convert_taming_vqgan_state_dict(state_dict: Mapping[str, torch.Tensor],
                                    num_levels: int) -> dict[str, torch.Tensor]:
    """Rename a taming/Chameleon VQGAN state dict for diffusers' VQModel.

    Raises ValueError listing the keys it does not know (loss/discriminator keys are dropped).
    """
    out: dict[str, torch.Tensor] = {}
    unknown: list[str] = []
    for key, value in state_dict.items():
        if key.startswith(_IGNORED_PREFIXES):
            continue
        try:
            new_key = taming_key_to_diffusers(key, num_levels)
        except KeyError:
            unknown.append(key)
            continue
        is_attn_proj = re.search(r"attentions\.\d+\.(to_q|to_k|to_v|to_out\.0)\.weight$", new_key)
        if is_attn_proj and value.dim() == 4:
            value = value[:, :, 0, 0]
        out[new_key] = value
    if unknown:
        raise ValueError(f"state_dict: {len(unknown)} keys not in a taming VQGAN layout, e.g. {unknown[:5]}")
    return out


def read_vqgan_checkpoint(path: str, trust_pickle=None) -> dict[str, torch.Tensor]:
    """Map `vqgan.ckpt` (a Lightning checkpoint with 'state_dict') or a .safetensors file (a
    tensor is read when first used).

    `torch.load(weights_only=True)` unless `trust_pickle` names this file (see `hub.read_checkpoint`).
    """
    from .hub import read_checkpoint

    if not os.path.isfile(path):
        raise FileNotFoundError(f"VQGAN checkpoint not found: {path}")
    ckpt = read_checkpoint(path, trust_pickle=trust_pickle, mmap=True, what="vqgan_path")
    if isinstance(ckpt, dict) and "state_dict" in ckpt:
        ckpt = ckpt["state_dict"]
    if not isinstance(ckpt, dict):
        raise ValueError(f"{path}: expected a state dict, got {type(ckpt).__name__}")
    return ckpt


def read_vqgan_yaml(path: str) -> dict[str, Any]:
    """The ddconfig + embed sizes of a taming `vqgan.yaml` (model.params)."""
    import yaml

    with open(path) as f:
        params = yaml.safe_load(f)["model"]["params"]
    cfg = dict(params["ddconfig"])
    cfg["embed_dim"] = params["embed_dim"]
    cfg["n_embed"] = params["n_embed"]
    return cfg


def load_chameleon_vqgan(ckpt_path: str, yaml_path: str | None = None,
                         device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                         trust_pickle=None):
    """Build the VQModel on the meta device and give it `vqgan.ckpt`'s tensors strictly, in
    `dtype` on `device` (`checkpoints.load_on_meta`: no random initialisation)."""
    from .checkpoints import load_on_meta, state_opener

    cfg = read_vqgan_yaml(yaml_path) if yaml_path and os.path.isfile(yaml_path) else CHAMELEON_VQGAN_CONFIG
    levels = len(cfg["ch_mult"])
    mapped = state_opener(ckpt_path, lambda p: convert_taming_vqgan_state_dict(read_vqgan_checkpoint(p, trust_pickle),
                                                                                levels))
    return load_on_meta(lambda: build_vqmodel(cfg), mapped,
                        lambda model, sd: model.load_state_dict(sd, strict=True, assign=True),
                        device=torch.device(device), dtype=dtype, what="vqgan_path")


@torch.no_grad()
def decode_codes(vq, codes: torch.LongTensor, grid: tuple[int, int]) -> torch.Tensor:
    """[B, H*W] code indices -> pixels [B, 3, 16H, 16W] in [-1, 1] (unclamped)."""
    b = codes.shape[0]
    h, w = grid
    c = vq.quantize.embedding.weight.shape[1]
    z = vq.quantize.get_codebook_entry(codes.reshape(-1).to(vq.device), (b, h, w, c))
    return vq.decode(z.to(vq.dtype), force_not_quantize=True).sample


def to_pil(pixels: torch.Tensor) -> list:
    """[B, 3, H, W] in [-1, 1] -> PIL images (as Chameleon's `_pil_from_chw_tensor`)."""
    from PIL import Image

    x = ((pixels.detach().float().clamp(-1, 1) + 1) / 2).permute(0, 2, 3, 1).cpu().numpy()
    return [Image.fromarray((a * 255).astype("uint8"), "RGB") for a in x]
