"""The Gradio app: its generator functions called directly, then the app served in-process
on 127.0.0.1 and driven with gradio_client (streaming, cancellation, bad input).

Everything runs on the fast synthetic `toy-grid` model (16x16 tokens, V = 512).
"""
from __future__ import annotations

import os
import time

import gradio as gr
import numpy as np
import plotly.graph_objects as go
import pytest
from gradio_client import Client

import app

GOOD = dict(model="toy-grid", method="scd-mc", window=16, init="random", temperature=1.0,
            top_k=0, top_p=1.0, cfg_scale=1.0, seed=0, prompt="red apple", pace=0.0)


def args(**override):
    """The Generate event's inputs, in the page's order (the session state comes after)."""
    d = {**GOOD, **override}
    return [d["model"], d["method"], d["window"], d["init"], d["temperature"], d["top_k"],
            d["top_p"], d["cfg_scale"], d["seed"], d["prompt"], d["pace"]]


def race_args(greedy=False, **override):
    a = args(**override)
    return [a[0], *a[2:10], greedy, a[10]]


# ------------------------------------------------------------------ generator functions

def test_generate_stream_updates_image_plots_and_summary():
    updates = list(app.generate_stream(*args(), {}))
    assert len(updates) >= 2                              # the prefill, ..., the final pass
    assert all(app.live_image in u and app.status in u for u in updates)
    final = updates[-1]
    img = final[app.live_image]
    assert img.dtype == np.uint8 and img.shape == (320, 320, 3)   # 64 px upscaled x5
    for plot in (app.chart_committed, app.chart_length, app.chart_rate, app.heat_committed,
                 app.heat_stability):
        assert isinstance(final[plot], go.Figure)
    assert "done" in final[app.status] and "step compression" in final[app.summary]
    run = final[app.last_run]
    assert run["model"] == "toy-grid" and len(run["iterations"]) == run["iterations"][-1].nfe
    assert final[app.history_state]["scd-mc"]["committed"][-1] == 256


def test_history_keeps_other_methods_curves_and_gives_a_latency_speedup():
    history = list(app.generate_stream(*args(method="ar"), {}))[-1][app.history_state]
    final = list(app.generate_stream(*args(method="sjd"), history))[-1]
    names = [t.name for t in final[app.chart_committed].data]
    assert any(n.startswith("AR (1 token") for n in names)            # the diagonal
    assert "AR" in names and "SJD" in names                             # both runs' curves
    assert "run AR once" not in final[app.summary]                      # speed-up measured


def test_generate_stream_is_throttled():
    """AR on toy-grid is 256 forward passes; the page gets far fewer pictures than that."""
    t = time.perf_counter()
    updates = list(app.generate_stream(*args(method="ar"), {}))
    elapsed = time.perf_counter() - t
    final = updates[-1][app.last_run]["iterations"]
    assert len(final) == 256 and len(updates) < 256
    assert len(updates) <= elapsed / app.IMAGE_EVERY + 2          # at most ~20 a second


def test_slow_motion_shows_every_iteration_at_the_chosen_pace():
    t = time.perf_counter()
    updates = list(app.generate_stream(*args(method="sjd", pace=0.06), {}))
    elapsed = time.perf_counter() - t
    passes = len(updates[-1][app.last_run]["iterations"])
    assert len(updates) == passes                                 # every iteration shown
    assert elapsed >= 0.06 * (passes - 1)


def test_race_in_greedy_mode_gives_identical_tokens():
    updates = list(app.race_stream(*race_args(greedy=True), ))
    table = updates[-1][app.race_summary]
    assert [row[0] for row in table] == [app.METHOD_NAMES[m] for m in app.RACE_ORDER]
    assert all(row[-1] == "yes" for row in table)
    assert table[0][1] == 256 and all(row[1] < 256 for row in table[1:])     # NFE
    assert all(row[3] > 1 for row in table[1:])                             # step compression
    assert "the same" in updates[-1][app.race_note]
    history = updates[-1][app.history_state]
    assert set(history) == {"_model", *app.RACE_ORDER}          # curves for the Generate tab
    for m in app.RACE_ORDER:
        assert updates[-1][app.race_images[m]].shape == (320, 320, 3)


def test_race_with_sampling_says_samples_differ_but_law_does_not():
    final = list(app.race_stream(*race_args(greedy=False)))[-1]
    assert "different sample from the same distribution" in final[app.race_note]
    for row in final[app.race_summary][1:]:
        assert 0 <= row[5] <= 1                                             # acceptance rate


@pytest.mark.parametrize("override, words", [
    (dict(prompt=""), "prompt"),
    (dict(prompt="   "), "prompt"),
    (dict(prompt="x" * 10_000), "10,000 characters"),
    (dict(window=0), "Window L"),
    (dict(window=100_000), "Window L"),
    (dict(window=2.5), "Window L"),
    (dict(top_p=0), "Top-p"),
    (dict(temperature=-1), "Temperature"),
    (dict(temperature=None), "Temperature"),
    (dict(top_k=-3), "Top-k"),
    (dict(cfg_scale=-1), "CFG"),
    (dict(seed=-1), "Seed"),
    (dict(model="no-such-model"), "Unknown model"),
    (dict(method="beam"), "Unknown method"),
    (dict(init="repeat-frame"), "video"),
    (dict(init="zeros"), "draft init"),
    (dict(pace=-1), "Slow motion"),
    (dict(pace=60), "Slow motion"),
])
def test_bad_input_is_a_clear_gr_error(override, words):
    with pytest.raises(gr.Error) as err:
        next(app.generate_stream(*args(**override), {}))
    assert words.lower() in str(err.value.message).lower()


def test_unavailable_model_is_listed_with_its_reason_and_refused():
    choices = dict((v, k) for k, v in app.model_choices())
    assert "toy-grid" in choices and "tiny" in choices and "tiny-video" in choices
    missing = [n for n in choices if app.availability(n) is not None]
    if not missing:
        pytest.skip("every model is available here")
    name = missing[0]
    assert "unavailable" in choices[name]
    with pytest.raises(gr.Error, match="unavailable"):
        next(app.generate_stream(*args(model=name), {}))


def test_model_change_never_crashes_and_sets_defaults():
    for name in app.model_names():
        info, window, init, *_ = app.on_model_change(name)
        assert name in info and window >= 2 and init in dict((v, k) for k, v in app.INITS)


def test_replay_and_export_of_the_last_run():
    run = list(app.generate_stream(*args(method="sjd"), {}))[-1][app.last_run]
    img, text, probs = app.replay_view(3, run)
    assert img.shape == (320, 320, 3) and "iteration 3" in text
    z = np.array(probs.data[0].z, dtype=float)
    fed = run["iterations"][3].accept_prob[0]
    assert np.isfinite(z).sum() == int(fed.isfinite().sum()) and np.nanmax(z) <= 1
    mp4, files = app.export_run(run)
    assert mp4.endswith(".mp4") and os.path.getsize(mp4) > 0 and files[1].endswith(".gif")
    with pytest.raises(gr.Error, match="generate"):
        app.replay_view(0, None)


def test_video_model_run_gets_an_mp4_and_a_gif():
    """The video path of final_media, with a toy video model standing in for tiny-video."""
    import scd_core

    model = scd_core.load_model("toy", vocab_size=3, grid=(3, 2, 2))
    its = list(scd_core.stream(model, ["x"], method="sjd", window=4, seed=0))
    s = app.Settings("tiny-video", "sjd", 4, "random", 1.0, 0, 1.0, 1.0, 0, "x")
    mp4, gif = app.final_media(model, s, its)
    assert mp4.endswith(".mp4") and gif.endswith(".gif") and os.path.getsize(mp4) > 0


def test_video_model_streams_tiled_frames_then_mp4_and_gif(monkeypatch):
    """The whole video path of the app, a toy clip model standing in for tiny-video."""
    import scd_core

    model = scd_core.load_model("toy", vocab_size=3, grid=(3, 2, 2))
    monkeypatch.setitem(app._models, "tiny-video", model)
    monkeypatch.setattr(app, "availability", lambda name: None)
    updates = list(app.generate_stream(*args(model="tiny-video", init="repeat-frame", window=4,
                                             prompt="x"), {}))
    final = updates[-1]
    h, w, _ = final[app.live_image].shape
    assert w > 2.5 * h                                     # three frames side by side
    assert final[app.clip_video].endswith(".mp4") and final[app.clip_gif].endswith(".gif")
    assert os.path.getsize(final[app.clip_video]) > 0


def test_gpu_work_is_wrapped_with_spaces_gpu_when_importable(tmp_path):
    """With a `spaces` package on the path, the three GPU events go through spaces.GPU."""
    import subprocess
    import sys

    (tmp_path / "spaces.py").write_text(
        "calls = []\n"
        "def GPU(task=None, *, duration=None, size=None):\n"
        "    def wrap(fn):\n"
        "        calls.append((fn.__name__, duration))\n"
        "        return fn\n"
        "    return wrap if task is None else wrap(task)\n")
    code = "import app, spaces; print(sorted(name for name, _ in spaces.calls))"
    repo = os.path.dirname(os.path.abspath(app.__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), repo])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300, cwd=repo)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "['export_run', 'generate_stream', 'race_stream']"


def test_page_says_which_device_runs_the_engine():
    assert ("CPU" in app.device_note()) == (app.DEVICE == "cpu")


# --------------------------------------------------------------- served, gradio_client

@pytest.fixture(scope="module")
def client():
    app.demo.queue(max_size=16, default_concurrency_limit=1).launch(
        server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        yield Client(app.demo.local_url, verbose=False)
    finally:
        app.demo.close()


def test_served_run_streams_several_updates_and_a_final_png(client):
    job = client.submit(*args(), api_name="/generate")
    updates = list(job)
    assert len(updates) > 1
    final_image = updates[-1][0]
    assert final_image and os.path.exists(final_image) and final_image.endswith(".png")
    assert updates[-1][2]["type"] == "plotly"


def test_served_cancel_stops_the_run(client, monkeypatch):
    """The server-side decoding stops: no forward pass is pulled after the cancel settles."""
    pulled = []
    real_stream = app.scd_core.stream

    def counting_stream(*a, **k):
        for it in real_stream(*a, **k):
            pulled.append(it.index)
            yield it

    monkeypatch.setattr(app.scd_core, "stream", counting_stream)
    # slow motion (a tick every 0.1 s) so that the run cannot finish before the cancel
    # settles on a fast machine: at full speed a whole race takes about a second
    job = client.submit(*race_args(pace=0.05), api_name="/race")  # the longest event
    deadline = time.time() + 60
    while len(job.outputs()) < 1 and time.time() < deadline:
        time.sleep(0.05)
    assert job.outputs(), "the race never streamed an update"
    assert job.cancel()
    time.sleep(1.0)
    seen, passes = len(job.outputs()), len(pulled)
    time.sleep(1.5)
    assert len(job.outputs()) == seen                             # nothing more arrives
    assert len(pulled) == passes < 257     # stopped early: AR alone takes 257 passes
    assert job.status().code.name == "CANCELLED"
    t = time.time()                                               # the slot is free again
    client.predict(*args(method="scd-gumbel"), api_name="/generate")
    assert time.time() - t < 60


def test_served_bad_input_errors_then_serves_the_next_request(client):
    with pytest.raises(Exception, match="prompt"):
        client.predict(*args(prompt=""), api_name="/generate")
    with pytest.raises(Exception, match="Top-p"):
        client.predict(*args(top_p=0), api_name="/generate")
    out = client.predict(*args(), api_name="/generate")
    assert out[0] and os.path.exists(out[0])


def test_a_model_that_fails_to_load_is_a_clear_error(monkeypatch):
    def broken(name, **kwargs):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(app.scd_core, "load_model", broken)
    monkeypatch.delitem(app._models, "toy-grid", raising=False)
    with pytest.raises(gr.Error, match="Could not load model 'toy-grid': CUDA out of memory"):
        next(app.generate_stream(*args(), {}))
