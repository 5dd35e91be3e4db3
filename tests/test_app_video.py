"""The app's video prompt: pick or upload a clip, continue it with any method, watch the new
frames form, download the MP4.

A tiny randomly initialised Cosmos-shaped model (tiny transformer, tiny TorchScript DV
tokenizer saved to tmp_path, as in test_models_cosmos) is put in the app's model cache under
the registry name "cosmos-1-ar-4b", which the page otherwise lists as unavailable here.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import gradio as gr
import imageio.v3 as iio
import numpy as np
import pytest

from demo import config, generate_tab, inputs, layout, model_switch, models, page, pictures, race_tab, uploads
from demo.clips import example_clips
from demo.clips import CLIP_FRAMES
from scd_core.models.cache import ModelCache
from scd_core.models import cosmos
from scd_core.models.cosmos import tokenizer as dv
from test_app import final, race_rows, shown
from test_models_cosmos import LEVELS, TINY, save_tokenizer, write_clip

pytestmark = pytest.mark.served

NAME = "cosmos-1-ar-4b"


@pytest.fixture(scope="module")
def tiny_cosmos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cosmos")
    tok = dv.DVTokenizer.load(save_tokenizer(folder / "tok"), levels=LEVELS)
    model = cosmos.CosmosVideoModel(cosmos.random_model(TINY, std=0.2), tokenizer=tok,
                                    name="tiny-cosmos")
    clip = write_clip(uploaded("clip.mp4"), frames=12, h=96, w=128)
    return model, clip, folder


def uploaded(name: str) -> Path:
    """Where a visitor's upload of `name` lands: a new folder in Gradio's upload folder (the
    page reads no clip from anywhere else, demo/uploads.py)."""
    return Path(tempfile.mkdtemp(dir=uploads.upload_folder())) / name


@pytest.fixture
def served_model(tiny_cosmos, monkeypatch):
    monkeypatch.setattr(config.MODELS, "cache", ModelCache())
    config.MODELS.put(NAME, tiny_cosmos[0])
    return tiny_cosmos


def args(clip, method="scd-gumbel", init="repeat-frame", window=8, pace=0.0, text="", samples=2,
         temperature=1.0):
    """The Generate and Race events' inputs by name: the page's controls, then the clip inputs."""
    return dict(model=NAME, method=method, window=window, init=init, temperature=temperature, top_k=0,
                top_p=0.8, cfg=1.0, seed=0, prompt="", pace=pace, samples=samples, clip=clip, clip_text=text)




def test_clip_models_are_told_apart_by_their_registry_entry():
    assert models.takes_clip(NAME) and models.takes_clip("cosmos-1-ar-5b-video2world")
    assert not models.takes_clip("tiny") and not models.takes_clip("tiny-video")
    assert not models.takes_clip("no-such-model")


def test_selecting_a_clip_model_shows_the_clip_input_and_its_defaults(served_model):
    out = model_switch.on_model_change(NAME)
    assert out[layout.init_dd] == "repeat-frame" and out[layout.cfg_nb] == 1.0 and out[layout.topp_nb] == 0.8
    assert out[layout.samples_nb] == 2
    assert out[layout.clip_box].visible and not out[layout.text_box].visible
    assert not out[layout.clip_row].visible                 # the finished clip's row: with a run's clip, not empty before
    assert out[layout.gen_btn].interactive and out[layout.race_btn].interactive
    out = model_switch.on_model_change("texture")
    assert out[layout.text_box].visible and not out[layout.clip_box].visible


def test_unloaded_cosmos_stays_listed_as_unavailable_with_its_reason():
    reason = models.unavailable(NAME)
    if reason is None:
        pytest.skip("Cosmos weights and a GPU are present here")
    assert "needs GPU" in models.model_label(NAME)
    assert reason in inputs.problems(args(example_clips()[0]))["model"]


def test_example_clips_are_small_readable_videos():
    clips = example_clips()
    assert len(clips) == 2 and sum(os.path.getsize(c) for c in clips) < 200_000
    for c in clips:
        assert iio.imread(c).shape[0] == CLIP_FRAMES


def test_continuing_a_clip_streams_new_frames_then_an_mp4(served_model):
    _, clip, _ = served_model
    updates = list(generate_tab.generate_stream(**args(clip, pace=0.02)))
    run = final(updates, layout.last_run)
    pictures = shown(updates, layout.live_image)
    assert len(pictures) == len(run["iterations"])                       # every pass shown
    h, w, _ = pictures[-1].shape
    assert w > 2.5 * h                                  # the 3 generated frames side by side
    assert not np.array_equal(pictures[0], pictures[-1])   # the frames formed on screen
    assert "done" in final(updates, layout.status)
    mp4, gif = final(updates, layout.clip_files)
    assert final(updates, layout.clip_video) == mp4 and final(updates, layout.clip_row).visible
    assert not updates[0][layout.clip_row].visible           # hidden while the run forms, no empty frames
    frames = iio.imread(mp4)
    assert frames.shape[0] == 33 and frames.shape[-1] == 3    # 9 given + 24 new frames
    assert gif.endswith(".gif") and os.path.getsize(gif) > 0


@pytest.mark.parametrize("method", ["ar", "sjd", "scd-mc"])
def test_every_method_continues_an_example_clip(served_model, method):
    updates = list(generate_tab.generate_stream(**args(example_clips()[1], method=method, init="random")))
    assert final(updates, layout.last_run)["method"] == method
    assert final(updates, layout.clip_video).endswith(".mp4")


def test_race_on_a_clip_in_greedy_mode_gives_identical_tokens(served_model):
    _, clip, _ = served_model
    updates = list(race_tab.race_stream(**args(clip, temperature=0.0)))
    rows = race_rows(final(updates, layout.race_table))[1:]
    assert len(rows) == 3 and all(r["same tokens as AR"] == "yes" for r in rows)
    assert final(updates, layout.race_images["sjd"]).shape[1] >= 3 * 96     # frames >= 96 px
    other = race_tab.show_race_sample(2, final(updates, layout.race_state))       # the second sample
    assert set(other) == set(layout.race_images.values())
    assert other[layout.race_images["sjd"]].shape == final(updates, layout.race_images["sjd"]).shape


def test_bad_clips_are_clear_errors(served_model, tmp_path):
    bad = uploaded("bad.mp4")
    bad.write_bytes(b"not a video")
    for clip, words in [(None, "Prompt clip: pick"),
                        (str(uploaded("missing.mp4")), "Prompt clip: the uploaded file is gone"),
                        (str(tmp_path / "clip.mp4"), "Prompt clip: only a video uploaded"),
                        (str(bad), "Prompt clip: cannot read")]:
        assert words in inputs.problems(args(clip))["clip"]              # refused before the queue
    assert "Clip text" in inputs.problems(args(served_model[1], text="x" * 10_000))["clip"]
    # what only the model can tell: said in the status, nothing raised, nothing erased
    for clip, text, words in [(write_clip(uploaded("short.mp4"), frames=4), "", "fewer than the 9"),
                              (served_model[1], "a red car", "takes no text")]:
        updates = list(generate_tab.generate_stream(**args(clip, text=text)))
        assert len(updates) == 1 and words in updates[0][layout.status]


def test_served_bad_clip_is_an_error_then_a_clip_gives_an_mp4(served_model):
    from gradio_client import Client

    from test_app_security import upload

    page.demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **config.LAUNCH)
    try:
        client = Client(page.demo.local_url, verbose=False)
        with pytest.raises(Exception, match="Prompt clip"):
            client.predict(**args(None), api_name="/generate")
        video = upload(page.demo.local_url, served_model[1])   # the server still serves
        job = client.submit(**args(video), api_name="/generate")
        job.result(timeout=120)
        last = lambda i: next(o[i] for o in reversed(job.outputs())  # noqa: E731
                              if o[i] and not (isinstance(o[i], dict) and "__type__" in o[i]))
        at = [o for o in layout.gen_outputs if not isinstance(o, (gr.State, gr.Row))].index   # the API leaves states, rows out
        assert os.path.exists(last(at(layout.live_image)))                     # the live picture
        clip = last(at(layout.clip_video))
        mp4 = clip["video"] if isinstance(clip, dict) else clip
        assert mp4.endswith(".mp4") and iio.imread(mp4).shape[0] == 33
        assert [os.path.splitext(f)[1] for f in last(at(layout.clip_files))] == [".mp4", ".gif"]   # downloads
    finally:
        page.demo.close()


def test_live_picture_shows_the_generated_frames_not_the_given_ones(served_model):
    """33 decoded frames = 2 given latent frames + 3 generated; each generated latent frame
    (8 pixel frames) is shown by its last pixel frame: 16, 24, 32."""
    model, clip, _ = served_model
    row = model.start([clip]).row_decoder(0)                  # what the page decodes a row with
    assert pictures.token_frame_picks(model, 33, 3, 4 * 5, row) == [16, 24, 32]

    class NoPrefix:
        pass

    assert pictures.token_frame_picks(NoPrefix(), 33, 3, 20) == [0, 11, 22]   # spread evenly
