"""Cosmos-1 AR behind the TokenModel contract: prompts (clip paths, Video2World text), the
session (the conditioning prefix in the cache, rows joining and leaving) and decoding."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import torch

from .. import static
from ..checks import check_step
from ..rows import GuidedRows
from ..tree import Tree, check_path, check_tree
from . import tokenizer as dv
from .config import INPUT_FRAMES, NUM_INPUT_FRAMES, T5_MAX_LENGTH
from .network import CosmosTransformer, KVCache


def parse_prompt(prompt: str, has_text: bool) -> tuple[str, str]:
    """'clip.mp4|text' -> ('clip.mp4', 'text'); the text part only for Video2World."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"prompts: expected a video path (\"clip.mp4\" or \"clip.mp4|text\"), got {prompt!r}")
    path, sep, text = prompt.partition("|")
    if sep and not has_text:
        raise ValueError("prompts: this Cosmos model continues a video and takes no text; "
                         "pass just the video path (text is for cosmos-1-ar-5b-video2world)")
    return path.strip(), text.strip()


class ClipDecoder:
    """The decoder of one row's generated tokens [1, N]: decodes them after the conditioning
    tokens `prefix_tokens` [1, prefix_len] of that row (the frames it continues)."""

    def __init__(self, model: "CosmosVideoModel", prefix_tokens: torch.LongTensor):
        self.model, self.prefix_tokens = model, prefix_tokens

    def __call__(self, tokens: torch.LongTensor) -> list:
        return self.model.decode(tokens, prefix=self.prefix_tokens)


class CosmosSession(GuidedRows):
    """One batch being decoded: the conditioning prefix is in the cache from the start. Rows
    join with `add_rows` and leave with `keep_rows` (a `ResizableSession`). Each row's
    conditioning tokens stay with the session (`prefix_tokens`, `row_decoder`): decoding a
    row reads nothing that another session may change."""

    reps = 1                                                  # no guidance: one block of rows
    compilable = True

    def __init__(self, model: "CosmosVideoModel", prefix: torch.LongTensor,
                 context: torch.Tensor | None = None):
        self.model = model
        net, cfg = model.net, model.cfg
        b = prefix.shape[0]
        # Optional, outside the contract: the conditioning tokens in raster order, so an
        # engine can seed 'repeat-frame' drafts of generated frame 0 from the last given frame.
        self.prefix_tokens = prefix.detach().long()
        self.base = cfg.offset + cfg.prefix_len              # sequence index of generated 0
        self.buffers = static.buffers_of(model)
        self.cache = KVCache.allocate(cfg, b, cfg.seq_len + 1, model.device, model.dtype, self.buffers, self)
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
        self.fed, = self.buffers.zeros(self, [((b,), torch.long)], model.device)   # generated positions fed per row
        self.tree: Tree | None = None                         # the last step_tree's, until keep_path
        self.batch = b

    def add_token_rows(self, prefix: torch.LongTensor, context: torch.Tensor | None = None) -> torch.Tensor:
        """`add_rows` from conditioning tokens [b, prefix_len] (and text states), as `start_tokens`."""
        self.model.check_prefix(prefix)
        return self.add_session_rows(CosmosSession(self.model, prefix.long(), context))

    def row_decoder(self, row: int) -> ClipDecoder:
        """The decoder of row `row`'s tokens [1, N]: with the conditioning frames it continues."""
        return ClipDecoder(self.model, self.prefix_tokens[row: row + 1].cpu())

    # rows joining and leaving (`rows.GuidedRows`); `prompts` as for `start`
    def start_like(self, prompts: Sequence[str]) -> "CosmosSession":
        return CosmosSession(self.model, *self.model.conditioning(prompts))

    def join_state(self, new: "CosmosSession", order: torch.Tensor) -> None:
        self.cache.join(new.cache)                            # one block: order is the identity
        self.prefix_tokens = torch.cat([self.prefix_tokens, new.prefix_tokens.to(self.prefix_tokens.device)])
        self.fed, = self.buffers.holding(self, [torch.cat([self.fed, new.fed])], old=[self.fed])

    def select_state(self, index: torch.Tensor) -> None:
        self.cache.keep(index.to(self.model.device))
        self.prefix_tokens = self.prefix_tokens[index.to(self.prefix_tokens.device)]
        self.fed, = self.buffers.holding(self, [self.fed[index.to(self.fed.device)]], old=[self.fed])

    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        # no value is read on the host: the values are checked only where that is free (`device_check`)
        tokens, start = check_step(tokens, start, self.fed.shape[0], self.model.vocab_size, device=self.model.device,
                                   fed=self.fed, length=math.prod(self.model.grid))
        w = tokens.shape[1]
        pos = (self.base + start)[:, None] + torch.arange(w, device=tokens.device)
        with torch.no_grad():
            logits = self.model.net(tokens, pos, self.cache)
        self.fed.copy_(start + w)
        self.tree = None
        return logits

    # a tree of drafts (`protocols.TreeSession`): the nodes attend to the cache before their
    # start and to their own paths, with RoPE and position embeddings at their depths; their
    # keys/values go to the cache's tree slots until `keep_path` moves the kept ones into place
    def reserve_tree(self, nodes: int) -> None:
        """Tree slots for trees of `nodes` nodes in every layer's cache."""
        self.cache.reserve(nodes)

    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor,
                  start: torch.LongTensor) -> torch.Tensor:
        tree = check_tree(tokens, parents, start, self.batch, self.model.vocab_size, device=self.model.device,
                          fed=self.fed, length=math.prod(self.model.grid))
        with torch.no_grad():
            logits = self.model.net(tree.tokens, self.base + tree.positions, self.cache,
                                    tree=(self.base + tree.start, tree.seen))
        self.fed.copy_(tree.start)                           # the nodes are not kept until keep_path
        self.tree = tree
        return logits

    def keep_path(self, nodes: torch.LongTensor) -> None:
        index, kept = check_path(self.tree, nodes)
        slots = self.base + self.tree.start[:, None] + torch.arange(index.shape[1], device=index.device)
        self.cache.keep_nodes(index, kept, slots)
        self.fed.copy_(self.tree.start + kept.sum(1))
        self.tree = None


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
        return CosmosSession(self, prefix.long(), context)

    def decode(self, tokens: torch.LongTensor, prefix: torch.LongTensor | None = None) -> list:
        """Generated tokens [B, N] -> per row the 33 decoded frames (PIL images).

        The decoder works on whole 33-frame chunks, so the conditioning latents `prefix`
        [B, prefix_len] are put in front; the first 9 frames reconstruct the input clip. A
        session's `row_decoder(row)` passes its row's prefix (`scd_core.generate` decodes each
        row with its own).
        """
        if self.tokenizer is None:
            raise ValueError("decode: this model was loaded without the DV tokenizer")
        n = math.prod(self.grid)
        if tokens.ndim != 2 or tokens.shape[1] != n:
            raise ValueError(f"tokens: expected [B, {n}], got {tuple(tokens.shape)}")
        if prefix is None or prefix.shape[0] != tokens.shape[0]:
            raise ValueError("prefix: decode needs the conditioning tokens of these rows, prefix=[B, prefix_len] "
                             "(a session's row_decoder(row) passes its row's)")
        prefix = prefix.long().cpu()
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
