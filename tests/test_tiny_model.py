"""The embedded tiny models: shipped weights, the Session contract, training code, exactness.

CPU only, offline. The exactness test compares per-position token histograms of SJD and
SCD against AR on the real image model under a reduced setting (top-k 8, CFG 3, window 8),
with many batch rows, by a two-sample chi-square test per position (Bonferroni over positions).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from scipy import stats

import scd_core
from scd_core import testing
from scd_core.models import tiny
from scd_core.models.tiny import GPTConfig, TinyGPT, TinyModel, VQConfig, VQLite, WordVocab

FONT = Path("/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf")
EMOJI_TEST = Path("/usr/share/unicode/emoji/emoji-test.txt")


@pytest.fixture(scope="module")
def image_model() -> TinyModel:
    return scd_core.load_model("tiny")


@pytest.fixture(scope="module")
def video_model() -> TinyModel:
    return scd_core.load_model("tiny-video")


@pytest.fixture(scope="module")
def model64() -> TinyModel:
    return scd_core.load_model("tiny-64")


def random_model(grid=(8, 8), seed: int = 0, **attention) -> TinyModel:
    """A randomly initialised small model, for contract tests independent of the weights;
    `attention` (attention=, local_rows=, local_cols=) goes to its GPTConfig."""
    torch.manual_seed(seed)
    vq = VQLite(VQConfig(image_size=4 * grid[-1], channels=32, dec_channels=32, out_channels=8, enc_blocks=1,
                         dec_blocks=1))
    gpt = TinyGPT(GPTConfig(grid=grid, n_words=5, d_model=32, n_layers=len(attention.get("attention", "ab")),
                            n_heads=2, dropout=0.0, **attention))
    kind = "video" if len(grid) == 3 else "image"
    return TinyModel(vq, gpt, WordVocab(["cat", "dog", "face", "red", "apple"]), kind, "random")


LOCAL = dict(attention=("local", "self", "self"), local_rows=1, local_cols=1)    # a 3-layer prior, local in 2-D


# --------------------------------------------------------------------------- shipped weights

def test_shipped_weights_load_offline(image_model, video_model):
    assert tiny.availability("tiny") is None and tiny.availability("tiny-video") is None
    assert image_model.vocab_size == 512 and image_model.grid == (8, 8)
    assert video_model.vocab_size == 512 and len(video_model.grid) == 3 and video_model.grid[1:] == (8, 8)
    assert 6 <= video_model.grid[0] <= 8
    total = sum(p.stat().st_size for p in tiny.ASSETS.glob("*.safetensors"))
    assert total <= 25e6
    config = json.loads((tiny.ASSETS / "config.json").read_text())
    assert config["family"] == "scd-tiny-emoji"
    assert (tiny.ASSETS / "NOTICE").exists()


def test_the_64_px_model_loads_offline_within_its_budget(model64):
    """`tiny-64`: 16x16 tokens of 64 px images, at most 40 MB of fp16 weights, a prior whose
    attention is local in 2-D as its config says."""
    assert tiny.availability("tiny-64") is None
    assert model64.grid == (16, 16) and model64.vocab_size == 512 and model64.name == "tiny-64"
    total = sum(p.stat().st_size for p in tiny.ASSETS_64.glob("*.safetensors"))
    assert total <= 40e6
    config = json.loads((tiny.ASSETS_64 / "config.json").read_text())
    assert config["family"] == "scd-tiny-emoji" and config["vq"]["image_size"] == 64
    assert "local" in config["image_prior"]["attention"]
    assert (tiny.ASSETS_64 / "NOTICE").exists()
    images = model64.decode(torch.zeros(2, 256, dtype=torch.long))
    assert [im.size for im in images] == [(64, 64)] * 2
    assert model64.decode_pixels(torch.zeros(1, 256, dtype=torch.long)).mean().item() > 0.97   # code 0: white
    run = scd_core.generate(model64, ["red heart"], method="scd-mc", window=32, seed=0)
    assert run.tokens.shape == (1, 256) and 1 < run.nfe < 257


def test_the_64_px_model_reads_only_its_neighbourhood(model64):
    """The shipped local prior (two local layers of one row and one column, then two
    per-position layers): a token changed at cell (r, c) away from the edges moves p only at
    (r, c + 1), at (r + 1, c - 1 .. c + 1) and at (r + 2, c - 3 .. c + 1) (the second layer
    reads the row above through positions that each predict the cell to the right of the
    token they hold)."""
    g = torch.Generator().manual_seed(6)
    tokens = torch.randint(512, (1, 256), generator=g)
    changed = tokens.clone()
    site = 5 * 16 + 7
    changed[0, site] = (tokens[0, site] + 1) % 512
    before, after = (feed_sequential(model64, ["cat face"], t, 3.0) for t in (tokens, changed))
    moved = ((after - before).abs().amax(-1) > 1e-4)[0].nonzero().flatten().tolist()
    cells = [divmod(j, 16) for j in moved]
    allowed = {(5, 8)} | {(6, c) for c in range(6, 9)} | {(7, c) for c in range(4, 9)}
    assert (5, 8) in cells and set(cells) <= allowed, cells


def test_decode_shapes(image_model, video_model):
    images = image_model.decode(torch.zeros(3, 64, dtype=torch.long))
    assert len(images) == 3 and all(im.size == (32, 32) and im.mode == "RGB" for im in images)
    t = video_model.grid[0]
    clips = video_model.decode(torch.zeros(2, t * 64, dtype=torch.long))
    assert len(clips) == 2 and all(len(c) == t for c in clips)
    assert all(f.size == (32, 32) and f.mode == "RGB" for c in clips for f in c)


def test_tokens_step_loads_the_shipped_tokenizer_from_its_folder(image_model):
    from scd_core.train.tokenizer import load_vq

    vq = load_vq(str(tiny.ASSETS))
    assert all(torch.equal(a, b) for a, b in zip(vq.state_dict().values(), image_model.vq.state_dict().values()))
    x = torch.rand(2, 3, 32, 32)
    assert torch.equal(vq.encode(x), image_model.vq.encode(x))


def test_background_code_decodes_to_white(image_model):
    pix = image_model.decode_pixels(torch.zeros(1, 64, dtype=torch.long))
    assert pix.mean().item() > 0.97


def test_generate_image_model(image_model):
    run = scd_core.generate(image_model, ["grinning face", "red heart"], method="scd-mc", window=16,
                            seed=0, top_k=100, cfg_scale=3.0)
    assert run.tokens.shape == (2, 64) and run.tokens.min() >= 0 and run.tokens.max() < 512
    assert 1 < run.nfe < 64 + 1
    assert len(run.images) == 2 and run.images[0].size == (32, 32)


def test_generate_video_model(video_model):
    run = scd_core.generate(video_model, ["cat face moving left"], method="scd-gumbel", window=16,
                            seed=0, top_k=100, cfg_scale=3.0)
    n = math.prod(video_model.grid)
    assert run.tokens.shape == (1, n)
    assert len(run.images) == 1 and len(run.images[0]) == video_model.grid[0]


def test_prompts_map_to_known_words(image_model):
    assert image_model.vocab.known("Flag: France!") == ["flag", "france"]
    assert image_model.vocab.known("cats") == ["cat"]          # plural falls back
    assert image_model.vocab.ids("qwertyuiop") == []           # unknown: unconditional


# --------------------------------------------------------------------------- Session contract

def feed_sequential(model: TinyModel, prompts, tokens, cfg_scale):
    session = model.start(prompts, cfg_scale)
    out = [session.first_logits]
    for j in range(tokens.shape[1] - 1):
        out.append(session.step(tokens[:, j:j + 1], torch.full((len(prompts),), j))[:, 0])
    return torch.stack(out, 1)


@pytest.mark.parametrize("cfg_scale", [1.0, 3.0])
def test_window_step_equals_sequential_steps(cfg_scale):
    model = random_model()
    prompts = ["cat face", "red apple"]
    tokens = torch.randint(512, (2, 64), generator=torch.Generator().manual_seed(1))
    ref = feed_sequential(model, prompts, tokens, cfg_scale)
    session = model.start(prompts, cfg_scale)
    # Row 0 feeds positions 0..9 at once, row 1 positions 0..4: different starts per row.
    out0 = session.step(tokens[:, :10], torch.tensor([0, 0]))
    torch.testing.assert_close(out0, ref[:, 1:11], atol=1e-4, rtol=1e-4)
    out1 = session.step(tokens[:, 10:20], torch.tensor([10, 10]))
    torch.testing.assert_close(out1, ref[:, 11:21], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cfg_scale", [1.0, 3.0])
def test_tree_of_drafts_equals_its_paths_fed_as_chains(image_model, video_model, cfg_scale):
    """The tree contract (scd_core.testing) on the shipped image and clip models."""
    testing.check_tree_session(image_model, ["red heart", "cat face"], cfg_scale)
    testing.check_tree_session(video_model, ["red heart zooming in", "basketball moving down"], cfg_scale)


# --------------------------------------------------------------------------- attention local in 2-D

def spread_weights(model: TinyModel, std: float = 0.2) -> TinyModel:
    """Larger random weights, so that the logits depend on the tokens they may see."""
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in model.gpt.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return model


def test_a_local_layer_sees_the_prompt_its_row_to_the_left_and_the_rows_above():
    """Sequence position q predicts cell divmod(q, W) and sees the prompt, itself, local_cols
    tokens to the left in its row and local_rows rows above within local_cols columns."""
    cfg = GPTConfig(grid=(6, 6), n_words=5, n_layers=2, attention=("local", "self"), local_rows=1, local_cols=1)
    table = tiny.attention_table(cfg, "local")
    q = 2 * 6 + 3                                     # predicts cell (2, 3); holds the token of cell (2, 2)
    cells = [divmod(int(k) - 1, 6) for k in table[q].nonzero().flatten() if k > 0]
    assert table[q, 0] and cells == [(1, 2), (1, 3), (1, 4), (2, 2)]
    assert torch.equal(tiny.attention_table(cfg, "self"), torch.eye(37, dtype=torch.bool) | (torch.arange(37) == 0))
    assert tiny.attention_table(cfg, "full") is None
    assert not table.triu(1).any()                   # never a later position


@pytest.mark.parametrize("bad,match", [(dict(attention=("local",)), "one entry per layer"),
                                       (dict(attention=("local", "wide")), "unknown"),
                                       (dict(attention=("local", "full"), grid=(2, 4, 4)), "2-D grid"),
                                       (dict(attention=("local", "full"), local_rows=-1), "local_rows")])
def test_attention_settings_are_checked(bad, match):
    with pytest.raises(ValueError, match=match):
        GPTConfig(**{"grid": (4, 4), "n_layers": 2, **bad})


def test_a_local_prior_reads_only_its_neighbourhood():
    """One local layer (1 row, 1 column), the others per-position: a changed token moves p only
    at the cell after it (its left neighbour and raster predecessor) and at the three cells below
    it, in the session as in training."""
    model = spread_weights(random_model(grid=(6, 6), **LOCAL))
    tokens = torch.randint(512, (2, 36), generator=torch.Generator().manual_seed(4))
    changed = tokens.clone()
    changed[:, 14] = (tokens[:, 14] + 1) % 512       # cell (2, 2)
    ids, mask = model.encode_prompts(["cat", "dog"])
    before, after = feed_sequential(model, ["cat", "dog"], tokens, 1.0), feed_sequential(model, ["cat", "dog"], changed, 1.0)
    moved = ((after - before).abs().amax(-1) > 1e-4).any(0).nonzero().flatten().tolist()
    assert moved == [15, 19, 20, 21]                  # cells (2, 3), (3, 1), (3, 2), (3, 3)
    torch.testing.assert_close(model.gpt(ids, mask, tokens), before, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cfg_scale", [1.0, 3.0])
def test_a_local_prior_follows_the_contract(cfg_scale):
    """Windows, forgetting and trees (`scd_core.testing`) with local and per-position layers."""
    model = spread_weights(random_model(grid=(6, 6), **LOCAL))
    testing.check_model(model, ["cat", "dog"], cfg_scale)
    testing.check_tree_session(model, ["cat", "dog"], cfg_scale)


def test_step_forgets_positions_at_and_after_start():
    model = random_model()
    g = torch.Generator().manual_seed(2)
    tokens = torch.randint(512, (2, 64), generator=g)
    ref = feed_sequential(model, ["dog", ""], tokens, 3.0)
    session = model.start(["dog", ""], 3.0)
    session.step(tokens[:, :12], torch.tensor([0, 0]))
    garbage = torch.randint(512, (2, 12), generator=g)
    session.step(garbage, torch.tensor([6, 3]))              # rows at different positions
    out = session.step(torch.stack([tokens[0, 6:14], tokens[1, 3:11]]), torch.tensor([6, 3]))
    torch.testing.assert_close(out[0], ref[0, 7:15], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(out[1], ref[1, 4:12], atol=1e-4, rtol=1e-4)


def test_cfg_mixes_conditional_and_unconditional_rows():
    model = random_model()
    tokens = torch.randint(512, (1, 8), generator=torch.Generator().manual_seed(3))
    cond = model.start(["cat"], 1.0)
    uncond = model.start([""], 1.0)
    guided = model.start(["cat"], 2.5)
    assert guided.first_logits.shape == (1, 512)
    torch.testing.assert_close(guided.first_logits,
                               uncond.first_logits + 2.5 * (cond.first_logits - uncond.first_logits), atol=1e-4, rtol=1e-4)
    c, u, m = (s.step(tokens, torch.tensor([0])) for s in (cond, uncond, guided))
    torch.testing.assert_close(m, u + 2.5 * (c - u), atol=1e-4, rtol=1e-4)
    assert len(cond.cache[0][0]) == 1 and len(guided.cache[0][0]) == 2   # no uncond rows at scale 1


def test_video_grid_session_shapes():
    model = random_model(grid=(3, 8, 8))
    session = model.start(["cat"], 3.0)
    out = session.step(torch.zeros(1, 16, dtype=torch.long), torch.tensor([100]))
    assert out.shape == (1, 16, 512)


def test_bad_input_raises_value_error():
    model = random_model()
    with pytest.raises(ValueError, match="prompts"):
        model.start("cat", 1.0)
    with pytest.raises(ValueError, match="cfg_scale"):
        model.start(["cat"], float("nan"))
    session = model.start(["cat", "dog"], 1.0)
    with pytest.raises(ValueError, match="tokens"):
        session.step(torch.zeros(1, 4, dtype=torch.long), torch.tensor([0]))
    with pytest.raises(ValueError, match="tokens"):
        session.step(torch.full((2, 4), 512), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="start"):
        session.step(torch.zeros(2, 4, dtype=torch.long), torch.tensor([-1, 0]))
    with pytest.raises(ValueError, match="tokens"):
        model.decode(torch.zeros(1, 10, dtype=torch.long))
    with pytest.raises(ValueError, match="model"):
        tiny.load_tiny("/nonexistent/folder")


# --------------------------------------------------------------------------- training code

@pytest.mark.skipif(not (FONT.exists() and EMOJI_TEST.exists()), reason="needs fonts-noto-color-emoji and unicode-data")
def test_one_step_training_runs(tmp_path):
    from safetensors.torch import load_file

    from scd_core.train import data, prior, tokenizer, tokens

    entries = data.read_emoji_test(str(EMOJI_TEST))
    held = [e for e in entries if data.is_held_out(e.name)][:2]
    picked = held + [e for e in entries if not data.is_held_out(e.name)][:6]
    images, bigs, kept = data.render_all(picked, 32, str(FONT))
    assert images.shape == (8, 32, 32, 3) and bigs.shape == (8, 96, 96, 3)
    assert {e.split for e in kept} == {"train", "val"}
    data.save_dataset(tmp_path / "d", images, bigs, kept)
    vq = str(tmp_path / "vq")
    common = ["--threads", "1", "--eval-every", "1"]
    tokenizer.main(["--data", str(tmp_path / "d"), "--ckpt", vq, "--steps", "1", "--batch", "4"] + common)
    first = load_file(vq + ".safetensors")
    tokenizer.main(["--data", str(tmp_path / "d"), "--ckpt", vq + "_again", "--steps", "1", "--batch", "4"] + common)
    again = load_file(vq + "_again.safetensors")
    assert all(torch.equal(first[k], again[k]) for k in first)              # deterministic given the seed
    tokenizer.main(["--data", str(tmp_path / "d"), "--ckpt", vq, "--steps", "2", "--batch", "4"] + common)
    assert json.loads(Path(vq + ".json").read_text())["step"] == 2         # resumed, not restarted
    tokens.main(["--data", str(tmp_path / "d"), "--vq", vq, "--out", str(tmp_path / "t"), "--frames", "6"])
    for kind in ("image", "video"):
        ckpt = str(tmp_path / f"{kind}_prior")
        prior.main(["--kind", kind, "--tokens", str(tmp_path / "t"), "--ckpt", ckpt, "--steps", "1",
                    "--batch", "2", "--d-model", "32", "--layers", "1", "--heads", "2"] + common)
        record = json.loads(Path(ckpt + ".json").read_text())
        assert record["step"] == 1 and math.isfinite(record["val_nll"])
    warm = str(tmp_path / "video_warm")
    prior.main(["--kind", "video", "--tokens", str(tmp_path / "t"), "--ckpt", warm, "--steps", "1",
                "--batch", "2", "--d-model", "32", "--layers", "1", "--heads", "2",
                "--init-from", str(tmp_path / "image_prior")] + common)
    assert json.loads(Path(warm + ".json").read_text())["step"] == 1


def test_video_prior_warm_start_gives_every_frame_the_image_prior():
    from scd_core.models.tiny import GPTConfig, TinyGPT
    from scd_core.train.prior import warm_start_from_image_prior

    image = TinyGPT(GPTConfig(vocab_size=16, grid=(2, 3), n_words=5, d_model=8, n_layers=1, n_heads=2))
    video = TinyGPT(GPTConfig(vocab_size=16, grid=(4, 2, 3), n_words=5, d_model=8, n_layers=1, n_heads=2))
    warm_start_from_image_prior(video, image.state_dict())
    frames = video.positions()[1:].view(4, 6, 8) - video.axis_emb[0].detach().view(4, 1, 8)
    assert torch.allclose(frames, image.positions()[1:].expand(4, 6, 8).detach())
    assert torch.equal(video.blocks[0].qkv.weight, image.blocks[0].qkv.weight)
    assert torch.equal(video.tok_emb.weight, image.tok_emb.weight)
    with pytest.raises(ValueError, match="init-from"):
        warm_start_from_image_prior(TinyGPT(GPTConfig(vocab_size=16, grid=(4, 2, 3), n_words=5, d_model=16,
                                                      n_layers=1, n_heads=2)), image.state_dict())


# --------------------------------------------------------------------------- exactness on the real model

def two_sample_pvalue(a: torch.Tensor, b: torch.Tensor, vocab: int) -> float:
    """Chi-square test of homogeneity of two samples of category indices."""
    table = torch.stack([torch.bincount(a, minlength=vocab), torch.bincount(b, minlength=vocab)]).double()
    table = table[:, table.sum(0) > 0]
    if table.shape[1] < 2:
        return 1.0
    return float(stats.chi2_contingency(table.numpy(), correction=False)[1])


ROWS = {"tiny": 192, "tiny-64": 128}           # a method's rows for the histograms: their power (below)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ROWS))
def test_sjd_and_scd_match_ar_per_position_histograms(name, image_model, model64):
    """Rows a method sized to the test's power. On tiny, an off-by-one p (each slot verified and
    redrafted with the p of the position before it) fails it in 11 of 12 disjoint samples of 192
    rows, 1 of 24 at 96; on tiny-64 in 18 of 18 samples of 128 rows (each sample's smallest
    p below 1e-9, the threshold 4.5e-5), 24 of 24 at 96. A fresh draw from p at a rejection (SJD) and top-k
    skipped in AR move these peaked marginals too little to fail it on tiny at 192 rows (the toy
    enumeration, tests/test_exactness.py, catches both)."""
    model = {"tiny": image_model, "tiny-64": model64}[name]
    n = math.prod(model.grid)
    rows, positions = ROWS[name], list(range(0, n, 3 * n // 64))
    settings = dict(window=8, top_k=8, cfg_scale=3.0, temperature=1.0)
    prompts = ["grinning face"] * rows
    image_model = model
    ar = scd_core.generate(image_model, prompts, method="ar", seed=11, **settings).tokens
    alpha = 1e-3 / len(positions)
    for method, seed in (("sjd", 12), ("scd-mc", 13), ("scd-gumbel", 14)):
        other = scd_core.generate(image_model, prompts, method=method, seed=seed, **settings).tokens
        pvals = [two_sample_pvalue(ar[:, j], other[:, j], 512) for j in positions]
        assert min(pvals) > alpha, (method, min(pvals))


def test_loading_the_embedded_models_leaves_the_process_thread_count_alone():
    """The process's torch thread count is its owner's: loading tiny or tiny-video never
    changes it (only an explicit `threads=` does)."""
    from scd_core.models.tiny import load_tiny, load_tiny_video

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        load_tiny()
        load_tiny_video()
        assert torch.get_num_threads() == 2
        load_tiny(threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
