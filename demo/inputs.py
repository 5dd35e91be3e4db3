"""A decoding event's inputs checked, for every tab: the page's and the library's refusals by
input (`problems`), the validator's answer with the visitor's admission to a queue (`verdict`),
a click's check outside the queue (`checked_click`, `busy`), and the checked run a handler
decodes (`prepare`). Each tab's own validators are in its module (`demo/*_tab.py`)."""
from __future__ import annotations

import time

import gradio as gr

from demo import checks, config, runs, uploads
from demo.clips import example_clips
from demo.layout import field_views, input_md, marked_state, switch_md
from demo.models import log


LOG_CHARS = 300          # a refusal is logged this long at most (it quotes what the visitor sent)


def logged(text: str, limit: int = LOG_CHARS) -> str:
    """A message for the log, cut to `limit` characters, saying how long it was."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


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
    found = checks.problems(config.MODELS.loaded(values["model"]), values) | ({"clip": refused} if refused else {})
    return {k: uploads.without_paths(v) for k, v in found.items()}


def verdict(values: dict, found: dict[str, str], request, queue: str, what: str) -> list:
    """Gradio's validator's answer for an event's inputs (`values`, by name in their order):
    each refused one gets its message; with none refused, the visitor's job is admitted to
    `queue` (`demo.runs.Control.admit`: within the queue's caps) or refused, said beside the
    first input."""
    if not found and (busy := config.CONTROL.admit(request, queue, what)):
        found = {next(iter(values)): busy}
    if found:
        log.info("input rejected: %s", logged("; ".join(found.values())))
    return [gr.validate(n not in found, found.get(n, "")) for n in values]


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
        log.info("input refused: %s", logged("; ".join(found.values())))
    return {input_md: checks.not_started(found), marked_state: sorted(found)} | \
        {field_views[name]: update for name, update in marks.items()} | \
        ({} if found else {go: time.time(), switch_md: ""})


def busy(request, message=lambda text: {input_md: text}) -> dict:
    """A click while the visitor's run goes: refused with a word (`message(text)`: where it
    is said), nothing starts; {} when no run goes (`demo.runs.Control.busy`)."""
    refusal = config.CONTROL.busy(runs.session_key(request))
    return message(refusal) if refusal else {}


def prepare(values: dict, method: str | None = None):
    """The model as the page uses it (`Models.for_page`) and the checked run of a decoding
    event's widget values by name (`method` in place of the chosen one): the clip's path
    checked before anything opens it, the model loaded, then `checks.read`, the one
    conversion of the widget values. ValueError with the message otherwise."""
    values, refused = checked_clip(checks.values_of(values | ({"method": method} if method else {})))
    if refused:
        raise ValueError(refused)
    model, _ = checks.load_for(values["model"], values["prompt"], values["clip"], values["clip_text"],
                               config.MODELS.for_page, loaded=config.MODELS.loaded(values["model"]) is not None)
    return model, checks.read(values, model)


def refused(exc: Exception, started: bool = False) -> str:
    """A run that could not start, or a row lost on the way, in the status's words."""
    log.info("not decoded: %s", logged(str(exc)))
    return f"**{'Not finished' if started else 'Not started'}:** {uploads.without_paths(exc)}"
