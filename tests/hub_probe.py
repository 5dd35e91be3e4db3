"""Runs the Hub folder in a process where scd_core cannot be imported (`tests/test_hub_folder.py`
starts it): `python tests/hub_probe.py FOLDER` prints one JSON object.

- `hidden`: whether `import scd_core` failed here, and `loaded`: the scd_core modules imported by
  the end (none, if the folder stands alone);
- `greedy_equal`: a tiny Llama's greedy tokens from the folder equal transformers' own;
- `ties`: a bfloat16 Llama with three tokens tied at the 2nd largest logit at every prefix, top-k
  2: the exact law of its N tokens under transformers' warpers (`joint`, from plain forwards of
  every prefix), and the sequences the folder samples (`folder`, 2,000 rows per method), and again
  with the folder's top-k keeping exactly k tokens (`exactly_k`, a biased variant).
"""
from __future__ import annotations

import itertools
import json
import sys


class HideScdCore:
    """A meta path finder that makes `import scd_core` fail, as where it is not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "scd_core" or name.startswith("scd_core."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


sys.meta_path.insert(0, HideScdCore())

import torch  # noqa: E402
from transformers import TopKLogitsWarper  # noqa: E402

from hf_util import tiny_llama  # noqa: E402

PROMPT, N, ROWS, TOP_K = [3, 0, 2], 3, 2_000, 2
TIED = (1, 2, 3)                         # lm_head rows made equal: their logits tie at every prefix


def tied_model():
    model = tiny_llama(vocab_size=4, std=0.6, seed=0).to(torch.bfloat16)
    with torch.no_grad():
        model.lm_head.weight[list(TIED)] = model.lm_head.weight[TIED[0]].clone()
    return model


@torch.no_grad()
def exact_joint(model) -> tuple[list[float], float]:
    """The law of the N generated tokens (index: base 4, first most significant) under
    transformers' top-k, and the least gap between token 0's logit and the tied ones."""
    joint, gap = torch.ones(1, dtype=torch.float64), float("inf")
    for length in range(N):
        prefixes = torch.tensor(list(itertools.product(range(4), repeat=length)), dtype=torch.long).view(4 ** length, length)
        ids = torch.cat([torch.tensor([PROMPT]).expand(len(prefixes), -1), prefixes], 1)
        logits = model(ids).logits[:, -1].float()
        assert (logits[:, list(TIED)] == logits[:, TIED[:1]]).all()
        gap = min(gap, float((logits[:, 0] - logits[:, TIED[0]]).abs().min()))
        p = TopKLogitsWarper(TOP_K)(None, logits).softmax(-1).double()
        joint = (joint.unsqueeze(1) * p).reshape(-1)
    return joint.tolist(), gap


def sequences(model, folder: str, method: str, seed: int) -> list[int]:
    out = model.generate(torch.tensor([PROMPT] * ROWS), custom_generate=folder, trust_remote_code=True,
                         method=method, window=3, seed=seed, do_sample=True, top_k=TOP_K, max_new_tokens=N)
    tokens = out[:, len(PROMPT):]
    return (tokens * 4 ** torch.arange(N - 1, -1, -1)).sum(1).tolist()


def main(folder: str) -> dict:
    try:
        import scd_core  # noqa: F401
        report = {"hidden": False}
    except ModuleNotFoundError:
        report = {"hidden": True}

    llama = tiny_llama(pad_token_id=0)
    ids = torch.tensor([[5, 6, 7, 8, 11], [0, 0, 9, 10, 3]])
    settings = dict(attention_mask=(ids != 0).long(), max_new_tokens=24, do_sample=False)
    ours = llama.generate(ids, custom_generate=folder, trust_remote_code=True, method="scd-mc", window=6, **settings)
    report["greedy_equal"] = bool(torch.equal(ours, llama.generate(ids, **settings)))

    model = tied_model()
    joint, gap = exact_joint(model)
    report["ties"] = {"joint": joint, "gap": gap,
                      "folder": {m: sequences(model, folder, m, 1_000_000 * (i + 1))
                                 for i, m in enumerate(["scd-mc", "scd-gumbel"])}}
    loop = llama.load_custom_generate(folder, trust_remote_code=True)
    sampling = sys.modules[loop.__module__.rsplit(".", 1)[0] + ".sampling"]
    sampling.top_k_probs = lambda tied, values, support: torch.zeros(tied.shape).scatter_(-1, support, values.softmax(-1))
    report["ties"]["exactly_k"] = sequences(model, folder, "scd-mc", 99)
    report["loaded"] = sorted(m for m in sys.modules if m == "scd_core" or m.startswith("scd_core."))
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
