"""The embedded `tiny` models: emoji images (8x8 tokens) and clips (T x 8x8 tokens).

Two networks, both trained by `scd_core.train` and shipped in `scd_core/assets/tiny/`:

* `VQLite`, a compact VQ tokenizer: 32x32 RGB -> 8x8 codes from a 512-entry cosine codebook.
  Code 0 is reserved for *flat white* 4x4 patches: the encoder assigns it by rule (every
  pixel of the patch >= 250/255), never by nearest-neighbour search, so a white background
  is one token, as flat regions are few tokens in real tokenizers.
* `TinyGPT`, a decoder-only transformer over [prompt token, image tokens]. The prompt token
  is the mean embedding of the prompt's known words (a learned null vector for an empty
  prompt, which is the unconditional branch of classifier-free guidance).

`TinyModel` / `TinySession` put them behind the TokenModel contract with a static,
position-indexed KV cache: `step` writes keys and values at positions start[b] + j of each
row and masks attention by position, so forgetting positions >= start[b] costs nothing.
"""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from scd_core.prompts import unknown_pieces
from scd_core.sampling import guide

from . import static
from .checkpoints import as_dtype
from .checks import check_positions, check_step
from .rows import GuidedRows
from .tree import Tree, check_path, check_tree, tree_mask

ASSETS = Path(__file__).resolve().parents[1] / "assets" / "tiny"
ASSETS_64 = Path(__file__).resolve().parents[1] / "assets" / "tiny64"    # `tiny-64`: 64 px, 16x16 tokens
WHITE_LEVEL = 250 / 255
BACKGROUND_CODE = 0


# --------------------------------------------------------------------------- tokenizer

@dataclass
class VQConfig:
    image_size: int = 32
    patch: int = 4
    channels: int = 128
    dec_channels: int = 128
    enc_blocks: int = 2
    dec_blocks: int = 3
    codebook_size: int = 512
    code_dim: int = 16
    out_channels: int = 32


class ResBlock(nn.Module):
    def __init__(self, ch: int) -> None:
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(8, ch), nn.Conv2d(ch, ch, 3, padding=1)
        self.n2, self.c2 = nn.GroupNorm(8, ch), nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c1(F.silu(self.n1(x)))
        return x + self.c2(F.silu(self.n2(h)))


def flat_white_mask(x: torch.Tensor, patch: int) -> torch.Tensor:
    """[B, 3, S, S] in [0, 1] -> bool [B, S/patch, S/patch]: every pixel of the patch is white."""
    low = -F.max_pool2d(-x.amin(dim=1, keepdim=True), patch)
    return low[:, 0] >= WHITE_LEVEL


class VQLite(nn.Module):
    """Compact VQ tokenizer; nearly all compute runs at the 8x8 token grid."""

    def __init__(self, cfg: VQConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c, d = cfg.channels, cfg.dec_channels
        self.enc_in = nn.Conv2d(3, c, cfg.patch, stride=cfg.patch)
        self.enc = nn.Sequential(*[ResBlock(c) for _ in range(cfg.enc_blocks)])
        self.enc_out = nn.Sequential(nn.GroupNorm(8, c), nn.SiLU(), nn.Conv2d(c, cfg.code_dim, 1))
        self.codebook = nn.Parameter(torch.randn(cfg.codebook_size, cfg.code_dim))
        self.dec_in = nn.Conv2d(cfg.code_dim, d, 1)
        self.dec = nn.Sequential(*[ResBlock(d) for _ in range(cfg.dec_blocks)])
        self.dec_up = nn.Sequential(nn.GroupNorm(8, d), nn.SiLU(),
                                    nn.Conv2d(d, cfg.out_channels * cfg.patch ** 2, 1), nn.PixelShuffle(cfg.patch))
        self.dec_out = nn.Sequential(nn.Conv2d(cfg.out_channels, cfg.out_channels, 3, padding=1), nn.SiLU(),
                                     nn.Conv2d(cfg.out_channels, 3, 3, padding=1))

    @property
    def grid(self) -> int:
        return self.cfg.image_size // self.cfg.patch

    def codes(self) -> torch.Tensor:
        return F.normalize(self.codebook, dim=-1)

    def encode_latent(self, x: torch.Tensor) -> torch.Tensor:
        """[B, 3, S, S] in [0, 1] -> unit-norm latents [B, h, w, D]."""
        z = self.enc_out(self.enc(self.enc_in(x * 2 - 1)))
        return F.normalize(z.permute(0, 2, 3, 1), dim=-1)

    def quantize(self, z: torch.Tensor, white: torch.Tensor) -> torch.Tensor:
        """Nearest code by cosine among codes 1..K-1; flat-white patches get code 0."""
        sims = z @ self.codes()[1:].t()
        idx = sims.argmax(dim=-1) + 1
        return torch.where(white, torch.full_like(idx, BACKGROUND_CODE), idx)

    @torch.no_grad()
    def encode(self, x: torch.Tensor) -> torch.LongTensor:
        """[B, 3, S, S] in [0, 1] -> codes [B, h*w] in raster order."""
        idx = self.quantize(self.encode_latent(x), flat_white_mask(x, self.cfg.patch))
        return idx.flatten(1)

    def decode_codes(self, idx: torch.Tensor) -> torch.Tensor:
        """codes [B, h*w] -> images [B, 3, S, S], roughly in [0, 1] (not clamped)."""
        g = self.grid
        zq = self.codes()[idx].view(idx.shape[0], g, g, -1)
        return self.decode_latent(zq)

    def decode_latent(self, zq: torch.Tensor) -> torch.Tensor:
        h = self.dec(self.dec_in(zq.permute(0, 3, 1, 2)))
        return (self.dec_out(self.dec_up(h)) + 1) / 2


# --------------------------------------------------------------------------- prompts

STOP_WORDS = {"&", "and", "of", "with", "the", "a", "an", "other"}


def prompt_words(text: str) -> list[str]:
    """Lower-case ASCII words of a prompt or emoji name; stop words dropped."""
    text = text.lower().replace("\u2019", "'").replace("-", " ").replace("_", " ")
    out = []
    for w in re.findall(r"[a-z0-9']+", text):
        w = w.strip("'")
        if w and w not in STOP_WORDS:
            out.append(w)
    return out


class WordVocab:
    """Word -> id for the bag-of-words prompt; unknown words are ignored (a plural 's' is tried)."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    def _id(self, word: str) -> int | None:
        i = self.index.get(word)
        return self.index.get(word[:-1]) if i is None and word.endswith("s") else i

    def ids(self, prompt: str) -> list[int]:
        out = []
        for w in prompt_words(prompt):
            i = self._id(w)
            if i is not None and i not in out:
                out.append(i)
        return out

    def known(self, prompt: str) -> list[str]:
        return [self.words[i] for i in self.ids(prompt)]

    def unknown(self, prompt: str) -> list[str]:
        """The prompt's pieces (split at spaces, as typed) that the model ignores: none of
        their words is known (an emoji, a misspelling). Stop words and bare punctuation are
        not listed: they never carry meaning."""
        return unknown_pieces(prompt, lambda piece: any(self._id(w) is not None for w in prompt_words(piece)),
                              STOP_WORDS)


# --------------------------------------------------------------------------- prior

@dataclass
class GPTConfig:
    vocab_size: int = 512                 # image codes
    grid: tuple[int, ...] = (8, 8)        # (H, W) or (T, H, W)
    n_words: int = 2000
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    dropout: float = 0.1
    # What each layer attends to (one entry per layer; empty: every layer "full"). Sequence
    # position q predicts the token at grid cell (r, c) = divmod(q, W) and holds the one before
    # it in raster order; "local" is about the cell it predicts:
    # "full"  the prompt and every earlier token (the shipped `tiny`);
    # "local" the prompt, itself, the `local_cols` tokens left of (r, c) in row r and the tokens
    #         of the `local_rows` rows above within `local_cols` columns of c either side;
    # "self"  the prompt and itself only (a per-position layer: it widens no receptive field).
    # With one "local" layer and the others "self", p at (r, c) depends on the prompt, that
    # neighbourhood and the token before (r, c) in raster order, and on nothing else.
    attention: tuple[str, ...] = ()
    local_rows: int = 2
    local_cols: int = 2

    def __post_init__(self) -> None:
        self.grid = tuple(self.grid)
        self.attention = tuple(self.attention)
        if self.attention and len(self.attention) != self.n_layers:
            raise ValueError(f"attention: expected one entry per layer ({self.n_layers}), got {list(self.attention)}")
        unknown = sorted(set(self.attention) - set(ATTENTION_KINDS))
        if unknown:
            raise ValueError(f"attention: unknown kind(s) {unknown}; expected {', '.join(ATTENTION_KINDS)}")
        if "local" in self.attention:
            if len(self.grid) != 2:
                raise ValueError(f"attention: 'local' layers need a 2-D grid (H, W), got {self.grid}")
            if self.local_rows < 0 or self.local_cols < 0:
                raise ValueError(f"local_rows, local_cols: expected >= 0, got {self.local_rows}, {self.local_cols}")

    @property
    def n_tokens(self) -> int:
        return math.prod(self.grid)

    def layer_kinds(self) -> tuple[str, ...]:
        return self.attention or ("full",) * self.n_layers


ATTENTION_KINDS = ("full", "local", "self")


def attention_table(cfg: GPTConfig, kind: str) -> torch.Tensor | None:
    """[N+1, N+1] bool: may sequence position q (row) attend to key position k (column) in a
    layer of this kind. Position 0 holds the prompt, position k >= 1 the token at grid cell
    divmod(k - 1, W); position q predicts the token at cell divmod(q, W). None for "full"
    (plain causal attention)."""
    if kind == "full":
        return None
    length = cfg.n_tokens + 1
    q = torch.arange(length).view(-1, 1)
    k = torch.arange(length).view(1, -1)
    allowed = (k == 0) | (k == q)
    if kind == "local":
        width = cfg.grid[-1]
        qr, qc = q.div(width, rounding_mode="floor"), q % width
        kr, kc = (k - 1).div(width, rounding_mode="floor"), (k - 1) % width
        above = (kr < qr) & (kr >= qr - cfg.local_rows) & ((kc - qc).abs() <= cfg.local_cols)
        left = (kr == qr) & (kc < qc) & (kc >= qc - cfg.local_cols)
        allowed = allowed | ((k >= 1) & (above | left))
    return allowed & (k <= q)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.n_heads, self.dropout = cfg.n_heads, cfg.dropout
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(cfg.dropout)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        return q, k, v

    def finish(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        b, h, n, dh = att.shape
        x = x + self.drop(self.proj(att.transpose(1, 2).reshape(b, n, h * dh)))
        return x + self.drop(self.mlp(self.ln2(x)))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher-forced: causal attention, or the bool `mask` [n, n] (`attention_table`)."""
        q, k, v = self.heads(x)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=mask is None, attn_mask=mask,
                                             dropout_p=self.dropout if self.training else 0.0)
        return self.finish(x, att)

    def forward_cached(self, x: torch.Tensor, pos: torch.Tensor, cache_k: torch.Tensor,
                       cache_v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Write this window's keys/values at `pos` [B, W] and attend by position."""
        q, k, v = self.heads(x)
        rows = torch.arange(x.shape[0], device=x.device).unsqueeze(1)
        cache_k[rows, :, pos] = k.transpose(1, 2)
        cache_v[rows, :, pos] = v.transpose(1, 2)
        att = F.scaled_dot_product_attention(q, cache_k, cache_v, attn_mask=mask)
        return self.finish(x, att)

    def forward_tree(self, x: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, base: int,
                     mask: torch.Tensor) -> torch.Tensor:
        """Tree nodes x [B, T, d]: their keys/values go to the cache's tree slots [base,
        base + T) (`static.write_tree`: siblings share a position, not a slot), and they
        attend to slots [0, base + T) through `mask` [B, 1, T, base + T] (`tree.tree_mask`)."""
        q, k, v = self.heads(x)
        att = F.scaled_dot_product_attention(q, static.write_tree(cache_k, base, k),
                                             static.write_tree(cache_v, base, v), attn_mask=mask)
        return self.finish(x, att)


class TinyGPT(nn.Module):
    """Sequence: position 0 is the prompt token, position i >= 1 holds generated token i-1;
    the output at position i predicts generated token i."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, n = cfg.d_model, cfg.n_tokens
        self.word_emb = nn.Embedding(cfg.n_words, d)
        self.null_prompt = nn.Parameter(torch.zeros(d))
        self.tok_emb = nn.Embedding(cfg.vocab_size, d)
        self.pos_emb = nn.Parameter(torch.zeros(n + 1, d))
        self.axis_emb = nn.ParameterList([nn.Parameter(torch.zeros(size, d)) for size in cfg.grid])
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, cfg.vocab_size)
        self.drop = nn.Dropout(cfg.dropout)
        self.apply(self._init)
        for p in [self.pos_emb, self.null_prompt, *self.axis_emb]:
            nn.init.normal_(p, std=0.02)
        for kind in sorted(set(cfg.layer_kinds()) - {"full"}):    # not saved: made from the config
            self.register_buffer(f"mask_{kind}", attention_table(cfg, kind), persistent=False)

    def layer_table(self, layer: int) -> torch.Tensor | None:
        """The attention table of block `layer` ([N+1, N+1] bool), None for plain causal attention."""
        kind = self.cfg.layer_kinds()[layer]
        return None if kind == "full" else getattr(self, f"mask_{kind}")

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def positions(self) -> torch.Tensor:
        """[N+1, d]: a learned embedding per position plus one per grid axis (position 0: prompt)."""
        table = self.pos_emb.clone()
        coords = torch.cartesian_prod(*[torch.arange(s, device=table.device) for s in self.cfg.grid])
        if coords.dim() == 1:
            coords = coords.unsqueeze(1)
        extra = sum(emb[coords[:, a]] for a, emb in enumerate(self.axis_emb))
        table[1:] = table[1:] + extra
        return table

    def prompt_embedding(self, word_ids: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
        """Mean word embedding of each row ([B, Lw] ids, bool mask); null vector when empty."""
        emb = self.word_emb(word_ids) * word_mask.unsqueeze(-1)
        count = word_mask.sum(1, keepdim=True)
        mean = emb.sum(1) / count.clamp(min=1)
        return torch.where(count > 0, mean, self.null_prompt.expand_as(mean))

    def forward(self, word_ids: torch.Tensor, word_mask: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits [B, N, V] for tokens [B, N] (training)."""
        pos = self.positions()
        prompt = self.prompt_embedding(word_ids, word_mask).unsqueeze(1)
        x = torch.cat([prompt, self.tok_emb(tokens[:, :-1])], 1) + pos[: tokens.shape[1]]
        x = self.drop(x)
        n = x.shape[1]
        for i, block in enumerate(self.blocks):
            table = self.layer_table(i)
            x = block(x, None if table is None else table[:n, :n])
        return self.head(self.ln_f(x))


# --------------------------------------------------------------------------- TokenModel

class TinySession(GuidedRows):
    """Batch decoding state with a static position-indexed KV cache (see module docstring)."""

    compilable = True

    def __init__(self, model: "TinyModel", prompts: Sequence[str], cfg_scale: float) -> None:
        self.model, self.gpt = model, model.gpt
        self.batch = len(prompts)
        self.cfg_scale = float(cfg_scale)
        self.guided = self.cfg_scale != 1.0
        self.reps = 2 if self.guided else 1              # cond block, then uncond block
        rows = list(prompts) + ([""] * len(prompts) if self.guided else [])
        word_ids, word_mask = model.encode_prompts(rows)
        cfg = self.gpt.cfg
        n_rows, length = len(rows), cfg.n_tokens + 2           # slots 0..N by position, then a scratch slot
        dh = cfg.d_model // cfg.n_heads
        p = next(self.gpt.parameters())
        self.buffers = static.buffers_of(model)
        # every layer's keys and values [R, heads, slots, head_dim], borrowed from the model's buffers
        self.cache = _pairs(self.buffers.zeros(self, [((n_rows, cfg.n_heads, length, dh), p.dtype)] * (2 * cfg.n_layers),
                                               p.device))
        self.length, self.tree_slots = length, 0           # tree slots after the sequence: `reserve_tree`
        self.scratch = length - 1                           # what keep_path writes for nodes not kept: no query sees it
        # the positions' embeddings, the slots' positions and each block's attention table over
        # the cache's keys [N+1, N+2] (the scratch column: False; None: causal), borrowed too
        no_scratch = torch.zeros(length - 1, 1, dtype=torch.bool, device=p.device)
        tables = [None if table is None else torch.cat([table, no_scratch], 1)
                  for table in map(self.gpt.layer_table, cfg_blocks(cfg))]
        held = iter(self.buffers.holding(self, [self.gpt.positions().to(p.dtype), torch.arange(length, device=p.device),
                                                *[t for t in tables if t is not None]]))
        self.pos_table, self.key_pos = next(held), next(held)
        self.tables = [None if table is None else next(held) for table in tables]
        with torch.inference_mode():
            prompt = self.gpt.prompt_embedding(word_ids.to(p.device), word_mask.to(p.device)).to(p.dtype)
            x = prompt.unsqueeze(1) + self.pos_table[:1]
            pos = torch.zeros(n_rows, 1, dtype=torch.long, device=p.device)
            self.first_logits = self._run(x, pos)[:, 0]
        self.tree: Tree | None = None                        # the last step_tree's, until keep_path

    def _run(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        causal = (self.key_pos.view(1, 1, 1, -1) <= pos.view(pos.shape[0], 1, -1, 1))
        L = self.length                                  # the sequence slots (not the tree slots)
        for block, (ck, cv), table in zip(self.gpt.blocks, self.cache, self.tables):
            # a local or per-position layer: its table's row per query [B, 1, W, S]
            x = block.forward_cached(x, pos, ck[:, :, :L], cv[:, :, :L],
                                     causal if table is None else table[pos].unsqueeze(1))
        logits = self.gpt.head(self.gpt.ln_f(x)).float()
        if self.guided:
            logits = guide(logits[: self.batch], logits[self.batch:], self.cfg_scale)
        return logits

    # rows joining and leaving (`rows.GuidedRows`): the cache keeps conditional rows, then
    # unconditional ones
    def start_like(self, prompts: Sequence[str]) -> "TinySession":
        return self.model.start(prompts, self.cfg_scale)

    def join_state(self, new: "TinySession", order: torch.Tensor) -> None:
        order = order.to(self.key_pos.device)
        self.reserve_tree(new.tree_slots), new.reserve_tree(self.tree_slots)      # the same tree slots
        self._move([torch.cat([t, nt])[order] for t, nt in zip(_flat(self.cache), _flat(new.cache))])

    def select_state(self, index: torch.Tensor) -> None:
        index = index.to(self.key_pos.device)
        self._move([t[index] for t in _flat(self.cache)])

    def _move(self, cache: list[torch.Tensor]) -> None:
        """Take `cache` (every layer's new keys and values) into borrowed buffers, giving the
        old ones back."""
        self.cache = _pairs(self.buffers.holding(self, cache, old=_flat(self.cache)))

    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        n = self.gpt.cfg.n_tokens
        dev = self.pos_table.device
        # no value is read on the host: the values are checked only where that is free (`device_check`)
        tokens, start = check_step(tokens, start, self.batch, self.gpt.cfg.vocab_size, device=dev, fed=n)
        w = tokens.shape[1]
        # Sequence position of generated position start+j is start+j+1; positions past the
        # end of the grid (a window overhanging the last token) are computed but not kept.
        seq_pos = (start.view(-1, 1) + torch.arange(w, device=dev) + 1)
        write_pos = seq_pos.clamp(max=n)
        if self.guided:
            tokens, write_pos = torch.cat([tokens, tokens]), torch.cat([write_pos, write_pos])
        with torch.no_grad():                       # (not inference_mode: it compiles)
            x = self.gpt.tok_emb(tokens) + self.pos_table[write_pos]
            logits = self._run(x, write_pos)
        self.tree = None
        return logits

    # a tree of drafts (`protocols.TreeSession`): the nodes' keys and values go to the
    # cache's tree slots until `keep_path` moves the kept ones to their positions
    def reserve_tree(self, nodes: int) -> None:
        """Tree slots for trees of `nodes` nodes in every layer's cache (grown, never shrunk)."""
        if nodes > self.tree_slots:
            more, self.tree_slots = nodes - self.tree_slots, nodes
            self._move([static.with_tree_slots(t, more) for t in _flat(self.cache)])

    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor,
                  start: torch.LongTensor) -> torch.Tensor:
        n = self.gpt.cfg.n_tokens
        dev = self.pos_table.device
        tree = check_tree(tokens, parents, start, self.batch, self.gpt.cfg.vocab_size, device=dev)
        check_positions(tree.start, n)
        self.reserve_tree(tree.tokens.shape[1])
        rows = tree.repeat(self.reps)                                    # uncond rows: the same tree
        seq_start = rows.start + 1                                       # sequence position of generated start
        write_pos = (rows.positions + 1).clamp(max=n)                    # as `step`: past the grid is not kept
        mask = tree_mask(self.key_pos < seq_start[:, None], rows.seen)
        with torch.no_grad():                       # (not inference_mode: it compiles)
            x = self.gpt.tok_emb(rows.tokens) + self.pos_table[write_pos]
            for i, (block, (ck, cv)) in enumerate(zip(self.gpt.blocks, self.cache)):
                x = block.forward_tree(x, ck, cv, self.length, self._tree_layer_mask(i, mask, write_pos))
            logits = self.gpt.head(self.gpt.ln_f(x)).float()
        self.tree = tree
        return guide(logits[: self.batch], logits[self.batch:], self.cfg_scale) if self.guided else logits

    def _tree_layer_mask(self, layer: int, mask: torch.Tensor, node_pos: torch.Tensor) -> torch.Tensor:
        """`mask` [R, 1, T, S + T] narrowed to what block `layer` may see: the cache slots and
        the nodes (sequence positions `node_pos` [R, T]) that its attention table allows."""
        table = self.tables[layer]                                           # [N+1, S]
        if table is None:
            return mask
        cache_part = table[node_pos]                                         # [R, T, S]
        node_part = table[node_pos[:, :, None], node_pos[:, None, :]]        # [R, T, T]
        return mask & torch.cat([cache_part, node_part], 2)[:, None]

    def keep_path(self, nodes: torch.LongTensor) -> None:
        """Write the kept nodes' keys/values at their positions; the rest of the path's
        entries go to the scratch slot (fixed shapes: no value decides what is written)."""
        index, kept = check_path(self.tree, nodes)
        n = self.gpt.cfg.n_tokens
        dev = self.pos_table.device
        index, kept = index.repeat(self.reps, 1), kept.repeat(self.reps, 1)
        seq = self.tree.start.repeat(self.reps)[:, None] + 1 + torch.arange(index.shape[1], device=dev)
        slot = torch.where(kept & (seq <= n), seq, self.scratch)                    # [R, P]
        T = self.tree.tokens.shape[1]
        for ck, cv in self.cache:
            static.keep_tree(ck, self.length, T, index, slot)
            static.keep_tree(cv, self.length, T, index, slot)
        self.tree = None


def cfg_blocks(cfg: GPTConfig) -> range:
    return range(cfg.n_layers)


def _pairs(flat: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """[k0, v0, k1, v1, ...] -> [(k0, v0), (k1, v1), ...]."""
    return list(zip(flat[0::2], flat[1::2]))


def _flat(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
    return [t for pair in pairs for t in pair]


# The first eight image prompts look like their names in 8 of 8 samples (seeds 0-7, SCD-MC, the
# default settings), the rest in most; the demo page offers the first eight. Each clip prompt
# gives its object in 4 of 4 clips.
IMAGE_PROMPTS = ["red heart", "cat face", "green apple", "earth globe", "basketball", "tomato",
                 "smiling face with heart eyes", "four leaf clover", "blue heart", "yellow heart", "red apple",
                 "pile poo", "sun", "dog face", "fire", "lemon"]
VIDEO_PROMPTS = ["red heart zooming in", "grinning face moving left", "red apple zooming out",
                 "basketball moving down", "green apple moving right", "earth globe moving left",
                 "four leaf clover zooming out", "cat face bouncing"]


class TinyModel:
    """The embedded emoji model behind the TokenModel contract.

    `default_settings` are the sampling settings the model was tuned for (top-k 100 of 512,
    CFG 3); `example_prompts` are prompts it renders recognisably."""

    default_settings = {"top_k": 100, "top_p": 1.0, "temperature": 1.0, "cfg_scale": 3.0}

    def __init__(self, vq: VQLite, gpt: TinyGPT, vocab: WordVocab, kind: str, name: str,
                 settings: dict | None = None) -> None:
        self.vq, self.gpt, self.vocab = vq.eval(), gpt.eval(), vocab
        if settings:                                       # a model folder's own (config.json "default_settings")
            unknown = sorted(set(settings) - set(TinyModel.default_settings))
            if unknown:
                raise ValueError(f"model: default_settings has unknown keys {unknown}")
            self.default_settings = {**TinyModel.default_settings, **settings}
        self.kind, self.name = kind, name
        self.vocab_size = gpt.cfg.vocab_size
        self.grid = tuple(gpt.cfg.grid)
        self.example_prompts = list(VIDEO_PROMPTS if kind == "video" else IMAGE_PROMPTS)

    def __repr__(self) -> str:
        return f"TinyModel({self.name!r}, grid={self.grid}, vocab_size={self.vocab_size})"

    def encode_prompts(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = [self.vocab.ids(p) for p in prompts]
        width = max(1, max(len(i) for i in ids))
        word_ids = torch.zeros(len(ids), width, dtype=torch.long)
        mask = torch.zeros(len(ids), width, dtype=torch.bool)
        for r, row in enumerate(ids):
            word_ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[r, : len(row)] = True
        return word_ids, mask

    def start(self, prompts: Sequence[str], cfg_scale: float = 1.0) -> TinySession:
        if isinstance(prompts, str) or not isinstance(prompts, Sequence) or len(prompts) == 0:
            raise ValueError("prompts: expected a non-empty list of strings")
        if not all(isinstance(p, str) for p in prompts):
            raise ValueError("prompts: every prompt must be a string")
        if not isinstance(cfg_scale, (int, float)) or not math.isfinite(cfg_scale) or cfg_scale < 0:
            raise ValueError(f"cfg_scale: expected a finite number >= 0, got {cfg_scale!r}")
        return TinySession(self, prompts, cfg_scale)

    @torch.inference_mode()
    def decode_pixels(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, N] -> float pixels [B, *frames, 3, S, S] in [0, 1]."""
        n = math.prod(self.grid)
        if not torch.is_tensor(tokens) or tokens.dim() != 2 or tokens.shape[1] != n:
            raise ValueError(f"tokens: expected a tensor [B, {n}], got {getattr(tokens, 'shape', type(tokens))}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(f"tokens: values must lie in [0, {self.vocab_size})")
        per = self.vq.grid ** 2
        flat = tokens.reshape(-1, per).to(self.vq.codebook.device)
        pix = self.vq.decode_codes(flat).float().clamp(0, 1)
        frames = n // per
        return pix.view(tokens.shape[0], *([frames] if self.kind == "video" else []), *pix.shape[1:])

    def decode(self, tokens: torch.LongTensor) -> list:
        """[B, N] -> B PIL RGB images (32x32), or for video B lists of T frames."""
        from PIL import Image

        pix = (self.decode_pixels(tokens) * 255).round().to(torch.uint8).cpu()

        def to_pil(t: torch.Tensor) -> "Image.Image":
            return Image.fromarray(t.permute(1, 2, 0).numpy(), "RGB")

        if self.kind == "video":
            return [[to_pil(f) for f in clip] for clip in pix]
        return [to_pil(img) for img in pix]


# --------------------------------------------------------------------------- loading

VARIANTS = {"tiny": ("image", "image_prior"), "tiny-video": ("video", "video_prior")}


def asset_files(folder: Path, prior: str) -> list[Path]:
    return [folder / "config.json", folder / "vocab.json", folder / "vq.safetensors", folder / f"{prior}.safetensors"]


# models of this family with a folder of their own: name -> (kind, prior, folder)
OTHER_FOLDERS = {"tiny-64": ("image", "image_prior", ASSETS_64)}


def availability(name: str) -> str | None:
    """None when the shipped weights of `name` are present; otherwise why not."""
    if name in OTHER_FOLDERS:
        _, prior, folder = OTHER_FOLDERS[name]
    elif name in VARIANTS:
        prior, folder = VARIANTS[name][1], ASSETS
    else:
        return f"unknown tiny model {name!r}"
    missing = [p.name for p in asset_files(folder, prior) if not p.exists()]
    return f"missing scd_core/assets/{folder.name}/{', '.join(missing)}" if missing else None


def claims_folder(path: str) -> bool:
    cfg = Path(path) / "config.json"
    if not cfg.exists():
        return False
    try:
        return json.loads(cfg.read_text()).get("family") == "scd-tiny-emoji"
    except (OSError, ValueError):
        return False


def default_threads() -> int:
    """The thread count suggested for these models: one torch thread on machines with <= 2
    cores (two threads slow down many-fold when another process shares them); two
    otherwise. A 64-token model gains little from more. Loading never applies it by itself:
    the process's thread count is its owner's choice (`threads=` asks for it)."""
    return 1 if (os.cpu_count() or 1) <= 2 else 2


def load_weights(module: nn.Module, path: Path, device: str | torch.device, dtype: torch.dtype) -> nn.Module:
    from safetensors.torch import load_file

    state = load_file(str(path))
    module.load_state_dict({k: v.float() for k, v in state.items()})
    return module.to(device=device, dtype=dtype).eval()


def _load(kind: str, prior: str, name: str, folder: str | Path | None, device: str | torch.device,
          dtype: torch.dtype | str, threads: int | None) -> TinyModel:
    folder = Path(folder) if folder is not None else ASSETS
    missing = [str(p) for p in asset_files(folder, prior) if not p.exists()]
    if missing:
        raise ValueError(f"model: the weights of {name!r} are missing ({', '.join(missing)})")
    dtype = as_dtype(dtype)
    if threads is not None:
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads: expected a positive int, got {threads!r}")
        torch.set_num_threads(threads)
    config = json.loads((folder / "config.json").read_text())
    vocab = WordVocab(json.loads((folder / "vocab.json").read_text())["words"])
    vq = load_weights(VQLite(VQConfig(**config["vq"])), folder / "vq.safetensors", device, torch.float32)
    gcfg = dict(config[prior])
    gcfg["grid"] = tuple(gcfg["grid"])
    gpt = load_weights(TinyGPT(GPTConfig(**gcfg)), folder / f"{prior}.safetensors", device, dtype)
    return TinyModel(vq, gpt, vocab, kind, name, config.get("default_settings", {}).get(kind))


def load_tiny(name_or_path: str = "tiny", *, device: str | torch.device = "cpu",
              dtype: torch.dtype | str = torch.float32, threads: int | None = None) -> TinyModel:
    """The embedded emoji image model: 32x32 images, 8x8 tokens, vocab 512.

    `threads` sets torch's CPU thread count for the whole process (None, the default,
    leaves it as it is; `default_threads()` suggests one)."""
    folder = None if name_or_path in VARIANTS else name_or_path
    return _load("image", "image_prior", "tiny", folder, device, dtype, threads)


def load_tiny_video(name_or_path: str = "tiny-video", *, device: str | torch.device = "cpu",
                    dtype: torch.dtype | str = torch.float32, threads: int | None = None) -> TinyModel:
    """The embedded emoji clip model: T frames of 32x32, T x 8x8 tokens, vocab 512."""
    folder = None if name_or_path in VARIANTS else name_or_path
    return _load("video", "video_prior", "tiny-video", folder, device, dtype, threads)


def load_tiny_64(name_or_path: str = "tiny-64", *, device: str | torch.device = "cpu",
                 dtype: torch.dtype | str = torch.float32, threads: int | None = None) -> TinyModel:
    """The embedded 64 px emoji image model: 64x64 images, 16x16 tokens, vocab 512 (the grain
    of a real model's token grid; docs/embedded-models.md)."""
    folder = ASSETS_64 if name_or_path in OTHER_FOLDERS else name_or_path
    return _load("image", "image_prior", "tiny-64", folder, device, dtype, threads)
