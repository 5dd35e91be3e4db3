"""The page's models: which it lists and in what order, its defaults per model (window, init,
slow motion, race samples, sampling), where each model stands here (embedded, cached,
downloadable, needs a GPU), the engine's device, and `Models`, which gives the page each
model as it uses it: an embedded one loaded here (cheap to draw), any other as a
`ClientModel`, what the decode client told of it, drawn where it decodes (one copy of a
model per machine: with worker processes or Ray the page never loads it)."""
from __future__ import annotations

import importlib
import logging
import os
import socket
import threading
import time
import urllib.request
import warnings
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import torch

from scd_core.client import ModelInfo
from scd_core.models import REGISTRY
from scd_core.models.status import model_status
from scd_core.prompts import UnknownWordsWarning
from scd_core.protocols import optional
from scd_core.settings import Settings

from demo.texts import quoted

if TYPE_CHECKING:
    from demo.servers import Servers

SHOW_TEST_MODELS = "SCD_SHOW_TEST_MODELS"
log = logging.getLogger("scd_demo")     # the page's one-line notes (demo.page.main shows them)
# A visitor's prompt is never logged: the words a model ignores are said beside the prompt box,
# not warned of (`scd_core.prompts.warn_unknown`, for the library's users), here and in the
# decoding workers (which import this module to load their model).
warnings.filterwarnings("ignore", category=UnknownWordsWarning)


# Page defaults per model: window, draft init, slow motion (s per pass on screen), race
# samples; sampling settings come from the model's own `default_settings`.
PAGE_DEFAULTS = {
    "texture": dict(window=16, init="random", pace=0.1, samples=8),
    "tiny": dict(window=16, init="random", pace=0.15, samples=8),
    "tiny-64": dict(window=64, init="random", pace=0.1, samples=8),      # its lead over SJD shows at 64
    "tiny-video": dict(window=32, init="repeat-frame", pace=0.1, samples=8),
    "toy-grid": dict(window=16, init="random", pace=0.1, samples=8),
}
EMBEDDED_DEFAULTS = dict(window=16, init="random", pace=0.1, samples=8)
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


# Models whose download failed here for want of a network (name -> the page's words), found
# when the page tried to load them; a model whose files are cached since is usable again.
_NO_NETWORK: dict[str, str] = {}
_NO_NETWORK_LOCK = threading.Lock()


def download_commands(name: str) -> list[str]:
    """The `hf download ...` commands that fetch what the model still lacks here."""
    from scd_core.models import hub

    entry = REGISTRY.get(name)
    if entry is None or not entry.needs_weights:
        return []
    files = importlib.import_module(f"scd_core.models.{entry.module}").hub_files(name)
    return [f.prefetch_command() for f in files if hub.cached(f) is None]


NO_NETWORK = "no network here"


def no_network_reason(name: str) -> str:
    """A visitor's words for a model whose weights are not here and cannot be downloaded."""
    commands = " and ".join(f"`{c}`" for c in download_commands(name)) or "`hf download`"
    return f"{NO_NETWORK}: download it beforehand with {commands}"


def is_network_failure(exc: BaseException) -> bool:
    """Whether a load failed because the Hub could not be reached (nothing cached)."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (LocalEntryNotFoundError, ConnectionError, TimeoutError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def load_failure(name: str, exc: BaseException) -> str:
    """Why `name` did not load, in the page's words; a download that found no network
    marks the model as not runnable here (`unavailable` says so from then on)."""
    if is_network_failure(exc):
        reason = no_network_reason(name)
        with _NO_NETWORK_LOCK:
            _NO_NETWORK[name] = reason
        return reason
    return f"could not load model {quoted(name)}: {exc}"


def unavailable(name: str, loaded: bool = False) -> str | None:
    """None when the model can run here (shipped, cached, downloadable, or loaded already),
    else the full reason."""
    if name not in REGISTRY:
        return f"unknown model {quoted(name)}"
    if loaded:
        return None
    status = model_status(name)
    if status.state == "cached":
        with _NO_NETWORK_LOCK:
            _NO_NETWORK.pop(name, None)
        return None
    if status.state in ("unavailable", "downloadable") and status.repos and hub_offline():
        return no_network_reason(name)            # HF_HUB_OFFLINE, or no network: said as a visitor would
    return _NO_NETWORK.get(name) or (None if status.usable else status.reason)


def hub_offline() -> bool:
    from scd_core.models.hub import offline
    return offline() or not hub_reachable()


PROBE_TIMEOUT_S = 1.5          # finding and connecting to the Hub (or the proxy that reaches it)
PROBE_EVERY_S = 60.0           # how long an answer holds
_PROBED: dict[str, tuple[float, bool]] = {}


def hub_reachable() -> bool:
    """Whether the Hub's endpoint (HF_ENDPOINT), or the proxy that reaches it, accepts a
    connection: a model still to download can only be fetched then. Asked at most once a
    minute; nothing is sent."""
    from scd_core.models.hub import endpoint

    url = urlparse(endpoint())
    proxy = urllib.request.getproxies().get(url.scheme)
    if proxy and not urllib.request.proxy_bypass(url.hostname or ""):
        url = urlparse(proxy if "://" in proxy else f"http://{proxy}")
    key = f"{url.hostname}:{url.port}"
    seen = _PROBED.get(key)
    if seen is None or time.monotonic() - seen[0] > PROBE_EVERY_S:
        answer: list[bool] = []

        def probe() -> None:              # the name's lookup too, which the timeout does not bound
            try:
                socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                         timeout=PROBE_TIMEOUT_S).close()
                answer.append(True)
            except (OSError, ValueError):
                answer.append(False)

        asking = threading.Thread(target=probe, name="scd-hub-probe", daemon=True)
        asking.start()
        asking.join(PROBE_TIMEOUT_S)
        seen = (time.monotonic(), bool(answer and answer[0]))
        _PROBED[key] = seen
    return seen[1]


def model_label(name: str) -> str:
    """For the model list, short enough to show whole: the name and where the model stands
    here (embedded, cached, its download's size, needs GPU, no network here, cannot run)."""
    status = model_status(name)
    reason = unavailable(name)
    if reason is None:
        state = f"{status.download_gb:.1f} GB download" if status.state == "downloadable" and \
            status.download_gb else status.state
    else:
        state = "no network here" if reason.startswith(NO_NETWORK) else \
            status.state if status.state == "needs GPU" else "cannot run here"
    return f"{name} · {state}"


def model_note(name: str, loaded: bool = False) -> str:
    """What the model is and where it stands here, with the full reason when it cannot run."""
    entry = REGISTRY.get(name)
    if entry is None:
        return f"Unknown model {quoted(name)}."
    status, reason = model_status(name), unavailable(name, loaded)
    if loaded:
        state = " Loaded."
    elif reason is None:
        state = f" {status.state.capitalize()}: {status.reason}."
    else:
        state = f" **Cannot run here:** {reason}" + ("" if reason.endswith("`") else ".")   # no dot after a command
    return f"`{name}`: {entry.description}.{state}"


def page_defaults(name: str) -> dict:
    if name in PAGE_DEFAULTS:
        return dict(PAGE_DEFAULTS[name])
    entry = REGISTRY.get(name)
    if takes_clip(name):
        return dict(CLIP_DEFAULTS)
    return dict(REAL_DEFAULTS if entry is not None and entry.needs_weights else EMBEDDED_DEFAULTS)


def sampling_defaults(name: str, model=None) -> dict:
    """Temperature, top-k, top-p, CFG: the model's `default_settings` when it is loaded; a
    top-k no smaller than its vocabulary is off (0), as the page's check wants it."""
    base = CLIP_SAMPLING if takes_clip(name) else REAL_SAMPLING if \
        REGISTRY.get(name) is not None and REGISTRY[name].needs_weights else \
        dict(temperature=1.0, top_k=0, top_p=1.0, cfg_scale=1.0)
    own = optional(model, "default_settings") or {}
    out = {**base, **{k: v for k, v in own.items() if k in base}}
    vocab = getattr(model, "vocab_size", None)
    return out | ({"top_k": 0} if isinstance(vocab, int) and out["top_k"] >= vocab else {})


def load_kwargs(name: str, device: str) -> dict:
    """The page's load arguments for a model on this device: large models in bfloat16 on a GPU."""
    large_on_gpu = device == "cuda" and REGISTRY[name].needs_weights
    return dict(device=device, **({"dtype": torch.bfloat16} if large_on_gpu else {}))


def is_embedded(name: str) -> bool:
    """A model shipped with the library (no weights to fetch): the page may hold its own copy."""
    entry = REGISTRY.get(name)
    return entry is not None and not entry.needs_weights


class ClientModel:
    """A model the page does not hold, as the page uses it: what the decode client told of it
    (`scd_core.client.ModelInfo`: grid, vocabulary, prompt kind, example prompts, default
    settings, fps) and its pictures, decoded where the model is (`pictures`). It has the
    contract's names so that the library's checks read it, but it decodes nothing here."""

    vocab = None                                   # only the embedded models read known words

    def __init__(self, info, client) -> None:
        self.info, self.client, self.name = info, client, info.name
        self.grid, self.vocab_size = tuple(info.grid), info.vocab_size
        self.prompt_kind, self.example_prompts = info.prompt_kind, list(info.example_prompts)
        self.default_settings, self.fps = dict(info.default_settings), info.fps

    def pictures(self, canvases, size: int | None, decoders=None, clip: bool = False):
        """The canvases' frames, drawn by the decode client (`decoders`: the rows' request ids)."""
        requests = None if decoders is None else [d if isinstance(d, str) else None for d in decoders]
        return self.client.pictures(self.name, canvases, size, requests, clip)

    def start(self, prompts, cfg_scale):
        raise NotImplementedError(f"{self.name} decodes where the decode client runs, not in the page")

    def decode(self, tokens):
        raise NotImplementedError(f"{self.name} is drawn where the decode client runs (pictures)")


def load_for_worker(name: str):
    """A decoding worker's model, loaded as the page loads it (sent to worker processes)."""
    from scd_core.models import load_model
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return load_model(name, **load_kwargs(name, device))


def room(residency) -> str:
    """How many large models a device holds here, in words."""
    if residency.budget is None:
        return "one large model at a time on this device"
    return f"{residency.budget / 1e9:.1f} GB of large models at a time on this device"


class Models:
    """The page's models. Embedded ones are loaded (on first use) into `cache` with this
    device's load arguments and drawn here; any other is a `ClientModel` of the page's
    decode client (`use`), which loads it where it decodes: in this process for the `local`
    and in-call clients (through `get`: the same cache, so still one copy), in a worker or a
    replica otherwise.

    Large models are resident by the cache's `Residency` (one per device, or a byte budget:
    `demo.backend.memory`), in this process as in the workers: before a large model loads
    here, each one that must make room is retired by the page's client (its running rows and
    pictures end, new rows of it wait; then its server closes and its rows' requests and
    decoders go), then dropped from the cache, its memory returned, and only then the new one
    loads. `swap_note` says it to a visitor."""

    def __init__(self, cache, device: str, servers: "Servers") -> None:
        from demo.backend import memory

        self.cache, self.device, self.servers = cache, device, servers
        cache.residency.budget = memory().gpu_bytes       # SCD_GPU_BYTES, for the models held here
        self.client, self.downloads_here = None, False
        self._infos: dict[str, object] = {}          # what the client told of each model
        self._warming: set[str] = set()              # embedded models whose worker is being started
        self._lock = threading.Lock()
        self._swap = threading.Lock()                # a swap's lock when the client has none

    def use(self, client, downloads_here: bool) -> None:
        """The decode client that decodes (and draws) the models the page does not hold;
        `downloads_here`: it reads this machine's Hugging Face cache, so a download the page
        makes first (with progress) is the one it loads."""
        self.client, self.downloads_here = client, downloads_here

    def warm(self, name: str, worker: bool = True) -> threading.Thread | None:
        """Get an embedded model ready for its first run, in the background: loaded here (the
        page draws it) and, with worker processes and `worker`, its worker started (it loads
        it there). A model is warmed when it is picked; when the page starts, its first model
        is, and the others are loaded here."""
        if not is_embedded(name):
            return None                              # a large model loads when picked (`load_note`)
        with self._lock:
            if name in self._warming:
                return None
            self._warming.add(name)

        def start() -> None:
            try:
                self.get(name)
                if worker and hasattr(self.client, "is_resident") and not self.client.is_resident(name):
                    self.client.model_info(name)     # the worker starts and loads it
            except Exception as exc:                 # noqa: BLE001: its first run says why
                log.info("could not get %s ready: %s", name, exc)
            finally:
                with self._lock:
                    self._warming.discard(name)
        warming = threading.Thread(target=start, name="scd-warm", daemon=True)
        warming.start()
        return warming

    def kwargs(self, name: str) -> dict:
        return load_kwargs(name, self.device)

    def get(self, name: str, progress=None):
        """The model in this process; `progress(done, total, repo)` hears a download. A
        large model not held first unloads those it must make room for (a DecodeError if
        one is still in use after the drain)."""
        kwargs, heard = self.kwargs(name), {"progress": progress} if progress else {}
        model = self.cache.peek(name, **kwargs)
        if model is None and self.cache.is_large(name):
            with getattr(self.client, "swap_lock", None) or self._swap:   # one swap at a time
                model = self.cache.peek(name, **kwargs)
                leaving = [] if model is not None else self.cache.room_for(name, **kwargs)
                if leaving:
                    with self.cache.residency.swapping(leaving, name):
                        for key in leaving:
                            self._unload(key, arriving=name)
                if model is None:
                    model = self.cache.get(name, **kwargs, **heard)
        elif model is None:
            model = self.cache.get(name, **kwargs, **heard)
        held = [self.cache.peek(n, **self.kwargs(n)) for n in self.cache.names()]
        self.servers.keep(held)
        if hasattr(self.client, "keep_models"):           # nor any row decoder of a dropped model
            self.client.keep_models(held)
        return model

    def _unload(self, key, arriving: str | None = None) -> None:
        """Retire a model from the page's client (if it serves it), then drop it from the
        cache and return its memory."""
        name, model, residency = key[0], self.cache.held(key), self.cache.residency
        retire = getattr(self.client, "retire", None)
        try:
            if model is not None and retire is not None:
                retire(name, model, arriving, residency.drain_s, residency.quiet_s)
            elif model is not None:
                self.servers.close_model(model)
            del model
            if not self.cache.unload(key, arriving):
                log.info("%s is unloaded but something still holds it", name)
        finally:
            getattr(self.client, "unloaded", lambda name: None)(name)

    def residency(self):
        """Where the page's large models are resident: its worker processes' (`ProcessClient`),
        or this process's cache."""
        return getattr(self.client, "residency", None) or self.cache.residency

    def resident(self, name: str) -> bool:
        """Whether the model is loaded where it decodes (a request would not wait for a load)."""
        if hasattr(self.client, "is_resident"):          # worker processes: its worker runs
            return self.client.is_resident(name)
        leaving = getattr(self.client, "leaving", lambda name: False)(name)
        return self.cache.peek(name, **self.kwargs(name)) is not None and not leaving

    def swap_note(self, name: str) -> str | None:
        """For a visitor about to run `name`: that it waits for a swap, or a load, and why
        (None when it is resident and nothing is swapped)."""
        residency = self.residency()
        swap = residency.swap
        if swap is not None and name in swap.leaving:
            return (f"**Waiting:** {name} is being unloaded to make room for {swap.arriving} "
                    f"({room(residency)}); your run loads it again once that is done.")
        if swap is not None and name == swap.arriving:
            return (f"**Waiting:** {', '.join(swap.leaving)} is being unloaded to make room for {name} "
                    "(its runs finish first); your run starts once it is loaded.")
        if self.resident(name):
            return None
        why = residency.why_not_resident(name)
        if why is None:
            return None
        because = f"to make room for {why.arriving}" if why.arriving else \
            f"after {why.idle_s / 60:.0f} min without a run" if why.idle_s else "earlier"
        return f"**Loading {name}:** it was unloaded {because}; your run starts once it is loaded again."

    def for_page(self, name: str):
        """The model as the page uses it: an embedded one itself, any other a `ClientModel`
        (the decode client loads it where it decodes, on first use)."""
        return self.get(name) if is_embedded(name) or self.client is None else self.on_client(name)

    def on_client(self, name: str) -> ClientModel:
        """The model as the decode client tells it (loading it there on first use)."""
        with self._lock:
            info = self._infos.get(name)
        if info is None:
            info = self.client.model_info(name)
            with self._lock:
                self._infos[name] = info
        return ClientModel(info, self.client)

    def loaded(self, name: str):
        """The model as the page uses it if it is loaded (a `ClientModel` once the decode
        client has told of it), else None (never loads)."""
        if name not in REGISTRY:
            return None
        if is_embedded(name) or self.client is None:
            return self.cache.peek(name, **self.kwargs(name))
        if getattr(self.client, "decodes_here", False):    # the client's model is this process's
            held = self.cache.peek(name, **self.kwargs(name))
            return None if held is None else ClientModel(ModelInfo.of(name, held), self.client)
        with self._lock:
            info = self._infos.get(name)
        return None if info is None else ClientModel(info, self.client)

    def put(self, name: str, model) -> None:
        """Use this ready model for `name` (tests, embedders)."""
        self.cache.put(name, model, **self.kwargs(name))

    def fetch(self, name: str, progress=None):
        """Load a model that needs weights where it decodes (again, if it was unloaded), its
        download heard by `progress` where that download happens on this machine; the model
        as the page uses it."""
        if self.client is None:
            return self.get(name, progress)
        if getattr(self.client, "decodes_here", False):   # the in-process clients load through `get`
            self.get(name, progress)
            return self.on_client(name)
        if self.downloads_here and progress is not None:
            from scd_core.models import hub
            for files in importlib.import_module(f"scd_core.models.{REGISTRY[name].module}").hub_files(name):
                hub.fetch(files, progress=progress, needed_by=name)
        info = self.client.model_info(name)               # its worker started (after making room) if needed
        with self._lock:
            self._infos[name] = info
        return ClientModel(info, self.client)

    def load_note(self, name: str, progress=None) -> str:
        """Load a large model as soon as it is picked (`progress` as for `get`), or again if it
        was unloaded; the model's note, with the reason when it could not load (Generate then
        says it again), and the models it unloaded to make room."""
        unloaded = ""
        if REGISTRY[name].needs_weights and not self.resident(name) and \
                unavailable(name, self.loaded(name) is not None) is None:
            before = set(self.residency().resident()) - {name}
            try:
                self.fetch(name, progress)
            except Exception as exc:              # missing weights, no memory, another model busy...: said
                log.info("could not load %s: %s", name, exc)
                why = load_failure(name, exc)
                return model_note(name) if unavailable(name) else model_note(name) + \
                    f" **Could not load it:** {why}"
            gone = sorted(before - set(self.residency().resident()))
            if gone:
                unloaded = (f" {' and '.join(gone)} {'was' if len(gone) == 1 else 'were'} unloaded to make room "
                            f"({room(self.residency())}).")
        return model_note(name, self.loaded(name) is not None) + unloaded

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
        return self.loaded(name) or (self.get(name) if is_embedded(name) else None)


def device_name(threads: int | None = None) -> str:
    """The engine's device in words; on a CPU with `threads` torch threads (this process's
    when None)."""
    if torch.cuda.is_available():
        return f"CUDA ({torch.cuda.get_device_name(0)})"
    threads = torch.get_num_threads() if threads is None else threads
    return f"CPU ({threads} thread{'s' if threads != 1 else ''})"


def decoding_device(client, name: str | None = None) -> str:
    """Where a model's rows decode on this decode client: a worker process's own torch
    threads where the client says them (`ProcessClient.worker_threads`, or before a worker
    is ready the threads it will get, `ProcessClient.threads`), else this process's."""
    threads = getattr(client, "worker_threads", lambda _: None)(name) if name is not None else None
    if threads is None:
        threads = getattr(client, "threads", None)
    return device_name(threads if isinstance(threads, int) and threads > 0 else None)


def device_note(client=None) -> str:
    """The header's line: where the page's decode client decodes."""
    device = decoding_device(client)
    if device.startswith("CUDA"):
        return f"Engine: **{device}**; large models in bfloat16."
    return (f"Engine: **{device}**, no GPU: the embedded models run here, the large ones "
            "need a GPU.")
