"""What stops a visitor's run, for every tab: Stop, a model picked, a new prompt or method, the
visitor gone; and a decoding handler as the visitor's one run (`one_run`), which ends with the
new model's views when a pick stopped it (`demo.runs.Control` keeps the runs)."""
from __future__ import annotations

from typing import Callable

import gradio as gr

from demo import config, models, runs
from demo.layout import gen_outputs, lossless_outputs, race_outputs
from demo.model_switch import switched_views


def left_views(run: runs.Run) -> dict:
    """The last update of a run whose model was switched away: its event's views as the new
    model's, before any run, its status saying that it stopped (the switch shows the same)."""
    outputs = {"generate": gen_outputs, "race": race_outputs, "lossless": lossless_outputs}[run.kind]
    return {k: v for k, v in switched_views(run.left, {"kind": run.kind, "named": run.named()}).items()
            if k in outputs}


def one_run(kind: str, status: Callable[[], object]):
    """A decoding event's handler as the visitor's one run (`demo.runs.Control.one_run`)."""
    return config.CONTROL.one_run(kind, status, left_views)


def stop(at=None, request: gr.Request = None):
    config.CONTROL.stop(runs.session_key(request), at)   # their running rows leave at their next boundary


def forget(request: gr.Request = None):
    config.CONTROL.forget(runs.session_key(request))


def picked(name: str, ticket=None, request: gr.Request = None) -> dict:
    """At once when a model is picked (outside the queue), before the switch itself: the
    visitor's run stops and nothing more of it is shown (the note under the model has said
    in the browser that the pick was heard: where a model stands can take seconds to find out)."""
    key = runs.session_key(request)
    if isinstance(name, str) and name in models.listed_models():
        config.MODELS.warm(name)             # its first run does not wait for it to load
    run = config.CONTROL.halt(key, f"you picked {name}", ticket, left=name)
    if run is None:
        config.CONTROL.stop(key, ticket)     # a run still in the queue never starts on the old model
    return {"kind": run.kind, "named": run.named()} if run is not None else None


def changed(prompt, method, ticket=None, request: gr.Request = None) -> None:
    """A new prompt (or method) while the visitor's run goes: it stops at once, its status
    saying why (a race runs every method: only a new prompt stops it)."""
    run = config.CONTROL.runs.going(runs.session_key(request))
    if run is None or run.left:
        return
    button = runs.BUTTONS[run.kind]
    for what, now, was, kinds in (("prompt", prompt, run.prompt, ("generate", "race", "lossless")),
                                  ("method", method, run.method, ("generate", "lossless"))):
        if run.kind in kinds and now is not None and str(now) != was:
            config.CONTROL.halt(runs.session_key(request),
                                f"**Stopped:** you changed the {what}; press **{button}** to run the new one.",
                                ticket, kinds=kinds)
            return
