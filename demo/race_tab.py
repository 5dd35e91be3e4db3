"""The Race tab's handlers: a click checked (`check_race`), the validator before the queue
(`validate_race`), the race streamed (`race_stream`: every method decoded, timed, replayed in
lockstep; its views: `demo.race_view`), another sample shown (`show_race_sample`) and the
shipped passes side by side (`shipped_ratios`)."""
from __future__ import annotations

import time

import gradio as gr

from scd_core import race
from scd_core.client import DecodeError

from demo import config, layout, models, race_view, runs, servers, streaming, zerogpu
from demo.inputs import busy, checked_click, prepare, problems, refused, verdict
from demo.layout import go_race, keyed, race_images, race_outputs, race_status, race_views
from demo.stopping import one_run


def validate_race(request: gr.Request = None, **values):
    """Runs before a race joins the queue: checked as a speculative method (it runs them all)."""
    return verdict(values, problems(values | {"method": "scd-mc"}), request, runs.DECODE_QUEUE, runs.KINDS["race"])


def check_race(request: gr.Request = None, *, marked=None, **values):
    return busy(request) or checked_click(go_race, values, marked, race_all=True)


@one_run("race", lambda: race_status)
@zerogpu.on_gpu(zerogpu.race_seconds, lambda: layout.demo.blocks)
@streaming.streams_in_full(lambda: race_outputs)
def race_stream(request: gr.Request = None, *, history=None, ticket=None, **values):
    """Per method, decode ONE image alone (its latency) and then K samples together (the
    batch's throughput, and every per-sample figure) on the page's decode client, the same
    as Generate, showing the pictures as they form; time each method again, in turns; then
    replay the recorded passes in lockstep by NFE (at the slow-motion pace) and report."""
    began, key = time.monotonic(), runs.session_key(request)
    stopped = config.CONTROL.stopped(key, ticket)
    try:
        model, page = prepare(values, method="scd-mc")   # the race runs every method: checked as one with drafts
        name = page.name
        rounds = zerogpu.race_rounds(name, page.settings.window, page.samples, page.pace)   # timing rounds
        zerogpu.check_fits(zerogpu.race_estimate(name, page.settings.window, page.samples, page.pace, rounds),
                           "This race", "lower the race samples K (or the slow motion), or pick a smaller model")
        view = race_view.RaceView(model, page, models.decoding_device(config.REQUESTS.client, name),
                                  lambda runs: race.gap_probe(model, name, page.race, runs), models.is_video(name),
                                  rounds)
        yield keyed(race_views, view.started())
        if note := config.MODELS.swap_note(name):         # a model swap or load to wait for, said first
            yield keyed(race_views, {"status": note})
        for step in race.decode_race(config.REQUESTS.client, name, page.race, page.samples, stopped, rounds):
            update = view.step(step)
            if update:                                    # nothing when no status or picture is due
                yield keyed(race_views, update)
            if step.phase == "timing" and config.KIND != "call":   # visitors' Generate rows first (a while at most)
                servers.wait_while(lambda: config.REQUESTS.rows_of(name) > 0, servers.RACE_YIELD_S, stopped)
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
    limit = config.CONTROL.limits["race"]
    pace = servers.replay_pace(page.pace, last, limit - (time.monotonic() - began))   # within the race's limit
    shortened = "" if pace == page.pace else (
        f"Replayed at {pace:.2g} s a pass (you asked {page.pace:g} s) so that the race ends within the page's "
        f"{limit} s limit.  \n")
    for tick in servers.replay_ticks(last, pace, servers.IMAGE_EVERY, stopped) if pace else ():
        update = view.replay(tick)
        yield keyed(race_views, update | {"status": shortened + update["status"]} if shortened else update)
    if stopped() and tick < last:
        yield keyed(race_views, view.report(f"**Replay stopped at NFE {tick}**; every method had finished decoding: "
                                "the figures below are complete.", tick))
        return
    done = view.done()
    yield keyed(race_views, done | {"status": shortened + done["status"]})


def shipped_ratios():
    """texture's and tiny's passes per image for SJD and SCD-MC, from the benchmark's tables."""
    return race_view.ratios_markdown()


def validate_race_sample(index, state, request: gr.Request = None):
    return verdict({"index": index, "state": state}, {}, request, "race_sample", "race sample")


@zerogpu.on_gpu(zerogpu.short_seconds, lambda: layout.demo.blocks)
def show_race_sample(index, state):
    """Another sample of the last race, as its panels show it (nothing without a race)."""
    if not state:
        return {view: gr.skip() for view in race_images.values()}
    panels = race_view.RacePanels(config.MODELS.for_page(state["model"]), max(0, int(index) - 1))
    return keyed(race_views, panels.at(state["runs"]))
