"""LlamaGen behind the TokenModel contract: conditions, guidance, the session."""
from __future__ import annotations

import re
from typing import Callable, Sequence

import torch

from scd_core.sampling import guide

from .. import static
from ..checks import check_cfg, check_prompts, check_step
from ..rows import GuidedRows
from ..tree import Tree, check_path, check_tree, tree_mask
from .config import DEFAULT_SETTINGS, EXAMPLE_PROMPTS
from .network import Transformer
from .vq import VQModel

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


class LlamaGenSession(GuidedRows):
    """Cond rows 0..B-1, uncond rows B..2B-1 (when cfg_scale != 1), one static cache; rows join
    with `add_rows` and leave with `keep_rows` (a `ResizableSession`)."""

    compilable = True

    def __init__(self, tm: LlamaGenTokenModel, prompts: list[str], cfg_scale: float) -> None:
        self.tm = tm
        self.batch = len(prompts)
        self.cfg_scale = cfg_scale
        emb, cond_mask = tm.conditions(prompts, with_uncond=cfg_scale != 1.0)
        self.R = emb.shape[0]
        self.reps = self.R // self.batch                     # 2 with guidance: cond block, uncond block
        self.cls = tm.cfg.cls_token_num
        self.length = self.cls + tm.cfg.block_size
        self.buffers = static.buffers_of(tm)
        self.cond_mask, = self.buffers.holding(self, [cond_mask])
        self.cache = tm.gpt.new_cache(self.R, self.buffers, self)
        with torch.no_grad():
            pos = torch.arange(self.cls, device=tm.device).expand(self.R, -1)
            logits = tm.gpt.forward_embeddings(emb, pos, self._mask(pos), self.cache)
        self.first_logits = self._mix(logits[:, -1])
        self.tree: Tree | None = None                       # the last step_tree's, until keep_path

    # rows joining and leaving (`rows.GuidedRows`)
    def start_like(self, prompts: Sequence[str]) -> "LlamaGenSession":
        return self.tm.start(prompts, self.cfg_scale)

    def join_state(self, new: "LlamaGenSession", order: torch.Tensor) -> None:
        order = order.to(self.cond_mask.device)
        for mine, theirs in zip(self.cache, new.cache):
            mine.join(theirs, order)
        self.cond_mask, = self.buffers.holding(self, [torch.cat([self.cond_mask, new.cond_mask])[order]],
                                               old=[self.cond_mask])
        self.R = int(order.numel())

    def select_state(self, index: torch.Tensor) -> None:
        index = index.to(self.cond_mask.device)
        for layer in self.cache:
            layer.keep(index)
        self.cond_mask, = self.buffers.holding(self, [self.cond_mask[index]], old=[self.cond_mask])
        self.R = int(index.numel())

    def _mix(self, logits: torch.Tensor) -> torch.Tensor:
        if self.reps == 1:
            return logits
        return guide(logits[: self.batch], logits[self.batch:], self.cfg_scale)

    def _mask(self, q_pos: torch.Tensor) -> torch.Tensor:
        """[R, 1, T, S]: causal by position; condition slots per the text mask; self always.

        S = every slot of the cache (a fixed shape): later slots and the scratch slot are
        invisible to every query by position."""
        k = torch.arange(self.slots, device=q_pos.device)
        causal = k <= q_pos[:, :, None]
        cond_ok = torch.cat([self.cond_mask, self.cond_mask.new_ones(self.R, self.slots - self.cls)], 1)
        own = k == q_pos[:, :, None]
        return ((causal & cond_ok[:, None, :]) | own)[:, None]

    @property
    def slots(self) -> int:
        """Sequence slots of the cache: the condition, the grid, then one scratch slot."""
        return self.cache[0].length

    @torch.no_grad()
    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        n = self.tm.cfg.block_size
        dev = self.tm.device
        tokens, start = check_step(tokens, start, self.batch, self.tm.vocab_size, device=dev, length=n)
        reps = self.reps
        pos = (self.cls + start[:, None] + torch.arange(tokens.shape[1], device=dev)).repeat(reps, 1)
        h = self.tm.gpt.tok_embeddings(tokens.repeat(reps, 1))
        logits = self.tm.gpt.forward_embeddings(h, pos, self._mask(pos), self.cache)
        self.tree = None
        return self._mix(logits)

    # a tree of drafts (`protocols.TreeSession`): the nodes attend to the cache before their
    # start and to their own paths; their keys/values go to the cache's tree slots until
    # `keep_path` moves the kept ones to their positions
    def reserve_tree(self, nodes: int) -> None:
        """Tree slots for trees of `nodes` nodes in every layer's cache."""
        for layer in self.cache:
            layer.reserve(nodes)

    @torch.no_grad()
    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor,
                  start: torch.LongTensor) -> torch.Tensor:
        n = self.tm.cfg.block_size
        dev = self.tm.device
        tree = check_tree(tokens, parents, start, self.batch, self.tm.vocab_size, device=dev, length=n)
        rows = tree.repeat(self.reps)                       # unconditional rows: the same tree
        first = self.cls + rows.start                       # slot of each row's generated start
        prefix = torch.arange(self.slots, device=dev) < first[:, None]
        prefix = prefix & torch.cat([self.cond_mask, prefix.new_ones(self.R, self.slots - self.cls)], 1)
        h = self.tm.gpt.tok_embeddings(rows.tokens)
        logits = self.tm.gpt.forward_embeddings(h, self.cls + rows.positions, tree_mask(prefix, rows.seen),
                                                self.cache, tree=True)
        self.tree = tree
        return self._mix(logits)

    def keep_path(self, nodes: torch.LongTensor) -> None:
        index, kept = check_path(self.tree, nodes)
        dev = self.tm.device
        slots = self.cls + self.tree.start[:, None] + torch.arange(index.shape[1], device=dev)
        for layer in self.cache:
            layer.keep_nodes(index.repeat(self.reps, 1), kept.repeat(self.reps, 1), slots.repeat(self.reps, 1))
        self.tree = None
