"""Cosmos-1.0-Autoregressive (4B video continuation, 5B Video2World) behind the TokenModel contract.

A compact re-implementation of NVIDIA's `cosmos1/models/autoregressive` transformer (NVIDIA/Cosmos,
Apache-2.0; vendored with a KV rollback in junhyukso/SCD `cosmos/`), with the published parameter
names so checkpoints load strictly:

- Llama-style pre-norm blocks: RMSNorm (eps 1e-5), grouped-query attention (32 heads, 8 KV heads,
  head_dim 128) with QK RMSNorm per head, SwiGLU MLP (w1, w3 -> w2, hidden 14336); 16 layers,
  dim 4096, vocabulary 64,000 (the DV8x16x16 FSQ codes); no bias anywhere.
- 3-D RoPE over the (frame, row, column) raster of the latent video [T=5, H=40, W=64]
  (RotaryPositionEmbeddingPytorchV2, theta 500000): of head_dim D, dim_h = dim_w = D // 6 * 2
  and dim_t = D - 2 * dim_h; the angle vector is cat([t * f_t, h * f_s, w * f_s] * 2) and
  rotation is TransformerEngine style (halves: [x1, x2] -> [-x2, x1]).
- Video2World (5B): a cross-attention (with its own norm) after every self-attention, keys and
  values from T5-11B encoder states (context_dim 1024, 512 tokens, padding zeroed, no mask), a
  sin-cos absolute position embedding added before every layer, and a <bov> token (id 64000) at
  sequence position 0 whose rotary and absolute embeddings are zero. Its token embedding has
  more rows than the 64,000 logits (vocab expansion rounded to 64).

Layout as published: 33 frames at 640x1024 -> latent 5x40x64 = 12,800 tokens in raster order.
As NVIDIA's inference (`utils/inference.py`) prepares its input, a clip is continued from its
LAST 9 frames (the 9th repeated up to 33): they give the first 2 latent frames (5,120 tokens),
the prefix fed at start, and 3 latent frames (7,680 tokens) are generated: `grid = (3, 40, 64)`,
`vocab_size = 64000`. An image conditions on 1 frame (`num_input_frames=1`, or
`model.with_input_frames(1)`): 1 latent frame given, 4 generated, `grid = (4, 40, 64)`.
No classifier-free guidance (cfg_scale must be 1). Sampling defaults in `default_settings`.

Prompts: each prompt is a path to a video file (mp4) to continue, or an image for a model
conditioned on 1 frame. For Video2World append the text after a '|': "clip.mp4|a car drives
down a street"; only the first '|' splits, the text may be empty. The base 4B model takes no text.

The KV cache is static and position-indexed (gpt-fast style): keys and values are written at
their absolute sequence position and attention is masked by position, so `Session.step` with a
smaller start simply overwrites: forgetting is free, and batch rows may sit at different starts.
Every row has the same layout (the conditioning prefix fills positions 0..prefix_len - 1, after
<bov> for Video2World), so rows join a running session (`add_rows`, `add_token_rows`) and leave
it (`keep_rows`) by concatenating and selecting cache rows. The model's `last_prefix` follows
the session's rows, so `decode` of the whole batch finds their conditioning tokens.

Not implemented: YaRN (only the 12B/13B models use it), the optional diffusion decoder
(Cosmos-1.0-Diffusion-7B-Decoder-DV8x16x16ToCV8x8x8), the guardrails.

GPU timing recipe (not run in the CPU tests), one forward of the full-size 4B at window L:

    import time, torch
    from scd_core.models.cosmos import full_size_config, CosmosTransformer, KVCache, random_model
    cfg = full_size_config("cosmos-1-ar-4b")
    net = random_model(cfg, device="cuda", dtype=torch.bfloat16)
    cache = KVCache.allocate(cfg, batch=1, capacity=cfg.seq_len + 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        prefix = torch.randint(0, cfg.vocab_size, (1, 5120), device="cuda")
        net(prefix, torch.arange(5120, device="cuda")[None], cache)            # prefill
        for L in (1, 32, 64, 128):
            tok = torch.randint(0, cfg.vocab_size, (1, L), device="cuda")
            pos = (5120 + torch.arange(L, device="cuda"))[None]
            for _ in range(3): net(tok, pos, cache)                            # warm-up
            torch.cuda.synchronize(); t0 = time.perf_counter()
            for _ in range(10): net(tok, pos, cache)
            torch.cuda.synchronize(); print(L, (time.perf_counter() - t0) / 10 * 1e3, "ms")

(`time_forward(...)` below runs exactly this; `python -m scd_core.models.cosmos --time` prints it.)
"""
from __future__ import annotations

import functools

import math
import os
from dataclasses import dataclass, field, replace
from typing import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from scd_core.models import cosmos_tokenizer as dv
from scd_core.models._hf import check_rows
from scd_core.models.hub import HubFiles, ProgressFn, cached, fetch, read_checkpoint as read_file

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
INPUT_FRAMES = (1, 9)         # the context lengths NVIDIA supports: 1 frame (an image) or 9 (a clip)
NUM_INPUT_FRAMES = 9          # a clip is continued from its last 9 frames (2 latent frames)
T5_MAX_LENGTH = 512


# ----------------------------------------------------------------------------- config

@dataclass(frozen=True)
class CosmosConfig:
    """Architecture and layout of a Cosmos-1 AR model (defaults: the published 4B base)."""
    dim: int = 4096
    n_layers: int = 16
    n_heads: int = 32
    n_kv_heads: int = 8
    head_dim: int | None = None
    ffn_hidden_size: int = 14336
    norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    vocab_size: int = 64000               # logits
    embed_vocab_size: int | None = None   # token-embedding rows (> vocab_size for Video2World)
    latent_shape: tuple[int, int, int] = (5, 40, 64)
    cond_latent_frames: int = 2
    use_qk_normalization: bool = True
    cross_attention: bool = False         # Video2World
    cross_attn_every_k_layers: int = 1
    context_dim: int = 1024
    abs_pos_emb: bool = False             # Video2World
    bov: bool = False                     # Video2World: <bov> (id vocab_size) at position 0
    pixel_size: tuple[int, int] = (640, 1024)

    @property
    def hd(self) -> int:
        return self.head_dim or self.dim // self.n_heads

    @property
    def n_embed(self) -> int:
        return self.embed_vocab_size or self.vocab_size

    @property
    def offset(self) -> int:
        """Sequence index of latent token 0 (1 when a <bov> token comes first)."""
        return 1 if self.bov else 0

    @property
    def seq_len(self) -> int:
        return self.offset + math.prod(self.latent_shape)

    @property
    def prefix_len(self) -> int:
        """Latent tokens fed at session start (the conditioning frames)."""
        _, h, w = self.latent_shape
        return self.cond_latent_frames * h * w

    @property
    def grid(self) -> tuple[int, int, int]:
        t, h, w = self.latent_shape
        return (t - self.cond_latent_frames, h, w)


def full_size_config(name: str = "cosmos-1-ar-4b") -> CosmosConfig:
    """The published config of `name` ("cosmos-1-ar-4b" or "cosmos-1-ar-5b-video2world")."""
    if name == "cosmos-1-ar-4b":
        return CosmosConfig()
    if name == "cosmos-1-ar-5b-video2world":
        # 64000 codes + <bov>, rounded up to a multiple of 64 by the published vocab expansion
        return CosmosConfig(cross_attention=True, abs_pos_emb=True, bov=True, embed_vocab_size=64064)
    raise ValueError(f"name: unknown Cosmos model {name!r}; expected one of {', '.join(HUB_IDS)}")


# ----------------------------------------------------------------------------- positions

def latent_coords(seq_pos: torch.Tensor, cfg: CosmosConfig) -> tuple[torch.Tensor, ...]:
    """Sequence positions -> (t, h, w, valid): the raster coordinates of each latent token.

    `valid` is False for the <bov> slot and for positions past the grid (padding), whose
    embeddings are zero as in the published tables (padded to a multiple of 64 with zeros).
    """
    t_n, h_n, w_n = cfg.latent_shape
    i = seq_pos.long() - cfg.offset
    valid = (i >= 0) & (i < t_n * h_n * w_n)
    i = i.clamp(min=0)
    return i // (h_n * w_n), (i // w_n) % h_n, i % w_n, valid


def rope_inv_freqs(cfg: CosmosConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(temporal, spatial) inverse frequencies of the published 3-D RoPE."""
    dim_h = cfg.hd // 6 * 2
    dim_t = cfg.hd - 2 * dim_h
    spatial = torch.arange(0, dim_h, 2)[: dim_h // 2].float() / dim_h     # float32, as published
    temporal = torch.arange(0, dim_t, 2)[: dim_t // 2].float() / dim_t
    return 1.0 / cfg.rope_theta ** temporal, 1.0 / cfg.rope_theta ** spatial


def rope_angles(seq_pos: torch.Tensor, cfg: CosmosConfig) -> torch.Tensor:
    """Angles [..., head_dim] of sequence positions: cat([t f_t, h f_s, w f_s] * 2)."""
    f_t, f_s = (f.to(seq_pos.device) for f in rope_inv_freqs(cfg))
    t, h, w, valid = latent_coords(seq_pos, cfg)
    half = torch.cat([t[..., None] * f_t, h[..., None] * f_s, w[..., None] * f_s], dim=-1)
    half = half * valid[..., None]
    return torch.cat([half, half], dim=-1)


def sincos_1d(dim: int, pos: torch.Tensor) -> torch.Tensor:
    """The published get_1d_sincos_pos_embed_from_grid: cat(sin(p w), cos(p w)), float64."""
    omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0))
    out = pos.double()[..., None] * omega.to(pos.device)
    return torch.cat([out.sin(), out.cos()], dim=-1)


def abs_pos_embedding(seq_pos: torch.Tensor, cfg: CosmosConfig) -> torch.Tensor:
    """SinCosPosEmbAxisTE for sequence positions: cat(emb_t, emb_h, emb_w) [..., dim]."""
    dim_h = cfg.dim // 6 * 2
    dim_t = cfg.dim - 2 * dim_h
    t, h, w, valid = latent_coords(seq_pos, cfg)
    emb = torch.cat([sincos_1d(dim_t, t), sincos_1d(dim_h, h), sincos_1d(dim_h, w)], dim=-1)
    return emb * valid[..., None]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [B, L, heads, D]; cos/sin [B, L, D] (in x's dtype, as published)."""
    cos, sin = cos[:, :, None].to(x.dtype), sin[:, :, None].to(x.dtype)
    return x * cos + rotate_half(x) * sin


# ----------------------------------------------------------------------------- network

class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Attention(nn.Module):
    """GQA with the published names (wq, wk, wv, wo, q_norm, k_norm); self or cross."""

    def __init__(self, cfg: CosmosConfig, context_dim: int | None = None):
        super().__init__()
        hd, kv_in = cfg.hd, context_dim or cfg.dim
        self.n_heads, self.n_kv, self.hd = cfg.n_heads, cfg.n_kv_heads, hd
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * hd, bias=False)
        self.wk = nn.Linear(kv_in, cfg.n_kv_heads * hd, bias=False)
        self.wv = nn.Linear(kv_in, cfg.n_kv_heads * hd, bias=False)
        self.wo = nn.Linear(cfg.n_heads * hd, cfg.dim, bias=False)
        self.qk_norm = cfg.use_qk_normalization
        if self.qk_norm:
            self.q_norm = RMSNorm(hd, cfg.norm_eps)
            self.k_norm = RMSNorm(hd, cfg.norm_eps)

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, n, _ = x.shape
        k = self.wk(x).view(b, n, self.n_kv, self.hd)
        v = self.wv(x).view(b, n, self.n_kv, self.hd)
        return (self.k_norm(k) if self.qk_norm else k), v

    def project_q(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.wq(x).view(b, n, self.n_heads, self.hd)
        return self.q_norm(q) if self.qk_norm else q

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None) -> torch.Tensor:
        """q [B, Lq, H, D]; k/v [B, Hkv, Lk, D]; mask [B, 1, Lq, Lk] (True = attend) or None.

        Query head j reads KV head j // rep (the published repeat_interleave). Instead of
        copying K/V rep times, the rep query heads of a group are stacked along the query
        axis, so K/V are read in place: the same result without the copy.
        """
        b, lq = q.shape[:2]
        rep = self.n_heads // self.n_kv
        qg = q.view(b, lq, self.n_kv, rep, self.hd).permute(0, 2, 3, 1, 4).reshape(b, self.n_kv, rep * lq, self.hd)
        if mask is not None:
            mask = mask.repeat(1, 1, rep, 1)
        out = F.scaled_dot_product_attention(qg, k, v, attn_mask=mask, scale=1.0 / math.sqrt(self.hd))
        out = out.view(b, self.n_kv, rep, lq, self.hd).permute(0, 3, 1, 2, 4)
        return self.wo(out.reshape(b, lq, self.n_heads * self.hd))

    def forward_self(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     seq_pos: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
        """Write this window's keys/values at their absolute positions, attend by position."""
        q = apply_rope(self.project_q(x), cos, sin)
        k, v = self.project_kv(x)
        k = apply_rope(k, cos, sin)
        rows = torch.arange(x.shape[0], device=x.device)[:, None]
        cache_k[rows, :, seq_pos] = k.to(cache_k.dtype)      # [B, L, Hkv, D] at [b, :, pos]
        cache_v[rows, :, seq_pos] = v.to(cache_v.dtype)
        span = mask.shape[-1]
        return self.attend(q, cache_k[:, :, :span], cache_v[:, :, :span], mask)

    def forward_cross(self, x: torch.Tensor, ctx_k: torch.Tensor, ctx_v: torch.Tensor) -> torch.Tensor:
        return self.attend(self.project_q(x), ctx_k, ctx_v, None)


class TransformerBlock(nn.Module):
    def __init__(self, cfg: CosmosConfig, layer_id: int):
        super().__init__()
        self.attention = Attention(cfg)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = MLP(cfg.dim, cfg.ffn_hidden_size)
        self.has_cross = cfg.cross_attention and layer_id % cfg.cross_attn_every_k_layers == 0
        if self.has_cross:
            self.cross_attention = Attention(cfg, context_dim=cfg.context_dim)
            self.cross_attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)


@dataclass
class KVCache:
    """Static, position-indexed self-attention cache: k/v [B, Hkv, capacity, D] per layer."""
    k: list[torch.Tensor]
    v: list[torch.Tensor]
    context: list[tuple[torch.Tensor, torch.Tensor] | None] = field(default_factory=list)

    @classmethod
    def allocate(cls, cfg: CosmosConfig, batch: int, capacity: int,
                 device: str | torch.device, dtype: torch.dtype) -> "KVCache":
        shape = (batch, cfg.n_kv_heads, capacity, cfg.hd)
        return cls([torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)],
                   [torch.zeros(shape, device=device, dtype=dtype) for _ in range(cfg.n_layers)],
                   [None] * cfg.n_layers)

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2]

    def grow(self, capacity: int) -> None:
        """Extend every layer's cache to `capacity` positions (kept entries are unchanged)."""
        extra = capacity - self.capacity
        if extra > 0:
            pad = lambda t: torch.cat([t, t.new_zeros(*t.shape[:2], extra, t.shape[3])], dim=2)
            self.k, self.v = [pad(t) for t in self.k], [pad(t) for t in self.v]

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only rows `rows` of every layer (self- and cross-attention), in that order."""
        self.k, self.v = [t[rows] for t in self.k], [t[rows] for t in self.v]
        self.context = [None if c is None else (c[0][rows], c[1][rows]) for c in self.context]

    def join(self, other: "KVCache") -> None:
        """Append the rows of `other` (a cache of the same network)."""
        def shape(c):
            return None if c is None else tuple(c[0].shape[1:])

        for mine, theirs in zip(self.context, other.context):
            if shape(mine) != shape(theirs):
                raise ValueError(f"context: the new rows' text states give keys of shape {shape(theirs)}, "
                                 f"the running rows' {shape(mine)}")
        capacity = max(self.capacity, other.capacity)
        self.grow(capacity)
        other.grow(capacity)
        self.k = [torch.cat([a, b]) for a, b in zip(self.k, other.k)]
        self.v = [torch.cat([a, b]) for a, b in zip(self.v, other.v)]
        self.context = [None if a is None else (torch.cat([a[0], b[0]]), torch.cat([a[1], b[1]]))
                        for a, b in zip(self.context, other.context)]


class CosmosTransformer(nn.Module):
    """The Cosmos-1 AR network; state-dict names match NVIDIA's checkpoints (after 'model.')."""

    def __init__(self, cfg: CosmosConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.n_embed, cfg.dim)
        self.layers = nn.ModuleList(TransformerBlock(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    def set_context(self, cache: KVCache, context: torch.Tensor) -> None:
        """Project T5 states [B, 512, context_dim] to each cross-attention's keys/values once."""
        for i, layer in enumerate(self.layers):
            if layer.has_cross:
                k, v = layer.cross_attention.project_kv(context.to(layer.cross_attention.wk.weight.dtype))
                cache.context[i] = (k.transpose(1, 2), v.transpose(1, 2))

    def forward(self, tokens: torch.LongTensor, seq_pos: torch.LongTensor, cache: KVCache) -> torch.Tensor:
        """tokens, seq_pos [B, L] -> logits [B, L, V] (float32).

        Every query attends to cached keys at positions <= its own, whatever was written at
        higher positions earlier: that is what makes rollback free.
        """
        cfg = self.cfg
        if int(seq_pos.max()) >= cache.capacity:
            cache.grow(int(seq_pos.max()) + 1)
        h = self.tok_embeddings(tokens)
        angles = rope_angles(seq_pos, cfg)
        cos, sin = angles.cos(), angles.sin()
        span = int(seq_pos.max()) + 1
        keys = torch.arange(span, device=tokens.device)
        mask = (keys[None, None, None, :] <= seq_pos[:, None, :, None])        # [B, 1, L, span]
        ape = abs_pos_embedding(seq_pos, cfg).to(h.dtype) if cfg.abs_pos_emb else None
        for i, layer in enumerate(self.layers):
            if ape is not None:
                h = h + ape
            h = h + layer.attention.forward_self(layer.attention_norm(h), cos, sin, seq_pos,
                                                 cache.k[i], cache.v[i], mask)
            if layer.has_cross:
                ctx_k, ctx_v = cache.context[i]
                h = h + layer.cross_attention.forward_cross(layer.cross_attention_norm(h), ctx_k, ctx_v)
            h = h + layer.feed_forward(layer.ffn_norm(h))
        return self.output(self.norm(h)).float()


def random_model(cfg: CosmosConfig, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, seed: int = 0, std: float = 0.02) -> CosmosTransformer:
    """A randomly initialised network built directly on `device` (for tests and timing)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.device("meta"):
        net = CosmosTransformer(cfg)
    net = net.to_empty(device=device).to(dtype)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, std, generator=gen)
    return net.eval()


def time_forward(name: str | CosmosConfig = "cosmos-1-ar-4b", windows: Sequence[int] = (1, 32, 64, 128),
                 device: str = "cuda", dtype: torch.dtype = torch.bfloat16, repeats: int = 10) -> dict[int, float]:
    """Milliseconds per forward of a random full-size model (or of a given config) at each
    window L, after a prefill of the conditioning prefix (GPU recipe)."""
    import time
    cfg = name if isinstance(name, CosmosConfig) else full_size_config(name)
    net = random_model(cfg, device=device, dtype=dtype)
    cache = KVCache.allocate(cfg, 1, cfg.seq_len + max(windows), device, dtype)
    if cfg.cross_attention:
        net.set_context(cache, torch.zeros(1, T5_MAX_LENGTH, cfg.context_dim, device=device, dtype=dtype))
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    start = cfg.offset + cfg.prefix_len
    result = {}
    with torch.no_grad():
        net(torch.zeros(1, start, dtype=torch.long, device=device),
            torch.arange(start, device=device)[None], cache)
        for L in windows:
            tok = torch.randint(0, cfg.vocab_size, (1, L), device=device)
            pos = (start + torch.arange(L, device=device))[None]
            for _ in range(3):
                net(tok, pos, cache)
            sync()
            t0 = time.perf_counter()
            for _ in range(repeats):
                net(tok, pos, cache)
            sync()
            result[L] = (time.perf_counter() - t0) / repeats * 1e3
    return result


# ----------------------------------------------------------------------------- checkpoint

def map_checkpoint(state: dict) -> dict[str, torch.Tensor]:
    """Published checkpoint -> our state dict: unwrap {'model': ...}, strip 'model.', drop
    TransformerEngine '_extra_state' entries, split a fused 'wqkv' into wq/wk/wv."""
    if "model" in state and isinstance(state["model"], dict):
        state = state["model"]
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.endswith("_extra_state") or not isinstance(value, torch.Tensor):
            continue
        out[key[len("model."):] if key.startswith("model.") else key] = value
    return out


def split_fused_qkv(state: dict[str, torch.Tensor], cfg: CosmosConfig) -> dict[str, torch.Tensor]:
    q_size, kv_size = cfg.n_heads * cfg.hd, cfg.n_kv_heads * cfg.hd
    for key in [k for k in state if k.endswith("wqkv.weight")]:
        wq, wk, wv = state.pop(key).split([q_size, kv_size, kv_size])
        base = key[: -len("wqkv.weight")]
        state.update({base + "wq.weight": wq, base + "wk.weight": wk, base + "wv.weight": wv})
    return state


def config_from_state(state: dict[str, torch.Tensor], base: CosmosConfig) -> CosmosConfig:
    """Read the sizes that differ between variants from the tensors themselves."""
    n_embed, dim = state["tok_embeddings.weight"].shape
    n_layers = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("layers."))
    cross = any(".cross_attention." in k for k in state)
    return replace(base, dim=dim, n_layers=n_layers, vocab_size=state["output.weight"].shape[0],
                   embed_vocab_size=n_embed if n_embed != state["output.weight"].shape[0] else None,
                   ffn_hidden_size=state["layers.0.feed_forward.w1.weight"].shape[0],
                   use_qk_normalization="layers.0.attention.q_norm.weight" in state,
                   cross_attention=cross, abs_pos_emb=cross or base.abs_pos_emb, bov=cross or base.bov,
                   context_dim=(state["layers.0.cross_attention.wk.weight"].shape[1] if cross else base.context_dim))


def read_checkpoint(path: str, trust_pickle=None) -> dict:
    """Load a checkpoint file without unrestricted pickle (safetensors or weights_only), unless
    `trust_pickle` names this file (see `hub.read_checkpoint`)."""
    return read_file(path, trust_pickle=trust_pickle, mmap=not path.endswith(".safetensors"),
                     what="checkpoint")


def load_network(path: str, cfg: CosmosConfig | None = None, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, trust_pickle=None) -> CosmosTransformer:
    """Build the network from a checkpoint file and load it strictly."""
    state = map_checkpoint(read_checkpoint(path, trust_pickle))
    cfg = config_from_state(state, cfg or CosmosConfig())
    state = split_fused_qkv(state, cfg)
    with torch.device("meta"):
        net = CosmosTransformer(cfg)
    net.load_state_dict(state, strict=True, assign=True)
    return net.to(device=device, dtype=dtype).eval()


# ----------------------------------------------------------------------------- local files

def _cached_file(files: HubFiles, filename: str) -> str | None:
    """`filename` of the cached snapshot of `files`, or None (never the network)."""
    folder = cached(files)
    path = os.path.join(folder, filename) if folder else None
    return path if path and os.path.isfile(path) else None


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
    return _cached_file(HUB_FILES[name_or_path], "model.pt")


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


# ----------------------------------------------------------------------------- TokenModel

def parse_prompt(prompt: str, has_text: bool) -> tuple[str, str]:
    """'clip.mp4|text' -> ('clip.mp4', 'text'); the text part only for Video2World."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"prompts: expected a video path (\"clip.mp4\" or \"clip.mp4|text\"), got {prompt!r}")
    path, sep, text = prompt.partition("|")
    if sep and not has_text:
        raise ValueError("prompts: this Cosmos model continues a video and takes no text; "
                         "pass just the video path (text is for cosmos-1-ar-5b-video2world)")
    return path.strip(), text.strip()


class CosmosSession:
    """One batch being decoded: the conditioning prefix is in the cache from the start. Rows
    join with `add_rows` and leave with `keep_rows` (a `ResizableSession`)."""

    def __init__(self, model: "CosmosVideoModel", prefix: torch.LongTensor,
                 context: torch.Tensor | None = None):
        self.model = model
        net, cfg = model.net, model.cfg
        b = prefix.shape[0]
        # Optional, outside the contract: the conditioning tokens in raster order, so an
        # engine can seed 'repeat-frame' drafts of generated frame 0 from the last given frame.
        self.prefix_tokens = prefix.detach().long()
        self.base = cfg.offset + cfg.prefix_len              # sequence index of generated 0
        self.cache = KVCache.allocate(cfg, b, cfg.seq_len + 1, model.device, model.dtype)
        if cfg.cross_attention:
            if context is None:
                raise ValueError("context: Video2World needs text embeddings")
            net.set_context(self.cache, context.to(model.device))
        tokens = prefix.to(model.device)
        if cfg.bov:
            bov = torch.full((b, 1), cfg.vocab_size, dtype=torch.long, device=model.device)
            tokens = torch.cat([bov, tokens], dim=1)
        pos = torch.arange(tokens.shape[1], device=model.device).expand(b, -1)
        with torch.no_grad():
            self.first_logits = net(tokens, pos, self.cache)[:, -1]
        self.fed = torch.zeros(b, dtype=torch.long)           # generated positions fed per row

    def add_rows(self, prompts: Sequence[str]) -> torch.Tensor:
        """Start new rows after the existing ones (one forward pass over their conditioning
        prefixes); `prompts` as for `start`. Returns their first logits [b, V]."""
        prefix, context = self.model.conditioning(prompts)
        return self.add_token_rows(prefix, context)

    def add_token_rows(self, prefix: torch.LongTensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """`add_rows` from conditioning tokens [b, prefix_len] (and text states), as `start_tokens`."""
        self.model.check_prefix(prefix)
        new = CosmosSession(self.model, prefix.long(), context)
        self.cache.join(new.cache)
        self.prefix_tokens = torch.cat([self.prefix_tokens, new.prefix_tokens.to(self.prefix_tokens.device)])
        self.fed = torch.cat([self.fed, new.fed])
        self.first_logits = torch.cat([self.first_logits, new.first_logits])
        self.model.last_prefix = self.prefix_tokens.cpu()
        return new.first_logits

    def row_decoder(self, row: int):
        """The decoder of row `row`'s tokens [1, N]: with the conditioning frames it continues."""
        return functools.partial(self.model.decode, prefix=self.prefix_tokens[row: row + 1].cpu())

    def keep_rows(self, rows: torch.LongTensor) -> None:
        """Keep only the rows listed, in that order; the others are forgotten."""
        rows = check_rows(rows, self.fed.shape[0])
        self.cache.keep(rows.to(self.model.device))
        self.prefix_tokens = self.prefix_tokens[rows.to(self.prefix_tokens.device)]
        self.fed = self.fed[rows]
        self.first_logits = self.first_logits[rows.to(self.first_logits.device)]
        self.model.last_prefix = self.prefix_tokens.cpu()

    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        b = self.fed.shape[0]
        if not isinstance(tokens, torch.Tensor) or tokens.ndim != 2 or tokens.shape[0] != b or tokens.shape[1] < 1:
            raise ValueError(f"tokens: expected a LongTensor [{b}, W] with W >= 1, got "
                             f"{getattr(tokens, 'shape', type(tokens))}")
        start = torch.as_tensor(start, dtype=torch.long).reshape(-1).cpu()
        if start.shape[0] != b:
            raise ValueError(f"start: expected {b} entries, got {start.shape[0]}")
        if bool((start < 0).any()) or bool((start > self.fed).any()):
            raise ValueError(f"start: each row's start must lie in [0, positions fed so far]; "
                             f"got {start.tolist()} with {self.fed.tolist()} fed")
        if bool((tokens < 0).any()) or bool((tokens >= self.model.vocab_size).any()):
            raise ValueError(f"tokens: ids must lie in [0, {self.model.vocab_size})")
        w = tokens.shape[1]
        pos = (self.base + start)[:, None] + torch.arange(w)[None]
        with torch.no_grad():
            logits = self.model.net(tokens.to(self.model.device), pos.to(self.model.device), self.cache)
        self.fed = start + w
        return logits


class CosmosVideoModel:
    """TokenModel for Cosmos-1 AR video continuation; see the module docstring."""

    def __init__(self, net: CosmosTransformer, tokenizer: dv.DVTokenizer | None = None,
                 text_encoder=None, name: str = "cosmos", device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, num_input_frames: int = NUM_INPUT_FRAMES):
        if num_input_frames not in INPUT_FRAMES:
            raise ValueError(f"num_input_frames: Cosmos conditions on {' or '.join(map(str, INPUT_FRAMES))} "
                             f"frames, got {num_input_frames!r}")
        self.net, self.name, self.num_input_frames = net, name, num_input_frames
        # 9 frames -> 2 latent frames given, 3 generated; 1 frame -> 1 given, 4 generated.
        self.cfg = replace(net.cfg, cond_latent_frames=dv.latent_frames(num_input_frames))
        self.tokenizer, self.text_encoder = tokenizer, text_encoder
        self.device, self.dtype = torch.device(device), dtype
        self.vocab_size = self.cfg.vocab_size
        self.grid = self.cfg.grid
        top_p = 0.7 if self.cfg.cross_attention else 0.8
        self.default_settings = {"top_p": top_p, "temperature": 1.0, "cfg_scale": 1.0,
                                 "window": 128, "init": "repeat-frame"}
        self.last_prefix: torch.LongTensor | None = None      # [B, prefix_len] of the last start()

    def with_input_frames(self, num_input_frames: int) -> "CosmosVideoModel":
        """The same network conditioned on `num_input_frames` (1: an image or a clip's last
        frame, 4 latent frames generated; 9: a clip's last 9 frames, 3 generated). Shares the
        weights; its `grid` differs, so it is another TokenModel."""
        if num_input_frames == self.num_input_frames:
            return self
        return CosmosVideoModel(self.net, self.tokenizer, self.text_encoder, name=self.name, device=self.device,
                                dtype=self.dtype, num_input_frames=num_input_frames)

    # -- contract ------------------------------------------------------------------
    def start(self, prompts: Sequence[str], cfg_scale: float = 1.0) -> CosmosSession:
        if cfg_scale != 1:
            raise ValueError(f"cfg_scale: Cosmos-1 AR has no classifier-free guidance; must be 1, got {cfg_scale}")
        return self.start_tokens(*self.conditioning(prompts))

    def conditioning(self, prompts: Sequence[str]) -> tuple[torch.LongTensor, torch.Tensor | None]:
        """Prompts -> (prefix tokens [B, prefix_len], T5 states for Video2World or None)."""
        if isinstance(prompts, str) or not prompts:
            raise ValueError("prompts: expected a non-empty list of video paths")
        parsed = [parse_prompt(p, self.cfg.cross_attention) for p in prompts]
        images = [path for path, _ in parsed if dv.is_image(path)]
        if images and self.num_input_frames != 1:
            raise ValueError(
                f"prompts: {images[0]!r} is an image; as in NVIDIA's pipeline an image conditions on 1 frame "
                f"(1 latent frame given, {self.cfg.latent_shape[0] - 1} generated): use "
                "model.with_input_frames(1), or load the model with num_input_frames=1")
        prefix = self.encode_videos([path for path, _ in parsed])
        context = self.encode_text([text for _, text in parsed]) if self.cfg.cross_attention else None
        return prefix, context

    def check_prefix(self, prefix) -> None:
        """Conditioning tokens must be an integer tensor [B, prefix_len] of codes."""
        if not isinstance(prefix, torch.Tensor) or prefix.ndim != 2 or prefix.shape[1] != self.cfg.prefix_len \
                or prefix.dtype.is_floating_point:
            raise ValueError(f"prefix: expected integer tokens [B, {self.cfg.prefix_len}], got "
                             f"{tuple(getattr(prefix, 'shape', ()))}")
        if bool((prefix < 0).any()) or bool((prefix >= self.vocab_size).any()):
            raise ValueError(f"prefix: token ids must lie in [0, {self.vocab_size})")

    def start_tokens(self, prefix: torch.LongTensor, context: torch.Tensor | None = None) -> CosmosSession:
        """Start from conditioning tokens [B, prefix_len] (and T5 states [B, 512, 1024])."""
        self.check_prefix(prefix)
        self.last_prefix = prefix.detach().cpu().long()
        return CosmosSession(self, prefix.long(), context)

    def decode(self, tokens: torch.LongTensor, prefix: torch.LongTensor | None = None) -> list:
        """Generated tokens [B, N] -> per row the 33 decoded frames (PIL images).

        The decoder works on whole 33-frame chunks, so the conditioning latents (of the last
        `start`, or `prefix`) are put in front; the first 9 frames reconstruct the input clip.
        """
        if self.tokenizer is None:
            raise ValueError("decode: this model was loaded without the DV tokenizer")
        n = math.prod(self.grid)
        if tokens.ndim != 2 or tokens.shape[1] != n:
            raise ValueError(f"tokens: expected [B, {n}], got {tuple(tokens.shape)}")
        prefix = self.last_prefix if prefix is None else prefix.long().cpu()
        if prefix is None or prefix.shape[0] != tokens.shape[0]:
            raise ValueError("prefix: decode needs the conditioning tokens of these rows; call start() "
                             "first or pass prefix=[B, prefix_len]")
        full = torch.cat([prefix, tokens.long().cpu()], dim=1).view(tokens.shape[0], *self.cfg.latent_shape)
        return [dv.clip_to_frames(self.tokenizer.decode(row[None]))[0] for row in full]   # a row at a time

    # -- conditioning ----------------------------------------------------------------
    def encode_videos(self, paths: Sequence[str]) -> torch.LongTensor:
        """Video (or image) paths -> prefix tokens [B, prefix_len]: the clip's last
        `num_input_frames` frames (9 -> 2 latent frames, 1 -> 1), as NVIDIA's inference does."""
        if self.tokenizer is None:
            raise ValueError("prompts: this model was loaded without the DV tokenizer; use start_tokens()")
        n = self.num_input_frames
        clips = [dv.prepare_clip(dv.read_frames(p, last=n), n, self.cfg.pixel_size, self.tokenizer.pixel_chunk)
                 for p in paths]
        latents = torch.cat([self.tokenizer.encode(clip[None]) for clip in clips])   # a row at a time
        expected = tuple(self.cfg.latent_shape)
        if tuple(latents.shape[1:]) != expected:
            raise ValueError(f"prompts: the tokenizer gave latents {tuple(latents.shape[1:])}, expected {expected}")
        return latents.flatten(1)[:, : self.cfg.prefix_len].cpu()

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor:
        """T5 encoder states [B, 512, 1024], zero past each text's length, as published."""
        if self.text_encoder is None:
            raise ValueError("prompts: Video2World needs the T5 text encoder (google-t5/t5-11b), not loaded")
        tokenizer, encoder = self.text_encoder
        batch = tokenizer(list(texts), return_tensors="pt", truncation=True, padding="max_length",
                          max_length=T5_MAX_LENGTH)
        dev = next(encoder.parameters()).device
        with torch.no_grad():
            states = encoder(input_ids=batch.input_ids.to(dev),
                             attention_mask=batch.attention_mask.to(dev)).last_hidden_state
        keep = batch.attention_mask.to(dev).bool()[..., None]
        return (states * keep).to(self.dtype)


# ----------------------------------------------------------------------------- loader

def levels_for(vocab_size: int) -> tuple[int, ...]:
    """FSQ levels of the tokenizer matching a vocabulary (the DV levels for 64,000)."""
    if vocab_size == math.prod(dv.FSQ_LEVELS):
        return dv.FSQ_LEVELS
    for levels in ((3, 4, 5), (4, 4, 4), (2, 3, 5)):        # small ones used by the tests
        if math.prod(levels) == vocab_size:
            return levels
    raise ValueError(f"config: no FSQ levels known for a vocabulary of {vocab_size}")


def _default_device_dtype(device, dtype) -> tuple[torch.device, torch.dtype]:
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return device, dtype


def load_t5(path: str | None, device: torch.device, dtype: torch.dtype = torch.float32, *,
            local_files_only: bool = False, progress: ProgressFn | None = None):
    """transformers' T5 tokenizer + T5EncoderModel from a folder, or google-t5/t5-11b from the
    Hub (downloaded on first use).

    NVIDIA runs T5-11B in float32 (about 44 GB); pass t5_dtype=torch.bfloat16 or
    t5_device="cpu" to load_cosmos on a smaller GPU (embeddings then differ slightly)."""
    from transformers import AutoTokenizer, T5EncoderModel
    source = path or fetch(T5_FILES, local_files_only=local_files_only, progress=progress,
                           needed_by="Cosmos Video2World")
    try:
        tok = AutoTokenizer.from_pretrained(source, local_files_only=True)
        enc = T5EncoderModel.from_pretrained(source, local_files_only=True, dtype=dtype)
    except (OSError, ValueError) as exc:
        raise FileNotFoundError(f"t5_path: no T5 text encoder in {source!r} ({exc})") from exc
    return tok, enc.to(device).eval()


def load_cosmos(name_or_path: str, device: str | torch.device | None = None,
                dtype: torch.dtype | None = None, tokenizer_path: str | None = None,
                t5_path: str | None = None, load_text_encoder: bool = True,
                config: CosmosConfig | None = None, t5_device: str | torch.device | None = None,
                t5_dtype: torch.dtype = torch.float32, num_input_frames: int = NUM_INPUT_FRAMES, *,
                local_files_only: bool = False, progress: ProgressFn | None = None,
                trust_pickle=None) -> CosmosVideoModel:
    """Load a Cosmos-1 AR model: a registry name, a folder holding model.pt, or the file.

    A registry name is looked up in $SCD_COSMOS_CHECKPOINTS (NVIDIA's layout:
    <dir>/Cosmos-1.0-Autoregressive-4B/model.pt beside <dir>/Cosmos-1.0-Tokenizer-DV8x16x16/),
    then the Hugging Face cache, and downloaded from NVIDIA's repositories on first use (their
    licence must be accepted on the Hub first). The variant (base / Video2World) is read from
    the weights. The DV tokenizer comes from `tokenizer_path`, beside the checkpoint, the cache
    or the Hub. `config` supplies what the tensors do not tell (latent shape, heads, RoPE
    theta); the default is the published layout (640x1024 -> 5x40x64). `num_input_frames`
    (9, or 1 for images) is the conditioning length (see `CosmosVideoModel.with_input_frames`).
    """
    if not isinstance(name_or_path, str) or not name_or_path:
        raise ValueError(f"name_or_path: expected a model name or path, got {name_or_path!r}")
    hub = {"local_files_only": local_files_only, "progress": progress}
    ckpt = find_checkpoint(name_or_path)
    if ckpt is None and name_or_path in HUB_FILES:
        ckpt = os.path.join(fetch(HUB_FILES[name_or_path], needed_by=name_or_path, **hub), "model.pt")
    if ckpt is None:
        raise FileNotFoundError(f"name_or_path: Cosmos checkpoint not found for {name_or_path!r}: pass a folder "
                                f"holding model.pt, or a registry name ({', '.join(HUB_FILES)})")
    tok_dir = find_tokenizer(ckpt, tokenizer_path)
    if tok_dir is None and tokenizer_path is None:
        tok_dir = fetch(TOKENIZER_FILES, needed_by=name_or_path, **hub)
    if tok_dir is None:
        raise FileNotFoundError(f"tokenizer_path: Cosmos DV tokenizer (encoder.jit, decoder.jit) not found "
                                f"in {tokenizer_path!r}")
    device, dtype = _default_device_dtype(device, dtype)
    net = load_network(ckpt, config, device=device, dtype=dtype, trust_pickle=trust_pickle)
    tokenizer = dv.DVTokenizer.load(tok_dir, device=device, dtype=dtype, levels=levels_for(net.cfg.vocab_size))
    text = None
    if net.cfg.cross_attention and load_text_encoder:
        text = load_t5(t5_path, torch.device(t5_device or device), t5_dtype, **hub)
    name = name_or_path if name_or_path in HUB_IDS else os.path.basename(os.path.normpath(name_or_path))
    return CosmosVideoModel(net, tokenizer, text, name=name, device=device, dtype=dtype,
                            num_input_frames=num_input_frames)


def _main(argv: Sequence[str] | None = None) -> None:
    """`python -m scd_core.models.cosmos --time`: the GPU forward-timing recipe."""
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", action="store_true", help="time one forward of a random full-size model")
    ap.add_argument("--model", default="cosmos-1-ar-4b", choices=list(HUB_IDS))
    ap.add_argument("--windows", default="1,32,64,128")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    if not args.time:
        from scd_core.models import model_status
        for name in HUB_IDS:
            print(f"{name}: {model_status(name).label}")
        return
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    windows = [int(w) for w in args.windows.split(",")]
    for L, ms in time_forward(args.model, windows, device=args.device, dtype=dtype).items():
        print(f"{args.model} L={L:4d}: {ms:8.2f} ms per forward")


if __name__ == "__main__":
    _main()
