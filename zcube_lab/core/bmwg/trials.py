"""Statistics over a test's trials (pure): the mean and its 95% confidence interval (Student's
t, from a small table: the project does not ship scipy), Jain's fairness index, and whether two
fabrics' means differ by more than their trials' spread.

The draft (draft-calabria-bmwg-ai-fabric-inference-bench-05, §14 "Reporting Format") asks every
KPI with its confidence interval and the number of trials; its §5.3, §8.3, §9.3 and §9.4 report
Jain's index over pairs, traffic classes, links or decode workers.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from zcube_lab.core.errors import ConfigError

# Two-sided 95% quantiles of Student's t (0.975 one-sided) by degrees of freedom.
_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
    10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
    18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060,
    26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip
_Z975 = 1.960

HIGHER, LOWER, WITHIN = "higher", "lower", "within spread"
NO_SPREAD = "one trial: no spread to judge by"
# A figure the lab could not measure at the time scale it ran (a refused threshold, transfers
# that never completed): never "not reproduced".
OUT_OF_REACH = "out of reach at this time scale"


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom; between the table's
    rows above 30 the next smaller row's (the wider, so the interval errs wide)."""
    if df < 1:
        raise ConfigError("degrees of freedom", df, "at least 1 (two trials)")
    if df in _T975:
        return _T975[df]
    if df > 120:
        return _Z975
    return _T975[max(k for k in _T975 if k <= df)]


@dataclass(frozen=True)
class Interval:
    """A mean over `n` trials with its 95% confidence interval (None bounds for one trial)."""

    mean: float
    low: float | None
    high: float | None
    n: int

    @property
    def half(self) -> float | None:
        return None if self.high is None else self.high - self.mean

    def to_dict(self) -> dict[str, float | int | None]:
        return {"mean": self.mean, "ci95_low": self.low, "ci95_high": self.high, "n": self.n}


def mean_ci(values: Sequence[float]) -> Interval:
    """The mean of `values` and its 95% interval, mean ± t(n-1) s / sqrt(n)."""
    xs = [float(v) for v in values]
    if not xs:
        raise ConfigError("trials", 0, "at least one trial's value")
    m = statistics.fmean(xs)
    if len(xs) < 2:
        return Interval(m, None, None, 1)
    half = t975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return Interval(m, m - half, m + half, len(xs))


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all equal, 1/n when one takes all.
    All zero counts as fair (1)."""
    xs = [float(v) for v in values]
    if not xs:
        raise ConfigError("jain", xs, "at least one value")
    if any(x < 0 for x in xs):
        raise ConfigError("jain", xs, "values >= 0 (rates, shares)")
    sq = sum(x * x for x in xs)
    return 1.0 if sq == 0 else sum(xs) ** 2 / (len(xs) * sq)


def versus(a: Interval, b: Interval) -> str:
    """`a` against `b`: HIGHER or LOWER when their 95% intervals do not overlap, else WITHIN;
    NO_SPREAD when either has no interval (a single trial)."""
    if a.low is None or a.high is None or b.low is None or b.high is None:
        return NO_SPREAD
    if a.low > b.high:
        return HIGHER
    if a.high < b.low:
        return LOWER
    return WITHIN
