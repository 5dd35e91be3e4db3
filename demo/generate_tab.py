"""The Generate tab's handlers: a click checked (`check_generate`), the validator before the
queue (`validate_generate`), and the run streamed pass by pass (`generate_stream`, its views:
`demo.generate_view`). The replay and export of its last run: `demo.replay_tab`."""
from __future__ import annotations

import gradio as gr

from scd_core.client import DecodeError

from demo import backend, config, generate_view, layout, models, runs, servers, streaming, texts, zerogpu
from demo.inputs import busy, checked_click, prepare, problems, refused, verdict
from demo.layout import gen_outputs, gen_views, go_generate, keyed, status
from demo.stopping import one_run


def validate_generate(request: gr.Request = None, **values):
    """Runs before a Generate request joins the queue (the event's inputs by name)."""
    return verdict(values, problems(values), request, runs.GENERATE_QUEUE, runs.KINDS["generate"])


def check_generate(request: gr.Request = None, *, marked=None, **values):
    return busy(request) or checked_click(go_generate, values, marked)


@one_run("generate", lambda: status)
@zerogpu.on_gpu(zerogpu.generate_seconds, lambda: layout.demo.blocks)
@streaming.streams_in_full(lambda: gen_outputs)
def generate_stream(request: gr.Request = None, *, history=None, ticket=None, **values):
    """Decode one sample as a row on the decode client (visitors' rows share passes) and
    stream its passes to the page (every pass in slow motion, else a few pictures a second);
    Stop cancels it at once, keeping what is shown, and its row leaves the batch. An input the
    model refuses (a clip too short for it...) or a lost row is said in the status, nothing lost;
    a refused run on another model clears the replay and export, which belong to the last run.
    `values`: the event's inputs by their name in `checks.INPUTS`."""
    key = runs.session_key(request)
    stopped = config.CONTROL.stopped(key, ticket)
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
        view = generate_view.GenerateView(model, page, history, models.decoding_device(config.REQUESTS.client, name))
        if note := config.MODELS.swap_note(name):         # a model swap or load to wait for, said first
            yield keyed(gen_views, view.cleared({"status": note}))
        row = backend.Row(config.REQUESTS, config.REQUESTS.submit(key, name, page.race.prompt, page.race.seed,
                                                                   page.settings), name)
        waiting = config.SERVERS.timing_alone.is_set if config.KIND == "local" else lambda: False
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
