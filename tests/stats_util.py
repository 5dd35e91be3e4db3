"""Chi-square goodness of fit against an exact law, shared by the exactness tests."""
from __future__ import annotations

import torch
from scipy import stats


def chi_square_pvalue(samples: torch.LongTensor, probs: torch.Tensor, min_expected: float = 5.0) -> float:
    """p-value of observed category indices against exact probabilities.

    Cells with expected count below `min_expected` are pooled into one cell. A sample in a
    cell of probability 0 is an impossible outcome: the p-value is then 0.
    """
    probs = probs.double()
    counts = torch.bincount(samples, minlength=probs.numel()).double()
    if counts[probs == 0].sum() > 0:
        return 0.0
    expected = probs * samples.numel()
    small = expected < min_expected
    observed = torch.cat([counts[~small], counts[small].sum().view(1)])
    expected = torch.cat([expected[~small], expected[small].sum().view(1)])
    keep = expected > 0
    observed, expected = observed[keep], expected[keep]
    if expected.numel() < 2:
        return 1.0   # one possible outcome and every sample in it
    statistic = ((observed - expected) ** 2 / expected).sum().item()
    return float(stats.chi2.sf(statistic, expected.numel() - 1))
