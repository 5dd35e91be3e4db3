# Built by hub/vendor.py from scd_core/decoding.py: edit the library, then rebuild.
"""The decoding loop and the public API: `generate`, `stream`, `validate`.

`decode` runs a run's passes until every row has its grid: the prefill (`chain.start_rows`),
then one pass at a time as `scd_core.passes` chooses it (a chain or a draft tree, eager or
compiled), each pass's record (`scd_core.trace.Iteration`) copied to the host and yielded.
The pass itself, in the paper's order, is `scd_core.chain`; the loop's one check per pass,
"are all rows done", reads that record, and is the only moment the host waits.
"""
from __future__ import annotations

import importlib
from typing import Callable, Iterator, Sequence

import torch

from . import memory, passes
from .chain import Plan, start_rows
from .clocks import Stopwatch, TimedSession
from .prompts import check_prompt_length, warn_unknown
from .protocols import Session, TokenModel, row_decoder
from .settings import Settings
from .trace import Iteration, Run

MAX_SEED = 2**63


def validate(model: TokenModel, prompts: Sequence[str], settings: Settings,
             seed: int | Sequence[int] = 0) -> tuple[Plan, list[int]]:
    """Check the model, the prompts, the settings against the model, and the seeds (a
    ValueError names the argument and what is allowed); return the run's plan and one seed
    per row: a list as given, or for an int s, s + b for row b."""
    if not all(hasattr(model, a) for a in ("start", "decode", "grid", "vocab_size")):
        raise ValueError(f"model must follow the TokenModel contract (vocab_size, grid, start, decode), "
                         f"got {type(model).__name__}")
    if isinstance(prompts, str) or not isinstance(prompts, Sequence) or len(prompts) == 0:
        raise ValueError("prompts must be a non-empty list of strings (one per batch row)")
    if not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompts must contain only strings")
    check_prompt_length(prompts)
    warn_unknown(model, prompts)                         # a bag-of-words model says which words it ignores
    if not isinstance(settings, Settings):
        raise ValueError(f"settings must be a scd_core.Settings, got {type(settings).__name__}")
    seeds = validate_seeds(seed, len(prompts))
    plan = Plan.of(settings, model)
    memory.check_rows(model, len(prompts), plan.method, settings.window, settings.top_p)    # the pass's memory cap
    return plan, seeds


def settings_of(settings: Settings | None = None, **given) -> Settings:
    """`settings` (the library's defaults if None) with the keywords given (not None) in place."""
    base = Settings() if settings is None else settings
    if not isinstance(base, Settings):
        raise ValueError(f"settings must be a scd_core.Settings, got {type(base).__name__}")
    changes = {k: v for k, v in given.items() if v is not None}
    return base.replace(**changes) if changes else base


def validate_seeds(seed: int | Sequence[int], rows: int) -> list[int]:
    """One seed per row in [0, 2**63): a list with one per prompt, or an int s (row b: s + b)."""
    def ok(s) -> bool:
        return isinstance(s, int) and not isinstance(s, bool) and 0 <= s < MAX_SEED

    if isinstance(seed, Sequence) and not isinstance(seed, str):
        if len(seed) != rows or not all(ok(s) for s in seed):
            raise ValueError(f"seed must be an integer in [0, 2**63) or a list of {rows} such integers "
                             f"(one per prompt), got {seed!r}")
        return list(seed)
    if not ok(seed) or seed + rows > MAX_SEED:
        raise ValueError(f"seed must be an integer in [0, 2**63 - {rows}] (row b uses seed + b), got {seed!r}")
    return [seed + b for b in range(rows)]


def generate(model: TokenModel, prompts: Sequence[str], method: str | None = None, window: int | None = None,
             seed: int | Sequence[int] = 0, temperature: float | None = None, top_k: int | None = None,
             top_p: float | None = None, cfg_scale: float | None = None, init: str | None = None,
             tree: tuple[int, int] | None = None, compile: bool | None = None,
             settings: Settings | None = None) -> Run:
    """Decode one grid of tokens per prompt; returns a Run with tokens, NFE, images, trace.
    The keywords left out take their value from `settings` (by default `Settings()`:
    scd-mc, window 16, random init, temperature 1, no top-k/top-p, no guidance, no tree, eager).
    `tree=(k, depth)` feeds k candidates at each of the first depth draft positions (a full
    k-ary tree: k + k^2 + ... + k^depth nodes after the last committed token, within the window);
    `compile=True` runs the pass compiled (`scd_core.passes`: the same tokens)."""
    settings = settings_of(settings, method=method, window=window, init=init, temperature=temperature,
                           top_k=top_k, top_p=top_p, cfg_scale=cfg_scale, tree=tree, compile=compile)
    plan, seeds = validate(model, prompts, settings, seed)
    decoders = []                                        # each row's own decoder (a clip model's knows its prefix)
    records = list(decode(model, list(prompts), seeds, plan, on_start=lambda session: decoders.extend(
        row_decoder(model, session, b) for b in range(len(prompts)))))
    return Run.from_iterations(records, decode=batch_decoder(model, decoders))


def batch_decoder(model: TokenModel, decoders: list):
    """tokens [B, N] -> decoded rows, each by its own row decoder (`model.decode` at once
    when no row needs context of its own)."""
    if all(d == model.decode for d in decoders):
        return model.decode
    return lambda tokens: [out for b, d in enumerate(decoders) for out in d(tokens[b: b + 1])]


def stream(model: TokenModel, prompts: Sequence[str], method: str | None = None, window: int | None = None,
           seed: int | Sequence[int] = 0, temperature: float | None = None, top_k: int | None = None,
           top_p: float | None = None, cfg_scale: float | None = None, init: str | None = None,
           tree: tuple[int, int] | None = None, compile: bool | None = None,
           settings: Settings | None = None) -> Iterator[Iteration]:
    """Yield one `Iteration` record per forward pass (index 0 is the prefill). The arguments
    are checked before the first record is asked for (keywords as in `generate`)."""
    settings = settings_of(settings, method=method, window=window, init=init, temperature=temperature,
                           top_k=top_k, top_p=top_p, cfg_scale=cfg_scale, tree=tree, compile=compile)
    plan, seeds = validate(model, prompts, settings, seed)
    return decode(model, list(prompts), seeds, plan)


def decode(model: TokenModel, prompts: list[str], seeds: list[int], plan: Plan,
           on_start: Callable[[Session], None] | None = None) -> Iterator[Iteration]:
    """`stream` with its arguments already checked (`validate`); `on_start(session)` hears
    the model's session once it has started. Each record's clocks are read after it has
    reached the host (`scd_core.clocks`): on a GPU, after the pass has run."""
    clock = Stopwatch()
    clock.start()
    with no_autograd(plan):                              # no autograd bookkeeping in the loop
        session = TimedSession.start(model, prompts, plan.cfg_scale)
        if on_start is not None:
            on_start(session.session)
        plan.check_session(session.session)
        state, verdict = start_rows(session.first_logits, seeds, plan)
        record = Iteration.from_pass(0, plan.method, None, state, verdict, nfe=1)
    record.wall_time, record.step_time = clock.stop(), session.seconds
    yield record
    one_pass = passes.pass_for(session, plan)            # chain or tree, eager or compiled
    while not bool((record.n_after >= plan.N).all()):   # the record is on the host: the pass's one wait
        clock.start()
        with no_autograd(plan):
            before = state
            state, verdict = one_pass(session, state, plan)
            record = Iteration.from_pass(record.index + 1, plan.method, before, state, verdict, nfe=record.nfe + 1,
                                         log=record.log)      # copied to the host: the pass has ended
        record.wall_time, record.step_time = clock.stop(), session.seconds
        yield record


def no_autograd(plan: Plan):
    """The context a run's passes run in: `torch.inference_mode()`, or for a compiled pass
    `torch.no_grad()` (a compiled graph cannot take views of inference-mode tensors), with
    torch's compiler loaded before the session's buffers are made, so that they are marked
    static on the CPU too (`scd_core.models.static.mark`)."""
    if plan.settings.compile:
        importlib.import_module("torch._dynamo")
        return torch.no_grad()
    return torch.inference_mode()
