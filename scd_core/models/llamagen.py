"""LlamaGen (FoundationVision/LlamaGen, MIT) behind the TokenModel contract: a compact
re-implementation of its GPT (c2i and t2i) and of its VQ-16 image tokenizer.

Parameter and buffer names follow the published `gpt.py` / `vq_model.py`, so the released
checkpoints (`c2i_B_256.pt`, ..., `t2i_XL_stage1_256.pt`, `vq_ds16_c2i.pt`, `vq_ds16_t2i.pt`)
load strictly. Behaviour kept from the published code:
- the condition occupies the first `cls_token_num` positions (1 class embedding for c2i, 120
  projected FLAN-T5-XL states for t2i); its 2-D RoPE table rows are zeros, so the condition's
  queries and keys are zero vectors, exactly as published;
- 2-D RoPE over the image grid (half the head dims for rows, half for columns);
- CFG: unconditional rows use the null class (id = num_classes) or the learned
  `uncond_embedding`, with the same text mask as their conditional row; `u + s (c - u)`;
- t2i text: T5 states left-padded, padded positions zeroed and masked, every position
  attending to itself.
The KV cache is static and position-indexed (gpt-fast style): a token at grid position g of
a row is written to slot cls_token_num + g and masked by position, so rows can sit at
different positions and forgetting costs nothing. Every row's cache has the same layout (the
condition is always cls_token_num slots), so rows join a running session (`add_rows`) and
leave it (`keep_rows`) by concatenating and selecting cache rows.
"""
from __future__ import annotations

import argparse
import glob
import math
import os
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._hf import (WeightsNotFoundError, check_cfg, check_prompts, check_rows, check_step, guided_order,
                  guided_rows, pick_device_dtype)
from .hub import HubFiles, ProgressFn, cached, fetch, read_checkpoint as read_file

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
# As published: sample_c2i.py (cfg 4.0, top-k 2000), sample_t2i.py (cfg 7.5, top-k 1000).
DEFAULT_SETTINGS = {
    "c2i": {"cfg_scale": 4.0, "top_k": 2000, "top_p": 1.0, "temperature": 1.0, "window": 32},
    "t2i": {"cfg_scale": 7.5, "top_k": 1000, "top_p": 1.0, "temperature": 1.0, "window": 32},
}
# The class ids of LlamaGen's sample_c2i.py (golden retriever, otter, red panda, geyser, macaw,
# valley, balloon, arctic fox) and prompts of its sample_t2i.py.
EXAMPLE_PROMPTS = {
    "c2i": ["207", "360", "387", "974", "88", "979", "417", "279"],
    "t2i": ["A blue Porsche 356 parked in front of a yellow brick wall.",
            "A photo of an astronaut riding a horse in the forest. There is a river in front of them "
            "with water lilies.",
            "A map of the United States made out of sushi. It is on a table next to a glass of red wine."],
}
# (n_layer, n_head, dim) of the published GPT sizes.
GPT_SIZES = {
    "GPT-B": (12, 12, 768), "GPT-L": (24, 16, 1024), "GPT-XL": (36, 20, 1280),
    "GPT-XXL": (48, 24, 1536), "GPT-XXXL": (48, 40, 2560),
    "GPT-1B": (22, 32, 2048), "GPT-3B": (24, 32, 3200), "GPT-7B": (32, 32, 4096),
}
HEADS_BY_DIM = {dim: heads for _, heads, dim in GPT_SIZES.values()}


def find_multiple(n: int, k: int) -> int:
    return n if n % k == 0 else n + k - (n % k)


# =========================================================================== the GPT

@dataclass
class GPTConfig:
    dim: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_kv_head: int | None = None
    ffn_hidden: int | None = None       # None: LlamaGen's SwiGLU size (multiple of 256)
    multiple_of: int = 256
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    model_type: str = "c2i"
    num_classes: int = 1000
    caption_dim: int = 2048
    vocab_size: int = 16384
    cls_token_num: int = 1
    block_size: int = 256               # grid_size ** 2

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head or self.n_head

    @property
    def hidden(self) -> int:
        return self.ffn_hidden or find_multiple(int(2 * 4 * self.dim / 3), self.multiple_of)

    @property
    def grid_size(self) -> int:
        g = int(round(math.sqrt(self.block_size)))
        if g * g != self.block_size:
            raise ValueError(f"block_size: {self.block_size} is not a square grid")
        return g


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        out = xf * torch.rsqrt(torch.mean(xf * xf, dim=-1, keepdim=True) + self.eps)
        return out.type_as(x) * self.weight


class FeedForward(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.hidden, bias=False)
        self.w2 = nn.Linear(cfg.hidden, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def apply_rotary(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """x [R, T, H, D]; freqs [R, T, D/2, 2] (cos, sin) -> rotated x (pairs of adjacent dims)."""
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    f = freqs[:, :, None]
    out = torch.stack([xs[..., 0] * f[..., 0] - xs[..., 1] * f[..., 1],
                       xs[..., 1] * f[..., 0] + xs[..., 0] * f[..., 1]], dim=-1)
    return out.flatten(3).type_as(x)


def rope_2d_table(grid_size: int, head_dim: int, base: float, cls_token_num: int) -> torch.Tensor:
    """LlamaGen's 2-D RoPE table [cls + grid^2, head_dim/2, 2]; condition rows are zeros."""
    half = head_dim // 2
    freqs = 1.0 / (base ** (torch.arange(0, half, 2)[: half // 2].float() / half))
    t = torch.arange(grid_size)
    freqs = torch.outer(t, freqs)
    grid = torch.cat([freqs[:, None, :].expand(-1, grid_size, -1),
                      freqs[None, :, :].expand(grid_size, -1, -1)], dim=-1)
    table = torch.stack([torch.cos(grid), torch.sin(grid)], dim=-1).flatten(0, 1)
    return torch.cat([torch.zeros(cls_token_num, head_dim // 2, 2), table])


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wqkv = nn.Linear(cfg.dim, (cfg.n_head + 2 * cfg.kv_heads) * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x, freqs, cache: "StaticKV | None", slots, mask) -> torch.Tensor:
        c = self.cfg
        r, t, _ = x.shape
        kv = c.kv_heads * c.head_dim
        q, k, v = self.wqkv(x).split([c.dim, kv, kv], dim=-1)
        q = apply_rotary(q.view(r, t, c.n_head, c.head_dim), freqs).transpose(1, 2)
        k = apply_rotary(k.view(r, t, c.kv_heads, c.head_dim), freqs).transpose(1, 2)
        v = v.view(r, t, c.kv_heads, c.head_dim).transpose(1, 2)
        if cache is not None:
            k, v = cache.write(k, v, slots, mask.shape[-1])
        rep = c.n_head // c.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.wo(out.transpose(1, 2).reshape(r, t, c.dim))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.attention = Attention(cfg)
        self.feed_forward = FeedForward(cfg)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x, freqs, cache, slots, mask) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs, cache, slots, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class LabelEmbedder(nn.Module):
    def __init__(self, num_classes: int, dim: int) -> None:
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + 1, dim)   # last row: the null class

    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        return self.embedding_table(labels).unsqueeze(1)


class MLP(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden, bias=False)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(hidden, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class CaptionEmbedder(nn.Module):
    def __init__(self, caption_dim: int, dim: int, token_num: int) -> None:
        super().__init__()
        self.cap_proj = MLP(caption_dim, dim, dim)
        self.register_buffer("uncond_embedding", torch.randn(token_num, caption_dim) / caption_dim ** 0.5)

    def forward(self, caption: torch.Tensor) -> torch.Tensor:
        return self.cap_proj(caption)


class StaticKV:
    """Per-layer static key/value tensors [R, kv_heads, S, head_dim], written by slot."""

    def __init__(self, rows: int, cfg: GPTConfig, length: int, device, dtype) -> None:
        shape = (rows, cfg.kv_heads, length, cfg.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)

    def write(self, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor, view: int):
        """Write at `slots` [R, T]; return the keys/values of slots [0, view)."""
        rows = torch.arange(k.shape[0], device=k.device)[:, None]
        self.k[rows, :, slots] = k.transpose(1, 2)
        self.v[rows, :, slots] = v.transpose(1, 2)
        return self.k[:, :, :view], self.v[:, :, :view]

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only cache rows `rows`, in that order."""
        self.k, self.v = self.k[rows], self.v[rows]

    def join(self, other: "StaticKV", order: torch.Tensor) -> None:
        """Append the rows of `other`, then reorder: cat([these rows, other rows])[order]."""
        self.k = torch.cat([self.k, other.k])[order]
        self.v = torch.cat([self.v, other.v])[order]


class Transformer(nn.Module):
    """LlamaGen's GPT with the published parameter names."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        if cfg.model_type not in ("c2i", "t2i"):
            raise ValueError(f"model_type: expected 'c2i' or 't2i', got {cfg.model_type!r}")
        self.config = cfg
        if cfg.model_type == "c2i":
            self.cls_embedding = LabelEmbedder(cfg.num_classes, cfg.dim)
        else:
            self.cls_embedding = CaptionEmbedder(cfg.caption_dim, cfg.dim, cfg.cls_token_num)
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        self.freqs_cis = rope_2d_table(cfg.grid_size, cfg.head_dim, cfg.rope_base, cfg.cls_token_num)

    def new_cache(self, rows: int) -> list[StaticKV]:
        w = self.tok_embeddings.weight
        length = self.config.cls_token_num + self.config.block_size
        return [StaticKV(rows, self.config, length, w.device, w.dtype) for _ in self.layers]

    def condition(self, cond: torch.Tensor) -> torch.Tensor:
        """Class ids [R] or caption states [R, cls, caption_dim] -> embeddings [R, cls, dim]."""
        emb = self.cls_embedding(cond)
        return emb[:, : self.config.cls_token_num]

    def forward_embeddings(self, h: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                           cache: list[StaticKV] | None = None) -> torch.Tensor:
        """Run embeddings h [R, T, dim] at absolute positions [R, T] -> logits [R, T, V] (float).

        `mask` [R, 1, T, S] is boolean (True = attend). With a cache, keys/values are written at
        slot = position and attention sees slots [0, S) (S = furthest position + 1 suffices);
        without one, S = T.
        """
        if self.freqs_cis.device != h.device:
            self.freqs_cis = self.freqs_cis.to(h.device)
        freqs = self.freqs_cis[positions]
        for i, layer in enumerate(self.layers):
            h = layer(h, freqs, None if cache is None else cache[i], positions, mask)
        return self.output(self.norm(h)).float()


# =========================================================================== the VQ-16 tokenizer

def _group_norm(c: int) -> nn.GroupNorm:
    return nn.GroupNorm(32, c, eps=1e-6, affine=True)


class VQResnetBlock(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.norm1, self.conv1 = _group_norm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2, self.conv2 = _group_norm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        if cin != cout:
            self.nin_shortcut = nn.Conv2d(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (self.nin_shortcut(x) if hasattr(self, "nin_shortcut") else x) + h


class VQAttnBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.norm = _group_norm(c)
        self.q, self.k, self.v, self.proj_out = (nn.Conv2d(c, c, 1) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        b, c, hh, ww = h.shape
        q, k, v = (m(h).reshape(b, c, hh * ww).transpose(1, 2) for m in (self.q, self.k, self.v))
        out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, c, hh, ww)
        return x + self.proj_out(out)


class _Resample(nn.Module):
    def __init__(self, c: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv2d(c, c, 3, stride=stride, padding=0 if stride == 2 else 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 2:                       # downsample: asymmetric zero padding
            return self.conv(F.pad(x, (0, 1, 0, 1)))
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


def _level(cin: int, cout: int, n: int, attn: bool) -> tuple[nn.Module, int]:
    block = nn.Module()
    block.res, block.attn = nn.ModuleList(), nn.ModuleList()
    for _ in range(n):
        block.res.append(VQResnetBlock(cin, cout))
        cin = cout
        if attn:
            block.attn.append(VQAttnBlock(cout))
    return block, cout


def _run_level(block: nn.Module, h: torch.Tensor) -> torch.Tensor:
    for i, res in enumerate(block.res):
        h = res(h)
        if len(block.attn):
            h = block.attn[i](h)
    return h


class VQEncoder(nn.Module):
    def __init__(self, ch: int, ch_mult: Sequence[int], num_res_blocks: int, z_channels: int) -> None:
        super().__init__()
        self.conv_in = nn.Conv2d(3, ch, 3, padding=1)
        self.conv_blocks = nn.ModuleList()
        c = ch
        for i, m in enumerate(ch_mult):
            block, c = _level(c, ch * m, num_res_blocks, attn=i == len(ch_mult) - 1)
            if i != len(ch_mult) - 1:
                block.downsample = _Resample(c, 2)
            self.conv_blocks.append(block)
        self.mid = nn.ModuleList([VQResnetBlock(c, c), VQAttnBlock(c), VQResnetBlock(c, c)])
        self.norm_out = _group_norm(c)
        self.conv_out = nn.Conv2d(c, z_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for block in self.conv_blocks:
            h = _run_level(block, h)
            if hasattr(block, "downsample"):
                h = block.downsample(h)
        for m in self.mid:
            h = m(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class VQDecoder(nn.Module):
    def __init__(self, ch: int, ch_mult: Sequence[int], num_res_blocks: int, z_channels: int) -> None:
        super().__init__()
        c = ch * ch_mult[-1]
        self.conv_in = nn.Conv2d(z_channels, c, 3, padding=1)
        self.mid = nn.ModuleList([VQResnetBlock(c, c), VQAttnBlock(c), VQResnetBlock(c, c)])
        self.conv_blocks = nn.ModuleList()
        for i in reversed(range(len(ch_mult))):
            block, c = _level(c, ch * ch_mult[i], num_res_blocks + 1, attn=i == len(ch_mult) - 1)
            if i != 0:
                block.upsample = _Resample(c, 1)
            self.conv_blocks.append(block)
        self.norm_out = _group_norm(c)
        self.conv_out = nn.Conv2d(c, 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(z)
        for m in self.mid:
            h = m(h)
        for block in self.conv_blocks:
            h = _run_level(block, h)
            if hasattr(block, "upsample"):
                h = block.upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class VectorQuantizer(nn.Module):
    def __init__(self, n_e: int, e_dim: int, l2_norm: bool = True, show_usage: bool = True) -> None:
        super().__init__()
        self.l2_norm = l2_norm
        self.embedding = nn.Embedding(n_e, e_dim)
        if show_usage:                     # a training statistic; kept so checkpoints load strictly
            self.register_buffer("codebook_used", torch.zeros(65536))

    def codebook(self) -> torch.Tensor:
        w = self.embedding.weight
        return F.normalize(w, p=2, dim=-1) if self.l2_norm else w

    def lookup(self, indices: torch.Tensor, shape: tuple[int, int, int, int]) -> torch.Tensor:
        """Indices [B*H*W] -> latents [B, C, H, W] (shape = (B, C, H, W))."""
        b, c, h, w = shape
        return self.codebook()[indices].reshape(b, h, w, c).permute(0, 3, 1, 2).contiguous()

    def indices(self, z: torch.Tensor) -> torch.Tensor:
        """Latents [B, C, H, W] -> nearest code indices [B, H*W]."""
        flat = z.permute(0, 2, 3, 1).reshape(z.shape[0], -1, z.shape[1])
        if self.l2_norm:
            flat = F.normalize(flat, p=2, dim=-1)
        d = torch.cdist(flat, self.codebook()[None].expand(z.shape[0], -1, -1))
        return d.argmin(-1)


class VQModel(nn.Module):
    """LlamaGen's VQ-16 (ch 128, ch_mult 1,1,2,2,4, codebook 16384 x 8, l2-normalised)."""

    def __init__(self, codebook_size: int = 16384, codebook_embed_dim: int = 8, ch: int = 128,
                 ch_mult: Sequence[int] = (1, 1, 2, 2, 4), num_res_blocks: int = 2,
                 z_channels: int = 256) -> None:
        super().__init__()
        self.encoder = VQEncoder(ch, ch_mult, num_res_blocks, z_channels)
        self.decoder = VQDecoder(ch, ch_mult, num_res_blocks, z_channels)
        self.quantize = VectorQuantizer(codebook_size, codebook_embed_dim)
        self.quant_conv = nn.Conv2d(z_channels, codebook_embed_dim, 1)
        self.post_quant_conv = nn.Conv2d(codebook_embed_dim, z_channels, 1)
        self.downsample = 2 ** (len(ch_mult) - 1)

    def encode_indices(self, x: torch.Tensor) -> torch.Tensor:
        return self.quantize.indices(self.quant_conv(self.encoder(x)))

    def decode_code(self, codes: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """Codes [B, H*W] -> pixels [B, 3, H*d, W*d] in about [-1, 1]."""
        b = codes.shape[0]
        z = self.quantize.lookup(codes.reshape(-1), (b, self.quantize.embedding.weight.shape[1], *grid))
        return self.decoder(self.post_quant_conv(z))


# =========================================================================== checkpoints

def read_checkpoint(path: str, trust_pickle=None) -> dict[str, torch.Tensor]:
    """A published LlamaGen checkpoint -> its model state dict (safetensors, or torch.load with
    weights_only=True: the stored training `args` Namespace is allowed; anything else only when
    `trust_pickle` names the file, see `hub.read_checkpoint`)."""
    ckpt = read_file(path, trust_pickle=trust_pickle, safe_globals=[argparse.Namespace], what="checkpoint")
    for key in ("model", "module", "state_dict", "ema"):
        if isinstance(ckpt, dict) and isinstance(ckpt.get(key), dict):
            return ckpt[key]
    if isinstance(ckpt, dict) and all(isinstance(v, torch.Tensor) for v in ckpt.values()):
        return ckpt
    raise ValueError(f"checkpoint: {path} holds no model state dict")


_IGNORED = re.compile(r"(^|\.)(freqs_cis|causal_mask|kv_cache\.[kv]_cache)$")


def load_strict(module: nn.Module, state_dict: Mapping[str, torch.Tensor], what: str) -> None:
    """load_state_dict(strict=True) after dropping inference-only buffers a checkpoint may hold."""
    sd = {k.removeprefix("_orig_mod."): v for k, v in state_dict.items() if not _IGNORED.search(k)}
    try:
        missing, unexpected = module.load_state_dict(sd, strict=False)
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


# =========================================================================== the TokenModel

TextEncoder = Callable[[list[str]], "tuple[torch.Tensor, torch.Tensor]"]


class LlamaGenTokenModel:
    """LlamaGen behind the TokenModel contract. Prompts: class ids as strings (c2i) or text (t2i)."""

    def __init__(self, gpt: Transformer, vq: VQModel | None = None,
                 text_encoder: TextEncoder | None = None) -> None:
        self.gpt = gpt.eval()
        self.cfg = gpt.config
        self.vq = vq.eval() if vq is not None else None
        self.text_encoder = text_encoder
        self.vocab_size = self.cfg.vocab_size
        self.grid = (self.cfg.grid_size, self.cfg.grid_size)
        self.default_settings = dict(DEFAULT_SETTINGS[self.cfg.model_type])
        self.example_prompts = [p for p in EXAMPLE_PROMPTS[self.cfg.model_type]
                                if self.cfg.model_type == "t2i" or int(p) < self.cfg.num_classes]
        if not self.example_prompts:
            self.example_prompts = [str(i) for i in range(min(4, self.cfg.num_classes))]
        if self.cfg.model_type == "t2i" and text_encoder is None:
            raise ValueError("text_encoder: a t2i LlamaGen needs a text encoder (FLAN-T5-XL)")

    @property
    def device(self) -> torch.device:
        return self.gpt.tok_embeddings.weight.device

    def class_ids(self, prompts: Sequence[str]) -> torch.Tensor:
        ids = []
        for p in prompts:
            s = p.strip()
            if not re.fullmatch(r"\d+", s) or int(s) >= self.cfg.num_classes:
                raise ValueError(f"prompts: LlamaGen c2i takes ImageNet class ids 0..{self.cfg.num_classes - 1} "
                                 f"as strings (e.g. '207' for golden retriever), got {p!r}")
            ids.append(int(s))
        return torch.tensor(ids, device=self.device)

    def conditions(self, prompts: list[str], with_uncond: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Condition embeddings [R, cls, dim] and the condition mask [R, cls] (bool)."""
        cls = self.cfg.cls_token_num
        if self.cfg.model_type == "c2i":
            labels = self.class_ids(prompts)
            if with_uncond:
                labels = torch.cat([labels, torch.full_like(labels, self.cfg.num_classes)])
            cond = labels
            mask = torch.ones(len(labels), cls, dtype=torch.bool, device=self.device)
        else:
            states, tmask = self.text_encoder(prompts)
            states, tmask = left_pad_states(states.to(self.device), tmask.to(self.device), cls)
            cond = states * tmask[:, :, None].to(states.dtype)
            if with_uncond:
                unc = self.gpt.cls_embedding.uncond_embedding.to(cond.dtype)
                cond = torch.cat([cond, unc.expand_as(cond)])
                tmask = torch.cat([tmask, tmask])
            mask = tmask.bool()
        dtype = self.gpt.tok_embeddings.weight.dtype
        emb = self.gpt.condition(cond.to(dtype) if cond.is_floating_point() else cond)
        return emb, mask

    def start(self, prompts: Sequence[str], cfg_scale: float) -> "LlamaGenSession":
        prompts = check_prompts(prompts)
        return LlamaGenSession(self, prompts, check_cfg(cfg_scale))

    @torch.no_grad()
    def decode(self, tokens: torch.LongTensor) -> list:
        if self.vq is None:
            raise RuntimeError("LlamaGen decode needs the VQ-16 tokenizer weights (vq_ds16_c2i.pt / "
                               "vq_ds16_t2i.pt): pass vq_ckpt= to load_llamagen")
        n = self.grid[0] * self.grid[1]
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.shape[1] != n:
            raise ValueError(f"tokens: expected [B, {n}] code indices")
        if int(tokens.min()) < 0 or int(tokens.max()) >= self.vq.quantize.embedding.weight.shape[0]:
            raise ValueError("tokens: code indices out of the codebook range")
        pixels = self.vq.decode_code(tokens.to(self.vq.post_quant_conv.weight.device).long(), self.grid)
        return to_pil(pixels)


def left_pad_states(states: torch.Tensor, mask: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded text states [B, L, C] + mask -> left-padded to `length` (as sample_t2i.py)."""
    b, n, c = states.shape
    if n < length:
        states = torch.cat([states, states.new_zeros(b, length - n, c)], dim=1)
        mask = torch.cat([mask, mask.new_zeros(b, length - n)], dim=1)
    states, mask = states[:, :length], mask[:, :length]
    out = torch.zeros_like(states)
    for i in range(b):
        k = int(mask[i].sum())
        out[i] = torch.cat([states[i, k:], states[i, :k]])
    return out, torch.flip(mask, dims=[-1])


def to_pil(pixels: torch.Tensor) -> list:
    """[-1, 1] pixels -> PIL images (rounded as torchvision's save_image)."""
    from PIL import Image

    x = ((pixels.detach().float().clamp(-1, 1) + 1) / 2).mul(255).add(0.5).clamp(0, 255)
    arr = x.to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    return [Image.fromarray(a, "RGB") for a in arr]


class LlamaGenSession:
    """Cond rows 0..B-1, uncond rows B..2B-1 (when cfg_scale != 1), one static cache; rows join
    with `add_rows` and leave with `keep_rows` (a `ResizableSession`)."""

    def __init__(self, tm: LlamaGenTokenModel, prompts: list[str], cfg_scale: float) -> None:
        self.tm = tm
        self.B = len(prompts)
        self.cfg_scale = cfg_scale
        emb, self.cond_mask = tm.conditions(prompts, with_uncond=cfg_scale != 1.0)
        self.R = emb.shape[0]
        self.reps = self.R // self.B                     # 2 with guidance: cond block, uncond block
        self.cls = tm.cfg.cls_token_num
        self.length = self.cls + tm.cfg.block_size
        self.cache = tm.gpt.new_cache(self.R)
        with torch.no_grad():
            pos = torch.arange(self.cls, device=tm.device).expand(self.R, -1)
            logits = tm.gpt.forward_embeddings(emb, pos, self._mask(pos), self.cache)
        self.first_logits = self._mix(logits[:, -1])

    @torch.no_grad()
    def add_rows(self, prompts: Sequence[str]) -> torch.Tensor:
        """Start new rows after the existing ones (one forward pass over their conditions, with
        this session's guidance); returns their first logits [b, V]."""
        new = self.tm.start(prompts, self.cfg_scale)
        order = guided_order(self.B, new.B, self.reps).to(self.cond_mask.device)
        for mine, theirs in zip(self.cache, new.cache):
            mine.join(theirs, order)
        self.cond_mask = torch.cat([self.cond_mask, new.cond_mask])[order]
        self.B += new.B
        self.R = self.reps * self.B
        self.first_logits = torch.cat([self.first_logits, new.first_logits])
        return new.first_logits

    def keep_rows(self, rows: torch.LongTensor) -> None:
        """Keep only the rows listed, in that order; the others are forgotten."""
        rows = check_rows(rows, self.B)
        index = guided_rows(rows, self.B, self.reps).to(self.cond_mask.device)
        for layer in self.cache:
            layer.keep(index)
        self.cond_mask = self.cond_mask[index]
        self.B = int(rows.numel())
        self.R = self.reps * self.B
        self.first_logits = self.first_logits[rows.to(self.first_logits.device)]

    def _mix(self, logits: torch.Tensor) -> torch.Tensor:
        if self.reps == 1:
            return logits
        c, u = logits[: self.B], logits[self.B:]
        return u + self.cfg_scale * (c - u)

    def _mask(self, q_pos: torch.Tensor) -> torch.Tensor:
        """[R, 1, T, S]: causal by position; condition slots per the text mask; self always.

        S = furthest query position + 1: later slots are invisible to every query anyway.
        """
        view = int(q_pos.max()) + 1
        k = torch.arange(view, device=q_pos.device)
        causal = k <= q_pos[:, :, None]
        cond_ok = torch.ones(self.R, view, dtype=torch.bool, device=q_pos.device)
        cond_ok[:, : self.cls] = self.cond_mask
        own = k == q_pos[:, :, None]
        return ((causal & cond_ok[:, None, :]) | own)[:, None]

    @torch.no_grad()
    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        tokens, start = check_step(tokens, start, self.B, self.tm.vocab_size)
        n = self.tm.cfg.block_size
        if int((start + tokens.shape[1]).max()) > n:
            raise ValueError(f"start: start + W must be <= {n}, got starts {start.tolist()}")
        dev = self.tm.device
        tokens, start = tokens.to(dev), start.to(dev)
        reps = self.reps
        pos = (self.cls + start[:, None] + torch.arange(tokens.shape[1], device=dev)).repeat(reps, 1)
        h = self.tm.gpt.tok_embeddings(tokens.repeat(reps, 1))
        logits = self.tm.gpt.forward_embeddings(h, pos, self._mask(pos), self.cache)
        return self._mix(logits)


# =========================================================================== loading

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


def t5_text_encoder(folder: str, device, dtype, max_length: int = 120) -> TextEncoder:
    """FLAN-T5-XL states as LlamaGen's T5Embedder (max 120 tokens, padded to max_length).

    LlamaGen also runs PixArt's `clean_caption` (ftfy/bs4); here only lower-case + strip +
    whitespace collapse, which is what that cleaning does to ordinary prompts.
    """
    from transformers import AutoTokenizer, T5EncoderModel

    tok = AutoTokenizer.from_pretrained(folder)
    enc = T5EncoderModel.from_pretrained(folder, dtype=dtype).to(device).eval()

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
    sd = read_checkpoint(gpt_path, trust_pickle)
    gpt = Transformer(gpt_config_from_state_dict(sd, size, gpt_model, n_head=n_head))
    load_strict(gpt, sd, "gpt_ckpt")
    gpt.to(device=device, dtype=dtype)
    vq = None
    if vq_path is not None:
        vq_sd = read_checkpoint(vq_path, trust_pickle)
        vq = VQModel(**vq_config_from_state_dict(vq_sd))
        load_strict(vq, vq_sd, "vq_ckpt")
        vq.to(device)
    return LlamaGenTokenModel(gpt, vq, text_encoder)


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
