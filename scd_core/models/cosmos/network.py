"""The Cosmos-1 AR network (NVIDIA's parameter names), its 3-D RoPE and absolute position
embeddings, and its static, position-indexed KV cache."""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import static
from ..layers import RMSNorm
from ..tree import tree_mask
from .config import CosmosConfig


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


def rope_inv_freqs(cfg: CosmosConfig, device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(temporal, spatial) inverse frequencies of the published 3-D RoPE, computed on `device`
    (nothing is copied there)."""
    dim_h = cfg.hd // 6 * 2
    dim_t = cfg.hd - 2 * dim_h
    spatial = torch.arange(0, dim_h, 2, device=device)[: dim_h // 2].float() / dim_h     # float32, as published
    temporal = torch.arange(0, dim_t, 2, device=device)[: dim_t // 2].float() / dim_t
    return 1.0 / cfg.rope_theta ** temporal, 1.0 / cfg.rope_theta ** spatial


def rope_angles(seq_pos: torch.Tensor, cfg: CosmosConfig) -> torch.Tensor:
    """Angles [..., head_dim] of sequence positions: cat([t f_t, h f_s, w f_s] * 2)."""
    f_t, f_s = rope_inv_freqs(cfg, seq_pos.device)
    t, h, w, valid = latent_coords(seq_pos, cfg)
    half = torch.cat([t[..., None] * f_t, h[..., None] * f_s, w[..., None] * f_s], dim=-1)
    half = half * valid[..., None]
    return torch.cat([half, half], dim=-1)


def sincos_1d(dim: int, pos: torch.Tensor) -> torch.Tensor:
    """The published get_1d_sincos_pos_embed_from_grid: cat(sin(p w), cos(p w)), float64."""
    omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64, device=pos.device) / (dim / 2.0))
    out = pos.double()[..., None] * omega
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

    def forward_nodes(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache_k: torch.Tensor,
                      cache_v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Tree nodes: their keys/values go to the tree slots after the cache's S slots
        (`static.write_tree`: siblings share a position, not a slot), and they attend to
        slots [0, S) and to the nodes through `mask` [B, 1, T, S + T] (`tree.tree_mask`)."""
        q = apply_rope(self.project_q(x), cos, sin)
        k, v = self.project_kv(x)
        k = apply_rope(k, cos, sin).transpose(1, 2)
        span = mask.shape[-1] - x.shape[1]
        return self.attend(q, static.write_tree(cache_k, span, k), static.write_tree(cache_v, span, v.transpose(1, 2)),
                           mask)

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
    """Static, position-indexed self-attention cache: k/v [B, Hkv, capacity + tree slots, D]
    per layer, the last of the capacity's slots scratch, then the tree slots (`reserve`), where
    a tree's nodes are written for one pass; and each cross-attention's keys/values of the text
    (Video2World). Borrowed from `buffers` for `owner` (a session; by default a cache of its
    own, nothing reused), and moved into other borrowed buffers as rows join or leave or tree
    slots are added (`scd_core.models.static`)."""
    k: list[torch.Tensor]
    v: list[torch.Tensor]
    context: list[tuple[torch.Tensor, torch.Tensor] | None] = field(default_factory=list)
    tree_slots: int = 0
    nodes: int = 0                                  # the last tree's nodes, until keep_nodes
    buffers: static.Buffers = field(default_factory=lambda: static.Buffers(idle_cap=0))
    owner: weakref.ref | None = None

    @classmethod
    def allocate(cls, cfg: CosmosConfig, batch: int, capacity: int, device: str | torch.device, dtype: torch.dtype,
                 buffers: static.Buffers | None = None, owner=None) -> "KVCache":
        cache = cls([], [], [None] * cfg.n_layers)
        cache.buffers = buffers if buffers is not None else cache.buffers
        cache.owner = weakref.ref(owner if owner is not None else cache)
        shape = (batch, cfg.n_kv_heads, capacity, cfg.hd)
        flat = cache.buffers.zeros(cache.owner(), [(shape, dtype)] * (2 * cfg.n_layers), device)
        cache.k, cache.v = flat[:cfg.n_layers], flat[cfg.n_layers:]
        return cache

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2] - self.tree_slots

    def set_context(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """A cross-attention layer's keys and values of the text [B, Hkv, L, D], borrowed."""
        self.context[layer] = tuple(self.buffers.holding(self.owner(), [k, v]))

    def _move(self, k: list[torch.Tensor], v: list[torch.Tensor], context=None) -> None:
        """Take new keys and values (and text keys and values) into borrowed buffers, giving the
        old ones back."""
        flat = self.buffers.holding(self.owner(), k + v, old=self.k + self.v)
        self.k, self.v = flat[:len(k)], flat[len(k):]
        for i, new in enumerate(context or []):
            if new is not None:
                self.context[i] = tuple(self.buffers.holding(self.owner(), list(new), old=list(self.context[i])))

    def grow(self, capacity: int) -> None:
        """Extend every layer's cache to `capacity` positions (kept entries are unchanged; the
        tree slots, which hold nothing between passes, follow them)."""
        extra = capacity - self.capacity
        if extra > 0:
            def pad(t):
                return torch.cat([t[:, :, :self.capacity], t.new_zeros(*t.shape[:2], extra + self.tree_slots, t.shape[3])],
                                 dim=2)
            self._move([pad(t) for t in self.k], [pad(t) for t in self.v])

    def reserve(self, nodes: int) -> None:
        """Tree slots for trees of `nodes` nodes (grown, never shrunk)."""
        if nodes > self.tree_slots:
            more, self.tree_slots = nodes - self.tree_slots, nodes
            self._move([static.with_tree_slots(t, more) for t in self.k], [static.with_tree_slots(t, more) for t in self.v])

    def keep_nodes(self, index: torch.Tensor, kept: torch.Tensor, slots: torch.Tensor) -> None:
        """Move the last tree's nodes `index` [B, P] to positions `slots` [B, P] where `kept`,
        the others to the scratch slot (no query sees it)."""
        C = self.capacity
        slots = torch.where(kept, slots, C - 1)
        for k, v in zip(self.k, self.v):
            static.keep_tree(k, C, self.nodes, index, slots)
            static.keep_tree(v, C, self.nodes, index, slots)
        self.nodes = 0

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only rows `rows` of every layer (self- and cross-attention), in that order."""
        self._move([t[rows] for t in self.k], [t[rows] for t in self.v],
                   [None if c is None else (c[0][rows], c[1][rows]) for c in self.context])

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
        self.reserve(other.tree_slots), other.reserve(self.tree_slots)         # the same tree slots
        self._move([torch.cat([a, b]) for a, b in zip(self.k, other.k)], [torch.cat([a, b]) for a, b in zip(self.v, other.v)],
                   [None if a is None else (torch.cat([a[0], b[0]]), torch.cat([a[1], b[1]]))
                    for a, b in zip(self.context, other.context)])


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
                cache.set_context(i, k.transpose(1, 2), v.transpose(1, 2))

    def forward(self, tokens: torch.LongTensor, seq_pos: torch.LongTensor, cache: KVCache,
                tree: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """tokens, seq_pos [B, L] -> logits [B, L, V] (float32).

        Every query attends to cached keys at positions <= its own, whatever was written at
        higher positions earlier: that is what makes rollback free. With `tree` = (first [B],
        seen [B, L, L]) the tokens are the nodes of a draft tree: each attends to the cached
        positions < first[b] and to its ancestors and itself (`seen`), and their keys and
        values go to the cache's tree slots until `cache.keep_nodes`.
        """
        cfg = self.cfg
        h = self.tok_embeddings(tokens)
        angles = rope_angles(seq_pos, cfg)
        cos, sin = angles.cos(), angles.sin()
        keys = torch.arange(cache.capacity, device=tokens.device)          # every slot: a fixed shape
        if tree is None:
            mask = (keys[None, None, None, :] <= seq_pos[:, None, :, None])    # [B, 1, L, capacity]
        else:
            first, seen = tree
            mask = tree_mask(keys < first[:, None], seen)
            cache.reserve(tokens.shape[1])
            cache.nodes = tokens.shape[1]
        ape = abs_pos_embedding(seq_pos, cfg).to(h.dtype) if cfg.abs_pos_emb else None
        for i, layer in enumerate(self.layers):
            if ape is not None:
                h = h + ape
            x = layer.attention_norm(h)
            if tree is None:
                h = h + layer.attention.forward_self(x, cos, sin, seq_pos, cache.k[i], cache.v[i], mask)
            else:
                h = h + layer.attention.forward_nodes(x, cos, sin, cache.k[i], cache.v[i], mask)
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
