"""The percentiles every latency table gives."""
from __future__ import annotations

import math


def percentile(values, q: float) -> float:
    """The nearest-rank percentile (q in (0, 1]): the smallest value with at least q of the
    values at or below it; nan for no values."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
