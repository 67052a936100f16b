"""Summary statistics the lab reports: one quantile function for every figure.

Quantiles are taken on a 0-1 scale with linear interpolation between order statistics (numpy's
default, and `statistics.quantiles(method="inclusive")`), so the client's TTFT p99, the health
verdict's CPU p95 and a fault window's p99 all mean the same thing.

`quantile_intervals` puts a distribution-free confidence interval on such quantiles: the
order-statistic (binomial) interval. Of n samples, the number K below the true q-quantile is
Binomial(n, q) for continuous data, so the sorted samples' ranks l < u (1-based) hold it,
X_(l) <= Q_q <= X_(u), with probability P(l <= K <= u - 1) = sum_{k=l}^{u-1} C(n, k) q^k
(1 - q)^(n - k). `quantile_ranks` picks equal tails: l is the highest rank with
P(K < l) <= (1 - confidence) / 2 and u the lowest with P(K >= u) <= (1 - confidence) / 2, so
the coverage is at least `confidence` (exactly the binomial sum for continuous data; with ties
each tail only shrinks). When no rank meets a tail the end is unbounded (None): 100 samples
cannot bound a p99 from above at 95%, since all of them lie below it with probability
0.99^100 = 0.366. The arithmetic is exact: q and the confidence are taken as the decimals they
print as (`0.99` is 99/100) and the binomial terms are integers (C(n, k) by its exact
recurrence). It is pure; a constant sample gives that value at each bounded end.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import lru_cache

CONFIDENCE = 0.95
Interval = tuple[float | None, float | None]  # (low, high); None: that end is unbounded


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


def _decimal(x: float) -> Fraction:
    """`x` as the decimal it prints as: 0.99 -> 99/100 (not the binary float's exact value)."""
    return Fraction(repr(float(x)))


def _binomial_terms(n: int, q: float) -> tuple[list[int], int]:
    """The Binomial(n, q) probabilities P(K = k), k = 0..n, as integers over one denominator."""
    p = _decimal(q)
    a, b = p.numerator, p.denominator - p.numerator  # P(K = k) = C(n, k) a^k b^(n-k) / d^n
    terms = [b**n]
    for k in range(n):  # C(n, k+1) a^(k+1) b^(n-k-1) from the k-th term, exactly
        terms.append(terms[k] * (n - k) * a // ((k + 1) * b))
    return terms, p.denominator**n


def _check(q: float, confidence: float) -> None:
    if not 0.0 < q < 1.0:
        raise ValueError(f"an interval's quantile q must be within (0, 1), got {q}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")


@lru_cache(maxsize=256)
def quantile_ranks(
    n: int, q: float, confidence: float = CONFIDENCE
) -> tuple[int | None, int | None]:
    """The 1-based ranks (l, u) of n sorted samples bounding the q-quantile at `confidence`
    with equal tails (see the module docstring); None for an end no rank can bound."""
    _check(q, confidence)
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    terms, total = _binomial_terms(n, q)
    tail = (1 - _decimal(confidence)) / 2
    limit = tail * total  # a tail's probability times `total` may not exceed this
    low, below = 0, 0  # rank l and P(K < l) * total
    while low < n and below + terms[low] <= limit:
        below += terms[low]
        low += 1
    high, above = n + 1, 0  # rank u and P(K >= u) * total
    while high > 1 and above + terms[high - 1] <= limit:
        above += terms[high - 1]
        high -= 1
    return (low or None), (high if high <= n else None)


def rank_coverage(n: int, q: float, low: int | None, high: int | None) -> float:
    """The exact probability that ranks (low, high) of n samples of a continuous distribution
    hold its q-quantile: P(low <= K <= high - 1), K ~ Binomial(n, q); None is unbounded."""
    _check(q, 0.5)
    terms, total = _binomial_terms(n, q)
    lo = 0 if low is None else low
    hi = n + 1 if high is None else high
    return float(Fraction(sum(terms[lo:hi]), total))


def quantile_intervals(
    values: Iterable[float], qs: Sequence[float], confidence: float = CONFIDENCE
) -> dict[float, Interval] | None:
    """q -> the order-statistic `confidence` interval (low, high) of the q-quantile of
    `values` (0 < q < 1), for every q in `qs`; an unbounded end is None (see the module
    docstring). None for no values."""
    for q in qs:
        _check(q, confidence)
    data = sorted(float(v) for v in values)
    if not data:
        return None
    out: dict[float, Interval] = {}
    for q in qs:
        low, high = quantile_ranks(len(data), q, confidence)
        out[q] = (
            None if low is None else data[low - 1],
            None if high is None else data[high - 1],
        )
    return out


def mean(values: Iterable[float]) -> float | None:
    """The arithmetic mean (`statistics.fmean`, exactly rounded), or None for no values."""
    data = [float(v) for v in values]
    return statistics.fmean(data) if data else None
