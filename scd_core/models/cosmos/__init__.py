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
it (`keep_rows`) by concatenating and selecting cache rows. Each row's conditioning tokens stay
with its session (`prefix_tokens`; `row_decoder(row)` decodes the row after them), so
concurrent sessions of one model never see each other's prefix.

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

(`timing.time_forward(...)` runs exactly this; `python -m scd_core.models.cosmos --time` prints it.)

Modules: `config` (architecture, layouts), `network` (the transformer, positions, its cache),
`checkpoint` (published state dicts), `tokenizer` (the DV tokenizer, video input), `adapter`
(the TokenModel and its session), `files` (where the weights are), `loader` (`load_cosmos`),
`timing` (the GPU recipe).
"""
from . import tokenizer
from .adapter import ClipDecoder, CosmosSession, CosmosVideoModel, parse_prompt
from .checkpoint import config_from_state, load_network, map_checkpoint, read_checkpoint, split_fused_qkv
from .config import INPUT_FRAMES, MODEL_NAMES, NUM_INPUT_FRAMES, T5_MAX_LENGTH, CosmosConfig, full_size_config
from .files import (CHECKPOINT_FILES, CHECKPOINTS_ENV, HUB_FILES, HUB_IDS, T5_FILES, T5_HUB_ID, TOKENIZER_FILES,
                    TOKENIZER_FOLDER, TOKENIZER_HUB_ID, claims_folder, find_checkpoint, find_tokenizer, gpu_reason,
                    hub_files, missing_files)
from .loader import levels_for, load_cosmos, load_t5
from .network import (Attention, CosmosTransformer, KVCache, TransformerBlock, abs_pos_embedding, apply_rope,
                      latent_coords, random_model, rope_angles, rope_inv_freqs, rotate_half, sincos_1d)
from .timing import time_forward

__all__ = ["tokenizer", "ClipDecoder", "CosmosSession", "CosmosVideoModel", "parse_prompt",
           "config_from_state", "load_network", "map_checkpoint", "read_checkpoint", "split_fused_qkv",
           "INPUT_FRAMES", "MODEL_NAMES", "NUM_INPUT_FRAMES", "T5_MAX_LENGTH", "CosmosConfig", "full_size_config",
           "CHECKPOINT_FILES", "CHECKPOINTS_ENV", "HUB_FILES", "HUB_IDS", "T5_FILES", "T5_HUB_ID", "TOKENIZER_FILES",
           "TOKENIZER_FOLDER", "TOKENIZER_HUB_ID", "claims_folder", "find_checkpoint", "find_tokenizer",
           "gpu_reason", "hub_files", "missing_files", "levels_for", "load_cosmos", "load_t5", "Attention",
           "CosmosTransformer", "KVCache", "TransformerBlock", "abs_pos_embedding", "apply_rope", "latent_coords",
           "random_model", "rope_angles", "rope_inv_freqs", "rotate_half", "sincos_1d", "time_forward"]
