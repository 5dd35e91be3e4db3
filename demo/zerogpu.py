"""The page's decoding events as ZeroGPU calls, and how long each may hold the GPU.

On a ZeroGPU Space (SPACES_ZERO_GPU set) the `spaces` package (0.51.3) runs a function
decorated with `@spaces.GPU(duration=...)` in a process of its own that holds a GPU: a child
forked from the page's process, one per GPU, kept between calls while idle. Its
`duration(*inputs)` is asked first; the call holds the GPU that many seconds at most and is
cut off after. Everything that crosses between the page's process and the call's is
pickled: the call's inputs, and each value it returns or yields. In the page's own process
`spaces` emulates CUDA (a model moved to "cuda" there stays in memory, or on disk, and moves
to the GPU in the call's process); a CUDA operation there raises. Off ZeroGPU the decorator
returns the function unchanged.

So every event that decodes or draws a model's tokens (Generate, the race, the lossless view,
export, a replayed pass, a race sample) runs inside one such call (`on_gpu`), on the page's
in-call decode client (`demo.backend`, `call`): its passes run in the call's process, in the
threads of the call. All of them go through one decorated function (`_on_gpu`), so that
`spaces` keeps one process per GPU, holding the models and the rows' decoders, for every
event. The page's updates are dicts keyed by its components, which do not pickle (they hold
the page), so a call yields them keyed by the components' ids (`ByBlockId`) and the page's
side maps them back.

Durations (`*_seconds`) follow `scd_core.models.gpu_seconds` (the model's tokens and cost
per forward pass, a margin) for everything the call does: a race decodes every method
(one image alone, then K together) in each of its timing rounds after a short warm-up, then
replays the passes in slow motion; a Generate in slow motion shows each pass for its pace. A run whose estimate
exceeds what ZeroGPU grants one call is refused before it starts (`check_fits`).
"""
from __future__ import annotations

import functools
import inspect
import math
from typing import Callable

import spaces
from gradio.blocks import Block

from demo import backend
from demo.checks import as_int, check_pace, check_samples
from demo.servers import shown_pace
from scd_core import lossless, race
from scd_core.settings import METHODS
from scd_core.models import REGISTRY
from scd_core.models.status import GPU_OVERHEAD_S, MAX_GPU_SECONDS, MIN_GPU_SECONDS, gpu_seconds

def _default(fn: Callable, argument: str):
    return inspect.signature(fn).parameters[argument].default


WARM_UP_PASSES = _default(race.warm_up, "passes")            # untimed passes of each method before a race
LOSSLESS_BATCH = _default(lossless.sample_tokens, "batch")   # rows per batch of the lossless view
EXPORT_SECONDS = 60          # an export: up to 200 canvases decoded, then encoded on the CPU
SHORT_SECONDS = MIN_GPU_SECONDS   # one picture: a replayed pass, a race sample


class ByBlockId(dict):
    """A page update (component -> value) keyed by the components' ids, to cross a process."""


def _plain(update):
    if isinstance(update, dict) and update and all(isinstance(k, Block) for k in update):
        return ByBlockId({k._id: v for k, v in update.items()})
    return update


def _blocks(update, blocks: Callable[[], dict]):
    if isinstance(update, ByBlockId):
        known = blocks()
        return {known[i]: v for i, v in update.items()}
    return update


_EVENTS: dict[str, tuple[Callable, Callable[..., int]]] = {}   # event name -> (handler, its duration)


def _seconds(event: str, args: tuple, kwargs: dict) -> int:
    return _EVENTS[event][1](*args, **kwargs)


@spaces.GPU(duration=_seconds)
def _on_gpu(event: str, args: tuple, kwargs: dict):
    """Every event that decodes or draws, as one decorated function: `spaces` keeps one
    process per GPU for a decorated function, so all events share its models and its rows'
    decoders (one decorated function per event would move every model to the GPU once per
    event). A handler's return value is its one update."""
    fn = _EVENTS[event][0]
    if inspect.isgeneratorfunction(fn):
        for update in fn(*args, **kwargs):
            yield _plain(update)
    else:
        yield _plain(fn(*args, **kwargs))


def on_gpu(duration: Callable[..., int], blocks: Callable[[], dict]):
    """The handler `fn` (a function, or a generator of updates) run in one `@spaces.GPU` call
    of `duration(*inputs)` seconds; its updates cross as `ByBlockId` and come back keyed by
    the page's components (`blocks()`: the page's id -> component)."""
    def wrap(fn):
        event = f"{fn.__module__}.{fn.__qualname__}"
        _EVENTS[event] = (fn, duration)
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def handler(*args, **kwargs):
                for update in _on_gpu(event, args, kwargs):
                    yield _blocks(update, blocks)
            return handler

        @functools.wraps(fn)
        def handler_once(*args, **kwargs):
            (update,) = list(_on_gpu(event, args, kwargs))
            return _blocks(update, blocks)
        return handler_once
    return wrap


# ------------------------------------------------------------------------------ durations

def _decoding(name: str, window: int, samples: int, method: str, pace: float = 0.0) -> float:
    """`gpu_seconds` of one decode, without its once-per-call overhead."""
    return gpu_seconds(name, window if method != "ar" else 1, samples, method, pace, clamp=False) - GPU_OVERHEAD_S


def generate_estimate(name: str, method: str, window: int, pace: float) -> int:
    """Seconds one Generate holds the GPU: its decode, each pass shown for the slow motion's pace."""
    return math.ceil(GPU_OVERHEAD_S + _decoding(name, window, 1, method, shown_pace(pace)))


def race_estimate(name: str, window: int, samples: int, pace: float, rounds: int = race.TIMING_ROUNDS) -> int:
    """Seconds one race holds the GPU: a warm-up, each method's one image alone and its K
    samples together in each of its `rounds` timing rounds, then the replay of the slowest
    method's passes at the slow motion's pace."""
    tokens = REGISTRY[name].tokens
    decodes = sum(rounds * (_decoding(name, window, 1, m) + (_decoding(name, window, samples, m)
                                                             if samples > 1 else 0.0))
                  + _decoding(name, window, 1, m) * WARM_UP_PASSES / tokens for m in METHODS)
    return math.ceil(GPU_OVERHEAD_S + decodes + tokens * shown_pace(pace))


def race_rounds(name: str, window: int, samples: int, pace: float) -> int:
    """The timing rounds of a race: `race.TIMING_ROUNDS` where they fit in what ZeroGPU grants
    one call (the embedded models' always do), else as many as fit, at least one (the race
    then calls no method faster: one timing each says too little)."""
    fits = [r for r in range(race.TIMING_ROUNDS, 0, -1)
            if race_estimate(name, window, samples, pace, r) <= MAX_GPU_SECONDS]
    return fits[0] if fits else 1


def lossless_estimate(name: str, method: str, window: int, samples: int) -> int:
    """Seconds one lossless comparison holds the GPU: `samples` of AR and of the method, in
    batches, and one greedy run of each."""
    batches = math.ceil(samples / LOSSLESS_BATCH)
    rows = min(samples, LOSSLESS_BATCH)
    return math.ceil(GPU_OVERHEAD_S + batches * (_decoding(name, window, rows, "ar") + _decoding(name, window, rows, method))
                     + _decoding(name, window, 1, "ar") + _decoding(name, window, 1, method))


def _bounded(estimate: Callable[[], int]) -> int:
    """The estimate within what ZeroGPU grants one call; bad inputs never reach the decode
    (they are refused first), so any duration serves them."""
    try:
        seconds = estimate()
    except (ValueError, TypeError, KeyError):
        return MIN_GPU_SECONDS
    return max(MIN_GPU_SECONDS, min(MAX_GPU_SECONDS, seconds))


def _whole(value) -> int:
    value = as_int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a whole number, got {value!r}")
    return value


def generate_seconds(name, method, window, init, temperature, top_k, top_p, cfg_scale, seed, prompt,
                     pace=0.0, *rest, **named) -> int:
    """`@spaces.GPU` duration of a Generate, from the event's inputs."""
    return _bounded(lambda: generate_estimate(name, method, _whole(window), check_pace(pace)))


def race_seconds(name, method, window, init, temperature, top_k, top_p, cfg_scale, seed, prompt,
                 pace=0.0, samples=8, *rest, **named) -> int:
    """`@spaces.GPU` duration of a race, from the event's inputs."""
    def estimate() -> int:
        w, k, p = _whole(window), check_samples(samples), check_pace(pace)
        return race_estimate(name, w, k, p, race_rounds(name, w, k, p))
    return _bounded(estimate)


def lossless_seconds(name, method, window, init, temperature, top_k, top_p, cfg_scale, seed, prompt,
                     samples=256, *rest, **named) -> int:
    """`@spaces.GPU` duration of a lossless comparison, from the event's inputs."""
    other = "scd-mc" if method == "ar" else method
    return _bounded(lambda: lossless_estimate(name, other, _whole(window), _whole(samples)))


def export_seconds(*inputs, **named) -> int:
    return EXPORT_SECONDS


def short_seconds(*inputs, **named) -> int:
    return SHORT_SECONDS


def check_fits(seconds: int, what: str, lower: str) -> None:
    """On ZeroGPU, a ValueError (the visitor's words) when a run would hold the GPU longer
    than one call may; elsewhere nothing."""
    if backend.on_zero_gpu() and seconds > MAX_GPU_SECONDS:
        raise ValueError(f"{what} would hold the GPU about {seconds} s, longer than one ZeroGPU call may "
                         f"({MAX_GPU_SECONDS} s); {lower}")
