"""Emu3 adapter on a tiny randomly initialised Emu3ForConditionalGeneration (offline, CPU)."""
import pytest
import torch

import transformers

from scd_core.models import emu3 as emu3_mod  # noqa: E402
from scd_core.models.checkpoints import WeightsNotFoundError  # noqa: E402
from scd_core.models import model_status  # noqa: E402
from fakehub import empty_hub_cache  # noqa: E402,F401  (fixture: offline, empty Hugging Face cache)
import rows_util  # noqa: E402
from scd_core import testing  # noqa: E402
from scd_core.models import static  # noqa: E402

K = 64                       # visual codes
H, W = 3, 4                  # grid: rows of 4 codes, each closed by an end-of-line token
PAD, BOS, EOS, BOI, EOI, WRAP, EOL, EOF = 0, 1, 2, 3, 4, 5, 6, 7
STAR, DIGIT0 = 20, 10


def code_to_bpe(i: int) -> int:
    return 100 + (i * 37) % K       # a permutation, so a missing mapping shows up


def tiny_emu3():
    from transformers import (Emu3Config, Emu3ForConditionalGeneration, Emu3TextConfig,
                              Emu3VQVAEConfig)
    torch.manual_seed(0)
    vocab = {"<pad>": PAD, "<bos>": BOS, "<eos>": EOS, "<|image start|>": BOI, "<|image end|>": EOI,
             "<|image token|>": WRAP, "<|extra_200|>": EOL, "<|extra_201|>": EOF, "<image>": 8}
    vocab.update({f"<|visual token{i:06d}|>": code_to_bpe(i) for i in range(K)})
    text = Emu3TextConfig(vocab_size=100 + K, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
                          max_position_embeddings=512)
    vq = Emu3VQVAEConfig(codebook_size=K, embed_dim=4, latent_channels=4, base_channels=32,
                         channel_multiplier=[1, 1], num_res_blocks=1, attn_resolutions=[],
                         hidden_size=32, temporal_downsample_factor=1)
    model = Emu3ForConditionalGeneration(Emu3Config(text_config=text, vq_config=vq,
                                                    vocabulary_map=vocab)).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():        # larger weights: context-dependent logits, greedy runs that vary
        for part in (model.model.text_model, model.lm_head):
            for p in part.parameters():
                if p.ndim >= 2:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.15)
    return model


def encode(text: str) -> list[int]:
    """A stand-in tokenizer: BOS, one id per character (21..99), then the image header."""
    return ([BOS] + [21 + (ord(c) % 79) for c in text]
            + [BOI, DIGIT0 + H, STAR, DIGIT0 + W, WRAP])


NEG = "ugly, blurry"
PROMPTS = ["a red apple", "two cats on a long sofa"]


@pytest.fixture(scope="module")
def tm():
    return emu3_mod.Emu3TokenModel(tiny_emu3(), encode=encode, grid=(H, W), negative_prompt=NEG,
                                   positive_suffix="", pad_token_id=PAD, name="tiny-emu3")


def test_shape_and_settings(tm):
    assert tm.vocab_size == K and tm.grid == (H, W)
    assert tm.default_settings["window"] == 32
    assert tm.start(PROMPTS, 3.0).first_logits.shape == (2, K)
    seq = tm.to_bpe_sequence(torch.arange(12).view(1, 12))
    assert seq[0, :5].tolist() == [code_to_bpe(i) for i in range(4)] + [EOL]


def test_a_pass_computes_the_visual_codes_logits_only(tm):
    """The head's rows of the visual codes are taken once, at load: a pass never runs the
    whole-vocabulary `lm_head` (184,622 tokens at full size), and its logits are the
    head's at the codes' BPE ids."""
    calls = []
    hook = tm.model.lm_head.register_forward_hook(lambda *args: calls.append(1))
    try:
        s = tm.start(PROMPTS, 3.0)
        s.step(torch.randint(0, K, (2, 5)), torch.zeros(2, dtype=torch.long))
    finally:
        hook.remove()
    assert calls == []
    hidden = torch.randn(2, 3, tm.image_head.shape[1], generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(tm.image_logits(hidden), tm.model.lm_head(hidden)[..., tm.code_to_bpe].float(),
                               atol=1e-5, rtol=1e-5)
    weight = torch.randn(10, 4)
    assert emu3_mod.head_rows(weight, [3, 4, 5]).data_ptr() == weight[3].data_ptr()     # consecutive ids: a view
    assert torch.equal(emu3_mod.head_rows(weight, [5, 3]), weight[[5, 3]])


def test_window_equals_single_steps(tm):
    torch.manual_seed(1)
    toks = torch.randint(0, K, (2, 9))                   # crosses two row ends
    a = tm.start(PROMPTS, cfg_scale=3.0)
    window = a.step(toks, torch.zeros(2, dtype=torch.long))
    b = tm.start(PROMPTS, cfg_scale=3.0)
    single = torch.stack([b.step(toks[:, j:j + 1], torch.full((2,), j))[:, 0] for j in range(9)], 1)
    assert window.shape == (2, 9, K)
    torch.testing.assert_close(window, single, atol=1e-4, rtol=0)


def test_smaller_start_forgets(tm):
    torch.manual_seed(2)
    good = torch.randint(0, K, (2, 11))
    ref = tm.start(PROMPTS, 3.0).step(good, torch.zeros(2, dtype=torch.long))
    s = tm.start(PROMPTS, 3.0)
    s.step(good[:, :3], torch.zeros(2, dtype=torch.long))
    s.step(torch.randint(0, K, (2, 7)), torch.full((2,), 3))         # garbage at 3..9
    s.step(torch.randint(0, K, (2, 3)), torch.full((2,), 5))         # more garbage at 5..7
    out = s.step(good[:, 3:], torch.full((2,), 3))                   # re-feed from 3 (a row end)
    torch.testing.assert_close(out, ref[:, 3:], atol=1e-4, rtol=0)


def test_rows_at_different_starts_match_single_rows(tm):
    torch.manual_seed(3)
    toks = torch.randint(0, K, (2, 12))
    batch = tm.start(PROMPTS, 3.0)
    batch.step(toks[:, :8], torch.zeros(2, dtype=torch.long))
    starts = torch.tensor([7, 2])                        # different numbers of row ends in window
    out = batch.step(torch.stack([toks[0, 7:11], toks[1, 2:6]]), starts)
    out2 = batch.step(torch.stack([toks[0, 11:12], toks[1, 6:7]]), torch.tensor([11, 6]))
    for b in range(2):
        st = int(starts[b])
        ref = tm.start([PROMPTS[b]], 3.0).step(toks[b:b + 1, : st + 5], torch.zeros(1, dtype=torch.long))
        torch.testing.assert_close(out[b], ref[0, st: st + 4], atol=1e-4, rtol=0)
        torch.testing.assert_close(out2[b, 0], ref[0, st + 4], atol=1e-4, rtol=0)


def test_bad_step_arguments(tm):
    s = tm.start(PROMPTS[:1], 3.0)
    with pytest.raises(ValueError, match="start"):
        s.step(torch.zeros(1, 2, dtype=torch.long), torch.tensor([5]))
    with pytest.raises(ValueError, match="tokens"):
        s.step(torch.full((1, 1), K), torch.tensor([0]))


def greedy_via_session(tm, prompts, cfg_scale):
    s = tm.start(prompts, cfg_scale)
    tok = s.first_logits.argmax(-1, keepdim=True)
    out = [tok]
    for i in range(H * W - 1):
        tok = s.step(tok, torch.full((len(prompts),), i))[:, -1].argmax(-1, keepdim=True)
        out.append(tok)
    return torch.cat(out, 1)


def library_greedy(tm, prompt, cfg_scale, ids=None, neg=None):
    """transformers' own loop: EOL/EOF/EOI/EOS forced as in the Emu3 docs, negative-prompt CFG."""
    visual = [code_to_bpe(i) for i in range(K)]

    def allowed(batch_id, input_ids):
        offset = input_ids.shape[0] - int((input_ids == WRAP).nonzero()[0, 0])
        if offset % (W + 1) == 0:
            return [EOL]
        return {H * (W + 1) + 1: [EOF], H * (W + 1) + 2: [EOI], H * (W + 1) + 3: [EOS]}.get(
            offset, [PAD] if offset > H * (W + 1) + 3 else visual)

    ids = torch.tensor([ids or encode(prompt)])
    neg = torch.tensor([neg or encode(NEG)])
    kwargs = dict(negative_prompt_ids=neg, negative_prompt_attention_mask=torch.ones_like(neg)) \
        if cfg_scale != 1.0 else {}
    out = tm.model.generate(ids, attention_mask=torch.ones_like(ids), prefix_allowed_tokens_fn=allowed,
                            do_sample=False, guidance_scale=cfg_scale, max_new_tokens=H * (W + 1),
                            pad_token_id=PAD, eos_token_id=EOS, **kwargs)
    rows = out[0, ids.shape[1]:].view(H, W + 1)
    assert (rows[:, W] == EOL).all()
    bpe_to_code = {code_to_bpe(i): i for i in range(K)}
    return torch.tensor([bpe_to_code[int(t)] for t in rows[:, :W].flatten()])


@pytest.mark.parametrize("cfg", [1.0, 3.0])
def test_greedy_matches_library_generate(tm, cfg):
    ours = greedy_via_session(tm, PROMPTS, cfg)
    for b, p in enumerate(PROMPTS):
        ref = library_greedy(tm, p, cfg)
        assert len(set(ref.tolist())) > 3          # a comparison with teeth
        assert torch.equal(ours[b], ref)


@pytest.mark.parametrize("method", ["ar", "sjd", "scd-mc", "scd-gumbel"])
def test_engine_top1_matches_library_generate(tm, method):
    """Rule 7 end to end: greedy AR, SJD and SCD through the engine give the library's tokens
    (rows of the batch accept different lengths, so they step from different starts)."""
    import scd_core
    run = scd_core.generate(tm, PROMPTS, method=method, window=1 if method == "ar" else 5, seed=0,
                            temperature=1.0, top_k=1, top_p=1.0, cfg_scale=3.0, init="random")
    for b, p in enumerate(PROMPTS):
        assert torch.equal(run.tokens[b].cpu(), library_greedy(tm, p, 3.0))


def test_engine_sampled_batch_run_decodes(tm):
    import scd_core
    run = scd_core.generate(tm, PROMPTS, method="scd-mc", window=6, seed=3, top_k=20, cfg_scale=3.0)
    n = tm.grid[0] * tm.grid[1]
    assert run.tokens.shape == (2, n) and int(run.tokens.max()) < tm.vocab_size
    assert 1 <= run.nfe <= n and len(run.images) == 2


def test_decode_shape(tm):
    images = tm.decode(torch.randint(0, K, (2, H * W)))
    assert len(images) == 2 and images[0].size == (2 * W, 2 * H) and images[0].mode == "RGB"
    with pytest.raises(ValueError, match="tokens"):
        tm.decode(torch.zeros(1, H * W - 1, dtype=torch.long))


def test_loader_reports_missing_weights(tmp_path, empty_hub_cache):
    with pytest.raises(WeightsNotFoundError, match="BAAI/Emu3-Gen-hf.*local_files_only=True"):
        emu3_mod.load_emu3("emu3-gen", local_files_only=True)
    with pytest.raises(WeightsNotFoundError, match="no folder"):
        emu3_mod.load_emu3(str(tmp_path / "missing"))
    with pytest.raises(WeightsNotFoundError, match="BAAI/Emu3-Gen-hf.*HF_HUB_OFFLINE=1"):
        emu3_mod.load_emu3("BAAI/Emu3-Gen-hf")                    # a Hub id, offline: no request


def test_claims_folder(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "emu3"}')
    assert emu3_mod.claims_folder(str(tmp_path))


def tiny_processor():
    """An Emu3Processor around a word-level tokenizer sharing the tiny model's vocabulary map."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import Emu3ImageProcessor, Emu3Processor, PreTrainedTokenizerFast
    vocab = {"<pad>": PAD, "<bos>": BOS, "<eos>": EOS, "<|image start|>": BOI, "<|image end|>": EOI,
             "<|image token|>": WRAP, "<|extra_200|>": EOL, "<|extra_201|>": EOF, "<image>": 8,
             "[UNK]": 9, f"{H}*{W}": 10}
    vocab.update({f"w{i}": 21 + i for i in range(50)})
    vocab.update({f"<|visual token{i:06d}|>": code_to_bpe(i) for i in range(K)})
    tk = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="[UNK]",
        extra_special_tokens={"image_token": "<image>", "boi_token": "<|image start|>",
                              "eoi_token": "<|image end|>", "image_wrapper_token": "<|image token|>",
                              "eof_token": "<|extra_201|>"})
    return Emu3Processor(Emu3ImageProcessor(image_mean=[0.5] * 3, image_std=[0.5] * 3), tok)


def test_load_from_folder_with_processor(tmp_path):
    """The real-checkpoint path minus the weights: a tiny model and processor saved to a folder,
    loaded by folder through the registry; the grid comes from image_area and ratio."""
    import scd_core
    tiny_emu3().save_pretrained(tmp_path)
    tiny_processor().save_pretrained(tmp_path)
    assert emu3_mod.claims_folder(str(tmp_path)) and model_status(str(tmp_path)).usable
    tm = scd_core.load_model(str(tmp_path), device="cpu", dtype="float32", image_area=768, ratio="4:3")
    assert isinstance(tm, emu3_mod.Emu3TokenModel) and tm.grid == (H, W)
    assert tm.encode_prompt("w1 w2") == [BOS, 22, 23, BOI, 10, WRAP]
    prompts = ["w1 w2", "w3"]
    run = scd_core.generate(tm, prompts, method="scd-mc", window=4, seed=0, top_k=1, cfg_scale=3.0)
    neg = tm.encode_prompt(tm.negative_prompt)
    for b, p in enumerate(prompts):
        ref = library_greedy(tm, p, 3.0, ids=tm.encode_prompt(p + tm.positive_suffix), neg=neg)
        assert torch.equal(run.tokens[b], ref)
    assert run.images[0].size == (2 * W, 2 * H) and run.images[0].mode == "RGB"


def test_bad_grid_arguments():
    model = tiny_emu3()
    with pytest.raises(ValueError, match="ratio"):
        emu3_mod.Emu3TokenModel(model, tiny_processor(), ratio="square")
    with pytest.raises(ValueError, match="image_area"):
        emu3_mod.Emu3TokenModel(model, tiny_processor(), image_area=-5)
    with pytest.raises(ValueError, match="processor"):
        emu3_mod.Emu3TokenModel(model, None, encode=encode)


@pytest.mark.gpu
def test_cuda_bf16_step_and_run():
    """GPU check: the adapter on CUDA in bfloat16 (device moves, masks, float32 logits)."""
    import scd_core
    tm = emu3_mod.Emu3TokenModel(tiny_emu3().to("cuda", torch.bfloat16), encode=encode, grid=(H, W),
                                 negative_prompt=NEG, positive_suffix="", pad_token_id=PAD)
    s = tm.start(PROMPTS, 3.0)
    out = s.step(torch.randint(0, K, (2, 6), device="cuda"), torch.zeros(2, dtype=torch.long))
    assert out.dtype == torch.float32 and out.device.type == "cuda" and out.shape == (2, 6, K)
    # (no greedy AR == SCD equality here: bf16 window and single-token passes round differently)
    run = scd_core.generate(tm, PROMPTS, method="scd-mc", window=5, top_k=1, cfg_scale=3.0)
    assert run.tokens.shape == (2, tm.grid[0] * tm.grid[1]) and len(run.images) == 2


# -- rows join and leave a running session (serving) -------------------------------------

LONG = "a lighthouse on a cliff at dusk, waves below"                  # longer than any running prompt


@pytest.mark.parametrize("cfg", [1.0, 3.0])
def test_added_rows_equal_their_prompts_started_alone(tm, cfg):
    """Windows cross row ends at different places in each row (end-of-line tokens)."""
    rows_util.check_added_rows(tm, PROMPTS, [LONG, "dog"], cfg)


@pytest.mark.parametrize("cfg", [1.0, 3.0])
def test_kept_rows_equal_an_untouched_session(tm, cfg):
    rows_util.check_kept_rows(tm, [PROMPTS[0], LONG, PROMPTS[1]], [2, 0], cfg)


def test_keep_rows_drops_the_slots_only_leaving_rows_used(tm):
    s = tm.start([PROMPTS[0], LONG, PROMPTS[1]], 3.0)
    s.step(torch.zeros(3, 6, dtype=torch.long), torch.zeros(3, dtype=torch.long))
    s.keep_rows(torch.tensor([2, 0]))                                  # the longest prompt leaves
    alone = tm.start([PROMPTS[1], PROMPTS[0]], 3.0)
    alone.step(torch.zeros(2, 6, dtype=torch.long), torch.zeros(2, dtype=torch.long))
    assert s.kv.P == alone.kv.P == static.bucket(len(encode(PROMPTS[1]))) < static.bucket(len(encode(LONG)))
    assert s.kv.capacity == alone.kv.capacity
    with pytest.raises(ValueError, match="rows"):
        s.keep_rows([2])


def test_scheduler_rows_join_and_leave_with_greedy_tokens_of_ar_alone(tm):
    joins = {0: [PROMPTS[0], "dog"], 1: [LONG], 3: [PROMPTS[1], "a cat"]}
    rows_util.check_scheduler_greedy(tm, joins, cfg_scale=3.0, window=4)


@pytest.mark.gpu
def test_cuda_rows_join_and_leave():
    """GPU check: rows join and leave a session on CUDA (float32, so the logits compare exactly)."""
    gpu = emu3_mod.Emu3TokenModel(tiny_emu3().to("cuda"), encode=encode, grid=(H, W), negative_prompt=NEG,
                                  positive_suffix="", pad_token_id=PAD)
    rows_util.check_added_rows(gpu, PROMPTS, [LONG, "dog"], 3.0)
    rows_util.check_kept_rows(gpu, [PROMPTS[0], LONG, PROMPTS[1]], [2, 0], 3.0)


@pytest.mark.parametrize("cfg_scale", [1.0, 3.0])
def test_tree_of_drafts_equals_its_paths_fed_as_chains(tm, cfg_scale):
    """The tree contract (scd_core.testing) with rows of 4 codes: trees cross row ends, so
    end-of-line entries sit between a node and its children."""
    testing.check_tree_session(tm, PROMPTS, cfg_scale)
