"""The TokenModel contract (scd_core.protocols, DESIGN.md), checked on every shipped model and
adapter: the embedded models as shipped, the real-model adapters on tiny random configs of
their classes (built as their own tests build them: offline, CPU).

For each: `vocab_size` and `grid`; `start(prompts, cfg_scale)` gives `first_logits` [B, V];
`step(tokens, start)` returns [B, W, V]; after a re-feed at smaller starts (forgetting what was
fed at >= start), each row's logits equal those of a fresh session of its prompt alone fed the
same prefix in one step (so rows are independent of their batch-mates, and logits[b, j]
predicts start[b] + j + 1 exactly as the fresh session's position does); `decode` gives one
output per row.
"""
from __future__ import annotations

import math

import pytest
import torch

import rows_util
from scd_core.models import load_model

PROMPTS = ["a red apple", "two cats on a long sofa"]


def _janus():
    pytest.importorskip("transformers")
    import test_models_janus as tj
    from scd_core.models.janus import JanusTokenModel
    return JanusTokenModel(tj.tiny_janus(), encode=tj.encode, bos_token_id=tj.BOS, boi_token_id=tj.BOI,
                           pad_token_id=tj.PAD, name="tiny-janus"), PROMPTS, 3.0


def _emu3():
    pytest.importorskip("transformers")
    import test_models_emu3 as te
    from scd_core.models.emu3 import Emu3TokenModel
    return Emu3TokenModel(te.tiny_emu3(), encode=te.encode, grid=(te.H, te.W), negative_prompt=te.NEG,
                          positive_suffix="", pad_token_id=te.PAD, name="tiny-emu3"), PROMPTS, 3.0


def _lumina():
    pytest.importorskip("transformers")
    import test_models_lumina as tl
    from scd_core.models.lumina_vqgan import build_vqmodel
    from transformers import ChameleonForConditionalGeneration
    torch.manual_seed(0)
    model = ChameleonForConditionalGeneration(tl.tiny_config()).eval()
    vqgan = build_vqmodel(tl.VQ_CFG).eval()                 # a random pixel decoder of the same class
    return (tl.LuminaTokenModel(model, tl.encode, tl.GRID, layout=tl.LAYOUT, prompt_template="{prompt}",
                                vqgan=vqgan), PROMPTS, 3.0)


def _llamagen():
    import test_models_llamagen as tg
    return tg.make(tg.C2I), ["3", "7"], 4.0


def _cosmos(tmp_path_factory):
    import test_models_cosmos as tc
    from scd_core.models import cosmos
    root = tmp_path_factory.mktemp("cosmos")
    folder = root / "Cosmos-1.0-Autoregressive-Tiny"
    folder.mkdir()
    torch.save(tc.synthetic_checkpoint(tc.TINY), folder / "model.pt")
    tc.save_tokenizer(root / cosmos.TOKENIZER_FOLDER)
    clips = [tc.write_clip(root / f"clip{i}.mp4") for i in range(2)]
    model = cosmos.load_cosmos(str(folder), device="cpu", config=tc.TINY)
    with torch.no_grad():                                   # larger weights: context-dependent logits
        g = torch.Generator().manual_seed(0)
        for p in model.net.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model, clips, 1.0


def _shipped(name: str, cfg_scale: float):
    model = load_model(name)
    return model, PROMPTS, cfg_scale


BUILDERS = {
    "texture": lambda f: _shipped("texture", 2.0),
    "tiny": lambda f: _shipped("tiny", 3.0),
    "tiny-video": lambda f: _shipped("tiny-video", 3.0),
    "toy": lambda f: _shipped("toy", 2.0),
    "toy-grid": lambda f: _shipped("toy-grid", 2.0),
    "random-logits": lambda f: _shipped("random-logits", 1.0),
    "llamagen": lambda f: _llamagen(),
    "cosmos": _cosmos,
    "janus-pro": lambda f: _janus(),
    "emu3": lambda f: _emu3(),
    "lumina-mgpt": lambda f: _lumina(),
}
# Its logits are fresh random numbers at every call (it times the engine alone): only the
# shapes of the contract apply.
RANDOM = {"random-logits"}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_model_follows_the_token_model_contract(name, tmp_path_factory):
    model, prompts, cfg_scale = BUILDERS[name](tmp_path_factory)
    V, grid = model.vocab_size, tuple(model.grid)
    assert isinstance(V, int) and V > 1
    assert len(grid) in (2, 3) and all(isinstance(g, int) and g > 0 for g in grid)
    N, B = math.prod(grid), len(prompts)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        s = model.start(prompts, cfg_scale)
        assert tuple(s.first_logits.shape) == (B, V)
        fed = torch.randint(0, V, (B, 4), generator=g)
        assert tuple(s.step(fed, torch.zeros(B, dtype=torch.long)).shape) == (B, 4, V)
        start = torch.tensor([1, 2])[:B]                     # rows rejected at different places
        refeed = torch.randint(0, V, (B, 2), generator=g)
        out = s.step(refeed, start)
        assert tuple(out.shape) == (B, 2, V)
        if name not in RANDOM:
            for b in range(B):
                alone = model.start([prompts[b]], cfg_scale)
                rows_util.assert_close_logits(alone.first_logits[0], s.first_logits[b], f"{name} row {b} first",
                                              rel=1e-5)
                prefix = torch.cat([fed[b, :int(start[b])], refeed[b]])[None]
                ref = alone.step(prefix, torch.zeros(1, dtype=torch.long))[0, int(start[b]):]
                rows_util.assert_close_logits(out[b], ref, f"{name} row {b} after the re-feed", rel=1e-5)
        tokens = torch.randint(0, V, (B, N), generator=g)
        decoded = s.row_decoder(0)(tokens[:1]) if hasattr(s, "row_decoder") else model.decode(tokens)
    assert isinstance(decoded, list) and len(decoded) == (1 if hasattr(s, "row_decoder") else B)
