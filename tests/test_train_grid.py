"""The training pipeline at another geometry: 64 px images, 16x16 tokens, from options only.

CPU only, offline, about 10-20 s on one thread: 8 emoji rendered at 64 px (192 px big
renders), a 1-step tokenizer (`--image-size 64 --patch 4`), its tokens (images and 2-frame
clips), a 1-step tiny image prior, an export to a temporary folder, then `scd_core.load_model`
and `scd_core.generate` on it. Also pins the default tokenizer config (the shipped one).
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

import scd_core
from scd_core.models.tiny import VQConfig

FONT = Path("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf")
EMOJI_TEST = Path("/usr/share/unicode/emoji/emoji-test.txt")
needs_font = pytest.mark.skipif(not (FONT.exists() and EMOJI_TEST.exists()),
                                reason="needs fonts-noto-color-emoji and unicode-data")

COMMON = ["--threads", "1", "--eval-every", "1", "--device", "cpu"]
SHIPPED_VQ = {"image_size": 32, "patch": 4, "channels": 128, "dec_channels": 128, "enc_blocks": 2,
              "dec_blocks": 3, "codebook_size": 512, "code_dim": 16, "out_channels": 32}


def render(root: Path, size: int) -> Path:
    """8 emoji (2 held out) at `size` px, big renders at 3x, in the data folder format."""
    from scd_core.train import data

    entries = data.read_emoji_test(str(EMOJI_TEST))
    picked = ([e for e in entries if data.is_held_out(e.name)][:2]
              + [e for e in entries if not data.is_held_out(e.name)][:6])
    images, bigs, kept = data.render_all(picked, size, str(FONT), big=3 * size)
    assert images.shape == (8, size, size, 3) and bigs.shape == (8, 3 * size, 3 * size, 3)
    data.save_dataset(root / "d", images, bigs, kept)
    return root / "d"


def white_dataset(size: int):
    """A stand-in for `load_dataset`: two white `size` px images, one held out."""
    def load(folder, big=False):
        return (np.full((2, size, size, 3), 255, dtype=np.uint8),
                [{"split": "train", "weight": 1.0}, {"split": "val", "weight": 1.0}])
    return load


class Built(Exception):
    pass


def test_default_tokenizer_config_is_the_shipped_one(tmp_path, monkeypatch):
    """No options: the same VQConfig as before the geometry options existed (and as shipped)."""
    from scd_core.train import tokenizer

    assert asdict(VQConfig()) == SHIPPED_VQ
    shipped = Path(scd_core.__file__).resolve().parent / "assets" / "tiny" / "config.json"
    if shipped.exists():
        assert json.loads(shipped.read_text())["vq"] == SHIPPED_VQ
    built = []

    def fake_vqlite(cfg):
        built.append(cfg)
        raise Built

    monkeypatch.setattr(tokenizer, "VQLite", fake_vqlite)
    monkeypatch.setattr(tokenizer, "load_dataset", white_dataset(32))
    with pytest.raises(Built):
        tokenizer.main(["--data", str(tmp_path), "--ckpt", str(tmp_path / "vq")] + COMMON)
    assert [asdict(c) for c in built] == [SHIPPED_VQ]


def test_tokenizer_rejects_a_size_that_is_not_the_data(tmp_path, monkeypatch):
    from scd_core.train import tokenizer

    monkeypatch.setattr(tokenizer, "load_dataset", white_dataset(64))
    with pytest.raises(SystemExit, match="--image-size 32"):
        tokenizer.main(["--data", str(tmp_path), "--ckpt", str(tmp_path / "vq")] + COMMON)
    with pytest.raises(SystemExit, match="--patch"):
        tokenizer.main(["--data", str(tmp_path), "--ckpt", str(tmp_path / "vq"), "--image-size", "64",
                        "--patch", "5"] + COMMON)
    assert not (tmp_path / "vq.safetensors").exists()


@needs_font
def test_64px_pipeline_makes_a_16x16_model(tmp_path):
    from scd_core.train import export, prior, tokenizer, tokens

    torch.set_num_threads(1)
    d = render(tmp_path, 64)
    vq, tok, img = str(tmp_path / "vq64"), tmp_path / "t", str(tmp_path / "image_prior64")
    tokenizer.main(["--data", str(d), "--ckpt", vq, "--steps", "1", "--batch", "4", "--image-size", "64",
                    "--patch", "4", "--codebook-size", "256"] + COMMON)
    assert json.loads(Path(vq + ".json").read_text())["config"]["image_size"] == 64
    tokens.main(["--data", str(d), "--vq", vq, "--out", str(tok), "--frames", "2", "--threads", "1"])
    data = prior.load_tokens(tok, "image")
    assert data["grid"] == (16, 16) and data["codebook_size"] == 256
    assert data["tokens"].shape == (8, 9, 256) and int(data["tokens"].max()) < 256
    clips = prior.load_tokens(tok, "video")
    assert clips["grid"] == (2, 16, 16) and clips["tokens"].shape == (16, 1, 512)
    prior.main(["--kind", "image", "--tokens", str(tok), "--ckpt", img, "--steps", "1", "--batch", "2",
                "--d-model", "32", "--layers", "1", "--heads", "2", "--dropout", "0"] + COMMON)
    record = json.loads(Path(img + ".json").read_text())["config"]
    assert record["grid"] == [16, 16] and record["vocab_size"] == 256
    out = tmp_path / "assets_64"
    export.main(["--vq", vq, "--image", img, "--video", "none", "--vocab", str(tok / "vocab.json"),
                 "--out", str(out)])
    assert not (out / "video_prior.safetensors").exists()

    model = scd_core.load_model(str(out), threads=1)
    assert model.grid == (16, 16) and model.vocab_size == 256
    run = scd_core.generate(model, ["red apple"], method="scd-mc", window=16, top_k=10, seed=0)
    assert run.tokens.shape == (1, 256)
    assert int(run.tokens.min()) >= 0 and int(run.tokens.max()) < model.vocab_size
    assert run.images[0].size == (64, 64)


def test_export_refuses_a_prior_of_another_tokenizer(tmp_path):
    """The shipped 8x8 / 512 prior cannot be exported with a 16x16 tokenizer."""
    from scd_core.train import export

    vq = tmp_path / "vq64"
    (tmp_path / "vq64.json").write_text(json.dumps({"config": dict(SHIPPED_VQ, image_size=64), "step": 0,
                                                     "args": {}}))
    (tmp_path / "vq64.safetensors").write_bytes(b"")
    prior_json = {"config": {"vocab_size": 512, "grid": [8, 8]}, "step": 0, "args": {}}
    (tmp_path / "p.json").write_text(json.dumps(prior_json))
    (tmp_path / "p.safetensors").write_bytes(b"")
    (tmp_path / "vocab.json").write_text(json.dumps({"words": []}))
    with pytest.raises(SystemExit, match="grid"):
        export.main(["--vq", str(vq), "--image", str(tmp_path / "p"), "--video", "none",
                     "--vocab", str(tmp_path / "vocab.json"), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out" / "vq.safetensors").exists()


@needs_font
def test_tokenizer_refuses_to_resume_another_geometry(tmp_path):
    from scd_core.train import tokenizer

    d = render(tmp_path, 64)
    args = ["--data", str(d), "--ckpt", str(tmp_path / "vq"), "--steps", "1", "--batch", "2", "--image-size", "64"]
    tokenizer.main(args + COMMON)
    with pytest.raises(SystemExit, match="--codebook-size"):
        tokenizer.main(args + ["--steps", "2", "--codebook-size", "256"] + COMMON)
