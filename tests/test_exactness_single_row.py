"""Losslessness at B = 1, by tests/test_exactness.py's exact enumeration and threshold (its
Bonferroni count includes these cases): single-row calls of every method, 2,500 separate calls
(seeds 0..2499) a configuration, sample exactly the AR joint law. Their minutes (about half
of the exactness tests') in a file of their own, so that the two test processes share them.
"""
from __future__ import annotations

import pytest
import torch

import scd_core
from scd_core.models.toy import ToyModel
from test_exactness import ALPHA, PROMPTS, SINGLE_ROW_CASES, SINGLE_ROW_SETTINGS, joint_pvalues


@pytest.mark.slow
@pytest.mark.parametrize("method,init,setting", SINGLE_ROW_CASES)
def test_single_row_calls_sample_the_exact_joint(method, init, setting):
    """B = 1: 2,500 separate calls (seeds 0..2499) on a 2 x 2 grid (81 sequences)."""
    small = ToyModel(vocab_size=3, grid=(2, 2), scale=1.5, seed=1)
    cfg_scale, sampling = SINGLE_ROW_SETTINGS[setting]
    tokens = torch.cat([scd_core.generate(small, [PROMPTS[0]], method=method, window=3, seed=s,
                                          cfg_scale=cfg_scale, init=init, **sampling).tokens
                        for s in range(2500)])
    (p,) = joint_pvalues(small, tokens, [PROMPTS[0]] * len(tokens), cfg_scale, sampling)
    assert p > ALPHA, f"{method}/{init}/{setting} at B=1: chi-square p = {p:.3g}"
