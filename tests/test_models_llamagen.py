"""LlamaGen (compact GPT + VQ-16) on tiny random configs: cache exactness, CFG, key names, loader."""
from __future__ import annotations

import argparse
import hashlib

import pytest
import torch

from scd_core.models import llamagen as lg
from scd_core.models.llamagen import GPTConfig, LlamaGenTokenModel, Transformer, VQModel
from fakehub import empty_hub_cache  # noqa: F401  (fixture: offline, empty Hugging Face cache)
import rows_util
from scd_core import testing

V = 24
GRID = 4
C2I = GPTConfig(dim=32, n_layer=2, n_head=4, n_kv_head=2, multiple_of=16, model_type="c2i",
                num_classes=10, vocab_size=V, cls_token_num=1, block_size=GRID * GRID)
T2I = GPTConfig(dim=32, n_layer=2, n_head=4, multiple_of=16, model_type="t2i", caption_dim=16,
                vocab_size=V, cls_token_num=6, block_size=GRID * GRID)
TINY_VQ = dict(codebook_size=V, codebook_embed_dim=8, ch=32, ch_mult=(1, 2), num_res_blocks=1, z_channels=32)


def fake_text_encoder(texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic stand-in for FLAN-T5: right-padded states [B, 6, 16], length from the text."""
    states, masks = [], []
    for t in texts:
        seed = int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)
        g = torch.Generator().manual_seed(seed)
        n = 1 + len(t.split()) % 6
        states.append(torch.randn(6, 16, generator=g))
        masks.append(torch.tensor([1] * n + [0] * (6 - n)))
    return torch.stack(states), torch.stack(masks)


def make(cfg: GPTConfig, seed: int = 0) -> LlamaGenTokenModel:
    torch.manual_seed(seed)
    gpt = Transformer(cfg)
    return LlamaGenTokenModel(gpt, VQModel(**TINY_VQ),
                              fake_text_encoder if cfg.model_type == "t2i" else None)


@pytest.fixture(scope="module")
def c2i() -> LlamaGenTokenModel:
    return make(C2I)


@pytest.fixture(scope="module")
def t2i() -> LlamaGenTokenModel:
    return make(T2I, seed=1)


def reference(tm: LlamaGenTokenModel, prompt: str, tokens: list[int], cfg: float) -> torch.Tensor:
    """Cache-free forward over [condition, tokens]: logits predicting positions 0..len(tokens)."""
    emb, mask = tm.conditions([prompt], with_uncond=cfg != 1.0)
    r, cls = mask.shape
    n = cls + len(tokens)
    h = torch.cat([emb, tm.gpt.tok_embeddings(torch.tensor([tokens] * r, dtype=torch.long))], 1)
    pos = torch.arange(n).expand(r, -1)
    k = torch.arange(n)
    ok = torch.ones(r, n, dtype=torch.bool)
    ok[:, :cls] = mask
    attn = ((k[None, None, :] <= pos[:, :, None]) & ok[:, None, :]) | (k[None, None, :] == pos[:, :, None])
    with torch.no_grad():
        logits = tm.gpt.forward_embeddings(h, pos, attn[:, None])[:, cls - 1:]
    return logits[0] if r == 1 else logits[1] + cfg * (logits[0] - logits[1])


TOKENS = [3, 7, 1, 15, 0, 9, 9, 2, 11, 5, 6, 14, 20, 23, 4, 8]


@pytest.mark.parametrize("kind", ["c2i", "t2i"])
@pytest.mark.parametrize("cfg", [1.0, 4.0])
def test_window_equals_reference_and_single_steps(c2i, t2i, kind, cfg):
    tm, prompt = (c2i, "7") if kind == "c2i" else (t2i, "a red apple on a table")
    ref = reference(tm, prompt, TOKENS, cfg)
    s = tm.start([prompt], cfg)
    assert s.first_logits.shape == (1, V)
    torch.testing.assert_close(s.first_logits[0], ref[0], atol=1e-4, rtol=1e-4)
    win = s.step(torch.tensor([TOKENS[:-1]]), torch.tensor([0]))
    assert win.shape == (1, len(TOKENS) - 1, V)
    torch.testing.assert_close(win[0], ref[1:-1], atol=1e-4, rtol=1e-4)
    s1 = tm.start([prompt], cfg)
    singles = [s1.step(torch.tensor([[t]]), torch.tensor([g]))[0, 0] for g, t in enumerate(TOKENS[:-1])]
    torch.testing.assert_close(torch.stack(singles), win[0], atol=1e-4, rtol=1e-4)


def test_step_with_smaller_start_forgets(c2i):
    s = c2i.start(["3"], 4.0)
    s.step(torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]]), torch.tensor([0]))
    new = [12, 13, 14, 15, 0]
    got = s.step(torch.tensor([new]), torch.tensor([3]))
    ref = reference(c2i, "3", [1, 2, 3] + new, 4.0)
    torch.testing.assert_close(got[0], ref[4:], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kind", ["c2i", "t2i"])
def test_rows_at_different_starts_equal_single_rows(c2i, t2i, kind):
    tm, prompts = (c2i, ["1", "9"]) if kind == "c2i" else (t2i, ["a dog", "the quick brown fox jumps"])
    hist = [[4, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 0, 1]]
    s = tm.start(prompts, 3.0)
    s.step(torch.tensor(hist), torch.tensor([0, 0]))
    window = torch.tensor([[2, 3, 4], [5, 6, 7]])
    starts = [2, 5]
    got = s.step(window, torch.tensor(starts))
    for b in range(2):
        single = tm.start([prompts[b]], 3.0)
        single.step(torch.tensor([hist[b]]), torch.tensor([0]))
        one = single.step(window[b:b + 1], torch.tensor([starts[b]]))
        torch.testing.assert_close(got[b], one[0], atol=1e-4, rtol=1e-4)
        ref = reference(tm, prompts[b], hist[b][:starts[b]] + window[b].tolist(), 3.0)
        torch.testing.assert_close(got[b], ref[starts[b] + 1:], atol=1e-4, rtol=1e-4)


def test_prompts_and_bad_input(c2i):
    with pytest.raises(ValueError, match="prompts"):
        c2i.start(["golden retriever"], 4.0)
    with pytest.raises(ValueError, match="prompts"):
        c2i.start(["10"], 4.0)                      # only 10 classes in the tiny model
    s = c2i.start([" 2 "], 4.0)
    with pytest.raises(ValueError, match="tokens"):
        s.step(torch.tensor([[V]]), torch.tensor([0]))
    with pytest.raises(ValueError, match="start"):
        s.step(torch.tensor([[1, 2]]), torch.tensor([15]))
    with pytest.raises(ValueError, match="cfg_scale"):
        c2i.start(["1"], float("inf"))
    with pytest.raises(ValueError, match="text_encoder"):
        LlamaGenTokenModel(Transformer(T2I))


def test_contract_and_defaults(c2i, t2i):
    from scd_core.protocols import Session, TokenModel
    assert isinstance(c2i, TokenModel) and isinstance(c2i.start(["1"], 1.0), Session)
    assert c2i.grid == (GRID, GRID) and c2i.vocab_size == V
    assert c2i.default_settings == {"cfg_scale": 4.0, "top_k": 2000, "top_p": 1.0, "temperature": 1.0, "window": 32}
    assert t2i.default_settings["cfg_scale"] == 7.5 and t2i.default_settings["top_k"] == 1000
    assert c2i.example_prompts == ["0", "1", "2", "3"]   # the sample ids exceed the tiny model's 10 classes
    assert len(t2i.example_prompts) == 3


def test_decode_shape(c2i):
    images = c2i.decode(torch.randint(0, V, (3, GRID * GRID)))
    assert len(images) == 3 and images[0].size == (2 * GRID, 2 * GRID)   # tiny VQ: 2 levels, x2
    with pytest.raises(ValueError, match="tokens"):
        c2i.decode(torch.zeros(1, 5, dtype=torch.long))


def test_vq_encode_decode_roundtrip_shapes():
    vq = VQModel(**TINY_VQ).eval()
    with torch.no_grad():
        idx = vq.encode_indices(torch.randn(2, 3, 8, 8))
        assert idx.shape == (2, 16) and int(idx.max()) < V
        assert vq.decode_code(idx, (4, 4)).shape == (2, 3, 8, 8)


# ---------------------------------------------------------------- published key names

def test_vq16_has_the_published_key_names_and_shapes():
    """Names/shapes read off LlamaGen's tokenizer/tokenizer_image/vq_model.py (VQ_16)."""
    with torch.device("meta"):
        sd = VQModel().state_dict()
    assert len(sd) == 344      # 144 encoder + 194 decoder + codebook, usage, quant convs
    expect = {
        "encoder.conv_in.weight": (128, 3, 3, 3),
        "encoder.conv_blocks.2.res.0.nin_shortcut.weight": (256, 128, 1, 1),
        "encoder.conv_blocks.3.downsample.conv.weight": (256, 256, 3, 3),
        "encoder.conv_blocks.4.attn.1.proj_out.weight": (512, 512, 1, 1),
        "encoder.mid.1.q.weight": (512, 512, 1, 1),
        "encoder.mid.2.conv2.bias": (512,),
        "encoder.conv_out.weight": (256, 512, 3, 3),
        "decoder.conv_in.weight": (512, 256, 3, 3),
        "decoder.conv_blocks.0.attn.2.norm.weight": (512,),
        "decoder.conv_blocks.0.upsample.conv.weight": (512, 512, 3, 3),
        "decoder.conv_blocks.1.res.0.nin_shortcut.weight": (256, 512, 1, 1),
        "decoder.conv_blocks.4.res.2.conv2.weight": (128, 128, 3, 3),
        "decoder.norm_out.weight": (128,),
        "quantize.embedding.weight": (16384, 8),
        "quantize.codebook_used": (65536,),
        "quant_conv.weight": (8, 256, 1, 1),
        "post_quant_conv.weight": (256, 8, 1, 1),
    }
    for k, shape in expect.items():
        assert tuple(sd[k].shape) == shape, k
    assert "decoder.conv_blocks.4.upsample.conv.weight" not in sd
    assert "encoder.conv_blocks.4.downsample.conv.weight" not in sd
    assert "decoder.conv_blocks.1.attn.0.q.weight" not in sd


def test_gpt_b_and_t2i_xl_have_the_published_key_names():
    """GPT-B c2i 256 px and GPT-XL t2i as built by LlamaGen's gpt.py."""
    with torch.device("meta"):
        b = Transformer(GPTConfig(dim=768, n_layer=12, n_head=12)).state_dict()
        xl = Transformer(GPTConfig(dim=1280, n_layer=36, n_head=20, model_type="t2i",
                                   cls_token_num=120, block_size=1024)).state_dict()
    assert len(b) == 88
    assert tuple(b["cls_embedding.embedding_table.weight"].shape) == (1001, 768)
    assert tuple(b["layers.11.attention.wqkv.weight"].shape) == (3 * 768, 768)
    assert tuple(b["layers.0.feed_forward.w1.weight"].shape) == (2048, 768)
    assert tuple(b["layers.0.feed_forward.w2.weight"].shape) == (768, 2048)
    assert {"tok_embeddings.weight", "norm.weight", "output.weight",
            "layers.0.attention.wo.weight", "layers.0.attention_norm.weight", "layers.0.ffn_norm.weight",
            "layers.0.feed_forward.w3.weight"} <= set(b)
    assert tuple(xl["cls_embedding.cap_proj.fc1.weight"].shape) == (1280, 2048)
    assert tuple(xl["cls_embedding.cap_proj.fc2.weight"].shape) == (1280, 1280)
    assert tuple(xl["cls_embedding.uncond_embedding"].shape) == (120, 2048)
    assert tuple(xl["layers.0.feed_forward.w1.weight"].shape) == (3584, 1280)


# ---------------------------------------------------------------- loading

def _write_published_style(tm: LlamaGenTokenModel, folder, kind: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    args = argparse.Namespace(gpt_model="GPT-tiny", image_size=64)
    gpt_sd = dict(tm.gpt.state_dict())
    torch.save({"model": gpt_sd, "steps": 10, "args": args}, folder / f"{kind}_T_64.pt")
    torch.save({"model": tm.vq.state_dict(), "args": args}, folder / f"vq_ds16_{kind}.pt")


def test_loader_reads_published_checkpoints_strictly(tmp_path, c2i):
    folder = tmp_path / "llamagen"
    _write_published_style(c2i, folder, "c2i")
    assert lg.claims_folder(str(folder))
    with pytest.raises(ValueError, match="image_size"):
        lg.load_llamagen(str(folder), device="cpu", n_head=4)
    tm = lg.load_llamagen(str(folder), device="cpu", image_size=64, n_head=4)
    assert tm.cfg.n_kv_head == 2 and tm.cfg.num_classes == 10 and tm.grid == (4, 4)
    for k, v in c2i.gpt.state_dict().items():
        torch.testing.assert_close(tm.gpt.state_dict()[k], v, msg=k)
    torch.testing.assert_close(tm.start(["4"], 4.0).first_logits, c2i.start(["4"], 4.0).first_logits)
    assert len(tm.decode(torch.zeros(1, 16, dtype=torch.long))) == 1
    # A checkpoint missing a tensor is refused.
    bad = dict(c2i.gpt.state_dict())
    bad.pop("norm.weight")
    torch.save({"model": bad}, folder / "c2i_T_64.pt")
    with pytest.raises(ValueError, match="gpt_ckpt"):
        lg.load_llamagen(str(folder), device="cpu", image_size=64, n_head=4)


def test_t2i_loader_explains_a_missing_text_encoder(tmp_path, t2i):
    folder = tmp_path / "llamagen-t2i"
    _write_published_style(t2i, folder, "t2i")
    with pytest.raises(FileNotFoundError, match="FLAN-T5-XL"):
        lg.load_llamagen(str(folder), device="cpu", image_size=64, n_head=4)
    tm = lg.load_llamagen(str(folder), device="cpu", image_size=64, n_head=4, text_encoder=fake_text_encoder)
    torch.testing.assert_close(tm.start(["a cat"], 7.5).first_logits, t2i.start(["a cat"], 7.5).first_logits)


def test_missing_weights_are_reported_clearly(tmp_path, monkeypatch, empty_hub_cache):
    monkeypatch.delenv(lg.DIR_ENV, raising=False)
    with pytest.raises(FileNotFoundError, match="FoundationVision/LlamaGen.*HF_HUB_OFFLINE=1"):
        lg.load_llamagen("llamagen-c2i", device="cpu")
    with pytest.raises(FileNotFoundError, match="no folder"):
        lg.load_llamagen(str(tmp_path / "nope"), device="cpu")
    with pytest.raises(FileNotFoundError, match="no LlamaGen GPT checkpoint"):
        lg.load_llamagen(str(tmp_path), device="cpu")
    assert [f.repo_id for f in lg.missing_files("llamagen-t2i")] == ["peizesun/llamagen_t2i", "google/flan-t5-xl"]
    assert not lg.claims_folder(str(tmp_path))


def test_registry_name_found_in_the_weights_folder_variable(tmp_path, monkeypatch, c2i, empty_hub_cache):
    """$SCD_LLAMAGEN_DIR holding the published file names serves `llamagen-c2i` with no download."""
    folder = tmp_path / "weights"
    _write_published_style(c2i, folder, "c2i")
    (folder / "c2i_T_64.pt").rename(folder / "c2i_B_256.pt")
    monkeypatch.setenv(lg.DIR_ENV, str(folder))
    assert lg.missing_files("llamagen-c2i") == []
    tm = lg.load_llamagen("llamagen-c2i", device="cpu", n_head=4)
    assert tm.grid == (16, 16) and tm.cfg.num_classes == 10


class NotAllowed:
    """An arbitrary class: torch.load(weights_only=True) must refuse to build it."""


def test_weights_only_refuses_arbitrary_objects(tmp_path):
    path = tmp_path / "c2i_evil_256.pt"
    torch.save({"model": {}, "obj": NotAllowed()}, path)
    with pytest.raises(ValueError, match="weights_only=True.*NotAllowed"):
        lg.read_checkpoint(str(path))
    assert lg.read_checkpoint(str(path), trust_pickle=path.name) == {}       # trusted by name: loads


def test_generate_runs_on_the_tiny_model(c2i, t2i):
    import scd_core
    for tm, prompts in ((c2i, ["1", "2"]), (t2i, ["a red apple", "a cat"])):
        run = scd_core.generate(tm, prompts, method="scd-mc", window=4, seed=0, top_k=8, cfg_scale=4.0)
        assert run.tokens.shape == (2, GRID * GRID) and int(run.tokens.max()) < V
        assert len(run.images) == 2


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["c2i", "t2i"])
def test_cuda_bf16_matches_cpu_float32(c2i, t2i, kind):
    import copy
    tm, prompts = (c2i, ["1", "9"]) if kind == "c2i" else (t2i, ["a dog", "the quick brown fox jumps"])
    gpu = LlamaGenTokenModel(copy.deepcopy(tm.gpt).to("cuda", torch.bfloat16), copy.deepcopy(tm.vq).to("cuda"),
                             tm.text_encoder)
    hist = torch.tensor([[4, 5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 0, 1]])
    out = []
    for model in (tm, gpu):
        s = model.start(prompts, 3.0)
        s.step(hist, torch.tensor([0, 0]))
        out.append(s.step(torch.tensor([[2, 3, 4], [5, 6, 7]]), torch.tensor([2, 5])).float().cpu())
    torch.testing.assert_close(out[1], out[0], atol=0.1, rtol=0.05)
    assert len(gpu.decode(torch.zeros(2, GRID * GRID, dtype=torch.long))) == 2


# -- rows join and leave a running session (serving) -------------------------------------

ROW_PROMPTS = {"c2i": (["7", "2"], ["5", "0"], ["3", "9", "1"]),
               "t2i": (["a red apple on a table", "two cats"], ["a lighthouse at dusk", "dog"],
                       ["a dog", "an old boat on a quiet lake", "snow"])}    # text masks of different lengths


@pytest.mark.parametrize("kind", ["c2i", "t2i"])
@pytest.mark.parametrize("cfg", [1.0, 4.0])
def test_added_rows_equal_their_prompts_started_alone(c2i, t2i, kind, cfg):
    tm = c2i if kind == "c2i" else t2i
    old, new, _ = ROW_PROMPTS[kind]
    rows_util.check_added_rows(tm, old, new, cfg)


@pytest.mark.parametrize("kind", ["c2i", "t2i"])
@pytest.mark.parametrize("cfg", [1.0, 4.0])
def test_kept_rows_equal_an_untouched_session(c2i, t2i, kind, cfg):
    tm = c2i if kind == "c2i" else t2i
    s = rows_util.check_kept_rows(tm, ROW_PROMPTS[kind][2], [2, 0], cfg)
    assert s.cond_mask.shape[0] == (2 if cfg == 1.0 else 4)
    with pytest.raises(ValueError, match="rows"):
        s.keep_rows(torch.tensor([1, 2]))
    if kind == "c2i":
        with pytest.raises(ValueError, match="prompts"):
            s.add_rows(["a golden retriever"])                       # c2i takes class ids


def spread(tm: LlamaGenTokenModel, std: float = 0.15) -> LlamaGenTokenModel:
    """The same architecture with larger random weights: logits that depend strongly on the
    context, so greedy runs do not collapse onto one repeated token (a weak comparison)."""
    g = torch.Generator().manual_seed(5)
    gpt = Transformer(tm.cfg)
    gpt.load_state_dict(tm.gpt.state_dict())    # buffers too (t2i's uncond_embedding): none from the global RNG
    with torch.no_grad():
        for p in gpt.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return LlamaGenTokenModel(gpt, None, tm.text_encoder)


@pytest.mark.parametrize("kind", ["c2i", "t2i"])
def test_scheduler_rows_join_and_leave_with_greedy_tokens_of_ar_alone(c2i, t2i, kind):
    tm = spread(c2i if kind == "c2i" else t2i)
    old, new, more = ROW_PROMPTS[kind]
    rows_util.check_scheduler_greedy(tm, {0: old, 1: new[:1], 3: new[1:] + more[:1]}, cfg_scale=4.0, window=4,
                                     pixels=False)   # the tiny config has no VQ decoder


@pytest.mark.gpu
def test_cuda_rows_join_and_leave(t2i):
    """GPU check: rows join and leave a session on CUDA (float32, so the logits compare exactly)."""
    import copy
    gpu = LlamaGenTokenModel(copy.deepcopy(t2i.gpt).to("cuda"), None, fake_text_encoder)
    old, new, more = ROW_PROMPTS["t2i"]
    rows_util.check_added_rows(gpu, old, new, 4.0)
    rows_util.check_kept_rows(gpu, more, [2, 0], 4.0)


@pytest.mark.parametrize("kind,cfg", [("c2i", 4.0), ("t2i", 1.0), ("t2i", 7.5)])
def test_tree_of_drafts_equals_its_paths_fed_as_chains(c2i, t2i, kind, cfg):
    """The tree contract (scd_core.testing): 2-D RoPE at each node's depth, the text mask kept."""
    tm = c2i if kind == "c2i" else t2i
    testing.check_tree_session(tm, ["3", "7"] if kind == "c2i" else ["a red apple", "two cats"], cfg)


def test_text_encoders_read_the_encoder_of_a_t5_checkpoint(tmp_path):
    """LlamaGen's FLAN-T5 and Cosmos' T5 encoders come from an encoder-decoder checkpoint
    (`checkpoints.pretrained_converted`): the same states as transformers' own loading of
    the encoder, in the dtype asked for, the embedding tied."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast, T5Config, T5EncoderModel, T5ForConditionalGeneration

    from scd_core.models import cosmos

    config = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                      feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    torch.manual_seed(0)
    T5ForConditionalGeneration(config).save_pretrained(tmp_path)
    tok = Tokenizer(WordLevel({"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"w{i}": 3 + i for i in range(50)}},
                              unk_token="<unk>"))
    tok.pre_tokenizer = Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(tmp_path)
    reference = T5EncoderModel.from_pretrained(tmp_path).eval()
    ids = torch.tensor([[3, 9, 4, 1]])
    want = reference(input_ids=ids).last_hidden_state
    _, enc = cosmos.load_t5(str(tmp_path), torch.device("cpu"), torch.float32)
    assert torch.equal(enc(input_ids=ids).last_hidden_state, want)
    assert enc.encoder.embed_tokens.weight.data_ptr() == enc.shared.weight.data_ptr()
    _, elsewhere = cosmos.load_t5(str(tmp_path), torch.device("meta"), torch.bfloat16)   # the device asked for
    assert {t.device.type for t in elsewhere.state_dict().values()} == {"meta"}
    encode = lg.t5_text_encoder(str(tmp_path), "cpu", torch.bfloat16, max_length=6)
    states, mask = encode(["w0 w6", "w1"])
    assert states.dtype == torch.bfloat16 and states.shape == (2, 6, 32) and mask.tolist()[1] == [1, 0, 0, 0, 0, 0]
    bf16 = T5EncoderModel.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        assert torch.equal(states[:1], bf16(input_ids=torch.tensor([[3, 9, 0, 0, 0, 0]]),
                                             attention_mask=torch.tensor([[1, 1, 0, 0, 0, 0]])).last_hidden_state)
