"""The Gradio app: its handlers called directly, then the app served in-process on
127.0.0.1 and driven with gradio_client (streaming, Stop, bad input); many visitors at once:
test_app_serving.py.

Runs on the synthetic `texture` model (24x24 tokens, closed-form logits: fast on a CPU).
"""
from __future__ import annotations

import os
import re
import time
from types import SimpleNamespace

import numpy as np
from PIL import Image
import pytest
from gradio_client import Client

import scd_core
from demo import (checks, config, generate_tab, inputs, labels, layout, model_notes, model_switch, models,
                  pictures, race_tab, race_view, replay_tab, run_view, servers, stopping, texts, zerogpu)
from scd_core import race
from scd_core.settings import METHODS
from scd_core.models.cache import ModelCache
from scd_core.models.status import model_status
from fakehub import empty_hub_cache  # noqa: F401  (a fixture)
from plots_util import figure

pytestmark = pytest.mark.served

GOOD = dict(model="texture", method="scd-mc", window=16, init="random", temperature=1.0,
            top_k=0, top_p=1.0, cfg_scale=1.0, seed=0, prompt="ocean waves", pace=0.0, samples=3)


def args(**override) -> dict:
    """The inputs of the Generate and Race events by their name on the page (`checks.INPUTS`;
    the library's `cfg_scale` is the page's `cfg`), the states and the click's stamp apart."""
    d = {**GOOD, **override}
    d.setdefault("cfg", d["cfg_scale"])
    return {k: d.get(k, checks.LEFT_OUT.get(k)) for k in checks.INPUTS}


def visitor(name: str):
    return SimpleNamespace(session_hash=name)


def picture(value):
    """A picture output's pixels: the page hands Gradio pictures as PNG files written once."""
    if isinstance(value, str) and value.endswith(".png"):
        return np.asarray(Image.open(value).convert("RGB"))
    return value


def final(updates: list[dict], key) -> object:
    """The last value an update stream gave `key` (a picture's pixels for a picture)."""
    return picture(next(u[key] for u in reversed(updates) if key in u))


def shown(updates: list[dict], key) -> list:
    """The values an update stream showed in `key`, in order: a value repeated in the next
    updates (each update names every output shown so far) counts once."""
    values = [u[key] for u in updates if key in u]
    return [picture(v) for i, v in enumerate(values) if i == 0 or v is not values[i - 1]]


# ------------------------------------------------------------------------- generate

def test_generate_streams_the_picture_then_charts_and_summary():
    updates = list(generate_tab.generate_stream(**args()))
    assert len(updates) >= 2 and all(layout.status in u or layout.chart_committed in u for u in updates)
    img = final(updates, layout.live_image)
    assert img.dtype == np.uint8 and img.shape == (384, 384, 3)       # 192 px decoded, x2
    for plot in (layout.chart_committed, layout.chart_length, layout.chart_flicker, layout.chart_rate,
                 layout.heat_committed, layout.heat_unchanged):
        assert figure(final(updates, plot)).data is not None        # a valid plotly figure
    assert "done" in final(updates, layout.status)
    assert "step compression" in final(updates, layout.summary)
    run = final(updates, layout.last_run)
    assert run["model"] == "texture" and len(run["iterations"]) == run["iterations"][-1].nfe
    assert final(updates, layout.history_state)["scd-mc"]["committed"][-1] == 576
    assert final(updates, layout.film).ndim == 3


def test_history_keeps_other_methods_curves_and_gives_a_latency_speedup():
    history = final(list(generate_tab.generate_stream(**args(method="ar"))), layout.history_state)
    updates = list(generate_tab.generate_stream(**args(method="sjd"), history=history))
    names = [t.name for t in figure(final(updates, layout.chart_committed)).data]
    assert "AR" in names and "SJD" in names and "one token per pass (AR)" in names
    assert "run AR once" not in final(updates, layout.summary)


def test_full_speed_is_throttled():
    """AR on texture is 576 forward passes; the page gets far fewer pictures."""
    t = time.perf_counter()
    updates = list(generate_tab.generate_stream(**args(method="ar")))
    elapsed = time.perf_counter() - t
    pictures = len(shown(updates, layout.live_image))
    assert len(final(updates, layout.last_run)["iterations"]) == 576
    assert pictures <= elapsed / servers.IMAGE_EVERY + 3


def test_full_speed_sends_a_bounded_number_of_updates_and_always_the_last_pass():
    """Full speed: at most one picture every FULL_SPEED_EVERY seconds of the run (and none
    before), a few updates in all, however many passes; the picture left on screen is the last
    pass's, the same the replay draws from the recorded pass."""
    t = time.perf_counter()
    updates = list(generate_tab.generate_stream(**args(method="ar")))
    elapsed = time.perf_counter() - t
    run = final(updates, layout.last_run)
    passes = len(run["iterations"])
    assert passes == 576
    pictures = shown(updates, layout.live_image)
    bound = elapsed / servers.FULL_SPEED_EVERY + 2          # the live ones, then the final one
    assert len(pictures) <= bound and len(updates) <= bound + 3
    assert run["iterations"][-1].index == passes - 1
    last, _, _ = replay_tab.replay_view(passes - 1, run)
    assert np.array_equal(pictures[-1], picture(last))


def test_slow_motion_shows_every_pass_at_the_pace():
    t = time.perf_counter()
    updates = list(generate_tab.generate_stream(**args(model="tiny", prompt="red apple", top_k=100,
                                             cfg_scale=3.0, method="sjd", pace=0.12)))
    elapsed = time.perf_counter() - t
    passes = len(final(updates, layout.last_run)["iterations"])
    assert len(shown(updates, layout.live_image)) == passes
    assert elapsed >= 0.12 * (passes - 1)


def test_a_run_stopped_while_it_waited_in_the_queue_never_starts():
    stopping.stop(at=2000, request=visitor("queued"))
    updates = list(generate_tab.generate_stream(**args(), ticket=1000, request=visitor("queued")))
    assert updates == [{layout.status: texts.STOPPED_EARLY}]          # nothing else touched
    later = list(generate_tab.generate_stream(**args(model="tiny", prompt="red apple", top_k=100, cfg_scale=3.0),
                                     ticket=3000, request=visitor("queued")))
    assert "done" in final(later, layout.status)                          # a later click runs


def test_stop_ends_the_run_within_a_pass_and_keeps_the_picture():
    gen = generate_tab.generate_stream(**args(pace=0.05), request=visitor("stopper"))
    seen = [next(gen) for _ in range(3)]
    stopping.stop(request=visitor("stopper"))
    rest = list(gen)
    status = final(rest, layout.status)
    assert "stopped at NFE" in status and "/576 tokens" in status
    nfe = int(status.split("stopped at NFE ")[1].split(",")[0])
    assert nfe <= len(seen) + 2                                    # within a pass of the stop
    assert final(rest, layout.live_image).shape == (384, 384, 3)
    assert figure(final(rest, layout.chart_committed)).layout.title.text
    assert len(final(rest, layout.last_run)["iterations"]) == nfe       # replay of the partial run
    again = list(generate_tab.generate_stream(**args(), request=visitor("stopper")))   # a new run is not
    assert "done" in final(again, layout.status)                                # stopped by the old


def test_a_model_that_fails_to_load_is_a_message_not_an_error(monkeypatch):
    def broken(name, **kwargs):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(config.MODELS, "cache", ModelCache(loader=broken))
    updates = list(generate_tab.generate_stream(**args()))
    assert updates == [{layout.status: "**Not started:** could not load model 'texture': "
                                    "CUDA out of memory"}]


# ----------------------------------------------------------------------------- race

def race_rows(html: str) -> list[dict[str, str]]:
    """The race table's rows, each cell by its column's name."""
    import re
    html = re.sub(r"</?span[^>]*>", "", html)                 # a range's box (race_view.span): its words
    return [dict(re.findall(r'<td data-label="([^"]*)">(.*?)</td>', row)) for row in html.split("<tr>")[2:]]


def test_race_reports_k_samples_per_method_with_spread():
    updates = list(race_tab.race_stream(**args(samples=3), request=visitor("racer")))
    rows = race_rows(final(updates, layout.race_table))
    assert [r["method"] for r in rows] == ["AR", "SJD", "SCD maximal coupling", "SCD Gumbel coupling"]
    assert all("same tokens as AR" not in r for r in rows)            # sampling: nothing to check
    assert all("–" in r["NFE: mean (min–max)"] for r in rows[1:])      # NFE mean (min–max)
    rounds = race.TIMING_ROUNDS
    timed = re.compile(r"^\d+\.\d\d s( \(\d+\.\d\d–\d+\.\d\d\))? · \d+\.\d\dx$")   # median (fastest–slowest
    assert all(timed.match(r["one image: seconds (vs AR)"]) for r in rows), rows         # round, when they differ)
    note = final(updates, layout.race_note)
    assert note.startswith("**Passes** (the same for these seeds on any machine)")
    assert f"median of {rounds} rounds" in note and "3 samples per method" in note
    assert "printf" not in note and "python -m scd_core.bench" in final(updates, layout.race_bench)
    assert "fewer passes" in final(updates, layout.race_why)
    runs = final(updates, layout.race_state)["runs"]
    assert {m: r.rows for m, r in runs.items()} == dict.fromkeys(scd_core.METHODS, 3)
    assert all(final(updates, layout.race_images[m]).shape[0] >= 96 for m in runs)
    assert "Done" in final(updates, layout.race_status)
    timing = [u[layout.race_status] for u in updates if "Timing round" in str(u.get(layout.race_status, ""))]
    assert timing and timing[-1].startswith(f"Timing round {rounds} (of up to {rounds}): **SCD Gumbel coupling**")


def test_while_the_race_times_the_methods_again_every_panel_shows_its_finished_samples(monkeypatch):
    """However seldom the pictures are due while a method decodes, its panel is complete once
    it has finished: the timing rounds that follow take seconds."""
    monkeypatch.setattr(race_view, "Pacer", lambda every, **kw: (lambda: False))     # nothing due
    monkeypatch.setattr(zerogpu, "race_rounds", lambda *inputs: 2)                   # one more round is enough
    updates = list(race_tab.race_stream(**args(samples=2)))
    timing = next(i for i, u in enumerate(updates) if "Timing round 2" in str(u.get(layout.race_status, "")))
    for m in METHODS:
        assert np.array_equal(picture(updates[timing][layout.race_images[m]]), final(updates, layout.race_images[m])), m


def test_a_race_timed_once_reports_every_method_and_calls_none_faster(monkeypatch):
    """A large model's race may have room for one timing round only (`zerogpu.race_rounds`)."""
    monkeypatch.setattr(zerogpu, "race_rounds", lambda *inputs: 1)
    updates = list(race_tab.race_stream(**args(samples=2)))
    assert [r["method"] for r in race_rows(final(updates, layout.race_table))] == \
        ["AR", "SJD", "SCD maximal coupling", "SCD Gumbel coupling"]
    assert "timed once each, so no method is called faster" in final(updates, layout.race_note)
    assert not any("Timing round" in str(u.get(layout.race_status, "")) for u in updates)


def test_greedy_race_gives_every_method_ars_tokens(monkeypatch):
    monkeypatch.setattr(zerogpu, "race_rounds", lambda *inputs: 1)                   # the tokens need no timing
    updates = list(race_tab.race_stream(**args(temperature=0.0, samples=2)))
    rows = race_rows(final(updates, layout.race_table))
    assert [r["same tokens as AR"] for r in rows] == ["— (reference)", "yes", "yes", "yes"]
    names = [t.name for t in figure(final(updates, layout.race_chart)).data if t.showlegend is not False]
    assert sum("AR" in (n or "") for n in names) == 1 and len(names) == 4    # AR drawn once, its own curve


def test_race_replay_in_slow_motion_then_stop_keeps_the_figures(monkeypatch):
    monkeypatch.setattr(zerogpu, "race_rounds", lambda *inputs: 1)                   # the replay needs no timing
    gen = race_tab.race_stream(**args(samples=2, pace=0.02), request=visitor("replay"))
    seen = []
    while not any(str(u.get(layout.race_status, "")).startswith("**Replay**") for u in seen[-1:]):
        seen.append(next(gen))                                         # into the replay, announced as one
    stopping.stop(request=visitor("replay"))
    rest = list(gen)
    assert "Replay stopped at NFE" in final(rest, layout.race_status)
    assert "<table" in final(rest, layout.race_table)


def test_race_stopped_while_decoding_keeps_what_finished():
    gen = race_tab.race_stream(**args(samples=2), request=visitor("early"))
    first = next(gen)
    stopping.stop(request=visitor("early"))
    rest = [first, *gen]
    assert "Stopped at NFE" in final(rest, layout.race_status)


# --------------------------------------------------------------------------- inputs

@pytest.mark.parametrize("override, field, words", [
    (dict(prompt=""), "prompt", "prompt: please type a prompt"),
    (dict(prompt="   "), "prompt", "prompt: please type a prompt"),
    (dict(prompt="x" * 10_000), "prompt", "10,000 characters"),
    (dict(window=0), "window", "window l: a whole number from 2 to 1,024, got 0."),
    (dict(window=100_000), "window", "window l: a whole number from 2 to 1,024, got 100,000."),
    (dict(window=2.5), "window", "window l: a whole number from 2 to 1,024, got 2.5."),
    (dict(top_p=0), "top_p", "top-p: a number above 0 and at most 1 (1: off), got 0."),
    (dict(temperature=-1), "temperature", "temperature: 0 or a number from 1e-30 to 1e+30 (0: greedy), got -1."),
    (dict(temperature=None), "temperature", "temperature: 0 or a number from 1e-30 to 1e+30 (0: greedy), got nothing."),
    (dict(temperature=1e39), "temperature", "temperature: 0 or a number from 1e-30 to 1e+30 (0: greedy), got 1e+39."),
    (dict(top_k=-3), "top_k", "top-k: a whole number from 0 to "),
    (dict(cfg_scale=-1), "cfg", "cfg scale: a number from 0 to 100 (1: no guidance), got -1."),
    (dict(seed=-1), "seed", "seed: a whole number from 0 to 1,000,000,000,000,000, got -1."),
    (dict(seed=9223372036854775791.0), "seed", "seed: a whole number from 0 to 1,000,000,000,000,000, got 9.22337e+18."),
    (dict(seed=1.5), "seed", "seed: a whole number"),      # refused, never rounded
    (dict(seed=True), "seed", "seed: a whole number"),
    (dict(samples=2.5), "samples", "race samples k: a whole number from 1 to 16, got 2.5."),
    (dict(model="no-such-model"), "model", "unknown model"),
    (dict(method="beam"), "method", "method must be one of"),
    (dict(init="repeat-frame"), "init", "draft init: \u201cprevious frame (video)\u201d needs a video model"),
    (dict(init="zeros"), "init", "init must be one of"),
    (dict(pace=-1), "pace", "slow motion: a number from 0 to 2"),
    (dict(pace=60), "pace", "slow motion: a number from 0 to 2"),
    (dict(samples=0), "samples", "race samples k: a whole number from 1 to 16, got 0."),
])
def test_bad_input_names_its_field_and_range_as_the_page_does(override, field, words):
    found = inputs.problems(args(**override))
    assert list(found) == [field] and words in found[field].lower()
    values = args(**override) | {"history": {}, "ticket": None}      # + the state and the stamp
    checks = generate_tab.validate_generate(**values)
    assert [c["is_valid"] for c in checks].count(False) == 1
    assert checks[list(values).index(field)]["message"] == found[field]


def test_a_click_with_a_bad_field_marks_it_and_starts_nothing_then_a_good_one_clears_it():
    """The page's check before a run: the field gets its message beside it, red; nothing
    starts (the run's trigger is left alone); the next good click clears the mark and starts."""
    out = generate_tab.check_generate(**args(window=0), marked=[])
    assert layout.go_generate not in out and out[layout.marked_state] == ["window"]
    assert layout.switch_md not in out                          # a switch's note stays until a run starts
    mark = out[layout.window_nb]
    assert mark["info"].startswith("Window L: a whole number from 2 to 1,024") and mark["elem_classes"] == ["invalid"]
    assert out[layout.input_md].startswith("**Not started:** Window L:")
    out = generate_tab.check_generate(**args(), marked=["window"])
    assert out[layout.go_generate] > 0 and out[layout.marked_state] == [] and out[layout.input_md] == ""
    assert out[layout.switch_md] == ""                          # ... then goes (a stop it said is old news)
    assert out[layout.window_nb]["info"] == "" and out[layout.window_nb]["elem_classes"] == []
    assert layout.seed_nb not in out                            # a field never marked is left alone
    race_out = race_tab.check_race(**args(method="ar", window=1), marked=[])   # the race runs every method
    assert layout.go_race not in race_out and "Window L" in race_out[layout.window_nb]["info"]


def test_good_input_passes_the_validator():
    assert inputs.problems(args()) == {}
    assert all(c["is_valid"] for c in generate_tab.validate_generate(**args(), history={}, ticket=None))


def test_test_models_are_hidden_unless_asked(monkeypatch):
    monkeypatch.delenv(models.SHOW_TEST_MODELS, raising=False)
    names = models.listed_models()
    assert names[:3] == ["texture", "tiny", "tiny-video"]
    assert not {"toy", "toy-grid", "random-logits"} & set(names)
    assert "unknown model" in inputs.problems(args(model="toy-grid"))["model"]
    monkeypatch.setenv(models.SHOW_TEST_MODELS, "1")
    assert {"toy", "toy-grid", "random-logits"} <= set(models.listed_models())


def test_unavailable_model_shows_its_full_reason_and_cannot_start(empty_hub_cache):
    name = next(n for n in models.listed_models() if models.unavailable(n) is not None)   # downloads off
    state = model_status(name).state
    reason = models.unavailable(name)
    assert models.model_label(name).endswith("no network here" if reason.startswith("no network")
                                                 else state if state == "needs GPU" else "cannot run here")
    assert layout.model_dd.choices and (models.model_label(name), name) in layout.model_dd.choices
    out = model_switch.on_model_change(name)
    assert texts.command_blocks(reason) in out[layout.model_md]        # its commands as blocks
    assert not out[layout.gen_btn].interactive and not out[layout.race_btn].interactive
    for said in (out[layout.status], out[layout.race_status]):          # no call to press what is off
        assert "cannot run here" in said and "Press" not in said, said
    assert reason in inputs.problems(args(model=name))["model"]
    assert "Press" in model_switch.on_model_change("texture")[layout.status]


def test_model_change_sets_each_models_defaults():
    for name in models.listed_models():
        out = model_switch.on_model_change(name)
        assert name in out[layout.model_md] and out[layout.window_nb] >= 2
        assert out[layout.init_dd] in labels.INIT_LABELS
    out = model_switch.on_model_change("tiny")
    assert out[layout.prompt_tb] == config.MODELS.examples("tiny")[0]           # a prompt it knows


@pytest.mark.parametrize("name", [n for n in models.listed_models()
                                  if model_status(n).state in ("embedded", "cached")])
def test_every_listed_model_that_runs_here_without_a_download_generates(name):
    prompt = config.MODELS.examples(name)[0]
    d, sd = models.page_defaults(name), models.sampling_defaults(name, config.MODELS.get(name))
    updates = list(generate_tab.generate_stream(**args(model=name, prompt=prompt, window=d["window"],
                                             init=d["init"], **sd)))
    assert "done" in final(updates, layout.status)
    assert final(updates, layout.live_image).shape[0] >= 96


# ------------------------------------------------------------------ replay and export

NO_NETWORK = """
import json
from demo import inputs, layout, model_switch, models
out = {"load": model_switch.load_selected("llamagen-c2i", progress=lambda *a, **k: None)}
out = {"note": out["load"][layout.model_md], "generate": out["load"][layout.gen_btn].interactive,
       "race": out["load"][layout.race_btn].interactive,
       "problems": inputs.problems(dict(model="llamagen-c2i", method="sjd", window=32, init="random",
                                     temperature=1.0, top_k=1000, top_p=1.0, cfg=5.0, seed=0, prompt="goldfish",
                                     pace=0.0, samples=2)),
       "label": models.model_label("llamagen-c2i"),
       "commands": models.download_commands("llamagen-c2i")}
print("RESULT " + json.dumps(out))
"""


def test_a_model_the_hub_cannot_be_reached_for_says_how_to_download_it_and_cannot_start(tmp_path):
    """A fresh page whose Hub endpoint refuses connections (never the real network): picking
    a downloadable model says, in a visitor's words, the command that fetches it beforehand,
    and Generate and Race are disabled and refuse it."""
    import subprocess
    import sys

    from fakehub import client_env

    env = client_env(None, tmp_path, HF_ENDPOINT="http://127.0.0.1:9", SCD_DECODE="local")
    proc = subprocess.run([sys.executable, "-c", NO_NETWORK], env=env, capture_output=True, text=True,
                          timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert line, proc.stderr[-3000:]
    import json
    out = json.loads(line[-1][len("RESULT "):])
    command = out["commands"][0]
    assert command.startswith("hf download FoundationVision/LlamaGen --include ")
    said = f"no network here: download it beforehand with `{command}`"
    assert texts.command_blocks(said) in out["note"] and not out["generate"] and not out["race"]
    assert said in out["problems"]["model"] and list(out["problems"]) == ["model"]
    assert out["label"] == "llamagen-c2i · no network here"       # the list says it before it is picked


def test_a_model_with_downloads_off_says_how_to_download_it(empty_hub_cache):
    out = model_switch.on_model_change("janus-pro-1b")
    reason = models.unavailable("janus-pro-1b")
    assert reason.startswith("no network here: download it beforehand with `hf download "
                             "deepseek-community/Janus-Pro-1B --include")
    assert texts.command_blocks(reason) in out[layout.model_md] and not out[layout.gen_btn].interactive
    assert reason in inputs.problems(args(model="janus-pro-1b"))["model"]


def test_ar_status_says_nothing_of_acceptance():
    updates = list(generate_tab.generate_stream(**args(model="tiny", prompt="red heart", method="ar")))
    said = final(updates, layout.status)
    assert "done" in said and "no drafts (AR)" in said and "acceptance" not in said
    assert "| acceptance rate | no drafts (AR) |" in final(updates, layout.summary)
    assert "| latency speed-up | 1.00x: AR is the reference |" in final(updates, layout.summary)
    sjd = final(list(generate_tab.generate_stream(**args(model="tiny", prompt="red heart", method="sjd"))), layout.status)
    assert "acceptance" in sjd and "no drafts" not in sjd


def test_slow_motion_gives_the_decode_and_display_times_apart_and_says_a_raised_pace():
    fastest = servers.IMAGE_EVERY
    updates = list(generate_tab.generate_stream(**args(model="tiny", prompt="red heart", pace=fastest / 5)))
    said = final(updates, layout.status)
    decoded = float(said.split("decoded in ")[1].split(" s")[0])
    shown_over = float(said.split("shown over ")[1].split(" s")[0])
    nfe = len(final(updates, layout.last_run)["iterations"])
    assert shown_over >= 0.9 * fastest * (nfe - 2) > decoded     # paced at the page's fastest
    assert f"slow motion: {fastest / 5:g} s asked, each pass shown {fastest:g} s at least" in said
    full = final(list(generate_tab.generate_stream(**args(model="tiny", prompt="red heart"))), layout.status)
    assert "decoded in" in full and "shown over" not in full and "slow motion" not in full
    assert all(models.page_defaults(n)["pace"] in (0, 0.0) or models.page_defaults(n)["pace"] >= fastest
               for n in models.listed_models())                  # no default is raised silently


def test_replay_and_export_belong_to_the_last_run():
    tiny = list(generate_tab.generate_stream(**args(model="tiny", prompt="red heart")))
    history = final(tiny, layout.history_state)
    texture = list(generate_tab.generate_stream(**args(), history=history))
    assert texture[0][layout.last_run] is None and texture[0][layout.replay_image] is None   # cleared at once
    assert texture[0][layout.export_files] is None and texture[0][layout.replay_text] == run_view.REPLAY_WAITING
    run = final(texture, layout.last_run)
    assert run["model"] == "texture"
    assert replay_tab.replay_view(0, run)[0].shape == (384, 384, 3)                # texture's picture
    opened = run_view.telling_pass(run["iterations"])  # the replay opens on a pass that rejected a draft, drawn
    assert final(texture, layout.replay_text).startswith(run_view.replay_caption(run["iterations"], opened, True))
    assert (final(texture, layout.replay_image) == picture(replay_tab.replay_view(opened, run)[0])).all()
    assert figure(final(texture, layout.replay_probs)).layout.title.text.endswith(f"pass {opened}</sub>")
    history = final(texture, layout.history_state)
    refused = list(generate_tab.generate_stream(**args(model="tiny", prompt="red heart", window=10 ** 6),
                                       history=history))
    assert "Not started" in final(refused, layout.status) and final(refused, layout.last_run) is None
    again = list(generate_tab.generate_stream(**args(window=10 ** 6), history=history))   # same model: kept
    assert again == [{layout.status: final(again, layout.status)}]


def test_a_model_switch_clears_the_last_models_views_and_names_the_new_one():
    texture = list(generate_tab.generate_stream(**args()))
    assert "on **texture**" in final(texture, layout.status)                 # the status names its model
    out = model_switch.on_model_change("tiny", model_notes.defaults("texture")[0], **model_notes.defaults("texture")[0])
    assert out[layout.status].startswith("**tiny** · ") and out[layout.race_status].startswith("**tiny** · ")
    tiny = config.MODELS.get("tiny")
    assert picture(out[layout.live_image]).shape == pictures.blank_picture(tuple(tiny.grid)).shape
    assert list(figure(out[layout.chart_committed]).data[0].x) == [0, 64]    # tiny's AR line
    assert out[layout.last_run] is None and out[layout.race_state] is None and out[layout.film] is None
    assert all(out[layout.race_images[m]] is None for m in scd_core.METHODS)   # no panels before a race


def test_a_model_switch_keeps_what_the_visitor_set_and_says_what_changed():
    texture = model_notes.defaults("texture")[0]
    mine = texture | {"window": 8, "pace": 0.0, "top_k": 10}
    out = model_switch.on_model_change("tiny", texture, **mine)
    kept = {k: out[layout.setting_views[k]] for k in ("window", "pace", "top_k")}
    assert kept == {"window": 8, "pace": 0.0, "top_k": 10}
    tiny = model_notes.defaults("tiny")[0]
    assert out[layout.cfg_nb] == tiny["cfg"] and out[layout.prompt_tb] == tiny["prompt"]   # left as they were: tiny's
    said = out[layout.switch_md]
    assert said.startswith("**Settings for tiny:** its defaults: ") and "CFG scale 1 → 3" in said
    assert "kept as you set them: Window L 8, Top-k 10, Slow motion 0." in said
    back = model_switch.on_model_change("texture", out[layout.applied_state], **{k: out[layout.setting_views[k]]
                                                                      for k in checks.SETTINGS})
    assert {k: back[layout.setting_views[k]] for k in ("window", "pace", "top_k")} == kept   # still yours
    assert back[layout.cfg_nb] == texture["cfg"]
    video = model_switch.on_model_change("tiny-video", texture, **(texture | {"top_k": 10 ** 6}))
    assert video[layout.topk_nb] == model_notes.defaults("tiny-video")[0]["top_k"]
    assert "tiny-video cannot take them: Top-k 1,000,000 → " in video[layout.switch_md]
    assert model_switch.on_model_change("texture", texture, **texture)[layout.switch_md] == ""   # nothing changed


def test_unknown_prompt_words_are_marked_before_a_run_and_said_after():
    assert model_notes.prompt_words("tiny", "red heart 🦄 foo") == "not known to tiny, ignored: 🦄 foo"
    assert "runs unconditioned" in model_notes.prompt_words("tiny", "🦄 🦄")
    assert model_notes.prompt_words("tiny", "red heart") == ""
    assert model_notes.prompt_words("texture", "ocean zebra waves") == "not known to texture, ignored: zebra"
    summary = final(list(generate_tab.generate_stream(**args(model="tiny", prompt="red heart 🦄"))), layout.summary)
    assert "Prompt words the model knows: red, heart; ignored: 🦄." in summary
    summary = final(list(generate_tab.generate_stream(**args(model="tiny", prompt="🦄"))), layout.summary)
    assert "unconditioned sample" in summary


def test_replay_colours_only_the_verified_drafts():
    run = final(list(generate_tab.generate_stream(**args(model="tiny", prompt="red heart", method="sjd"))),
                layout.last_run)
    for i in (1, 3, 5):
        img, text, probs = replay_tab.replay_view(i, run)
        probs = figure(probs)
        it = run["iterations"][i]
        verified = int(it.verified[0].sum())
        assert img.shape == (320, 320, 3) and run_view.plural(verified, "draft") + " verified" in text
        z = np.array(probs.data[0].z, dtype=float)
        assert np.isfinite(z).sum() == verified and np.nanmax(z) <= 1
        assert probs.layout.xaxis.title.text == "column"
    mp4, files = replay_tab.export_run(run)
    assert mp4.endswith(".mp4") and os.path.getsize(mp4) > 0 and files[1].endswith(".gif")
    assert replay_tab.replay_view(0, None)[1].startswith("Nothing to replay")


def test_video_model_streams_tiled_frames_then_mp4_and_gif(monkeypatch):
    """The whole video path of the app, a toy clip model standing in for tiny-video."""
    model = scd_core.load_model("toy", vocab_size=3, grid=(3, 2, 2))
    monkeypatch.setattr(config.MODELS, "cache", ModelCache())
    config.MODELS.put("tiny-video", model)
    updates = list(generate_tab.generate_stream(**args(model="tiny-video", init="repeat-frame", window=4,
                                             prompt="x")))
    h, w, _ = final(updates, layout.live_image).shape
    assert w > 2.5 * h                                         # three frames side by side
    assert final(updates, layout.clip_video).endswith(".mp4")
    mp4, gif = final(updates, layout.clip_files)
    assert gif.endswith(".gif") and os.path.getsize(gif) > 0


def test_page_names_the_device():
    assert ("CPU" in models.device_note()) == (config.DEVICE == "cpu")


# --------------------------------------------------------------- served, gradio_client

def latest(outputs: list, i: int):
    """The last real value of output `i` in a client's stream (skipped outputs are dicts)."""
    return next((o[i] for o in reversed(outputs) if o[i] and not isinstance(o[i], dict)), None)


def test_served_run_streams_updates_and_a_final_png(url):
    job = Client(url, verbose=False).submit(**args(), api_name="/generate")
    updates = list(job)
    assert len(updates) > 1
    image = latest(updates, 0)
    assert os.path.exists(image) and image.endswith(".png")
    assert "done" in latest(updates, 1)


def test_served_stop_keeps_the_partial_run(url):
    client = Client(url, verbose=False)
    job = client.submit(**args(pace=0.05), api_name="/generate")
    deadline = time.time() + 60
    while len(job.outputs()) < 3 and time.time() < deadline:
        time.sleep(0.05)
    client.predict(api_name="/stop")
    job.result(timeout=60)
    assert "stopped at NFE" in latest(job.outputs(), 1)
    assert os.path.exists(latest(job.outputs(), 0))


def test_served_bad_input_is_refused_before_the_queue_and_the_next_is_served(url):
    client = Client(url, verbose=False)
    with pytest.raises(Exception, match="please type a prompt"):
        client.predict(**args(prompt=""), api_name="/generate")
    with pytest.raises(Exception, match="Top-p: a number above 0"):
        client.predict(**args(top_p=0), api_name="/generate")
    job = client.submit(**args(), api_name="/generate")
    job.result(timeout=60)
    assert os.path.exists(latest(job.outputs(), 0))


def test_the_message_beside_the_buttons_repeats_what_the_fields_say():
    def said(**override):
        return generate_tab.check_generate(**args(**override), marked=[])[layout.input_md]
    assert said() == ""
    assert said(window=0).startswith("**Not started:** Window L: a whole number")
    long = said(prompt="x" * 600)
    assert long.endswith("Please shorten it.") and ".." not in long
    both = said(window=0, seed=-1)                        # each field once, in the page's order
    assert both.index("Window L:") < both.index("Seed:") and both.count("Not started") == 1


def test_a_click_goes_through_once_the_run_before_it_has_ended_even_a_stopped_one():
    """A run stopped a moment ago (a new prompt typed as it drew its last charts) that ends
    within BUSY_WAIT_S lets the next click through; one still going after it is refused."""
    import threading
    from demo import runs
    for why in ("", "**Stopped:** you changed the prompt; press **Generate** to run the new one."):
        run = config.CONTROL.runs.start("", runs.Run("generate", "texture", "scd-mc", "red heart"))
        config.CONTROL.runs.interrupt("", why) if why else None
        threading.Timer(runs.BUSY_WAIT_S / 4, config.CONTROL.runs.end, ("", run)).start()
        out = race_tab.check_race(**args(), marked=[])
        assert layout.go_race in out and out[layout.input_md] == "", (why, out[layout.input_md])
    run = config.CONTROL.runs.start("", runs.Run("generate", "texture", "scd-mc", "red heart"))
    try:
        config.CONTROL.runs.interrupt("", "**Stopped:** you changed the prompt")
        out = race_tab.check_race(**args(), marked=[])               # still going after BUSY_WAIT_S
        assert layout.go_race not in out and "is still going" in out[layout.input_md]
    finally:
        config.CONTROL.runs.end("", run)


def test_whole_number_fields_pass_what_was_typed_to_the_checks():
    """gr.Number(precision=0) would round 1.5 to 2 before any check saw it."""
    for field in (layout.seed_nb, layout.window_nb, layout.topk_nb, layout.samples_nb):
        assert field.precision is None and field.preprocess(1.5) == 1.5


def test_each_setting_widget_shows_its_checks_label_and_is_refused_under_its_own_name():
    """The one mapping from a setting's name to its widget (`layout.input_views`) agrees with the
    checks: a number field is labelled by the `checks.FIELDS` entry of its name and its first
    value passes that check; a value out of that field's range is refused under its name
    alone, in the words of its label; a choice widget offers only what its check takes, and a
    value it does not offer is refused under its name."""
    assert list(layout.input_views) == checks.INPUTS
    for name, field in checks.FIELDS.items():
        widget = layout.input_views[name]
        assert widget.label == field.widget_label, name
        field.check(widget.value)
        found = inputs.problems(args(**{name: field.low if field.above_low else field.low - 1}))
        assert list(found) == [name] and found[name].startswith(field.label + ":"), (name, found)
    video = dict(model="tiny-video", prompt=config.MODELS.examples("tiny-video")[0], top_k=100, cfg_scale=3.0)
    for name, base, bad in (("method", {}, "beam"), ("init", video, "zeros"), ("tree", {}, "9 x 9")):
        for _, choice in layout.input_views[name].choices:
            assert inputs.problems(args(**base, **{name: choice})) == {}, (name, choice)
        assert list(inputs.problems(args(**base, **{name: bad}))) == [name]
