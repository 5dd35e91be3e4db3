"""The page's checks of a decoding request's inputs.

The arguments of a decode are checked by the library (`scd_core.settings.Settings` and
`scd_core.decoding.validate`, a ValueError naming the argument); the page only turns widget
values into numbers first, once (`settings_of`), and adds its own limits (prompt length,
slow-motion pace, race samples).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable

from demo.clips import clip_prompt
from demo.labels import TREE_CHOICES, TREE_LABELS
from demo.models import is_video, listed_models, load_failure, takes_clip, unavailable
from scd_core.decoding import validate
from scd_core.prompts import MAX_PROMPT_CHARS
from scd_core.race import Race
from scd_core.settings import CHAIN, Settings

MAX_PACE = 2.0                       # seconds per forward pass on screen
MAX_SAMPLES = 16                     # race samples per method


# ------------------------------------------------------------------------------ values

def env_count(name: str, default: int) -> int:
    """A whole number >= 1 from environment variable `name` (unset or empty: `default`)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name}: expected a whole number >= 1, got {raw!r}")
    return int(raw)


def as_int(value):
    """A widget number as an int when it is whole (gr.Number gives floats); else unchanged,
    so that the library names the argument in its message."""
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    return value


def as_float(value):
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def check_prompt(prompt, clip_model: bool = False) -> str:
    if not isinstance(prompt, str) and prompt is not None:
        raise ValueError("prompt must be text")
    prompt = (prompt or "").strip()
    if not prompt:
        raise ValueError("prompt: please type a prompt (or click one of the examples)")
    if len(prompt) > MAX_PROMPT_CHARS and not clip_model:     # the library's limit, said here first
        raise ValueError(f"prompt: {len(prompt):,} characters long; the limit is "
                         f"{MAX_PROMPT_CHARS}. Please shorten it.")
    return prompt


def check_pace(pace) -> float:
    pace = as_float(pace)
    if not isinstance(pace, float) or not 0 <= pace <= MAX_PACE:
        raise ValueError(f"slow motion must be between 0 (full speed) and {MAX_PACE} seconds per "
                         f"forward pass, got {pace!r}")
    return pace


def check_samples(samples, low: int = 1, high: int = MAX_SAMPLES, what: str = "samples") -> int:
    """A whole number of samples in [low, high] (the race's K, the lossless view's count)."""
    samples = as_int(samples)
    if isinstance(samples, bool) or not isinstance(samples, int) or not low <= samples <= high:
        raise ValueError(f"{what} must be a whole number from {low} to {high}, got {samples!r}")
    return samples


def check_model(name, loaded: bool = False) -> str:
    if not isinstance(name, str) or name not in listed_models():
        raise ValueError(f"model: unknown model {name!r}; choose one of {', '.join(listed_models())}")
    reason = unavailable(name, loaded)
    if reason is not None:
        raise ValueError(f"model: {name} cannot run here: {reason}")
    return name


def check_tree(label) -> tuple[int, int]:
    """The dropdown's draft tree label -> (k, depth); None or empty: the chain."""
    if label is None or label == "":
        return CHAIN
    if not isinstance(label, str) or label not in TREE_LABELS:
        raise ValueError(f"tree: unknown draft tree {label!r}; choose one of {', '.join(TREE_CHOICES)}")
    return TREE_LABELS[label]


def tree_for(method, tree: tuple[int, int]) -> tuple[int, int]:
    """The tree a run of `method` uses: AR feeds no drafts, so it runs the chain."""
    return CHAIN if method == "ar" else tree


def settings_of(method, window, init, temperature, top_k, top_p, cfg_scale, tree=None) -> Settings:
    """Widget values -> the run's Settings, the one place they are converted (gr.Number gives
    floats, the tree dropdown a label), checked by the library (its ValueError names the argument)."""
    return Settings(method=method, window=as_int(window), init=init, temperature=as_float(temperature),
                    top_k=as_int(top_k), top_p=as_float(top_p), cfg_scale=as_float(cfg_scale),
                    tree=tree_for(method, check_tree(tree)))


def race_of(model, prompt: str, settings: Settings, seed) -> Race:
    """The run's prompt, Settings and seed, checked against the model by the library (its
    ValueError names the argument). `model` is the loaded model or, before loading, anything
    with `grid` and `vocab_size`."""
    _, seeds = validate(model, [prompt], settings, as_int(seed))
    return Race(prompt, settings, seeds[0])


@dataclass(frozen=True)
class Shape:
    """A stand-in with a model's grid and vocabulary, to check settings before loading it."""

    grid: tuple[int, ...]
    vocab_size: int = 2

    def start(self, prompts, cfg_scale):      # the contract's methods, never called
        raise NotImplementedError

    def decode(self, tokens):
        raise NotImplementedError


def shape_of(name: str) -> Shape:
    return Shape((1, 1, 1) if is_video(name) else (1, 1))


def not_started(found: dict[str, str]) -> str:
    """Beside the buttons: the inputs `problems` found, or nothing."""
    text = "; ".join(found.values())
    return "" if not found else "**Not started:** " + text + ("" if text.endswith(".") else ".")


# ------------------------------------------------------------------------ whole inputs

INPUTS = ["model", "method", "window", "init", "temperature", "top_k", "top_p", "cfg", "seed",
          "prompt", "pace", "samples", "clip", "clip_text", "tree"]      # the decoding events' inputs


def engine_prompt(name: str, prompt, clip=None, clip_text="") -> str:
    """The prompt the engine gets: the text, or for a clip model the clip (and its text)."""
    return clip_prompt(clip, clip_text) if takes_clip(name) else check_prompt(prompt)


def load_for(name, prompt, clip, clip_text, load: Callable[[str], object], loaded: bool = False):
    """The model (from `load(name)`) and the engine prompt of a decoding request, checked in
    that order; a ValueError with the message otherwise (a model that fails to load included)."""
    check_model(name, loaded)
    text = engine_prompt(name, prompt, clip, clip_text)
    try:
        model = load(name)
    except Exception as exc:          # missing weights, no memory...: a message, not a crash
        raise ValueError(load_failure(name, exc)) from None
    return model, text


def problems(model, name, method, window, init, temperature, top_k, top_p, cfg_scale, seed,
             prompt, pace, samples, clip=None, clip_text="", tree=None) -> dict[str, str]:
    """Every input the page or the library rejects, by its name in INPUTS, with the message.
    `model` is the loaded model, or None when it is not loaded yet."""
    try:
        check_model(name, model is not None)
    except ValueError as exc:
        return {"model": str(exc)}
    out = {}
    try:
        prompt = engine_prompt(name, prompt, clip, clip_text)
    except ValueError as exc:
        out["clip" if takes_clip(name) else "prompt"] = str(exc)
        prompt = ""
    for key, check, value in (("pace", check_pace, pace), ("samples", check_samples, samples)):
        try:
            check(value)
        except ValueError as exc:
            out[key] = str(exc)
    try:
        race_of(model or shape_of(name), prompt,
                settings_of(method, window, init, temperature, top_k, top_p, cfg_scale, tree), seed)
    except ValueError as exc:           # the library's message starts with the argument's name
        arg = str(exc).split(" ", 1)[0].strip("':")
        out[{"cfg_scale": "cfg", "prompts": "prompt"}.get(arg, arg)] = str(exc)
    return out
