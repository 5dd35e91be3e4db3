"""What the demo page needs besides Gradio: the model list, per-model settings, the checks
that are the page's own, the servers whose forward passes visitors share, stop flags per
visitor and the pace of live updates.

The arguments of a decode are checked by the library (`scd_core.decoding.validate`, a
ValueError naming the argument); the page only turns widget values into numbers first and
adds its own limits (prompt length, slow-motion pace, race samples).
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import torch

from demo.clips import clip_prompt
from scd_core.decoding import METHODS, validate
from scd_core.models import REGISTRY
from scd_core.models.status import MAX_GPU_SECONDS, MIN_GPU_SECONDS, gpu_seconds, model_status
from scd_core.protocols import optional
from scd_core.race import Race
from scd_core.settings import Settings
from scd_core.serve import Request, Server
from scd_core.trace import Iteration


@dataclass(frozen=True)
class Clock:
    """The clock the page paces its updates by (seconds); tests give one that never waits."""
    now: Callable[[], float] = time.perf_counter
    sleep: Callable[[float], None] = time.sleep


CLOCK = Clock()

MAX_PROMPT_CHARS = 500
MAX_PACE = 2.0                       # seconds per forward pass on screen
MAX_SAMPLES = 16                     # race samples per method
SHOW_TEST_MODELS = "SCD_SHOW_TEST_MODELS"
log = logging.getLogger("scd_demo")     # the page's one-line notes (app.main shows them)
IMAGE_EVERY, PLOT_EVERY, STATUS_EVERY = 0.1, 0.5, 0.5       # seconds between live updates
FULL_SPEED_EVERY = 0.25  # full speed: a picture at most this often, none before (a faster run
                         # shows its final picture only: the eye would not follow)
FIRST_PAINT = 0.1        # seconds for the browser to show the final picture before the charts

# Page defaults per model: window, draft init, slow motion (s per pass on screen), race
# samples; sampling settings come from the model's own `default_settings`.
PAGE_DEFAULTS = {
    "texture": dict(window=16, init="random", pace=0.02, samples=8),
    "tiny": dict(window=16, init="random", pace=0.15, samples=8),
    "tiny-video": dict(window=32, init="repeat-frame", pace=0.05, samples=8),
    "toy-grid": dict(window=16, init="random", pace=0.05, samples=8),
}
EMBEDDED_DEFAULTS = dict(window=16, init="random", pace=0.05, samples=8)
REAL_DEFAULTS = dict(window=32, init="random", pace=0.0, samples=2)
CLIP_DEFAULTS = dict(window=128, init="repeat-frame", pace=0.0, samples=2)
REAL_SAMPLING = dict(temperature=1.0, top_k=1000, top_p=1.0, cfg_scale=5.0)
CLIP_SAMPLING = dict(temperature=1.0, top_k=0, top_p=0.8, cfg_scale=1.0)
ORDER = ["texture", "tiny", "tiny-video"]           # listed first, in this order


# ------------------------------------------------------------------------------ models

def listed_models() -> list[str]:
    """The models the page offers: test-only ones only when SCD_SHOW_TEST_MODELS=1."""
    show_test = os.environ.get(SHOW_TEST_MODELS, "") not in ("", "0")
    names = [n for n in REGISTRY if show_test or not REGISTRY[n].test_only]
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), 0))


def takes_clip(name: str) -> bool:
    """Whether the model's prompt is a video clip to continue (the Cosmos family)."""
    entry = REGISTRY.get(name)
    return entry is not None and entry.module == "cosmos"


def is_video(name: str) -> bool:
    entry = REGISTRY.get(name)
    return entry is not None and entry.kind == "video"


def unavailable(name: str, loaded: bool = False) -> str | None:
    """None when the model can run here (shipped, cached, downloadable, or loaded already),
    else the full reason."""
    if name not in REGISTRY:
        return f"unknown model {name!r}"
    status = model_status(name)
    return None if loaded or status.usable else status.reason


def model_label(name: str) -> str:
    """For the model list: the name and where the model stands here (embedded, cached,
    downloadable with its size, needs GPU, unavailable)."""
    status = model_status(name)
    size = f", {status.download_gb:.1f} GB" if status.state == "downloadable" and status.download_gb else ""
    return f"{name} · {status.state}{size}"


def model_note(name: str, loaded: bool = False) -> str:
    """What the model is and where it stands here, with the full reason when it cannot run."""
    entry = REGISTRY.get(name)
    if entry is None:
        return f"Unknown model {name!r}."
    status = model_status(name)
    if loaded:
        state = " Loaded."
    elif status.usable:
        state = f" {status.state.capitalize()}: {status.reason}."
    else:
        state = f" **Cannot run here ({status.state}):** {status.reason}."
    return f"`{name}`: {entry.description}.{state}"


def page_defaults(name: str) -> dict:
    if name in PAGE_DEFAULTS:
        return dict(PAGE_DEFAULTS[name])
    entry = REGISTRY.get(name)
    if takes_clip(name):
        return dict(CLIP_DEFAULTS)
    return dict(REAL_DEFAULTS if entry is not None and entry.needs_weights else EMBEDDED_DEFAULTS)


def sampling_defaults(name: str, model=None) -> dict:
    """Temperature, top-k, top-p, CFG: the model's `default_settings` when it is loaded."""
    base = CLIP_SAMPLING if takes_clip(name) else REAL_SAMPLING if \
        REGISTRY.get(name) is not None and REGISTRY[name].needs_weights else \
        dict(temperature=1.0, top_k=0, top_p=1.0, cfg_scale=1.0)
    own = optional(model, "default_settings") or {}
    return {**base, **{k: v for k, v in own.items() if k in base}}


class Models:
    """The page's models, loaded (and downloaded) on first use into `cache` with this device's
    load arguments (large models in bfloat16 on a GPU). Every load also closes the servers of
    the models the cache has dropped meanwhile."""

    def __init__(self, cache, device: str, servers: "Servers") -> None:
        self.cache, self.device, self.servers = cache, device, servers

    def kwargs(self, name: str) -> dict:
        large_on_gpu = self.device == "cuda" and REGISTRY[name].needs_weights
        return dict(device=self.device, **({"dtype": torch.bfloat16} if large_on_gpu else {}))

    def get(self, name: str, progress=None):
        """The model; `progress(done, total, repo)` hears a download."""
        model = self.cache.get(name, **self.kwargs(name), **({"progress": progress} if progress else {}))
        self.servers.keep(self.loaded(n) for n in self.cache.names())
        return model

    def loaded(self, name: str):
        """The model if it is loaded, else None (never loads)."""
        return self.cache.peek(name, **self.kwargs(name)) if name in REGISTRY else None

    def put(self, name: str, model) -> None:
        """Use this ready model for `name` (tests, embedders)."""
        self.cache.put(name, model, **self.kwargs(name))

    def load_note(self, name: str, progress=None) -> str:
        """Load a large model as soon as it is picked (`progress` as for `get`); the model's
        note, with the reason when it could not load (Generate then says it again)."""
        if self.loaded(name) is None and REGISTRY[name].needs_weights and unavailable(name) is None:
            try:
                self.get(name, progress)
            except Exception as exc:              # missing weights, no memory...: said, not raised
                log.info("could not load %s: %s", name, exc)
                return model_note(name) + f" **Could not load it:** {exc}"
        return model_note(name, self.loaded(name) is not None)

    def defaults(self, name: str) -> tuple[dict, dict, bool]:
        """The page's defaults for the model, its sampling defaults, and whether it can run here."""
        ok = unavailable(name, self.loaded(name) is not None) is None
        model = self.at_hand(name) if ok else None
        page, own = page_defaults(name), optional(model, "default_settings") or {}
        if own:                                # the model's own window and init, as the library reads them
            s = Settings.for_model(model)
            page.update({k: getattr(s, k) for k in ("window", "init") if k in own})
        return page, sampling_defaults(name, model), ok

    def examples(self, name: str) -> list[str]:
        """Up to 8 prompts the model draws recognisably (an embedded model loads to say)."""
        return list(optional(self.at_hand(name), "example_prompts") or ["a red apple"])[:8]

    def at_hand(self, name: str):
        """The model if it is loaded or embedded (loading an embedded one), else None: a model
        that needs weights is never loaded just to read its settings."""
        entry = REGISTRY.get(name)
        return self.loaded(name) or (self.get(name) if entry and not entry.needs_weights else None)


# ------------------------------------------------------------------------------ inputs

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
    if len(prompt) > MAX_PROMPT_CHARS and not clip_model:
        raise ValueError(f"prompt: {len(prompt):,} characters long; the limit is "
                         f"{MAX_PROMPT_CHARS}. Please shorten it.")
    return prompt


def check_pace(pace) -> float:
    pace = as_float(pace)
    if not isinstance(pace, float) or not 0 <= pace <= MAX_PACE:
        raise ValueError(f"slow motion must be between 0 (full speed) and {MAX_PACE} seconds per "
                         f"forward pass, got {pace!r}")
    return pace


def check_samples(samples) -> int:
    samples = as_int(samples)
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_SAMPLES:
        raise ValueError(f"samples must be a whole number from 1 to {MAX_SAMPLES}, got {samples!r}")
    return samples


def check_model(name, loaded: bool = False) -> str:
    if not isinstance(name, str) or name not in listed_models():
        raise ValueError(f"model: unknown model {name!r}; choose one of {', '.join(listed_models())}")
    reason = unavailable(name, loaded)
    if reason is not None:
        raise ValueError(f"model: {name!r} is not available here: {reason}")
    return name


def settings(model, prompt: str, method: str, window, init, temperature, top_k, top_p, cfg_scale,
             seed) -> Race:
    """Widget values -> the run's prompt, Settings and seed, checked by the library (its
    ValueError names the argument). `model` is the loaded model or, before loading, anything
    with `grid` and `vocab_size`."""
    s = Settings(method=method, window=as_int(window), init=init, temperature=as_float(temperature),
                 top_k=as_int(top_k), top_p=as_float(top_p), cfg_scale=as_float(cfg_scale))
    _, seeds = validate(model, [prompt], s, as_int(seed))
    return Race(prompt, s, seeds[0])


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


# ----------------------------------------------------------------------------- serving

class Servers:
    """One `scd_core.serve.Server` per loaded model, made on first use: requests with the same
    settings share its forward passes, and each row keeps its method, window and seed (no
    serving policy), so a seed gives the same sample however busy the page is.

    Every server holds `device_lock` for each pass; a run that must be timed alone (the race)
    takes it for its whole decode. Servers are keyed by the model object: `keep(models)`
    closes the servers of any other model (one the model cache dropped, or replaced), once
    their requests are done, so that nothing here keeps a dropped model alive.
    """

    def __init__(self, max_batch: int = 32) -> None:
        self.max_batch = max_batch
        self.device_lock = threading.Lock()
        self.timing_alone = threading.Event()          # set while a run timed alone holds the device
        self._lock = threading.Lock()
        self._servers: dict[int, Server] = {}          # id(model) -> its server (which holds it)

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        """Hold the device for a run timed alone: no shared pass runs meanwhile."""
        with self.device_lock:
            self.timing_alone.set()
            try:
                yield
            finally:
                self.timing_alone.clear()

    def get(self, model) -> Server:
        with self._lock:
            server = self._servers.get(id(model))
            if server is None:
                server = Server(model, self.max_batch, device_lock=self.device_lock)
                self._servers[id(model)] = server
            return server

    def submit(self, model, settings: Settings, method: str) -> Request:
        """One row on the model's server; a ValueError names a bad argument at once."""
        return self.get(model).submit(settings.prompt, settings.seed, settings.of(method))

    def keep(self, models: Iterable) -> None:
        """Close the servers of every model not in `models` (in the background: a server
        finishes the requests it has)."""
        live = {id(m) for m in models if m is not None}
        with self._lock:
            gone = [server for key, server in self._servers.items() if key not in live]
            self._servers = {key: server for key, server in self._servers.items() if key in live}
        for server in gone:
            threading.Thread(target=server.close, name="scd-server-close", daemon=True).start()

    def models(self) -> list:
        with self._lock:
            return [server.model for server in self._servers.values()]


def follow(request: Request, stopped: Callable[[], bool], poll: float = 0.05,
           waiting: Callable[[], bool] = lambda: False) -> Iterator[Iteration | None]:
    """A served request's records as they arrive. Ends when the request ends (raising its
    error if the model refused its start), or within `poll` seconds of `stopped()` turning
    true even while the server waits for the device. Before the first record it yields None
    once if `waiting()` turns true (a run timed alone holds the device). However it ends (the
    caller may stop reading), the request is cancelled: its row leaves at the next boundary."""
    seen, told = 0, False
    try:
        while True:
            finished = request.finished.is_set()     # first: every record precedes the end
            while seen < len(request.records):
                yield request.records[seen]
                seen += 1
            if finished:
                if request.error is not None:
                    raise request.error
                return
            if stopped():
                return
            if not seen and not told and waiting():
                told = True
                yield None
            request.finished.wait(poll)
    finally:
        request.cancel()


def shown(request: Request, pace: float, stopped: Callable[[], bool],
          waiting: Callable[[], bool] = lambda: False,
          clock: Clock = CLOCK) -> Iterator[tuple[Iteration | None, bool, bool]]:
    """A served request's records as a Generate run shows them: (record, picture due, charts
    due), and (None, False, False) if its first pass waits for a run timed alone (`waiting`,
    as for `follow`). Slow motion (pace > 0) shows every pass, `max(pace, IMAGE_EVERY)` seconds apart; a
    Stop cuts the wait short and ends it there (what is shown stays). Full speed shows a
    picture at most every FULL_SPEED_EVERY * B seconds and none before, the live charts every
    PLOT_EVERY * B, where B rows share the pass: B visitors together get the updates one
    would, so that drawing them does not slow the shared decoding."""
    picture = Pacer(IMAGE_EVERY, pace, stopped, clock=clock) if pace else \
        Pacer(FULL_SPEED_EVERY, wait_first=True, clock=clock)
    charts = Pacer(PLOT_EVERY, wait_first=True, clock=clock)
    for record in follow(request, stopped, waiting=waiting):
        if record is None:
            yield None, False, False
            continue
        share = request.batch_sizes[record.index]
        due = picture(share=share)
        if pace and stopped():
            return
        yield record, due and not stopped(), due and charts(share=share)


def shared_rows(request: Request, records: int) -> int:
    """The most other rows that one of the request's first `records` passes decoded with it."""
    return max(request.batch_sizes[:records], default=1) - 1


# ----------------------------------------------------------------------- stop and pace

class Stops:
    """Stop requests per visitor, by time stamps: a run clicked at or before the visitor's
    last Stop is stopped (running or still waiting in the queue), a later one is not. The
    page stamps both clicks with the browser's clock; a call without a stamp (the API) gets
    the server's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at: dict[str, float] = {}

    @staticmethod
    def stamp(value=None) -> float:
        """A click's time stamp in milliseconds: the browser's, else the server's clock now."""
        return float(value) if isinstance(value, (int, float)) and value > 0 else time.time() * 1000

    def stop(self, key: str, at=None) -> None:
        with self._lock:
            self._at[key] = max(self._at.get(key, float("-inf")), self.stamp(at))

    def stopped(self, key: str, ticket: float) -> bool:
        return ticket <= self._at.get(key, float("-inf"))

    def forget(self, key: str) -> None:
        with self._lock:
            self._at.pop(key, None)


class Pacer:
    """When a live view may update.

    Full speed (pace 0): at most once every `every * share` seconds, where `share` is the
    caller's part of the work (a row in a batch of B: B, so that B visitors together get the
    updates one would); forced calls always pass; the first passes too, unless `wait_first`.
    Slow motion: every call passes, `max(pace, every)` seconds after the previous one; the
    wait is cut short when `stopped()` turns true, so a stop is seen within a pass.
    """

    def __init__(self, every: float, pace: float = 0.0, stopped: Callable[[], bool] = lambda: False,
                 wait_first: bool = False, clock: Clock = CLOCK):
        self.every, self.pace, self.stopped, self.clock = every, pace, stopped, clock
        self.last = clock.now() if wait_first else -1e9

    def __call__(self, force: bool = False, share: float = 1.0) -> bool:
        now = self.clock.now()
        if self.pace > 0:
            until = self.last + max(self.pace, self.every)
            while now < until and not self.stopped():
                self.clock.sleep(min(0.02, until - now))
                now = self.clock.now()
            self.last = now
            return True
        if force or now - self.last >= self.every * share:
            self.last = now
            return True
        return False


def in_full(updates: Iterable[dict], outputs: Sequence) -> Iterator[dict]:
    """A stream of page updates (dicts, output -> value) in which every update names every
    output already given a value in this stream, repeating the value it got last.

    Gradio treats an output left out of a streamed update as "no change", and keeps a copy
    of the component in the visitor's session each time such an output later gets a value;
    the copies stay as long as the session does. Repeating the last value costs little: a
    stream sends each update as the difference from the one before."""
    last: dict = {}
    for update in updates:
        last.update(update)
        yield {o: last[o] for o in outputs if o in last}


def not_started(found: dict[str, str]) -> str:
    """Beside the buttons: the inputs `problems` found, or nothing."""
    return "" if not found else "**Not started:** " + "; ".join(found.values()) + "."


def history_of(history: dict | None, name: str) -> dict:
    """This session's earlier runs (by method) on model `name`; another model's are dropped."""
    return dict(history or {}) if (history or {}).get("_model") == name else {"_model": name}


def prompt_note(model, prompt: str) -> str:
    """For models that read a few known words (the embedded ones): which words they read."""
    known = getattr(optional(model, "vocab"), "known", None)
    if known is None:
        return ""
    words = known(prompt)
    if not words:
        return ("None of the prompt's words is known to this model: this is an unconditional "
                "sample. Try an example prompt.\n\n")
    return f"Prompt words the model knows: {', '.join(words)}.\n\n"


def now(clock: Clock = CLOCK) -> float:
    return clock.now()


def sleep_until(deadline: float, stopped: Callable[[], bool] = lambda: False,
                clock: Clock = CLOCK) -> None:
    """Sleep until `deadline` (the clock's seconds) in short steps, waking early on a stop."""
    while not stopped():
        left = deadline - clock.now()
        if left <= 0:
            return
        clock.sleep(min(0.02, left))


HEADER = ("## Lossless speculative decoding for AR image & video models\n"
          "AR, SJD and SCD (coupled SJD) sample **exactly** the same distribution; SJD and SCD "
          "need fewer forward passes. ")

GENERATE_HINT = ("Press **Generate** to watch one sample form, pass by pass, or **Race all methods** to "
                 "compare them over several samples. Visitors generating with the same settings share "
                 "forward passes; a seed gives the same picture however busy the page is.")
STOPPED_EARLY = "**Stopped** before its first pass."     # in the queue, or before its row got one
WAITING = ("**Waiting:** a race is timing each method alone, with nothing else on the device; "
           "your sample starts as soon as the method being timed is done.")
RACE_HINT = ("Press **Race all methods**: K samples per method, each method timed alone, then replayed "
             "side by side.")

HOW_IT_WORKS = r"""
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
  position**: the same noise at every pass, so the draft changes only when p does.

Plain SJD redraws independently each time, so its drafts flicker: low **draft stability**
(the share of carried-over drafts whose token did not change from one pass to the next).

### When coupling helps most
Coupling keeps a draft as long as p at its position stays put. If p at a position depends
only on nearby tokens (the synthetic **texture** model: its left and upper neighbours), a
change at the front of the window leaves p further along untouched, coupled drafts there
stay valid, and SCD needs about half of SJD's passes, as on Lumina-mGPT in the paper. If p
moves wherever an earlier token changes (the trained **tiny** emoji model reads its whole
prefix), coupled drafts go stale too and the gap is smaller. The race measures both effects
and says which it found.

### Reading the views
- **The picture**: committed tokens and current drafts, decoded together. Plain cells were
  committed earlier; **green** outlines: drafts accepted by this pass; **orange/red**: the
  first rejected draft, replaced by a residual sample; **blue**: the one token sampled from p
  (an AR step, or the bonus after a fully accepted window); **hatched**: still drafts;
  **grey**: nothing there yet.
- **Tokens vs NFE**: AR climbs the dashed diagonal, one token per forward pass; a speculative
  method climbs in steps, and its slope is the tokens it commits per pass.
- **Drafts changed per pass** and the **trajectory** strip (one line per pass, one column per
  position): red drafts changed since the previous pass (flicker), dark ones stayed.
- **Race**: K samples per method (seeds s, s+1, ...), each method decoded alone and timed
  alone, then replayed side by side by NFE. The table gives means over the samples with their
  range. In greedy mode (temperature 0) every method returns exactly AR's tokens.

### Many visitors at once
Visitors who press **Generate** with the same model and settings share forward passes: their
samples are decoded as one batch, each joining at the next pass and leaving as soon as it is
complete, and slow motion only paces what your page shows. Your method, window and seed always
run as you chose them, and each sample draws its random numbers from its own seed, so a seed
gives the same picture however busy the page is. A run that shared its passes says so: its
wall time includes the other samples' work, so it gives no latency speed-up; the **Race**
times each method alone.
"""


# ------------------------------------------------------------------------ whole inputs

INPUTS = ["model", "method", "window", "init", "temperature", "top_k", "top_p", "cfg", "seed",
          "prompt", "pace", "samples", "clip", "clip_text"]      # the decoding events' inputs


def engine_prompt(name: str, prompt, clip=None, clip_text="") -> str:
    """The prompt the engine gets: the text, or for a clip model the clip (and its text)."""
    return clip_prompt(clip, clip_text) if takes_clip(name) else check_prompt(prompt)


def prepare(name, method, window, init, temperature, top_k, top_p, cfg_scale, seed, prompt,
            clip, clip_text, load: Callable[[str], object], loaded: bool = False):
    """The model (from `load(name)`) and the checked Settings of a decoding request; a
    ValueError with the message otherwise (a model that fails to load included)."""
    check_model(name, loaded)
    text = engine_prompt(name, prompt, clip, clip_text)
    try:
        model = load(name)
    except Exception as exc:          # missing weights, no memory...: a message, not a crash
        raise ValueError(f"could not load model {name!r}: {exc}") from None
    return model, settings(model, text, method, window, init, temperature, top_k, top_p,
                           cfg_scale, seed)


def problems(model, name, method, window, init, temperature, top_k, top_p, cfg_scale, seed,
             prompt, pace, samples, clip=None, clip_text="") -> dict[str, str]:
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
        settings(model or shape_of(name), prompt, method, window, init, temperature, top_k, top_p,
                 cfg_scale, seed)
    except ValueError as exc:           # the library's message starts with the argument's name
        arg = str(exc).split(" ", 1)[0].strip("':")
        out[{"cfg_scale": "cfg", "prompts": "prompt"}.get(arg, arg)] = str(exc)
    return out


def gpu_duration(race_all: bool) -> Callable[..., int]:
    """ZeroGPU's seconds for one Generate (or one Race: every method, K samples) from the
    event's inputs; bad inputs never reach the decode, so any estimate serves them."""
    def seconds(name, method, window, init, temperature, top_k, top_p, cfg_scale, seed, prompt,
                pace=0.0, samples=1, *rest, **named) -> int:
        try:
            w, k, p = int(as_int(window)), int(as_int(samples)) if race_all else 1, float(pace or 0)
            methods = METHODS if race_all else [method]
            total = sum(gpu_seconds(name, w if m != "ar" else 1, k, m, p, clamp=False) for m in methods)
        except (ValueError, TypeError):
            return MIN_GPU_SECONDS
        return max(MIN_GPU_SECONDS, min(MAX_GPU_SECONDS, total))
    return seconds


def device_name() -> str:
    if torch.cuda.is_available():
        return f"CUDA ({torch.cuda.get_device_name(0)})"
    threads = torch.get_num_threads()
    return f"CPU ({threads} thread{'s' if threads != 1 else ''})"


def device_note() -> str:
    if device_name().startswith("CUDA"):
        return f"Engine: **{device_name()}**; large models in bfloat16."
    return (f"Engine: **{device_name()}**, no GPU: the embedded models run here, the large ones "
            "need a GPU.")


def replay_ticks(last: int, pace: float, every: float, stopped: Callable[[], bool],
                 clock: Clock = CLOCK):
    """NFE ticks of a lockstep replay lasting last * pace seconds, at most one per `every`
    seconds (later ticks skip ahead); ends early on a stop."""
    start, tick = clock.now(), 0
    while tick < last and not stopped():
        tick = min(last, 1 + int((clock.now() - start) / pace))
        yield tick
        sleep_until(max(start + tick * pace, clock.now() + every), stopped, clock)


def click_js(tab: str) -> str:
    """Browser code run before a Generate or Race request: show `tab`, and stamp the click (the
    last input) with the browser's clock, so that a later Stop stops this run even queued."""
    return (f"(...args) => {{ [...document.querySelectorAll('button[role=tab]')].find("
            f"b => b.innerText.trim() === {tab!r})?.click(); args[args.length - 1] = Date.now(); "
            f"return args; }}")


CSS = """
#controls .block { min-width: 0 !important; }
#init input { font-size: 13px; }
#race-table th { text-align: left; vertical-align: bottom; padding: 2px 4px; border-bottom: 1px solid #cbd5e1; }
#race-table td { padding: 2px 4px; border-bottom: 1px solid #e5e7eb; overflow-wrap: anywhere; }
#race-table td:nth-child(2) { font-weight: 600; }
.panel-title p { margin: 0 !important; font-weight: 600; }
.bare .icon-button-wrapper { display: none !important; }
@media (max-width: 720px) {   /* phones: model, prompt and buttons, then the results, then the rest */
  #main { flex-direction: column; }
  #controls { display: contents; }
  #top-controls { order: 1; } #results { order: 2; } #more-controls { order: 3; }
  #race-summary { overflow-x: auto; }               /* the table scrolls sideways, method first */
  #race-table { table-layout: auto !important; min-width: 640px; font-size: 0.8em !important; }
}
"""
