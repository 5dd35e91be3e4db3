"""Janus-Pro (1B, 7B) behind the TokenModel contract, on transformers' JanusForConditionalGeneration.

What the adapter hides from the engine, following `JanusForConditionalGeneration.generate`
with `generation_mode="image"`:
- the prompt template: the processor's chat template with a generation prompt, then the
  image-start token (`<begin_of_image>`);
- classifier-free guidance: an unconditional row per prompt in which every prompt token
  except BOS and image-start is the pad token; cond and uncond rows run in one batched
  forward and are mixed as `u + (c - u) * cfg_scale`;
- the image head: logits come from `model.model.generation_head` over the 16384-code image
  vocabulary, and fed tokens are embedded with `model.prepare_embeddings_for_image_generation`;
- the cache: one KV cache of fixed size for all rows, written by position
  (`transformers_session.SlotCache`, given to the model as a transformers `Cache` with an
  explicit 4-D mask and position ids), so rows of a batch may continue from different
  positions, forgetting is masking, a step reads nothing back, and rows may join
  (`add_rows`) and leave (`keep_rows`) a running session.

Paper settings (Janus-Pro in the SCD paper): CFG 5, top-k 1000, window L = 32.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from scd_core.sampling import guide

from .checkpoints import config_model_type, pick_device_dtype, resolve_weights
from .checks import check_cfg, check_prompts, check_step, check_tokens
from .transformers_session import ResizableRows, load_pretrained
from .hub import HubFiles, ProgressFn
from .tree import Tree, check_path, check_tree

# transformers' Janus port (JanusForConditionalGeneration) of DeepSeek's checkpoints; the
# original deepseek-ai/Janus-Pro-* repositories need DeepSeek's own package.
HUB_FILES = {
    "janus-pro-1b": HubFiles.transformers("deepseek-community/Janus-Pro-1B", approx_gb=4.1),
    "janus-pro-7b": HubFiles.transformers("deepseek-community/Janus-Pro-7B", approx_gb=14.8),
}
HUB_IDS = {name: files.repo_id for name, files in HUB_FILES.items()}
DEFAULT_SETTINGS = {"cfg_scale": 5.0, "top_k": 1000, "top_p": 1.0, "temperature": 1.0, "window": 32}
SFT_TEMPLATE = "<|User|>: {prompt}\n\n<|Assistant|>:"   # DeepSeek's format, when no chat template


def hub_files(name: str) -> tuple[HubFiles, ...]:
    return (HUB_FILES[name],)


def gpu_reason(name: str) -> str | None:
    """Why `name` needs a CUDA GPU, or None when a CPU will do (slowly, for the 1B)."""
    return "7B parameters" if name == "janus-pro-7b" else None


def claims_folder(path: str) -> bool:
    return config_model_type(path) == "janus"


def load_janus(name_or_path: str, device: str | torch.device | None = None,
               dtype: str | torch.dtype | None = None, *, local_files_only: bool = False,
               progress: ProgressFn | None = None, **kwargs) -> "JanusTokenModel":
    """Load Janus-Pro from a registry name (downloaded on first use), a Hub id or a folder."""
    folder = resolve_weights(name_or_path, HUB_FILES.get(name_or_path), local_files_only=local_files_only,
                             progress=progress)
    dev, dt = pick_device_dtype(device, dtype)
    from transformers import JanusForConditionalGeneration, JanusProcessor

    model, processor = load_pretrained(folder, JanusForConditionalGeneration, JanusProcessor, dev, dt, "Janus")
    return JanusTokenModel(model, processor, name=name_or_path, **kwargs)


class JanusTokenModel:
    """A `JanusForConditionalGeneration` as a TokenModel over its image-token grid.

    `processor` is a `JanusProcessor` (chat template and tokenizer). Tests and
    custom setups may instead pass `encode(prompt) -> list[int]` giving the full prompt
    ids (BOS ... image-start), with the special ids if the model's generation config lacks them.
    """

    def __init__(self, model, processor=None, *, encode: Callable[[str], list[int]] | None = None,
                 bos_token_id: int | None = None, boi_token_id: int | None = None,
                 pad_token_id: int | None = None, name: str = "janus"):
        if processor is None and encode is None:
            raise ValueError("processor: pass a JanusProcessor or an `encode` function")
        self.model, self.processor, self.name = model, processor, name
        self._encode = encode
        gen = getattr(model, "generation_config", None)
        self.bos_token_id = _first_id(bos_token_id, getattr(gen, "bos_token_id", None),
                                      model.config.text_config.bos_token_id, name="bos_token_id")
        self.pad_token_id = _first_id(pad_token_id, getattr(gen, "pad_token_id", None),
                                      model.config.text_config.pad_token_id, name="pad_token_id")
        boi_from_gen = (getattr(gen, "generation_kwargs", None) or {}).get("boi_token_id")
        boi_from_tok = _tokenizer_id(processor, "boi_token")
        self.boi_token_id = _first_id(boi_token_id, boi_from_gen, boi_from_tok, name="boi_token_id")
        self.vocab_size = int(model.config.vq_config.num_embeddings)
        side = int(round(model.config.vision_config.num_image_tokens ** 0.5))
        if side * side != model.config.vision_config.num_image_tokens:
            raise ValueError("model: vision_config.num_image_tokens is not a square")
        self.grid = (side, side)
        self.default_settings = dict(DEFAULT_SETTINGS)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode_prompt(self, prompt: str) -> list[int]:
        """Token ids of the image-generation prompt, ending with the image-start token."""
        if self._encode is not None:
            ids = list(self._encode(prompt))
        else:
            ids = self._encode_with_processor(prompt)
        if not ids or ids[-1] != self.boi_token_id:
            ids.append(self.boi_token_id)
        return ids

    def _encode_with_processor(self, prompt: str) -> list[int]:
        proc = self.processor
        if getattr(proc, "chat_template", None):
            messages = [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
            text = proc.apply_chat_template(messages, add_generation_prompt=True)
        else:
            text = SFT_TEMPLATE.format(prompt=prompt)
        ids = proc(text=[text], generation_mode="image", return_tensors="pt")["input_ids"][0].tolist()
        return ids if ids[:1] == [self.bos_token_id] else [self.bos_token_id] + ids

    def unconditional_ids(self, ids: list[int]) -> list[int]:
        """The CFG row: every token except BOS and image-start replaced by pad (as in `generate`)."""
        keep = (self.bos_token_id, self.boi_token_id)
        return [t if t in keep else self.pad_token_id for t in ids]

    def start(self, prompts: Sequence[str], cfg_scale: float) -> "JanusSession":
        prompts = check_prompts(prompts)
        cfg_scale = check_cfg(cfg_scale)
        cond = [self.encode_prompt(p) for p in prompts]
        rows = cond if cfg_scale == 1.0 else cond + [self.unconditional_ids(ids) for ids in cond]
        return JanusSession(self, rows, len(prompts), cfg_scale)

    @torch.no_grad()
    def decode(self, tokens: torch.LongTensor) -> list:
        """[B, N] image codes -> B PIL images, via `decode_image_tokens`."""
        tokens = check_tokens(tokens, self.vocab_size, "tokens")
        n = self.grid[0] * self.grid[1]
        if tokens.shape[1] != n:
            raise ValueError(f"tokens: expected [B, {n}] image codes, got {list(tokens.shape)}")
        pixels = self.model.decode_image_tokens(tokens.to(self.device)).float().cpu()  # [B, H, W, 3]
        return [_to_pil(img) for img in pixels]


class JanusSession(ResizableRows):
    """Cond (and uncond) rows of one batch of prompts, prefilled; `step` feeds windows.

    The cache (`transformers_session.SlotCache`, fixed at the start: the prompts, the grid and
    a scratch slot) holds the conditional rows of all prompts, then their unconditional rows
    (when guided); rows join with `add_rows` and leave with `keep_rows` (a `ResizableSession`).
    """

    compilable = True

    def __init__(self, tm: JanusTokenModel, rows: list[list[int]], batch: int, cfg_scale: float):
        self.tm, self.batch, self.cfg_scale = tm, batch, cfg_scale
        self.reps = len(rows) // batch                   # 2 with guidance: cond block, uncond block
        self._lm = tm.model.model.language_model
        embedding = tm.model.get_input_embeddings()
        ids, prefill = self.borrow_cache(rows, tm.pad_token_id, self._lm.config.num_hidden_layers,
                                         tm.grid[0] * tm.grid[1], embedding.weight.dtype)
        with torch.no_grad():
            hidden = self._forward(embedding(ids), *prefill)
            self.first_logits = self._logits(hidden[:, -1])
        self.tree: Tree | None = None                    # the last step_tree's, until keep_path

    def _forward(self, embeds: torch.Tensor, mask: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        out = self._lm(inputs_embeds=embeds, attention_mask=mask, position_ids=position_ids,
                       cache=self.kv.cache, use_cache=True)
        return out.last_hidden_state

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Image-head logits of all rows -> guided logits of the B prompts, guided in the model's
        dtype as transformers' and DeepSeek's samplers guide, then float32 (in bfloat16 the
        rounding decides which tokens tie at the top-k cut)."""
        scores = self.tm.model.model.generation_head(hidden)
        if self.reps > 1:
            scores = guide(scores[: self.batch], scores[self.batch:], self.cfg_scale)
        return scores.float()

    @torch.no_grad()
    def step(self, tokens: torch.LongTensor, start: torch.LongTensor) -> torch.Tensor:
        tokens, start = check_step(tokens, start, self.batch, self.tm.vocab_size, device=self.tm.device,
                                   fed=self.fed, length=self.kv.S)
        offsets = start[:, None] + torch.arange(tokens.shape[1], device=tokens.device)
        embeds = self.tm.model.prepare_embeddings_for_image_generation(tokens.repeat(self.reps, 1))
        hidden = self._forward(embeds, *self.kv.write_at(offsets.repeat(self.reps, 1), embeds.dtype))
        self.fed.copy_(start + tokens.shape[1])
        self.tree = None
        return self._logits(hidden)

    # a tree of drafts (`protocols.TreeSession`): a 4-D mask over the cache and the nodes'
    # own paths, position ids at each node's depth; the nodes' keys/values go to the cache's
    # tree slots until `keep_path` moves the kept ones into place (`SlotCache.write_tree` / `keep_path`)
    @torch.no_grad()
    def step_tree(self, tokens: torch.LongTensor, parents: torch.LongTensor,
                  start: torch.LongTensor) -> torch.Tensor:
        tree = check_tree(tokens, parents, start, self.batch, self.tm.vocab_size, device=self.tm.device,
                          fed=self.fed, length=self.kv.S)
        rows = tree.repeat(self.reps)                    # unconditional rows: the same tree
        embeds = self.tm.model.prepare_embeddings_for_image_generation(rows.tokens)
        hidden = self._forward(embeds, *self.kv.write_tree(rows.start, rows.positions, rows.seen, embeds.dtype))
        self.fed.copy_(tree.start)                       # the nodes are not kept until keep_path
        self.tree = tree
        return self._logits(hidden)

    def keep_path(self, nodes: torch.LongTensor) -> None:
        index, kept = check_path(self.tree, nodes)
        offsets = self.tree.start[:, None] + torch.arange(index.shape[1], device=index.device)
        self.kv.keep_path(index.repeat(self.reps, 1), kept.repeat(self.reps, 1), offsets.repeat(self.reps, 1))
        self.fed.copy_(self.tree.start + kept.sum(1))
        self.tree = None


# ---------------------------------------------------------------- shared small helpers

def _first_id(*candidates, name: str) -> int:
    for c in candidates:
        if c is not None:
            return int(c[0] if isinstance(c, (list, tuple)) else c)
    raise ValueError(f"{name}: not found in the model's generation config; pass it explicitly")


def _tokenizer_id(processor, attr: str) -> int | None:
    tok = getattr(processor, "tokenizer", None)
    text = getattr(tok, attr, None) if tok is not None else None
    return tok.convert_tokens_to_ids(text) if text else None


def _to_pil(image: torch.Tensor):
    """One [H, W, 3] image in [-1, 1] -> PIL, as DeepSeek's own Janus generation script does
    (`clip((x + 1) / 2 * 255)`, then uint8). The processor's `postprocess` would instead undo
    the understanding-side normalisation of its config, and its PIL backend in transformers
    5.24 mis-reads channels-last arrays."""
    from PIL import Image

    array = ((image + 1.0) / 2.0 * 255.0).clamp(0, 255).to(torch.uint8).numpy()
    return Image.fromarray(array)
