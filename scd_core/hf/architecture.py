"""Which transformers models the loop decodes exactly, and why the others are refused.

The session (`causal.CausalSession`) feeds windows into a KV cache of fixed size with an
explicit 4-D causal mask, and forgets a rejected draft by masking its slot. That is the
model's own attention only where attention is full causal and the cache holds keys and values
alone. So a `ValueError` names:

- an attention implementation other than eager or sdpa (flash attention reads a 4-D mask as a
  2-D padding mask; flex attention is untested);
- layers that keep a recurrent state (Mamba, Jamba, RWKV, linear attention, ...): a state
  cannot be taken back to before a rejected draft;
- attention limited to a window or a chunk (`sliding_window`, `attention_chunk_size`, layer
  types other than full attention) when the run is longer than the window: within it, that
  attention is full causal attention, and the loop gives the model's own tokens.
"""
from __future__ import annotations

FULL = "full_attention"
IMPLEMENTATIONS = ("eager", "sdpa")
LIMITED = {"sliding_attention": "sliding_window", "chunked_attention": "attention_chunk_size"}


def check_architecture(model) -> None:
    """Refuse, by name, a model whose attention or layers the session cannot run exactly
    whatever the length of the run."""
    name = type(model).__name__
    configs = [model.config, model.config.get_text_config()]
    for config in configs:
        impl = getattr(config, "_attn_implementation", None)
        if impl is not None and impl not in IMPLEMENTATIONS:
            raise ValueError(f"attn_implementation: {name} runs {impl!r}; SCD's cache passes a 4-D causal mask "
                             f"that only {' and '.join(IMPLEMENTATIONS)} attention read as such: load the model "
                             "with attn_implementation='sdpa'")
    if getattr(model, "_is_stateful", False):
        raise ValueError(f"model: {name} has recurrent or state-space layers, whose state cannot be taken back to "
                         "before a rejected draft; SCD decodes models whose layers keep keys and values only")
    for kind in sorted(_layer_types(configs[1]) or ()):
        if kind != FULL and kind not in LIMITED:
            raise ValueError(f"model: {name} has {kind!r} layers; SCD decodes models whose layers are full "
                             "(or, within their window, sliding or chunked) attention")


def attention_span(model) -> tuple[str, int] | None:
    """The model's attention limit: (the config's setting, its size) when some layers see only
    a window or a chunk of the sequence; None when every layer attends to all of it."""
    text = model.config.get_text_config()
    kinds = _layer_types(text)
    limits = []
    for kind, setting in LIMITED.items():
        size = getattr(text, setting, None)
        if size is None:
            continue
        if kinds is None or kind in kinds:                  # no layer types (Mistral, Phi-3): every layer
            limits.append((setting, int(size)))
    return min(limits, key=lambda limit: limit[1]) if limits else None


def check_span(model, longest: int) -> None:
    """Refuse a run whose longest sequence (prompt, padding included, then the generated
    tokens it feeds) is longer than a window or chunk of the model's attention: there
    attention is not full causal."""
    span = attention_span(model)
    if span is not None and longest > span[1]:
        setting, size = span
        raise ValueError(f"model: {type(model).__name__} limits attention to {setting}={size} tokens and this run "
                         f"feeds {longest} (the prompt, then max_new_tokens - 1); SCD's cache attends to the whole "
                         f"sequence: shorten the run to {size} tokens, or use a model with full attention")


def _layer_types(config) -> set[str] | None:
    types = getattr(config, "layer_types", None)
    return None if types is None else set(types)
