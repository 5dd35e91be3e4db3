"""Losslessness at B = 1, by tests/test_exactness.py's exact enumeration and threshold (its
Bonferroni count includes these cases): single-row calls of every method, 2,500 separate calls
(seeds 0..2499) a configuration, sample exactly the AR joint law. Their minutes (about half
of the exactness tests') in a file of their own, so that the two test processes share them.

AR feeds no drafts, so its init changes none of its tokens (`test_ar_at_b1_ignores_the_init`):
its law is checked at one init. The 2,500 calls are the test's power, not a margin: the classic
biased variants (a fresh draw from p at a rejection, the old q kept for a kept draft) move this
2 x 2 toy's law little, and at 2,500 calls some configurations already pass them (the batch
tests, 24,000 rows a case, catch each).
"""
from __future__ import annotations

import pytest
import torch

import scd_core
from scd_core.models.toy import ToyModel
from test_exactness import ALPHA, PROMPTS, SINGLE_ROW_CASES, SINGLE_ROW_SETTINGS, joint_pvalues

CASES = [case for case in SINGLE_ROW_CASES if case[0] != "ar" or case[1] == "random"]


def small() -> ToyModel:
    return ToyModel(vocab_size=3, grid=(2, 2), scale=1.5, seed=1)


@pytest.mark.slow
@pytest.mark.parametrize("method,init,setting", CASES)
def test_single_row_calls_sample_the_exact_joint(method, init, setting):
    """B = 1: 2,500 separate calls (seeds 0..2499) on a 2 x 2 grid (81 sequences)."""
    model = small()
    cfg_scale, sampling = SINGLE_ROW_SETTINGS[setting]
    tokens = torch.cat([scd_core.generate(model, [PROMPTS[0]], method=method, window=3, seed=s,
                                          cfg_scale=cfg_scale, init=init, **sampling).tokens
                        for s in range(2500)])
    (p,) = joint_pvalues(model, tokens, [PROMPTS[0]] * len(tokens), cfg_scale, sampling)
    assert p > ALPHA, f"{method}/{init}/{setting} at B=1: chi-square p = {p:.3g}"


@pytest.mark.parametrize("setting", SINGLE_ROW_SETTINGS)
def test_ar_at_b1_ignores_the_init(setting):
    model = small()
    cfg_scale, sampling = SINGLE_ROW_SETTINGS[setting]
    for seed in range(50):
        runs = [scd_core.generate(model, [PROMPTS[0]], method="ar", window=3, seed=seed, cfg_scale=cfg_scale,
                                  init=init, **sampling) for init in ("random", "repeat-above")]
        assert torch.equal(runs[0].tokens, runs[1].tokens) and runs[0].nfe == runs[1].nfe
