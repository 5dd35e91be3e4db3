"""Published Cosmos-1 AR checkpoints -> our state dict and configuration, strictly loaded."""
from __future__ import annotations

from dataclasses import replace

import torch

from ..checkpoints import load_on_meta, state_opener
from ..hub import read_checkpoint as read_file
from .config import CosmosConfig
from .network import CosmosTransformer


def map_checkpoint(state: dict) -> dict[str, torch.Tensor]:
    """Published checkpoint -> our state dict: unwrap {'model': ...}, strip 'model.', drop
    TransformerEngine '_extra_state' entries, split a fused 'wqkv' into wq/wk/wv."""
    if "model" in state and isinstance(state["model"], dict):
        state = state["model"]
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.endswith("_extra_state") or not isinstance(value, torch.Tensor):
            continue
        out[key[len("model."):] if key.startswith("model.") else key] = value
    return out


def split_fused_qkv(state: dict[str, torch.Tensor], cfg: CosmosConfig) -> dict[str, torch.Tensor]:
    q_size, kv_size = cfg.n_heads * cfg.hd, cfg.n_kv_heads * cfg.hd
    for key in [k for k in state if k.endswith("wqkv.weight")]:
        wq, wk, wv = state.pop(key).split([q_size, kv_size, kv_size])
        base = key[: -len("wqkv.weight")]
        state.update({base + "wq.weight": wq, base + "wk.weight": wk, base + "wv.weight": wv})
    return state


def config_from_state(state: dict[str, torch.Tensor], base: CosmosConfig) -> CosmosConfig:
    """Read the sizes that differ between variants from the tensors themselves."""
    n_embed, dim = state["tok_embeddings.weight"].shape
    n_layers = 1 + max(int(k.split(".")[1]) for k in state if k.startswith("layers."))
    cross = any(".cross_attention." in k for k in state)
    return replace(base, dim=dim, n_layers=n_layers, vocab_size=state["output.weight"].shape[0],
                   embed_vocab_size=n_embed if n_embed != state["output.weight"].shape[0] else None,
                   ffn_hidden_size=state["layers.0.feed_forward.w1.weight"].shape[0],
                   use_qk_normalization="layers.0.attention.q_norm.weight" in state,
                   cross_attention=cross, abs_pos_emb=cross or base.abs_pos_emb, bov=cross or base.bov,
                   context_dim=(state["layers.0.cross_attention.wk.weight"].shape[1] if cross else base.context_dim))


def read_checkpoint(path: str, trust_pickle=None) -> dict:
    """Map a checkpoint file (a tensor is read when first used) without unrestricted pickle
    (safetensors or weights_only), unless `trust_pickle` names this file (see
    `hub.read_checkpoint`)."""
    return read_file(path, trust_pickle=trust_pickle, mmap=True, what="checkpoint")


def load_network(path: str, cfg: CosmosConfig | None = None, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, trust_pickle=None) -> CosmosTransformer:
    """Build the network of a checkpoint file on the meta device and give it the file's
    tensors in `dtype` on `device`, a chunk of the file at a time, strictly
    (`checkpoints.load_on_meta`): no random initialisation, no second copy of the weights."""
    mapped = state_opener(path, lambda p: map_checkpoint(read_checkpoint(p, trust_pickle)))
    cfg = config_from_state(mapped(), cfg or CosmosConfig())       # from the tensors' shapes
    return load_on_meta(lambda: CosmosTransformer(cfg), lambda: split_fused_qkv(dict(mapped()), cfg),
                        lambda net, state: net.load_state_dict(state, strict=True, assign=True),
                        device=torch.device(device), dtype=dtype, what="checkpoint")
