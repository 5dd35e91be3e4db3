"""Tiny transformers models for the `scd_core.hf` tests, built offline with random weights large
enough that the logits depend on the context (greedy runs that vary)."""
from __future__ import annotations

import torch


def spread(module: torch.nn.Module, std: float, seed: int = 0) -> None:
    """Random weights of `std` for every matrix of `module`."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def tiny_llama(vocab_size: int = 50, std: float = 0.3, seed: int = 0, **config):
    """A LlamaForCausalLM of two small layers, no special tokens unless given."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    values = dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, bos_token_id=None, eos_token_id=None,
                  pad_token_id=None)
    values.update(config)
    model = LlamaForCausalLM(LlamaConfig(**values)).eval()
    spread(model, std, seed)
    return model


def tiny_causal(config_class: str, model_class: str, std: float = 0.3, seed: int = 0, **config):
    """A tiny random model of any transformers causal LM class (by name), two small layers."""
    import transformers

    torch.manual_seed(seed)
    values = dict(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    values.update(config)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**values)).eval()
    spread(model, std, seed)
    return model
