"""Gradio demo of lossless speculative decoding for AR image and video models: watch a sample
form pass by pass, race AR, SJD and SCD over several samples. `demo` is the Blocks app (the
Hugging Face Space entry point); `python app.py` serves it locally. This file is the page:
Generate submits a row to the decode client that SCD_DECODE names (`demo.backend`: worker
processes by default; visitors' rows share passes) and shows its records, and so does the
race (`scd_core.race.decode_rows`); the pictures of a model the page does not hold come
from that client too (`demo.models`). Every event that decodes or draws is one ZeroGPU call
(`demo.zerogpu`). What the page calls lives in `demo/`, one module per job (docs/app.md)."""
from __future__ import annotations

if __name__ == "__main__":   # `python app.py` serves the page as `python -m demo` does (demo/__main__.py says why)
    import runpy
    runpy.run_module("demo", run_name="__main__", alter_sys=True)
    raise SystemExit(0)

import logging
import math
import os
import signal
import threading
import time
from typing import Callable

import gradio as gr
import torch
from fastapi.responses import JSONResponse
from gradio.route_utils import FnIndexInferError, delete_files_created_by_app

from scd_core import lossless as lossless_stats, race
from scd_core.client import DecodeError
from scd_core.models import cache
from scd_core.settings import METHODS

from demo import (backend, charts, checks, export, frontier_view, generate_view, labels, lossless, models,
                  picture_files, pictures, race_view, run_view, runs, servers, streaming, texts, uploads, zerogpu)
from demo.clips import example_clips


log = models.log                 # the page's one-line notes
# Concurrency, in one place. Generate requests run side by side: their rows share the forward
# passes of one server per model, which runs one pass at a time. A race (each method timed
# alone: it holds the servers' device lock for its decode), a model load and an export run one
# at a time. A running Generate holds a thread while its row waits for passes; the rest of the
# threads serve Stop and the page's quick events. Up to 64 more visitors wait, told their place.
KIND = backend.backend_kind()         # where Generate and the race decode (SCD_DECODE, docs/app.md)
SERVERS = servers.Servers(max_batch=32, threaded=KIND != "call")
GENERATE = dict(concurrency_limit=SERVERS.max_batch, concurrency_id=runs.GENERATE_QUEUE)
DECODE = dict(concurrency_limit=1, concurrency_id=runs.DECODE_QUEUE)
QUEUE = dict(max_size=64, default_concurrency_limit=1)
# Gradio keeps a copy of the page per visitor, with their last run for the replay (0.45-0.66 MB
# measured, docs/app.md), for this many visitors; the one unseen longest is dropped first.
SESSIONS = backend.env_count("SCD_SESSIONS", 128)
THREADS = 2 * SERVERS.max_batch
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
MODELS = models.Models(cache, DEVICE, SERVERS)   # one large model resident at a time
REQUESTS = backend.Requests(backend.make_client(
    KIND, lambda in_call: servers.PageClient(SERVERS, MODELS.get, in_call), models.load_for_worker,
    SERVERS.max_batch))
MODELS.use(REQUESTS.client, downloads_here=KIND == "process")   # it loads and draws the downloaded models
# Each visitor's run, Stops, jobs on each queue (`demo.runs`); a ZeroGPU call runs in a process of its own.
CONTROL = runs.Control(runs.Stops(shared=backend.on_zero_gpu()), REQUESTS)
session_key = runs.session_key
LABELS = labels.METHOD_LABELS


# ------------------------------------------------------------------------------ checks

def checked_clip(values: dict) -> tuple[dict, str | None]:
    """A decoding event's values by name with the clip's path checked before anything opens it
    (an upload of this page or an example clip, `demo.uploads`; on every model, even those
    that ignore it), and the refusal message; a refused clip is replaced by None."""
    if "clip" not in values:                          # a caller without the clip inputs
        return values, None
    try:
        return values | {"clip": uploads.clip_file(values["clip"], example_clips())}, None
    except ValueError as exc:
        return values | {"clip": None}, str(exc)


def problems(values: dict) -> dict[str, str]:
    """Every input of a decoding event (its values by name) the page or the library refuses,
    by name, with the message."""
    values, refused = checked_clip(checks.values_of(values))
    found = checks.problems(MODELS.loaded(values["model"]), values) | ({"clip": refused} if refused else {})
    return {k: uploads.without_paths(v) for k, v in found.items()}


def verdict(values: dict, found: dict[str, str], request, queue: str, what: str) -> list:
    """Gradio's validator's answer for an event's inputs (`values`, by name in their order):
    each refused one gets its message; with none refused, the visitor's job is admitted to
    `queue` (`demo.runs.Control.admit`: one at a time per visitor) or refused, said beside
    the first input."""
    if not found and (busy := CONTROL.admit(session_key(request), queue, what)):
        found = {next(iter(values)): busy}
    if found:
        log.info("input rejected: %s", "; ".join(found.values()))
    return [gr.validate(n not in found, found.get(n, "")) for n in values]


def validate_generate(request: gr.Request = None, **values):
    """Runs before a Generate request joins the queue (the event's inputs by name)."""
    return verdict(values, problems(values), request, runs.GENERATE_QUEUE, runs.KINDS["generate"])


def validate_race(request: gr.Request = None, **values):
    """Runs before a race joins the queue: checked as a speculative method (it runs them all)."""
    return verdict(values, problems(values | {"method": "scd-mc"}), request, runs.DECODE_QUEUE, runs.KINDS["race"])


def validate_lossless(request: gr.Request = None, **values):
    """Runs before a Lossless comparison joins the queue: its model and samples too."""
    found = problems(values | {"method": "scd-mc"})
    for name, check in (("model", lossless.check_model), ("lossless_samples", lossless.check_samples)):
        try:
            check(values.get(name))
        except ValueError as exc:
            found.setdefault(name, str(exc))
    return verdict(values, found, request, runs.DECODE_QUEUE, runs.KINDS["lossless"])


def validate_replay(index, run, request: gr.Request = None):
    """A replayed pass: a number (the pass), refused before the queue. Gradio reads the
    slider's value (a number within its range, or its message) before it calls a validator:
    with one, a bad value is refused there, with no traceback."""
    ok = isinstance(index, (int, float)) and not isinstance(index, bool) and math.isfinite(index)
    return [gr.validate(ok, "" if ok else f"Pass: a number, got {checks.given(index)}."), gr.validate(True, "")]


def validate_export(run, request: gr.Request = None):
    return verdict({"run": run}, {}, request, runs.DECODE_QUEUE, "export")


def checked_click(go, values: dict, marked: list | None, race_all: bool = False) -> dict:
    """A Generate or Race click, checked before anything starts (outside the queue): each
    field refused gets its message beside it and the buttons' message says them all; a field
    marked before and right now loses its mark. When nothing is refused, `go` is set, which
    starts the run, and the note under the model (what the last switch changed, or stopped) goes.
    The race runs every method: its fields are checked as a speculative one."""
    found = problems(values | ({"method": "scd-mc"} if race_all else {}))
    marks = {name: gr.update(info=found.get(name, view.info or ""), elem_classes=["invalid"] if name in found else [])
             for name, view in field_views.items() if name in found or name in (marked or [])}
    if found:
        log.info("input refused: %s", "; ".join(found.values()))
    return {input_md: checks.not_started(found), marked_state: sorted(found)} | \
        {field_views[name]: update for name, update in marks.items()} | \
        ({} if found else {go: time.time(), switch_md: ""})


def busy(request, message=lambda text: {input_md: text}) -> dict:
    """A click while the visitor's run goes: refused with a word (`message(text)`: where it
    is said), nothing starts; {} when no run goes (`demo.runs.Control.busy`)."""
    refusal = CONTROL.busy(session_key(request))
    return message(refusal) if refusal else {}


def check_generate(request: gr.Request = None, *, marked=None, **values):
    return busy(request) or checked_click(go_generate, values, marked)


def check_race(request: gr.Request = None, *, marked=None, **values):
    return busy(request) or checked_click(go_race, values, marked, race_all=True)


def check_lossless(request: gr.Request = None):
    """A click on Compare: refused with a word while the visitor's run goes, else it starts."""
    return busy(request, lambda text: {loss_message: text}) or {loss_message: "", go_lossless: time.time()}


def prepare(values: dict, method: str | None = None):
    """The model as the page uses it (`Models.for_page`) and the checked run of a decoding
    event's widget values by name (`method` in place of the chosen one): the clip's path
    checked before anything opens it, the model loaded, then `checks.read`, the one
    conversion of the widget values. ValueError with the message otherwise."""
    values, refused = checked_clip(checks.values_of(values | ({"method": method} if method else {})))
    if refused:
        raise ValueError(refused)
    model, _ = checks.load_for(values["model"], values["prompt"], values["clip"], values["clip_text"],
                               MODELS.for_page, loaded=MODELS.loaded(values["model"]) is not None)
    return model, checks.read(values, model)


def left_views(run: runs.Run) -> dict:
    """The last update of a run whose model was switched away: its event's views as the new
    model's, before any run, its status saying that it stopped (the switch shows the same)."""
    outputs = {"generate": gen_outputs, "race": race_outputs, "lossless": lossless_outputs}[run.kind]
    return {k: v for k, v in switched_views(run.left, {"kind": run.kind, "named": run.named()}).items()
            if k in outputs}


def one_run(kind: str, queue: str, status: Callable[[], object]):
    """A decoding event's handler as the visitor's one run (`demo.runs.Control.one_run`)."""
    return CONTROL.one_run(kind, queue, status, left_views)


def refused(exc: Exception, started: bool = False) -> str:
    """A run that could not start, or a row lost on the way, in the status's words."""
    log.info("not decoded: %s", exc)
    return f"**{'Not finished' if started else 'Not started'}:** {uploads.without_paths(exc)}"


# ----------------------------------------------------------------------------- generate

def keyed(views: dict, update: dict) -> dict:
    """A view update by view name (`demo.generate_view.VIEWS`, `demo.race_view.VIEWS`) for the
    page's components (`views`: view name -> component)."""
    return {views[name]: value for name, value in update.items()}


@one_run("generate", runs.GENERATE_QUEUE, lambda: status)
@zerogpu.on_gpu(zerogpu.generate_seconds, lambda: demo.blocks)
@streaming.streams_in_full(lambda: gen_outputs)
def generate_stream(request: gr.Request = None, *, history=None, ticket=None, **values):
    """Decode one sample as a row on the decode client (visitors' rows share passes) and
    stream its passes to the page (every pass in slow motion, else a few pictures a second);
    Stop cancels it at once, keeping what is shown, and its row leaves the batch. An input the
    model refuses (a clip too short for it...) or a lost row is said in the status, nothing lost;
    a refused run on another model clears the replay and export, which belong to the last run.
    `values`: the event's inputs by their name in `checks.INPUTS`."""
    key = session_key(request)
    stopped = CONTROL.stopped(key, ticket)
    name = values.get("model")
    stale = {} if (history or {}).get("_model") in (None, name) else generate_view.REPLAY_CLEARED
    row = view = None
    try:
        model, page = prepare(values)
        zerogpu.check_fits(zerogpu.generate_estimate(name, page.settings.method, page.settings.window, page.pace),
                           "This run", "lower the slow motion or pick a smaller model")
        if stopped():                                     # stopped while waiting in the queue
            yield keyed(gen_views, {"status": texts.STOPPED_EARLY})
            return
        view = generate_view.GenerateView(model, page, history, models.decoding_device(REQUESTS.client, name))
        if note := MODELS.swap_note(name):                # a model swap or load to wait for, said first
            yield keyed(gen_views, view.cleared({"status": note}))
        row = backend.Row(REQUESTS, REQUESTS.submit(key, name, page.race.prompt, page.race.seed, page.settings),
                          name)
        waiting = SERVERS.timing_alone.is_set if KIND == "local" else lambda: False
        records = servers.follow(row.client, row.rid, stopped, waiting=waiting)
        for it, picture_due, charts_due in servers.shown(records, page.pace, stopped, row.share):
            update = view.shown(it, picture_due, charts_due, row)
            if update:                                    # nothing when no picture is due
                yield keyed(gen_views, update)
    except ValueError as exc:
        yield keyed(gen_views, stale | {"status": refused(exc)})
        return
    except DecodeError as exc:                            # the row was lost: said, what is shown stays
        yield keyed(gen_views, stale | {"status": refused(exc, started=bool(view and view.stats.records))})
        return
    finally:
        if row is not None:
            decode, _ = row.decode(), row.end()
    if not view.stats.records:
        yield keyed(gen_views, {"status": texts.STOPPED_EARLY})
        return
    shared = row.shared(len(view.stats.records))
    yield keyed(gen_views, view.ending(decode, shared))
    if ticket is not None:                                # a browser: the picture first (the charts delay it)
        servers.sleep_until(servers.now() + servers.FIRST_PAINT)
    yield keyed(gen_views, view.ended(decode, shared))


# ------------------------------------------------------------------------------- race

@one_run("race", runs.DECODE_QUEUE, lambda: race_status)
@zerogpu.on_gpu(zerogpu.race_seconds, lambda: demo.blocks)
@streaming.streams_in_full(lambda: race_outputs)
def race_stream(request: gr.Request = None, *, history=None, ticket=None, **values):
    """Per method, decode ONE image alone (its latency) and then K samples together (the
    batch's throughput, and every per-sample figure) on the page's decode client, the same
    as Generate, showing the pictures as they form; time each method again, in turns; then
    replay the recorded passes in lockstep by NFE (at the slow-motion pace) and report."""
    key = session_key(request)
    stopped = CONTROL.stopped(key, ticket)
    try:
        model, page = prepare(values, method="scd-mc")   # the race runs every method: checked as one with drafts
        name = page.name
        rounds = zerogpu.race_rounds(name, page.settings.window, page.samples, page.pace)   # timing rounds
        zerogpu.check_fits(zerogpu.race_estimate(name, page.settings.window, page.samples, page.pace, rounds),
                           "This race", "lower the race samples K (or the slow motion), or pick a smaller model")
        view = race_view.RaceView(model, page, models.decoding_device(REQUESTS.client, name),
                                  lambda runs: race.gap_probe(model, name, page.race, runs), models.is_video(name),
                                  rounds)
        yield keyed(race_views, view.started())
        if note := MODELS.swap_note(name):                # a model swap or load to wait for, said first
            yield keyed(race_views, {"status": note})
        for step in race.decode_race(REQUESTS.client, name, page.race, page.samples, stopped, rounds):
            update = view.step(step)
            if update:                                    # nothing when no status or picture is due
                yield keyed(race_views, update)
            if step.phase == "timing" and KIND != "call":   # visitors' Generate rows first (a while at most)
                servers.wait_while(lambda: REQUESTS.rows_of(name) > 0, servers.RACE_YIELD_S, stopped)
            if step.run is not None and step.run.stopped:
                return
    except ValueError as exc:
        yield keyed(race_views, {"status": refused(exc)})
        return
    except DecodeError as exc:                            # a row was lost: said, what is shown stays
        yield keyed(race_views, {"status": refused(exc, started=True)})
        return
    view.finished(step)
    if stopped():                                         # while timing: what was timed stays
        yield keyed(race_views, view.panels.at(view.runs) | view.report(race_view.STOPPED_TIMING))
        return
    tick, last = 0, race.lockstep(view.runs)
    for tick in servers.replay_ticks(last, page.pace, servers.IMAGE_EVERY, stopped) if page.pace else ():
        yield keyed(race_views, view.replay(tick))
    if stopped() and tick < last:
        yield keyed(race_views, view.report(f"**Replay stopped at NFE {tick}**; every method had finished decoding: "
                                "the figures below are complete.", tick))
        return
    yield keyed(race_views, view.done())


def shipped_ratios():
    """texture's and tiny's passes per image for SJD and SCD-MC, from the benchmark's tables."""
    return race_view.ratios_markdown()


# ----------------------------------------------------------------------------- lossless

@one_run("lossless", runs.DECODE_QUEUE, lambda: loss_status)
@zerogpu.on_gpu(zerogpu.lossless_seconds, lambda: demo.blocks)
def lossless_run(request: gr.Request = None, *, lossless_samples=lossless.DEFAULT_SAMPLES, ticket=None, **values):
    """Many samples of AR and of the method (the one picked; SCD-MC when AR is), which token
    each put at four positions with the chi-square test's p-value, and greedy mode's tokens."""
    outputs = (loss_summary, loss_chart, loss_ar, loss_method, loss_greedy, loss_diff)
    try:
        name = lossless.check_model(values.get("model"))
        samples = lossless.check_samples(lossless_samples)
        model, page = prepare(values, method="scd-mc")
        s = page.race
    except ValueError as exc:
        yield {loss_status: refused(exc)}
        return
    other = lossless.method_of(values["method"])
    settings = s.settings if s.settings.temperature > 0 else s.settings.replace(temperature=1.0)
    progress = lossless.Progress(samples, zerogpu.LOSSLESS_BATCH, other)
    comparing = lossless.Comparing(      # in a thread: the progress is said meanwhile; it ends with the handler
        lambda stop: lossless_stats.compare(model, s.prompt, settings, other, samples, seed=s.seed,
                                            batch=zerogpu.LOSSLESS_BATCH, stop=stop, on_batch=progress.ask),
        CONTROL.stopped(session_key(request), ticket))
    try:
        yield dict.fromkeys(outputs, None) | {loss_status: progress.said()}
        while (c := comparing.result(timeout=1.0)) is comparing.PENDING:
            yield {loss_status: progress.said()}
    finally:
        comparing.close()
    if isinstance(c, Exception):
        yield {loss_status: refused(c, started=True)}
        return
    if c is None:
        yield {loss_status: "**Stopped** before the samples were complete: nothing to compare."}
        return
    yield {loss_status: f"**Done** on **{name}** in {c.seconds:.0f} s.", loss_summary: lossless.summary_markdown(model, c),
           loss_chart: lossless.histogram_figure(model, c),
           loss_ar: lossless.samples_picture(model, c.ar_tokens),
           loss_method: lossless.samples_picture(model, c.method_tokens),
           loss_greedy: lossless.greedy_picture(model, c),
           loss_diff: lossless.diff_picture(model, c), loss_diff_title: lossless.diff_title(c),
           loss_method_title: f"{LABELS[other]}: its first {lossless.SHOWN_SAMPLES} samples"}


@zerogpu.on_gpu(zerogpu.short_seconds, lambda: demo.blocks)
def show_race_sample(index, state):
    if not state:
        return {}
    panels = race_view.RacePanels(MODELS.for_page(state["model"]), max(0, int(index) - 1))
    return keyed(race_views, panels.at(state["runs"]))


# ----------------------------------------------------------------------------- replay

@zerogpu.on_gpu(zerogpu.short_seconds, lambda: demo.blocks)
def replay_view(index, run):
    if not run or not run.get("iterations"):
        return gr.skip(), run_view.REPLAY_WAITING, gr.skip()
    i = int(min(max(index, 0), len(run["iterations"]) - 1))
    out = generate_view.replay(MODELS.for_page(run["model"]), run, i)
    return out["replay_image"], out["replay_text"], out["replay_probs"]


@CONTROL.queued(runs.DECODE_QUEUE)
@zerogpu.on_gpu(zerogpu.export_seconds, lambda: demo.blocks)
def export_run(run, request: gr.Request = None):
    if not run or not run.get("iterations"):
        return None, None
    mp4, gif = export.export_decoding(MODELS.for_page(run["model"]), run["iterations"],
                                 f"{run['model']}-{run['method']}-decoding", decode=run.get("decode"))
    return mp4, [mp4, gif]


def stop(at=None, request: gr.Request = None):
    CONTROL.stop(session_key(request), at)   # their running rows leave at their next boundary


def forget(request: gr.Request = None):
    CONTROL.forget(session_key(request))


def load_selected(name: str, progress=gr.Progress()):
    """Load a large model as soon as it is picked, its download shown as progress; a model
    that could not be fetched (no network here) cannot be started."""
    note = MODELS.load_note(name, lambda done, total, repo: progress(
        (done, total) if total else 0.0, desc=f"Downloading {repo}", unit="bytes"))
    return {model_md: texts.command_blocks(uploads.without_paths(note)) + frontier_view.model_link(name)} | runnable(name)


def model_info(name: str) -> str:
    """Under the model: what it is and where it stands here (`models.model_note`), its download
    commands as blocks; for `tiny` and `tiny-64`, a link to the two side by side."""
    return texts.command_blocks(models.model_note(name, MODELS.loaded(name) is not None)) + frontier_view.model_link(name)


def can_run(name: str) -> bool:
    """Whether the model can run here (loaded, shipped, cached, or downloadable)."""
    return models.unavailable(name, MODELS.loaded(name) is not None) is None


def prompt_words(name: str, prompt: str) -> str:
    """Under the prompt box: the words the model will ignore (bag-of-words models)."""
    return texts.prompt_words_note(MODELS.at_hand(name) if can_run(name) else None, name, prompt or "")


def runnable(name: str) -> dict:
    """Generate and Race, enabled only for a model that can run here."""
    ok = can_run(name)
    return {gen_btn: gr.Button(interactive=ok), race_btn: gr.Button(interactive=ok)}


def defaults(name: str) -> tuple[dict, bool]:
    """The model's defaults by their name in `checks.SETTINGS` (its first example prompt, if it
    reads text), and whether it can run here."""
    page, sampling, ok = MODELS.defaults(name)
    prompts = MODELS.examples(name) if ok and not models.takes_clip(name) else []
    return checks.defaults_of(page, sampling, prompts[0] if prompts else None), ok


def cleared_views(name: str) -> dict:
    """Every view of a run, a race and a comparison, as before any: the last ones were another
    model's. The pictures are the new model's empty grid where it is at hand."""
    ok = can_run(name)
    model = MODELS.at_hand(name) if ok else None
    grid = tuple(model.grid) if model is not None else None
    run = generate_view.waiting(grid, math.prod(grid) if grid else models.REGISTRY[name].tokens) | \
        generate_view.REPLAY_CLEARED | {"status": texts.hint(texts.GENERATE_HINT if ok else texts.CANNOT_RUN, name)}
    return keyed(gen_views, run) | {replay_slider: gr.Slider(value=0)} | keyed(race_views, race_waiting(name, ok)) | lossless_waiting()


def switched_views(name: str, stopped: dict | None = None) -> dict:
    """`cleared_views` after a switch to `name`; `stopped`: the run the switch stopped (its kind
    and its name in words), said in the status of its tab."""
    views = cleared_views(name)
    if stopped:
        where = {"generate": status, "race": race_status, "lossless": loss_status}[stopped["kind"]]
        views[where] = (f"**Stopped:** {stopped['named']} ended when you picked **{name}**; nothing of it is "
                        f"kept here.  \n{views[where]}")
    return views


def race_waiting(name: str, ok: bool = True) -> dict:
    """The Race tab before a race of `name` (`ok`: it can run here), by view name: no panels
    yet (they come with the race), the hint."""
    return race_view.waiting(None, texts.hint(texts.RACE_HINT if ok else texts.CANNOT_RUN, name)) | {
        "state": None, "sample": gr.Slider(visible=False)}


def lossless_waiting() -> dict:
    return {loss_status: "", loss_summary: "", loss_chart: lossless.WAITING_FIGURE, loss_ar: None,
            loss_method: None, loss_diff: None, loss_greedy: None, loss_diff_title: lossless.DIFF_TITLE}


def picked(name: str, ticket=None, request: gr.Request = None) -> dict:
    """At once when a model is picked (outside the queue), before the switch itself: the
    visitor's run stops and nothing more of it is shown (the note under the model has said
    in the browser that the pick was heard: where a model stands can take seconds to find out)."""
    key = session_key(request)
    run = CONTROL.halt(key, f"you picked {name}", ticket, left=name)
    if run is None:
        CONTROL.stop(key, ticket)            # a run still in the queue never starts on the old model
    return {"kind": run.kind, "named": run.named()} if run is not None else None


def changed(prompt, method, ticket=None, request: gr.Request = None) -> None:
    """A new prompt (or method) while the visitor's run goes: it stops at once, its status
    saying why (a race runs every method: only a new prompt stops it)."""
    run = CONTROL.runs.going(session_key(request))
    if run is None or run.left:
        return
    button = runs.BUTTONS[run.kind]
    for what, now, was, kinds in (("prompt", prompt, run.prompt, ("generate", "race", "lossless")),
                                  ("method", method, run.method, ("generate", "lossless"))):
        if run.kind in kinds and now is not None and str(now) != was:
            CONTROL.halt(session_key(request), f"**Stopped:** you changed the {what}; press **{button}** to run the new one.",
                 ticket, kinds=kinds)
            return


def on_model_change(name: str, applied: dict | None = None, stopped: dict | None = None, **current):
    """What the model is (or why it cannot run here); the visitor's settings kept where they
    chose them and the model can take them, the rest its defaults, in one line (`checks.switched`);
    the last model's views cleared; Generate and Race disabled for a model that cannot run.
    `stopped`: the run the pick stopped (`picked`), said in its tab's status."""
    new, ok = defaults(name)
    values, said = checks.switched(name, current, applied, new,
                                   MODELS.loaded(name) or MODELS.at_hand(name) if ok else None,
                                   models.is_video(name))
    clip, prompts = models.takes_clip(name), MODELS.examples(name) if ok else []
    if stopped:                                   # said under the model too, where a phone's visitor looks
        said = f"**Stopped:** {stopped['named']} ended when you picked **{name}**.  \n{said}"
    return {setting_views[k]: values[k] for k in checks.SETTINGS} | switched_views(name, stopped) | {
        stopped_state: None,
        applied_state: new, switch_md: said, greedy_cb: values["temperature"] == 0,
        prompt_words_md: prompt_words(name, values["prompt"]) if not clip else "",
        model_md: model_info(name),
        examples.dataset: gr.Dataset(samples=[] if clip else [[p] for p in prompts]),
        text_box: gr.Column(visible=not clip), clip_box: gr.Column(visible=clip),
        examples_box: gr.Column(visible=bool(prompts) and not clip),     # no heading over nothing
    } | runnable(name)


# ----------------------------------------------------------------------------- layout

D0 = models.listed_models()[0]


def image(elem_id: str, value=None) -> gr.Image:
    """A picture with no label or toolbar over it (they would cover the first token row)."""
    return gr.Image(value, show_label=False, buttons=[], format="png", type="numpy", interactive=False,
                    elem_id=elem_id, container=False, elem_classes="bare")


def number(name: str, value, field: checks.Field | None = None, info: str | None = None) -> gr.Number:
    """The number field of setting `name`, labelled by its `checks.Field` (by default
    `checks.FIELDS[name]`, the one its check reads; its id: the name with dashes); whole
    numbers are checked, never rounded (1.5 is refused, not 2)."""
    field = field or checks.FIELDS[name]
    return gr.Number(value, label=field.widget_label, elem_id=name.replace("_", "-"), info=info, min_width=100)


def plot(elem_id: str, value=None) -> gr.Plot:
    """A chart; with nothing to draw (None) it takes no room (`.chart`, demo/static/page.css)."""
    return gr.Plot(value, show_label=False, elem_id=elem_id, elem_classes="chart")


# The runs' pictures and files are served from their own folders, never copied into Gradio's
# cache, and swept there by age and count (demo.picture_files). What Gradio's cache holds (the
# visitors' uploads) is swept of what is older than half an hour (SCD_FILES_S), every sixth of
# that, by Gradio and, should its sweep stop, by `picture_files.CacheSweeper` (docs/deploy.md).
gr.set_static_paths(picture_files.roots())
CACHE_SWEEP = (max(10, picture_files.RUN_AGE_S // 6), picture_files.RUN_AGE_S)

with gr.Blocks(title="Speculative coupled decoding", delete_cache=CACHE_SWEEP) as demo:
    history_state, last_run = gr.State({}, time_to_live=3600), gr.State(None, time_to_live=3600)
    race_state = gr.State(None, time_to_live=1800)
    ticket = gr.Number(None, visible=False)       # the click's time stamp, set by the browser
    gr.Markdown(texts.HEADER + models.device_note(REQUESTS.client), elem_id="header")
    # Desktop: the controls on the left (model, prompt, buttons, then examples, method and
    # settings), the results on the right. A phone shows the controls in the order a visitor
    # fills them in, model to Settings (closed there), then the buttons and the example prompts,
    # then the results (demo/static/page.css orders the boxes, demo/static/load.js closes
    # Settings, page.js brings the results into sight when a run starts).
    with gr.Row(equal_height=False, elem_id="main"):
        with gr.Column(scale=1, min_width=340, elem_id="controls"):
            with gr.Column(elem_id="model-box"):
                model_dd = gr.Dropdown([(models.model_label(n), n) for n in models.listed_models()],
                                       value=D0, label="Model", elem_id="model")
                model_md = gr.Markdown(model_info(D0), elem_id="model-info")
                switch_md = gr.Markdown(elem_id="settings-changed")      # what a model switch changed
            with gr.Column(visible=not models.takes_clip(D0), elem_id="prompt-box") as text_box:
                prompt_tb = gr.Textbox(MODELS.examples(D0)[0], label="Prompt", lines=1,
                                       max_lines=3, elem_id="prompt")
                prompt_words_md = gr.Markdown(prompt_words(D0, MODELS.examples(D0)[0]),
                                              elem_id="prompt-words")
            with gr.Column(visible=models.takes_clip(D0), elem_id="clip-box") as clip_box:
                clip_in = gr.Video(label="Prompt clip: the model continues it", sources=["upload"],
                                   format=None, elem_id="prompt-clip", height=200)
                # What the decoding events take instead of the Video: its upload's path,
                # copied in the browser, checked by the app before any read (demo.uploads).
                clip_path = gr.Textbox("", visible=False, elem_id="clip-path")
                clip_text_tb = gr.Textbox("", label="Clip text (Video2World only)", lines=1,
                                          elem_id="clip-text")
                gr.Examples([[p] for p in example_clips()], inputs=clip_in, label="Example clips",
                            example_labels=["red ball", "blue ring"])
            with gr.Column(elem_id="run-box"):
                with gr.Row():
                    gen_btn = gr.Button("Generate", variant="primary", elem_id="generate", min_width=80)
                    race_btn = gr.Button("Race all methods", elem_id="race", min_width=80)
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop", min_width=60)
                input_md = gr.Markdown(elem_id="input-message")
            with gr.Column(visible=not models.takes_clip(D0), elem_id="examples-box") as examples_box:
                examples = gr.Examples([[p] for p in MODELS.examples(D0)], inputs=prompt_tb, label="Example prompts")
            with gr.Column(elem_id="method-box"):
                method_rd = gr.Radio([(LABELS[m], m) for m in METHODS], value="scd-mc",
                                     label="Method (Generate)", elem_id="method")
            v0, _ = defaults(D0)                    # the first model's settings, by name
            with gr.Accordion("Settings", open=True, elem_id="settings"):
                init_dd = gr.Dropdown([(v, k) for k, v in labels.INIT_LABELS.items()], value=v0["init"],
                                      label="Draft init", elem_id="init")
                tree_dd = gr.Dropdown(labels.TREE_CHOICES, value=labels.TREE_CHOICES[0], label="Draft tree",
                                      info=labels.TREE_INFO, elem_id="tree")
                with gr.Row():
                    window_nb = number("window", v0["window"])
                    seed_nb = number("seed", 0)
                with gr.Row():
                    temp_nb = number("temperature", v0["temperature"])
                    greedy_cb = gr.Checkbox(v0["temperature"] == 0, label="Greedy (temperature 0)",
                                            elem_id="greedy", min_width=100)
                with gr.Row():
                    topk_nb = number("top_k", v0["top_k"])
                    topp_nb = number("top_p", v0["top_p"])
                with gr.Row():
                    cfg_nb = number("cfg", v0["cfg"])
                    samples_nb = number("samples", v0["samples"])
                pace_nb = number("pace", v0["pace"], info=texts.pace_info(servers.IMAGE_EVERY))
        with gr.Column(scale=3, elem_id="results"):
            grid0 = tuple(MODELS.at_hand(D0).grid)
            waiting0 = charts.waiting_figures(math.prod(grid0))          # what each chart says before a run
            with gr.Tabs() as tabs:
                with gr.Tab("Generate", id="tab-generate"):
                    # In sight while a run goes: the picture with its status under it and, beside
                    # it (under it on a phone), the charts drawn pass by pass; the rest after.
                    with gr.Row():
                        with gr.Column(scale=2, min_width=300, elem_id="picture-box"):
                            gr.Markdown("Committed tokens + current drafts", elem_classes="panel-title")
                            live_image = image("live-image", pictures.blank_picture(grid0))
                            status = gr.Markdown(texts.hint(texts.GENERATE_HINT, D0), elem_id="status")
                            tree_now = gr.HTML("", elem_id="tree-view")
                            gr.HTML(pictures.legend_html())
                        with gr.Column(scale=3, min_width=300, elem_id="live-charts"):
                            chart_committed = plot("chart-committed", waiting0["committed"])
                            chart_rate = plot("chart-rate", waiting0["rate"])
                            chart_flicker = plot("chart-flicker", waiting0["flicker"])
                    with gr.Row():
                        chart_length = plot("chart-length", waiting0["length"])
                        heat_committed = plot("heat-committed", waiting0["committed_at"])
                        heat_unchanged = plot("heat-unchanged", waiting0["unchanged"])
                    film_title = gr.Markdown(run_view.film_title(None), elem_classes="panel-title", elem_id="film-title")
                    film = image("film")
                    gr.HTML(pictures.film_legend_html(), elem_id="film-legend")
                    summary = gr.Markdown(run_view.SUMMARY_WAITING, elem_id="summary")
                    with gr.Row(visible=False) as clip_row:          # shown once a video run has its clip
                        clip_video = gr.Video(label="Finished clip (MP4)", elem_id="clip-video",
                                              interactive=False, height=260)
                        clip_files = gr.File(label="Download the clip (MP4, GIF)", file_count="multiple",
                                             interactive=False, elem_id="clip-files", height=260)
                    with gr.Accordion("Replay and export the last run", open=False, elem_id="replay"):
                        replay_slider = gr.Slider(0, 1, value=0, step=1, label="Pass",
                                                  elem_id="replay-slider")
                        with gr.Row():
                            replay_image = image("replay-image")
                            replay_probs = plot("replay-probs")
                        replay_text = gr.Markdown(run_view.REPLAY_WAITING, elem_id="replay-text")
                        with gr.Row():
                            export_btn = gr.Button("Export the decoding as GIF + MP4", elem_id="export")
                            export_files = gr.File(label="Downloads", file_count="multiple",
                                                   elem_id="export-files")
                        export_video = gr.Video(label="Decoding", interactive=False, height=300,
                                                elem_id="export-video")
                with gr.Tab("Race", id="tab-race"):
                    race_status = gr.Markdown(texts.hint(texts.RACE_HINT, D0), elem_id="race-status")
                    race_images = {}
                    with gr.Column(elem_classes="picture-panel"):       # shown once a race has pictures
                        for pair in (METHODS[:2], METHODS[2:]):
                            with gr.Row():
                                for m in pair:
                                    with gr.Column(min_width=240):
                                        gr.Markdown(LABELS[m], elem_classes="panel-title")
                                        race_images[m] = image(f"race-{m}")
                        race_sample = gr.Slider(1, 8, value=1, step=1, label="Sample shown", visible=False,
                                                elem_id="race-sample")
                        gr.HTML(pictures.legend_html().replace('id="scd-legend"', 'id="race-legend"'))
                    race_table = gr.HTML(elem_id="race-summary")
                    race_note = gr.Markdown(elem_id="race-note")
                    race_why = gr.Markdown(elem_id="race-why")
                    race_chart = plot("race-chart", charts.RACE_WAITING[0])
                    with gr.Row():
                        race_hist = plot("race-hist", charts.RACE_WAITING[1])
                        race_flicker = plot("race-flicker", charts.RACE_WAITING[2])
                    with gr.Accordion("The same figures from the benchmark", open=False, elem_id="race-bench-box"):
                        race_bench = gr.Markdown(race_view.BENCH_WAITING, elem_id="race-bench")
                    ratios_btn = gr.Button("Why texture and tiny differ: SJD vs SCD passes per image",
                                           elem_id="ratios", size="sm")
                    ratios_md = gr.Markdown(elem_id="ratios-table")
                with gr.Tab("Lossless", id="tab-lossless"):
                    gr.Markdown(lossless.HINT, elem_id="lossless-hint")
                    with gr.Row():
                        loss_samples = number("loss_samples", lossless.DEFAULT_SAMPLES, lossless.SAMPLES_FIELD)
                        loss_btn = gr.Button("Compare AR with the method", elem_id="lossless", min_width=120)
                    loss_message = gr.Markdown(elem_id="lossless-message")    # a click refused, said here
                    loss_status = gr.Markdown(elem_id="lossless-status")
                    loss_chart = plot("lossless-chart", lossless.WAITING_FIGURE)
                    loss_summary = gr.Markdown(elem_id="lossless-summary")
                    with gr.Row():                 # each picture with its title, shown once drawn
                        with gr.Column(min_width=240, elem_classes="picture-panel"):
                            gr.Markdown(f"AR: its first {lossless.SHOWN_SAMPLES} samples",
                                        elem_classes="panel-title")
                            loss_ar = image("lossless-ar")
                        with gr.Column(min_width=240, elem_classes="picture-panel"):
                            loss_method_title = gr.Markdown("The method: its first samples",
                                                            elem_classes="panel-title")
                            loss_method = image("lossless-method")
                    with gr.Column(elem_classes="picture-panel"):
                        loss_diff_title = gr.Markdown(lossless.DIFF_TITLE, elem_classes="panel-title",
                                                      elem_id="lossless-diff-title")
                        loss_diff = image("lossless-diff")
                    with gr.Column(elem_classes="picture-panel"):
                        gr.Markdown("Greedy (temperature 0): AR, then the method", elem_classes="panel-title")
                        loss_greedy = image("lossless-greedy")
                with gr.Tab("How it works", id="tab-explain"):
                    gr.Markdown(texts.HOW_IT_WORKS, elem_id="how-it-works")
                    plot("coupling-figure", charts.coupling_figure())       # one position of a real run
                    frontier_view.layout()                  # tiny and tiny-64 side by side, the frontier figure
    go_generate, go_race, go_lossless = (gr.Number(None, visible=False) for _ in range(3))   # set by a passed check
    stopped_state = gr.State(None)                     # the run a model pick stopped, for the switch to say
    marked_state = gr.State([])                        # the fields marked with a message now
    applied_state = gr.State(defaults(D0)[0])           # the settings the page set last (a model's defaults)

    # The one mapping from a decoding event's inputs, by their name in checks.INPUTS, to their
    # widgets: every handler, check and ZeroGPU duration takes the values by these names (Gradio
    # passes them as keyword arguments), and they become a run in one place, checks.read.
    input_views = {"model": model_dd, "method": method_rd, "window": window_nb, "init": init_dd,
                   "temperature": temp_nb, "top_k": topk_nb, "top_p": topp_nb, "cfg": cfg_nb, "seed": seed_nb,
                   "prompt": prompt_tb, "pace": pace_nb, "samples": samples_nb, "clip": clip_path,
                   "clip_text": clip_text_tb, "tree": tree_dd}
    if list(input_views) != checks.INPUTS:
        raise RuntimeError("app: the decoding events' inputs are not checks.INPUTS")
    # ... then the session's history and the click's stamp (last: the click's code sets it)
    inputs = input_views | {"history": history_state, "ticket": ticket}
    lossless_inputs = {k: v for k, v in input_views.items() if k in checks.CORE_INPUTS} | {
        "lossless_samples": loss_samples, "ticket": ticket}
    field_views = {k: v for k, v in input_views.items() if k not in ("method", "clip")}   # marked when refused
    setting_views = {k: input_views[k] for k in checks.SETTINGS}          # what a model switch sets
    gen_views = dict(zip(generate_view.VIEWS, (
        live_image, status, tree_now, chart_committed, chart_length, chart_flicker, chart_rate, heat_committed,
        heat_unchanged, film, film_title, summary, history_state, last_run, replay_slider, clip_row, clip_video,
        clip_files, replay_image, replay_text, replay_probs, export_files, export_video), strict=True))
    gen_outputs = list(gen_views.values())
    race_views = dict(zip(race_view.VIEWS, (race_status, race_table, race_note, race_why, race_chart,
                                            race_hist, race_flicker, race_bench, race_state, race_sample,
                                            *(race_images[m] for m in METHODS)), strict=True))
    race_outputs = list(race_views.values())
    lossless_outputs = [loss_status, loss_summary, loss_chart, loss_ar, loss_method, loss_greedy, loss_method_title,
                        loss_diff, loss_diff_title]
    clip_in.change(None, clip_in, clip_path, js="(v) => (v && v.path) || ''",
                   api_visibility="private")     # in the browser only: Gradio never sees a file
    # A click (or Enter in the prompt) is checked first, at once and outside the queue: a field
    # the page refuses gets its message beside it and nothing starts; else the run starts.
    checked = dict(inputs_kwargs=input_views | {"marked": marked_state}, queue=False, api_visibility="private",
                   show_progress="hidden")
    gr.on([gen_btn.click, prompt_tb.submit], check_generate,
          outputs=[input_md, marked_state, go_generate, switch_md, *field_views.values()], **checked)
    race_btn.click(check_race, outputs=[input_md, marked_state, go_race, switch_md, *field_views.values()], **checked)
    go_generate.change(generate_stream, None, gen_outputs, inputs_kwargs=inputs, api_name="generate",
                       validator=validate_generate,
                       show_progress_on=[status], time_limit=runs.TIME_LIMIT_S["generate"], js=texts.click_js("Generate"),
                       trigger_mode="always_last", **GENERATE)   # a click while busy runs once more, after
    go_race.change(race_stream, None, race_outputs, inputs_kwargs=inputs, api_name="race",
                   validator=validate_race,
                   show_progress_on=[race_status], time_limit=runs.TIME_LIMIT_S["race"], js=texts.click_js("Race"),
                   trigger_mode="always_last", **DECODE)
    stop_btn.click(stop, ticket, None, queue=False, api_name="stop", js="() => [Date.now()]")
    switch_outputs = [*setting_views.values(), *gen_outputs, *race_outputs, *lossless_outputs, applied_state,
                      switch_md, greedy_cb, prompt_words_md, model_md, examples.dataset, text_box,
                      clip_box, examples_box, gen_btn, race_btn]              # every view a switch sets
    # A pick stops the visitor's run and is acknowledged at once (outside the queue), then the switch.
    model_dd.change(None, model_dd, model_md, js=texts.PICKED_JS, queue=False)
    model_dd.change(picked, [model_dd, ticket], stopped_state, queue=False, api_visibility="private",
                    show_progress="hidden", js="(name, t) => [name, Date.now()]").then(
        on_model_change, None, list(dict.fromkeys([*switch_outputs, stopped_state])),
        inputs_kwargs={"name": model_dd, "applied": applied_state, "stopped": stopped_state, **setting_views},
        api_visibility="private").then(
        load_selected, model_dd, [model_md, gen_btn, race_btn], api_visibility="private",
        show_progress_on=[model_md], **DECODE)
    prompt_tb.change(prompt_words, [model_dd, prompt_tb], prompt_words_md, queue=False,
                     api_visibility="private", show_progress="hidden")
    gr.on([prompt_tb.change, method_rd.change], changed, [prompt_tb, method_rd, ticket], None, queue=False,
          api_visibility="private", show_progress="hidden", js="(p, m, t) => [p, m, Date.now()]")
    greedy_cb.input(lambda g, name: 0.0 if g else models.sampling_defaults(name, MODELS.loaded(name))
                    ["temperature"] or 1.0, [greedy_cb, model_dd], temp_nb, queue=False,
                    api_visibility="private")
    temp_nb.change(lambda t: t == 0, temp_nb, greedy_cb, queue=False, api_visibility="private")
    ratios_btn.click(shipped_ratios, None, ratios_md, api_name="ratios", queue=False)
    loss_btn.click(check_lossless, None, [loss_message, go_lossless], queue=False, api_visibility="private",
                   show_progress="hidden")
    go_lossless.change(lossless_run, None, lossless_outputs, inputs_kwargs=lossless_inputs,
                       api_name="lossless", validator=validate_lossless, show_progress_on=[loss_status],
                       time_limit=runs.TIME_LIMIT_S["lossless"],
                       js=texts.click_js("Lossless", "#lossless"), trigger_mode="always_last", **DECODE)
    # A slider redraws on any change a visitor makes (a drag, the arrow keys, a number typed):
    # one redraw at a time, then the last value asked meanwhile (the ones between are skipped).
    race_sample.input(show_race_sample, [race_sample, race_state], list(race_images.values()),
                      api_visibility="private", trigger_mode="always_last")
    replay_slider.input(replay_view, [replay_slider, last_run], [replay_image, replay_text, replay_probs],
                        api_name="replay", validator=validate_replay, trigger_mode="always_last")
    export_btn.click(export_run, last_run, [export_video, export_files], api_name="export",
                     validator=validate_export, time_limit=runs.TIME_LIMIT_S["export"], **DECODE)
    demo.unload(forget)

def unknown_route(request, exc) -> JSONResponse:
    """An API call to a route the page does not have (Gradio answers 500): 404."""
    return JSONResponse({"error": "No such API route: see the page's API (docs/deploy.md)."}, status_code=404)


demo.queue(**QUEUE)
LAUNCH = dict(css=texts.CSS, js=texts.LOAD_JS, theme=gr.themes.Soft(), max_file_size=uploads.MAX_UPLOAD_BYTES,   # tests launch with these too
              max_threads=THREADS, state_session_capacity=SESSIONS,
              app_kwargs={"exception_handlers": {FnIndexInferError: unknown_route}})


DRAIN_S = 3.0        # a clean stop waits this long at most for the runs in flight to say that they stopped
FLUSH_S = 0.3           # ... then this long for their last updates to leave
CLOSE_WORKERS_S = 3.0   # ... and this long for each decode worker to exit before it is terminated


def main() -> None:
    """Serve the page until SIGTERM (what a Space sends on restart) or SIGINT (Ctrl-C), then
    stop cleanly (`shut_down`) and return: the process exits 0."""
    logging.basicConfig(format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)          # the page's one-line notes, not every library's
    threads = backend.env_count("SCD_THREADS", 0)   # 0: the embedded models' own (1 on <= 2 cores)
    if threads:
        torch.set_num_threads(threads)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: stopping.set())
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), prevent_thread_lock=True, **LAUNCH)
    picture_files.CacheSweeper(lambda age: delete_files_created_by_app(demo, age), *CACHE_SWEEP, log=log.info).start()
    while not stopping.wait(0.5):       # short waits: the signal handlers run between them
        pass
    shut_down()


def shut_down() -> None:
    """A clean stop: every run in flight stops, its visitor told why (`demo.runs.Control.drain`),
    the server closes, then the decode workers (rows cancelled; terminated if they linger)."""
    started = time.monotonic()
    left = CONTROL.drain(runs.CLOSING, DRAIN_S)
    time.sleep(FLUSH_S)                 # their last updates leave the server
    drained = time.monotonic()
    demo.close()
    closed = time.monotonic()
    if KIND == "process":
        REQUESTS.client.close(CLOSE_WORKERS_S)
    elif hasattr(REQUESTS.client, "close"):
        REQUESTS.client.close()
    log.info("stopped in %.1f s: runs drained in %.1f s (%d still going were cut), the server closed in %.1f s, "
             "the workers in %.1f s", time.monotonic() - started, drained - started, left, closed - drained,
             time.monotonic() - closed)
