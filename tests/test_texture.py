"""The synthetic texture model: its contract, its closed-form p, and the property it exists
for (SCD needs about half of SJD's passes on it)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import scd_core
from scd_core import testing
from scd_core import race
from scd_core.models.texture import PALETTES, TextureModel
from scd_core.sampling import SamplingConfig, processed_probs


@pytest.fixture(scope="module")
def model():
    return scd_core.load_model("texture")


def test_prompt_words_choose_palette_and_pattern(model):
    assert model.vocab.choose("Lava RINGS please") == ("lava", "rings")
    assert model.vocab.choose("a dog") == ("ocean", "clouds")         # defaults
    assert model.vocab.known("a night of waves") == ["night", "waves"]
    assert all(set(model.vocab.known(p)) and len(model.vocab.known(p)) == 2
               for p in model.example_prompts)


def test_p_lives_on_the_prompts_palette_only(model):
    session = model.start(["forest stripes", "candy checks"], 1.0)
    p = processed_probs(session.first_logits, SamplingConfig())
    S = model.shades
    for row, name in enumerate(("forest", "candy")):
        k = list(PALETTES).index(name)
        assert p[row, k * S:(k + 1) * S].sum() == pytest.approx(1.0)


def test_a_window_pass_equals_single_token_passes(model):
    tokens = scd_core.generate(model, ["ocean waves"], method="ar", seed=1).tokens
    window = model.start(["ocean waves"], 1.0).step(tokens[:, :40], torch.zeros(1, dtype=torch.long))
    single = model.start(["ocean waves"], 1.0)
    for j in range(40):
        out = single.step(tokens[:, j:j + 1], torch.tensor([j]))
        assert torch.equal(out[:, 0], window[:, j])


def test_step_forgets_what_was_fed_after_its_start(model):
    a = scd_core.generate(model, ["ice stripes"], method="ar", seed=2).tokens
    b = scd_core.generate(model, ["ice stripes"], method="ar", seed=3).tokens
    s = model.start(["ice stripes"], 1.0)
    s.step(b[:, :30], torch.zeros(1, dtype=torch.long))
    again = s.step(a[:, 10:30], torch.tensor([10]))
    fresh = model.start(["ice stripes"], 1.0)
    fresh.step(b[:, :10], torch.zeros(1, dtype=torch.long))          # b's first 10 stay
    assert torch.equal(again, fresh.step(a[:, 10:30], torch.tensor([10])))


def test_p_sees_only_the_left_and_upper_neighbours(model):
    x = scd_core.generate(model, ["desert waves"], method="ar", seed=0).tokens
    y = x.clone()                                        # another shade of the same palette
    y[0, 100] = x[0, 100] // model.shades * model.shades + (x[0, 100] + 7) % model.shades
    zero = torch.zeros(1, dtype=torch.long)
    px = model.start(["desert waves"], 1.0).step(x[:, :-1], zero)[0]
    py = model.start(["desert waves"], 1.0).step(y[:, :-1], zero)[0]
    moved = sorted({int(i) + 1 for i in torch.nonzero((px != py).any(-1)).flatten()})
    assert moved == [101, 100 + model.grid[1]]                     # right and lower neighbours


def test_guidance_mixes_with_the_pattern_free_logits(model):
    u = model.start(["sunset rings"], 0.0).first_logits
    c = model.start(["sunset rings"], 1.0).first_logits
    g = model.start(["sunset rings"], 3.0).first_logits
    finite = torch.isfinite(c)
    assert torch.allclose(g[finite], (u + 3.0 * (c - u))[finite], atol=1e-4)


def test_decode_draws_each_token_as_a_block_of_its_colour(model):
    tokens = torch.zeros(1, 576, dtype=torch.long)
    tokens[0, 1] = model.vocab_size - 1
    img = np.asarray(model.decode(tokens)[0])
    assert img.shape == (192, 192, 3)
    assert tuple(img[0, 0]) == PALETTES["ocean"][0] and tuple(img[0, 8]) == PALETTES["night"][-1]


def test_scd_needs_about_half_of_sjds_passes():
    """The model's reason to exist, over 8 samples of two prompts (a deterministic count)."""
    model = TextureModel()
    nfe = {}
    for method in ("sjd", "scd-mc", "scd-gumbel"):
        counts = []
        for prompt in ("ocean waves", "lava marble"):
            run = list(race.decode(model, race.Race(prompt, scd_core.Settings(window=16)), method, 4))[-1]
            counts += [s.nfe for s in run.samples()]
        nfe[method] = sum(counts) / len(counts)
    assert nfe["sjd"] / nfe["scd-mc"] > 1.6 and nfe["sjd"] / nfe["scd-gumbel"] > 1.6


def test_tree_nodes_see_their_own_path_only():
    """The tree contract (scd_core.testing) on a grid of 3 columns: the token above a node's
    next position lies on its own path, at different depths per row."""
    testing.check_tree_session(TextureModel(shades=16, grid=(4, 3)), ["lava rings", "ice waves"], 2.0)
