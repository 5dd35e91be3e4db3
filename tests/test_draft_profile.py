"""scripts/draft_profile.py: the slot profile counts every pass once, and the sensitivity
measure sees exactly the neighbours toy-grid's logits depend on (left and above)."""
from __future__ import annotations

import pytest

import scd_core
from script_util import load_script

pytestmark = pytest.mark.drill

SETTINGS = dict(top_k=20, top_p=1.0, temperature=1.0, cfg_scale=3.0)


def _script():
    return load_script("draft_profile")


def test_slot_profile_counts_each_pass_once():
    profile = _script()
    model = scd_core.load_model("toy-grid", grid=(4, 6))
    accept, first = profile.slot_profile(model, "scd-mc", window=6, seeds=1, settings=SETTINGS)
    passes = sum(scd_core.generate(model, [p], method="scd-mc", window=6, seed=0, **SETTINGS).nfe - 1
                 for p in profile.PROMPTS)
    assert int(first.sum()) == passes
    assert accept.shape == (5,) and bool(((accept > 0) & (accept <= 1)).all())


def test_sensitivity_is_zero_exactly_where_toy_grid_ignores_the_token():
    profile = _script()
    model = scd_core.load_model("toy-grid", grid=(4, 6))
    stats = profile.sensitivity(model, [1, 2, 6, 7], SETTINGS, every=2)
    assert stats["TV d=1"] > 0.05 and stats["TV d=6"] > 0.05          # left, above
    assert stats["TV d=2"] < 1e-6 and stats["TV d=7"] < 1e-6          # neither
    assert 0 < stats["collision"] <= 1 and stats["entropy"] > 0


@pytest.mark.parametrize("argv, named", [(["--methods", "ar,sjd"], "--methods"), (["--every", "0"], "--every"),
                                         (["--window", "1"], "window")])
def test_bad_arguments_exit_2_naming_the_argument(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _script().main(["--model", "toy-grid", "--model-arg", "grid=4,6"] + argv)
    assert exit_info.value.code == 2 and named in capsys.readouterr().err


def test_prompts_and_settings_are_the_models_own_else_the_benchmark_tables():
    profile = _script()
    tiny = scd_core.load_model("tiny")
    grid = scd_core.load_model("toy-grid", grid=(4, 6))
    assert profile.model_prompts(tiny) == tiny.example_prompts[:8]
    assert profile.model_prompts(grid) == profile.PROMPTS
    assert profile.model_settings(grid, None, None) == dict(top_k=100, top_p=1.0, temperature=1.0, cfg_scale=3.0)
    assert profile.model_settings(tiny, 20, None)["top_k"] == 20
    assert profile.model_settings(tiny, None, 1.5)["cfg_scale"] == 1.5
