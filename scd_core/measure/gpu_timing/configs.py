"""What is timed: the published configs of the full-size models, built with random weights on
the device, and each driven through the library's own adapter (`Bench`)."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from scd_core.protocols import optional


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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
