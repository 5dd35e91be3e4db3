"""Checkpoints at their published sizes with random weights, written in their repositories' file
layouts: sharded safetensors with their index, or the .pt files an adapter reads; config,
tokenizer and processor files (small stand-ins where the real ones are not needed). The
real-size drill, the switching drill and the page's memory measurement write their models here.

`WRITERS[name](root, scale, budget)` writes the repositories of the registry's model `name`
under `root` ("full": the published sizes, its repeated layers cut to fit `budget` bytes of
bfloat16 weights; "ci": a small config of the same classes in the same layout).
"""
from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

GB = 1e9
SHARD_BYTES = 5 * 10**9              # transformers' default shard size, as the Hub repositories use
SCALES = ("full", "ci")


def meta_state(build: Callable[[], object]) -> dict[str, tuple[tuple[int, ...], object]]:
    """name -> (shape, dtype or None) of what a module's checkpoint holds: its parameters (a
    tied one once, under its first name) and persistent buffers, from the module built on the
    meta device; floating tensors take the dtype the file is written in (None)."""
    import torch

    with torch.device("meta"):
        module = build()
    params = dict(module.named_parameters())            # a shared parameter under its first name only
    shared = {id(p) for p in params.values()}
    return {key: (tuple(t.shape), None if t.is_floating_point() else t.dtype)   # None: the file's dtype
            for key, t in module.state_dict().items() if key in params or id(t) not in shared}


def fill_random(t, name: str, generator):
    """Random weights of a plausible scale, in place: biases 0, norms' weights and other
    vectors 1, the rest N(0, 0.02)."""
    if not t.dtype.is_floating_point or name.endswith("bias"):
        return t.zero_()
    if t.ndim <= 1 or "norm" in name.split(".")[-2]:
        return t.fill_(1.0)
    return t.normal_(0.0, 0.02, generator=generator)


def write_safetensors(folder: Path, state: dict, dtype, seed: int = 0, rename=None,
                      shard_bytes: int = SHARD_BYTES) -> int:
    """Random tensors of `state` (name -> (shape, file dtype or None: `dtype`)) as
    transformers shards them: model.safetensors, or model-0000i-of-0000n.safetensors and
    model.safetensors.index.json. Each shard is made and written alone. Returns file bytes."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(seed)
    sizes = {k: math.prod(s) * (d or dtype).itemsize for k, (s, d) in state.items()}
    shards, current, held = [], [], 0
    for key in state:
        if current and held + sizes[key] > shard_bytes:
            shards.append(current)
            current, held = [], 0
        current.append(key)
        held += sizes[key]
    shards.append(current)
    names = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    folder.mkdir(parents=True, exist_ok=True)
    for keys, fname in zip(shards, names):
        tensors = {k: fill_random(torch.empty(state[k][0], dtype=state[k][1] or dtype), k, g) for k in keys}
        if rename:
            tensors = rename(tensors)
        save_file(tensors, str(folder / fname), metadata={"format": "pt"})
        del tensors
    if len(shards) > 1:
        index = {"metadata": {"total_size": sum(sizes.values())},
                 "weight_map": {k: fname for keys, fname in zip(shards, names) for k in keys}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return sum((folder / n).stat().st_size for n in names)


def write_torch(path: Path, state: dict, dtype, wrap: Callable[[dict], object], seed: int = 0) -> int:
    """Random tensors of `state` saved with torch.save(wrap(tensors)), each tensor backed by a
    scratch file mapped into memory (page cache, not the process's own memory), so a file
    larger than the free memory can be written. Returns file bytes."""
    import torch

    g = torch.Generator().manual_seed(seed)
    scratch = path.parent / (path.name + ".scratch")
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        tensors = {}
        for i, (key, (shape, file_dtype)) in enumerate(state.items()):
            n, dt = math.prod(shape), file_dtype or dtype
            backing = torch.from_file(str(scratch / f"{i}.bin"), shared=True, size=n, dtype=dt)
            tensors[key] = fill_random(backing.view(shape), key, g)
        torch.save(wrap(tensors), path)
        del tensors
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return path.stat().st_size


@dataclass
class Written:
    repos: dict[str, Path]               # repository id -> its folder
    params: int                          # weight elements the model loads from the files
    weight_bytes: int                    # those weights at the dtype the adapter uses them in
    file_bytes: int
    layers: str                          # "24" or "16 of 30": the repeated layers written
    note: str = ""
    not_in_files: int = 0                # elements of the model the files do not hold as it needs them



def fit_layers(full: int, params_of: Callable[[int], int], budget: float | None) -> int:
    """The most layers (at most `full`) whose bfloat16 weights fit in `budget` bytes."""
    if budget is None or 2 * params_of(full) <= budget:
        return full
    layers = full
    while layers > 1 and 2 * params_of(layers) > budget:
        layers -= 1
    return layers


def count(state: dict) -> int:
    return sum(math.prod(s) for s, _ in state.values())


def layers_text(used: int, full: int) -> str:
    return str(full) if used == full else f"{used} of {full}"


# ---------------------------------------------------------------------------- transformers families

def save_config_and(folder: Path, config, processor=None, generation=None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)
    if generation is not None:
        generation.save_pretrained(folder)
    if processor is not None:
        processor.save_pretrained(folder)


def janus_config(size: str, layers: int | None = None):
    """deepseek-community/Janus-Pro-1B and -7B (transformers' Janus port): the 7B config is
    gpu_timing's; the 1B is DeepSeek-LLM-1.5B (24 layers, hidden 2048, 16 heads, intermediate
    5632) with SigLIP-L, the VQ-16 and 2048-wide aligners (transformers' JanusConfig defaults)."""
    from scd_core.measure import gpu_timing
    from transformers import JanusConfig, JanusVisionConfig, JanusVQVAEConfig, LlamaConfig

    if size == "ci":
        config = gpu_timing.janus_config(tiny=True)
    elif size == "7b":
        config = gpu_timing.janus_config(tiny=False)
    else:
        text = LlamaConfig(vocab_size=102400, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                           num_attention_heads=16, num_key_value_heads=16, head_dim=128,
                           max_position_embeddings=16384, rms_norm_eps=1e-6, bos_token_id=100000,
                           eos_token_id=100001, pad_token_id=100002)
        config = JanusConfig(text_config=text, vision_config=JanusVisionConfig(), vq_config=JanusVQVAEConfig(),
                             image_token_id=100581, tie_word_embeddings=False)
    if layers is not None:
        config.text_config.num_hidden_layers = layers
    return config


def write_janus(size: str) -> Callable[[Path, str, float | None], Written]:
    repo = {"1b": "deepseek-community/Janus-Pro-1B", "7b": "deepseek-community/Janus-Pro-7B"}[size]

    def write(root: Path, scale: str, budget: float | None, dtype=None) -> Written:
        """`dtype`: the weights' dtype in the files (bfloat16, as published)."""
        import test_models_janus as tj
        from transformers import GenerationConfig, JanusForConditionalGeneration

        variant = "ci" if scale == "ci" else size
        full = janus_config(variant).text_config.num_hidden_layers
        state_of = lambda n: meta_state(lambda: JanusForConditionalGeneration(janus_config(variant, n)))  # noqa: E731
        layers = fit_layers(full, lambda n: count(state_of(n)), budget)
        state = state_of(layers)
        folder = root / repo
        generation = GenerationConfig(bos_token_id=tj.BOS, pad_token_id=tj.PAD, eos_token_id=tj.EOS,
                                      generation_kwargs={"boi_token_id": tj.BOI})
        save_config_and(folder, janus_config(variant, layers), tj.tiny_processor(), generation)
        size_bytes = write_safetensors(folder, state, dtype or _bf16())
        return Written({repo: folder}, count(state), 2 * count(state), size_bytes, layers_text(layers, full),
                       "tokenizer: a word-level stand-in")
    return write


def emu3_vocabulary(codes: int) -> dict[str, int]:
    """Emu3-Gen's special tokens and visual tokens 0..codes-1 (at 151854.. in Emu3-Gen-hf)."""
    base = 151854 if codes == 32768 else 100
    vocab = {"<|endoftext|>": 151643 if codes == 32768 else 0, "<|extra_203|>": 151849 if codes == 32768 else 1,
             "<|extra_204|>": 151850 if codes == 32768 else 2, "<|image start|>": 151852 if codes == 32768 else 3,
             "<|image end|>": 151853 if codes == 32768 else 4, "<|image token|>": 151851 if codes == 32768 else 5,
             "<|extra_200|>": 151846 if codes == 32768 else 6, "<|extra_201|>": 151847 if codes == 32768 else 7,
             "<image>": 151848 if codes == 32768 else 8}
    vocab.update({f"<|visual token{i:06d}|>": base + i for i in range(codes)})
    return vocab


def emu3_config(scale: str, layers: int | None = None):
    """BAAI/Emu3-Gen-hf: transformers' Emu3Config defaults are Emu3-Gen's (8B: 32 layers, hidden
    4096, 8 KV heads, vocabulary 184,622; the 32,768-code VQ-VAE)."""
    import test_models_emu3 as te
    from transformers import Emu3Config, Emu3TextConfig, Emu3VQVAEConfig

    if scale == "ci":
        model = te.tiny_emu3()
        config = model.config
    else:
        vocab = emu3_vocabulary(32768)
        config = Emu3Config(text_config=Emu3TextConfig(pad_token_id=vocab["<|endoftext|>"],
                                                       bos_token_id=vocab["<|extra_203|>"],
                                                       eos_token_id=vocab["<|extra_204|>"]),
                            vq_config=Emu3VQVAEConfig(), vocabulary_map=vocab)
    if layers is not None:
        config.text_config.num_hidden_layers = layers
    return config


def emu3_processor(scale: str):
    """An Emu3Processor: the tests' word-level tokenizer, or at full size one that knows Emu3-Gen's
    special and visual tokens at their ids and the 90*90 header of a 720x720 image."""
    import test_models_emu3 as te
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import Emu3ImageProcessor, Emu3Processor, PreTrainedTokenizerFast

    if scale == "ci":
        return te.tiny_processor()
    vocab = emu3_vocabulary(32768)
    vocab.update({"[UNK]": 9, "90*90": 1000})
    vocab.update({f"w{i}": 2000 + i for i in range(50)})
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<|extra_203|>", eos_token="<|extra_204|>", pad_token="<|endoftext|>",
        unk_token="[UNK]",
        extra_special_tokens={"image_token": "<image>", "boi_token": "<|image start|>", "eoi_token": "<|image end|>",
                              "image_wrapper_token": "<|image token|>", "eof_token": "<|extra_201|>"})
    return Emu3Processor(Emu3ImageProcessor(image_mean=[0.5] * 3, image_std=[0.5] * 3), tok)


def write_emu3(root: Path, scale: str, budget: float | None) -> Written:
    from transformers import Emu3ForConditionalGeneration

    repo = "BAAI/Emu3-Gen-hf"
    full = emu3_config(scale).text_config.num_hidden_layers
    state_of = lambda n: meta_state(lambda: Emu3ForConditionalGeneration(emu3_config(scale, n)))  # noqa: E731
    layers = fit_layers(full, lambda n: count(state_of(n)), budget)
    state = state_of(layers)
    folder = root / repo
    save_config_and(folder, emu3_config(scale, layers), emu3_processor(scale))
    size_bytes = write_safetensors(folder, state, _bf16())
    return Written({repo: folder}, count(state), 2 * count(state), size_bytes, layers_text(layers, full),
                   "tokenizer: a word-level stand-in")


def lumina_config(scale: str, layers: int | None = None):
    from scd_core.measure import gpu_timing

    config = gpu_timing.lumina_config(tiny=scale == "ci")
    if layers is not None:
        config.num_hidden_layers = layers
    return config


def write_lumina(root: Path, scale: str, budget: float | None) -> Written:
    """Alpha-VLLM/Lumina-mGPT-7B-768: Chameleon-7B's weights without the VQ model (Lumina's
    training deletes it), q/k norms stored per model-parallel shard (1 x head_dim), and a
    tokenizer; Meta's VQGAN is not on the Hub (no decoding here)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import ChameleonForConditionalGeneration, PreTrainedTokenizerFast

    repo = "Alpha-VLLM/Lumina-mGPT-7B-768"
    full = lumina_config(scale).num_hidden_layers

    def state_of(n: int) -> dict:
        state = meta_state(lambda: ChameleonForConditionalGeneration(lumina_config(scale, n)))
        state = {k: v for k, v in state.items() if not k.startswith("model.vqmodel.")}
        return {k: (((1, s[-1]) if "_norm." in k and "self_attn" in k else s), d) for k, (s, d) in state.items()}

    layers = fit_layers(full, lambda n: count(state_of(n)), budget)
    state = state_of(layers)
    model_state = meta_state(lambda: ChameleonForConditionalGeneration(lumina_config(scale, layers)))
    absent = sum(math.prod(s) for k, (s, _) in model_state.items() if k not in state or state[k][0] != s)
    folder = root / repo
    config = lumina_config(scale, layers)
    config.save_pretrained(folder)
    vocab = 96 if scale == "ci" else 65536
    tok = Tokenizer(WordLevel({f"w{i}": i for i in range(min(vocab, 4096))}, unk_token="w1"))
    tok.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="w0").save_pretrained(folder)
    size_bytes = write_safetensors(folder, state, _bf16())
    return Written({repo: folder}, count(state), 2 * count(state), size_bytes, layers_text(layers, full),
                   "tokenizer: a word-level stand-in; no VQGAN (Meta's licence, not on the Hub)", absent)


# ---------------------------------------------------------------------------- LlamaGen

LLAMAGEN = {   # drill -> (repository, GPT file, size name, VQ file)
    "llamagen-c2i-b": ("FoundationVision/LlamaGen", "c2i_B_256.pt", "GPT-B", "vq_ds16_c2i.pt"),
    "llamagen-c2i-l": ("FoundationVision/LlamaGen", "c2i_L_384.pt", "GPT-L", "vq_ds16_c2i.pt"),
    "llamagen-c2i-xxl": ("FoundationVision/LlamaGen", "c2i_XXL_384.pt", "GPT-XXL", "vq_ds16_c2i.pt"),
    "llamagen-t2i-xl": ("peizesun/llamagen_t2i", "t2i_XL_stage2_512.pt", "GPT-XL", "vq_ds16_t2i.pt"),
}


def llamagen_gpt_config(drill: str, scale: str, layers: int | None = None):
    """The published GPT sizes (`llamagen.GPT_SIZES`), the resolution of the file name."""
    from scd_core.models import llamagen as lg

    _, fname, size, _ = LLAMAGEN[drill]
    kind = "t2i" if fname.startswith("t2i") else "c2i"
    n_layer, n_head, dim = (2, 4, 64) if scale == "ci" else lg.GPT_SIZES[size]
    grid = lg.files._size_from_filename(fname) // 16
    if layers is not None:
        n_layer = layers
    extra = dict(cls_token_num=120, caption_dim=2048 if scale == "full" else 32) if kind == "t2i" else {}
    return lg.GPTConfig(dim=dim, n_layer=n_layer, n_head=n_head, model_type=kind,
                        vocab_size=16384 if scale == "full" else 64, block_size=grid * grid,
                        num_classes=1000 if scale == "full" else 10, **extra)


def llamagen_vq(scale: str) -> dict:
    return {} if scale == "full" else dict(codebook_size=64, codebook_embed_dim=8, ch=32, ch_mult=(1, 2),
                                           num_res_blocks=1, z_channels=32)


def write_llamagen(drill: str) -> Callable[[Path, str, float | None], Written]:
    def write(root: Path, scale: str, budget: float | None) -> Written:
        import argparse as ap

        import torch
        from scd_core.models import llamagen as lg

        repo, fname, size, vq_name = LLAMAGEN[drill]
        full = llamagen_gpt_config(drill, scale).n_layer
        state_of = lambda n: meta_state(lambda: lg.Transformer(llamagen_gpt_config(drill, scale, n)))  # noqa: E731
        layers = fit_layers(full, lambda n: count(state_of(n)), budget)
        gpt = state_of(layers)
        vq = meta_state(lambda: lg.VQModel(**llamagen_vq(scale)))
        folder = root / repo
        folder.mkdir(parents=True, exist_ok=True)
        args = ap.Namespace(gpt_model=size, image_size=lg.files._size_from_filename(fname))
        # As published: float32 state dicts under "model", with the training step and arguments.
        size_bytes = write_torch(folder / fname, gpt, torch.float32, lambda sd: {"model": sd, "steps": 0, "args": args})
        size_bytes += write_torch(folder / vq_name, vq, torch.float32, lambda sd: {"model": sd}, seed=1)
        # the GPT in bfloat16, the VQ decoder in float32 (as LlamaGen samples)
        repos, params, weights = {repo: folder}, count(gpt) + count(vq), 2 * count(gpt) + 4 * count(vq)
        note = "float32 files, as published; the VQ decoder kept in float32"
        if fname.startswith("t2i"):
            t5_folder, t5_params, t5_bytes = write_t5(root, scale)
            repos[lg.T5_REPO] = t5_folder
            params, weights, size_bytes = params + t5_params, weights + 2 * t5_params, size_bytes + t5_bytes
            note += "; FLAN-T5-XL's encoder read from its float32 files"
        return Written(repos, params, weights, size_bytes, layers_text(layers, full), note)
    return write


def t5_config(scale: str):
    """google/flan-t5-xl: d_model 2048, d_ff 5120, 24+24 layers, 32 heads of 64, gated GELU."""
    from transformers import T5Config

    if scale == "ci":
        return T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                        feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    return T5Config(vocab_size=32128, d_model=2048, d_kv=64, d_ff=5120, num_layers=24, num_decoder_layers=24,
                    num_heads=32, feed_forward_proj="gated-gelu", tie_word_embeddings=False)


def write_t5(root: Path, scale: str) -> tuple[Path, int, int]:
    """FLAN-T5-XL's repository: the whole encoder-decoder in float32 safetensors (as published),
    of which LlamaGen loads the encoder; a word-level stand-in tokenizer."""
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast, T5EncoderModel, T5ForConditionalGeneration

    from scd_core.models import llamagen as lg

    folder = root / lg.T5_REPO
    config = t5_config(scale)
    config.save_pretrained(folder)
    tok = Tokenizer(WordLevel({"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"w{i}": 3 + i for i in range(100)}},
                              unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(folder)
    state = meta_state(lambda: T5ForConditionalGeneration(config))
    encoder = count(meta_state(lambda: T5EncoderModel(config)))
    return folder, encoder, write_safetensors(folder, state, torch.float32)


# ---------------------------------------------------------------------------- Cosmos

def cosmos_config(scale: str, layers: int | None = None):
    from dataclasses import replace

    import test_models_cosmos as tc
    from scd_core.models import cosmos

    config = tc.TINY if scale == "ci" else cosmos.full_size_config("cosmos-1-ar-4b")
    return config if layers is None else replace(config, n_layers=layers)


def write_cosmos(root: Path, scale: str, budget: float | None) -> Written:
    """nvidia/Cosmos-1.0-Autoregressive-4B's model.pt (bfloat16, NVIDIA's names under "model.",
    TransformerEngine's _extra_state entries) and config.json; the DV8x16x16 tokenizer's
    encoder.jit/decoder.jit (small TorchScript stand-ins with the published FSQ levels)."""
    import torch
    import test_models_cosmos as tc
    from scd_core.models import cosmos

    repo, tok_repo = cosmos.HUB_IDS["cosmos-1-ar-4b"], cosmos.TOKENIZER_HUB_ID
    full = cosmos_config(scale).n_layers
    state_of = lambda n: meta_state(lambda: cosmos.CosmosTransformer(cosmos_config(scale, n)))  # noqa: E731
    layers = fit_layers(full, lambda n: count(state_of(n)), budget)
    state = state_of(layers)
    folder = root / repo
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["CosmosAR"], "n_layers": layers}))

    def published(sd: dict) -> dict:
        out = {"model." + k: v for k, v in sd.items()}
        out["model.layers.0.attention._extra_state"] = None
        return {"model": out}

    size_bytes = write_torch(folder / "model.pt", state, torch.bfloat16, published)
    levels = tc.LEVELS if scale == "ci" else list(cosmos.tokenizer.FSQ_LEVELS)
    tc.save_tokenizer(root / tok_repo, levels)
    return Written({repo: folder, tok_repo: root / tok_repo}, count(state), 2 * count(state), size_bytes,
                   layers_text(layers, full), "tokenizer: TorchScript stand-ins")


def _bf16():
    import torch

    return torch.bfloat16



WRITERS = {"janus-pro-1b": write_janus("1b"), "janus-pro-7b": write_janus("7b"), "lumina-mgpt-7b-768": write_lumina,
           "emu3-gen": write_emu3, "cosmos-1-ar-4b": write_cosmos,
           **{name: write_llamagen(name) for name in LLAMAGEN}}
