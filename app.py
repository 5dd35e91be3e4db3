"""Gradio demo of lossless speculative decoding for autoregressive image and video models.

Pick a model and a method, watch the image (or clip) form one forward pass at a time, and
see acceptance and NFE plotted live against the AR baseline. `demo` is the Blocks app (the
Hugging Face Space entry point); `python app.py` serves it locally.

This file is the UI only: decoding is `scd_core.stream`, pictures and plots are
`scd_core.render`.
"""
from __future__ import annotations

import functools
import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import Iterator

import gradio as gr
import numpy as np
import torch

import scd_core
from scd_core import render as R
from scd_core.models import REGISTRY, availability

try:  # ZeroGPU on Hugging Face Spaces; a no-op decorator everywhere else
    import spaces

    def gpu(duration: int):
        """Hold a (Zero)GPU for at most `duration` seconds per call."""
        return spaces.GPU(duration=duration)
except ImportError:
    def gpu(duration: int):
        """No `spaces` package: a no-op."""
        return lambda fn: fn


METHODS = [("AR", "ar"), ("SJD", "sjd"), ("SCD maximal coupling", "scd-mc"),
           ("SCD Gumbel coupling", "scd-gumbel")]
METHOD_NAMES = dict((v, k) for k, v in METHODS)
INITS = [("random (uniform)", "random"),
         ("repeat the token above", "repeat-above"),
         ("repeat the previous frame (video)", "repeat-frame")]
HIDDEN_MODELS = {"toy"}              # the enumerable exactness-test model: 5 tokens, nothing to see
MAX_PROMPT_CHARS = 500
MAX_WINDOW = 256
IMAGE_EVERY = 0.05                   # at most ~20 picture updates a second
PLOT_EVERY = 0.25                    # plots are heavier in the browser: ~4 a second
EXAMPLES = ["red apple", "grinning face", "red heart", "flag france", "cat face",
            "yellow star", "blue circle", "fox"]
# pace: slow motion, seconds per forward pass on screen (the embedded models are too fast to
# watch otherwise); the real models are slow enough at full speed.
DEFAULTS = {
    "toy-grid": dict(window=16, init="random", temperature=1.0, top_k=0, top_p=1.0, cfg_scale=1.0,
                     pace=0.05),
    "tiny": dict(window=16, init="random", temperature=1.0, top_k=100, top_p=1.0, cfg_scale=3.0,
                 pace=0.15),
    "tiny-video": dict(window=32, init="repeat-frame", temperature=1.0, top_k=100, top_p=1.0,
                       cfg_scale=3.0, pace=0.05),
}
REAL_DEFAULTS = dict(window=32, init="random", temperature=1.0, top_k=1000, top_p=1.0,
                     cfg_scale=5.0, pace=0.0)
# models whose prompt is a clip to continue (Cosmos): no guidance, drafts copy the last frame
CLIP_DEFAULTS = dict(window=128, init="repeat-frame", temperature=1.0, top_k=0, top_p=0.8,
                     cfg_scale=1.0, pace=0.0)
CLIP_FRAMES = 12                     # frames of each generated example clip
MAX_CLIP_UPLOAD = "50mb"             # a prompt clip is short: only its first frames are read
MAX_PACE = 2.0


# ------------------------------------------------------------------------- device, models

def pick_device() -> tuple[str, torch.dtype | None]:
    """CUDA with bfloat16 for the real models when a GPU is present; else the CPU, where
    each adapter keeps its own default dtype."""
    if torch.cuda.is_available():
        return "cuda", torch.bfloat16
    return "cpu", None


DEVICE, REAL_DTYPE = pick_device()


def device_note() -> str:
    if DEVICE == "cuda":
        name = torch.cuda.get_device_name(0) if torch.cuda.is_initialized() else "GPU"
        return f"Engine: **CUDA** ({name}); real models in bfloat16, embedded models in float32."
    return ("Engine: **CPU** (no GPU found). The embedded models run in seconds here; "
            "the large models need a GPU.")


_models: dict[str, object] = {}
_models_lock = threading.Lock()


def get_model(name: str):
    """Load a model once per process (lazily, on first use) and keep it.

    `_models` is also the seam for tests and embedders: a model put there under a registry
    name is used as is (and counts as available)."""
    with _models_lock:
        if name not in _models:
            dtype = REAL_DTYPE if REGISTRY[name].needs_weights else None   # embedded: float32
            _models[name] = _load(name, dtype)
        return _models[name]


def model_or_error(name: str):
    """get_model for an event handler: a failed load becomes a message on the page."""
    try:
        return get_model(name)
    except Exception as exc:
        raise gr.Error(f"Could not load model {name!r}: {exc}")


def _load(name: str, dtype: torch.dtype | None):
    """Ask for the device (and dtype) when the loader accepts them; load_model raises
    TypeError for unexpected keywords."""
    first = dict(device=DEVICE, dtype=dtype) if dtype is not None else dict(device=DEVICE)
    for kwargs in (first, dict(device=DEVICE), {}):
        try:
            return scd_core.load_model(name, **kwargs)
        except TypeError:
            if not kwargs:
                raise
    raise AssertionError("unreachable")


def model_names() -> list[str]:
    return [n for n in REGISTRY if n not in HIDDEN_MODELS]


def model_choices() -> list[tuple[str, str]]:
    """(label, name) for the dropdown; unavailable models stay listed with the reason."""
    out = []
    for name in model_names():
        reason = availability(name)
        if reason is not None and len(reason) > 60:
            reason = reason[:57].rstrip() + "…"
        out.append((name if reason is None else f"{name} (unavailable: {reason})", name))
    return out


def default_model() -> str:
    return "tiny" if availability("tiny") is None else "toy-grid"


def peek_model(name: str):
    """The model if it is loaded already or cheap to load (embedded), else None."""
    if name in _models:
        return _models[name]
    entry = REGISTRY.get(name)
    if entry is None or entry.needs_weights or availability(name) is not None:
        return None
    try:
        return get_model(name)
    except Exception:   # shown later, with the reason, when the user presses Generate
        return None


def takes_clip(name: str) -> bool:
    """Whether the model's prompts are video clips to continue (the Cosmos family): said by
    the loaded adapter's `prompt_kind`, else by its registry entry."""
    kind = getattr(_models.get(name), "prompt_kind", None)
    if kind is not None:
        return kind == "video"
    entry = REGISTRY.get(name)
    return entry is not None and entry.module == "cosmos"


def model_defaults(name: str) -> dict:
    """App defaults for the model, overridden by its adapter's `default_settings`."""
    real = REAL_DEFAULTS if REGISTRY.get(name) and REGISTRY[name].needs_weights else None
    base = DEFAULTS.get(name, CLIP_DEFAULTS if takes_clip(name) else real or DEFAULTS["toy-grid"])
    own = getattr(peek_model(name), "default_settings", None) or {}
    return {**base, **{k: v for k, v in own.items() if k in base}}


def model_examples(name: str) -> list[str]:
    return list(getattr(peek_model(name), "example_prompts", None) or EXAMPLES)[:12]


@functools.lru_cache(maxsize=1)
def example_clips() -> tuple[str, ...]:
    """Two short synthetic clips for the picker, written once per process to a temp folder
    (a disc crossing a gradient; a growing ring): nothing to ship, nothing to download."""
    folder = tempfile.mkdtemp(prefix="scd_clips_")
    yy, xx = np.mgrid[0:96, 0:128].astype(np.float32)
    paths = []
    for name, colour in (("red-ball", (220, 40, 40)), ("blue-ring", (40, 90, 220))):
        frames = []
        for t in range(CLIP_FRAMES):
            img = np.stack([40 + xx, 80 + yy, 160 + 0 * xx], -1)
            if name == "red-ball":
                mask = (xx - 16 - 8 * t) ** 2 + (yy - 48) ** 2 < 14 ** 2
            else:
                r = np.hypot(xx - 64, yy - 48)
                mask = abs(r - 6 - 3 * t) < 4
            img[mask] = colour
            frames.append(np.clip(img, 0, 255).astype(np.uint8))
        paths.append(R.write_mp4(frames, os.path.join(folder, f"{name}.mp4"), fps=8))
    return tuple(paths)


def model_info(name: str) -> str:
    entry = REGISTRY.get(name)
    if entry is None:
        return f"Unknown model {name!r}."
    reason = None if name in _models else availability(name)
    state = "ready" if reason is None else f"**unavailable here:** {reason}"
    return f"`{name}` ({entry.kind}): {entry.description}. {state}"


# ------------------------------------------------------------------------------ inputs

@dataclass(frozen=True)
class Settings:
    model: str
    method: str
    window: int
    init: str
    temperature: float
    top_k: int
    top_p: float
    cfg_scale: float
    seed: int
    prompt: str

    def engine_kwargs(self, **override) -> dict:
        d = asdict(replace(self, **override))
        d.pop("model"), d.pop("prompt")
        return d


def _number(value, name: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise gr.Error(f"{name} must be a number, got {value!r}.")
    if not np.isfinite(x):
        raise gr.Error(f"{name} must be a finite number, got {value!r}.")
    return x


def _integer(value, name: str) -> int:
    x = _number(value, name)
    if x != int(x):
        raise gr.Error(f"{name} must be a whole number, got {value!r}.")
    return int(x)


def check_model(model) -> None:
    if model not in REGISTRY or model in HIDDEN_MODELS:
        raise gr.Error(f"Unknown model {model!r}. Choose one of: {', '.join(model_names())}.")
    reason = None if model in _models else availability(model)
    if reason is not None:
        raise gr.Error(f"Model {model!r} is unavailable here: {reason}")


def clip_path(clip) -> str:
    """The prompt clip (a path from gr.Video, or a file dict) checked to be a readable video."""
    path = clip.get("path") if isinstance(clip, dict) else clip
    if path is None or path == "":
        raise gr.Error("Prompt clip: pick one of the example clips or upload a short video "
                       "(MP4) for the model to continue.")
    if not isinstance(path, str):
        raise gr.Error(f"Prompt clip: expected a video file, got {type(path).__name__}.")
    if not os.path.isfile(path):
        raise gr.Error(f"Prompt clip: file not found: {os.path.basename(path)!r}. "
                       "Pick an example clip or upload the video again.")
    if "|" in path:
        raise gr.Error("Prompt clip: the file name must not contain '|'; rename it and upload again.")
    import imageio.v3 as iio
    try:
        frames = iio.imiter(path)
        first = next(frames, None)
        frames.close()
    except Exception as exc:
        raise gr.Error(f"Prompt clip: cannot read {os.path.basename(path)!r} as a video "
                       f"({type(exc).__name__}). Upload an MP4 or WebM clip.")
    if first is None:
        raise gr.Error(f"Prompt clip: {os.path.basename(path)!r} has no frames.")
    return path


def resolve_prompt(model, prompt, clip=None, clip_text="") -> str:
    """The engine's prompt: the text box, or for a clip model 'clip.mp4' / 'clip.mp4|text'
    (the text only for Video2World; the adapter says so if the model takes none)."""
    check_model(model)
    if not takes_clip(model):
        return prompt
    if clip_text is not None and not isinstance(clip_text, str):
        raise gr.Error("Clip text must be text.")
    text = (clip_text or "").strip()
    if len(text) > MAX_PROMPT_CHARS:
        raise gr.Error(f"Clip text is {len(text):,} characters long; the limit is "
                       f"{MAX_PROMPT_CHARS}. Please shorten it.")
    path = clip_path(clip)
    return f"{path}|{text}" if text else path


def check_inputs(model, method, window, init, temperature, top_k, top_p, cfg_scale, seed,
                 prompt) -> Settings:
    """Every control checked with a message a user can act on (raises gr.Error)."""
    check_model(model)
    if method not in METHOD_NAMES:
        raise gr.Error(f"Unknown method {method!r}. Choose one of: {', '.join(METHOD_NAMES)}.")
    prompt = (prompt or "").strip() if isinstance(prompt, str) or prompt is None else None
    if prompt is None:
        raise gr.Error("The prompt must be text.")
    if not prompt:
        raise gr.Error("Please type a prompt (or click one of the examples).")
    if len(prompt) > MAX_PROMPT_CHARS and not takes_clip(model):  # a clip prompt: checked
        raise gr.Error(f"The prompt is {len(prompt):,} characters long; the limit is "
                       f"{MAX_PROMPT_CHARS}. Please shorten it.")
    window = _integer(window, "Window L")
    if method != "ar" and not 2 <= window <= MAX_WINDOW:
        raise gr.Error(f"Window L must be between 2 and {MAX_WINDOW} (tokens per forward pass); "
                       f"got {window}.")
    if init not in dict((v, k) for k, v in INITS):
        raise gr.Error(f"Unknown draft init {init!r}. Choose random, repeat-above or repeat-frame.")
    if init == "repeat-frame" and REGISTRY[model].kind != "video":
        raise gr.Error("Draft init 'repeat previous frame' needs a video model; "
                       f"{model!r} makes images.")
    temperature = _number(temperature, "Temperature")
    if not 0 <= temperature <= 10:
        raise gr.Error(f"Temperature must be between 0 (greedy) and 10; got {temperature}.")
    top_k = _integer(top_k, "Top-k")
    if top_k < 0:
        raise gr.Error(f"Top-k must be 0 (off) or a positive number of tokens; got {top_k}.")
    top_p = _number(top_p, "Top-p")
    if not 0 < top_p <= 1:
        raise gr.Error(f"Top-p must be in (0, 1]: it keeps the smallest set of tokens whose "
                       f"probability reaches top-p (1 = off); got {top_p}.")
    cfg_scale = _number(cfg_scale, "CFG scale")
    if not 0 <= cfg_scale <= 100:
        raise gr.Error(f"CFG scale must be between 0 and 100 (1 = no guidance); got {cfg_scale}.")
    seed = _integer(seed, "Seed")
    if not 0 <= seed < 2**63:
        raise gr.Error(f"Seed must be a non-negative whole number; got {seed}.")
    return Settings(model, method, window, init, temperature, top_k, top_p, cfg_scale, seed,
                    prompt)


def timed(gen: Iterator) -> Iterator[tuple[object, float]]:
    """Yield (item, seconds spent producing it): engine time without our rendering time.

    The engine's ValueError (an argument it rejects) becomes a gr.Error for the page.
    """
    while True:
        t = time.perf_counter()
        try:
            item = next(gen)
        except StopIteration:
            return
        except ValueError as exc:
            raise gr.Error(str(exc))
        yield item, time.perf_counter() - t


class Throttle:
    """Which iterations reach the page, and when.

    Full speed (pace 0): True at most once every `every` seconds (the first and the forced
    calls always pass). Slow motion (pace > 0): always True, after sleeping so that calls are
    at least max(pace, every) seconds apart: every iteration is shown.
    """

    def __init__(self, every: float, pace: float = 0.0) -> None:
        self.every, self.pace, self.last = every, pace, -1e9

    def __call__(self, force: bool = False) -> bool:
        now = time.perf_counter()
        if self.pace > 0:
            time.sleep(max(0.0, self.last + max(self.pace, self.every) - now))
            self.last = time.perf_counter()
            return True
        if force or now - self.last >= self.every:
            self.last = now
            return True
        return False


def check_pace(pace) -> float:
    pace = _number(pace, "Slow motion")
    if not 0 <= pace <= MAX_PACE:
        raise gr.Error(f"Slow motion must be between 0 (full speed) and {MAX_PACE} seconds per "
                       f"forward pass; got {pace}.")
    return pace


# ---------------------------------------------------------------------------- one run

def status_line(s: Settings, stats: R.TraceStats, wall: float, done: bool) -> str:
    n, total = stats.committed[-1], stats.num_tokens
    head = f"**{METHOD_NAMES[s.method]}** · {n}/{total} tokens · NFE {stats.nfe[-1]}"
    if not done:
        return head + f" · acceptance {stats.acceptance_rate:.2f} · decoding…"
    return (head + f" · **done** in {wall:.2f} s · step compression "
            f"{total / stats.nfe[-1]:.2f}x · acceptance {stats.acceptance_rate:.2f} · "
            f"mean accepted length {stats.mean_accepted_length:.2f}")


def prompt_note(model, prompt: str) -> str:
    """For bag-of-words models (the embedded ones): which prompt words the model knows."""
    known = getattr(getattr(model, "vocab", None), "known", None)
    if known is None:
        return ""
    words = known(prompt)
    if not words:
        return ("None of the prompt's words is in the model's vocabulary: this is an "
                "unconditional sample. Try an example prompt.\n\n")
    return f"Prompt words the model knows: {', '.join(words)}.\n\n"


def summary_markdown(s: Settings, stats: R.TraceStats, wall: float, history: dict) -> str:
    total, nfe = stats.num_tokens, stats.nfe[-1]
    ar = history.get("ar")
    speedup = (f"{ar['wall'] / wall:.2f}x (AR run of this session: {ar['wall']:.2f} s)"
               if ar and s.method != "ar" and wall > 0 else "run AR once to measure it")
    rows = [
        ("NFE", f"{nfe}", R.METRIC_HELP["nfe"]),
        ("step compression", f"{total / nfe:.2f}x", R.METRIC_HELP["compression"]),
        ("acceptance rate", f"{stats.acceptance_rate:.3f}", R.METRIC_HELP["acceptance"]),
        ("mean accepted length", f"{stats.mean_accepted_length:.2f}", R.METRIC_HELP["mean_len"]),
        ("wall time", f"{wall:.2f} s", "engine time of this run (rendering excluded)"),
        ("latency speed-up", speedup, R.METRIC_HELP["speedup"]),
    ]
    body = "\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows)
    return f"| metric | value | definition |\n|---|---|---|\n{body}"


def final_media(model, s: Settings, iterations: list) -> tuple[str | None, str | None]:
    """For a video model: the finished clip as MP4 and GIF (None, None for images)."""
    if REGISTRY[s.model].kind != "video":
        return None, None
    frames = R.decode_frames(model, iterations[-1].canvas[0])
    fps = float(getattr(model, "fps", 6))
    return R.export_clip(frames, f"{s.model}-{s.method}-seed{s.seed}", fps=fps)


@gpu(duration=120)
def generate_stream(model_name, method, window, init, temperature, top_k, top_p, cfg_scale,
                    seed, prompt, pace=0.0, history=None, clip=None, clip_text=""):
    """Decode one sample and stream its iterations to the page (all of them in slow motion,
    else at most ~20 a second). For a clip model the prompt is `clip` (+ `clip_text`)."""
    prompt = resolve_prompt(model_name, prompt, clip, clip_text)
    s = check_inputs(model_name, method, window, init, temperature, top_k, top_p, cfg_scale,
                     seed, prompt)
    pace = check_pace(pace)
    model = model_or_error(s.model)
    history = dict(history or {})
    if history.get("_model") != s.model:
        history = {"_model": s.model}
    stats, iterations, wall = R.TraceStats(tuple(model.grid)), [], 0.0
    pic_due, plot_due = Throttle(IMAGE_EVERY, pace), Throttle(PLOT_EVERY)
    gen = scd_core.stream(model, [s.prompt], **s.engine_kwargs())
    for it, dt in timed(gen):
        iterations.append(it)
        stats.add(it)
        wall += dt
        done = stats.done
        if not pic_due(done):
            continue
        out = {live_image: R.render_iteration(model, it), status: status_line(s, stats, wall, done)}
        if plot_due(done):
            curves = {m: (h["nfe"], h["committed"]) for m, h in history.items() if m != "_model"}
            curves[s.method] = (stats.nfe, stats.committed)
            out |= {chart_committed: R.committed_vs_nfe_figure(curves, stats.num_tokens, s.method),
                    chart_length: R.accepted_length_figure(stats),
                    chart_rate: R.acceptance_figure(stats),
                    heat_committed: R.committed_at_figure(stats),
                    heat_stability: R.stability_figure(stats)}
        if done:
            history[s.method] = {"nfe": stats.nfe, "committed": stats.committed, "wall": wall}
            mp4, gif = final_media(model, s, iterations)
            out |= {summary: prompt_note(model, s.prompt) + summary_markdown(s, stats, wall, history),
                    history_state: history,
                    last_run: {"model": s.model, "method": s.method, "iterations": iterations},
                    replay_slider: gr.Slider(minimum=0, maximum=len(iterations) - 1,
                                             value=len(iterations) - 1, step=1, interactive=True),
                    clip_video: mp4, clip_gif: gif, clip_files: [mp4, gif] if mp4 else None}
        yield out


# ------------------------------------------------------------------------------- race

RACE_ORDER = ["ar", "sjd", "scd-mc", "scd-gumbel"]


def race_table(model_tokens: dict, stats: dict, wall: dict) -> list[list]:
    ar_nfe, ar_wall, ar_tokens = stats["ar"].nfe[-1], wall["ar"], model_tokens["ar"]
    rows = []
    for m in RACE_ORDER:
        st = stats[m]
        rows.append([METHOD_NAMES[m], st.nfe[-1], round(wall[m], 3),
                     round(ar_nfe / st.nfe[-1], 2), round(ar_wall / wall[m], 2) if wall[m] else None,
                     round(st.acceptance_rate, 3) if m != "ar" else None,
                     round(st.mean_accepted_length, 2),
                     "yes" if torch.equal(model_tokens[m], ar_tokens) else "no"])
    return rows


RACE_HEADERS = ["method", "NFE", "wall (s)", "step compression", "latency speed-up",
                "acceptance rate", "mean accepted length", "same tokens as AR"]


@gpu(duration=240)
def race_stream(model_name, window, init, temperature, top_k, top_p, cfg_scale, seed, prompt,
                greedy=False, pace=0.0, history=None, clip=None, clip_text=""):
    """AR, SJD, SCD-MC and SCD-Gumbel in lockstep: each tick is one forward pass of each.

    The finished curves also go into the session history, so the Generate tab's chart shows
    them next to later runs."""
    prompt = resolve_prompt(model_name, prompt, clip, clip_text)
    s = check_inputs(model_name, "scd-mc", window, init, temperature, top_k, top_p, cfg_scale,
                     seed, prompt)
    pace = check_pace(pace)
    if greedy:
        s = replace(s, temperature=0.0)
    model = model_or_error(s.model)
    gens = {m: timed(scd_core.stream(model, [s.prompt], **s.engine_kwargs(method=m)))
            for m in RACE_ORDER}
    stats = {m: R.TraceStats(tuple(model.grid)) for m in RACE_ORDER}
    wall, last, tokens = dict.fromkeys(RACE_ORDER, 0.0), {}, {}
    pic_due, plot_due = Throttle(2 * IMAGE_EVERY, pace), Throttle(PLOT_EVERY)  # 4 pictures a tick
    pictures: dict[str, tuple[int, np.ndarray]] = {}     # method -> (iteration drawn, picture)
    active = list(RACE_ORDER)
    while active:
        for m in list(active):
            item = next(gens[m], None)
            if item is None:
                active.remove(m)
                continue
            it, dt = item
            wall[m] += dt
            stats[m].add(it)
            last[m] = it
            if stats[m].done:
                tokens[m] = it.canvas[0].clone()
        done = not active
        if not pic_due(done):
            continue
        for m in RACE_ORDER:     # draw only the panels that moved since the last update
            if pictures.get(m, (-1,))[0] != last[m].index:
                pictures[m] = (last[m].index, R.render_iteration(model, last[m]))
        out = {race_images[m]: pictures[m][1] for m in RACE_ORDER}
        out[race_status] = " · ".join(
            f"**{METHOD_NAMES[m]}**: NFE {stats[m].nfe[-1]}, {stats[m].committed[-1]}/"
            f"{stats[m].num_tokens}" + (" ✓" if stats[m].done else "") for m in RACE_ORDER)
        if plot_due(done):
            curves = {m: (stats[m].nfe, stats[m].committed) for m in RACE_ORDER}
            out[race_chart] = R.committed_vs_nfe_figure(curves, stats["ar"].num_tokens)
        if done:
            out[race_summary] = race_table(tokens, stats, wall)
            out[history_state] = {"_model": s.model, **{
                m: {"nfe": stats[m].nfe, "committed": stats[m].committed, "wall": wall[m]}
                for m in RACE_ORDER}}
            same = all(torch.equal(tokens[m], tokens["ar"]) for m in RACE_ORDER)
            out[race_note] = (
                f"Greedy (temperature 0): every method returned **{'the same' if same else 'DIFFERENT'}"
                "** tokens as AR, pixel for pixel." if s.temperature == 0 else
                "Sampling (temperature > 0): each method draws a **different sample from the same "
                "distribution**: the images differ, their law does not. Tick *greedy* to see "
                "identical pixels from every method.")
        yield out


# ----------------------------------------------------------------------------- replay

def replay_view(index, run: dict | None):
    if not run or not run.get("iterations"):
        raise gr.Error("Nothing to replay yet: generate an image first.")
    its = run["iterations"]
    i = int(min(max(_integer(index, "Iteration"), 0), len(its) - 1))
    it = its[i]
    model = model_or_error(run["model"])
    nb, na = int(it.n_before[0]), int(it.n_after[0])
    text = (f"iteration {i} of {len(its) - 1} · NFE {it.nfe} · committed {nb} → {na} "
            f"(+{na - nb}: {int(it.accepted[0].sum())} accepted drafts"
            f"{', 1 resampled' if bool(it.resampled[0]) else ''})")
    return R.render_iteration(model, it), text, R.accept_prob_figure(it, tuple(model.grid))


@gpu(duration=120)
def export_run(run: dict | None):
    if not run or not run.get("iterations"):
        raise gr.Error("Nothing to export yet: generate an image first.")
    model = model_or_error(run["model"])
    mp4, gif = R.export_decoding(model, run["iterations"], f"{run['model']}-{run['method']}-decoding")
    return mp4, [mp4, gif]


def is_video(name: str) -> bool:
    return name in REGISTRY and REGISTRY[name].kind == "video"


def on_model_change(name: str):
    """Show what the model is (or why it is unavailable) and load its default settings."""
    d = model_defaults(name)
    init = d["init"] if d["init"] != "repeat-frame" or is_video(name) else "random"
    clip = takes_clip(name)
    return (model_info(name), d["window"], init, d["temperature"], d["top_k"], d["top_p"],
            d["cfg_scale"], d["pace"], gr.Row(visible=is_video(name)),
            gr.Dataset(samples=[[p] for p in model_examples(name)]),
            gr.Column(visible=not clip), gr.Column(visible=clip))


# ----------------------------------------------------------------------------- layout

EXPLAIN = r"""
### How speculative Jacobi decoding stays exact
An AR model needs one forward pass per token. **SJD** feeds a window of **L** tokens per pass:
the last committed token and L-1 *drafts* for the next positions. One pass returns the model's
distribution **p** at every window position. Going left to right, a draft x drawn from **q**
is **accepted** if `U < min(1, p(x) / q(x))`. At the first rejection the position gets a
sample of the **residual** `norm(max(0, p - q))`, and the rest of the window is redrafted.
If every draft passes, one **bonus** token is sampled from the last p. This is speculative
sampling: every committed token has exactly the AR distribution, whatever the drafts were.

**SCD** (speculative *coupled* decoding) changes only how the next drafts are drawn: coupled
to the previous ones, so they stop flickering and get accepted more often.
- **Maximal coupling**: keep the previous draft with probability `min(1, p_t / p_{t-1})`,
  otherwise draw from the residual `norm(max(0, p_t - p_{t-1}))`. The draft changes only when
  the distribution really moved.
- **Gumbel coupling**: draft = `argmax(log p + G)` with a Gumbel vector **G fixed per
  position**: the same noise at every iteration, so the draft changes only when p does.

Plain SJD redraws independently each time, so drafts flicker (low *draft stability*).

### Reading the views
- **The picture**: the committed tokens and the current drafts, decoded together. Plain
  cells were committed earlier; **green** outlines are drafts accepted by this pass;
  **orange/red** is the first rejected draft, replaced by a residual sample; **blue** is the
  one token sampled from p (an AR step, or the bonus after a fully accepted window);
  **hatched** cells are still drafts; **grey** cells hold nothing yet.
- **Tokens vs NFE**: AR climbs the dashed diagonal, one token per forward pass; a speculative
  method climbs in steps, and its slope is the tokens it commits per pass.
- **Committed at iteration k**: the pass that committed each token. Long runs of one colour
  are several tokens accepted in one pass (CLLM's "fast forwarding").
- **Draft stability**: the longest run of passes in which a position's draft kept the same
  token (CLLM's "stationary tokens"). Coupling raises it; that is where SCD's gain comes from.
- **Replay**: step through every recorded pass, with the acceptance probability
  `min(1, p/q)` of each draft it verified.
- **Race**: the four methods on the same prompt and seed. With sampling they draw different
  images from the same distribution; in greedy mode (temperature 0) every method returns
  exactly AR's tokens.
"""

METRICS_MD = " · ".join(f"*{v}*" for v in R.METRIC_HELP.values())

with gr.Blocks(title="Speculative coupled decoding") as demo:
    history_state = gr.State({})
    last_run = gr.State(None)
    gr.Markdown("# Lossless speculative decoding for AR image & video models\n"
                "AR, SJD and SCD (coupled SJD) sample **exactly** the same distribution; "
                "SJD and SCD need fewer forward passes. " + device_note(), elem_id="header")
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            model_dd = gr.Dropdown(model_choices(), value=default_model(), label="Model",
                                   elem_id="model")
            model_md = gr.Markdown(model_info(default_model()), elem_id="model-info")
            with gr.Column(visible=not takes_clip(default_model())) as text_box:
                prompt_tb = gr.Textbox("red apple", label="Prompt", lines=1, max_lines=3,
                                       elem_id="prompt")
                examples = gr.Examples([[p] for p in model_examples(default_model())],
                                       inputs=prompt_tb, label="Example prompts")
            with gr.Column(visible=takes_clip(default_model())) as clip_box:
                clip_in = gr.Video(label="Prompt clip: the model continues it", sources=["upload"],
                                   format=None, include_audio=True, elem_id="prompt-clip",
                                   height=200)
                clip_text_tb = gr.Textbox("", label="Clip text (Video2World only)", lines=1,
                                          max_lines=3, elem_id="clip-text",
                                          info="optional; leave empty for the 4B base model")
                gr.Examples([[p] for p in example_clips()], inputs=clip_in,
                            label="Example clips")
            method_rd = gr.Radio(METHODS, value="scd-mc", label="Method", elem_id="method")
            d0 = model_defaults(default_model())
            with gr.Row():
                window_nb = gr.Number(d0["window"], label="Window L", precision=0,
                                      info=f"tokens per pass, 2-{MAX_WINDOW}", elem_id="window")
                init_dd = gr.Dropdown(INITS, value=d0["init"], label="Draft init", elem_id="init")
            with gr.Row():
                temp_nb = gr.Number(d0["temperature"], label="Temperature", info="0 = greedy",
                                    elem_id="temperature")
                topk_nb = gr.Number(d0["top_k"], label="Top-k", precision=0, info="0 = off",
                                    elem_id="top-k")
            with gr.Row():
                topp_nb = gr.Number(d0["top_p"], label="Top-p", info="(0, 1], 1 = off",
                                    elem_id="top-p")
                cfg_nb = gr.Number(d0["cfg_scale"], label="CFG scale", info="1 = no guidance",
                                   elem_id="cfg")
            with gr.Row():
                seed_nb = gr.Number(0, label="Seed", precision=0, elem_id="seed")
                pace_nb = gr.Number(d0["pace"], label="Slow motion", elem_id="pace",
                                    info="s per forward pass on screen; 0 = full speed")
            with gr.Row():
                gen_btn = gr.Button("Generate", variant="primary", elem_id="generate")
                race_btn = gr.Button("Race all methods", elem_id="race")
                stop_btn = gr.Button("Stop", variant="stop", elem_id="stop")
        with gr.Column(scale=2):
            with gr.Tabs():
                with gr.Tab("Generate", id="tab-generate"):
                    with gr.Row():
                        with gr.Column(scale=1):
                            live_image = gr.Image(label="Committed tokens + current drafts",
                                                  format="png", type="numpy", interactive=False,
                                                  elem_id="live-image", height=360)
                            gr.HTML(R.legend_html())
                            status = gr.Markdown("Press **Generate**.", elem_id="status")
                        with gr.Column(scale=1):
                            chart_committed = gr.Plot(label="Tokens vs NFE", elem_id="chart-committed")
                    with gr.Row():
                        chart_length = gr.Plot(label="Accepted length", elem_id="chart-length")
                        chart_rate = gr.Plot(label="Acceptance rate", elem_id="chart-rate")
                    summary = gr.Markdown(elem_id="summary")
                    with gr.Row():
                        heat_committed = gr.Plot(label="Committed at iteration k",
                                                 elem_id="heat-committed")
                        heat_stability = gr.Plot(label="Draft stability", elem_id="heat-stability")
                    with gr.Row(visible=is_video(default_model())) as clip_row:
                        clip_video = gr.Video(label="Finished clip (MP4)", elem_id="clip-video",
                                              interactive=False, height=300)
                        clip_gif = gr.Image(label="Finished clip (GIF)", type="filepath",
                                            interactive=False, elem_id="clip-gif", height=300)
                        clip_files = gr.File(label="Download the clip (MP4, GIF)",
                                             file_count="multiple", interactive=False,
                                             elem_id="clip-files", height=300)
                    with gr.Accordion("Replay and export the last run", open=False):
                        replay_slider = gr.Slider(0, 1, value=0, step=1, label="Iteration",
                                                  interactive=True, elem_id="replay-slider")
                        with gr.Row():
                            replay_image = gr.Image(label="Replay", format="png",
                                                    interactive=False, elem_id="replay-image")
                            replay_probs = gr.Plot(label="Acceptance probabilities",
                                                   elem_id="replay-probs")
                        replay_text = gr.Markdown()
                        with gr.Row():
                            with gr.Column():
                                export_btn = gr.Button("Export the decoding as GIF + MP4",
                                                       elem_id="export")
                                export_files = gr.File(label="Downloads", file_count="multiple")
                            export_video = gr.Video(label="Decoding", interactive=False,
                                                    height=400)
                with gr.Tab("Race", id="tab-race"):
                    gr.Markdown("One click runs **AR, SJD, SCD-MC and SCD-Gumbel** on the same "
                                "prompt and seed, one forward pass each per tick. With sampling, "
                                "the methods draw **different samples from the same "
                                "distribution**; in greedy mode every method returns "
                                "identical pixels: the lossless property made visible.")
                    greedy_cb = gr.Checkbox(False, label="Greedy (temperature 0): identical "
                                            "pixels from every method", elem_id="greedy")
                    with gr.Row():
                        race_images = {m: gr.Image(label=METHOD_NAMES[m], format="png",
                                                   interactive=False, elem_id=f"race-{m}",
                                                   min_width=120, height=190)
                                       for m in RACE_ORDER}
                    gr.HTML(R.legend_html().replace('id="scd-legend"', 'id="race-legend"'))
                    race_status = gr.Markdown(elem_id="race-status")
                    race_note = gr.Markdown(elem_id="race-note")
                    race_summary = gr.Dataframe(headers=RACE_HEADERS, label="Race summary",
                                                interactive=False, elem_id="race-summary")
                    gr.Markdown(" · ".join(R.METRIC_HELP[k] for k in
                                           ("compression", "speedup", "acceptance", "mean_len"))
                                + " (wall: engine time of each method, same process)")
                    race_chart = gr.Plot(label="Tokens vs NFE", elem_id="race-chart")
                with gr.Tab("How it works", id="tab-explain"):
                    gr.Markdown(EXPLAIN)
            gr.Markdown("Metrics: " + METRICS_MD)

    controls = [model_dd, method_rd, window_nb, init_dd, temp_nb, topk_nb, topp_nb, cfg_nb,
                seed_nb, prompt_tb]
    gen_outputs = [live_image, status, chart_committed, chart_length, chart_rate,
                   heat_committed, heat_stability, summary, history_state, last_run,
                   replay_slider, clip_video, clip_gif, clip_files]
    clip_inputs = [clip_in, clip_text_tb]
    gen_event = gen_btn.click(generate_stream, controls + [pace_nb, history_state] + clip_inputs,
                              gen_outputs,
                              api_name="generate", concurrency_limit=1, concurrency_id="gpu",
                              time_limit=600)
    race_inputs = [model_dd, window_nb, init_dd, temp_nb, topk_nb, topp_nb, cfg_nb, seed_nb,
                   prompt_tb, greedy_cb, pace_nb, history_state] + clip_inputs
    race_event = race_btn.click(race_stream, race_inputs,
                                [*race_images.values(), race_status, race_chart, race_summary,
                                 race_note, history_state],
                                api_name="race", concurrency_limit=1, concurrency_id="gpu",
                                time_limit=900)
    stop_btn.click(None, None, None, cancels=[gen_event, race_event])
    model_dd.change(on_model_change, model_dd,
                    [model_md, window_nb, init_dd, temp_nb, topk_nb, topp_nb, cfg_nb, pace_nb,
                     clip_row,
                     examples.dataset, text_box, clip_box],
                    api_visibility="private")
    replay_slider.release(replay_view, [replay_slider, last_run],
                          [replay_image, replay_text, replay_probs],
                          api_name="replay")
    export_btn.click(export_run, last_run, [export_video, export_files], api_name="export",
                     concurrency_limit=1, concurrency_id="gpu", time_limit=300)

demo.queue(max_size=16, default_concurrency_limit=1)


def main() -> None:
    if os.environ.get("SCD_THREADS"):   # else the embedded models' own choice (1 on <= 2 cores)
        torch.set_num_threads(int(os.environ["SCD_THREADS"]))
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                theme=gr.themes.Soft(), max_file_size=MAX_CLIP_UPLOAD)


if __name__ == "__main__":
    main()
