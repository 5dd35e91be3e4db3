"""`scd_core.hf.generate` on tiny random configs of the image-token models transformers ships:
greedy runs give transformers' own tokens. Emu3 with a negative prompt (transformers' guidance)
and the line and frame ends forced by `prefix_allowed_tokens_fn`; Chameleon (Lumina-mGPT's and
Anole's class: its forward rules image tokens out, so transformers' generate writes text);
Janus-Pro's image mode, whose own `generate` takes no `custom_generate`: the mixin's
`generate` runs it with `generation_mode="image"`."""
import pytest
import torch

import scd_core.hf as hf
import test_models_emu3 as te
import test_models_janus as tj
import test_models_lumina as tl
from hf_util import spread
from transformers import ChameleonForConditionalGeneration, GenerationConfig, GenerationMixin

METHODS = ["ar", "sjd", "scd-mc", "scd-gumbel"]
EMU3_TOKENS = te.H * (te.W + 1) + 3                       # the code rows with their line ends, then EOF, EOI, EOS


def emu3_allowed(batch_id, input_ids):
    """Emu3's constraints as its documentation writes them: a line end after every row of
    codes, then end-of-frame, end-of-image and end-of-sequence; visual codes elsewhere."""
    offset = input_ids.shape[0] - int((input_ids == te.WRAP).nonzero()[0, 0])
    if offset % (te.W + 1) == 0 and offset <= te.H * (te.W + 1):
        return [te.EOL]
    return {te.H * (te.W + 1) + 1: [te.EOF], te.H * (te.W + 1) + 2: [te.EOI]}.get(
        offset, [te.EOS] if offset > te.H * (te.W + 1) else [te.code_to_bpe(i) for i in range(te.K)])


def emu3_inputs(prompts, cfg):
    rows = [te.encode(p) for p in prompts]
    width = max(len(r) for r in rows)
    ids = torch.tensor([[te.PAD] * (width - len(r)) + r for r in rows])
    kwargs = dict(attention_mask=(torch.arange(width) >= width - torch.tensor([len(r) for r in rows])[:, None]).long(),
                  prefix_allowed_tokens_fn=emu3_allowed, do_sample=False, max_new_tokens=EMU3_TOKENS,
                  pad_token_id=te.PAD, eos_token_id=te.EOS)
    if cfg != 1.0:
        neg = torch.tensor([te.encode(te.NEG)] * len(prompts))
        kwargs.update(guidance_scale=cfg, negative_prompt_ids=neg, negative_prompt_attention_mask=torch.ones_like(neg))
    return ids, kwargs


@pytest.fixture(scope="module")
def emu3():
    return te.tiny_emu3()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("prompts,cfg", [(te.PROMPTS[:1], 3.0), (te.PROMPTS, 3.0), (te.PROMPTS, 1.0)])
def test_emu3_greedy_with_guidance_and_constraints_gives_transformers_tokens(emu3, method, prompts, cfg):
    ids, kwargs = emu3_inputs(prompts, cfg)
    ref = emu3.generate(ids, **kwargs)
    codes = ref[:, ids.shape[1]:]
    assert codes.shape[1] == EMU3_TOKENS and (codes[:, -1] == te.EOS).all()
    assert len(set(codes.flatten().tolist())) > 8                              # a comparison with teeth
    out = emu3.generate(ids, custom_generate=hf.generate, method=method, window=6, **kwargs)
    assert torch.equal(out, ref)


def test_emu3_sampled_run_keeps_the_constraints(emu3):
    """Sampling with guidance, top-k and the constraints: every draft position is constrained
    from its own prefix, so every committed token is one the constraints allow there."""
    ids, kwargs = emu3_inputs(te.PROMPTS, 3.0)
    kwargs.update(do_sample=True, top_k=20, return_dict_in_generate=True)
    out = emu3.generate(ids, custom_generate=hf.generate, method="scd-mc", window=8, seed=5, **kwargs)
    assert out.sequences.shape[1] == ids.shape[1] + EMU3_TOKENS
    for row in out.sequences:
        for t in range(ids.shape[1], row.shape[0]):
            assert int(row[t]) in emu3_allowed(0, row[:t])
    assert out.nfe < EMU3_TOKENS                                               # passes saved


@pytest.fixture(scope="module")
def chameleon():
    torch.manual_seed(0)
    model = ChameleonForConditionalGeneration(tl.tiny_config()).eval()
    spread(model, 0.3)
    return model


@pytest.mark.parametrize("method", METHODS)
def test_chameleon_greedy_gives_transformers_tokens(chameleon, method):
    ids = torch.tensor([tl.encode("a red apple"), tl.encode("two cats on")])
    settings = dict(attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=20, pad_token_id=1)
    ref = chameleon.generate(ids, **settings)
    assert len(set(ref[:, ids.shape[1]:].flatten().tolist())) > 8
    out = chameleon.generate(ids, custom_generate=hf.generate, method=method, window=6, **settings)
    assert torch.equal(out, ref)


@pytest.fixture(scope="module")
def janus():
    return tj.tiny_janus()


def janus_config(cfg):
    return GenerationConfig(do_sample=False, guidance_scale=cfg, max_new_tokens=16, bos_token_id=tj.BOS, pad_token_id=tj.PAD,
                            eos_token_id=tj.EOS, generation_kwargs={"boi_token_id": tj.BOI})


@pytest.mark.parametrize("method", METHODS)
def test_janus_image_mode_greedy_gives_transformers_tokens(janus, method):
    for prompt in tj.PROMPTS:
        ids = torch.tensor([tj.encode(prompt)])
        ref = janus.generate(ids, attention_mask=torch.ones_like(ids), generation_mode="image",
                             generation_config=janus_config(3.0))
        assert ref.shape == (1, 16) and len(set(ref.flatten().tolist())) > 4
        out = GenerationMixin.generate(janus, ids, attention_mask=torch.ones_like(ids), generation_mode="image",
                                       generation_config=janus_config(3.0), custom_generate=hf.generate,
                                       method=method, window=6)
        assert torch.equal(out, ref)


def test_janus_image_mode_refuses_text_processors(janus):
    ids = torch.tensor([tj.encode("a red apple")])
    with pytest.raises(ValueError, match="RepetitionPenaltyLogitsProcessor"):
        GenerationMixin.generate(janus, ids, generation_mode="image", generation_config=janus_config(3.0),
                                 repetition_penalty=1.5, custom_generate=hf.generate)


@pytest.mark.gpu
def test_cuda_emu3_greedy_gives_transformers_tokens():
    """GPU check: the loop on CUDA (float32, so the batched and transformers' own forwards
    round alike): inputs on the device, records on the host, the sequences back on the device."""
    model = te.tiny_emu3().to("cuda")
    ids, kwargs = emu3_inputs(te.PROMPTS, 3.0)
    ids = ids.to("cuda")
    kwargs = {k: v.to("cuda") if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    ref = model.generate(ids, **kwargs)
    out = model.generate(ids, custom_generate=hf.generate, method="scd-mc", window=6, **kwargs)
    assert out.device.type == "cuda" and torch.equal(out, ref)


# -- the Emu3 recipe of docs/transformers.md, as written, on a tiny Emu3 saved as a checkpoint --

RECIPE_GRID = 4                                      # the tiny processor's image: 4 x 4 codes


def tiny_emu3_checkpoint(folder):
    """A tiny random Emu3 with a processor of Emu3's special tokens (a one-character-per-token
    tokenizer), saved where `from_pretrained` reads it."""
    from tokenizers import Regex, Tokenizer, models as token_models, pre_tokenizers
    from transformers import (Emu3Config, Emu3ForConditionalGeneration, Emu3ImageProcessor, Emu3Processor,
                              Emu3TextConfig, Emu3VQVAEConfig, PreTrainedTokenizerFast)

    specials = {"pad_token": "<|endoftext|>", "bos_token": "<|extra_203|>", "eos_token": "<|extra_204|>"}
    extra = {"image_token": "<image>", "boi_token": "<|image start|>", "eoi_token": "<|image end|>",
             "image_wrapper_token": "<|image token|>", "eof_token": "<|extra_201|>"}
    vocab = {chr(c): c - 32 for c in range(32, 127)}
    for token in [*specials.values(), *extra.values(), "<|extra_200|>"]:
        vocab[token] = len(vocab)
    words = Tokenizer(token_models.WordLevel(dict(vocab), unk_token=" "))
    words.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, extra_special_tokens=extra, **specials)
    Emu3Processor(Emu3ImageProcessor(), tokenizer).save_pretrained(folder)
    vocab.update({f"<|visual token{i:06d}|>": len(vocab) for i in range(te.K)})
    torch.manual_seed(0)
    text = Emu3TextConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                          pad_token_id=vocab[specials["pad_token"]], bos_token_id=vocab[specials["bos_token"]],
                          eos_token_id=vocab[specials["eos_token"]])
    vq = Emu3VQVAEConfig(codebook_size=te.K, embed_dim=4, latent_channels=4, base_channels=32, channel_multiplier=[1, 1],
                         num_res_blocks=1, attn_resolutions=[], hidden_size=32, temporal_downsample_factor=1)
    model = Emu3ForConditionalGeneration(Emu3Config(text_config=text, vq_config=vq, vocabulary_map=vocab)).eval()
    spread(model.model.text_model, 0.15)
    spread(model.lm_head, 0.15, seed=1)
    model.save_pretrained(folder)


def test_the_emu3_recipe_runs_as_written(tmp_path, monkeypatch, capsys):
    """docs/transformers.md's Emu3 block, its checkpoint id replaced by a tiny Emu3 saved here and
    without `device_map="cuda"` (the model stays on the CPU); the tiny processor draws a 4 x 4
    image (its class default is 90 x 90)."""
    import re
    from pathlib import Path

    from transformers import Emu3Processor

    tiny_emu3_checkpoint(tmp_path)
    monkeypatch.setattr(Emu3Processor, "image_area", (8 * RECIPE_GRID) ** 2)
    doc = (Path(__file__).resolve().parents[1] / "docs" / "transformers.md").read_text()
    section = doc.split("\n## Emu3\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert block.count('"BAAI/Emu3-Gen-hf"') == 2 and block.count(', device_map="cuda"') == 1
    code = block.replace('"BAAI/Emu3-Gen-hf"', repr(str(tmp_path))).replace(', device_map="cuda"', "")
    scope = {}
    exec(compile(code, "docs/transformers.md (Emu3)", "exec"), scope)
    out, codes, image = scope["out"], scope["codes"], scope["image"]
    assert codes.shape == (1, RECIPE_GRID * (RECIPE_GRID + 1) + 3)
    assert image.shape[0] == 1 and image.ndim == 4                          # decoded by the VQ-VAE
    assert f"{out.nfe} passes for {codes.shape[1]} tokens" in capsys.readouterr().out


def test_emu3_fresh_drafts_are_tokens_its_constraints_allow(emu3):
    """The processors allow visual codes at Emu3's first generated position, so fresh drafts
    are visual codes (uniform over them), never the text tokens p has no mass on: every token
    a pass feeds is a code or one of the forced tokens."""
    ids, kwargs = emu3_inputs(te.PROMPTS[:1], 3.0)
    kwargs.update(do_sample=True, top_k=20, return_dict_in_generate=True)
    allowed = {te.code_to_bpe(i) for i in range(te.K)} | {te.EOL, te.EOF, te.EOI, te.EOS}
    fed = set()
    for seed in range(4):
        out = emu3.generate(ids, custom_generate=hf.generate, method="sjd", window=8, seed=seed, **kwargs)
        fed |= {int(t) for r in out.run.iterations for t in r.window_tokens.flatten()}
    assert fed <= allowed and len(fed & {te.code_to_bpe(i) for i in range(te.K)}) > 20
