"""Real sizes, real files, measured: each family's published checkpoint at full size with
random weights, written in its repository's file layout, served by the fake Hub
(tests/fakehub.py), downloaded and loaded by `scd_core.load_model(..., dtype=torch.bfloat16)`
on the CPU in a fresh process, then a Generate of a few passes.

    python scripts/real_size_drill.py                           # every drill, one at a time
    python scripts/real_size_drill.py --drills janus-pro-1b,llamagen-c2i-xxl
    python scripts/real_size_drill.py --scale ci --drills llamagen-c2i-b     # the small configs CI runs

Each drill writes its repositories (sharded safetensors with their index, or the .pt files an
adapter reads; config, tokenizer and processor files) under --work, serves them from disk,
and runs the loading process, which:
- watches the load (installed before torch's first user is imported): elements written by a
  `torch.nn.init` function into a real (non-meta) tensor, and float32 parameter bytes placed
  in a module on a real device, against those the loaded model keeps;
- reads its resident memory before loading (after the imports), its peak (VmHWM) after the
  load and after the passes, and the peak of its anonymous memory (sampled every 20 ms):
  the rest of the peak is pages of mapped files;
- times the download (first, from the fake Hub), then `load_model` from the cache, then the
  prefill and the passes of `scd_core.stream` (scd-mc, the model's default settings).
Then the files and the download cache are deleted, and the same drill runs on its small
config: its peak over its RSS before loading is what any load pays (library code paged in,
allocator state), the table's "small" column.

A model that does not fit this machine (its bfloat16 weights over --budget-gb, by default
(what /proc/meminfo says is available - --keep-free-gb - 1.5 GB) / 1.25) is written with
the largest number of its repeated layers that fits, and the table says so. The table
(markdown, for docs/models.md) is printed and the results go to --out as JSON, rewritten
after each drill. `--scale ci` builds small configs of the same classes in the same layouts
(tests/test_real_size_drill.py runs them).
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "tests", ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

GB = 1e9
SHARD_BYTES = 5 * 10**9              # transformers' default shard size, as the Hub repositories use
SCALES = ("full", "ci")


# ============================================================================ the loading process

class LoadWatch:
    """What a load does besides reading files: `torch.nn.init` calls on real tensors, and the
    float32 parameters put into modules on a real device. Installed before transformers is
    imported (it keeps its own references to the init functions)."""

    INIT = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
            "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_",
            "sparse_")

    def __init__(self) -> None:
        self.init_elements = 0           # elements written by init functions into real tensors
        self.fp32_param_bytes = 0        # float32 parameter bytes placed in modules on a real device
        self.active = False

    def install(self) -> None:
        import torch

        depth = [0]

        def counting(fn):
            def wrapped(tensor, *args, **kwargs):
                depth[0] += 1
                try:
                    if self.active and depth[0] == 1 and not tensor.is_meta:
                        self.init_elements += tensor.numel()
                    return fn(tensor, *args, **kwargs)
                finally:
                    depth[0] -= 1
            return wrapped

        for name in self.INIT:
            setattr(torch.nn.init, name, counting(getattr(torch.nn.init, name)))
        register = torch.nn.Module.register_parameter

        def register_parameter(module, name, param):
            if self.active and param is not None and not param.is_meta and param.dtype == torch.float32:
                self.fp32_param_bytes += param.nbytes
            return register(module, name, param)

        torch.nn.Module.register_parameter = register_parameter


def _status_kb(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise KeyError(field_name)


class AnonPeak(threading.Thread):
    """The peak of this process's anonymous resident memory (RssAnon), sampled."""

    def __init__(self, every: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.every, self.peak_kb, self.done = every, 0, threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.peak_kb = max(self.peak_kb, _status_kb("RssAnon"))
            time.sleep(self.every)

    def stop(self) -> int:
        self.done.set()
        self.join()
        return max(self.peak_kb, _status_kb("RssAnon")) * 1024


def loaded_tensors() -> dict[str, int]:
    """Bytes per dtype of the parameters and buffers of every live module (each storage once)."""
    import gc

    import torch

    seen, out = set(), {}
    with warnings.catch_warnings():        # isinstance on some lazily deprecated torch objects warns
        warnings.simplefilter("ignore")
        modules = [obj for obj in gc.get_objects() if isinstance(obj, torch.nn.Module)]
    for obj in modules:
        for t in [*obj.parameters(recurse=False), *obj.buffers(recurse=False)]:
            if t is None or t.is_meta:
                continue
            key = (t.untyped_storage().data_ptr(), t.dtype)
            if key not in seen:
                seen.add(key)
                out[str(t.dtype).removeprefix("torch.")] = out.get(str(t.dtype).removeprefix("torch."), 0) + t.nbytes
    return out


def child(spec: dict) -> dict:
    """Load one drill's model as a user would and run a few passes; runs in a fresh process."""
    watch = LoadWatch()
    watch.install()
    import torch

    torch.set_num_threads(spec["threads"])
    import scd_core
    import transformers  # noqa: F401  (imported before the baseline: an import is not the load)
    from huggingface_hub import snapshot_download
    from scd_core.models.hub import fetch

    out: dict = {}
    name, folder = spec["model"], ""
    t0 = time.perf_counter()                     # the download first: the load then reads the cache
    if name.startswith("hub:"):                  # a checkpoint without a registry name: its repository
        name = folder = snapshot_download(name[len("hub:"):])
    else:
        for files in importlib.import_module(f"scd_core.models.{spec['family']}").hub_files(name):
            fetch(files)
    out["download_s"] = time.perf_counter() - t0
    importlib.import_module(f"scd_core.models.{spec['family']}")   # the adapter's code is not its weights
    kwargs = load_kwargs(spec["kwargs"], folder)
    before = _status_kb("VmRSS") * 1024
    anon = AnonPeak()
    anon.start()
    watch.active = True
    t0 = time.perf_counter()
    model = scd_core.load_model(name, device="cpu", dtype=torch.bfloat16, **kwargs)
    out["load_s"] = time.perf_counter() - t0
    watch.active = False
    out.update(rss_before=before, peak_load=_status_kb("VmHWM") * 1024, anon_peak_load=anon.stop(),
               init_elements=watch.init_elements, fp32_param_bytes=watch.fp32_param_bytes,
               tensors=loaded_tensors())
    settings = scd_core.Settings.for_model(model, method="scd-mc")
    passes, t0 = [], time.perf_counter()
    for record in scd_core.stream(model, [spec["prompt"]], seed=0, settings=settings):
        passes.append(time.perf_counter() - t0)
        if len(passes) > spec["passes"]:
            break
        t0 = time.perf_counter()
    out.update(prefill_s=passes[0], pass_s=passes[1:], committed=int(record.n_after[0]), window=settings.window,
               peak_total=_status_kb("VmHWM") * 1024)
    return out


def load_kwargs(given: dict, folder: str) -> dict:
    """A drill's load_model keywords: "{folder}" is the downloaded snapshot; "ci" marks what a
    small config needs besides its files (Lumina's special ids, Cosmos' latent layout)."""
    out = {}
    for key, value in given.items():
        if key == "layout" and value == "ci":
            from scd_core.measure import gpu_timing
            from scd_core.models.lumina import LuminaLayout
            value = LuminaLayout(**gpu_timing.LUMINA_TINY_LAYOUT)
        elif key == "config" and value == "ci":
            value = cosmos_config("ci")
        elif isinstance(value, str):
            value = value.replace("{folder}", folder)
        out[key] = value
    return out


# ============================================================================ writing the files

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


@dataclass
class Drill:
    name: str
    what: str                            # the published checkpoint
    write: Callable[[Path, str, float | None], Written]     # (root, scale, budget bytes) -> files
    model: str                           # registry name, or "hub:<repo>": that snapshot's folder
    family: str                          # its module under scd_core.models
    kwargs: dict = field(default_factory=dict)   # for load_model; "{folder}" is the snapshot's folder
    ci_kwargs: dict = field(default_factory=dict)  # added at --scale ci (what a small config's tensors do not tell)
    prompt: str | Callable[[Path], str] = "w1 w2 w3"


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

    def write(root: Path, scale: str, budget: float | None) -> Written:
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
        size_bytes = write_safetensors(folder, state, _bf16())
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


def cosmos_clip(work: Path) -> str:
    import test_models_cosmos as tc

    return tc.write_clip(work / "clip.mp4")


# ---------------------------------------------------------------------------- the drills

def _bf16():
    import torch

    return torch.bfloat16


LLAMAGEN_CI = {"n_head": 4}            # a 64-wide test GPT: no published size tells its heads
DRILLS = {d.name: d for d in [
    Drill("janus-pro-1b", "deepseek-community/Janus-Pro-1B", write_janus("1b"), "janus-pro-1b", "janus"),
    Drill("janus-pro-7b", "deepseek-community/Janus-Pro-7B", write_janus("7b"), "janus-pro-7b", "janus"),
    Drill("lumina-mgpt-7b-768", "Alpha-VLLM/Lumina-mGPT-7B-768", write_lumina, "lumina-mgpt-7b-768", "lumina",
          ci_kwargs={"layout": "ci"}),
    Drill("emu3-gen", "BAAI/Emu3-Gen-hf", write_emu3, "emu3-gen", "emu3", ci_kwargs={"image_area": 768, "ratio": "4:3"}),
    Drill("llamagen-c2i-b", "FoundationVision/LlamaGen c2i_B_256.pt", write_llamagen("llamagen-c2i-b"),
          "llamagen-c2i", "llamagen", ci_kwargs=LLAMAGEN_CI, prompt="7"),
    Drill("llamagen-c2i-l", "FoundationVision/LlamaGen c2i_L_384.pt", write_llamagen("llamagen-c2i-l"),
          "hub:FoundationVision/LlamaGen", "llamagen", kwargs={"gpt_ckpt": "{folder}/c2i_L_384.pt"}, ci_kwargs=LLAMAGEN_CI,
          prompt="7"),
    Drill("llamagen-c2i-xxl", "FoundationVision/LlamaGen c2i_XXL_384.pt", write_llamagen("llamagen-c2i-xxl"),
          "hub:FoundationVision/LlamaGen", "llamagen", kwargs={"gpt_ckpt": "{folder}/c2i_XXL_384.pt"}, ci_kwargs=LLAMAGEN_CI,
          prompt="7"),
    Drill("llamagen-t2i-xl", "peizesun/llamagen_t2i t2i_XL_stage2_512.pt + google/flan-t5-xl",
          write_llamagen("llamagen-t2i-xl"), "llamagen-t2i", "llamagen", ci_kwargs=LLAMAGEN_CI),
    Drill("cosmos-1-ar-4b", "nvidia/Cosmos-1.0-Autoregressive-4B", write_cosmos, "cosmos-1-ar-4b", "cosmos",
          ci_kwargs={"config": "ci"}, prompt=cosmos_clip),
]}


# ============================================================================ running the drills

def available_bytes() -> int:
    with open("/proc/meminfo") as f:
        info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
    return info["MemAvailable"]


def run_drill(drill: Drill, scale: str, work: Path, budget: float | None, threads: int, passes: int,
              timeout: float) -> dict:
    """Write a drill's files, serve them, load and run them in a fresh process; delete the files."""
    from fakehub import FakeHub, client_env

    root = work / drill.name
    shutil.rmtree(root, ignore_errors=True)
    result = {"drill": drill.name, "checkpoint": drill.what, "scale": scale}
    try:
        t0 = time.perf_counter()
        written = drill.write(root / "repos", scale, budget)
        prompt = drill.prompt(root) if callable(drill.prompt) else drill.prompt
        result.update(layers=written.layers, params=written.params, weight_bytes=written.weight_bytes,
                      file_bytes=written.file_bytes, note=written.note, not_in_files=written.not_in_files,
                      write_s=time.perf_counter() - t0)
        spec = {"model": drill.model, "family": drill.family, "kwargs": {**drill.kwargs, **(drill.ci_kwargs if scale == "ci" else {})},
                "prompt": prompt, "threads": threads, "passes": passes}
        with FakeHub() as hub:
            for repo, folder in written.repos.items():
                hub.add_folder(repo, folder, on_disk=True)
            env = client_env(hub, root / "home", OMP_NUM_THREADS=str(threads))
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
                                  env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=timeout)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"the loading process failed ({proc.returncode}): {proc.stderr[-3000:]}")
        result.update(json.loads(lines[-1][len("RESULT "):]))
        if scale == "full":        # what the same load and passes cost with (almost) no weights
            small = run_drill(drill, "ci", work, None, threads, 1, timeout)
            result["fixed_bytes"] = small["peak_total"] - small["rss_before"]
    except Exception as exc:                     # recorded; the next drill runs
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return result


def table(results: list[dict]) -> str:
    """The markdown table of docs/models.md. Ratios: (peak RSS - RSS before loading) / the
    weights as used; "small": the same drill's small config, its peak - before (library code
    paged in and allocator state, which any load pays)."""
    lines = ["| model | layers | files GB | weights GB | load s | RSS before GB | peak after load GB | ratio after load | "
             "peak after passes GB | ratio after passes | small GB | peak anon GB | prefill s | pass s | window | "
             "random init | float32 params GB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['drill']} | failed: {r['error'][:200]} |" + " |" * 15)
            continue
        w, before = r["weight_bytes"], r["rss_before"]
        small = r.get("fixed_bytes")
        pass_s = sorted(r["pass_s"])[len(r["pass_s"]) // 2] if r["pass_s"] else float("nan")
        lines.append(
            f"| {r['drill']} | {r['layers']} | {r['file_bytes'] / GB:.2f} | {w / GB:.2f} | {r['load_s']:.1f} | "
            f"{before / GB:.2f} | {r['peak_load'] / GB:.2f} | {(r['peak_load'] - before) / w:.2f} | "
            f"{r['peak_total'] / GB:.2f} | {(r['peak_total'] - before) / w:.2f} | "
            f"{'' if small is None else f'{small / GB:.2f}'} | {r['anon_peak_load'] / GB:.2f} | {r['prefill_s']:.1f} | "
            f"{pass_s:.2f} | {r['window']} | {r['init_elements']:,} | {r['fp32_param_bytes'] / GB:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--drills", default=",".join(DRILLS), help=f"some of {', '.join(DRILLS)}")
    parser.add_argument("--scale", choices=SCALES, default="full")
    parser.add_argument("--work", default=os.environ.get("TMPDIR", "/tmp") + "/real_size_drill",
                        help="where the files are written (deleted after each drill)")
    parser.add_argument("--out", default="bench_out/real_size.json")
    parser.add_argument("--keep-free-gb", type=float, default=6.0, help="memory left to others")
    parser.add_argument("--budget-gb", type=float, default=None,
                        help="bfloat16 weights at most (default: from the available memory)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--passes", type=int, default=3, help="passes after the prefill")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--table", metavar="JSON", help="print the table of an earlier run's --out file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    names = [n.strip() for n in args.drills.split(",") if n.strip()]
    unknown = [n for n in names if n not in DRILLS]
    if unknown:
        parser.error(f"--drills: unknown {', '.join(unknown)}; known: {', '.join(DRILLS)}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        budget = args.budget_gb * GB if args.budget_gb else \
            (available_bytes() - args.keep_free_gb * GB - 1.5 * GB) / 1.25
        if args.scale == "ci":
            budget = None
        print(f"{name}: budget {budget / GB:.1f} GB of bfloat16 weights" if budget else name, flush=True)
        results.append(run_drill(DRILLS[name], args.scale, Path(args.work), budget, args.threads, args.passes,
                                 args.timeout))
        print(json.dumps(results[-1]), flush=True)
        out.write_text(json.dumps(results, indent=1))
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
