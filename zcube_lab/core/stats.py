"""Summary statistics the lab reports: one quantile function for every figure.

Quantiles are taken on a 0-1 scale with linear interpolation between order statistics (numpy's
default, and `statistics.quantiles(method="inclusive")`), so the client's TTFT p99, the health
verdict's CPU p95 and a fault window's p99 all mean the same thing.

`bootstrap_intervals` puts a percentile-bootstrap confidence interval on such quantiles: draw
`resamples` samples of the data's size with replacement from a seeded `random.Random`, take the
quantiles of each with the same function, and report the (1 - confidence) / 2 and
(1 + confidence) / 2 quantiles of those replicate values. It is pure and deterministic for a
given generator state; a constant sample gives a zero-width interval.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Iterable, Sequence

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_CONFIDENCE = 0.95


def quantile(values: Iterable[float], q: float) -> float | None:
    """The q-quantile (0 <= q <= 1) of `values` by linear interpolation; None for no values."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q must be within [0, 1], got {q}")
    data = sorted(float(v) for v in values)
    if not data:
        return None
    return _sorted_quantile(data, q)


def _sorted_quantile(data: Sequence[float], q: float) -> float:
    """The q-quantile of data already sorted ascending (not empty)."""
    pos = (len(data) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def bootstrap_intervals(
    values: Iterable[float],
    qs: Sequence[float],
    rng: random.Random,
    resamples: int = BOOTSTRAP_RESAMPLES,
    confidence: float = BOOTSTRAP_CONFIDENCE,
) -> dict[float, tuple[float, float]] | None:
    """q -> the percentile-bootstrap `confidence` interval (low, high) of the q-quantile of
    `values`, for every q in `qs`, from one set of `resamples` resamples drawn with `rng` (see
    the module docstring); None for no values."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    for q in qs:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantile q must be within [0, 1], got {q}")
    data = [float(v) for v in values]
    if not data:
        return None
    n = len(data)
    replicates: dict[float, list[float]] = {q: [] for q in qs}
    for _ in range(resamples):
        sample = sorted(rng.choices(data, k=n))
        for q, out in replicates.items():
            out.append(_sorted_quantile(sample, q))
    tail = (1.0 - confidence) / 2
    intervals = {}
    for q, reps in replicates.items():
        reps.sort()
        intervals[q] = (_sorted_quantile(reps, tail), _sorted_quantile(reps, 1.0 - tail))
    return intervals


def mean(values: Iterable[float]) -> float | None:
    """The arithmetic mean (`statistics.fmean`, exactly rounded), or None for no values."""
    data = [float(v) for v in values]
    return statistics.fmean(data) if data else None
