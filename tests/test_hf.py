"""`scd_core.hf.generate` as transformers' `custom_generate` on a plain LlamaForCausalLM, no
adapter: greedy runs give transformers' own tokens (left padding, end-of-sequence and padding,
prefix processors), the streamer hears each pass's tokens, and what cannot be done exactly is
refused by name."""
import functools

import pytest
import torch

import scd_core.hf as hf
from hf_util import tiny_causal, tiny_llama
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation.streamers import BaseStreamer

METHODS = ["ar", "sjd", "scd-mc", "scd-gumbel"]
PAD = 0


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(pad_token_id=PAD)


def prompts():
    ids = torch.tensor([[5, 6, 7, 8, 11], [PAD, PAD, 9, 10, 3]])          # the second row left-padded
    return ids, (ids != PAD).long()


def ours(model, method, window=6, **kwargs):
    ids, mask = prompts()
    return model.generate(ids, attention_mask=mask, custom_generate=hf.generate, method=method, window=window,
                          **kwargs)


def theirs(model, **kwargs):
    ids, mask = prompts()
    return model.generate(ids, attention_mask=mask, **kwargs)


@pytest.mark.parametrize("method", METHODS)
def test_greedy_gives_transformers_tokens(llama, method):
    ref = theirs(llama, max_new_tokens=24, do_sample=False)
    assert len(set(ref[:, 5:].flatten().tolist())) > 10                       # a comparison with teeth
    assert torch.equal(ours(llama, method, max_new_tokens=24, do_sample=False), ref)


@pytest.mark.parametrize("method", ["sjd", "scd-mc"])
def test_greedy_with_prefix_processors_gives_transformers_tokens(llama, method):
    """Repetition penalty, no repeated 2-grams, a sequence bias and a minimum length depend on
    the prefix: each window position gets them from its own prefix."""
    settings = dict(max_new_tokens=24, do_sample=False, repetition_penalty=1.8, no_repeat_ngram_size=2,
                    sequence_bias={(23,): -5.0}, min_new_tokens=4, eos_token_id=23)
    ref = theirs(llama, **settings)
    plain = theirs(llama, max_new_tokens=24, do_sample=False)
    assert not torch.equal(ref, plain)                                        # the processors changed the tokens
    assert torch.equal(ours(llama, method, **settings), ref)


@pytest.mark.parametrize("method", ["sjd", "scd-mc"])
def test_prefix_allowed_tokens_fn_sees_each_row_with_its_batch_index(llama, method):
    """Rows accept different lengths, so their window positions have prefixes of different
    lengths; the function still gets each row's own index (row 0: even tokens after an odd
    one, row 1: tokens below 25)."""
    def allowed(batch_id, sent):
        if batch_id == 0:
            return list(range(0, 50, 2)) if int(sent[-1]) % 2 else list(range(50))
        return list(range(25))

    settings = dict(max_new_tokens=24, do_sample=False, prefix_allowed_tokens_fn=allowed)
    ref = theirs(llama, **settings)
    assert (ref[1, 5:] < 25).all() and not torch.equal(ref, theirs(llama, max_new_tokens=24, do_sample=False))
    out = ours(llama, method, return_dict_in_generate=True, **settings)
    assert torch.equal(out.sequences, ref)
    starts = torch.stack([r.start for r in out.run.iterations[1:]])
    assert (starts[:, 0] != starts[:, 1]).any()                               # rows at different positions


@pytest.mark.parametrize("method", METHODS)
def test_end_of_sequence_stops_each_row_and_pads_it(llama, method):
    plain = theirs(llama, max_new_tokens=24, do_sample=False)
    eos = int(plain[0, 5 + 6])                                                # row 0 ends at its 7th token
    ref = theirs(llama, max_new_tokens=24, do_sample=False, eos_token_id=eos)
    assert ref.shape[1] > 5 + 7 and (ref[0, 5 + 7:] == PAD).all()            # row 0 ended and was padded
    out = ours(llama, method, max_new_tokens=24, do_sample=False, eos_token_id=eos, return_dict_in_generate=True)
    assert torch.equal(out.sequences, ref)


def test_output_reports_passes_and_acceptance(llama):
    out = ours(llama, "scd-mc", window=8, max_new_tokens=24, do_sample=True, top_k=5, seed=3,
               return_dict_in_generate=True)
    assert out.sequences.shape == (2, 5 + 24)
    assert 1 <= out.nfe <= 24 and out.nfe == out.run.nfe == len(out.run.iterations)
    assert 0 <= out.acceptance_rate <= 1
    assert out.step_compression == pytest.approx(24 / out.nfe)
    again = ours(llama, "scd-mc", window=8, max_new_tokens=24, do_sample=True, top_k=5, seed=3)
    assert torch.equal(again, out.sequences)                                  # a seed fixes the run


class Collect(BaseStreamer):
    def __init__(self):
        self.puts, self.ended = [], False

    def put(self, value):
        self.puts.append(value.clone())

    def end(self):
        self.ended = True


def test_streamer_hears_the_prompt_then_each_pass_commits(llama):
    ids = torch.tensor([[5, 6, 7, 8, 11]])
    streamer = Collect()
    loop = functools.partial(hf.generate, streamer=streamer)
    out = llama.generate(ids, custom_generate=loop, method="scd-mc", window=6, max_new_tokens=20,
                         do_sample=False, return_dict_in_generate=True)
    assert streamer.ended and torch.equal(streamer.puts[0], ids)
    heard = torch.cat([p.reshape(1, -1) for p in streamer.puts], 1)
    assert torch.equal(heard, out.sequences)
    committed = [int(r.committed[0]) for r in out.run.iterations]
    assert [p.numel() for p in streamer.puts[1:]] == [c for c in committed if c > 0]
    assert max(committed) > 1                                                 # some pass committed several


class Unknown(LogitsProcessor):
    def __call__(self, input_ids, scores):
        return scores


class RepetitionPenaltyLogitsProcessor(LogitsProcessor):      # a transformers name, not transformers' class
    def __call__(self, input_ids, scores):
        return scores


@pytest.mark.parametrize("settings,named", [
    (dict(do_sample=True, min_p=0.1), "MinPLogitsWarper"),
    (dict(do_sample=True, typical_p=0.5), "TypicalLogitsWarper"),
    (dict(logits_processor=LogitsProcessorList([Unknown()])), "Unknown"),
    (dict(logits_processor=LogitsProcessorList([RepetitionPenaltyLogitsProcessor()])),
     "test_hf.RepetitionPenaltyLogitsProcessor"),
    (dict(num_beams=2), "num_beams"),
    (dict(output_scores=True, return_dict_in_generate=True), "output_scores"),
    (dict(max_time=60.0), "MaxTimeCriteria"),
])
def test_what_cannot_be_exact_is_refused_by_name(llama, settings, named):
    with pytest.raises(ValueError, match=named):
        ours(llama, "scd-mc", max_new_tokens=4, **settings)


def test_bad_engine_arguments_are_named(llama):
    with pytest.raises(ValueError, match="method"):
        ours(llama, "fast", max_new_tokens=4)
    with pytest.raises(ValueError, match="window"):
        ours(llama, "scd-mc", window=1, max_new_tokens=4)


def test_importing_the_loop_imports_no_transformers():
    from test_library_imports import loaded_after
    assert "transformers" not in loaded_after("import scd_core.hf")
    assert "transformers" in loaded_after("import scd_core.hf, transformers")      # the check can see it loaded


# -- models and settings the loop cannot run exactly are refused by name ----------------------

def short(model, method="scd-mc", **kwargs):
    ids = torch.tensor([[5, 6, 7, 8, 11]])
    return model.generate(ids, custom_generate=hf.generate, method=method, window=4, **kwargs)


@pytest.mark.parametrize("family", ["Mistral", "Phi3"])
def test_sliding_window_attention_runs_within_its_window_and_is_refused_past_it(family):
    """Mistral and Phi-3 set `sliding_window` without layer types: every layer attends to the
    last 12 tokens. Within 12 tokens that is full attention, and the loop gives transformers'
    greedy tokens; a longer run is refused by name (there transformers' tokens are others than
    full attention's)."""
    model = tiny_causal(f"{family}Config", f"{family}ForCausalLM", sliding_window=12)
    within = dict(max_new_tokens=8, do_sample=False)                           # 5 + 8 - 1 = 12 tokens fed
    assert torch.equal(short(model, **within), model.generate(torch.tensor([[5, 6, 7, 8, 11]]), **within))
    with pytest.raises(ValueError, match="sliding_window=12"):
        short(model, max_new_tokens=9, do_sample=False)
    full = tiny_causal(f"{family}Config", f"{family}ForCausalLM", sliding_window=None)
    past = dict(max_new_tokens=24, do_sample=False)
    ids = torch.tensor([[5, 6, 7, 8, 11]])
    assert not torch.equal(model.generate(ids, **past), full.generate(ids, **past))   # the window matters there


@pytest.mark.parametrize("config,named", [
    (dict(layer_types=["full_attention", "sliding_attention"], sliding_window=4), "sliding_window=4"),
    (dict(layer_types=["full_attention", "sliding_attention"], sliding_window=64), None),
])
def test_sliding_layers_are_refused_past_their_window(config, named):
    model = tiny_causal("Qwen2Config", "Qwen2ForCausalLM", use_sliding_window=True, **config)
    if named is None:
        settings = dict(max_new_tokens=16, do_sample=False)
        assert torch.equal(short(model, **settings), model.generate(torch.tensor([[5, 6, 7, 8, 11]]), **settings))
    else:
        with pytest.raises(ValueError, match=named):
            short(model, max_new_tokens=16, do_sample=False)


def test_chunked_attention_is_refused_past_its_chunk():
    model = tiny_causal("Llama4TextConfig", "Llama4ForCausalLM", head_dim=8, intermediate_size_mlp=64,
                        num_local_experts=2, attention_chunk_size=8)
    with pytest.raises(ValueError, match="attention_chunk_size=8"):
        short(model, max_new_tokens=16, do_sample=False)


def test_recurrent_layers_are_refused():
    import transformers

    mamba = transformers.MambaForCausalLM(transformers.MambaConfig(vocab_size=50, hidden_size=16, state_size=4,
                                                                   num_hidden_layers=1)).eval()
    with pytest.raises(ValueError, match="MambaForCausalLM has recurrent or state-space layers"):
        short(mamba, max_new_tokens=4, do_sample=False)
    jamba = tiny_causal("JambaConfig", "JambaForCausalLM", num_attention_heads=2, num_key_value_heads=1,
                        num_experts=2, expert_layer_period=2, attn_layer_period=2, attn_layer_offset=1,
                        mamba_d_state=4, mamba_expand=1, use_mamba_kernels=False)
    with pytest.raises(ValueError, match="JambaForCausalLM has recurrent or state-space layers"):
        short(jamba, max_new_tokens=4, do_sample=False)


def test_attention_other_than_eager_or_sdpa_is_refused(llama):
    eager = tiny_llama(pad_token_id=PAD)
    eager.set_attn_implementation("eager")
    assert torch.equal(ours(eager, "scd-mc", max_new_tokens=12, do_sample=False),
                       theirs(llama, max_new_tokens=12, do_sample=False))
    flex = tiny_llama(pad_token_id=PAD)
    flex.set_attn_implementation("flex_attention")
    with pytest.raises(ValueError, match="attn_implementation: LlamaForCausalLM runs 'flex_attention'"):
        ours(flex, "scd-mc", max_new_tokens=4, do_sample=False)


@pytest.mark.parametrize("settings,named", [
    (dict(prompt_lookup_num_tokens=3), "prompt_lookup_num_tokens"),
    (dict(use_cache=False), "use_cache"),
    (dict(cache_implementation="static"), "cache_implementation"),
    (dict(do_sample=True, top_k=1), "top_k: 1 with do_sample=True"),
])
def test_settings_the_loop_would_not_honour_are_refused(llama, settings, named):
    with pytest.raises(ValueError, match=named):
        ours(llama, "scd-mc", max_new_tokens=4, **settings)


def test_position_ids_other_than_the_masks_are_refused(llama):
    ids, mask = prompts()
    own = mask.cumsum(-1) - 1                                                 # transformers' own: accepted
    out = llama.generate(ids, attention_mask=mask, position_ids=own.masked_fill(mask == 0, 1), max_new_tokens=8,
                         do_sample=False, custom_generate=hf.generate, method="sjd", window=4)
    assert torch.equal(out, theirs(llama, max_new_tokens=8, do_sample=False))
    with pytest.raises(ValueError, match="position_ids"):
        llama.generate(ids, attention_mask=mask, position_ids=own + 3, max_new_tokens=8, do_sample=False,
                       custom_generate=hf.generate)


def test_the_output_is_a_model_output(llama):
    out = ours(llama, "scd-mc", max_new_tokens=8, do_sample=False, return_dict_in_generate=True)
    from transformers.utils import ModelOutput

    assert isinstance(out, ModelOutput) and isinstance(out, hf.GenerateOutput)
    assert out["sequences"] is out.sequences is out[0]
    assert out["nfe"] == out.nfe == out.run.nfe and 0 <= out["acceptance_rate"] <= 1
    assert out.step_compression == pytest.approx(8 / out.nfe)
