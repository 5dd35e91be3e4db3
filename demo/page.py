"""The page: its layout (`demo.layout`) wired to each tab's handlers, and served (`main`). `demo`
is the Blocks app (app.py hands it to a Hugging Face Space); `python -m demo` and `python
app.py` serve it (demo/__main__.py says why through there). Which file holds what: docs/layout.md."""
from __future__ import annotations

import functools
import gc
import logging
import os
import signal
import threading
import time

import gradio as gr
import torch
from gradio.route_utils import delete_files_created_by_app

from demo import backend, config, heap, models, picture_files, queues, runs, servers, texts
from demo.generate_tab import check_generate, generate_stream, validate_generate
from demo.layout import (D0, applied_state, clip_box, clip_in, clip_path, demo, examples, examples_box, export_btn,
                         export_files, export_video, field_views, gen_btn, gen_outputs, go_generate, go_lossless,
                         go_race, greedy_cb, input_md, input_views, inputs, last_run, loss_btn, loss_message,
                         loss_samples, loss_status, lossless_inputs, lossless_outputs, marked_state, method_rd,
                         model_dd, model_md, prompt_tb, prompt_words_md, race_btn, race_images, race_outputs,
                         race_sample, race_state, race_status, ratios_btn, ratios_md, replay_image, replay_probs,
                         replay_slider, replay_text, setting_views, status, stop_btn, stopped_state, switch_md,
                         temp_nb, text_box, ticket)
from demo.lossless_tab import check_lossless, lossless_run, validate_lossless
from demo.model_notes import prompt_words
from demo.models import log
from demo.model_switch import load_selected, lossless_estimate, on_model_change, validate_load, validate_switch
from demo.race_tab import check_race, race_stream, shipped_ratios, show_race_sample, validate_race, validate_race_sample
from demo.replay_tab import export_run, replay_view, validate_export, validate_replay
from demo.stopping import changed, forget, picked, stop

with demo:
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
                       show_progress_on=[status], js=texts.click_js("Generate"),
                       trigger_mode="always_last", **config.GENERATE)   # a click while busy runs once more, after
    go_race.change(race_stream, None, race_outputs, inputs_kwargs=inputs, api_name="race",
                   validator=validate_race,
                   show_progress_on=[race_status], js=texts.click_js("Race"),
                   trigger_mode="always_last", **config.DECODE)
    stop_btn.click(stop, ticket, None, queue=False, api_name="stop", js="() => [Date.now()]")
    switch_outputs = [*setting_views.values(), *gen_outputs, *race_outputs, *lossless_outputs, loss_samples,
                      applied_state, switch_md, greedy_cb, prompt_words_md, model_md, examples.dataset, text_box,
                      clip_box, examples_box, gen_btn, race_btn]              # every view a switch sets
    # A pick stops the visitor's run and is acknowledged at once (outside the queue), then the switch.
    model_dd.change(None, model_dd, model_md, js=texts.PICKED_JS, queue=False)
    model_dd.change(picked, [model_dd, ticket], stopped_state, queue=False, api_visibility="private",
                    show_progress="hidden", js="(name, t) => [name, Date.now()]").then(
        on_model_change, None, list(dict.fromkeys([*switch_outputs, stopped_state])),
        inputs_kwargs={"name": model_dd, "applied": applied_state, "stopped": stopped_state, **setting_views},
        api_visibility="private", validator=validate_switch, concurrency_id="switch").then(
        load_selected, model_dd, [model_md, gen_btn, race_btn], api_visibility="private", validator=validate_load,
        show_progress_on=[model_md], **config.LOAD)
    prompt_tb.change(prompt_words, [model_dd, prompt_tb], prompt_words_md, queue=False,
                     api_visibility="private", show_progress="hidden")
    gr.on([prompt_tb.change, method_rd.change], changed, [prompt_tb, method_rd, ticket], None, queue=False,
          api_visibility="private", show_progress="hidden", js="(p, m, t) => [p, m, Date.now()]")
    greedy_cb.input(lambda g, name: 0.0 if g else models.sampling_defaults(name, config.MODELS.loaded(name))
                    ["temperature"] or 1.0, [greedy_cb, model_dd], temp_nb, queue=False,
                    api_visibility="private")
    temp_nb.change(lambda t: t == 0, temp_nb, greedy_cb, queue=False, api_visibility="private")
    ratios_btn.click(shipped_ratios, None, ratios_md, api_name="ratios", queue=False)
    loss_samples.change(lossless_estimate, [model_dd, loss_samples], loss_status, queue=False, api_visibility="private",
                        show_progress="hidden")
    loss_btn.click(check_lossless, None, [loss_message, go_lossless], queue=False, api_visibility="private",
                   show_progress="hidden")
    go_lossless.change(lossless_run, None, lossless_outputs, inputs_kwargs=lossless_inputs,
                       api_name="lossless", validator=validate_lossless, show_progress_on=[loss_status],
                       js=texts.click_js("Lossless", "#lossless"), trigger_mode="always_last", **config.DECODE)
    # A slider redraws on any change a visitor makes (a drag, the arrow keys, a number typed):
    # one redraw at a time, then the last value asked meanwhile (the ones between are skipped).
    race_sample.input(show_race_sample, [race_sample, race_state], list(race_images.values()),
                      api_visibility="private", trigger_mode="always_last", validator=validate_race_sample,
                      concurrency_id="race_sample")
    replay_slider.input(replay_view, [replay_slider, last_run], [replay_image, replay_text, replay_probs],
                        api_name="replay", validator=validate_replay, trigger_mode="always_last",
                        concurrency_id="replay")
    export_btn.click(export_run, last_run, [export_video, export_files], api_name="export",
                     validator=validate_export, **config.DECODE)
    demo.unload(forget)

demo.queue(**config.QUEUE)
config.CONTROL.admissions.jobs = functools.partial(queues.gradio_jobs, demo)   # the jobs it holds


def main() -> None:
    """Serve the page until SIGTERM (what a Space sends on restart) or SIGINT (Ctrl-C), then
    stop cleanly (`shut_down`) and return: the process exits 0."""
    heap.cap_arenas()                   # before the server's threads start
    logging.basicConfig(format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)          # the page's one-line notes, not every library's
    threads = backend.env_count("SCD_THREADS", 0)   # 0: the embedded models' own (1 on <= 2 cores)
    if threads:
        torch.set_num_threads(threads)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: stopping.set())
    warming = [config.MODELS.warm(name, worker=name == D0) for name in models.listed_models()]
    deadline = time.monotonic() + config.WARM_S       # the page answers once its first model's worker is ready
    for thread in filter(None, warming):
        thread.join(max(0.0, deadline - time.monotonic()))
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), prevent_thread_lock=True, **config.LAUNCH)
    picture_files.CacheSweeper(lambda age: delete_files_created_by_app(demo, age), *config.CACHE_SWEEP, log=log.info).start()
    heap.Trimmer().start()              # what bursts of visitors freed goes back to the system
    while not stopping.wait(0.2):       # short waits: the signal handlers run between them
        pass
    shut_down()
    gc.freeze()         # the interpreter's last collection would walk every object of the page (seconds)


def shut_down() -> None:
    """A clean stop: every run in flight stops and every job still waiting starts and ends at
    once, each visitor told why (`demo.runs.Control.drain`); their last updates leave; the
    server closes, then the decode workers (rows cancelled; terminated if they linger)."""
    started = time.monotonic()
    told = queues.sessions(demo)
    config.CONTROL.closing = runs.CLOSING
    queues.open_all(demo)
    left = config.CONTROL.drain(runs.CLOSING, config.DRAIN_S)
    servers.wait_while(lambda: queues.unsent(demo, told) > 0, config.FLUSH_S)
    time.sleep(config.SENT_S)               # the last bytes through the sockets
    drained = time.monotonic()
    demo.close()
    closed = time.monotonic()
    if config.KIND == "process":
        config.REQUESTS.client.close(config.CLOSE_WORKERS_S)
    elif hasattr(config.REQUESTS.client, "close"):
        config.REQUESTS.client.close()
    log.info("stopped in %.1f s: runs drained in %.1f s (%d still going were cut), the server closed in %.1f s, "
             "the workers in %.1f s", time.monotonic() - started, drained - started, left, closed - drained,
             time.monotonic() - closed)
