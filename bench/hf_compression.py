"""Step compression through transformers' `generate` (`custom_generate=scd_core.hf.generate`)
against scd_core's own adapters, on the tests' tiny random configs (offline, CPU, a minute).

    python -m bench hf-compression                  # windows 6 and 16, seeds 0..7
    python -m bench hf-compression --seeds 4 --windows 6

Per model, method and window: the mean forward passes and the mean step compression over
one-row runs (AR's forward passes for the same tokens / this run's passes;
`scd_core.trace.step_compression`), sampled at temperature 1 with top-k 20 and guidance 3. Through `generate` the engine decodes every token
transformers generates (Emu3: the codes, the forced line ends, end of frame, image and
sequence, over the whole vocabulary, constrained by `prefix_allowed_tokens_fn`); the adapter
decodes the grid of codes alone and feeds the forced tokens itself. Janus-Pro's image mode
runs its adapter's session through either door: the same tokens, the same passes.
"""
from __future__ import annotations

import argparse
import statistics
import warnings

import torch


METHODS = ["sjd", "scd-mc", "scd-gumbel"]


def emu3_rows(seeds, method, window):
    import scd_core
    import scd_core.hf as hf
    import test_hf_models as thm
    from scd_core.models.emu3 import Emu3TokenModel

    te = thm.te
    model = te.tiny_emu3()
    tm = Emu3TokenModel(model, encode=te.encode, grid=(te.H, te.W), negative_prompt=te.NEG, positive_suffix="",
                        pad_token_id=te.PAD)
    path, adapter = [], []
    for s in seeds:
        ids, kwargs = thm.emu3_inputs(te.PROMPTS[:1], 3.0)
        kwargs.update(do_sample=True, top_k=20, return_dict_in_generate=True)
        out = model.generate(ids, custom_generate=hf.generate, method=method, window=window, seed=s, **kwargs)
        path.append((out.nfe, out.step_compression))
        run = scd_core.generate(tm, te.PROMPTS[:1], method=method, window=window, seed=s, top_k=20, cfg_scale=3.0)
        adapter.append((run.nfe, run.step_compression))
    return path, adapter


def janus_rows(seeds, method, window):
    import scd_core
    import scd_core.hf as hf
    import test_hf_models as thm
    from scd_core.models.janus import JanusTokenModel
    from transformers import GenerationMixin

    tj = thm.tj
    model = tj.tiny_janus()
    tm = JanusTokenModel(model, encode=tj.encode, bos_token_id=tj.BOS, boi_token_id=tj.BOI, pad_token_id=tj.PAD)
    ids = torch.tensor([tj.encode(tj.PROMPTS[0])])
    path, adapter = [], []
    for s in seeds:
        config = thm.janus_config(3.0)
        config.update(do_sample=True, top_k=20, return_dict_in_generate=True)
        out = GenerationMixin.generate(model, ids, generation_mode="image", generation_config=config,
                                       custom_generate=hf.generate, method=method, window=window, seed=s)
        path.append((out.nfe, out.step_compression))
        run = scd_core.generate(tm, tj.PROMPTS[:1], method=method, window=window, seed=s, top_k=20, cfg_scale=3.0)
        adapter.append((run.nfe, run.step_compression))
        assert torch.equal(out.sequences.cpu(), run.tokens), "Janus: the two doors gave different tokens"
    return path, adapter


def llama_rows(seeds, method, window):
    import scd_core.hf as hf
    from hf_util import tiny_llama

    model = tiny_llama(vocab_size=64, std=0.5, pad_token_id=0)
    ids = torch.tensor([[5, 6, 7, 8, 11]])
    path = []
    for s in seeds:
        neg = torch.tensor([[3, 3]])
        out = model.generate(ids, custom_generate=hf.generate, method=method, window=window, seed=s, do_sample=True,
                             top_k=20, guidance_scale=3.0, negative_prompt_ids=neg, max_new_tokens=32,
                             return_dict_in_generate=True)
        path.append((out.nfe, out.step_compression))
    return path, None


def cell(runs) -> str:
    """Mean passes and mean step compression of (nfe, compression) pairs."""
    if runs is None:
        return "-"
    return f"{statistics.mean(n for n, _ in runs):.1f}, {statistics.mean(c for _, c in runs):.2f}x"


MODELS = {"Emu3 (3 x 4 codes)": emu3_rows, "Janus-Pro image mode (4 x 4 codes)": janus_rows,
          "LlamaForCausalLM (32 tokens, V 64)": llama_rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--windows", default="6,16")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    from transformers.utils import logging
    logging.set_verbosity_error()
    seeds = range(args.seeds)
    print(f"# step compression, mean of {args.seeds} one-row runs (top-k 20, guidance 3)")
    print("| model | method | window | through `generate`: passes, compression | scd_core adapter: passes, "
          "compression |\n|---|---|---|---|---|")
    for name, rows in MODELS.items():
        for window in (int(w) for w in args.windows.split(",")):
            for method in METHODS:
                with torch.inference_mode(False):
                    path, adapter = rows(seeds, method, window)
                print(f"| {name} | {method} | {window} | {cell(path)} | {cell(adapter)} |", flush=True)
    return 0
