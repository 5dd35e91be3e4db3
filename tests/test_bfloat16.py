"""bfloat16 end to end on the CPU: every adapter's tiny config and every embedded model, in
bfloat16, through `scd_core.generate` and `scd_core.stream`, every method, chain and tree.

Greedy decoding (temperature 0) is compared with the same model decoded by plain AR. In
bfloat16 a position's logits depend, in their last bits, on how the prefix was fed (one token
at a time, or in windows of different widths: other matrix shapes, other rounding), so where
two tokens' logits lie within that rounding of each other either may legitimately be the
argmax. So each greedy run is checked as greedy decoding of the model: every token it commits
is the argmax, to that rounding (`ROUNDING`, relative to the logits' scale), of the logits AR
gives after the run's own prefix; and it equals the AR run token for token up to the first
position where AR's own choice was such a near tie (there, and only there, they may part).
"""
from __future__ import annotations

import math

import pytest
import torch

import scd_core
import models_util
from scd_core import testing
from scd_core.protocols import can_tree
from scd_core.sampling import SamplingConfig, processed_probs

pytestmark = pytest.mark.slow

BF16 = torch.bfloat16
METHODS = ["sjd", "scd-mc", "scd-gumbel"]
SHAPES = {"chain": (1, 0), "tree": (2, 2)}
WINDOW = 8                                       # the tree (2, 2) feeds 1 + 2 + 4 nodes of it
ROUNDING = 2 ** -5                               # bfloat16 keeps 8 significant bits: a few ulps of the scale
# Small grids for the synthetic models (their cost is per token); the others as shipped.
SMALL = {"texture": {"grid": (8, 8)}, "toy-grid": {"grid": (8, 8), "hidden": 256},
         "random-logits": {"grid": (8, 8), "vocab_size": 512}}
# Its logits are fresh random numbers at every call: no greedy run to compare, only the dtypes.
RANDOM = {"random-logits"}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    built = {}

    def get(name):
        if name not in built:
            built[name] = models_util.build(name, BF16, tmp_path_factory, **SMALL.get(name, {}))
        return built[name]
    return get


@pytest.fixture(scope="module")
def references(models):
    """Each model's greedy AR run in bfloat16 [B, N], and per row the first position where AR's
    own choice was a near tie (N if none)."""
    runs = {}

    def get(name):
        if name not in runs:
            model, prompts, cfg = models(name)
            tokens = scd_core.generate(model, prompts, method="ar", temperature=0, cfg_scale=cfg).tokens
            ties = [near_ties(ar_logits(model, prompt, cfg, tokens[b])).nonzero() for b, prompt in enumerate(prompts)]
            runs[name] = tokens, [t[0].item() if t.numel() else tokens.shape[1] for t in ties]
        return runs[name]
    return get


def ar_logits(model, prompt: str, cfg: float, tokens: torch.Tensor) -> torch.Tensor:
    """[N, V] float32: the logits predicting each position of `tokens` [N] after the ones before
    it, from a session of `prompt` alone fed them in one step."""
    session = model.start([prompt], cfg)
    out = session.step(tokens[None, :-1], torch.zeros(1, dtype=torch.long))[0]
    return torch.cat([session.first_logits[:1], out]).float()


def near_ties(logits: torch.Tensor) -> torch.Tensor:
    """[N] bool: the two largest logits lie within ROUNDING of the logits' scale."""
    top = logits.topk(2, dim=-1).values
    scale = logits.masked_fill(~torch.isfinite(logits), 0).abs().amax(-1).clamp(min=1.0)
    return (top[:, 0] - top[:, 1]) <= ROUNDING * scale


def check_greedy(model, prompts, cfg, tokens: torch.Tensor, reference: torch.Tensor, first_tie: list[int],
                 what: str) -> None:
    for b, prompt in enumerate(prompts):
        logits = ar_logits(model, prompt, cfg, tokens[b])
        chosen = logits.gather(1, tokens[b][:, None])[:, 0]
        scale = logits.masked_fill(~torch.isfinite(logits), 0).abs().amax(-1).clamp(min=1.0)
        off = (logits.amax(-1) - chosen > ROUNDING * scale).nonzero()
        assert off.numel() == 0, f"{what}, row {b}: position {off[0].item()} is not the argmax of its logits"
        assert torch.equal(tokens[b, :first_tie[b]], reference[b, :first_tie[b]]), \
            f"{what}, row {b}: differs from AR before its first near tie (position {first_tie[b]})"


# Its 256-token grid costs seconds a run: one case of each test in the default run, the rest `slow`.
LARGE = {"tiny-64": {("scd-mc", "chain"), ("scd-mc", None)}}


def cases(methods, shapes=(None,)):
    return [pytest.param(name, method, *([shape] if shape else []),
                         marks=pytest.mark.slow if name in LARGE and (method, shape) not in LARGE[name] else (),
                         id="-".join([name, method] + ([shape] if shape else [])))
            for name in models_util.NAMES for method in methods for shape in shapes]


@pytest.mark.parametrize("name,method,shape", cases(METHODS, list(SHAPES)))
def test_greedy_runs_in_bfloat16_are_greedy_decoding(models, references, name, method, shape):
    model, prompts, cfg = models(name)
    assert can_tree(model.start(prompts[:1], cfg)), f"{name}'s session feeds no trees"   # every shipped model does
    run = scd_core.generate(model, prompts, method=method, window=WINDOW, tree=SHAPES[shape], temperature=0,
                            cfg_scale=cfg)
    assert run.tokens.shape == (len(prompts), run.tokens.shape[1]) and int(run.tokens.min()) >= 0
    if name not in RANDOM:
        check_greedy(model, prompts, cfg, run.tokens, *references(name), f"{name} {method} {shape}")


@pytest.mark.parametrize("name,method", cases(["ar"] + METHODS))
def test_a_sampled_run_streams_to_the_end_in_bfloat16(models, name, method):
    """Sampling (top-k; a tree of drafts for the drafting methods) streamed pass by pass: every
    row's grid fills with tokens of the vocabulary, the logits (float32 or bfloat16) read as
    float32 probabilities."""
    model, prompts, cfg = models(name)
    assert model.start(prompts, cfg).first_logits.dtype in (torch.float32, BF16)
    tree = (1, 0) if method == "ar" else (2, 2)
    records = list(scd_core.stream(model, prompts, method=method, window=WINDOW, tree=tree, top_k=20,
                                   cfg_scale=cfg, seed=3))
    tokens = records[-1].log.tokens
    assert records[-1].nfe == len(records) and bool((records[-1].n_after == tokens.shape[1]).all())
    assert int(tokens.min()) >= 0 and int(tokens.max()) < model.vocab_size


def test_the_engine_reads_bfloat16_logits_as_float32():
    """`processed_probs` upcasts: bfloat16 logits give exactly the float32 probabilities of the
    same values, for every sampling setting."""
    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(3, 5, 300, generator=g) * 4).to(BF16)
    for cfg in (SamplingConfig(), SamplingConfig(0.7, 50, 0.9), SamplingConfig(0.0, 0, 1.0)):
        p = processed_probs(logits, cfg)
        assert p.dtype == torch.float32
        assert torch.equal(p, processed_probs(logits.float(), cfg))


@pytest.mark.parametrize("name", models_util.ADAPTERS)
def test_adapters_in_bfloat16_give_float32_logits(models, name):
    """Each adapter computes in bfloat16 and hands the engine float32 logits (first, window, tree)."""
    model, prompts, cfg = models(name)
    session = model.start(prompts, cfg)
    V = model.vocab_size
    tokens = torch.randint(0, V, (len(prompts), 4), generator=torch.Generator().manual_seed(0))
    zeros = torch.zeros(len(prompts), dtype=torch.long)
    assert session.first_logits.dtype == torch.float32
    assert session.step(tokens, zeros).dtype == torch.float32
    parents = torch.tensor([-1, 0, 0, 1]).expand(len(prompts), -1)
    assert session.step_tree(tokens, parents, zeros + 2).dtype == torch.float32


@pytest.mark.parametrize("name", models_util.NAMES)
def test_models_follow_the_contract_in_bfloat16(models, name):
    """`scd_core.testing`'s checks, chains and trees, to bfloat16 rounding (5% of the logits'
    scale: a row fed in other pieces rounds differently)."""
    model, prompts, cfg = models(name)
    testing.check_model(model, prompts[:2], cfg, rel=0.05, deterministic=name not in RANDOM)
    if name not in RANDOM and math.prod(model.grid) >= 12 and len(prompts) == 2:
        testing.check_tree_session(model, prompts, cfg, rel=0.05)


@pytest.mark.parametrize("dtype", [None, "auto"])
@pytest.mark.parametrize("name", ["texture", "toy", "toy-grid", "tiny", "tiny-64"])
def test_embedded_models_take_the_dtype_words_every_loader_takes(name, dtype):
    """None and "auto" pick the model's own dtype, as they do for the downloaded models (float32
    on the CPU)."""
    model = scd_core.load_model(name, dtype=dtype)
    logits = model.start(["red apple"], 1.0).first_logits
    assert logits.dtype == torch.float32

