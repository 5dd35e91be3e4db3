"""`load_cosmos`: a published checkpoint, the DV tokenizer (and T5-11B for Video2World) ->
a CosmosVideoModel."""
from __future__ import annotations

import math
import os

import torch

from ..checkpoints import as_dtype, pick_device_dtype, pretrained_converted
from ..hub import ProgressFn, fetch
from . import tokenizer as dv
from .adapter import CosmosVideoModel
from .checkpoint import load_network
from .config import NUM_INPUT_FRAMES, CosmosConfig
from .files import HUB_FILES, HUB_IDS, T5_FILES, TOKENIZER_FILES, find_checkpoint, find_tokenizer


def levels_for(vocab_size: int) -> tuple[int, ...]:
    """FSQ levels of the tokenizer matching a vocabulary (the DV levels for 64,000)."""
    if vocab_size == math.prod(dv.FSQ_LEVELS):
        return dv.FSQ_LEVELS
    for levels in ((3, 4, 5), (4, 4, 4), (2, 3, 5)):        # small ones used by the tests
        if math.prod(levels) == vocab_size:
            return levels
    raise ValueError(f"config: no FSQ levels known for a vocabulary of {vocab_size}")


def load_t5(path: str | None, device: torch.device, dtype: torch.dtype = torch.float32, *,
            local_files_only: bool = False, progress: ProgressFn | None = None):
    """transformers' T5 tokenizer + T5EncoderModel from a folder, or google-t5/t5-11b from the
    Hub (downloaded on first use).

    NVIDIA runs T5-11B in float32 (about 44 GB); pass t5_dtype=torch.bfloat16 or
    t5_device="cpu" to load_cosmos on a smaller GPU (embeddings then differ slightly). The
    encoder's tensors are read into `dtype` a chunk at a time (`checkpoints.pretrained_converted`);
    the decoder's are never read."""
    from transformers import AutoTokenizer, T5EncoderModel
    source = path or fetch(T5_FILES, local_files_only=local_files_only, progress=progress,
                           needed_by="Cosmos Video2World")
    try:
        tok = AutoTokenizer.from_pretrained(source, local_files_only=True)
        enc = pretrained_converted(T5EncoderModel, source, device, dtype)     # the encoder's tensors only
    except (OSError, ValueError) as exc:
        raise FileNotFoundError(f"t5_path: no T5 text encoder in {source!r} ({exc})") from exc
    return tok, enc


def load_cosmos(name_or_path: str, device: str | torch.device | None = None,
                dtype: str | torch.dtype | None = None, tokenizer_path: str | None = None,
                t5_path: str | None = None, load_text_encoder: bool = True,
                config: CosmosConfig | None = None, t5_device: str | torch.device | None = None,
                t5_dtype: str | torch.dtype = torch.float32, num_input_frames: int = NUM_INPUT_FRAMES, *,
                local_files_only: bool = False, progress: ProgressFn | None = None,
                trust_pickle=None) -> CosmosVideoModel:
    """Load a Cosmos-1 AR model: a registry name, a folder holding model.pt, or the file.

    A registry name is looked up in $SCD_COSMOS_CHECKPOINTS (NVIDIA's layout:
    <dir>/Cosmos-1.0-Autoregressive-4B/model.pt beside <dir>/Cosmos-1.0-Tokenizer-DV8x16x16/),
    then the Hugging Face cache, and downloaded from NVIDIA's repositories on first use (their
    licence must be accepted on the Hub first). The variant (base / Video2World) is read from
    the weights. The DV tokenizer comes from `tokenizer_path`, beside the checkpoint, the cache
    or the Hub. `config` supplies what the tensors do not tell (latent shape, heads, RoPE
    theta); the default is the published layout (640x1024 -> 5x40x64). `num_input_frames`
    (9, or 1 for images) is the conditioning length (see `CosmosVideoModel.with_input_frames`).
    """
    if not isinstance(name_or_path, str) or not name_or_path:
        raise ValueError(f"name_or_path: expected a model name or path, got {name_or_path!r}")
    device, dtype = pick_device_dtype(device, dtype)         # None / "auto": CUDA + bfloat16 where a GPU is
    t5_dtype = as_dtype(t5_dtype)
    hub = {"local_files_only": local_files_only, "progress": progress}
    ckpt = find_checkpoint(name_or_path)
    if ckpt is None and name_or_path in HUB_FILES:
        ckpt = os.path.join(fetch(HUB_FILES[name_or_path], needed_by=name_or_path, **hub), "model.pt")
    if ckpt is None:
        raise FileNotFoundError(f"name_or_path: Cosmos checkpoint not found for {name_or_path!r}: pass a folder "
                                f"holding model.pt, or a registry name ({', '.join(HUB_FILES)})")
    tok_dir = find_tokenizer(ckpt, tokenizer_path)
    if tok_dir is None and tokenizer_path is None:
        tok_dir = fetch(TOKENIZER_FILES, needed_by=name_or_path, **hub)
    if tok_dir is None:
        raise FileNotFoundError(f"tokenizer_path: Cosmos DV tokenizer (encoder.jit, decoder.jit) not found "
                                f"in {tokenizer_path!r}")
    net = load_network(ckpt, config, device=device, dtype=dtype, trust_pickle=trust_pickle)
    tokenizer = dv.DVTokenizer.load(tok_dir, device=device, dtype=dtype, levels=levels_for(net.cfg.vocab_size))
    text = None
    if net.cfg.cross_attention and load_text_encoder:
        t5_device = device if t5_device is None else pick_device_dtype(t5_device)[0]    # "auto" as for `device`
        text = load_t5(t5_path, t5_device, t5_dtype, **hub)
    name = name_or_path if name_or_path in HUB_IDS else os.path.basename(os.path.normpath(name_or_path))
    return CosmosVideoModel(net, tokenizer, text, name=name, device=device, dtype=dtype,
                            num_input_frames=num_input_frames)
