"""The one settings object: checked once when made, hashable, a model's defaults (window
included) under what is given, and the same run whether passed whole or as keywords."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import scd_core
from scd_core import Settings


@pytest.mark.parametrize("field, value, word", [
    ("method", "beam", "method"), ("window", 1, "window"), ("window", 16.0, "window"),
    ("window", True, "window"), ("window", 4096, "window"), ("init", "zeros", "init"),
    ("temperature", -1.0, "temperature"), ("temperature", True, "temperature"),
    ("top_k", -3, "top_k"), ("top_k", 2.5, "top_k"), ("top_p", 0.0, "top_p"), ("top_p", True, "top_p"),
    ("cfg_scale", True, "cfg_scale"), ("cfg_scale", 101, "cfg_scale")])
def test_a_bad_field_is_refused_by_name(field, value, word):
    with pytest.raises(ValueError, match=f"^{word}"):
        Settings(**{field: value})
    with pytest.raises(ValueError, match=f"^{word}"):
        Settings().replace(**{field: value})


def test_ar_feeds_one_token_whatever_the_window():
    assert Settings("ar", 1).feeds == 1 and Settings("ar", 32).feeds == 1 and Settings("sjd", 32).feeds == 32


def test_equal_settings_are_equal_whatever_the_number_type():
    a, b = Settings(top_k=3, cfg_scale=3), Settings(top_k=3, cfg_scale=3.0)
    assert a == b and hash(a) == hash(b) and isinstance(a.cfg_scale, float)
    with pytest.raises(AttributeError):
        a.window = 8                                       # frozen


def test_a_models_defaults_window_included_come_under_what_is_given():
    model = SimpleNamespace(grid=(4, 4), vocab_size=8,
                            default_settings={"window": 64, "top_k": 2000, "cfg_scale": 3.0, "fps": 8})
    s = Settings.for_model(model)
    assert (s.window, s.top_k, s.cfg_scale, s.method) == (64, 2000, 3.0, "scd-mc")
    s = Settings.for_model(model, window=8, top_k=None, method="sjd")
    assert (s.window, s.top_k, s.method) == (8, 2000, "sjd")
    with pytest.raises(ValueError, match="^windows is not a setting"):
        Settings.for_model(model, windows=8)
    with pytest.raises(ValueError, match="^init 'repeat-frame' needs a video grid"):
        Settings.for_model(model, init="repeat-frame")


def test_settings_whole_or_as_keywords_give_the_same_run():
    model = scd_core.load_model("toy-grid")
    s = Settings("scd-gumbel", 6, top_k=5, cfg_scale=2.0)
    a = scd_core.generate(model, ["a cat"], seed=3, settings=s)
    b = scd_core.generate(model, ["a cat"], "scd-gumbel", 6, seed=3, top_k=5, cfg_scale=2.0)
    c = scd_core.generate(model, ["a cat"], seed=3, settings=Settings("sjd", 6, top_k=5, cfg_scale=2.0),
                          method="scd-gumbel")                  # a keyword overrides the object
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.tokens, c.tokens) and a.nfe == b.nfe
    with pytest.raises(ValueError, match="^settings must be"):
        scd_core.generate(model, ["a cat"], settings={"method": "sjd"})


def test_temperatures_the_sampler_cannot_honour_exactly_are_refused_naming_the_limit():
    from scd_core.sampling import SamplingConfig, processed_probs
    from scd_core.settings import MAX_TEMPERATURE, MIN_TEMPERATURE

    for t in (0, MIN_TEMPERATURE, 1, MAX_TEMPERATURE):
        assert Settings(temperature=t).temperature == t
    for t in (1e39, MAX_TEMPERATURE * 1.5, MIN_TEMPERATURE / 2, 5e-324):
        with pytest.raises(ValueError, match=r"^temperature must be 0 \(greedy\) or from 1e-30 to 1e\+30"):
            Settings(temperature=t)
    with pytest.raises(ValueError, match="^temperature"):
        scd_core.generate(scd_core.load_model("toy-grid"), ["a cat"], temperature=1e39)
    # Logits of float32's step at 1 in size, 8 float32 steps apart, shuffled: top-k keeps the 8
    # largest up to the limit; past it (the sampler a looser bound lets through) float32 ties them
    # and keeps others.
    order = torch.randperm(16, generator=torch.Generator().manual_seed(0))
    logits = (2.0 ** -23 * (1 + torch.arange(16, dtype=torch.float64) * 2.0 ** -20)).float()[order]   # [V]
    largest = {i for i in range(16) if order[i] >= 8}
    for t, exact in ((1.0, True), (MAX_TEMPERATURE, True), (1e33, False), (1e39, False)):
        p = processed_probs(logits, SamplingConfig(t, 8, 1.0))
        assert (set(p.nonzero().flatten().tolist()) == largest) == exact, t
    # Near 0, the largest logits a model gives (guidance included) stay finite once divided.
    logits = torch.tensor([-1e8, 0.0, 1e8])
    assert processed_probs(logits, SamplingConfig(MIN_TEMPERATURE, 0, 1.0)).tolist() == [0, 0, 1]
    assert processed_probs(logits, SamplingConfig(MIN_TEMPERATURE / 100, 0, 1.0)).isnan().any()
