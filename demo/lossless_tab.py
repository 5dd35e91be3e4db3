"""The Lossless tab's handlers: a click on Compare (`check_lossless`), the validator before the
queue (`validate_lossless`), and the comparison of AR with the method (`lossless_run`; its
chart, pictures and words: `demo.lossless`)."""
from __future__ import annotations

import time

import gradio as gr

from scd_core import lossless as lossless_stats
from scd_core.models import static

from demo import config, layout, lossless, runs, texts, zerogpu
from demo.inputs import busy, prepare, problems, refused, verdict
from demo.labels import METHOD_LABELS as LABELS
from demo.layout import (go_lossless, loss_ar, loss_chart, loss_diff, loss_diff_title, loss_greedy, loss_message,
                         loss_method, loss_method_title, loss_status, loss_summary)
from demo.stopping import one_run


def validate_lossless(request: gr.Request = None, **values):
    """Runs before a Lossless comparison joins the queue: its model and samples too."""
    found = problems(values | {"method": "scd-mc"})
    for name, check in (("model", lossless.check_model), ("lossless_samples", lossless.check_samples)):
        try:
            check(values.get(name))
        except ValueError as exc:
            found.setdefault(name, str(exc))
    return verdict(values, found, request, runs.DECODE_QUEUE, runs.KINDS["lossless"])


def check_lossless(request: gr.Request = None):
    """A click on Compare: refused with a word while the visitor's run goes, else it starts."""
    return busy(request, lambda text: {loss_message: text}) or {loss_message: "", go_lossless: time.time()}


@one_run("lossless", lambda: loss_status)
@zerogpu.on_gpu(zerogpu.lossless_seconds, lambda: layout.demo.blocks)
def lossless_run(request: gr.Request = None, *, lossless_samples=None, ticket=None, **values):
    """Many samples of AR and of the method (the one picked; SCD-MC when AR is; by default the
    model's `lossless.default_samples`), which token each put at the four positions where the
    samples vary most, with the chi-square test's p-value, and greedy mode's tokens."""
    outputs = (loss_summary, loss_chart, loss_ar, loss_method, loss_greedy, loss_diff)
    try:
        name = lossless.check_model(values.get("model"))
        samples = lossless.check_samples(lossless.default_samples(name) if lossless_samples is None
                                         else lossless_samples)
        model, page = prepare(values, method="scd-mc")
        s = page.race
    except ValueError as exc:
        yield {loss_status: refused(exc)}
        return
    other = lossless.method_of(values["method"])
    settings = s.settings if s.settings.temperature > 0 else s.settings.replace(temperature=1.0)
    progress = lossless.Progress(samples, zerogpu.LOSSLESS_BATCH, other)

    def compare(stop):
        try:
            return lossless_stats.compare(model, s.prompt, settings, other, samples, seed=s.seed,
                                          batch=zerogpu.LOSSLESS_BATCH, stop=stop, on_batch=progress.ask)
        finally:      # its buffers (about 70 MB on tiny) are not kept for a next comparison: the page's visitors use the memory
            static.buffers_of(model).drop_idle()

    comparing = lossless.Comparing(      # in a thread: the progress is said meanwhile; it ends with the handler
        compare, config.CONTROL.stopped(runs.session_key(request), ticket))
    try:
        yield dict.fromkeys(outputs, None) | {loss_status: progress.said() + texts.said(progress.heard(True), "start")}
        while (c := comparing.result(timeout=1.0)) is comparing.PENDING:
            yield {loss_status: progress.said() + texts.said(progress.heard(False), "step")}
    finally:
        comparing.close()
    if isinstance(c, Exception):
        yield {loss_status: refused(c, started=True)}
        return
    if c is None:
        yield {loss_status: "**Stopped** before the samples were complete: nothing to compare."
               + texts.said("Lossless comparison stopped before the samples were complete.", "end")}
        return
    yield {loss_status: f"**Done** on **{name}** in {c.seconds:.0f} s." + texts.said(lossless.done_words(name, c), "end"),
           loss_summary: lossless.summary_markdown(model, c),
           loss_chart: lossless.histogram_figure(model, c),
           loss_ar: lossless.samples_picture(model, c.ar_tokens),
           loss_method: lossless.samples_picture(model, c.method_tokens),
           loss_greedy: lossless.greedy_picture(model, c),
           loss_diff: lossless.diff_picture(model, c), loss_diff_title: lossless.diff_title(c),
           loss_method_title: f"{LABELS[other]}: its first {lossless.SHOWN_SAMPLES} samples"}
