"""Cosmos-1 AR adapter: a tiny randomly initialised Cosmos-shaped model, offline on CPU."""
from __future__ import annotations

import math
import os
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from scd_core.models import cosmos
from scd_core.models.cosmos import tokenizer as dv
from fakehub import empty_hub_cache  # noqa: F401  (fixture: offline, empty Hugging Face cache)
import rows_util
from scd_core import testing

LEVELS = [3, 4, 5]                       # tiny FSQ: 60 codes
TINY = cosmos.CosmosConfig(dim=48, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=12,
                           ffn_hidden_size=64, vocab_size=60, latent_shape=(5, 4, 5),
                           rope_theta=10000.0, pixel_size=(64, 80))
TINY_V2W = replace(TINY, cross_attention=True, abs_pos_emb=True, bov=True, embed_vocab_size=64,
                   context_dim=16)


def tiny_model(cfg=TINY, seed=0, tokenizer=None) -> cosmos.CosmosVideoModel:
    net = cosmos.random_model(cfg, seed=seed, std=0.2)
    return cosmos.CosmosVideoModel(net, tokenizer=tokenizer, name="tiny-cosmos")


def start(model, batch=1, seed=1):
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, model.vocab_size, (batch, model.cfg.prefix_len), generator=g)
    context = torch.randn(batch, 7, model.cfg.context_dim, generator=g) if model.cfg.cross_attention else None
    return model.start_tokens(prefix, context)


@pytest.mark.parametrize("cfg", [TINY, TINY_V2W], ids=["base", "video2world"])
def test_window_forward_equals_one_at_a_time(cfg):
    model = tiny_model(cfg)
    toks = torch.randint(0, model.vocab_size, (1, 9), generator=torch.Generator().manual_seed(2))
    window = start(model).step(toks, torch.tensor([0]))
    s = start(model)
    single = torch.cat([s.step(toks[:, j:j + 1], torch.tensor([j])) for j in range(9)], dim=1)
    assert window.shape == (1, 9, model.vocab_size)
    torch.testing.assert_close(window, single, atol=1e-4, rtol=1e-4)
    # first_logits is the prediction of generated position 0, from the prefix alone
    assert start(model).first_logits.shape == (1, model.vocab_size)


def test_step_with_smaller_start_forgets():
    model = tiny_model()
    g = torch.Generator().manual_seed(3)
    a = torch.randint(0, 60, (1, 10), generator=g)
    b = torch.randint(0, 60, (1, 4), generator=g)
    s = start(model)
    s.step(a, torch.tensor([0]))                     # positions 0..9
    rolled = s.step(b, torch.tensor([3]))            # overwrite from 3: forget 3..9
    fresh = start(model)
    fresh.step(a[:, :3], torch.tensor([0]))
    expected = fresh.step(b, torch.tensor([3]))
    torch.testing.assert_close(rolled, expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="start"):
        s.step(b, torch.tensor([20]))                # a gap: positions 7..19 never fed


def test_batch_rows_at_different_starts_match_single_rows():
    model = tiny_model()
    g = torch.Generator().manual_seed(4)
    prefix = torch.randint(0, 60, (2, model.cfg.prefix_len), generator=g)
    hist = torch.randint(0, 60, (2, 8), generator=g)
    win = torch.randint(0, 60, (2, 5), generator=g)
    starts = torch.tensor([2, 6])
    s = model.start_tokens(prefix)
    s.step(hist, torch.tensor([0, 0]))
    both = s.step(win, starts)
    for r in range(2):
        one = model.start_tokens(prefix[r:r + 1])
        one.step(hist[r:r + 1, : int(starts[r])], torch.tensor([0]))
        torch.testing.assert_close(both[r:r + 1], one.step(win[r:r + 1], starts[r:r + 1]), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(s.first_logits[r:r + 1], one.first_logits, atol=1e-5, rtol=1e-5)


def test_rotary_positions_follow_the_thw_raster():
    cfg = cosmos.full_size_config("cosmos-1-ar-4b")
    f_t, f_s = cosmos.rope_inv_freqs(cfg)
    assert (len(f_t), len(f_s)) == (22, 21)                  # head_dim 128: dim_t 44, dim_h = dim_w = 42
    assert f_s[1].item() == pytest.approx(1 / 500000 ** (2 / 42))
    assert f_t[1].item() == pytest.approx(1 / 500000 ** (2 / 44))
    # latent token (t=2, h=7, w=33) sits at raster index 2*2560 + 7*64 + 33
    seq = torch.tensor([0, 1, 63, 64, 2560, 2 * 2560 + 7 * 64 + 33])
    t, h, w, valid = cosmos.latent_coords(seq, cfg)
    assert t.tolist() == [0, 0, 0, 0, 1, 2] and h.tolist() == [0, 0, 0, 1, 0, 7]
    assert w.tolist() == [0, 1, 63, 0, 0, 33] and bool(valid.all())
    ang = cosmos.rope_angles(seq, cfg)
    assert ang.shape == (6, 128)
    expected = torch.cat([2 * f_t, 7 * f_s, 33 * f_s]).float()
    torch.testing.assert_close(ang[-1, :64], expected)
    torch.testing.assert_close(ang[-1, 64:], expected)       # cat([t, h, w] * 2)
    # Video2World: a <bov> at sequence 0 with zero angles, the latent raster shifted by one
    v2w = cosmos.full_size_config("cosmos-1-ar-5b-video2world")
    ang = cosmos.rope_angles(torch.tensor([0, 1, 2, 65]), v2w)
    assert bool((ang[0] == 0).all()) and bool((ang[1] == 0).all())
    torch.testing.assert_close(ang[2, 43:64], f_s.float())   # (0, 0, 1): w = 1
    torch.testing.assert_close(ang[3, 22:43], f_s.float())   # (0, 1, 0): h = 1
    # past the grid (the published zero padding) the angles are zero too
    assert bool((cosmos.rope_angles(torch.tensor([12800]), cfg) == 0).all())


PUBLISHED_LAYER0 = [  # names as in NVIDIA's cosmos1 Transformer state dict, after "model."
    "layers.0.attention.wq.weight", "layers.0.attention.wk.weight", "layers.0.attention.wv.weight",
    "layers.0.attention.wo.weight", "layers.0.attention.q_norm.weight", "layers.0.attention.k_norm.weight",
    "layers.0.attention_norm.weight", "layers.0.ffn_norm.weight", "layers.0.feed_forward.w1.weight",
    "layers.0.feed_forward.w2.weight", "layers.0.feed_forward.w3.weight",
]
PUBLISHED_CROSS0 = [
    "layers.0.cross_attention.wq.weight", "layers.0.cross_attention.wk.weight",
    "layers.0.cross_attention.wv.weight", "layers.0.cross_attention.wo.weight",
    "layers.0.cross_attention.q_norm.weight", "layers.0.cross_attention.k_norm.weight",
    "layers.0.cross_attention_norm.weight",
]


def synthetic_checkpoint(cfg) -> dict:
    """A published-style checkpoint: {'model': {'model.<name>': tensor, ... '_extra_state'}}."""
    g = torch.Generator().manual_seed(5)
    hd, kv = cfg.hd, cfg.n_kv_heads * cfg.hd
    shapes = {"tok_embeddings.weight": (cfg.n_embed, cfg.dim), "norm.weight": (cfg.dim,),
              "output.weight": (cfg.vocab_size, cfg.dim)}
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        shapes.update({p + "attention.wq.weight": (cfg.n_heads * hd, cfg.dim), p + "attention.wk.weight": (kv, cfg.dim),
                       p + "attention.wv.weight": (kv, cfg.dim), p + "attention.wo.weight": (cfg.dim, cfg.n_heads * hd),
                       p + "attention.q_norm.weight": (hd,), p + "attention.k_norm.weight": (hd,),
                       p + "attention_norm.weight": (cfg.dim,), p + "ffn_norm.weight": (cfg.dim,),
                       p + "feed_forward.w1.weight": (cfg.ffn_hidden_size, cfg.dim),
                       p + "feed_forward.w2.weight": (cfg.dim, cfg.ffn_hidden_size),
                       p + "feed_forward.w3.weight": (cfg.ffn_hidden_size, cfg.dim)})
        if cfg.cross_attention:
            shapes.update({p + "cross_attention.wq.weight": (cfg.n_heads * hd, cfg.dim),
                           p + "cross_attention.wk.weight": (kv, cfg.context_dim),
                           p + "cross_attention.wv.weight": (kv, cfg.context_dim),
                           p + "cross_attention.wo.weight": (cfg.dim, cfg.n_heads * hd),
                           p + "cross_attention.q_norm.weight": (hd,), p + "cross_attention.k_norm.weight": (hd,),
                           p + "cross_attention_norm.weight": (cfg.dim,)})
    state = {"model." + k: torch.randn(s, generator=g) * 0.2 for k, s in shapes.items()}
    state["model.layers.0.attention._extra_state"] = None
    return {"model": state}


@pytest.mark.parametrize("cfg", [TINY, TINY_V2W], ids=["base", "video2world"])
def test_checkpoint_with_published_names_loads_strictly(tmp_path, cfg):
    ours = set(cosmos.CosmosTransformer(cfg).state_dict())
    assert set(PUBLISHED_LAYER0) <= ours
    assert (set(PUBLISHED_CROSS0) <= ours) == cfg.cross_attention
    ckpt = synthetic_checkpoint(cfg)
    assert {k[len("model."):] for k in ckpt["model"] if not k.endswith("_extra_state")} == ours
    torch.save(ckpt, tmp_path / "model.pt")
    base = replace(TINY, embed_vocab_size=None)               # variant and sizes come from the tensors
    net = cosmos.load_network(str(tmp_path / "model.pt"), base)
    assert net.cfg.cross_attention == cfg.cross_attention and net.cfg.bov == cfg.bov
    assert net.cfg.n_embed == cfg.n_embed and net.cfg.vocab_size == 60
    sd = net.state_dict()
    for k, v in ckpt["model"].items():
        if v is not None:
            assert torch.equal(sd[k[len("model."):]], v)


def test_fused_qkv_is_split():
    sd = {"layers.0.attention.wqkv.weight": torch.arange(float((4 + 2 * 2) * 12 * 3)).view(-1, 3)}
    out = cosmos.split_fused_qkv(dict(sd), TINY)
    assert out["layers.0.attention.wq.weight"].shape[0] == 48 and out["layers.0.attention.wk.weight"].shape[0] == 24


# ----------------------------------------------------------------------------- tokenizer

class TinyEncoder(nn.Module):
    """Cosmos-shaped: [B, 3, 1 + 8k, 16h, 16w] -> (indices [B, 1 + k, h, w], codes [B, C, ...], codes)."""

    def __init__(self, levels: list[int]):
        super().__init__()
        self.proj = nn.Conv3d(3, len(levels), 1)
        self.register_buffer("levels", torch.tensor(levels, dtype=torch.float32))
        basis = [1]
        for lv in levels[:-1]:
            basis.append(basis[-1] * lv)
        self.register_buffer("basis", torch.tensor(basis, dtype=torch.long))

    def forward(self, x: torch.Tensor):
        b, c, t, h, w = x.shape
        rest = x[:, :, 1:].reshape(b, c, (t - 1) // 8, 8, h, w).mean(3)
        z = torch.cat([x[:, :, :1], rest], 2)                 # 16 x 16 mean pooling (any dtype)
        z = z.reshape(b, c, z.shape[2], h // 16, 16, w // 16, 16).mean((4, 6))
        z = torch.tanh(self.proj(z))
        lv = self.levels.view(1, -1, 1, 1, 1)
        half = torch.floor(lv / 2)
        digits = torch.clamp(torch.round((z + 1) / 2 * (lv - 1)), torch.zeros_like(lv), lv - 1)
        codes = (digits - half) / half
        idx = (digits.long() * self.basis.view(1, -1, 1, 1, 1)).sum(1)
        return idx, codes, codes


class TinyDecoder(nn.Module):
    def __init__(self, levels: list[int]):
        super().__init__()
        self.proj = nn.Conv3d(len(levels), 3, 1)
        self.register_buffer("levels", torch.tensor(levels, dtype=torch.long))
        basis = [1]
        for lv in levels[:-1]:
            basis.append(basis[-1] * lv)
        self.register_buffer("basis", torch.tensor(basis, dtype=torch.long))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        digits = (idx[:, None] // self.basis.view(1, -1, 1, 1, 1)) % self.levels.view(1, -1, 1, 1, 1)
        half = torch.div(self.levels, 2, rounding_mode="floor").view(1, -1, 1, 1, 1)
        codes = ((digits - half).float() / half.float()).to(self.proj.weight.dtype)
        y = torch.tanh(self.proj(codes))
        first = y[:, :, :1]
        rest = y[:, :, 1:].repeat_interleave(8, dim=2)
        y = torch.cat([first, rest], 2)
        return y.repeat_interleave(16, dim=3).repeat_interleave(16, dim=4)


def save_tokenizer(folder, levels=LEVELS) -> str:
    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    torch.jit.script(TinyEncoder(levels)).save(os.path.join(folder, "encoder.jit"))
    torch.jit.script(TinyDecoder(levels)).save(os.path.join(folder, "decoder.jit"))
    return str(folder)


def test_fsq_codes_to_indices_matches_the_published_basis():
    assert dv.fsq_basis().tolist() == [1, 8, 64, 512, 2560, 12800]
    codes = torch.tensor([[-1.0, -1.0, -1.0, -1.0, -1.0, -1.0], [0.75, 0.75, 0.75, 1.0, 1.0, 1.0]])
    assert dv.codes_to_indices(codes).tolist() == [0, 63999]


def test_torchscript_tokenizer_round_trips_shapes(tmp_path):
    tok = dv.DVTokenizer.load(save_tokenizer(tmp_path / "tok"), levels=LEVELS)
    clip = torch.rand(2, 3, 33, 64, 80) * 2 - 1
    ids = tok.encode(clip)
    assert ids.shape == (2, 5, 4, 5) and ids.dtype == torch.long
    assert int(ids.min()) >= 0 and int(ids.max()) < 60
    assert torch.equal(ids, tok.encoder(clip)[0])          # codes_to_indices agrees with the encoder
    out = tok.decode(ids)
    assert out.shape == (2, 3, 33, 64, 80)
    frames = dv.clip_to_frames(out)
    assert len(frames) == 2 and len(frames[0]) == 33 and frames[0][0].size == (80, 64)


def write_clip(path, frames=12, h=96, w=128):
    import imageio.v3 as iio
    g = torch.Generator().manual_seed(6)
    video = (torch.rand(frames, h, w, 3, generator=g) * 255).to(torch.uint8).numpy()
    iio.imwrite(path, video, fps=8)
    return str(path)


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A folder laid out as NVIDIA's: model.pt beside Cosmos-1.0-Tokenizer-DV8x16x16/."""
    root = tmp_path_factory.mktemp("ckpts")
    model_dir = root / "Cosmos-1.0-Autoregressive-Tiny"
    model_dir.mkdir()
    torch.save(synthetic_checkpoint(TINY), model_dir / "model.pt")
    save_tokenizer(root / cosmos.TOKENIZER_FOLDER)
    clip = write_clip(root / "clip.mp4")
    return str(model_dir), clip


def test_video_prompt_to_frames_end_to_end(tiny_folder):
    folder, clip = tiny_folder
    assert cosmos.claims_folder(folder)
    model = cosmos.load_cosmos(folder, device="cpu", config=TINY)
    assert model.grid == (3, 4, 5) and model.vocab_size == 60
    assert model.default_settings == {"top_p": 0.8, "temperature": 1.0, "cfg_scale": 1.0,
                                      "window": 128, "init": "repeat-frame"}
    s = model.start([clip, clip], cfg_scale=1.0)
    assert s.first_logits.shape == (2, 60)
    assert torch.equal(s.prefix_tokens[0], s.prefix_tokens[1])
    assert s.step(torch.zeros(2, 4, dtype=torch.long), torch.tensor([0, 0])).shape == (2, 4, 60)
    with pytest.raises(ValueError, match="prefix"):                  # which frames it continues: the row's
        model.decode(torch.randint(0, 60, (2, 60)))
    frames = model.decode(torch.randint(0, 60, (2, 60)), prefix=s.prefix_tokens)
    assert len(frames) == 2 and len(frames[0]) == 33 and frames[0][0].size == (80, 64)
    with pytest.raises(ValueError, match="cfg_scale"):
        model.start([clip], cfg_scale=3.0)
    with pytest.raises(ValueError, match="prompts"):
        model.start([clip + "|a text"])
    with pytest.raises(ValueError, match="prompts"):
        model.start(["/no/such/clip.mp4"])


def test_missing_checkpoint_or_tokenizer_is_reported(tmp_path, empty_hub_cache):
    with pytest.raises(FileNotFoundError, match="checkpoint not found"):
        cosmos.load_cosmos(str(tmp_path))
    torch.save(synthetic_checkpoint(TINY), tmp_path / "model.pt")
    with pytest.raises(FileNotFoundError, match="Cosmos-1.0-Tokenizer-DV8x16x16.*HF_HUB_OFFLINE=1"):
        cosmos.load_cosmos(str(tmp_path), config=TINY)           # fetched from the Hub when missing: offline here
    with pytest.raises(FileNotFoundError, match="tokenizer_path"):
        cosmos.load_cosmos(str(tmp_path), config=TINY, tokenizer_path=str(tmp_path / "none"))
    assert cosmos.missing_files("cosmos-1-ar-4b") == [cosmos.HUB_FILES["cosmos-1-ar-4b"], cosmos.TOKENIZER_FILES]
    assert cosmos.missing_files("cosmos-1-ar-5b-video2world")[-1] is cosmos.T5_FILES


@pytest.mark.parametrize("dtype,want", [("bf16", torch.bfloat16), ("bfloat16", torch.bfloat16),
                                         (torch.bfloat16, torch.bfloat16), ("auto", torch.float32),
                                         (None, torch.float32), ("float32", torch.float32)])
def test_the_loader_parses_device_and_dtype_as_every_loader_does(tiny_folder, dtype, want):
    """`checkpoints.pick_device_dtype`: names, torch dtypes and "auto" (float32 without a GPU)."""
    model = cosmos.load_cosmos(tiny_folder[0], device="cpu", dtype=dtype, config=TINY)
    assert model.dtype == want and next(model.net.parameters()).dtype == want
    assert model.device == torch.device("cpu")


def test_the_loader_refuses_a_bad_dtype_or_device_naming_it(tiny_folder):
    with pytest.raises(ValueError, match="dtype"):
        cosmos.load_cosmos(tiny_folder[0], device="cpu", dtype="int8", config=TINY)
    with pytest.raises(ValueError, match="dtype"):
        cosmos.load_cosmos(tiny_folder[0], device="cpu", t5_dtype="half-ish", config=TINY)
    with pytest.raises(ValueError, match="device"):
        cosmos.load_cosmos(tiny_folder[0], device="nowhere", config=TINY)


def test_generate_scd_gumbel_on_the_tiny_model(tiny_folder):
    import scd_core
    folder, clip = tiny_folder
    model = cosmos.load_cosmos(folder, device="cpu", config=TINY)
    run = scd_core.generate(model, [clip], method="scd-gumbel", window=8, seed=0, init="repeat-frame",
                            temperature=1.0, top_p=0.8, cfg_scale=1.0)
    assert run.tokens.shape == (1, 60)
    assert 1 <= run.nfe <= 61
    assert len(run.images) == 1 and len(run.images[0]) == 33


def test_video2world_absolute_position_embedding_layout():
    cfg = cosmos.full_size_config("cosmos-1-ar-5b-video2world")
    emb = cosmos.abs_pos_embedding(torch.tensor([0, 1, 1 + 2560 + 64 + 2]), cfg)   # <bov>, (0,0,0), (1,1,2)
    assert emb.shape == (3, 4096)
    assert bool((emb[0] == 0).all())                                           # <bov> row is zero
    dim_t, dim_h = 4096 - 2 * 1364, 1364
    torch.testing.assert_close(emb[2, :dim_t], cosmos.sincos_1d(dim_t, torch.tensor(1)))
    torch.testing.assert_close(emb[2, dim_t:dim_t + dim_h], cosmos.sincos_1d(dim_h, torch.tensor(1)))
    torch.testing.assert_close(emb[2, dim_t + dim_h:], cosmos.sincos_1d(dim_h, torch.tensor(2)))
    # sin-cos halves: position 0 gives sin 0 and cos 1
    assert bool((emb[1, : dim_t // 2] == 0).all()) and bool((emb[1, dim_t // 2: dim_t] == 1).all())


def test_grouped_query_attention_matches_repeated_heads():
    att = cosmos.random_model(TINY, std=0.3).layers[0].attention
    g = torch.Generator().manual_seed(8)
    q = torch.randn(2, 3, 4, 12, generator=g)
    k, v = torch.randn(2, 2, 7, 12, generator=g), torch.randn(2, 2, 7, 12, generator=g)
    mask = torch.rand(2, 1, 3, 7, generator=g) > 0.3
    mask[..., 0] = True
    ref = F.scaled_dot_product_attention(q.transpose(1, 2), k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                         attn_mask=mask, scale=12 ** -0.5)
    expected = att.wo(ref.transpose(1, 2).reshape(2, 3, 48))
    torch.testing.assert_close(att.attend(q, k, v, mask), expected, atol=1e-5, rtol=1e-5)


class FakeT5Tokenizer:
    """Stands in for T5TokenizerFast: one id per word, padded to max_length."""

    def __call__(self, texts, return_tensors, truncation, padding, max_length):
        from types import SimpleNamespace
        ids = torch.zeros(len(texts), max_length, dtype=torch.long)
        mask = torch.zeros(len(texts), max_length, dtype=torch.long)
        for i, text in enumerate(texts):
            words = [1 + sum(map(ord, w)) % 30 for w in text.split()][:max_length - 1] + [1]
            ids[i, :len(words)], mask[i, :len(words)] = torch.tensor(words), 1
        return SimpleNamespace(input_ids=ids, attention_mask=mask)


def test_video2world_prompt_with_text(tmp_path, tiny_folder):
    from transformers import T5Config, T5EncoderModel
    _, clip = tiny_folder
    t5 = T5EncoderModel(T5Config(vocab_size=32, d_model=16, d_kv=4, num_heads=2, num_layers=1, d_ff=32)).eval()
    tok = dv.DVTokenizer.load(save_tokenizer(tmp_path / "tok"), levels=LEVELS)
    model = cosmos.CosmosVideoModel(cosmos.random_model(TINY_V2W, std=0.2), tokenizer=tok,
                                    text_encoder=(FakeT5Tokenizer(), t5))
    assert model.default_settings["top_p"] == 0.7
    ctx = model.encode_text(["a red car", ""])
    assert ctx.shape == (2, cosmos.T5_MAX_LENGTH, 16)
    assert bool((ctx[0, 4:] == 0).all()) and bool((ctx[0, :4] != 0).any())   # zero past the length
    a = model.start([clip + "|a red car"]).first_logits
    b = model.start([clip + "|a blue boat at night"]).first_logits
    assert a.shape == (1, 60) and not torch.allclose(a, b)                   # the text conditions


def published_rope_table(cfg) -> torch.Tensor:
    """The angle table as the published RotaryPositionEmbedding builds it: per-axis outer
    products, broadcast over the (T, H, W) grid, cat([t, h, w] * 2), flattened in raster order."""
    T, H, W = cfg.latent_shape
    dim_h = cfg.hd // 6 * 2
    dim_t = cfg.hd - 2 * dim_h
    f_s = 1.0 / cfg.rope_theta ** (torch.arange(0, dim_h, 2)[: dim_h // 2].float() / dim_h)
    f_t = 1.0 / cfg.rope_theta ** (torch.arange(0, dim_t, 2)[: dim_t // 2].float() / dim_t)
    seq = torch.arange(max(T, H, W)).float()
    et, eh, ew = torch.outer(seq[:T], f_t), torch.outer(seq[:H], f_s), torch.outer(seq[:W], f_s)
    parts = [et[:, None, None].expand(T, H, W, -1), eh[None, :, None].expand(T, H, W, -1),
             ew[None, None, :].expand(T, H, W, -1)]
    emb = torch.cat(parts * 2, dim=-1).reshape(T * H * W, -1)
    if cfg.bov:
        emb = torch.cat([torch.zeros(1, emb.shape[1]), emb])
    return emb


def naive_logits(net, tokens: torch.Tensor) -> torch.Tensor:
    """Cache-free causal forward of the base model over a whole sequence [1, S]."""
    cfg = net.cfg
    emb = published_rope_table(cfg)[: tokens.shape[1]]
    cos, sin = emb.cos()[:, None], emb.sin()[:, None]
    rot = lambda x: x * cos + torch.cat([-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]], -1) * sin
    h = net.tok_embeddings(tokens)[0]
    S = h.shape[0]
    causal = torch.ones(S, S).tril().bool()
    for layer in net.layers:
        a = layer.attention
        x = layer.attention_norm(h)
        q = a.q_norm(a.wq(x).view(S, cfg.n_heads, cfg.hd))
        k = a.k_norm(a.wk(x).view(S, cfg.n_kv_heads, cfg.hd))
        v = a.wv(x).view(S, cfg.n_kv_heads, cfg.hd)
        q, k = rot(q), rot(k)
        rep = cfg.n_heads // cfg.n_kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        att = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(cfg.hd)
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        h = h + a.wo(torch.einsum("hqk,khd->qhd", att, v).reshape(S, -1))
        h = h + layer.feed_forward(layer.ffn_norm(h))
    return net.output(net.norm(h))[None]


def test_session_matches_a_cache_free_reference():
    model = tiny_model()
    g = torch.Generator().manual_seed(9)
    prefix = torch.randint(0, 60, (1, model.cfg.prefix_len), generator=g)
    gen = torch.randint(0, 60, (1, 12), generator=g)
    ref = naive_logits(model.net, torch.cat([prefix, gen], 1))
    s = model.start_tokens(prefix)
    torch.testing.assert_close(s.first_logits, ref[:, prefix.shape[1] - 1], atol=1e-4, rtol=1e-4)
    s.step(gen[:, :5], torch.tensor([0]))
    out = s.step(gen[:, 3:], torch.tensor([3]))                       # rolled back and re-fed
    torch.testing.assert_close(out, ref[:, prefix.shape[1] + 3:], atol=1e-4, rtol=1e-4)


def test_full_size_configs_have_the_published_sizes():
    with torch.device("meta"):
        n4 = sum(p.numel() for p in cosmos.CosmosTransformer(cosmos.full_size_config("cosmos-1-ar-4b")).parameters())
        n5 = sum(p.numel() for p in cosmos.CosmosTransformer(
            cosmos.full_size_config("cosmos-1-ar-5b-video2world")).parameters())
    assert 3.9e9 < n4 < 4.1e9 and 4.5e9 < n5 < 4.7e9
    cfg = cosmos.full_size_config("cosmos-1-ar-4b")
    assert (cfg.grid, cfg.prefix_len, cfg.seq_len, cfg.hd) == ((3, 40, 64), 5120, 12800, 128)
    with pytest.raises(ValueError, match="name"):
        cosmos.full_size_config("cosmos-12b")


def test_timing_recipe_runs_on_a_tiny_config():
    ms = cosmos.time_forward(TINY_V2W, windows=(1, 4), device="cpu", dtype=torch.float32, repeats=1)
    assert set(ms) == {1, 4} and all(v > 0 for v in ms.values())


def test_session_exposes_the_conditioning_tokens():
    model = tiny_model()
    s = start(model, batch=2)
    assert s.prefix_tokens.shape == (2, model.cfg.prefix_len)
    assert not hasattr(model, "last_prefix")                          # a session's, never the model's


def test_registry_name_resolves_in_the_checkpoints_folder(tmp_path, monkeypatch, empty_hub_cache):
    from scd_core.models import model_status
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)
    folder = tmp_path / "Cosmos-1.0-Autoregressive-4B"
    folder.mkdir()
    torch.save(synthetic_checkpoint(TINY), folder / "model.pt")
    monkeypatch.setenv(cosmos.CHECKPOINTS_ENV, str(tmp_path))
    assert cosmos.find_checkpoint("cosmos-1-ar-4b") == str(folder / "model.pt")
    assert cosmos.missing_files("cosmos-1-ar-4b") == [cosmos.TOKENIZER_FILES]
    save_tokenizer(tmp_path / cosmos.TOKENIZER_FOLDER)
    assert cosmos.missing_files("cosmos-1-ar-4b") == []
    status = model_status("cosmos-1-ar-4b")
    assert status.state == ("cached" if torch.cuda.is_available() else "needs GPU")
    assert torch.cuda.is_available() or "its files are cached" in status.reason
    import scd_core
    model = scd_core.load_model("cosmos-1-ar-4b", device="cpu", config=TINY)
    assert model.grid == (3, 4, 5)
    by_folder = scd_core.load_model(str(folder), device="cpu", config=TINY)   # a folder is claimed
    assert isinstance(by_folder, cosmos.CosmosVideoModel)


def test_clip_preparation_follows_the_published_recipe(tmp_path):
    path = write_clip(tmp_path / "c.mp4", frames=12, h=96, w=128)
    frames = dv.read_frames(path, last=9)
    assert frames.shape == (9, 96, 128, 3) and frames.dtype == torch.uint8
    assert torch.equal(frames, dv.read_frames(path)[-9:])
    clip = dv.prepare_clip(frames, 9, (64, 80))
    assert clip.shape == (3, 33, 64, 80)
    assert float(clip.min()) >= -1.0 and float(clip.max()) <= 1.0
    assert torch.equal(clip[:, 8], clip[:, 32])                  # the 9th frame repeated to 33
    short = write_clip(tmp_path / "short.mp4", frames=4)
    with pytest.raises(ValueError, match="fewer"):
        dv.prepare_clip(dv.read_frames(short, last=9), 9, (64, 80))
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video")
    with pytest.raises(ValueError, match="prompts"):
        dv.read_frames(str(bad), last=9)


def write_levels(path, levels: list[int], h=64, w=80) -> str:
    """A clip (GIF: exact pixel values) whose frame i is the uniform grey `levels[i]`."""
    import imageio.v3 as iio
    import numpy as np
    video = np.stack([np.full((h, w, 3), v, dtype=np.uint8) for v in levels])
    iio.imwrite(path, video, duration=125, loop=0)
    return str(path)


def write_image(path, level: int, h=64, w=80) -> str:
    from PIL import Image
    Image.new("RGB", (w, h), (level,) * 3).save(path)
    return str(path)


@pytest.fixture(scope="module")
def nine_frame_model(tiny_folder):
    return cosmos.load_cosmos(tiny_folder[0], device="cpu", config=TINY)


def test_a_clip_is_continued_from_its_last_nine_frames(tmp_path, nine_frame_model):
    """As NVIDIA's load_videos_from_list (video[-num_input_frames:]): a clip whose first frames
    differ from its last 9 conditions exactly as those last 9 frames alone."""
    levels = [0, 40, 80] + [120 + 15 * i for i in range(9)]        # 12 frames, the first 3 differ
    clip = write_levels(tmp_path / "clip.gif", levels)
    frames = dv.read_frames(clip, last=9)
    assert [int(f.float().mean()) for f in frames] == levels[3:]
    prepared = dv.prepare_clip(frames, 9, TINY.pixel_size)
    assert round(float(prepared[0, 0].mean()) * 127.5 + 127.5) == levels[3]      # first given frame
    assert round(float(prepared[0, 32].mean()) * 127.5 + 127.5) == levels[-1]    # the last, repeated
    model = nine_frame_model
    last_nine = write_levels(tmp_path / "last9.gif", levels[3:])
    first_nine = write_levels(tmp_path / "first9.gif", levels[:9])
    got = model.encode_videos([clip])
    assert torch.equal(got, model.encode_videos([last_nine]))
    assert not torch.equal(got, model.encode_videos([first_nine]))


def test_an_image_conditions_on_one_latent_frame_and_four_are_generated(tmp_path, nine_frame_model):
    """As NVIDIA's pipeline: an image is a static 33-frame clip whose first latent frame is
    the whole condition (num_input_frames = 1); 4 latent frames are generated."""
    model = nine_frame_model
    white = write_image(tmp_path / "white.png", 255)
    with pytest.raises(ValueError, match="with_input_frames"):
        model.start([white])
    one = model.with_input_frames(1)
    assert one.net is model.net and one.num_input_frames == 1 and model.with_input_frames(9) is model
    assert one.grid == (4, 4, 5) and one.cfg.prefix_len == 20 and model.grid == (3, 4, 5)
    s = one.start([white])
    assert s.first_logits.shape == (1, 60) and s.prefix_tokens.shape == (1, 20)
    static = dv.prepare_clip(dv.read_frames(white), 1, TINY.pixel_size)
    assert torch.equal(static[:, 0], static[:, 32])
    assert torch.equal(s.prefix_tokens, one.tokenizer.encode(static[None]).flatten(1)[:, :20])
    # A clip on the 1-frame model conditions on its last frame only.
    ramp = write_levels(tmp_path / "ramp.gif", [0, 60, 255])
    assert torch.equal(one.encode_videos([ramp]), one.encode_videos([white]))
    assert not torch.equal(one.encode_videos([ramp]), one.encode_videos([write_image(tmp_path / "k.png", 0)]))
    frames = one.decode(torch.randint(0, 60, (1, 80)), prefix=s.prefix_tokens)
    assert len(frames[0]) == 33
    with pytest.raises(ValueError, match="num_input_frames"):
        cosmos.CosmosVideoModel(model.net, num_input_frames=5)


# -- rows join and leave a running session (serving) -------------------------------------

@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Five 9-frame clips of random colour blocks, one per 16x16 tokenizer patch (varied prefixes)."""
    import imageio.v3 as iio
    folder = tmp_path_factory.mktemp("clips")
    paths = []
    for i in range(5):
        g = torch.Generator().manual_seed(i)
        blocks = torch.rand(9, 4, 5, 3, generator=g) * 255
        video = blocks.repeat_interleave(16, 1).repeat_interleave(16, 2).to(torch.uint8).numpy()
        iio.imwrite(folder / f"blocks{i}.gif", video, duration=125, loop=0)
        paths.append(str(folder / f"blocks{i}.gif"))
    return paths


@pytest.fixture(scope="module")
def video_model(nine_frame_model):
    """The tiny network with larger random weights (varied greedy runs) and the tiny tokenizer."""
    return tiny_model(tokenizer=nine_frame_model.tokenizer)


def test_added_rows_equal_their_prompts_started_alone(video_model, clips):
    model = video_model
    rows_util.check_added_rows(model, clips[:2], clips[2:4], 1.0)
    s = model.start(clips[:2])
    s.add_rows(clips[2:3])
    assert torch.equal(s.prefix_tokens, model.encode_videos(clips[:3]))       # each row decodes after its own
    assert torch.equal(s.row_decoder(2).prefix_tokens, model.encode_videos(clips[2:3]))


def test_kept_rows_equal_an_untouched_session(video_model, clips):
    model = video_model
    s = rows_util.check_kept_rows(model, clips[:3], [2, 0], 1.0)
    assert torch.equal(s.prefix_tokens, model.encode_videos([clips[2], clips[0]]))
    assert torch.equal(s.row_decoder(0).prefix_tokens, s.prefix_tokens[:1])
    with pytest.raises(ValueError, match="rows"):
        s.keep_rows(torch.tensor([2]))
    with pytest.raises(ValueError, match="prompts"):
        s.add_rows(["/no/such/clip.mp4"])


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_video2world_rows_join_with_their_text_states(device):
    model = cosmos.CosmosVideoModel(cosmos.random_model(TINY_V2W, device=device, std=0.2), device=device)
    g = torch.Generator().manual_seed(9)
    prefix = torch.randint(0, 60, (3, model.cfg.prefix_len), generator=g)
    context = torch.randn(3, 7, model.cfg.context_dim, generator=g)
    toks = torch.randint(0, 60, (3, 6), generator=g)
    s = model.start_tokens(prefix[:2], context[:2])
    s.step(toks[:2, :4], torch.tensor([0, 0]))
    first = s.add_token_rows(prefix[2:], context[2:])
    out = s.step(toks, torch.tensor([2, 4, 0]))
    alone = model.start_tokens(prefix[2:], context[2:])
    rows_util.assert_close_logits(first, alone.first_logits, "first logits of the added row")
    rows_util.assert_close_logits(out[2:], alone.step(toks[2:], torch.tensor([0])), "the added row")
    s.keep_rows(torch.tensor([2, 1]))
    ref = model.start_tokens(prefix[1:2], context[1:2])
    ref.step(toks[1:2, :4], torch.tensor([0]))
    ref.step(toks[1:2], torch.tensor([4]))
    more = torch.randint(0, 60, (2, 3), generator=g)
    out = s.step(more, torch.tensor([6, 10]))
    rows_util.assert_close_logits(out[1:], ref.step(more[1:], torch.tensor([10])), "a kept row")
    with pytest.raises(ValueError, match="context"):
        s.add_token_rows(prefix[:1], torch.randn(1, 5, model.cfg.context_dim))          # other text length
    with pytest.raises(ValueError, match="prefix"):
        s.add_token_rows(prefix[:1, :3], context[:1])


def test_scheduler_rows_join_and_leave_with_greedy_tokens_of_ar_alone(video_model, clips):
    joins = {0: clips[:2], 2: clips[2:3], 5: clips[3:5]}
    rows_util.check_scheduler_greedy(video_model, joins, cfg_scale=1.0, window=8)


def test_concurrent_sessions_decode_what_each_would_alone(video_model, clips):
    """Two sessions of one model with different prompt clips, stepped in turn: each row's
    tokens and decoded frames are those of its session run alone (no shared prefix)."""
    model = video_model

    def pick(logits):           # greedy next token [1, 1] from [1, V] or [1, W, V]
        return logits.reshape(1, -1, logits.shape[-1])[:, -1].argmax(-1, keepdim=True)

    def greedy(session, steps=3):
        tokens, logits = [], session.first_logits
        for i in range(steps):
            tokens.append(pick(logits))
            logits = session.step(tokens[-1], torch.tensor([i]))
        return torch.cat(tokens, 1)

    def finished(tokens):       # a full grid: the greedy prefix, then zeros
        n = math.prod(model.grid)
        return torch.cat([tokens, torch.zeros(tokens.shape[0], n - tokens.shape[1], dtype=torch.long)], 1)

    alone = {}
    for name, clip in (("a", clips[0]), ("b", clips[3])):
        s = model.start([clip])
        t = greedy(s)
        alone[name] = (t, s.row_decoder(0)(finished(t)))
    a, b = model.start([clips[0]]), model.start([clips[3]])     # b's start comes after a's
    tokens = {"a": [], "b": []}
    logits = {"a": a.first_logits, "b": b.first_logits}
    for i in range(3):                                          # interleaved passes
        for name, s in (("a", a), ("b", b)):
            tokens[name].append(pick(logits[name]))
            logits[name] = s.step(tokens[name][-1], torch.tensor([i]))
    for name, s in (("a", a), ("b", b)):
        t = torch.cat(tokens[name], 1)
        assert torch.equal(t, alone[name][0])
        frames = s.row_decoder(0)(finished(t))
        assert len(frames[0]) == len(alone[name][1][0])
        assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(frames[0], alone[name][1][0]))
    assert not torch.equal(a.prefix_tokens, b.prefix_tokens)    # the clips differ, so this could fail


def test_a_runs_images_follow_its_own_clip_whatever_ran_since(video_model, clips):
    """`generate`'s pictures decode each row after its own conditioning frames: a run decoded
    after another run on another clip shows its own clip's frames, not the latest one's."""
    import scd_core
    model = video_model
    kw = dict(method="sjd", window=8, seed=0, init="repeat-frame", top_p=0.8)
    first = scd_core.generate(model, [clips[0]], **kw)
    scd_core.generate(model, [clips[3]], **kw)                     # the model's last start: another clip
    got = first.images[0]
    own = model.start([clips[0]]).row_decoder(0)(first.tokens)
    assert not torch.equal(model.conditioning([clips[0]])[0], model.conditioning([clips[3]])[0])
    assert all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(got, own[0]))


def test_tree_of_drafts_equals_its_paths_fed_as_chains(video_model, clips, tmp_path, tiny_folder):
    """The tree contract (scd_core.testing): 3-D RoPE at each node's depth; Video2World also
    with its absolute position embeddings and text cross-attention."""
    testing.check_tree_session(video_model, clips[:2], 1.0)
    from transformers import T5Config, T5EncoderModel
    t5 = T5EncoderModel(T5Config(vocab_size=32, d_model=16, d_kv=4, num_heads=2, num_layers=1, d_ff=32)).eval()
    v2w = cosmos.CosmosVideoModel(cosmos.random_model(TINY_V2W, std=0.2), tokenizer=video_model.tokenizer,
                                  text_encoder=(FakeT5Tokenizer(), t5))
    testing.check_tree_session(v2w, [clips[0] + "|a red car", clips[1] + "|a blue boat at night"], 1.0)
