"""LlamaGen's GPT (c2i and t2i) with the published parameter names, and its static,
position-indexed KV cache."""
from __future__ import annotations

import weakref

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import static
from ..layers import RMSNorm
from .config import GPTConfig


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
    """LlamaGen's 2-D RoPE table [cls + grid^2, head_dim/2, 2]; condition rows are zeros.

    Computed, never loaded: made on the CPU whatever the default device (a network is built
    on the meta device before its weights are loaded) and moved to the activations' device at
    first use."""
    half = head_dim // 2
    cpu = torch.device("cpu")
    freqs = 1.0 / (base ** (torch.arange(0, half, 2, device=cpu)[: half // 2].float() / half))
    t = torch.arange(grid_size, device=cpu)
    freqs = torch.outer(t, freqs)
    grid = torch.cat([freqs[:, None, :].expand(-1, grid_size, -1),
                      freqs[None, :, :].expand(grid_size, -1, -1)], dim=-1)
    table = torch.stack([torch.cos(grid), torch.sin(grid)], dim=-1).flatten(0, 1)
    return torch.cat([torch.zeros(cls_token_num, head_dim // 2, 2, device=cpu), table])


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
        if cache is not None and slots is not None:
            k, v = cache.write(k, v, slots, mask.shape[-1])
        elif cache is not None:                             # tree nodes: in the tree slots
            k, v = cache.write_tree(k, v)
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
    """Per-layer static key/value tensors [R, kv_heads, S + tree slots, head_dim], written by
    slot: slots [0, S) by position, the last of them scratch (where `keep_nodes` writes the
    path entries not kept: no query sees it), then the tree slots (`reserve`), where a tree's
    nodes are written for one pass. Borrowed from `buffers` for `owner` (a session), and moved
    into other borrowed buffers as rows join or leave (`scd_core.models.static`)."""

    def __init__(self, rows: int, cfg: GPTConfig, length: int, device, dtype, buffers: static.Buffers, owner) -> None:
        self.length, self.tree_slots = length + 1, 0        # S: the sequence slots and the scratch slot
        self.buffers, self.owner = buffers, weakref.ref(owner)
        shape = (rows, cfg.kv_heads, self.length, cfg.head_dim)
        self.k, self.v = buffers.zeros(owner, [(shape, dtype)] * 2, device)
        self.nodes = 0                                      # the last tree's nodes, until keep_nodes

    def write(self, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor, view: int):
        """Write at `slots` [R, T]; return the keys/values of slots [0, view)."""
        at = slots[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
        self.k.scatter_(2, at, k)
        self.v.scatter_(2, at, v)
        return self.k[:, :, :view], self.v[:, :, :view]

    def reserve(self, nodes: int) -> None:
        """Tree slots for trees of `nodes` nodes (grown, never shrunk)."""
        if nodes > self.tree_slots:
            more, self.tree_slots = nodes - self.tree_slots, nodes
            self._move(static.with_tree_slots(self.k, more), static.with_tree_slots(self.v, more))

    def write_tree(self, k: torch.Tensor, v: torch.Tensor):
        """Tree nodes' keys/values [R, kv_heads, T, head_dim] into the tree slots (siblings share
        a position, not a slot) until `keep_nodes`; returns slots [0, S + T): the sequence
        slots, then the nodes'."""
        self.reserve(k.shape[2])
        self.nodes = k.shape[2]
        return static.write_tree(self.k, self.length, k), static.write_tree(self.v, self.length, v)

    def keep_nodes(self, index: torch.Tensor, kept: torch.Tensor, slots: torch.Tensor) -> None:
        """Move the tree's nodes `index` [R, P] to `slots` [R, P] where `kept`, the others to
        the scratch slot (fixed shapes: no value decides what is written)."""
        slots = torch.where(kept, slots, self.length - 1)
        static.keep_tree(self.k, self.length, self.nodes, index, slots)
        static.keep_tree(self.v, self.length, self.nodes, index, slots)
        self.nodes = 0

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only cache rows `rows`, in that order."""
        self._move(self.k[rows], self.v[rows])

    def join(self, other: "StaticKV", order: torch.Tensor) -> None:
        """Append the rows of `other`, then reorder: cat([these rows, other rows])[order]."""
        self.reserve(other.tree_slots), other.reserve(self.tree_slots)         # the same tree slots
        self._move(torch.cat([self.k, other.k])[order], torch.cat([self.v, other.v])[order])

    def _move(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Take new keys and values into borrowed buffers, giving the old ones back."""
        self.k, self.v = self.buffers.holding(self.owner(), [k, v], old=[self.k, self.v])


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

    def new_cache(self, rows: int, buffers: static.Buffers, owner) -> list[StaticKV]:
        """Every layer's cache for `rows` rows, borrowed from `buffers` for `owner`."""
        w = self.tok_embeddings.weight
        length = self.config.cls_token_num + self.config.block_size
        return [StaticKV(rows, self.config, length, w.device, w.dtype, buffers, owner) for _ in self.layers]

    def condition(self, cond: torch.Tensor) -> torch.Tensor:
        """Class ids [R] or caption states [R, cls, caption_dim] -> embeddings [R, cls, dim]."""
        emb = self.cls_embedding(cond)
        return emb[:, : self.config.cls_token_num]

    def forward_embeddings(self, h: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                           cache: list[StaticKV] | None = None, tree: bool = False) -> torch.Tensor:
        """Run embeddings h [R, T, dim] at absolute positions [R, T] -> logits [R, T, V] (float).

        `mask` [R, 1, T, S] is boolean (True = attend). With a cache, keys/values are written at
        slot = position and attention sees slots [0, S) (S = furthest position + 1 suffices);
        without one, S = T. With `tree`, h are the nodes of a draft tree: their keys/values
        go to the cache's tree slots (`StaticKV.write_tree`) and `mask` is [R, 1, T, S + T]
        (`tree.tree_mask`): the S sequence slots, then the nodes.
        """
        if self.freqs_cis.device != h.device:
            self.freqs_cis = self.freqs_cis.to(h.device)
        freqs = self.freqs_cis[positions]
        for i, layer in enumerate(self.layers):
            h = layer(h, freqs, None if cache is None else cache[i], None if tree else positions, mask)
        return self.output(self.norm(h)).float()
