"""The Hub-ready folder `hub/scd/` loaded by transformers as a `custom_generate` repository
(`custom_generate="hub/scd", trust_remote_code=True`): greedy runs with method="scd-mc",
window=6 give transformers' own tokens on a tiny Emu3 (negative-prompt guidance,
`prefix_allowed_tokens_fn`) and a tiny LlamaForCausalLM, with no adapter; the streamer reaches
the loop."""
from pathlib import Path

import pytest
import torch

import test_hf_models as models
from hf_util import tiny_llama
from test_hf import Collect

HUB = str(Path(__file__).resolve().parents[1] / "hub" / "scd")


@pytest.fixture(autouse=True, scope="module")
def modules_cache(tmp_path_factory):
    """transformers copies a repository's code into its modules cache: a temporary one here."""
    import transformers.dynamic_module_utils as dynamic
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dynamic, "HF_MODULES_CACHE", str(tmp_path_factory.mktemp("modules")))
        yield


def test_llama_greedy_from_the_folder_gives_transformers_tokens():
    llama = tiny_llama(pad_token_id=0)
    ids = torch.tensor([[5, 6, 7, 8, 11], [0, 0, 9, 10, 3]])
    settings = dict(attention_mask=(ids != 0).long(), max_new_tokens=24, do_sample=False)
    ref = llama.generate(ids, **settings)
    out = llama.generate(ids, custom_generate=HUB, trust_remote_code=True, method="scd-mc", window=6,
                         return_dict_in_generate=True, **settings)
    assert torch.equal(out.sequences, ref)
    assert out.nfe < 24                                                        # it did run the engine


@pytest.mark.parametrize("prompts", [models.te.PROMPTS[:1], models.te.PROMPTS])
def test_emu3_greedy_from_the_folder_gives_transformers_tokens(prompts):
    emu3 = models.te.tiny_emu3()
    ids, kwargs = models.emu3_inputs(prompts, 3.0)
    ref = emu3.generate(ids, **kwargs)
    out = emu3.generate(ids, custom_generate=HUB, trust_remote_code=True, method="scd-mc", window=6, **kwargs)
    assert torch.equal(out, ref)


def test_the_folder_passes_the_streamer_to_the_loop():
    llama = tiny_llama(pad_token_id=0)
    ids = torch.tensor([[5, 6, 7, 8, 11]])
    streamer = Collect()
    out = llama.generate(ids, custom_generate=HUB, trust_remote_code=True, method="scd-mc", window=6,
                         max_new_tokens=16, do_sample=False, streamer=streamer)
    assert streamer.ended and len(streamer.puts) > 2
    assert torch.equal(torch.cat([p.reshape(1, -1) for p in streamer.puts], 1), out)


def test_the_folder_needs_trust_remote_code():
    llama = tiny_llama(pad_token_id=0)
    with pytest.raises(ValueError, match="trust_remote_code"):
        llama.generate(torch.tensor([[5, 6]]), custom_generate=HUB, method="scd-mc", max_new_tokens=4)


def test_janus_image_mode_through_the_folder_function_gives_transformers_tokens():
    """Janus-Pro's own `generate` takes no `custom_generate` in image mode: the folder's
    function, loaded by transformers, is called with the model."""
    janus = models.tj.tiny_janus()
    ids = torch.tensor([models.tj.encode(models.tj.PROMPTS[0])])
    ref = janus.generate(ids, attention_mask=torch.ones_like(ids), generation_mode="image",
                         generation_config=models.janus_config(3.0))
    scd = janus.load_custom_generate(HUB, trust_remote_code=True)
    out = scd(janus, ids, attention_mask=torch.ones_like(ids), generation_mode="image",
              generation_config=models.janus_config(3.0), method="scd-mc", window=6)
    assert torch.equal(out, ref)


def test_the_folder_function_takes_the_model_first_or_by_keyword():
    llama = tiny_llama(pad_token_id=0)
    ids = torch.tensor([[5, 6, 7, 8, 11]])
    settings = dict(max_new_tokens=12, do_sample=False, method="sjd", window=4)
    scd = llama.load_custom_generate(HUB, trust_remote_code=True)
    first, keyword = scd(llama, ids, **settings), scd(ids, model=llama, **settings)
    assert torch.equal(first, keyword) and torch.equal(first, llama.generate(ids, max_new_tokens=12, do_sample=False))
    with pytest.raises(ValueError, match="assistant_model"):
        scd(llama, ids, assistant_model=llama, **settings)


def test_a_model_repository_holding_the_folder_decodes_with_it(tmp_path):
    """A model saved with the folder beside it: `from_pretrained(trust_remote_code=True)` binds
    the folder's `generate` to the model (by keyword), and `model.generate(ids)` runs it."""
    import shutil

    from transformers import AutoModelForCausalLM

    tiny_llama(pad_token_id=0).save_pretrained(tmp_path)
    shutil.copytree(Path(HUB) / "custom_generate", tmp_path / "custom_generate")
    model = AutoModelForCausalLM.from_pretrained(tmp_path, trust_remote_code=True)
    ids = torch.tensor([[5, 6, 7, 8, 11]])
    out = model.generate(ids, max_new_tokens=12, do_sample=False, method="scd-mc", window=4,
                         return_dict_in_generate=True)
    assert out.run.method == "scd-mc" and out.nfe == len(out.run.iterations)     # the folder's loop ran
    assert torch.equal(out.sequences, tiny_llama(pad_token_id=0).generate(ids, max_new_tokens=12, do_sample=False))
