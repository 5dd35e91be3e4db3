"""What a model pick does to the page: the settings kept or set, every tab's views cleared to the
new model's, Generate and Race enabled only where it can run (`on_model_change`), a large model
loaded at once (`load_selected`). The pick stopping the visitor's run: `demo.stopping`."""
from __future__ import annotations

import contextvars
import functools
import math
import threading

import gradio as gr

from demo import checks, config, frontier_view, generate_view, lossless, models, race_view, runs, texts, uploads
from demo.inputs import verdict
from demo.layout import (applied_state, clip_box, examples, examples_box, gen_btn, gen_views, greedy_cb, keyed,
                         loss_ar, loss_chart, loss_diff, loss_diff_title, loss_greedy, loss_method, loss_samples,
                         loss_status,
                         loss_summary, model_md, prompt_words_md, race_btn, race_status, race_views, replay_slider,
                         setting_views, status, stopped_state, switch_md, text_box)
from demo.model_notes import can_run, defaults, model_info, prompt_words


def validate_switch(request: gr.Request = None, **values):
    """A switch joins its queue within its caps (`demo.runs.Control.admit`)."""
    return verdict(values, {}, request, "switch", "model switch")


def validate_load(name, request: gr.Request = None):
    return verdict({"model": name}, {}, request, runs.LOAD_QUEUE, "model load")


def load_selected(name: str, progress=gr.Progress()):
    """Load a large model as soon as it is picked, its download shown as progress; a model
    that could not be fetched (no network here) cannot be started. A load still going at its
    time limit goes on in the background (a run on the model waits for it), said in the note."""
    if config.CONTROL.closing:
        return {model_md: f"{model_info(name)}  \n**Not loaded:** {config.CONTROL.closing}"}
    said: list[str] = []
    load = functools.partial(config.MODELS.load_note, name, lambda done, total, repo: progress(
        (done, total) if total else 0.0, desc=f"Downloading {repo}", unit="bytes"))
    context = contextvars.copy_context()                 # the event's, so that its progress is shown
    loading = threading.Thread(target=lambda: said.append(context.run(load)), name="scd-load", daemon=True)
    loading.start()
    ended = config.CONTROL.limited("load")
    while loading.is_alive() and not ended():
        loading.join(0.25)
    note = said[0] if said else f"{model_info(name)}  \n{runs.limit_message('load', config.CONTROL.limits['load'])}"
    return {model_md: texts.command_blocks(uploads.without_paths(note)) + frontier_view.model_link(name)} | runnable(name)


def runnable(name: str) -> dict:
    """Generate and Race, enabled only for a model that can run here."""
    ok = can_run(name)
    return {gen_btn: gr.Button(interactive=ok), race_btn: gr.Button(interactive=ok)}


def cleared_views(name: str) -> dict:
    """Every view of a run, a race and a comparison, as before any: the last ones were another
    model's. The pictures are the new model's empty grid where it is at hand."""
    ok = can_run(name)
    model = config.MODELS.at_hand(name) if ok else None
    grid = tuple(model.grid) if model is not None else None
    run = generate_view.waiting(grid, math.prod(grid) if grid else models.REGISTRY[name].tokens) | \
        generate_view.REPLAY_CLEARED | {"status": texts.hint(texts.GENERATE_HINT if ok else texts.CANNOT_RUN, name)}
    return keyed(gen_views, run) | {replay_slider: gr.Slider(value=0)} | keyed(race_views, race_waiting(name, ok)) | lossless_waiting(name)


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


def lossless_waiting(name: str) -> dict:
    """The Lossless tab before a comparison on `name`: its samples per method by default, and
    about how long that takes here."""
    samples = lossless.default_samples(name)
    return {loss_status: lossless.estimate_note(name, samples), loss_samples: samples, loss_summary: "",
            loss_chart: lossless.WAITING_FIGURE, loss_ar: None, loss_method: None, loss_diff: None, loss_greedy: None,
            loss_diff_title: lossless.DIFF_TITLE}


def lossless_estimate(name: str, samples) -> str:
    """The estimate again when the samples or the model change (nothing for a number it refuses)."""
    return lossless.estimate_note(name, samples)


def on_model_change(name: str, applied: dict | None = None, stopped: dict | None = None, **current):
    """What the model is (or why it cannot run here); the visitor's settings kept where they
    chose them and the model can take them, the rest its defaults, in one line (`checks.switched`);
    the last model's views cleared; Generate and Race disabled for a model that cannot run.
    `stopped`: the run the pick stopped (`demo.stopping.picked`), said in its tab's status."""
    new, ok = defaults(name)
    values, said = checks.switched(name, current, applied, new,
                                   config.MODELS.loaded(name) or config.MODELS.at_hand(name) if ok else None,
                                   models.is_video(name))
    clip, prompts = models.takes_clip(name), config.MODELS.examples(name) if ok else []
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
