"""scripts/texture_probe.py: textured token data from the shipped tokenizer, and a model folder
that loads and decodes (the probe behind the texture figures of docs/embedded-models.md)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import scd_core
from script_util import load_script

pytestmark = pytest.mark.drill

FONT = Path("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf")
EMOJI_TEST = Path("/usr/share/unicode/emoji/emoji-test.txt")
needs_font = pytest.mark.skipif(not (FONT.exists() and EMOJI_TEST.exists()),
                                reason="needs fonts-noto-color-emoji and unicode-data")


def load_probe():
    return load_script("texture_probe")


@pytest.mark.parametrize("kind", ["waves", "fractal"])
def test_textures_are_seeded_varied_and_in_range(kind):
    import numpy as np

    make = load_probe().TEXTURES[kind]
    a = make(np.random.default_rng(1), 32)
    b = make(np.random.default_rng(1), 32)
    c = make(np.random.default_rng(2), 32)
    assert a.shape == (32, 32, 3) and a.min() >= 0 and a.max() <= 1
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert a.std() > 0.03                                       # not a flat fill
    # neighbouring pixels are alike: a texture, not white noise
    assert np.corrcoef(a[:, 1:].ravel(), a[:, :-1].ravel())[0, 1] > 0.3


@needs_font
def test_probe_tokens_have_no_white_background_and_the_model_loads(tmp_path):
    from scd_core.train import prior

    probe = load_probe()
    torch.set_num_threads(1)
    tokens = tmp_path / "tokens"
    probe.main(["--out", str(tokens), "--limit", "8"])
    data = prior.load_tokens(tokens, "image")
    assert data["tokens"].shape == (8, 9, 64) and data["grid"] == (8, 8)
    assert bool(data["val"].any()) and not bool(data["val"].all())
    assert (data["tokens"] == 0).float().mean() < 0.02             # textures are never flat white
    ckpt = str(tmp_path / "tex")
    prior.main(["--kind", "image", "--tokens", str(tokens), "--ckpt", ckpt, "--steps", "1", "--batch", "2",
                "--d-model", "32", "--layers", "1", "--heads", "2", "--threads", "1", "--eval-every", "1"])
    folder = tmp_path / "model"
    probe.main(["--export", ckpt, "--out", str(tokens), "--model-out", str(folder)])
    assert json.loads((folder / "config.json").read_text())["image_prior"]["d_model"] == 32
    model = scd_core.load_model(str(folder))
    run = scd_core.generate(model, ["red apple"], method="scd-mc", window=8, top_k=10, seed=0)
    assert run.tokens.shape == (1, 64) and run.images[0].size == (32, 32)
