"""The page's layout: every component, where it sits, and the maps the handlers read it by (a
decoding event's inputs by name, each tab's views by name). It holds no event: `demo.page` wires
them (import it, not this, for a page that runs); each tab's handlers are in `demo/*_tab.py`."""
from __future__ import annotations

import math

import gradio as gr

from scd_core.settings import METHODS

from demo import charts, checks, config, frontier_view, generate_view, labels, lossless, models, pictures, race_view, \
    run_view, servers, texts
from demo.clips import example_clips
from demo.labels import METHOD_LABELS as LABELS
from demo.model_notes import defaults, model_info, prompt_words

D0 = models.listed_models()[0]


def keyed(views: dict, update: dict) -> dict:
    """A view update by view name (`demo.generate_view.VIEWS`, `demo.race_view.VIEWS`) for the
    page's components (`views`: view name -> component)."""
    return {views[name]: value for name, value in update.items()}


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


with gr.Blocks(title="Speculative coupled decoding", delete_cache=config.CACHE_SWEEP) as demo:
    history_state, last_run = gr.State({}, time_to_live=3600), gr.State(None, time_to_live=3600)
    race_state = gr.State(None, time_to_live=1800)
    ticket = gr.Number(None, visible=False)       # the click's time stamp, set by the browser
    gr.Markdown(texts.HEADER + models.device_note(config.REQUESTS.client), elem_id="header")
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
                prompt_tb = gr.Textbox(config.MODELS.examples(D0)[0], label="Prompt", lines=1,
                                       max_lines=3, elem_id="prompt")
                prompt_words_md = gr.Markdown(prompt_words(D0, config.MODELS.examples(D0)[0]),
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
                examples = gr.Examples([[p] for p in config.MODELS.examples(D0)], inputs=prompt_tb, label="Example prompts")
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
            grid0 = tuple(config.MODELS.at_hand(D0).grid)
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
                        loss_samples = number("loss_samples", lossless.default_samples(D0), lossless.SAMPLES_FIELD)
                        loss_btn = gr.Button("Compare AR with the method", elem_id="lossless", min_width=120)
                    loss_message = gr.Markdown(elem_id="lossless-message")    # a click refused, said here
                    loss_status = gr.Markdown(lossless.estimate_note(D0, lossless.default_samples(D0)),
                                              elem_id="lossless-status")
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
                    plot("coupling-figure", charts.coupling_figure())       # two positions of a real run
                    frontier_view.layout(race_view.leads_sentence())   # tiny and tiny-64 side by side, the frontier figure
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
    raise RuntimeError("demo.layout: the decoding events' inputs are not checks.INPUTS")
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
