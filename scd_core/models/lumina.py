"""Lumina-mGPT 7B (512 / 768 / 1024 px) on transformers' Chameleon, behind the TokenModel contract.

What this adapter hides from the engine:
- the sequence layout: `<bos> prompt <sep> <racm3:break> <h> <w>` (the header is part of the
  prompt here), then rows of W image tokens each followed by an end-of-row token (8803), then
  end-of-image. The engine only sees the H x W grid of image *codes* (V = 8192); the adapter maps
  code index <-> BPE id and inserts every end-of-row token itself (those positions are forced,
  p is one-hot there, so leaving them out of the engine's view changes no distribution).
- image logits: `ChameleonForConditionalGeneration.forward` masks every image logit, so the base
  model's hidden states are multiplied by the image rows of `lm_head` directly.
- CFG as in Lumina's `inference_solver.py`: conditional rows carry the prompt, unconditional rows
  only `<racm3:break> <h> <w>`; both run in ONE batched forward (left padding, explicit
  position ids and a 4-D attention mask).
- the KV cache is position-indexed: generated sequence index s of a row lives in slot P + s, so
  each row can start anywhere, and "forgetting" is simply masking and overwriting. Rows join a
  running session (`add_rows`: the prompt regions of both batches are left-padded to the
  longer one) and leave it (`keep_rows`: the prompt region shrinks to the longest kept prompt).
- the checkpoint conversion: Lumina stores q/k-norm weights as (model_parallel_size, head_dim),
  transformers expects (num_heads, head_dim) (k: num_key_value_heads).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F

from scd_core.sampling import guide

from .checkpoints import pick_device_dtype, resolve_weights
from .checks import check_prompts
from .rows import GuidedRows
from .tree import Forced, Tree, check_path, check_tree, force_after, path_entries, tree_mask
from .hub import HubFiles, ProgressFn, cached

HUB_FILES = {name: HubFiles.transformers(repo, approx_gb=14.0) for name, repo in (
    ("lumina-mgpt-7b-512", "Alpha-VLLM/Lumina-mGPT-7B-512"),
    ("lumina-mgpt-7b-768", "Alpha-VLLM/Lumina-mGPT-7B-768"),
    ("lumina-mgpt-7b-1024", "Alpha-VLLM/Lumina-mGPT-7B-1024"),
)}
HUB_IDS = {name: files.repo_id for name, files in HUB_FILES.items()}
PROMPT_TEMPLATE = "Generate an image of {w}x{h} according to the following prompt:\n{prompt}"
# Paper settings (SCD, Lumina-mGPT 7B): CFG 3, image top-k 2000, window L = 64.
DEFAULT_SETTINGS = {"cfg_scale": 3.0, "top_k": 2000, "top_p": 1.0, "temperature": 1.0, "window": 64}
VQGAN_ENV = "SCD_LUMINA_VQGAN"
# Meta ships the Chameleon VQGAN (with its decoder) only through its own licence form, not on
# the Hugging Face Hub; Lumina-mGPT's README asks for the same files.
VQGAN_HOW = ("Meta's Chameleon VQGAN (tokenizer/vqgan.ckpt and vqgan.yaml, Meta Chameleon Research "
             "License): request it at https://ai.meta.com/resources/models-and-libraries/chameleon-downloads/ "
             f"and set {VQGAN_ENV} to vqgan.ckpt (or its folder), or pass vqgan_path=")


@dataclass(frozen=True)
class LuminaLayout:
    """Special token ids of Lumina-mGPT's image layout (Chameleon BPE ids)."""

    bos: int = 0
    sep: int = 8710              # <reserved08706>, end of the human turn
    image_start: int = 8197      # <racm3:break>
    eoi: int = 8196              # <eoss>
    eol: int = 8803              # <reserved08799>, end of an image row
    grid_token_base: int = 8804  # header token = base + number of 32-px patches
    latent_per_header: int = 2   # latent rows per header unit (32 px / 16 px)
    pad: int = 1                 # any id: padded slots are never attended to


# --------------------------------------------------------------------------- conversion

def convert_qk_norm_state_dict(state_dict: Mapping[str, torch.Tensor], num_heads: int,
                               num_kv_heads: int) -> dict[str, torch.Tensor]:
    """Rewrite Lumina's q/k-norm weights (mp, head_dim) to transformers' (heads, head_dim).

    Each shard's gamma/beta applies to its contiguous block of heads, hence repeat_interleave.
    """
    out = dict(state_dict)
    for key, w in state_dict.items():
        m = re.search(r"self_attn\.(q|k)_norm\.(weight|bias)$", key)
        if m is None:
            continue
        heads = num_heads if m.group(1) == "q" else num_kv_heads
        if w.dim() != 2 or heads % w.shape[0] != 0:
            raise ValueError(f"state_dict: {key} has shape {tuple(w.shape)}, not (mp, head_dim) with mp | {heads}")
        out[key] = w.repeat_interleave(heads // w.shape[0], dim=0)
    return out


def _safetensors_files(folder: str) -> list[str]:
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            names = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(folder, n) for n in names]
    single = os.path.join(folder, "model.safetensors")
    return [single] if os.path.isfile(single) else []


@torch.no_grad()
def load_qk_norms(model, folder: str) -> int:
    """Copy the converted q/k-norm tensors of a Lumina checkpoint folder into `model`.

    Returns how many tensors were set; raises ValueError if a layer's norm is missing.
    """
    from safetensors import safe_open

    cfg = model.config
    params = dict(model.named_parameters())
    wanted = {k for k in params if re.search(r"self_attn\.(q|k)_norm\.(weight|bias)$", k)}
    found: dict[str, torch.Tensor] = {}
    for path in _safetensors_files(folder):
        with safe_open(path, framework="pt") as f:
            for key in f.keys():
                if key in wanted:
                    found[key] = f.get_tensor(key)
    missing = wanted - set(found)
    if missing:
        raise ValueError(f"{folder}: checkpoint lacks q/k-norm weights, e.g. {sorted(missing)[:3]}")
    converted = convert_qk_norm_state_dict(found, cfg.num_attention_heads, cfg.num_key_value_heads)
    for key, w in converted.items():
        params[key].copy_(w.to(params[key].dtype))
    return len(converted)


# --------------------------------------------------------------------------- the KV cache

class _Slots:
    """Where the next forward writes: slot index per (row, fed token); shared by all layers."""

    def __init__(self) -> None:
        self.index: torch.Tensor | None = None   # [R, T] long
        self.length = 0                           # highest written slot + 1 (informational)
        self.view = 0                             # keys returned to attention: slots [0, view)


def _slot_cache(num_layers: int, capacity: int, slots: _Slots,
                tensors: list[tuple[torch.Tensor, torch.Tensor]] | None = None):
    """A transformers `Cache` whose layers write key/value states at explicit slots; `tensors`
    ([R, heads, capacity, head_dim] keys and values per layer) fill it from the start."""
    from transformers.cache_utils import Cache, CacheLayerMixin

    class SlotLayer(CacheLayerMixin):
        is_compileable = False
        is_sliding = False

        def __init__(self, keys: torch.Tensor | None = None, values: torch.Tensor | None = None) -> None:
            super().__init__()
            self.capacity = capacity
            if keys is not None:
                self.keys, self.values, self.device = keys, values, keys.device
                self.is_initialized = True

        def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
            r, h, _, d = key_states.shape
            kw = {"dtype": key_states.dtype, "device": key_states.device}
            self.keys = torch.zeros(r, h, capacity, d, **kw)
            self.values = torch.zeros(r, h, capacity, value_states.shape[-1], **kw)
            self.device = key_states.device
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            idx = slots.index.to(self.device)
            rows = torch.arange(idx.shape[0], device=self.device)[:, None]
            self.keys[rows, :, idx] = key_states.transpose(1, 2)
            self.values[rows, :, idx] = value_states.transpose(1, 2)
            return self.keys[:, :, : slots.view], self.values[:, :, : slots.view]

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return capacity, 0

        def get_seq_length(self) -> int:
            return slots.length

        def get_max_length(self) -> int:
            return capacity

    return Cache(layers=[SlotLayer(*kv) for kv in (tensors or [(None, None)] * num_layers)])


# --------------------------------------------------------------------------- the model

class LuminaTokenModel:
    """Lumina-mGPT behind the TokenModel contract (V = the image codebook, grid = latent H x W)."""

    def __init__(self, model, encode: Callable[[str], list[int]], latent_hw: tuple[int, int],
                 layout: LuminaLayout = LuminaLayout(), vqgan=None, image_size: int | None = None,
                 prompt_template: str = PROMPT_TEMPLATE) -> None:
        self.model = model.eval()
        self.encode = encode
        self.layout = layout
        self.grid = (int(latent_hw[0]), int(latent_hw[1]))
        self.image_size = image_size or 16 * self.grid[0]
        self.prompt_template = prompt_template
        self.vqgan = vqgan
        self.default_settings = dict(DEFAULT_SETTINGS)
        mapping = model.model.vocabulary_mapping.img2bpe
        self.vocab_size = len(mapping)
        if sorted(mapping) != list(range(self.vocab_size)):
            raise ValueError("model: its vocabulary_map does not name image codes 0..V-1")
        weight = model.lm_head.weight
        self.code2bpe = torch.tensor([mapping[i] for i in range(self.vocab_size)], device=weight.device)
        self.image_head = weight.detach()[self.code2bpe]          # [V, hidden]

    @property
    def device(self) -> torch.device:
        return self.image_head.device

    def header_ids(self) -> list[int]:
        lay = self.layout
        h, w = (n // lay.latent_per_header for n in self.grid)
        return [lay.image_start, lay.grid_token_base + h, lay.grid_token_base + w]

    def cond_ids(self, prompt: str) -> list[int]:
        h, w = (16 * n for n in self.grid)                                 # pixels: 16 per latent
        text = self.prompt_template.format(h=h, w=w, prompt=prompt)
        return [self.layout.bos, *self.encode(text), self.layout.sep, *self.header_ids()]

    def uncond_ids(self) -> list[int]:
        return self.header_ids()

    def image_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states -> logits over the image codes (bypasses the image-logit mask)."""
        return (hidden @ self.image_head.T).float()

    def start(self, prompts: Sequence[str], cfg_scale: float) -> "LuminaSession":
        prompts = check_prompts(prompts)
        cfg = float(cfg_scale)
        if not cfg == cfg or cfg < 0:
            raise ValueError(f"cfg_scale: expected a finite number >= 0, got {cfg_scale!r}")
        return LuminaSession(self, prompts, cfg)

    def decode(self, tokens: torch.LongTensor) -> list:
        if self.vqgan is None:
            raise RuntimeError(f"Lumina-mGPT decode needs {VQGAN_HOW}")
        from .lumina_vqgan import decode_codes, to_pil

        tokens = _check_tokens(tokens, self.vocab_size, "tokens")
        if tokens.shape[1] != self.grid[0] * self.grid[1]:
            raise ValueError(f"tokens: expected [B, {self.grid[0] * self.grid[1]}], got {tuple(tokens.shape)}")
        return to_pil(decode_codes(self.vqgan, tokens, self.grid))


def _check_tokens(tokens, vocab_size: int, name: str) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype not in (torch.long, torch.int):
        raise ValueError(f"{name}: expected an integer tensor [B, W]")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"{name}: token ids must lie in [0, {vocab_size})")
    return tokens.long()


@dataclass
class _Feed:
    ids: torch.Tensor        # [R, T] BPE ids
    seq: torch.Tensor        # [R, T] generated sequence index per fed token, -1 for padding
    out: torch.Tensor        # [B, W] index in T of the hidden state predicting the next code


class LuminaSession(GuidedRows):
    """One batch being decoded; cond rows 0..B-1, uncond rows B..2B-1 when cfg_scale != 1.
    Rows join with `add_rows` and leave with `keep_rows` (a `ResizableSession`)."""

    def __init__(self, tm: LuminaTokenModel, prompts: list[str], cfg_scale: float) -> None:
        self.tm = tm
        self.cfg = cfg_scale
        self.batch = len(prompts)
        rows = [tm.cond_ids(p) for p in prompts]
        if cfg_scale != 1.0:
            rows += [tm.uncond_ids() for _ in prompts]
        self.R = len(rows)
        self.reps = self.R // self.batch                     # 2 with guidance: cond block, uncond block
        self.P = max(len(r) for r in rows)
        dev = tm.device
        self.plen = torch.tensor([len(r) for r in rows], device=dev)
        h, w = tm.grid
        self.seq_total = h * (w + 1)
        self.capacity = self.P + self.seq_total + 1
        self.scratch = self.capacity - 1
        self.slots = _Slots()
        self.cache = _slot_cache(tm.model.config.num_hidden_layers, self.capacity, self.slots)
        self.first_logits = self._prefill(rows)
        self.tree: Tree | None = None                        # the last step_tree's, until keep_path
        self.forced: Forced | None = None

    # -- rows joining and leaving -------------------------------------------------------
    # (`add_rows`: the prompt regions of both batches are left-padded to the longer one;
    # `keep_rows`: the prompt region shrinks to the longest kept prompt)
    def start_like(self, prompts: Sequence[str]) -> "LuminaSession":
        return self.tm.start(prompts, self.cfg)

    def join_state(self, new: "LuminaSession", order: torch.Tensor) -> None:
        P = max(self.P, new.P)
        order = order.to(self.plen.device)
        kv = [(torch.cat([ka, kb])[order], torch.cat([va, vb])[order])
              for (ka, va), (kb, vb) in zip(self._tensors(P), new._tensors(P))]
        length = max(self.slots.length + P - self.P, new.slots.length + P - new.P)
        self._relayout(P, torch.cat([self.plen, new.plen])[order], kv, length)

    def select_state(self, index: torch.Tensor) -> None:
        index = index.to(self.plen.device)
        plen = self.plen[index]
        P = int(plen.max()) if len(plen) else self.P
        cut = self.P - P                                 # prompt slots no kept row uses
        kv = [(k[index][:, :, cut:], v[index][:, :, cut:]) for k, v in self._tensors(self.P)]
        self._relayout(P, plen, kv, max(0, self.slots.length - cut))

    def _tensors(self, P: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Every layer's keys and values with the prompt region left-padded to P slots (the
        sequence's slots only: a tree region after them is not carried)."""
        pad, c = (0, 0, P - self.P, 0), self.capacity
        return [(F.pad(layer.keys[:, :, :c], pad), F.pad(layer.values[:, :, :c], pad)) for layer in self.cache.layers]

    def _relayout(self, P: int, plen: torch.Tensor, kv: list, length: int) -> None:
        self.P, self.plen = P, plen
        self.R = int(plen.numel())
        self.capacity = P + self.seq_total + 1
        self.scratch = self.capacity - 1
        self.slots.length = length
        self.cache = _slot_cache(len(kv), self.capacity, self.slots, kv)

    # -- helpers ----------------------------------------------------------------------
    def _mix(self, logits: torch.Tensor) -> torch.Tensor:
        if self.reps == 1:
            return logits
        return guide(logits[: self.batch], logits[self.batch:], self.cfg)

    def _mask(self, q_slot: torch.Tensor) -> torch.Tensor:
        """Additive 4-D mask [R, 1, T, view]: prompt slots of the row, plus P..q_slot.

        Only slots up to the furthest query are handed to attention (`view`): later slots are
        invisible to every query of this forward anyway.
        """
        k = torch.arange(int(q_slot.max()) + 1, device=q_slot.device)
        first = (self.P - self.plen)[:, None, None]
        prompt = (k >= first) & (k < self.P)
        gen = (k >= self.P) & (k <= q_slot[:, :, None])
        own = k == q_slot[:, :, None]
        allowed = (prompt & (k <= q_slot[:, :, None])) | gen | own
        dtype = self.tm.image_head.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=q_slot.device)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask[:, None]

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, slot: torch.Tensor, q_slot: torch.Tensor):
        self.slots.index = slot
        self.slots.length = max(self.slots.length, int(slot.max()) + 1)
        self.slots.view = int(q_slot.max()) + 1
        out = self.tm.model.model(input_ids=ids, attention_mask=self._mask(q_slot), position_ids=pos,
                                  cache=self.cache, use_cache=True)
        return out.last_hidden_state

    @torch.no_grad()
    def _prefill(self, rows: list[list[int]]) -> torch.Tensor:
        dev = self.tm.device
        ids = torch.full((self.R, self.P), self.tm.layout.pad, dtype=torch.long, device=dev)
        for r, row in enumerate(rows):
            ids[r, self.P - len(row):] = torch.tensor(row, device=dev)
        slot = torch.arange(self.P, device=dev).expand(self.R, -1)
        pos = (slot - (self.P - self.plen)[:, None]).clamp(min=0)
        hidden = self._forward(ids, pos, slot, slot)
        return self._mix(self.tm.image_logits(hidden[:, -1]))

    def _layout(self, tokens: torch.Tensor, start: torch.Tensor) -> _Feed:
        """Codes at grid positions start[b]+j -> BPE ids with the end-of-row tokens inserted."""
        dev = tokens.device
        B, W = tokens.shape
        gw = self.tm.grid[1]
        g = start[:, None] + torch.arange(W, device=dev)                 # grid positions
        s_tok = g + g // gw                                               # sequence index
        is_end = (g % gw) == gw - 1
        s0 = s_tok[:, 0]
        s_last = s_tok[:, -1] + is_end[:, -1].long()
        T = int((s_last - s0).max()) + 1
        s = s0[:, None] + torch.arange(T, device=dev)                    # [B, T]
        valid = s <= s_last[:, None]
        eol = (s + 1) % (gw + 1) == 0
        j = (s - s // (gw + 1)) - start[:, None]                         # window index of the code
        code = torch.gather(tokens, 1, j.clamp(0, W - 1))
        ids = torch.where(eol, torch.full_like(code, self.tm.layout.eol), self.tm.code2bpe.to(dev)[code])
        ids = torch.where(valid, ids, torch.full_like(ids, self.tm.layout.pad))
        seq = torch.where(valid, s, torch.full_like(s, -1))
        out = s_tok - s0[:, None] + is_end.long()
        return _Feed(ids, seq, out)

    # -- the contract -----------------------------------------------------------------
    @torch.no_grad()
    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        tokens = _check_tokens(tokens, self.tm.vocab_size, "tokens").to(self.tm.device)
        if tokens.shape[0] != self.batch or tokens.shape[1] < 1:
            raise ValueError(f"tokens: expected [{self.batch}, W>=1], got {tuple(tokens.shape)}")
        start = torch.as_tensor(start, device=self.tm.device).long().reshape(-1)
        n = self.tm.grid[0] * self.tm.grid[1]
        if start.shape[0] != self.batch or int(start.min()) < 0 or int((start + tokens.shape[1]).max()) > n:
            raise ValueError(f"start: expected [{self.batch}] positions with start + W <= {n}, got {start.tolist()}")
        feed = self._layout(tokens, start)
        seq = feed.seq.repeat(self.reps, 1)
        ids = feed.ids.repeat(self.reps, 1)
        valid = seq >= 0
        slot = torch.where(valid, self.P + seq, torch.full_like(seq, self.scratch))
        pos = torch.where(valid, self.plen[:, None] + seq, torch.zeros_like(seq))
        q_slot = torch.where(valid, slot, torch.full_like(seq, self.P - 1))
        hidden = self._forward(ids, pos, slot, q_slot)
        out = feed.out.repeat(self.reps, 1)
        picked = torch.gather(hidden, 1, out[:, :, None].expand(-1, -1, hidden.shape[-1]))
        self.tree = None
        return self._mix(self.tm.image_logits(picked))

    # -- a tree of drafts (`protocols.TreeSession`) ---------------------------------------
    # The nodes, then an end-of-row entry after each node that ends a row
    # (`tree.force_after`: seen by that node's children only), are written to a tree region
    # of slots after the sequence's; a 4-D mask shows each entry the prompt, the sequence
    # before its start and its own path. `keep_path` copies the kept entries' keys/values to
    # their sequence slots.
    def _tree_region(self, width: int) -> int:
        """The first slot of a region of `width` slots after the sequence's (grown as needed)."""
        first = self.capacity
        have = self.cache.layers[0].keys.shape[2] if self.cache.layers[0].is_initialized else self.capacity
        if have < first + width:
            pad = (0, 0, 0, first + width - have)
            kv = [(F.pad(layer.keys, pad), F.pad(layer.values, pad)) for layer in self.cache.layers]
            self.cache = _slot_cache(len(kv), first + width, self.slots, kv)
        return first

    @torch.no_grad()
    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor,
                  start: torch.LongTensor) -> torch.Tensor:
        tree = check_tree(tokens, parents, start, self.batch, self.tm.vocab_size)
        dev = self.tm.device
        gh, gw = self.tm.grid
        g = tree.positions.to(dev)                                           # grid positions [B, T]
        if int(g.max()) >= gh * gw:
            raise ValueError(f"start: every node's position start + depth must be < {gh * gw}, got starts "
                             f"{tree.start.tolist()}")
        forced = force_after(tree.seen.to(dev), (g % gw) == gw - 1)
        s_tok = g + g // gw                                                  # sequence index of each node
        eol_seq = torch.where(forced.forced, s_tok.gather(1, forced.owner) + 1, -1)
        self.entry_seq = torch.cat([s_tok, eol_seq], 1)                      # [B, T + E]
        ids = torch.cat([self.tm.code2bpe.to(dev)[tree.tokens.to(dev)],
                         torch.full_like(forced.owner, self.tm.layout.eol)], 1).repeat(self.reps, 1)
        seq = self.entry_seq.repeat(self.reps, 1)
        n = seq.shape[1]
        first = self._tree_region(n)
        slot = first + torch.arange(n, device=dev).expand(self.R, -1)
        pos = self.plen[:, None] + seq.clamp(min=0)
        begin = (tree.start.to(dev) + tree.start.to(dev) // gw).repeat(self.reps)   # sequence index of start
        k = torch.arange(first, device=dev)
        prompt = (k >= (self.P - self.plen)[:, None]) & (k < self.P)
        prefix = prompt | ((k >= self.P) & (k < self.P + begin[:, None]))
        allowed = tree_mask(prefix, forced.seen.repeat(self.reps, 1, 1))
        dtype = self.tm.image_head.dtype
        mask = torch.zeros(allowed.shape, dtype=dtype, device=dev).masked_fill_(~allowed, torch.finfo(dtype).min)
        self.slots.index, self.slots.view = slot, first + n
        out = self.tm.model.model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=self.cache,
                                  use_cache=True).last_hidden_state
        picked = torch.gather(out, 1, forced.out.repeat(self.reps, 1)[:, :, None].expand(-1, -1, out.shape[-1]))
        self.tree, self.forced, self.tree_first = tree, forced, first
        return self._mix(self.tm.image_logits(picked))

    def keep_path(self, nodes: torch.LongTensor) -> None:
        index, kept = check_path(self.tree, nodes)
        dev = self.tm.device
        entries, valid = path_entries(self.forced, index.to(dev), kept.to(dev))
        seq = self.entry_seq.gather(1, entries).repeat(self.reps, 1)
        entries, valid = entries.repeat(self.reps, 1), valid.repeat(self.reps, 1)
        b, q = valid.nonzero(as_tuple=True)
        src, dst = self.tree_first + entries[b, q], self.P + seq[b, q]
        for layer in self.cache.layers:
            layer.keys[b, :, dst] = layer.keys[b, :, src]
            layer.values[b, :, dst] = layer.values[b, :, src]
        if len(b):
            self.slots.length = max(self.slots.length, int(dst.max()) + 1)
        self.tree = self.forced = None


# --------------------------------------------------------------------------- loading

def _size_from_name(name: str) -> int | None:
    m = re.search(r"(?<!\d)(512|768|1024)(?!\d)", os.path.basename(os.path.normpath(name)) or name)
    return int(m.group(1)) if m else None


def resolve_folder(name_or_path: str, *, local_files_only: bool = False, progress: ProgressFn | None = None) -> str:
    """Registry name, Hub id or local folder -> a local folder (downloading on first use)."""
    files = HUB_FILES.get(name_or_path) if isinstance(name_or_path, str) else None
    return resolve_weights(name_or_path, files, local_files_only=local_files_only, progress=progress)


def _find_vqgan(folder: str, vqgan_path: str | None) -> tuple[str | None, str | None]:
    candidates = [vqgan_path, os.environ.get(VQGAN_ENV)]
    if folder:
        for sub in ("", "tokenizer", "image_tokenizer", "chameleon/tokenizer", "ckpts/chameleon/tokenizer"):
            candidates.append(os.path.join(folder, sub, "vqgan.ckpt"))
    for c in candidates:
        if c and os.path.isdir(c):
            c = os.path.join(c, "vqgan.ckpt")
        if c and os.path.isfile(c):
            yaml_path = os.path.join(os.path.dirname(c), "vqgan.yaml")
            return c, yaml_path if os.path.isfile(yaml_path) else None
    if vqgan_path:
        raise FileNotFoundError(f"vqgan_path: no VQGAN checkpoint at {vqgan_path!r}")
    return None, None


def load_lumina(name_or_path: str, *, device=None, dtype=None, vqgan_path: str | None = None,
                image_size: int | None = None, attn_implementation: str = "sdpa",
                require_vqgan: bool = False, layout: LuminaLayout | None = None,
                local_files_only: bool = False, progress: ProgressFn | None = None,
                trust_pickle=None) -> LuminaTokenModel:
    """Load Lumina-mGPT from a registry name (downloaded on first use), a Hub id or a folder.

    The VQGAN decoder (Meta's `vqgan.ckpt`) is looked up from `vqgan_path`, the
    SCD_LUMINA_VQGAN variable, or the model folder; without it tokens are generated but
    `decode` raises (unless `require_vqgan=True`, which fails at load time). `trust_pickle`
    names a vqgan.ckpt to load with full pickle if `torch.load(weights_only=True)` refuses it.
    """
    from transformers import AutoTokenizer, ChameleonForConditionalGeneration

    folder = resolve_folder(name_or_path, local_files_only=local_files_only, progress=progress)
    size = image_size or _size_from_name(name_or_path) or _size_from_name(folder)
    if size not in (512, 768, 1024) and not (isinstance(size, int) and size % 32 == 0 and size > 0):
        raise ValueError(f"image_size: cannot tell the resolution of {name_or_path!r}; pass image_size=512/768/1024")
    device, dtype = pick_device_dtype(device, dtype)
    vq_ckpt, vq_yaml = _find_vqgan(folder, vqgan_path)
    if require_vqgan and vq_ckpt is None:
        raise FileNotFoundError(f"vqgan_path: vqgan.ckpt not found; Lumina-mGPT decodes with {VQGAN_HOW}")
    model = ChameleonForConditionalGeneration.from_pretrained(
        folder, dtype=dtype, ignore_mismatched_sizes=True, attn_implementation=attn_implementation)
    load_qk_norms(model, folder)
    model.to(device)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    vq = None
    if vq_ckpt is not None:
        from .lumina_vqgan import load_chameleon_vqgan
        vq = load_chameleon_vqgan(vq_ckpt, vq_yaml, device=device, dtype=torch.float32,
                                  trust_pickle=trust_pickle)
    latent = size // 16
    layout = layout or LuminaLayout()
    if tokenizer.bos_token_id is not None and tokenizer.bos_token_id != layout.bos:
        layout = dataclasses.replace(layout, bos=int(tokenizer.bos_token_id))
    # As xllmx's Tokenizer.encode: no special tokens, BOS prepended by the adapter.
    return LuminaTokenModel(model, lambda text: tokenizer.encode(text, add_special_tokens=False),
                            (latent, latent), layout=layout, vqgan=vq, image_size=size)


def hub_files(name: str) -> tuple[HubFiles, ...]:
    return (HUB_FILES[name],)


def gpu_reason(name: str) -> str | None:
    return "7B parameters"


def manual_missing(name: str) -> str | None:
    """What `name` needs that no download provides (Meta's VQGAN), or None. Cheap."""
    folder = cached(HUB_FILES[name]) if name in HUB_FILES else (name if os.path.isdir(name) else None)
    try:
        vq, _ = _find_vqgan(folder or "", None)
    except FileNotFoundError as exc:
        return str(exc)
    return None if vq is not None else f"decoding needs {VQGAN_HOW}"


def claims_folder(path: str) -> bool:
    """A local Chameleon-type checkpoint folder whose name says Lumina."""
    cfg = os.path.join(path, "config.json")
    if not os.path.isfile(cfg) or "lumina" not in os.path.abspath(path).lower():
        return False
    try:
        with open(cfg) as f:
            return json.load(f).get("model_type") == "chameleon"
    except (OSError, ValueError):
        return False
