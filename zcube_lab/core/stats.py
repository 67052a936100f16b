"""Summary statistics the lab reports: one quantile function for every figure.

Quantiles are taken on a 0-1 scale with linear interpolation between order statistics (numpy's
default, and `statistics.quantiles(method="inclusive")`), so the client's TTFT p99, the health
verdict's CPU p95 and a fault window's p99 all mean the same thing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def quantile(values: Iterable[float], q: float) -> float | None:
    """The q-quantile (0 <= q <= 1) of `values` by linear interpolation; None for no values."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q must be within [0, 1], got {q}")
    data = sorted(float(v) for v in values)
    if not data:
        return None
    pos = (len(data) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def mean(values: Iterable[float]) -> float | None:
    """The arithmetic mean (`statistics.fmean`, exactly rounded), or None for no values."""
    data = [float(v) for v in values]
    return statistics.fmean(data) if data else None
