"""Every shipped model and adapter, built small for the tests, in a given dtype: the embedded
models as shipped (`load_model(name, dtype=...)`), the real-model adapters on tiny random
configs of their classes, built as their own tests build them (offline, CPU), with weights
large enough that logits depend on the context (greedy runs that vary).

`build(name, dtype, tmp_path_factory) -> (model, prompts, cfg_scale)`: two prompts the model
knows (one for the 512-token clip model, the slowest to decode); `builds(tmp_path_factory)`:
the same, each model built once; `built`, that as a module's fixture (import it there).
"""
from __future__ import annotations

import pytest
import torch

from scd_core.models import load_model

PROMPTS = ["a red apple", "two cats on a long sofa"]
EMBEDDED = ["texture", "tiny", "tiny-64", "tiny-video", "toy", "toy-grid", "random-logits"]
ADAPTERS = ["llamagen", "cosmos", "janus-pro", "emu3", "lumina-mgpt"]
NAMES = EMBEDDED + ADAPTERS
CFG = {"texture": 2.0, "tiny": 3.0, "tiny-64": 3.0, "tiny-video": 3.0, "toy": 2.0, "toy-grid": 2.0, "random-logits": 1.0}
EMBEDDED_PROMPTS = {"texture": ["lava rings", "ice waves"], "tiny": ["red heart", "cat face"],
                    "tiny-64": ["red heart", "cat face"],
                    "tiny-video": ["red heart zooming in"]}


def spread(module: torch.nn.Module, std: float = 0.15, seed: int = 0) -> None:
    """Random weights of `std` for every matrix of `module` (in its dtype)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def _janus(dtype, device):
    import test_models_janus as tj
    from scd_core.models.janus import JanusTokenModel
    return JanusTokenModel(tj.tiny_janus().to(device, dtype), encode=tj.encode, bos_token_id=tj.BOS, boi_token_id=tj.BOI,
                           pad_token_id=tj.PAD, name="tiny-janus"), PROMPTS, 3.0


def _emu3(dtype, device):
    import test_models_emu3 as te
    from scd_core.models.emu3 import Emu3TokenModel
    return Emu3TokenModel(te.tiny_emu3().to(device, dtype), encode=te.encode, grid=(te.H, te.W), negative_prompt=te.NEG,
                          positive_suffix="", pad_token_id=te.PAD, name="tiny-emu3"), PROMPTS, 3.0


def _lumina(dtype, device):
    import test_models_lumina as tl
    from scd_core.models.lumina_vqgan import build_vqmodel
    from transformers import ChameleonForConditionalGeneration
    torch.manual_seed(0)
    model = ChameleonForConditionalGeneration(tl.tiny_config()).eval()
    spread(model.model.layers)
    vqgan = build_vqmodel(tl.VQ_CFG).eval().to(device)      # a random pixel decoder of the same class
    return (tl.LuminaTokenModel(model.to(device, dtype), tl.encode, tl.GRID, layout=tl.LAYOUT, prompt_template="{prompt}",
                                vqgan=vqgan), PROMPTS, 3.0)


def _llamagen(dtype, device):
    import test_models_llamagen as tg
    from scd_core.models.llamagen import LlamaGenTokenModel
    tm = tg.spread(tg.make(tg.C2I))
    return LlamaGenTokenModel(tm.gpt.to(device, dtype), tg.make(tg.C2I).vq.to(device), None), ["3", "7"], 4.0


def _cosmos(dtype, tmp_path_factory, device="cpu"):
    import test_models_cosmos as tc
    from scd_core.models import cosmos
    root = tmp_path_factory.mktemp("cosmos")
    folder = root / "Cosmos-1.0-Autoregressive-Tiny"
    folder.mkdir()
    torch.save(tc.synthetic_checkpoint(tc.TINY), folder / "model.pt")
    tc.save_tokenizer(root / cosmos.TOKENIZER_FOLDER)
    clips = [tc.write_clip(root / f"clip{i}.mp4") for i in range(2)]
    model = cosmos.load_cosmos(str(folder), device=device, dtype=dtype, config=tc.TINY)
    spread(model.net, std=0.2)                              # larger weights: context-dependent logits
    return model, clips, 1.0


def build(name: str, dtype: torch.dtype = torch.float32, tmp_path_factory=None, device: str = "cpu", **kwargs):
    """(model, prompts, cfg_scale) of a shipped model or adapter in `dtype` on `device`
    (`kwargs`: the embedded model's own options, e.g. a smaller grid)."""
    if name in EMBEDDED:
        return load_model(name, dtype=dtype, device=device, **kwargs), EMBEDDED_PROMPTS.get(name, PROMPTS), CFG[name]
    if name == "cosmos":
        return _cosmos(dtype, tmp_path_factory, device)
    return {"llamagen": _llamagen, "janus-pro": _janus, "emu3": _emu3, "lumina-mgpt": _lumina}[name](dtype, device)


def builds(tmp_path_factory, texture_grid=(8, 8)):
    """`get(name) -> (model, prompts, cfg_scale)`: `build(name)` in float32 on the CPU, made once
    per name, for a module-scoped fixture; the texture model at `texture_grid` (its passes are
    alike at any grid: a short run), the 512-token clip model with one prompt."""
    cache = {}

    def get(name: str):
        if name not in cache:
            small = dict(grid=texture_grid) if name == "texture" else {}
            model, prompts, cfg = build(name, torch.float32, tmp_path_factory, **small)
            cache[name] = model, (prompts[:1] if name == "tiny-video" else prompts), cfg
        return cache[name]
    return get


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """`builds(tmp_path_factory)`, once per test module."""
    return builds(tmp_path_factory)


def build_meta(name: str):
    """(model, prompts, cfg_scale, start) of a shipped model or adapter with its weights on
    `device="meta"` (shapes only: any value read back, or a CPU tensor met, fails there);
    `start(prompts, cfg_scale)` makes a session whose prefill runs on meta as well (Cosmos:
    from conditioning tokens made on meta, fed in as a clip's would be)."""
    meta = torch.device("meta")
    if name in EMBEDDED:
        small = dict(grid=(12, 12)) if name == "texture" else {}
        model = load_model(name, device="meta", **small)
        return model, EMBEDDED_PROMPTS.get(name, PROMPTS)[:1], CFG[name], model.start
    if name == "janus-pro":
        import test_models_janus as tj
        from scd_core.models.janus import JanusTokenModel
        model = JanusTokenModel(tj.tiny_janus().to(meta), encode=tj.encode, bos_token_id=tj.BOS,
                                boi_token_id=tj.BOI, pad_token_id=tj.PAD, name="tiny-janus")
        return model, PROMPTS, 3.0, model.start
    if name == "emu3":
        import test_models_emu3 as te
        from scd_core.models.emu3 import Emu3TokenModel
        model = Emu3TokenModel(te.tiny_emu3().to(meta), encode=te.encode, grid=(te.H, te.W), negative_prompt=te.NEG,
                               positive_suffix="", pad_token_id=te.PAD, name="tiny-emu3")
        return model, PROMPTS, 3.0, model.start
    if name == "lumina-mgpt":
        import test_models_lumina as tl
        from transformers import ChameleonForConditionalGeneration
        model = tl.LuminaTokenModel(ChameleonForConditionalGeneration(tl.tiny_config()).eval().to(meta), tl.encode,
                                    tl.GRID, layout=tl.LAYOUT, prompt_template="{prompt}")
        return model, PROMPTS, 3.0, model.start
    if name == "llamagen":
        import test_models_llamagen as tg
        from scd_core.models.llamagen import LlamaGenTokenModel
        model = LlamaGenTokenModel(tg.make(tg.C2I).gpt.to(meta), None, None)
        return model, ["3", "7"], 4.0, model.start
    if name == "cosmos":
        import test_models_cosmos as tc
        from scd_core.models import cosmos
        model = cosmos.CosmosVideoModel(cosmos.random_model(tc.TINY).to(meta), name="tiny-cosmos", device=meta)

        def start(prompts, cfg_scale):
            prefix = torch.zeros(len(prompts), model.cfg.prefix_len, dtype=torch.long, device=meta)
            return cosmos.CosmosSession(model, prefix)
        return model, ["clip0.mp4", "clip1.mp4"], 1.0, start
    raise ValueError(f"name: no meta build of {name!r}")
