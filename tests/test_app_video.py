"""The app's video prompt: pick or upload a clip, continue it with any method, watch the new
frames form, download the MP4.

A tiny randomly initialised Cosmos-shaped model (tiny transformer, tiny TorchScript DV
tokenizer saved to tmp_path, as in test_models_cosmos) is put in the app's model cache under
the registry name "cosmos-1-ar-4b", which the page otherwise lists as unavailable here.
"""
from __future__ import annotations

import os

import gradio as gr
import imageio.v3 as iio
import numpy as np
import pytest

import app
from scd_core.models import cosmos
from scd_core.models import cosmos_tokenizer as dv
from test_models_cosmos import LEVELS, TINY, save_tokenizer, write_clip

NAME = "cosmos-1-ar-4b"


@pytest.fixture(scope="module")
def tiny_cosmos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cosmos")
    tok = dv.DVTokenizer.load(save_tokenizer(folder / "tok"), levels=LEVELS)
    model = cosmos.CosmosVideoModel(cosmos.random_model(TINY, std=0.2), tokenizer=tok,
                                    name="tiny-cosmos")
    clip = write_clip(folder / "clip.mp4", frames=12, h=96, w=128)
    return model, clip, folder


@pytest.fixture
def served_model(tiny_cosmos, monkeypatch):
    monkeypatch.setitem(app._models, NAME, tiny_cosmos[0])
    return tiny_cosmos


def args(clip, method="scd-gumbel", init="repeat-frame", window=8, pace=0.0, text=""):
    """generate_stream's inputs: the page's controls, pace, history, then the clip inputs."""
    return [NAME, method, window, init, 1.0, 0, 0.8, 1.0, 0, "", pace, {}, clip, text]


def test_clip_models_are_told_apart_by_their_registry_entry():
    assert app.takes_clip(NAME) and app.takes_clip("cosmos-1-ar-5b-video2world")
    assert not app.takes_clip("tiny") and not app.takes_clip("tiny-video")
    assert not app.takes_clip("no-such-model")


def test_selecting_a_clip_model_shows_the_clip_input_and_its_defaults(served_model):
    info, window, init, temp, top_k, top_p, cfg, pace, clip_row, _, text_box, clip_box = \
        app.on_model_change(NAME)
    assert init == "repeat-frame" and cfg == 1.0 and top_p == 0.8
    assert clip_row.visible and clip_box.visible and not text_box.visible
    *_, text_box, clip_box = app.on_model_change("toy-grid")
    assert text_box.visible and not clip_box.visible


def test_unloaded_cosmos_stays_listed_as_unavailable_with_its_reason():
    reason = app.availability(NAME)
    if reason is None:
        pytest.skip("Cosmos weights and a GPU are present here")
    assert "unavailable" in dict((v, k) for k, v in app.model_choices())[NAME]
    with pytest.raises(gr.Error, match="unavailable"):
        next(app.generate_stream(*args(app.example_clips()[0])))


def test_example_clips_are_small_readable_videos():
    clips = app.example_clips()
    assert len(clips) == 2 and sum(os.path.getsize(c) for c in clips) < 200_000
    for c in clips:
        assert iio.imread(c).shape[0] == app.CLIP_FRAMES


def test_continuing_a_clip_streams_new_frames_then_an_mp4(served_model):
    _, clip, _ = served_model
    updates = list(app.generate_stream(*args(clip, pace=0.02)))
    run = updates[-1][app.last_run]
    assert len(updates) > 1 and len(updates) == len(run["iterations"])   # every pass shown
    first, final = updates[0][app.live_image], updates[-1][app.live_image]
    h, w, _ = final.shape
    assert w > 2.5 * h                                  # the 3 generated frames side by side
    assert not np.array_equal(first, final)             # the frames formed on screen
    assert "done" in updates[-1][app.status]
    mp4, gif = updates[-1][app.clip_video], updates[-1][app.clip_gif]
    assert updates[-1][app.clip_files] == [mp4, gif]
    frames = iio.imread(mp4)
    assert frames.shape[0] == 33 and frames.shape[-1] == 3    # 9 given + 24 new frames
    assert gif.endswith(".gif") and os.path.getsize(gif) > 0


@pytest.mark.parametrize("method", ["ar", "sjd", "scd-mc"])
def test_every_method_continues_an_example_clip(served_model, method):
    final = list(app.generate_stream(*args(app.example_clips()[1], method=method,
                                           init="random")))[-1]
    assert final[app.last_run]["method"] == method
    assert final[app.clip_video].endswith(".mp4")


def test_race_on_a_clip_in_greedy_mode_gives_identical_tokens(served_model):
    _, clip, _ = served_model
    final = list(app.race_stream(NAME, 8, "repeat-frame", 1.0, 0, 0.8, 1.0, 0, "", True, 0.0,
                                 None, clip, ""))[-1]
    assert all(row[-1] == "yes" for row in final[app.race_summary])


def test_bad_clips_are_clear_errors(served_model, tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video")
    cases = [(None, "Prompt clip: pick"),
             (str(tmp_path / "missing.mp4"), "Prompt clip: file not found"),
             (str(bad), "Prompt clip: cannot read"),
             (write_clip(tmp_path / "short.mp4", frames=4), "fewer than the 9")]
    for clip, words in cases:
        with pytest.raises(gr.Error) as err:
            next(app.generate_stream(*args(clip)))
        assert words in str(err.value.message)
    with pytest.raises(gr.Error, match="takes no text"):          # the 4B model: no text
        next(app.generate_stream(*args(served_model[1], text="a red car")))
    with pytest.raises(gr.Error, match="Clip text"):
        next(app.generate_stream(*args(served_model[1], text="x" * 10_000)))


def test_served_bad_clip_is_an_error_then_a_clip_gives_an_mp4(served_model):
    from gradio_client import Client, handle_file

    app.demo.queue(max_size=16, default_concurrency_limit=1).launch(
        server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        client = Client(app.demo.local_url, verbose=False)
        with pytest.raises(Exception, match="Prompt clip"):
            client.predict(*args(None)[:11], None, "", api_name="/generate")
        video = handle_file(served_model[1])                # the server still serves
        out = client.predict(*args(video)[:11], video, "", api_name="/generate")
        assert out[0] and os.path.exists(out[0])                           # the live picture
        mp4 = out[-3]["video"] if isinstance(out[-3], dict) else out[-3]
        assert mp4.endswith(".mp4") and iio.imread(mp4).shape[0] == 33
        assert [os.path.splitext(f)[1] for f in out[-1]] == [".mp4", ".gif"]   # downloads
    finally:
        app.demo.close()


def test_live_picture_shows_the_generated_frames_not_the_given_ones(served_model):
    """33 decoded frames = 2 given latent frames + 3 generated; each generated latent frame
    (8 pixel frames) is shown by its last pixel frame: 16, 24, 32."""
    model, clip, _ = served_model
    model.start([clip])
    assert app.R.token_frame_picks(model, 33, 3, 4 * 5) == [16, 24, 32]

    class NoPrefix:
        pass

    assert app.R.token_frame_picks(NoPrefix(), 33, 3, 20) == [0, 11, 22]   # spread evenly
