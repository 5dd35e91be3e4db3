"""Lumina-mGPT adapter on a tiny random Chameleon: cache/layout/CFG exactness, conversions, loader."""
from __future__ import annotations

import json
import os

import pytest
import torch

import transformers
from transformers import ChameleonConfig, ChameleonForConditionalGeneration  # noqa: E402

from scd_core.models import lumina  # noqa: E402
from scd_core.models.lumina import LuminaLayout, LuminaTokenModel  # noqa: E402
from fakehub import empty_hub_cache  # noqa: E402,F401  (fixture: offline, empty Hugging Face cache)
import rows_util  # noqa: E402
from scd_core import testing  # noqa: E402
from scd_core.models import static  # noqa: E402

N_CODES = 16
LAYOUT = LuminaLayout(bos=0, sep=93, image_start=92, eoi=91, eol=90, grid_token_base=60, pad=1)
GRID = (3, 4)   # latent rows x cols: row ends fall inside windows


def _code_name(i: int) -> str:
    return "IMGIMG" + "".join(chr(ord("A") + int(d)) for d in str(i)) + "Z"


def tiny_config() -> ChameleonConfig:
    vocab_map = {f"tok{i}": i for i in range(96)}
    for code in range(N_CODES):
        vocab_map.pop(f"tok{4 + code}")
        vocab_map[_code_name(code)] = 4 + code
    vq = dict(embed_dim=4, num_embeddings=N_CODES, latent_channels=4, resolution=16, base_channels=32,
              channel_multiplier=[1, 1], num_res_blocks=1, attn_resolutions=[])
    return ChameleonConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                           vocabulary_map=vocab_map, vq_config=vq, attn_implementation="sdpa")


def encode(text: str) -> list[int]:
    """A toy tokenizer: one id (20..59) per character."""
    return [20 + (ord(c) % 40) for c in text]


@pytest.fixture(scope="module")
def tm() -> LuminaTokenModel:
    torch.manual_seed(0)
    model = ChameleonForConditionalGeneration(tiny_config()).eval()
    # Non-trivial q/k norms so the conversion matters.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "_norm" in name:
                p.normal_(1.0, 0.3)
    return LuminaTokenModel(model, encode, GRID, layout=LAYOUT, prompt_template="{prompt}")


def seq_ids(tm: LuminaTokenModel, codes: list[int]) -> list[int]:
    """Lumina's layout of generated codes: an end-of-row token after every full row."""
    out = []
    for g, c in enumerate(codes):
        out.append(int(tm.code2bpe[c]))
        if g % GRID[1] == GRID[1] - 1:
            out.append(LAYOUT.eol)
    return out


def reference_logits(tm, prompt: str, codes: list[int], cfg: float) -> torch.Tensor:
    """Plain HF forward without any cache: logits predicting codes 0..len(codes)."""
    def run(prefix: list[int]) -> torch.Tensor:
        ids = prefix + seq_ids(tm, codes)
        with torch.no_grad():
            h = tm.model.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        picks = [len(prefix) - 1]
        k = len(prefix) - 1
        for g in range(len(codes)):
            k += 2 if g % GRID[1] == GRID[1] - 1 else 1
            picks.append(k)
        return tm.image_logits(h[picks])
    c = run(tm.cond_ids(prompt))
    if cfg == 1.0:
        return c
    u = run(tm.uncond_ids())
    return u + cfg * (c - u)


CODES = [3, 7, 1, 15, 0, 9, 9, 2, 11, 5, 6, 14]


@pytest.mark.parametrize("cfg", [1.0, 3.0])
def test_window_equals_reference_and_single_steps(tm, cfg):
    ref = reference_logits(tm, "a red apple", CODES, cfg)
    s = tm.start(["a red apple"], cfg)
    assert s.first_logits.shape == (1, N_CODES)
    torch.testing.assert_close(s.first_logits[0], ref[0], atol=1e-4, rtol=1e-4)
    win = s.step(torch.tensor([CODES]), torch.tensor([0]))
    assert win.shape == (1, len(CODES), N_CODES)
    torch.testing.assert_close(win[0], ref[1:], atol=1e-4, rtol=1e-4)
    s1 = tm.start(["a red apple"], cfg)
    singles = [s1.step(torch.tensor([[c]]), torch.tensor([g]))[0, 0] for g, c in enumerate(CODES)]
    torch.testing.assert_close(torch.stack(singles), win[0], atol=1e-4, rtol=1e-4)


def test_step_with_smaller_start_forgets(tm):
    s = tm.start(["cat"], 3.0)
    s.step(torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]]), torch.tensor([0]))
    new = [12, 13, 14, 15, 0]
    got = s.step(torch.tensor([new]), torch.tensor([3]))
    ref = reference_logits(tm, "cat", [1, 2, 3] + new, 3.0)
    torch.testing.assert_close(got[0], ref[4:], atol=1e-4, rtol=1e-4)


def test_rows_at_different_starts_equal_single_rows(tm):
    prompts = ["a dog", "the quick brown fox"]   # different prompt lengths: left padding
    hist = [[4, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 0, 1]]
    s = tm.start(prompts, 2.0)
    s.step(torch.tensor(hist), torch.tensor([0, 0]))
    window = torch.tensor([[2, 3, 4], [5, 6, 7]])
    starts = [2, 5]                              # row 0 forgets more than row 1
    got = s.step(window, torch.tensor(starts))
    for b in range(2):
        single = tm.start([prompts[b]], 2.0)
        single.step(torch.tensor([hist[b]]), torch.tensor([0]))
        one = single.step(window[b:b + 1], torch.tensor([starts[b]]))
        torch.testing.assert_close(got[b], one[0], atol=1e-4, rtol=1e-4)
        ref = reference_logits(tm, prompts[b], hist[b][:starts[b]] + window[b].tolist(), 2.0)
        torch.testing.assert_close(got[b], ref[starts[b] + 1:], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(s.first_logits[1], tm.start([prompts[1]], 2.0).first_logits[0],
                               atol=1e-4, rtol=1e-4)


def test_bad_input_is_a_value_error(tm):
    s = tm.start(["x"], 3.0)
    with pytest.raises(ValueError, match="tokens"):
        s.step(torch.tensor([[N_CODES]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="start"):
        s.step(torch.tensor([[1, 2]]), torch.tensor([11]))
    with pytest.raises(ValueError, match="prompts"):
        tm.start("not a list", 3.0)
    with pytest.raises(ValueError, match="cfg_scale"):
        tm.start(["x"], float("nan"))


def test_contract_attributes(tm):
    from scd_core.protocols import Session, TokenModel
    assert isinstance(tm, TokenModel) and isinstance(tm.start(["x"], 1.0), Session)
    assert tm.vocab_size == N_CODES and tm.grid == GRID
    assert lumina.DEFAULT_SETTINGS == {"cfg_scale": 3.0, "top_k": 2000, "top_p": 1.0,
                                       "temperature": 1.0, "window": 64}
    assert tm.default_settings["window"] == 64


def test_real_layout_prompt_and_header(tm):
    """Lumina-mGPT 768 px: <bos> template <sep=8710> <racm3:break=8197> <h=8828> <w=8828>."""
    real = LuminaTokenModel(tm.model, lambda text: [ord(c) for c in text], (48, 48))
    assert real.grid == (48, 48) and real.image_size == 768
    assert real.header_ids() == [8197, 8828, 8828] == real.uncond_ids()
    ids = real.cond_ids("a cat")
    text = "Generate an image of 768x768 according to the following prompt:\na cat"
    assert ids == [0, *[ord(c) for c in text], 8710, 8197, 8828, 8828]


# ------------------------------------------------------------------ q/k-norm conversion

def lumina_style(sd: dict, mp: int = 1) -> dict:
    """Shrink q/k norms to Lumina's (mp, head_dim) storage (one gamma/beta per shard)."""
    out = dict(sd)
    for k, w in sd.items():
        if "q_norm" in k or "k_norm" in k:
            heads = w.shape[0]
            out[k] = w.reshape(mp, heads // mp, -1)[:, 0].clone()
    return out


@pytest.mark.parametrize("mp", [1, 2])
def test_qk_norm_conversion_loads_strictly(mp):
    cfg = tiny_config()
    src = ChameleonForConditionalGeneration(cfg)
    sd = lumina_style(src.state_dict(), mp)
    assert sd["model.layers.0.self_attn.q_norm.weight"].shape == (mp, 8)
    dst = ChameleonForConditionalGeneration(cfg)
    with pytest.raises(RuntimeError):
        dst.load_state_dict(sd, strict=True)
    conv = lumina.convert_qk_norm_state_dict(sd, cfg.num_attention_heads, cfg.num_key_value_heads)
    dst.load_state_dict(conv, strict=True)
    q = dst.model.layers[0].self_attn.q_norm.weight
    k = dst.model.layers[0].self_attn.k_norm.weight
    assert q.shape == (4, 8) and k.shape == (2, 8)
    torch.testing.assert_close(q[3], sd["model.layers.0.self_attn.q_norm.weight"][-1])
    with pytest.raises(ValueError, match="state_dict"):
        lumina.convert_qk_norm_state_dict({"a.self_attn.q_norm.weight": torch.ones(3, 8)}, 4, 2)


def _save_tiny_checkpoint(model, folder: str) -> None:
    from safetensors.torch import save_file
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    model.save_pretrained(folder)
    sd = lumina_style({k: v.contiguous() for k, v in model.state_dict().items()})
    sd.pop("lm_head.weight", None) if model.config.tie_word_embeddings else None
    for name in os.listdir(folder):
        if name.endswith(".safetensors"):
            os.remove(os.path.join(folder, name))
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        os.remove(index)
    save_file(sd, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    tok = Tokenizer(WordLevel({f"w{i}": i for i in range(96)}, unk_token="w1"))
    tok.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)


def test_loader_converts_a_lumina_folder(tmp_path, tm):
    folder = str(tmp_path / "Lumina-mGPT-tiny")
    _save_tiny_checkpoint(tm.model, folder)
    assert lumina.claims_folder(folder)
    loaded = lumina.load_lumina(folder, device="cpu", dtype=torch.float32, image_size=64, layout=LAYOUT)
    assert loaded.grid == (4, 4) and loaded.vqgan is None
    cfg = tm.model.config
    expected = lumina.convert_qk_norm_state_dict(lumina_style(tm.model.state_dict()),
                                                 cfg.num_attention_heads, cfg.num_key_value_heads)
    got = loaded.model.state_dict()
    assert set(got) == set(expected)
    for name, w in expected.items():
        if "vqmodel" not in name:
            torch.testing.assert_close(got[name], w, msg=name)
    assert loaded.encode("w3 w5 zz") == [3, 5, 1]
    with pytest.raises(RuntimeError, match="vqgan"):
        loaded.decode(torch.zeros(1, 16, dtype=torch.long))


def test_missing_weights_are_reported_clearly(tmp_path, empty_hub_cache, monkeypatch):
    with pytest.raises(FileNotFoundError, match="Alpha-VLLM/Lumina-mGPT-7B-768.*local_files_only=True"):
        lumina.load_lumina("lumina-mgpt-7b-768", device="cpu", local_files_only=True)
    with pytest.raises(FileNotFoundError, match="no folder"):
        lumina.load_lumina(str(tmp_path / "nope"), device="cpu")
    with pytest.raises(ValueError, match="model"):
        lumina.load_lumina("", device="cpu")
    assert not lumina.claims_folder(str(tmp_path))
    monkeypatch.delenv(lumina.VQGAN_ENV, raising=False)
    assert "chameleon-downloads" in lumina.manual_missing("lumina-mgpt-7b-512")
    (tmp_path / "vqgan.ckpt").write_bytes(b"")
    monkeypatch.setenv(lumina.VQGAN_ENV, str(tmp_path))
    assert lumina.manual_missing("lumina-mgpt-7b-512") is None


# ------------------------------------------------------------------ VQGAN conversion + decode

VQ_CFG = {"embed_dim": 8, "n_embed": N_CODES, "z_channels": 8, "resolution": 16, "in_channels": 3,
          "out_ch": 3, "ch": 32, "ch_mult": [1, 2], "num_res_blocks": 1, "attn_resolutions": [8]}


class TamingDecoder(torch.nn.Module):
    """The taming/Chameleon VQGAN decoder with its original key names (reference for the test),
    assembled from transformers' Chameleon VQ building blocks."""

    def __init__(self, cfg: dict) -> None:
        super().__init__()
        from transformers import ChameleonVQVAEConfig
        from transformers.models.chameleon.modeling_chameleon import (
            ChameleonVQVAEEncoderAttnBlock as Attn, ChameleonVQVAEEncoderResnetBlock as Res)
        nn = torch.nn
        vc = ChameleonVQVAEConfig(dropout=0.0)
        ch, mult, nres = cfg["ch"], cfg["ch_mult"], cfg["num_res_blocks"]
        block_in = ch * mult[-1]
        curr = cfg["resolution"] // 2 ** (len(mult) - 1)
        self.conv_in = nn.Conv2d(cfg["z_channels"], block_in, 3, padding=1)
        self.mid = nn.Module()
        self.mid.block_1, self.mid.attn_1, self.mid.block_2 = Res(vc, block_in, block_in), Attn(block_in), Res(vc, block_in, block_in)
        self.up = nn.ModuleList()
        for level in reversed(range(len(mult))):
            up = nn.Module()
            up.block, up.attn = nn.ModuleList(), nn.ModuleList()
            for _ in range(nres + 1):
                up.block.append(Res(vc, block_in, ch * mult[level]))
                block_in = ch * mult[level]
                if curr in cfg["attn_resolutions"]:
                    up.attn.append(Attn(block_in))
            if level != 0:
                up.upsample = nn.Module()
                up.upsample.conv = nn.Conv2d(block_in, block_in, 3, padding=1)
                curr *= 2
            self.up.insert(0, up)
        self.norm_out = nn.GroupNorm(32, block_in, eps=1e-6)
        self.conv_out = nn.Conv2d(block_in, cfg["out_ch"], 3, padding=1)

    def forward(self, z):
        h = self.mid.block_2(self.mid.attn_1(self.mid.block_1(self.conv_in(z))))
        for level in reversed(range(len(self.up))):
            for i, block in enumerate(self.up[level].block):
                h = block(h)
                if len(self.up[level].attn):
                    h = self.up[level].attn[i](h)
            if level != 0:
                h = self.up[level].upsample.conv(torch.nn.functional.interpolate(h, scale_factor=2.0, mode="nearest"))
        h = self.norm_out(h)
        return self.conv_out(h * torch.sigmoid(h))


def taming_vqgan(cfg: dict):
    """Encoder (transformers' ChameleonVQVAE, taming names) + reference decoder, random weights."""
    from transformers import ChameleonVQVAEConfig
    from transformers.models.chameleon.modeling_chameleon import ChameleonVQVAE
    torch.manual_seed(1)
    enc = ChameleonVQVAE(ChameleonVQVAEConfig(
        embed_dim=cfg["embed_dim"], num_embeddings=cfg["n_embed"], latent_channels=cfg["z_channels"],
        resolution=cfg["resolution"], base_channels=cfg["ch"], channel_multiplier=cfg["ch_mult"],
        num_res_blocks=cfg["num_res_blocks"], attn_resolutions=cfg["attn_resolutions"])).eval()
    dec = TamingDecoder(cfg).eval()
    with torch.no_grad():
        for p in list(enc.parameters()) + list(dec.parameters()):
            p.normal_(0, 0.2)
    sd = dict(enc.state_dict())
    sd.update({f"decoder.{k}": v for k, v in dec.state_dict().items()})
    return enc, dec, sd


def test_vqgan_conversion_is_strict_and_exact():
    from scd_core.models.lumina_vqgan import build_vqmodel, convert_taming_vqgan_state_dict
    enc, dec, sd = taming_vqgan(VQ_CFG)
    assert "decoder.up.1.upsample.conv.weight" in sd and "encoder.down.0.downsample.conv.weight" in sd
    sd["loss.discriminator.main.0.weight"] = torch.zeros(1)      # training-only keys are dropped
    vq = build_vqmodel(VQ_CFG).eval()
    vq.load_state_dict(convert_taming_vqgan_state_dict(sd, len(VQ_CFG["ch_mult"])), strict=True)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        ref_h = enc.quant_conv(enc.encoder(x))
        torch.testing.assert_close(vq.quant_conv(vq.encoder(x)), ref_h, atol=1e-4, rtol=1e-4)
        z = torch.randn(2, 8, 8, 8)
        ref = dec(enc.post_quant_conv(z))
        got = vq.decode(z, force_not_quantize=True).sample
        torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="state_dict"):
        convert_taming_vqgan_state_dict({"decoder.weird.weight": torch.zeros(1)}, 2)


def test_vqgan_checkpoint_roundtrip_and_decode_shape(tmp_path, tm):
    from scd_core.models.lumina_vqgan import load_chameleon_vqgan
    _, _, sd = taming_vqgan(VQ_CFG)
    path = str(tmp_path / "vqgan.ckpt")
    torch.save({"state_dict": sd}, path)
    (tmp_path / "vqgan.yaml").write_text(json.dumps({"model": {"params": {
        "embed_dim": 8, "n_embed": N_CODES, "ddconfig": {k: VQ_CFG[k] for k in VQ_CFG
                                                          if k not in ("embed_dim", "n_embed")}}}}))
    vq = load_chameleon_vqgan(path, str(tmp_path / "vqgan.yaml"))
    model = LuminaTokenModel(tm.model, encode, GRID, layout=LAYOUT, vqgan=vq)
    images = model.decode(torch.randint(0, N_CODES, (2, GRID[0] * GRID[1])))
    assert len(images) == 2 and images[0].size == (2 * GRID[1], 2 * GRID[0])   # 2 levels: x2
    with pytest.raises(ValueError, match="tokens"):
        model.decode(torch.zeros(1, 5, dtype=torch.long))


def test_generate_runs_on_the_tiny_model(tm):
    import scd_core
    run = scd_core.generate(tm, ["a red apple", "a cat"], method="scd-mc", window=4, seed=0,
                            top_k=8, cfg_scale=3.0)
    assert run.tokens.shape == (2, GRID[0] * GRID[1])
    assert int(run.tokens.max()) < N_CODES


@pytest.mark.gpu
def test_cuda_bf16_matches_cpu_float32(tm):
    import copy
    gpu = LuminaTokenModel(copy.deepcopy(tm.model).to("cuda", torch.bfloat16), encode, GRID,
                           layout=LAYOUT, prompt_template="{prompt}")
    prompts, window, starts = ["a dog", "the quick brown fox"], torch.tensor([[2, 3, 4], [5, 6, 7]]), [2, 5]
    hist = torch.tensor([[4, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 0, 1]])
    out = []
    for model in (tm, gpu):
        s = model.start(prompts, 3.0)
        s.step(hist, torch.tensor([0, 0]))
        out.append(s.step(window, torch.tensor(starts)).float().cpu())
    torch.testing.assert_close(out[1], out[0], atol=0.1, rtol=0.05)


# -- rows join and leave a running session (serving) -------------------------------------

LONG = "a lighthouse on a cliff at dusk"                # a longer prompt than any running one


@pytest.mark.parametrize("cfg", [1.0, 3.0])
def test_added_rows_equal_their_prompts_started_alone(tm, cfg):
    """The running rows' prompt region grows to the newcomer's longer prompt; windows cross
    row ends (forced end-of-row tokens) at different places in each row."""
    rows_util.check_added_rows(tm, ["a dog", "the quick brown fox"], [LONG, "cat"], cfg)


@pytest.mark.parametrize("cfg", [1.0, 3.0])
def test_kept_rows_equal_an_untouched_session(tm, cfg):
    s = rows_util.check_kept_rows(tm, ["a dog", LONG, "the quick brown fox"], [2, 0], cfg)
    assert s.P == static.bucket(len(tm.cond_ids("the quick brown fox"))) < static.bucket(len(tm.cond_ids(LONG)))
    with pytest.raises(ValueError, match="rows"):
        s.keep_rows([0, 2])


def test_scheduler_rows_join_and_leave_with_greedy_tokens_of_ar_alone(tm):
    joins = {0: ["a red apple", "cat"], 1: [LONG], 3: ["the quick brown fox", "a dog"]}
    rows_util.check_scheduler_greedy(tm, joins, cfg_scale=3.0, window=4, pixels=False)   # no VQGAN here


@pytest.mark.gpu
def test_cuda_rows_join_and_leave(tm):
    """GPU check: rows join and leave a session on CUDA (float32, so the logits compare exactly)."""
    import copy
    gpu = LuminaTokenModel(copy.deepcopy(tm.model).to("cuda"), encode, GRID, layout=LAYOUT, prompt_template="{prompt}")
    rows_util.check_added_rows(gpu, ["a dog", "the quick brown fox"], [LONG, "cat"], 3.0)
    rows_util.check_kept_rows(gpu, ["a dog", LONG, "the quick brown fox"], [2, 0], 3.0)


@pytest.mark.parametrize("cfg_scale", [1.0, 3.0])
def test_tree_of_drafts_equals_its_paths_fed_as_chains(tm, cfg_scale):
    """The tree contract (scd_core.testing) with rows of 4 codes: trees cross row ends, so
    end-of-row entries sit between a node and its children; prompts of different lengths."""
    testing.check_tree_session(tm, ["a red apple", "two cats on a long sofa"], cfg_scale)
