"""GPU timing of the full-size models: what one window forward costs against one
single-token forward, what share of a pass the engine itself takes, and what one image costs
from prompt to tokens with each method, eager and compiled.

    scd-gpu-timing --out bench_out/gpu_timing.json      # one H100/H200 (python -m scd_core.measure.gpu_timing)
    scd-gpu-timing --tiny                               # the same code on tiny configs, on the CPU

It needs transformers 5.24 (the Lumina adapter's slot cache).

For each model (Janus-Pro-7B, Lumina-mGPT-7B-768, Cosmos-1.0-AR-4B) the published config is
built with random weights, directly on the GPU in bf16 (no checkpoint, no download), and
driven through the library's own adapter (`JanusTokenModel`, `LuminaTokenModel`,
`CosmosVideoModel`), so the timed path is exactly `Session.step` as the engine calls it:
- a prompt of realistic length is prefilled (with its CFG row: 2 forward rows for 1 prompt;
  Cosmos has no CFG and prefills its 5,120 conditioning tokens);
- the first `--context` fraction of the image (video) grid is fed in chunks, so the timed
  forwards see the KV cache of a run half-way through (the average over a whole run);
- each window size L is then timed as the median of `--repeats` CUDA-synchronised
  `Session.step` calls (after warm-up), every call re-feeding the same positions, which
  makes the adapter forget the previous window first (cache crop / slot overwrite included).

The engine alone is timed at the same sizes (V, grid, L, batch) with `RandomLogitsModel` on
the same device through `scd_core.generate`: engine ms per iteration = `run.engine_time /
run.nfe` (everything outside `Session.step`: sampling, verification, coupling, trace), for AR
at L = 1 and for each method at L > 1. The grid of the engine runs is cut to at most
`--engine-tokens` positions (full rows / frames kept) so a run takes seconds; the per-iteration
cost depends on V, L and the batch, not on the grid length.

Per image (`--images`, the models with a text prompt: Janus-Pro-7B and Lumina-mGPT-7B-768; Cosmos
continues a clip, which needs its tokenizer): one prompt decoded by `scd_core.generate` with AR,
SJD and both SCD couplings at the model's own window, eager and, for `--compile-methods`,
compiled (`Settings.compile`: on a GPU the pass is captured as a CUDA graph; the first run,
which compiles, is timed apart as the compile time), and for Janus-Pro transformers' own
`generate` (its image mode, static cache, CFG) as the reference. Each is timed from the call to
the tokens on the host, synchronised. With random weights the speculative methods' NFE is not
a real model's (near-uniform logits accept far more drafts): read the milliseconds per pass,
and scale them by a real model's NFE.

Output: a markdown table (model, L, forward ms, forward(L)/forward(1), engine ms per iteration
per method, engine share = engine ms / forward ms, as the paper's 1.66 ms of 36.41 ms on
Janus-Pro-7B) and a JSON file (`--out`, default $OUT/gpu_timing.json when $OUT is set, else
bench_out/gpu_timing.json), rewritten after each model so a partial run still leaves results.
A model that fails is recorded with its error and the next one runs.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

import scd_core
from scd_core.models.toy import RandomLogitsModel
from scd_core.protocols import optional

MODELS = ("janus-pro-7b", "lumina-mgpt-7b-768", "cosmos-1-ar-4b")
DEFAULT_WINDOWS = {"janus-pro-7b": (1, 16, 32, 64), "lumina-mgpt-7b-768": (1, 16, 32, 64),
                   "cosmos-1-ar-4b": (1, 32, 64, 128)}
METHODS = ("sjd", "scd-mc", "scd-gumbel")

# Parameter counts of the published checkpoints (bf16 bytes / 2):
# - deepseek-ai/Janus-Pro-7B: pytorch_model-0000{1,2}-of-00002.bin = 9.99 GB + 4.85 GB -> ~7.42e9
#   (https://huggingface.co/deepseek-ai/Janus-Pro-7B/tree/main);
# - Alpha-VLLM/Lumina-mGPT-7B-768: model-0000{1,2}-of-00002.safetensors = 9.98 GB + 4.05 GB -> ~7.0e9,
#   without the VQ encoder, which Lumina's finetune_solver.py deletes (`del model.model.vqmodel`)
#   (https://huggingface.co/Alpha-VLLM/Lumina-mGPT-7B-768/tree/main);
# - nvidia/Cosmos-1.0-Autoregressive-4B: the name's 4B (config arithmetic: 4.01e9).
PUBLISHED_PARAMS = {"janus-pro-7b": 7.42e9, "lumina-mgpt-7b-768": 7.0e9, "cosmos-1-ar-4b": 4.0e9}


# ------------------------------------------------------------------------------------ configs

def janus_config(tiny: bool = False):
    """transformers' JanusConfig of Janus-Pro-7B (or a tiny one of the same classes).

    Full size from deepseek-ai/Janus-Pro-7B config.json (DeepSeek's format; the HF conversion
    deepseek-community/Janus-Pro-7B carries the same sizes): language_config llama with
    num_hidden_layers 30, vocab_size 102400, max_position_embeddings 16384 and LLaMA-7B widths
    (hidden 4096, intermediate 11008, 32 heads, head_dim 128); aligner (SigLIP-L 1024 -> 4096)
    and gen_aligner (8 -> 4096) depth 2; gen_head image_token_embed 4096, image_token_size
    16384; gen_vision VQ-16 (16384 codes, n_embed 8); 384 px / 16 = 24 x 24 = 576 image tokens
    (https://huggingface.co/deepseek-ai/Janus-Pro-7B config.json, as mirrored e.g. in
    cyan2k/Janus-Pro-7B-bnb-4bit; the rest: LLaMA-7B widths of DeepSeek-LLM-7B, rms_norm_eps 1e-6).
    """
    from transformers import JanusConfig, JanusVisionConfig, JanusVQVAEConfig, LlamaConfig

    if tiny:
        text = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, bos_token_id=1, eos_token_id=2,
                           pad_token_id=0)
        vision = JanusVisionConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=64,
                                   patch_size=16, projection_dim=64, num_image_tokens=256)
        vq = JanusVQVAEConfig(embed_dim=8, num_embeddings=128, latent_channels=32, base_channels=32,
                              channel_multiplier=[1, 1], num_res_blocks=1, projection_dim=64,
                              image_token_embed_dim=64, num_hidden_layers=1)
        return JanusConfig(text_config=text, vision_config=vision, vq_config=vq, image_token_id=299)
    text = LlamaConfig(vocab_size=102400, hidden_size=4096, intermediate_size=11008, num_hidden_layers=30,
                       num_attention_heads=32, num_key_value_heads=32, head_dim=128,
                       max_position_embeddings=16384, rms_norm_eps=1e-6, bos_token_id=100000,
                       eos_token_id=100001, pad_token_id=100002)
    vision = JanusVisionConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, image_size=384,
                               patch_size=16, projection_dim=4096, depth=2, num_image_tokens=576)
    vq = JanusVQVAEConfig(embed_dim=8, num_embeddings=16384, projection_dim=4096, image_token_embed_dim=4096,
                          num_hidden_layers=2)
    # DeepSeek's language model keeps its own text lm_head (wnma3mz/Janus-Pro-7B-LM, the LM part
    # extracted: "tie_word_embeddings": false, 13.8 GB), so the text head is not tied here either.
    return JanusConfig(text_config=text, vision_config=vision, vq_config=vq, image_token_id=100581,
                       tie_word_embeddings=False)


JANUS_IDS = {False: dict(bos=100000, pad=100002, boi=100016, text=(1000, 100000)),   # <begin_of_image>
             True: dict(bos=1, pad=0, boi=298, text=(3, 258))}


def _code_name(code: int) -> str:
    """Chameleon's name of image code `code`: IMGIMG + its digits as letters (0 -> A) + Z."""
    return "IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(code)) + "Z"


def chameleon_vocabulary_map(vocab_size: int, n_codes: int, first_code_id: int = 4) -> dict[str, int]:
    """A vocabulary map of the right shape: image codes 0..n_codes-1 at BPE ids 4.. (as Chameleon)."""
    names = {i: f"tok{i}" for i in range(vocab_size)}
    for code in range(n_codes):
        names[first_code_id + code] = _code_name(code)
    return {name: i for i, name in names.items()}


LUMINA_TINY_LAYOUT = dict(bos=0, sep=93, image_start=92, eoi=91, eol=90, grid_token_base=60, pad=1)


def lumina_config(tiny: bool = False):
    """transformers' ChameleonConfig of Lumina-mGPT-7B (or a tiny one of the same class).

    Lumina-mGPT-7B is Chameleon-7B fine-tuned (Alpha-VLLM/Lumina-mGPT, lumina_mgpt/finetune_solver.py
    starts from Alpha-VLLM/Chameleon_7B_mGPT, max_seq_len 4096): vocab 65536, hidden 4096, 32
    layers, 32 heads (32 KV heads), intermediate 11008, RMSNorm eps 1e-5, per-head q/k LayerNorm
    (transformers' Chameleon always has it), no bias; image codes 8192 at BPE ids 4..8195 (the
    same sizes as torchtune's chameleon_7b and transformers' ChameleonConfig defaults).
    """
    from transformers import ChameleonConfig

    if tiny:
        vq = dict(embed_dim=4, num_embeddings=16, latent_channels=4, resolution=16, base_channels=32,
                  channel_multiplier=[1, 1], num_res_blocks=1, attn_resolutions=[])
        return ChameleonConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                               vocabulary_map=chameleon_vocabulary_map(96, 16), vq_config=vq,
                               attn_implementation="sdpa")
    return ChameleonConfig(vocab_size=65536, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                           num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                           rms_norm_eps=1e-5, vocabulary_map=chameleon_vocabulary_map(65536, 8192),
                           attn_implementation="sdpa")


def cosmos_config(tiny: bool = False):
    """The Cosmos-1.0-AR-4B config of `scd_core.models.cosmos` (or a tiny one)."""
    from scd_core.models.cosmos import CosmosConfig, full_size_config

    if tiny:
        return CosmosConfig(dim=48, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=12, ffn_hidden_size=64,
                            vocab_size=60, latent_shape=(5, 8, 16), rope_theta=10000.0, pixel_size=(128, 256))
    return full_size_config("cosmos-1-ar-4b")


# ------------------------------------------------------------------------------ parameter counts

def count_params(module: torch.nn.Module, skip: Sequence[str] = ()) -> int:
    return sum(p.numel() for n, p in module.named_parameters() if not any(n.startswith(s) for s in skip))


def meta_param_count(name: str) -> int:
    """Parameters of the full-size model `name`, built on the meta device (no memory used).

    Lumina's count leaves out transformers' Chameleon VQ encoder (`model.vqmodel`), which
    the published Lumina checkpoints do not hold and the timing never runs.
    """
    with torch.device("meta"):
        net = build_network(name, tiny=False)
    return count_params(net, skip=PARAM_SKIP.get(name, ()))


PARAM_SKIP = {"lumina-mgpt-7b-768": ("model.vqmodel.",)}


# ------------------------------------------------------------------------------ building models

@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Create floating tensors in `dtype` (so a 7B model is built in bf16, never in fp32 first)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_network(name: str, tiny: bool) -> torch.nn.Module:
    """The random-weight network of `name`, created on the current default device and dtype."""
    if name == "janus-pro-7b":
        from transformers import JanusForConditionalGeneration
        return JanusForConditionalGeneration(janus_config(tiny)).eval()
    if name == "lumina-mgpt-7b-768":
        from transformers import ChameleonForConditionalGeneration
        return ChameleonForConditionalGeneration(lumina_config(tiny)).eval()
    if name == "cosmos-1-ar-4b":
        from scd_core.models.cosmos import CosmosTransformer
        return CosmosTransformer(cosmos_config(tiny)).eval()
    raise ValueError(f"--models: unknown model {name!r}; expected some of {', '.join(MODELS)}")


@dataclass
class Bench:
    """A full-size (or tiny) model behind its adapter, ready to start prefilled sessions."""
    name: str
    model: object                          # the TokenModel
    start: Callable[[], object]            # -> a prefilled Session
    rows: int                              # forward rows per prompt (2 with a CFG row)
    prompt_tokens: int                     # prompt (prefix) length of the conditional row
    settings: dict                         # the engine's sampling settings (the model's defaults)
    init: str                              # the engine's draft init
    params: int
    build_s: float = 0.0
    hf_generate: Callable[[], torch.Tensor] | None = None   # transformers' own generate of one image


def prompt_ids(n: int, low: int, high: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, (n,), generator=g).tolist()


def janus_bench(tiny: bool, device: torch.device, prompt_tokens: int) -> Bench:
    from scd_core.models.janus import JanusTokenModel

    ids = JANUS_IDS[tiny]
    body = prompt_ids(max(prompt_tokens - 2, 1), *ids["text"])
    net = build_network("janus-pro-7b", tiny)
    tm = JanusTokenModel(net, encode=lambda _prompt: [ids["bos"], *body, ids["boi"]], bos_token_id=ids["bos"],
                         boi_token_id=ids["boi"], pad_token_id=ids["pad"], name="janus-pro-7b")
    cfg = tm.default_settings["cfg_scale"]

    def hf_generate() -> torch.Tensor:
        """One image by transformers' JanusForConditionalGeneration.generate (image mode)."""
        from transformers import GenerationConfig
        config = GenerationConfig(do_sample=True, guidance_scale=cfg, bos_token_id=ids["bos"], pad_token_id=ids["pad"],
                                  top_k=tm.default_settings.get("top_k") or None, max_new_tokens=1)
        config.generation_kwargs = {"boi_token_id": ids["boi"]}
        prompt = torch.tensor([[ids["bos"], *body, ids["boi"]]], device=device)
        return net.generate(prompt, attention_mask=torch.ones_like(prompt), generation_mode="image",
                            generation_config=config)

    return Bench("janus-pro-7b", tm, lambda: tm.start(["a timing prompt"], cfg), 2, len(body) + 2,
                 engine_settings(tm), "random", count_params(net), hf_generate=hf_generate)


def lumina_bench(tiny: bool, device: torch.device, prompt_tokens: int) -> Bench:
    from scd_core.models.lumina import LuminaLayout, LuminaTokenModel

    layout = LuminaLayout(**LUMINA_TINY_LAYOUT) if tiny else LuminaLayout()
    grid = (16, 16) if tiny else (48, 48)                          # 768 px / 16
    text_ids = (20, 60) if tiny else (8900, 65536)                  # above the image-code ids
    body = prompt_ids(max(prompt_tokens - 5, 1), *text_ids)         # + bos, sep and a 3-token header
    net = build_network("lumina-mgpt-7b-768", tiny)
    tm = LuminaTokenModel(net, lambda _text: list(body), grid, layout=layout, prompt_template="{prompt}")
    cfg = tm.default_settings["cfg_scale"]
    return Bench("lumina-mgpt-7b-768", tm, lambda: tm.start(["a timing prompt"], cfg), 2, len(body) + 5,
                 engine_settings(tm), "random", count_params(net, PARAM_SKIP["lumina-mgpt-7b-768"]))


def cosmos_bench(tiny: bool, device: torch.device, prompt_tokens: int) -> Bench:
    from scd_core.models.cosmos import CosmosVideoModel, random_model

    cfg = cosmos_config(tiny)
    net = random_model(cfg, device=device, dtype=torch.get_default_dtype())
    tm = CosmosVideoModel(net, tokenizer=None, name="cosmos-1-ar-4b", device=device, dtype=torch.get_default_dtype())
    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, cfg.vocab_size, (1, cfg.prefix_len), generator=g)
    return Bench("cosmos-1-ar-4b", tm, lambda: tm.start_tokens(prefix), 1, cfg.prefix_len,
                 engine_settings(tm), tm.default_settings.get("init", "random"), count_params(net))


BUILDERS = {"janus-pro-7b": janus_bench, "lumina-mgpt-7b-768": lumina_bench, "cosmos-1-ar-4b": cosmos_bench}


def engine_settings(tm) -> dict:
    """The model's published sampling settings for the engine (CFG is inside the adapter)."""
    defaults = optional(tm, "default_settings", {})
    out = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    out.update({k: v for k, v in defaults.items() if k in out})
    return out


def build_bench(name: str, tiny: bool, device: torch.device, dtype: torch.dtype, prompt_tokens: int) -> Bench:
    t0 = time.perf_counter()
    with default_dtype(dtype), torch.device(device):
        bench = BUILDERS[name](tiny, device, prompt_tokens)
    sync(device)
    bench.build_s = time.perf_counter() - t0
    return bench


# ------------------------------------------------------------------------------------ timing

def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_tokens(vocab: int, width: int, device: torch.device, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, width), generator=g).to(device)


def fill_context(session, vocab: int, n_fill: int, chunk: int, device: torch.device) -> None:
    """Feed generated positions 0..n_fill-1 in chunks, as a run half-way through would hold."""
    for start in range(0, n_fill, chunk):
        width = min(chunk, n_fill - start)
        session.step(random_tokens(vocab, width, device, seed=start), torch.tensor([start]))


def time_steps(session, vocab: int, window: int, start: int, device: torch.device, warmup: int,
               repeats: int) -> list[float]:
    """Milliseconds of `repeats` synchronised `Session.step` calls of width `window` at `start`."""
    tokens = random_tokens(vocab, window, device, seed=1000 + window)
    at = torch.tensor([start])
    with torch.no_grad():
        for _ in range(warmup):
            session.step(tokens, at)
        sync(device)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            session.step(tokens, at)
            sync(device)
            times.append(1e3 * (time.perf_counter() - t0))
    return times


def time_forwards(bench: Bench, windows: Sequence[int], context: float, warmup: int, repeats: int,
                  device: torch.device) -> tuple[dict[int, list[float]], int, float]:
    """Per window L the step times in ms; also the context fed and the prefill's seconds."""
    n = math.prod(bench.model.grid)
    vocab = int(bench.model.vocab_size)
    t0 = time.perf_counter()
    with torch.no_grad():
        session = bench.start()
        sync(device)
        prefill_s = time.perf_counter() - t0
        if max(windows) >= n:
            raise ValueError(f"--windows: L = {max(windows)} does not fit the grid of {n} positions")
        n_fill = max(1, min(int(context * n), n - max(windows)))
        fill_context(session, vocab, n_fill, chunk=256, device=device)
        times = {L: time_steps(session, vocab, L, min(n_fill, n - L), device, warmup, repeats) for L in windows}
    del session
    return times, n_fill, prefill_s


def engine_grid(grid: Sequence[int], max_tokens: int) -> tuple[int, ...]:
    """The grid cut to about `max_tokens` positions: whole rows (images) or frames of rows (video)."""
    grid = tuple(int(g) for g in grid)
    if len(grid) == 2:
        h, w = grid
        return (max(1, min(h, max_tokens // w)), w)
    t, h, w = grid
    frames = min(t, 2)                                   # two frames: repeat-frame copies happen
    return (frames, max(1, min(h, max_tokens // (frames * w))), w)


def time_engine(vocab: int, grid: Sequence[int], method: str, window: int, settings: dict, init: str,
                device: torch.device, batch: int = 1) -> float:
    """Engine milliseconds per iteration (outside Session.step) of one run on random logits."""
    model = RandomLogitsModel(vocab_size=vocab, grid=tuple(grid), device=device)
    run = scd_core.generate(model, ["timing"] * batch, method=method, window=window, seed=0,
                            init=init if method != "ar" else "random", cfg_scale=1.0, **settings)
    return 1e3 * run.engine_time / run.nfe


def time_engines(bench: Bench, windows: Sequence[int], methods: Sequence[str], max_tokens: int,
                 device: torch.device) -> tuple[dict[int, dict[str, float]], tuple[int, ...]]:
    """{L: {method: engine ms per iteration}}: AR at L = 1, every method at L > 1."""
    vocab = int(bench.model.vocab_size)
    grid = engine_grid(bench.model.grid, max(max_tokens, 2 * max(windows)))
    for method in ("ar", *methods):                      # warm-up: kernels, allocator, generator
        time_engine(vocab, grid, method, 1 if method == "ar" else max(2, min(windows[-1], 8)),
                    bench.settings, bench.init, device)
    out: dict[int, dict[str, float]] = {}
    for L in windows:
        cases = ["ar"] if L == 1 else list(methods)
        out[L] = {m: time_engine(vocab, grid, m, L, bench.settings, bench.init, device) for m in cases}
    return out, grid


IMAGE_METHODS = ("ar", "sjd", "scd-mc", "scd-gumbel")
IMAGE_MODELS = ("janus-pro-7b", "lumina-mgpt-7b-768")        # a text prompt each (Cosmos continues a clip)


@dataclass
class Image:
    """One image decoded from a prompt, timed from the call to the tokens on the host."""
    model: str
    how: str                               # "ar", "sjd", "scd-mc", "scd-gumbel" or "transformers"
    compiled: bool
    window: int
    nfe: int
    seconds: float
    engine_share: float | None = None      # the engine's share of the run's wall time (None: not measurable)
    compile_s: float | None = None         # the first, compiling run's extra seconds

    @property
    def ms_per_pass(self) -> float:
        return 1e3 * self.seconds / self.nfe


def time_image(bench: Bench, method: str, compiled: bool, device: torch.device) -> Image:
    """One image of `bench`'s prompt by `scd_core.generate` at the model's own settings."""
    from scd_core.settings import Settings

    settings = Settings.for_model(bench.model, method=method, compile=compiled)
    decode = lambda: scd_core.generate(bench.model, ["a timing prompt"], seed=0, settings=settings)  # noqa: E731
    compile_s = None
    if compiled:                            # the compile, apart: a server pays it once per setting
        sync(device)
        t0 = time.perf_counter()
        decode()
        sync(device)
        compile_s = time.perf_counter() - t0
    sync(device)
    t0 = time.perf_counter()
    run = decode()
    sync(device)
    seconds = time.perf_counter() - t0
    if compile_s is not None:
        compile_s -= seconds
    # compiled, the model's step runs inside the pass's graph and counts as the model's: the
    # engine's share cannot be told apart ("-"), not 0
    share = None if compiled else run.engine_time / run.wall_time
    return Image(bench.name, method, compiled, 1 if method == "ar" else settings.window, run.nfe, seconds,
                 share, compile_s)


def time_hf_image(bench: Bench, device: torch.device) -> Image:
    """One image by transformers' own `generate` (one pass per token, as our AR), after a warm-up."""
    n = math.prod(bench.model.grid)
    with torch.no_grad():
        bench.hf_generate()                 # warm-up: kernels, the static cache's first allocation
        sync(device)
        t0 = time.perf_counter()
        tokens = bench.hf_generate()
        sync(device)
    assert tokens.shape[-1] == n, f"transformers generated {tokens.shape[-1]} tokens, the grid has {n}"
    return Image(bench.name, "transformers", False, 1, n, time.perf_counter() - t0)     # its first pass is the prefill


def time_images(bench: Bench, methods: Sequence[str], compile_methods: Sequence[str],
                device: torch.device) -> list[Image]:
    """Transformers' generate (where the model has one here), then each method eager and, for
    `compile_methods`, compiled."""
    images = [time_hf_image(bench, device)] if bench.hf_generate is not None else []
    for method in methods:
        images.append(time_image(bench, method, False, device))
        if method in compile_methods:
            images.append(time_image(bench, method, True, device))
    return images


def images_markdown(images: list[Image]) -> str:
    lines = ["| model | how | L | NFE | s per image | ms per pass | engine share | compile s |",
             "|---|---|---|---|---|---|---|---|"]
    for im in images:
        how = f"{im.how} compiled" if im.compiled else im.how
        share = "-" if im.engine_share is None else f"{100 * im.engine_share:.1f}%"
        comp = "-" if im.compile_s is None else f"{im.compile_s:.1f}"
        lines.append(f"| {im.model} | {how} | {im.window} | {im.nfe} | {im.seconds:.2f} | {im.ms_per_pass:.2f} | "
                     f"{share} | {comp} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ report

@dataclass
class Row:
    model: str
    L: int
    forward_ms: float
    forward_ratio: float                   # forward(L) / forward(1)
    forward_ms_runs: list[float]
    engine_ms: dict[str, float] = field(default_factory=dict)
    engine_share: dict[str, float] = field(default_factory=dict)   # engine ms / forward ms
    break_even: dict[str, float] = field(default_factory=dict)
    # tokens per forward a method must commit to beat AR in latency:
    # (forward(L) + engine(L)) / (forward(1) + engine_ar(1))


def make_rows(name: str, times: dict[int, list[float]], engine: dict[int, dict[str, float]]) -> list[Row]:
    median = {L: statistics.median(ts) for L, ts in times.items()}
    base = median.get(1)
    ar_iter = base + engine.get(1, {}).get("ar", 0.0) if base is not None else None
    rows = []
    for L in sorted(times):
        ms = median[L]
        eng = engine.get(L, {})
        row = Row(name, L, ms, ms / base if base else float("nan"), list(times[L]), dict(eng),
                  {m: e / ms for m, e in eng.items()})
        if ar_iter and L > 1:
            row.break_even = {m: (ms + e) / ar_iter for m, e in eng.items()}
        rows.append(row)
    return rows


def markdown(rows: list[Row], methods: Sequence[str]) -> str:
    cases = ["ar", *methods]
    header = (["model", "L", "forward ms", "fwd(L)/fwd(1)"] + [f"engine ms/iter {m}" for m in cases]
              + [f"engine share {m}" for m in cases])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    fmt = lambda d, m, f: f(d[m]) if m in d else "-"  # noqa: E731
    for r in rows:
        cells = [r.model, str(r.L), f"{r.forward_ms:.2f}", f"{r.forward_ratio:.2f}"]
        cells += [fmt(r.engine_ms, m, lambda v: f"{v:.2f}") for m in cases]
        cells += [fmt(r.engine_share, m, lambda v: f"{100 * v:.1f}%") for m in cases]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def environment(device: torch.device, dtype: torch.dtype, tiny: bool) -> dict:
    import transformers

    env = {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
           "device": str(device), "dtype": str(dtype).replace("torch.", ""), "tiny": tiny}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    if _version(transformers.__version__) < TESTED_TRANSFORMERS:
        env["warning"] = (f"transformers {transformers.__version__} is older than the "
                          f"{'.'.join(map(str, TESTED_TRANSFORMERS))} the adapters are tested with "
                          "(Lumina's forward fails on 5.17); carry the newer wheel, see this script's docstring")
        print(f"warning: {env['warning']}", file=sys.stderr)
    return env


TESTED_TRANSFORMERS = (5, 24)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def write_json(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2))
    tmp.replace(path)


# ------------------------------------------------------------------------------------ main

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="scd-gpu-timing", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--windows", default=None,
                    help="comma-separated L (default: 1,16,32,64; Cosmos 1,32,64,128); 1 is added if missing")
    ap.add_argument("--methods", default=",".join(METHODS), help="engine methods timed at L > 1")
    ap.add_argument("--repeats", type=int, default=10, help="timed forwards per L (median reported)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed forwards per L first")
    ap.add_argument("--context", type=float, default=0.5,
                    help="fraction of the grid fed before timing (0.5: the mean context of a run)")
    ap.add_argument("--prompt-tokens", type=int, default=64, help="prompt length of Janus / Lumina")
    ap.add_argument("--engine-tokens", type=int, default=576, help="grid positions of the engine runs")
    ap.add_argument("--images", default=",".join(IMAGE_METHODS),
                    help="methods timed per image from the prompt (Janus-Pro, Lumina-mGPT); empty: none")
    ap.add_argument("--compile-methods", default=None,
                    help="of those, the methods also timed compiled (default: all on CUDA, none elsewhere)")
    ap.add_argument("--tiny", action="store_true", help="tiny configs of the same classes (CPU plumbing check)")
    ap.add_argument("--device", default=None, help="cuda (default) or, with --tiny, cpu")
    ap.add_argument("--dtype", default=None, help="bfloat16 (default on CUDA) / float32 (default on CPU) / float16")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads when running on CPU (default 1)")
    ap.add_argument("--out", type=Path, default=None,
                    help="JSON path (default: $OUT/gpu_timing.json if $OUT is set, else bench_out/gpu_timing.json)")
    return ap.parse_args(argv)


def resolve_device(args: argparse.Namespace) -> tuple[torch.device, torch.dtype]:
    """CUDA + bf16 for the full-size models; --tiny may run on CPU in float32."""
    wanted = args.device or ("cuda" if torch.cuda.is_available() or not args.tiny else "cpu")
    device = torch.device(wanted)
    if device.type == "cuda" and not torch.cuda.is_available():
        hint = "" if args.tiny else " The full-size models need one (~15 GB each in bf16); --tiny checks the plumbing on CPU."
        raise RuntimeError(f"no CUDA GPU is available here (device {wanted!r}).{hint}")
    if device.type != "cuda" and not args.tiny:
        raise RuntimeError(f"the full-size models run on a CUDA GPU only, not on {wanted!r}; "
                           "use --tiny for a CPU check of the plumbing")
    from scd_core.models.checkpoints import pick_device_dtype

    try:
        return pick_device_dtype(device, args.dtype)
    except ValueError as exc:
        raise RuntimeError(str(exc).replace("dtype:", "--dtype:")) from None


def parse_list(text: str, name: str, allowed: Sequence[str]) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in allowed]
    if bad or not items:
        raise ValueError(f"{name}: expected some of {', '.join(allowed)}, got {text!r}")
    return items


def windows_for(name: str, text: str | None) -> list[int]:
    if text is None:
        return list(DEFAULT_WINDOWS[name])
    try:
        windows = sorted({int(w) for w in text.split(",") if w.strip()} | {1})
    except ValueError:
        raise ValueError(f"--windows: expected comma-separated integers, got {text!r}") from None
    if windows[0] < 1:
        raise ValueError(f"--windows: every L must be >= 1, got {text!r}")
    return windows


def default_out() -> Path:
    return Path(os.environ["OUT"]) / "gpu_timing.json" if os.environ.get("OUT") else Path("bench_out/gpu_timing.json")


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def log(msg: str, t0: float) -> None:
    print(f"[{time.perf_counter() - t0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def run_model(name: str, args: argparse.Namespace, methods: list[str], device: torch.device,
              dtype: torch.dtype, t0: float) -> tuple[dict, list[Row]]:
    windows = windows_for(name, args.windows)
    bench = build_bench(name, args.tiny, device, dtype, args.prompt_tokens)
    log(f"{name}: built in {bench.build_s:.1f}s, {bench.params / 1e9:.3f}e9 params, V {bench.model.vocab_size}, "
        f"grid {tuple(bench.model.grid)}", t0)
    times, n_fill, prefill_s = time_forwards(bench, windows, args.context, args.warmup, args.repeats, device)
    log(f"{name}: forwards timed " + ", ".join(f"L={L} {statistics.median(t):.2f}ms" for L, t in times.items()), t0)
    engine, grid = time_engines(bench, windows, methods, args.engine_tokens, device)
    log(f"{name}: engine timed on grid {grid}", t0)
    images = time_images(bench, args.image_methods, args.compiled_methods, device) \
        if name in IMAGE_MODELS and args.image_methods else []
    for im in images:
        log(f"{name}: one image by {im.how}{' compiled' if im.compiled else ''}: {im.seconds:.2f}s, NFE {im.nfe}", t0)
    info = {"params": bench.params, "published_params": PUBLISHED_PARAMS[name], "vocab_size": int(bench.model.vocab_size),
            "grid": list(bench.model.grid), "forward_rows": bench.rows, "prompt_tokens": bench.prompt_tokens,
            "context_tokens": n_fill, "prefill_s": prefill_s, "build_s": bench.build_s, "windows": windows,
            "engine_grid": list(grid), "engine_settings": bench.settings, "engine_init": bench.init,
            "peak_gpu_gb": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None}
    info["images"] = [dict(vars(im), ms_per_pass=im.ms_per_pass) for im in images]
    del bench
    return info, make_rows(name, times, engine)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        models = parse_list(args.models, "--models", MODELS)
        methods = parse_list(args.methods, "--methods", METHODS)
        args.image_methods = parse_list(args.images, "--images", IMAGE_METHODS) if args.images.strip() else []
        device_kind = args.device or ("cuda" if torch.cuda.is_available() or not args.tiny else "cpu")
        default_compiled = ",".join(args.image_methods) if device_kind.startswith("cuda") else ""
        compiled_text = default_compiled if args.compile_methods is None else args.compile_methods
        args.compiled_methods = parse_list(compiled_text, "--compile-methods", args.image_methods) \
            if compiled_text.strip() else []
        for name in models:
            windows_for(name, args.windows)
        if args.repeats < 1 or args.warmup < 0 or not 0 <= args.context < 1:
            raise ValueError("--repeats must be >= 1, --warmup >= 0 and --context in [0, 1)")
        device, dtype = resolve_device(args)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if device.type == "cpu" and args.threads:
        torch.set_num_threads(args.threads)
    out = args.out or default_out()
    t0 = time.perf_counter()
    report = {"environment": environment(device, dtype, args.tiny), "args": {k: str(v) for k, v in vars(args).items()},
              "models": {}, "rows": []}
    rows: list[Row] = []
    for name in models:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        try:
            info, model_rows = run_model(name, args, methods, device, dtype, t0)
        except Exception as exc:            # keep going: GPU time is scarce, the next model may work
            traceback.print_exc()
            info, model_rows = {"error": f"{type(exc).__name__}: {exc}"}, []
            log(f"{name}: FAILED ({info['error']})", t0)
        free(device)
        rows += model_rows
        report["models"][name] = info
        report["rows"] = [vars(r) for r in rows]
        report["total_s"] = time.perf_counter() - t0
        write_json(out, report)
    print(markdown(rows, methods))
    images = [Image(**{k: v for k, v in im.items() if k != "ms_per_pass"})
              for info in report["models"].values() for im in info.get("images", [])]
    if images:
        print("\n" + images_markdown(images))
    for name, info in report["models"].items():
        if "error" in info:
            print(f"\n{name}: FAILED: {info['error']}")
    print(f"\nJSON written to {out}", file=sys.stderr)
    return 1 if any("error" in info for info in report["models"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
