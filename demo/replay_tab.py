"""The replay and export of a visitor's last Generate run (in the Generate tab's "Replay and
export" box): a pass replayed (`replay_view`), the decoding exported as MP4 and GIF
(`export_run`), each with its validator."""
from __future__ import annotations

import math

import gradio as gr

from demo import checks, config, export, generate_view, layout, run_view, runs, zerogpu
from demo.inputs import verdict


def validate_replay(index, run, request: gr.Request = None):
    """A replayed pass: a number (the pass), refused before the queue. Gradio reads the
    slider's value (a number within its range, or its message) before it calls a validator:
    with one, a bad value is refused there, with no traceback."""
    ok = isinstance(index, (int, float)) and not isinstance(index, bool) and math.isfinite(index)
    return verdict({"index": index, "run": run}, {} if ok else {"index": f"Pass: a number, got {checks.given(index)}."},
                   request, "replay", "replayed pass")


def validate_export(run, request: gr.Request = None):
    return verdict({"run": run}, {}, request, runs.DECODE_QUEUE, "export")


@zerogpu.on_gpu(zerogpu.short_seconds, lambda: layout.demo.blocks)
def replay_view(index, run):
    if not run or not run.get("iterations"):
        return gr.skip(), run_view.REPLAY_WAITING, gr.skip()
    i = int(min(max(index, 0), len(run["iterations"]) - 1))
    out = generate_view.replay(config.MODELS.for_page(run["model"]), run, i)
    return out["replay_image"], out["replay_text"], out["replay_probs"]


@zerogpu.on_gpu(zerogpu.export_seconds, lambda: layout.demo.blocks)
def export_run(run, request: gr.Request = None):
    """The visitor's last run as MP4 and GIF, stopped at the export's time limit (said in an error)."""
    if not run or not run.get("iterations"):
        return None, None
    try:
        mp4, gif = export.export_decoding(config.MODELS.for_page(run["model"]), run["iterations"],
                                          f"{run['model']}-{run['method']}-decoding", decode=run.get("decode"),
                                          stopped=config.CONTROL.limited("export"))
    except export.Stopped:
        why = f"Stopped: {config.CONTROL.closing}" if config.CONTROL.closing else \
            runs.limit_message("export", config.CONTROL.limits["export"]).replace("**", "")
        raise gr.Error(why) from None
    return mp4, [mp4, gif]
