"""Janus adapter on a tiny randomly initialised JanusForConditionalGeneration (offline, CPU)."""
import pytest
import torch

import transformers

from scd_core.models import janus as janus_mod  # noqa: E402
from scd_core.models.checkpoints import WeightsNotFoundError  # noqa: E402
from scd_core.models import standins  # noqa: E402
from fakehub import empty_hub_cache  # noqa: E402,F401  (fixture: offline, empty Hugging Face cache)
import rows_util  # noqa: E402
from scd_core import testing  # noqa: E402
from scd_core.models import static  # noqa: E402

BOS, EOS, PAD, BOI = 1, 2, 0, 298
V_IMG = 128


def tiny_janus():
    from transformers import (JanusConfig, JanusForConditionalGeneration, JanusVisionConfig,
                              JanusVQVAEConfig, LlamaConfig)
    torch.manual_seed(0)
    text = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, bos_token_id=BOS,
                       eos_token_id=EOS, pad_token_id=PAD)
    vision = JanusVisionConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                               image_size=64, patch_size=16, projection_dim=64, num_image_tokens=16)
    vq = JanusVQVAEConfig(embed_dim=8, num_embeddings=V_IMG, latent_channels=32, base_channels=32,
                          channel_multiplier=[1, 1], num_res_blocks=1, projection_dim=64,
                          image_token_embed_dim=64, num_hidden_layers=1)
    config = JanusConfig(text_config=text, vision_config=vision, vq_config=vq, image_token_id=299)
    model = JanusForConditionalGeneration(config).eval()
    spread_weights(model)
    return model


def spread_weights(model, std: float = 0.15) -> None:
    """Larger random weights than the default init, so that logits depend strongly on the
    context and greedy runs do not collapse onto one repeated token (a weak comparison)."""
    g = torch.Generator().manual_seed(0)
    parts = (model.model.language_model, model.model.generation_head,
             model.model.generation_embeddings, model.model.generation_aligner)
    with torch.no_grad():
        for part in parts:
            for p in part.parameters():
                if p.ndim >= 2:
                    p.copy_(torch.randn(p.shape, generator=g) * std)


def encode(prompt: str) -> list[int]:
    """A stand-in tokenizer: BOS, one id per character (3..257), image-start."""
    return [BOS] + [3 + (ord(c) % 250) for c in prompt] + [BOI]


@pytest.fixture(scope="module")
def tm():
    return janus_mod.JanusTokenModel(tiny_janus(), encode=encode, bos_token_id=BOS,
                                     boi_token_id=BOI, pad_token_id=PAD, name="tiny-janus")


PROMPTS = ["a red apple", "two cats on a long sofa"]     # different prompt lengths


def test_shape_and_settings(tm):
    assert tm.vocab_size == V_IMG and tm.grid == (4, 4)
    assert tm.default_settings["cfg_scale"] == 5.0 and tm.default_settings["top_k"] == 1000
    assert tm.default_settings["window"] == 32
    s = tm.start(PROMPTS, cfg_scale=5.0)
    assert s.first_logits.shape == (2, V_IMG)


def test_unconditional_row_keeps_only_bos_and_boi(tm):
    ids = encode("abc")
    assert tm.unconditional_ids(ids) == [BOS, PAD, PAD, PAD, BOI]


def test_window_equals_single_steps(tm):
    torch.manual_seed(1)
    toks = torch.randint(0, V_IMG, (2, 6))
    a = tm.start(PROMPTS, cfg_scale=3.0)
    window = a.step(toks, torch.zeros(2, dtype=torch.long))
    b = tm.start(PROMPTS, cfg_scale=3.0)
    single = torch.stack([b.step(toks[:, j:j + 1], torch.full((2,), j))[:, 0] for j in range(6)], 1)
    assert window.shape == (2, 6, V_IMG)
    torch.testing.assert_close(window, single, atol=1e-4, rtol=0)
    torch.testing.assert_close(a.first_logits, b.first_logits, atol=1e-5, rtol=0)


def test_smaller_start_forgets(tm):
    torch.manual_seed(2)
    good = torch.randint(0, V_IMG, (2, 8))
    clean = tm.start(PROMPTS, cfg_scale=5.0)
    ref = clean.step(good, torch.zeros(2, dtype=torch.long))
    s = tm.start(PROMPTS, cfg_scale=5.0)
    s.step(good[:, :3], torch.zeros(2, dtype=torch.long))
    s.step(torch.randint(0, V_IMG, (2, 5)), torch.full((2,), 3))     # garbage at 3..7
    s.step(torch.randint(0, V_IMG, (2, 2)), torch.full((2,), 6))     # more garbage at 6..7
    out = s.step(good[:, 3:], torch.full((2,), 3))                   # re-feed from 3
    torch.testing.assert_close(out, ref[:, 3:], atol=1e-4, rtol=0)
    # the cache was sized at the start (prompt, grid, scratch slot) and written in place
    assert [k.shape for k, _ in s.kv.tensors()] == [k.shape for k, _ in clean.kv.tensors()]
    assert s.kv.capacity == static.bucket(len(encode(PROMPTS[1]))) + 16 + 1     # the prompt region: a bucket


def test_rows_at_different_starts_match_single_rows(tm):
    torch.manual_seed(3)
    toks = torch.randint(0, V_IMG, (2, 10))
    batch = tm.start(PROMPTS, cfg_scale=5.0)
    batch.step(toks[:, :6], torch.zeros(2, dtype=torch.long))
    starts = torch.tensor([5, 2])                                   # row 1 rejects more
    window = torch.stack([toks[0, 5:9], toks[1, 2:6]])
    out = batch.step(window, starts)
    out2 = batch.step(torch.stack([toks[0, 9:10], toks[1, 6:7]]), torch.tensor([9, 6]))
    for b in range(2):
        single = tm.start([PROMPTS[b]], cfg_scale=5.0)
        st = int(starts[b])
        ref = single.step(toks[b:b + 1, : st + 5], torch.zeros(1, dtype=torch.long))
        torch.testing.assert_close(out[b], ref[0, st: st + 4], atol=1e-4, rtol=0)
        torch.testing.assert_close(out2[b, 0], ref[0, st + 4], atol=1e-4, rtol=0)


def test_start_beyond_fed_is_an_error(tm):
    s = tm.start(PROMPTS[:1], cfg_scale=5.0)
    with pytest.raises(ValueError, match="start"):
        s.step(torch.zeros(1, 2, dtype=torch.long), torch.tensor([3]))
    with pytest.raises(ValueError, match="tokens"):
        s.step(torch.full((1, 2), V_IMG), torch.tensor([0]))
    with pytest.raises(ValueError, match="prompts"):
        tm.start("not a list", cfg_scale=5.0)
    with pytest.raises(ValueError, match="cfg_scale"):
        tm.start(PROMPTS, cfg_scale="big")


def greedy_via_session(tm, prompts, cfg_scale):
    s = tm.start(prompts, cfg_scale)
    n = tm.grid[0] * tm.grid[1]
    tok = s.first_logits.argmax(-1, keepdim=True)
    out = [tok]
    for i in range(n - 1):
        tok = s.step(tok, torch.full((len(prompts),), i))[:, -1].argmax(-1, keepdim=True)
        out.append(tok)
    return torch.cat(out, 1)


def library_greedy(tm, prompt, cfg_scale):
    from transformers import GenerationConfig
    gc = GenerationConfig(do_sample=False, guidance_scale=cfg_scale, bos_token_id=BOS,
                          pad_token_id=PAD, eos_token_id=EOS,
                          generation_kwargs={"boi_token_id": BOI})
    ids = torch.tensor([encode(prompt)])
    return tm.model.generate(ids, attention_mask=torch.ones_like(ids), generation_mode="image",
                             generation_config=gc)


def cache_free_greedy(tm, prompt):
    """Reference without CFG (the library's image `generate` fails at guidance 1): re-run the
    whole sequence each step, no cache, no padding."""
    m = tm.model
    embeds = m.get_input_embeddings()(torch.tensor([encode(prompt)]))
    out = []
    with torch.no_grad():
        for _ in range(tm.grid[0] * tm.grid[1]):
            h = m.model.language_model(inputs_embeds=embeds).last_hidden_state[:, -1]
            tok = m.model.generation_head(h).argmax(-1, keepdim=True)
            out.append(tok)
            embeds = torch.cat([embeds, m.prepare_embeddings_for_image_generation(tok)], 1)
    return torch.cat(out, 1)[0]


def test_greedy_without_guidance_matches_cache_free_reference(tm):
    ours = greedy_via_session(tm, PROMPTS, 1.0)
    for b, p in enumerate(PROMPTS):
        assert torch.equal(ours[b], cache_free_greedy(tm, p))


def test_greedy_matches_library_generate(tm):
    cfg = 5.0
    ours = greedy_via_session(tm, PROMPTS, cfg)
    for b, p in enumerate(PROMPTS):
        ref = library_greedy(tm, p, cfg)[0]
        assert len(set(ref.tolist())) > 4          # a comparison with teeth
        assert torch.equal(ours[b], ref)


@pytest.mark.parametrize("method", ["ar", "sjd", "scd-mc", "scd-gumbel"])
def test_engine_top1_matches_library_generate(tm, method):
    """Rule 7 end to end: greedy AR, SJD and SCD through the engine give the library's tokens
    (rows of the batch accept different lengths, so they step from different starts)."""
    import scd_core
    run = scd_core.generate(tm, PROMPTS, method=method, window=1 if method == "ar" else 5, seed=0,
                            temperature=1.0, top_k=1, top_p=1.0, cfg_scale=5.0, init="random")
    for b, p in enumerate(PROMPTS):
        assert torch.equal(run.tokens[b].cpu(), library_greedy(tm, p, 5.0)[0])


def test_guidance_in_bfloat16_is_transformers_guidance():
    """In bfloat16 the guided logits are the ones transformers' image mode samples from
    (`ClassifierFreeGuidanceLogitsProcessor` on the head's bfloat16 scores), then float32: the
    same rounding, so the same tokens tie at the top-k cut."""
    from transformers import ClassifierFreeGuidanceLogitsProcessor
    model = janus_mod.JanusTokenModel(tiny_janus().to(torch.bfloat16), encode=encode, bos_token_id=BOS,
                                      boi_token_id=BOI, pad_token_id=PAD, name="tiny-janus")
    session = model.start(PROMPTS, 5.0)
    hidden = torch.randn(2 * len(PROMPTS), 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    scores = model.model.model.generation_head(hidden)
    want = ClassifierFreeGuidanceLogitsProcessor(5.0)(torch.zeros(len(PROMPTS), 1, dtype=torch.long), scores).float()
    got = session._logits(hidden)
    assert got.dtype == torch.float32 and torch.equal(got, want)
    assert not torch.equal(got, (scores[2:].float() + 5.0 * (scores[:2].float() - scores[2:].float())))


def test_engine_sampled_batch_run_decodes(tm):
    import scd_core
    run = scd_core.generate(tm, PROMPTS, method="scd-mc", window=6, seed=3, top_k=20, cfg_scale=5.0)
    n = tm.grid[0] * tm.grid[1]
    assert run.tokens.shape == (2, n) and int(run.tokens.max()) < tm.vocab_size
    assert 1 <= run.nfe <= n and len(run.images) == 2


def test_decode_shape(tm):
    images = tm.decode(torch.randint(0, V_IMG, (2, 16)))
    assert len(images) == 2 and images[0].size == (8, 8) and images[0].mode == "RGB"
    with pytest.raises(ValueError, match="tokens"):
        tm.decode(torch.zeros(1, 15, dtype=torch.long))


def test_loader_reports_missing_weights(tmp_path, empty_hub_cache):
    with pytest.raises(WeightsNotFoundError, match="deepseek-community/Janus-Pro-1B.*local_files_only=True"):
        janus_mod.load_janus("janus-pro-1b", local_files_only=True)
    with pytest.raises(WeightsNotFoundError, match="no folder"):
        janus_mod.load_janus(str(tmp_path / "missing"))
    with pytest.raises(WeightsNotFoundError, match="deepseek-community/Janus-Pro-7B.*HF_HUB_OFFLINE=1"):
        janus_mod.load_janus("deepseek-community/Janus-Pro-7B")                    # a Hub id, offline: no request


def test_claims_folder(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "janus"}')
    assert janus_mod.claims_folder(str(tmp_path))
    assert not janus_mod.claims_folder(str(tmp_path / "nothing"))


def tiny_processor():
    """A JanusProcessor around a word-level tokenizer ("w0".."w99"), with a chat template."""
    return standins.janus_processor([f"w{i}" for i in range(100)], pad=PAD, bos=BOS, eos=EOS, image=299, boi=BOI,
                                    eoi=297, num_image_tokens=16)


def save_tiny_checkpoint(folder) -> None:
    """The tiny model and processor saved as transformers saves Janus-Pro (its published layout)."""
    model = tiny_janus()
    model.generation_config.generation_kwargs = {"boi_token_id": BOI}
    model.generation_config.bos_token_id, model.generation_config.pad_token_id = BOS, PAD
    model.save_pretrained(folder)
    tiny_processor().save_pretrained(folder)


def test_load_from_folder_with_processor(tmp_path):
    """The real-checkpoint path minus the weights: save a tiny model and processor, load them
    by folder through the registry, and run the processor's prompt template and postprocess."""
    import scd_core
    from scd_core.models import model_status
    save_tiny_checkpoint(tmp_path)
    assert janus_mod.claims_folder(str(tmp_path)) and model_status(str(tmp_path)).usable
    tm = scd_core.load_model(str(tmp_path), device="cpu", dtype="float32")
    assert isinstance(tm, janus_mod.JanusTokenModel) and tm.boi_token_id == BOI
    assert tm.encode_prompt("w1 w2") == [BOS, 4, 11, 12, 5, BOI]
    assert tm.unconditional_ids(tm.encode_prompt("w1 w2")) == [BOS, PAD, PAD, PAD, PAD, BOI]
    run = scd_core.generate(tm, ["w1 w2", "w3"], method="sjd", window=4, seed=0, top_k=1,
                            cfg_scale=5.0)
    for b, prompt in enumerate(["w1 w2", "w3"]):
        gc = transformers.GenerationConfig(do_sample=False, guidance_scale=5.0, bos_token_id=BOS,
                                           pad_token_id=PAD, eos_token_id=EOS,
                                           generation_kwargs={"boi_token_id": BOI})
        ids = torch.tensor([tm.encode_prompt(prompt)])
        ref = tm.model.generate(ids, attention_mask=torch.ones_like(ids), generation_mode="image",
                                generation_config=gc)
        assert torch.equal(run.tokens[b], ref[0])
    assert run.images[0].size == (8, 8) and run.images[0].mode == "RGB"


def test_pixels_to_pil_maps_minus_one_to_one_onto_0_255():
    import numpy as np
    image = torch.tensor([[[-1.0, 0.0, 1.0], [-2.0, 0.5, 2.0]]])       # [1, 2, 3]
    assert np.asarray(janus_mod._to_pil(image)).tolist() == [[[0, 127, 255], [0, 191, 255]]]


@pytest.mark.gpu
def test_cuda_bf16_step_and_run():
    """GPU check: the adapter on CUDA in bfloat16 (device moves, masks, float32 logits)."""
    import scd_core
    model = tiny_janus().to("cuda", torch.bfloat16)
    tm = janus_mod.JanusTokenModel(model, encode=encode, bos_token_id=BOS, boi_token_id=BOI,
                                   pad_token_id=PAD)
    s = tm.start(PROMPTS, 5.0)
    out = s.step(torch.randint(0, V_IMG, (2, 4), device="cuda"), torch.zeros(2, dtype=torch.long))
    assert out.dtype == torch.float32 and out.device.type == "cuda" and out.shape == (2, 4, V_IMG)
    # (no greedy AR == SCD equality here: bf16 window and single-token passes round differently)
    run = scd_core.generate(tm, PROMPTS, method="scd-mc", window=5, top_k=1, cfg_scale=5.0)
    assert run.tokens.shape == (2, tm.grid[0] * tm.grid[1]) and len(run.images) == 2


# -- rows join and leave a running session (serving) -------------------------------------

LONG = "a lighthouse on a cliff at dusk, waves below"                  # longer than any running prompt


@pytest.mark.parametrize("cfg", [1.0, 5.0])
def test_added_rows_equal_their_prompts_started_alone(tm, cfg):
    rows_util.check_added_rows(tm, PROMPTS, [LONG, "dog"], cfg)


@pytest.mark.parametrize("cfg", [1.0, 5.0])
def test_kept_rows_equal_an_untouched_session(tm, cfg):
    prompts = [PROMPTS[0], LONG, PROMPTS[1]]
    rows_util.check_kept_rows(tm, prompts, [2, 0], cfg)


def test_keep_rows_drops_the_slots_only_leaving_rows_used(tm):
    s = tm.start([PROMPTS[0], LONG, PROMPTS[1]], 5.0)
    s.step(torch.zeros(3, 6, dtype=torch.long), torch.zeros(3, dtype=torch.long))
    s.keep_rows(torch.tensor([2, 0]))                                  # the longest prompt leaves
    alone = tm.start([PROMPTS[1], PROMPTS[0]], 5.0)
    alone.step(torch.zeros(2, 6, dtype=torch.long), torch.zeros(2, dtype=torch.long))
    assert s.kv.P == alone.kv.P == static.bucket(len(encode(PROMPTS[1]))) < static.bucket(len(encode(LONG)))
    assert s.kv.capacity == alone.kv.capacity


def test_bad_rows_and_prompts_are_refused_and_leave_the_session_as_it_was(tm):
    s = tm.start(PROMPTS, 5.0)
    for bad in ([2], [-1], [0, 0], [[0]], [0.5], "0"):
        with pytest.raises(ValueError, match="rows"):
            s.keep_rows(bad)
    for bad in ("a cat", [], [3]):
        with pytest.raises(ValueError, match="prompts"):
            s.add_rows(bad)
    out = s.step(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, dtype=torch.long))
    ref = tm.start(PROMPTS, 5.0).step(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, dtype=torch.long))
    rows_util.assert_close_logits(out, ref, "a session after refused changes")


def test_scheduler_rows_join_and_leave_with_greedy_tokens_of_ar_alone(tm):
    joins = {0: [PROMPTS[0], "dog"], 1: [LONG], 3: [PROMPTS[1], "a cat"]}
    rows_util.check_scheduler_greedy(tm, joins, cfg_scale=5.0, window=4)


@pytest.mark.gpu
def test_cuda_rows_join_and_leave():
    """GPU check: rows join and leave a session on CUDA (float32, so the logits compare exactly)."""
    gpu = janus_mod.JanusTokenModel(tiny_janus().to("cuda"), encode=encode, bos_token_id=BOS,
                                    boi_token_id=BOI, pad_token_id=PAD)
    rows_util.check_added_rows(gpu, PROMPTS, [LONG, "dog"], 5.0)
    rows_util.check_kept_rows(gpu, [PROMPTS[0], LONG, PROMPTS[1]], [2, 0], 5.0)


@pytest.mark.parametrize("cfg_scale", [1.0, 5.0])
def test_tree_of_drafts_equals_its_paths_fed_as_chains(tm, cfg_scale):
    """The tree contract (scd_core.testing) through public inputs: a 4-D mask, position ids
    at each node's depth, the kept path gathered in the DynamicCache and the rest cropped."""
    testing.check_tree_session(tm, PROMPTS, cfg_scale)


def test_the_cache_is_sized_at_the_start_and_written_in_place(tm):
    """Steps, a tree and its kept path write into the tensors allocated at the start (with
    the tree slots the engine reserves before its first pass): no shape depends on what was
    fed."""
    s = tm.start(PROMPTS[:1], 1.0)
    s.reserve_tree(8)
    before = [(k.data_ptr(), k.shape) for k, _ in s.kv.tensors()]
    tokens = torch.randint(0, V_IMG, (1, 8), generator=torch.Generator().manual_seed(3))
    s.step(tokens[:, :3], torch.tensor([0]))
    s.step_tree(tokens, torch.tensor([testing.BREADTH_FIRST]), torch.tensor([2]))
    s.keep_path(torch.tensor([[0, 1, 3, -1]]))
    s.step(tokens[:, :2], torch.tensor([5]))
    assert [(k.data_ptr(), k.shape) for k, _ in s.kv.tensors()] == before
    assert before[0][1][2] == static.bucket(len(encode(PROMPTS[0]))) + 16 + 1 + 8   # prompt, grid, scratch, tree slots
