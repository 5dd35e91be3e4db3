"""The page's checks of a decoding request's inputs.

Every field a visitor types into is described once here (`FIELDS`: its label on the page and
the values it allows); the same description makes the widget's label, the check and the
message, which names the field as the page does and the range it allows ("Window L: a whole
number from 2 to 1,024, got 0."). The library checks the same values again
(`scd_core.settings.Settings`, `scd_core.decoding.validate`, whose limits the ranges here
use); its message is the page's last resort, for what no field here describes. Widget values
become numbers once, here (`settings_of`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from demo.backend import env_flag
from demo.clips import clip_prompt
from demo.labels import TREE_CHOICES, TREE_LABELS
from demo.models import is_video, listed_models, load_failure, takes_clip, unavailable
from demo.labels import INIT_LABELS
from demo.texts import as_text, quoted
from scd_core.decoding import validate
from scd_core.prompts import MAX_PROMPT_CHARS
from scd_core.race import Race
from scd_core.settings import (CHAIN, MAX_CFG_SCALE, MAX_TEMPERATURE, MAX_WINDOW, MIN_TEMPERATURE, MIN_WINDOW,
                               Settings, tree_nodes)

MAX_PACE = 2.0                       # seconds per forward pass on screen
MAX_SAMPLES = 16                     # race samples per method
BROWSER_WHOLE = 2**53 - 1            # the largest whole number a browser's number carries exactly
MAX_PAGE_SEED = 10**15               # a seed a visitor types and the browser carries (row b: + b)


# ------------------------------------------------------------------------------ fields

def _number_text(value) -> str:
    """A number as the page writes it: 1,024; 0.5; 9,223,372,036,854,775,792."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= BROWSER_WHOLE:
        value = int(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def given(value) -> str:
    """What the visitor gave, for a message."""
    if value is None or value == "":
        return "nothing"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number_text(value) if math.isfinite(value) else str(value)
    return quoted(value)


@dataclass(frozen=True)
class Field:
    """A number field of the page: its label, the values it allows and what its ends mean,
    read by the widget (its label), the check and the message alike."""

    label: str                        # the field's name on the page
    low: float                        # the least value allowed
    high: float | None = None         # the largest (None: no end, or the model's, given to `check`)
    whole: bool = False               # a whole number (1.5 is refused, never rounded)
    above_low: bool = False           # `low` itself is not allowed (top-p > 0)
    next_low: float | None = None     # the least value above `low` allowed (temperature: 0, or 1e-30 up)
    meaning: str = ""                 # what its values mean ("0: off")
    high_is: str = ""                 # what `high` is when the model gives it ("the model's vocabulary")

    @property
    def widget_label(self) -> str:
        return f"{self.label} ({self.meaning})" if self.meaning else self.label

    def allowed(self, high: float | None = None) -> str:
        """The values allowed, in words: "a whole number from 2 to 1,024"."""
        high = self.high if high is None else high
        kind = "a whole number" if self.whole else "a number"
        low = _number_text(self.low)
        if self.next_low is not None:
            low = _number_text(self.next_low)
        if high is None:
            span = f"above {low}" if self.above_low else f"of {low} or more"
        else:
            top = _number_text(high) + (f", {self.high_is}" if self.high_is and self.high is None else "")
            span = f"above {low} and at most {top}" if self.above_low else f"from {low} to {top}"
        either = f"{_number_text(self.low)} or " if self.next_low is not None else ""
        return f"{either}{kind} {span}" + (f" ({self.meaning})" if self.meaning else "")

    def check(self, value, high: float | None = None):
        """The value as a number (an int for a whole number); ValueError with the message."""
        high = self.high if high is None else high
        number = as_int(value) if self.whole else as_float(value)
        ok = isinstance(number, int if self.whole else float) and not isinstance(number, bool) \
            and math.isfinite(number) and (number > self.low if self.above_low else number >= self.low) \
            and (high is None or number <= high) \
            and (self.next_low is None or number == self.low or number >= self.next_low)
        if not ok:
            raise ValueError(f"{self.label}: {self.allowed(high)}, got {given(value)}.")
        return number


FIELDS = {
    "window": Field("Window L", MIN_WINDOW, MAX_WINDOW, whole=True),
    "seed": Field("Seed", 0, MAX_PAGE_SEED, whole=True),
    "temperature": Field("Temperature", 0.0, MAX_TEMPERATURE, next_low=MIN_TEMPERATURE, meaning="0: greedy"),
    "top_k": Field("Top-k", 0, whole=True, meaning="0: off", high_is="the model's vocabulary"),
    "top_p": Field("Top-p", 0.0, 1.0, above_low=True, meaning="1: off"),
    "cfg": Field("CFG scale", 0.0, MAX_CFG_SCALE, meaning="1: no guidance"),
    "samples": Field("Race samples K", 1, MAX_SAMPLES, whole=True),
    "pace": Field("Slow motion", 0.0, MAX_PACE, meaning="seconds each pass stays on screen; 0: off, full speed"),
}


# ------------------------------------------------------------------------------ values

COMPILE = env_flag("SCD_COMPILE")


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
        raise ValueError("Prompt: please type it as text.")
    prompt = (prompt or "").strip()
    if not prompt:
        raise ValueError("Prompt: please type a prompt (or click one of the examples).")
    if len(prompt) > MAX_PROMPT_CHARS and not clip_model:     # the library's limit, said here first
        raise ValueError(f"Prompt: {len(prompt):,} characters long; the limit is "
                         f"{MAX_PROMPT_CHARS}. Please shorten it.")
    return prompt


def check_pace(pace) -> float:
    return FIELDS["pace"].check(pace)


def check_samples(samples) -> int:
    """The race's K."""
    return FIELDS["samples"].check(samples)


def check_model(name, loaded: bool = False) -> str:
    if not isinstance(name, str) or name not in listed_models():
        raise ValueError(f"Model: unknown model {quoted(name)}; choose one of {', '.join(listed_models())}.")
    reason = unavailable(name, loaded)
    if reason is not None:
        raise ValueError(f"Model: {name} cannot run here: {reason}")
    return name


def check_tree(label) -> tuple[int, int]:
    """The dropdown's draft tree label -> (k, depth); None or empty: the chain."""
    if label is None or label == "":
        return CHAIN
    if not isinstance(label, str) or label not in TREE_LABELS:
        raise ValueError(f"Draft tree: unknown draft tree {quoted(label)}; choose one of {', '.join(TREE_CHOICES)}.")
    return TREE_LABELS[label]


def tree_for(method, tree: tuple[int, int]) -> tuple[int, int]:
    """The tree a run of `method` uses: AR feeds no drafts, so it runs the chain."""
    return CHAIN if method == "ar" else tree


def setting_problems(values: dict, model=None) -> dict[str, str]:
    """The settings fields a page check refuses, by their name in INPUTS, with the message.
    `values`: a decoding event's values by name (`values_of`); `model`: the loaded model (its
    vocabulary bounds top-k), or a `Shape`, or None."""
    out = {}
    vocab = None if model is None or isinstance(model, Shape) else getattr(model, "vocab_size", None)
    for key in SETTING_FIELDS:
        try:
            FIELDS[key].check(values[key], vocab if key == "top_k" else None)
        except ValueError as exc:
            out[key] = str(exc)
    method, window = values["method"], values["window"]
    grid = tuple(getattr(model, "grid", ()))
    if values["init"] == "repeat-frame" and len(grid) == 2:
        out["init"] = (f"Draft init: \u201c{INIT_LABELS['repeat-frame']}\u201d needs a video model; "
                       "this one makes single images.")
    try:
        k, depth = tree_for(method, check_tree(values["tree"]))
    except ValueError as exc:
        out["tree"] = str(exc)
    else:
        needs = 1 + tree_nodes((k, depth))
        if "window" not in out and method != "ar" and needs > as_int(window):
            out["tree"] = (f"Draft tree: {k} x {depth} feeds {needs} tokens per pass (the last token "
                           f"and {needs - 1} candidates), more than Window L ({as_int(window)}); choose a "
                           f"smaller tree or a window of at least {needs}.")
    return out


def settings_of(values: dict, model=None) -> Settings:
    """A decoding event's values by name (`values_of`) -> the run's Settings, the one place
    they are converted (gr.Number gives floats, the tree dropdown a label): the page's checks
    first (`setting_problems`, its message names the field), then the library's (its
    ValueError names the argument)."""
    values = values_of(values)
    found = setting_problems(values, model)
    if found:
        raise ValueError(next(iter(found.values())))
    return Settings(method=values["method"], window=as_int(values["window"]), init=values["init"],
                    temperature=as_float(values["temperature"]), top_k=as_int(values["top_k"]),
                    top_p=as_float(values["top_p"]), cfg_scale=as_float(values["cfg"]),
                    tree=tree_for(values["method"], check_tree(values["tree"])), compile=COMPILE)


def race_of(model, prompt: str, settings: Settings, seed) -> Race:
    """The run's prompt, Settings and seed, checked against the model by the library (its
    ValueError names the argument), the seed by the page first. `model` is the loaded model
    or, before loading, anything with `grid` and `vocab_size`."""
    _, seeds = validate(model, [prompt], settings, FIELDS["seed"].check(seed))
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
    said = [m if m.endswith((".", "`")) else m + "." for m in found.values()]
    return "" if not found else "**Not started:** " + " ".join(said)


# ------------------------------------------------------------------- a decoding event

INPUTS = ["model", "method", "window", "init", "temperature", "top_k", "top_p", "cfg", "seed",
          "prompt", "pace", "samples", "clip", "clip_text", "tree"]      # the decoding events' inputs
LEFT_OUT = {"pace": 0.0, "samples": 1, "clip": None, "clip_text": "", "tree": None}   # when not given
CORE_INPUTS = [k for k in INPUTS if k not in LEFT_OUT]      # every decoding event's (the Lossless tab's)
SETTING_FIELDS = ("window", "temperature", "top_k", "top_p", "cfg")     # the FIELDS that make Settings


def values_of(values: dict) -> dict:
    """A decoding event's widget values by their name in INPUTS (some may be left out: LEFT_OUT
    fills them; names not in INPUTS are dropped)."""
    return LEFT_OUT | {k: v for k, v in values.items() if k in INPUTS}


@dataclass(frozen=True)
class PageRun:
    """A decoding event's inputs, checked and converted once (`read`): the model's name, the run
    the engine decodes (prompt, Settings with the method, seed) and what the page does around
    it (the slow-motion pace, the race's K)."""

    name: str
    race: Race
    pace: float = 0.0            # seconds per pass shown (0: full speed)
    samples: int = 1             # the race's K

    @property
    def settings(self) -> Settings:
        return self.race.settings


def read(values: dict, model) -> PageRun:
    """The one way from a decoding event's widget values (by name) to its run: every field
    checked by the page, then by the library (`checked`; the first message is raised as a
    ValueError), then converted, once. `model` is the loaded model."""
    found, race = checked(model, values)
    if found:
        raise ValueError(next(iter(found.values())))
    values = values_of(values)
    return PageRun(values["model"], race, FIELDS["pace"].check(values["pace"]),
                   FIELDS["samples"].check(values["samples"]))


# ------------------------------------------------------------------- switching models

SETTINGS = ("prompt", "init", "window", "temperature", "top_k", "top_p", "cfg", "samples", "pace")


def defaults_of(page: dict, sampling: dict, prompt: str | None) -> dict:
    """A model's defaults (`demo.models`: the page's and its sampling ones, its first example
    prompt) by their name in SETTINGS."""
    return {"prompt": prompt, "init": page["init"], "window": page["window"],
            "temperature": sampling["temperature"], "top_k": sampling["top_k"], "top_p": sampling["top_p"],
            "cfg": sampling["cfg_scale"], "samples": page["samples"], "pace": page["pace"]}


def _label(key: str) -> str:
    return FIELDS[key].label if key in FIELDS else {"init": "Draft init", "prompt": "Prompt"}[key]


def _value(key: str, value) -> str:
    if key == "init":
        return INIT_LABELS.get(value, str(value))
    if key == "prompt":
        return f"\u201c{as_text(value)}\u201d"
    return given(value)


def _same(a, b) -> bool:
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    return float(a) == float(b) if numbers else a == b


def _allowed_on(key: str, value, model, video: bool) -> str | None:
    """Why a setting the visitor chose cannot stay on the model switched to (None: it can)."""
    if key == "init":
        return "needs a video model" if value == "repeat-frame" and not video else None
    if key in FIELDS:
        vocab = None if model is None or isinstance(model, Shape) else getattr(model, "vocab_size", None)
        try:
            FIELDS[key].check(value, vocab if key == "top_k" else None)
        except ValueError:
            return f"more than its {vocab:,} tokens" if key == "top_k" and vocab else "out of range"
    return None


def switched(name: str, current: dict, applied: dict | None, new: dict, model=None,
             video: bool = False) -> tuple[dict, str]:
    """The settings after switching to model `name`: each still at the value the page set last
    (`applied`: the last model's defaults) takes the new model's default (`new`); each the
    visitor changed stays, unless the new model cannot take it (`model`, loaded or a `Shape`;
    `video`: its grid has frames), when its default takes its place. Returns the values by
    their name in SETTINGS and one line saying what changed and why ("" when nothing did);
    a prompt is changed only for one of the new model's examples."""
    values, followed, kept, refused = {}, [], [], []
    for key in SETTINGS:
        now, default = current.get(key), new.get(key)
        if key not in current or key == "prompt" and default is None:   # not given, or no text prompt
            values[key] = default if key not in current else now
            continue
        if applied is None or _same(now, applied.get(key)):
            values[key] = default
            if not _same(now, default):
                followed.append(f"{_label(key)} {_value(key, now)} \u2192 {_value(key, default)}")
            continue
        why = _allowed_on(key, now, model, video)
        values[key] = now if why is None else default
        if why is None:
            kept.append(f"{_label(key)} {_value(key, now)}")
        else:
            refused.append(f"{_label(key)} {_value(key, now)} \u2192 {_value(key, default)} ({why})")
    parts = ([f"its defaults: {', '.join(followed)}"] if followed else []) + \
        ([f"kept as you set them: {', '.join(kept)}"] if kept else []) + \
        ([f"changed, {name} cannot take them: {', '.join(refused)}"] if refused else [])
    return values, (f"**Settings for {name}:** " + "; ".join(parts) + ".") if parts else ""


# ------------------------------------------------------------------------ whole inputs

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


def in_page_order(found: dict[str, str]) -> dict[str, str]:
    """Messages by field, in the order the fields come on the page."""
    return {k: found[k] for k in sorted(found, key=lambda k: INPUTS.index(k) if k in INPUTS else len(INPUTS))}


def problems(model, values: dict) -> dict[str, str]:
    """Every input the page or the library rejects, by its name in INPUTS, with the message.
    `values`: the event's values by name; `model` is the loaded model, or None when it is not
    loaded yet."""
    return checked(model, values)[0]


def checked(model, values: dict) -> tuple[dict[str, str], Race | None]:
    """`problems`, and the run they allow (None where there are some): every check made once."""
    values = values_of(values)
    name = values["model"]
    try:
        check_model(name, model is not None)
    except ValueError as exc:
        return {"model": str(exc)}, None
    out = {}
    try:
        prompt = engine_prompt(name, values["prompt"], values["clip"], values["clip_text"])
    except ValueError as exc:
        out["clip" if takes_clip(name) else "prompt"] = str(exc)
        prompt = ""
    for key in ("pace", "samples", "seed"):
        try:
            FIELDS[key].check(values[key])
        except ValueError as exc:
            out[key] = str(exc)
    out = in_page_order(out)
    shape = model or shape_of(name)
    found = setting_problems(values, shape)
    if found or "seed" in out:
        return in_page_order(out | found), None
    try:                                # what no field describes: the library's message
        race = race_of(shape, prompt, settings_of(values, shape), values["seed"])
    except ValueError as exc:           # the library's message starts with the argument's name
        arg = str(exc).split(" ", 1)[0].strip("':")
        out[{"cfg_scale": "cfg", "prompts": "prompt"}.get(arg, arg)] = as_text(exc)   # plain text
        return out, None
    return out, (race if not out else None)
