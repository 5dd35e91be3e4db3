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
  `uncond_embedding`, with the same text mask as their conditional row; `sampling.guide`;
- t2i text: T5 states left-padded, padded positions zeroed and masked, every position
  attending to itself.
The KV cache is static and position-indexed (gpt-fast style): a token at grid position g of
a row is written to slot cls_token_num + g and masked by position, so rows can sit at
different positions and forgetting costs nothing. Every row's cache has the same layout (the
condition is always cls_token_num slots), so rows join a running session (`add_rows`) and
leave it (`keep_rows`) by concatenating and selecting cache rows.

Modules: `config` (sizes, settings), `network` (the GPT, its cache), `vq` (the VQ-16
tokenizer), `checkpoint` (state dicts -> configurations), `adapter` (the TokenModel and its
session), `files` (where the weights are), `loader` (`load_llamagen`).
"""
from .adapter import LlamaGenSession, LlamaGenTokenModel, TextEncoder, left_pad_states, to_pil
from .checkpoint import (gpt_config_from_state_dict, load_strict, read_checkpoint,
                         vq_config_from_state_dict)
from .config import DEFAULT_SETTINGS, EXAMPLE_PROMPTS, GPT_SIZES, HEADS_BY_DIM, GPTConfig, find_multiple
from .files import (DEFAULT_FILES, DIR_ENV, HUB_FILES, HUB_REPO, T5_FILES, T5_REPO, claims_folder, find_t5,
                    gpu_reason, hub_files, locate_files, missing_files)
from .loader import load_llamagen, t5_text_encoder
from .network import Attention, StaticKV, Transformer, TransformerBlock, apply_rotary, rope_2d_table
from .vq import VQModel, VectorQuantizer

__all__ = ["LlamaGenSession", "LlamaGenTokenModel", "TextEncoder", "left_pad_states", "to_pil",
           "gpt_config_from_state_dict", "load_strict", "read_checkpoint", "vq_config_from_state_dict",
           "DEFAULT_SETTINGS", "EXAMPLE_PROMPTS", "GPT_SIZES", "HEADS_BY_DIM", "GPTConfig", "find_multiple",
           "DEFAULT_FILES", "DIR_ENV", "HUB_FILES", "HUB_REPO", "T5_FILES", "T5_REPO", "claims_folder", "find_t5",
           "gpu_reason", "hub_files", "locate_files", "missing_files", "load_llamagen", "t5_text_encoder",
           "Attention", "StaticKV", "Transformer", "TransformerBlock", "apply_rotary", "rope_2d_table",
           "VQModel", "VectorQuantizer"]
