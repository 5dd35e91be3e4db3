# Built by hub/vendor.py from scd_core/hf/__init__.py: edit the library, then rebuild.
"""SCD inside transformers' own `generate`: a `custom_generate` callable.

    out = model.generate(input_ids, custom_generate=scd_core.hf.generate, method="scd-mc", window=16,
                         max_new_tokens=..., do_sample=True, top_k=..., guidance_scale=...,
                         negative_prompt_ids=..., prefix_allowed_tokens_fn=...)

transformers prepares everything as for its own loop (generation config, logits processors,
stopping criteria, left-padded inputs) and calls `generate` here for the loop itself, which
decodes with the engine (AR, SJD, SCD-MC, SCD-Gumbel) on any decoder-only model whose attention
it can run exactly (`architecture`): the session (`causal.CausalSession`) runs the model's own
forward and head on a KV cache of fixed size; `reading` says how transformers' processors
become the one processed p per position, and which are refused. Janus-Pro's image mode runs
through its adapter (`generation_mode="image"`, `_janus_image_model`). `hub_generate` is the
same as a Hub repository's `custom_generate/generate.py` (`hub/scd/`): it takes `generate`'s
arguments as given, streamer and assistant included.

Importing this module imports no transformers; docs/transformers.md has the usage.
"""
from __future__ import annotations

import dataclasses
import functools

import torch

from .chain import Plan
from .decoding import decode, validate_seeds
from .memory import check_rows
from .settings import Settings
from .trace import Run, step_compression

from .architecture import check_architecture, check_span
from .causal import CausalSession, SessionTokenModel, prompt_rows
from .reading import Reading, class_name, read_processors, read_stopping

MODEL_INPUTS = ("attention_mask", "position_ids", "logits_to_keep", "use_cache", "cache")
UNSUPPORTED_OUTPUTS = ("output_scores", "output_logits", "output_attentions", "output_hidden_states")
# transformers' assisted generation: its own speculative decoding, with a draft model or the prompt
ASSISTED = ("prompt_lookup_num_tokens", "assistant_early_exit")


def __getattr__(name: str):
    if name == "GenerateOutput":                   # a transformers class: imported with transformers, on use
        from .output import GenerateOutput
        return GenerateOutput
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@torch.no_grad()
def generate(model, input_ids: torch.LongTensor, logits_processor=None, stopping_criteria=None,
             generation_config=None, streamer=None, *, method: str = "scd-mc", window: int = 16,
             init: str = "random", seed: int | None = None, generation_mode: str = "text", **model_kwargs):
    """The decoding loop of `model.generate(..., custom_generate=scd_core.hf.generate)`.

    `method`, `window` and `init` as in `scd_core.generate`; `seed` keys each row's random
    streams (row b: seed + b; None: drawn from torch's global generator, so
    `torch.manual_seed` fixes a run). `generation_mode="image"` is Janus-Pro's image mode.
    transformers gives a callable neither `streamer` nor `assistant_model`: bind a streamer to
    the callable (`functools.partial(scd_core.hf.generate, streamer=...)`) or load `hub/scd`.
    Returns the sequences [B, P + T], or with `return_dict_in_generate` a `GenerateOutput`.
    """
    settings = Settings(method=method, window=window, init=init)        # checked first: a ValueError names it
    config = generation_config
    check_config(model, config)
    reading = read_processors(logits_processor, bool(config.do_sample))
    eos = read_stopping(stopping_criteria)                              # refuses what the loop cannot honour
    if generation_mode == "image":
        eos = []                                                        # the image grid sets the length
    pad = config.pad_token_id if config.pad_token_id is not None else (eos[0] if eos else None)
    check_model_inputs(model_kwargs, input_ids)
    mask = model_kwargs.get("attention_mask")
    B = input_ids.shape[0]
    if streamer is not None and B != 1:
        raise ValueError(f"streamer: streaming takes one row, got {B}")
    if generation_mode == "image":
        engine_model, keep_prompt = _janus_image_model(model, input_ids, mask, config, reading), False
    elif generation_mode == "text":
        N = int(config.max_length) - input_ids.shape[1]
        if N < 1:
            raise ValueError(f"max_new_tokens: must be at least 1, got max_length {config.max_length} for a "
                             f"prompt of {input_ids.shape[1]} tokens")
        session = _causal_session(model, input_ids, mask, reading, N, pad)
        engine_model, keep_prompt = SessionTokenModel(session, session.vocab_size, (1, N)), True
    else:
        raise ValueError(f"generation_mode: 'text' or 'image' (Janus-Pro), got {generation_mode!r}")

    settings = settings.replace(**reading.sampling)
    plan = Plan.of(settings, engine_model)
    if generation_mode == "text":                          # fresh drafts: tokens the processors allow
        plan = dataclasses.replace(plan, draft_vocab=session.allowed_at_start())
    check_rows(engine_model, B, plan.method, settings.window, settings.top_p)
    if seed is None:
        seed = int(torch.randint(0, 2**62, ()).item())
    seeds = validate_seeds(seed, B)
    records = run_passes(engine_model, input_ids, seeds, plan, eos, streamer)
    run = Run.from_iterations(records)
    generated = padded(run.tokens, finished(records[-1], eos)[1], pad)                # [B, T]
    sequences = torch.cat([input_ids, generated.to(input_ids.device)], 1) if keep_prompt else generated
    if not config.return_dict_in_generate:
        return sequences
    from .output import GenerateOutput
    return GenerateOutput(sequences=sequences, nfe=run.nfe, acceptance_rate=run.acceptance_rate,
                          step_compression=step_compression(generated.shape[1], run.nfe), run=run)


def run_passes(engine_model, input_ids: torch.LongTensor, seeds: list[int], plan: Plan, eos: list[int],
               streamer=None) -> list:
    """The engine's passes until every row has its tokens or its end-of-sequence token; the
    streamer hears the prompt, then each pass's committed tokens up to the row's end."""
    if streamer is not None:
        streamer.put(input_ids.cpu())
    records, streamed = [], 0
    for record in decode(engine_model, [""] * len(seeds), seeds, plan):
        records.append(record)
        done, ends = finished(record, eos)
        if streamer is not None and int(ends[0]) > streamed:
            streamer.put(record.tokens_after[:, streamed: int(ends[0])])
            streamed = int(ends[0])
        if done:
            break
    if streamer is not None:
        streamer.end()
    return records


def hub_generate(*args, model=None, streamer=None, assistant_model=None, **arguments):
    """`generate` as a Hub repository's `custom_generate/generate.py` is called: with
    `generate`'s own arguments (transformers prepares nothing for it), the model by keyword
    (`custom_generate="<repo>"`, or a model loaded from such a repository) or first. Runs
    transformers' preparation (`GenerationMixin.generate`) with `generate` above as the loop,
    the streamer bound to it."""
    from transformers import GenerationMixin

    if model is None:
        if not args:
            raise ValueError("model: pass the model first, or as model=")
        model, *args = args
    if assistant_model is not None:
        raise ValueError("assistant_model: SCD drafts without a draft model (its drafts are coupled samples "
                         "of the model itself); pass no assistant_model")
    loop = generate if streamer is None else functools.partial(generate, streamer=streamer)
    return GenerationMixin.generate(model, *args, custom_generate=loop, **arguments)


def check_config(model, config) -> None:
    """What transformers may ask that this loop does not do, and models whose attention or
    layers it cannot run exactly (`architecture`): a ValueError names it."""
    if model.config.is_encoder_decoder:
        raise ValueError("model: an encoder-decoder model; SCD decodes decoder-only models")
    check_architecture(model)
    if (config.num_beams or 1) > 1:
        raise ValueError(f"num_beams: SCD samples one sequence per row, got {config.num_beams}")
    for name in UNSUPPORTED_OUTPUTS:
        if getattr(config, name, False):
            raise ValueError(f"{name}: not returned by SCD (a pass scores a window of drafts, not one token); "
                             "return_dict_in_generate gives sequences, nfe and acceptance")
    for name in ASSISTED:
        if getattr(config, name, None) is not None:
            raise ValueError(f"{name}: that is transformers' assisted generation, another speculative decoder; "
                             "SCD drafts by itself: leave it unset")
    if config.use_cache is False:
        raise ValueError("use_cache: False asks for decoding without a cache; SCD keeps its own KV cache "
                         "(the same law): leave use_cache unset")
    if config.cache_implementation is not None:
        raise ValueError(f"cache_implementation: {config.cache_implementation!r}; SCD keeps its own KV cache of "
                         "fixed size: leave cache_implementation unset")


def check_model_inputs(model_kwargs: dict, input_ids: torch.LongTensor) -> None:
    """Model inputs beyond the prompt's ids and mask (images, embeddings, a filled cache,
    position ids of their own) are refused by name."""
    for name, value in model_kwargs.items():
        if value is None or (isinstance(value, dict) and not value):     # e.g. no image encoder outputs
            continue
        if name not in MODEL_INPUTS:
            raise ValueError(f"{name}: SCD decodes from input_ids and attention_mask alone; {name} is not supported")
        if name == "cache" and value.get_seq_length() > 0:
            raise ValueError("cache: SCD keeps its own cache; pass no filled cache")
    position_ids = model_kwargs.get("position_ids")
    if position_ids is not None:
        mask = model_kwargs.get("attention_mask")
        mask = torch.ones_like(input_ids) if mask is None else mask.to(input_ids.device)
        expected = mask.long().cumsum(-1) - 1                            # transformers' own, from the mask
        given = position_ids.to(input_ids.device)
        if given.shape[-1] != expected.shape[-1] or given.dim() != 2 or \
                not bool(torch.where(mask.bool(), given == expected, True).all()):
            raise ValueError("position_ids: SCD places each row's tokens at cumsum(attention_mask) - 1, as "
                             "transformers prepares them; pass no position_ids of your own")


def _causal_session(model, input_ids, mask, reading: Reading, N: int, pad: int | None) -> CausalSession:
    """The generic path: the prompts (and under guidance their unconditional rows)."""
    B = input_ids.shape[0]
    rows = prompt_rows(input_ids, mask, "attention_mask")
    longest = input_ids.shape[1]                         # transformers' sequences: padded prompts, then tokens
    if reading.guidance_scale is not None:
        if reading.negative_ids is None:                 # transformers' default: the prompt's last token
            rows += [r[-1:] for r in rows]
        else:
            neg = reading.negative_ids
            if neg.shape[0] != B:
                raise ValueError(f"negative_prompt_ids: expected {B} rows (one per prompt), got {neg.shape[0]}")
            if reading.negative_mask is not None and not bool(reading.negative_mask.bool().all()):
                raise ValueError("negative_prompt_attention_mask: padded negative prompts are not supported "
                                 "(transformers' guidance gives their padding positions); pass equal lengths")
            rows += neg.tolist()
            longest = max(longest, neg.shape[1])
    check_span(model, longest + N - 1)                   # the last generated token is never fed
    fill = pad if pad is not None else 0
    return CausalSession(model, input_ids, rows, B, N, reading.guidance_scale, reading.processors, fill)


def _janus_image_model(model, input_ids, mask, config, reading: Reading):
    """Janus-Pro's image mode (`JanusForConditionalGeneration.generate(generation_mode="image")`):
    its adapter (`scd_core.models.janus`), with transformers' special ids and guidance scale.
    Each prompt's ids reach the adapter through its `encode` (the prompt strings are row
    indices). Only guidance and the sampling warpers apply to image codes."""
    from .janus import JanusTokenModel

    if not hasattr(model, "prepare_embeddings_for_image_generation"):
        raise ValueError(f"generation_mode: 'image' is Janus-Pro's image mode; {type(model).__name__} has none")
    if reading.processors:
        raise ValueError(f"logits_processor: {class_name(reading.processors[0])} is refused in image mode "
                         "(only guidance, temperature, top-k and top-p apply to image codes)")
    if reading.negative_ids is not None:
        raise ValueError("negative_prompt_ids: Janus-Pro's image mode makes its own unconditional rows")
    rows = prompt_rows(input_ids, mask, "attention_mask")
    boi = (config.generation_kwargs or {}).get("boi_token_id")
    tm = JanusTokenModel(model, encode=lambda key: rows[int(key)], bos_token_id=config.bos_token_id,
                         boi_token_id=boi, pad_token_id=config.pad_token_id, name=type(model).__name__)
    scale = reading.guidance_scale                        # transformers' guidance processor, when > 1
    if scale is None:                                     # Janus's image mode: 5 when no scale is given
        scale = 5.0 if config.guidance_scale is None else float(config.guidance_scale)
    session = tm.start([str(b) for b in range(len(rows))], scale)
    return SessionTokenModel(session, tm.vocab_size, tm.grid, tm.decode)


def finished(record, eos: list[int]) -> tuple[bool, torch.LongTensor]:
    """(whether every row is done, [B] the tokens each row keeps: up to and including its first
    end-of-sequence token, else all it has committed) after a pass's record."""
    n = record.n_after
    if not eos:
        return bool((n >= record.num_tokens).all()), n
    tokens = record.tokens_after                                              # [B, N], -1 past n
    is_end = torch.isin(tokens, torch.tensor(eos))
    first = torch.where(is_end.any(1), is_end.long().argmax(1) + 1, n)
    done = is_end.any(1) | (n >= record.num_tokens)
    return bool(done.all()), first


def padded(tokens: torch.LongTensor, keep: torch.LongTensor, pad: int | None) -> torch.LongTensor:
    """tokens [B, N] cut to the longest row kept ([B] tokens each), the rest of each row `pad`."""
    T = int(keep.max())
    tokens = tokens[:, :T]
    past = torch.arange(T) >= keep[:, None]
    if pad is None:
        return tokens
    return tokens.masked_fill(past, pad)
