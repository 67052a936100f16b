"""The lab's one quantile function (0-1 scale, linear interpolation like numpy's default) and
the order-statistic confidence interval of a quantile."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zcube_lab.core.stats import (
    mean,
    quantile,
    quantile_intervals,
    quantile_ranks,
    rank_coverage,
)


def test_quantile_interpolates_like_numpy() -> None:
    assert quantile([], 0.5) is None
    assert quantile([3.0], 0.99) == 3.0
    assert quantile([1.0], 0.95) == 1.0
    assert quantile([0.0, 10.0], 0.5) == 5.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == pytest.approx(2.5)
    assert quantile(list(map(float, range(101))), 0.95) == pytest.approx(95.0)
    assert quantile(list(range(101)), 0.99) == pytest.approx(99.0)
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.0) == 1.0
    assert quantile([4.0, 1.0, 3.0, 2.0], 1.0) == 4.0


def test_quantile_rejects_a_scale_other_than_0_to_1() -> None:
    with pytest.raises(ValueError, match="within"):
        quantile([1.0, 2.0], 99)


@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=2, max_size=50),
    st.sampled_from([0.5, 0.9, 0.95, 0.99]),
)
def test_quantile_matches_the_standard_library_inclusive_method(
    values: list[float], q: float
) -> None:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    assert quantile(values, q) == pytest.approx(cuts[round(q * 100) - 1], rel=1e-9, abs=1e-6)


def test_mean() -> None:
    assert mean([]) is None
    assert mean([1.0, 2.0, 6.0]) == 3.0


def test_median_of_10_takes_ranks_2_and_9_as_the_hand_arithmetic_gives() -> None:
    # K ~ Bin(10, 1/2): P(K <= 1) = P(K >= 9) = 11/1024 = 1.07% per tail is within 2.5%, while
    # P(K <= 2) = 56/1024 = 5.47% is not, so ranks 2 and 9 hold the median with
    # 1 - 22/1024 = 97.85%; ranks 3 and 9 would hold it with only 1 - 67/1024 = 93.46%.
    assert quantile_ranks(10, 0.5) == (2, 9)
    assert rank_coverage(10, 0.5, 2, 9) == pytest.approx(1 - 22 / 1024, abs=1e-15)
    assert rank_coverage(10, 0.5, 3, 9) == pytest.approx(1 - 67 / 1024, abs=1e-15)
    data = [float(v) for v in (7, 3, 9, 1, 5, 10, 2, 8, 4, 6)]
    assert quantile_intervals(data, (0.5,)) == {0.5: (2.0, 9.0)}


def test_100_samples_cannot_bound_a_p99_from_above() -> None:
    # All 100 lie below the p99 with probability 0.99^100 = 36.6% > 2.5%: no upper rank. The
    # lower rank is the highest l with P(K < l) <= 2.5%: P(K <= 96) = 1.84%, P(K <= 97) = 7.94%.
    assert quantile_ranks(100, 0.99) == (97, None)
    below_96 = sum(math.comb(100, k) * 0.99**k * 0.01 ** (100 - k) for k in range(97))
    assert rank_coverage(100, 0.99, 97, None) == pytest.approx(1 - below_96, rel=1e-12)
    assert 1 - below_96 == pytest.approx(0.9816, abs=1e-4)
    data = [float(v) for v in range(100, 0, -1)]
    assert quantile_intervals(data, (0.99,)) == {0.99: (97.0, None)}
    # 368 is the fewest samples with an upper end: 0.99^367 = 2.501%, 0.99^368 = 2.476%.
    assert quantile_ranks(367, 0.99)[1] is None
    assert quantile_ranks(368, 0.99) == (360, 368)
    assert quantile_ranks(1, 0.5) == (None, None)  # one sample bounds nothing at 95%


def test_the_chosen_ranks_cover_at_their_confidence_and_hold_the_sample_quantile() -> None:
    # (Below 6 samples a p99's lower end can be the largest, above the interpolated p99 itself.)
    for n in range(6, 400, 7):
        for q in (0.5, 0.9, 0.99):
            for conf in (0.9, 0.95):
                low, high = quantile_ranks(n, q, conf)
                assert rank_coverage(n, q, low, high) >= conf, (n, q, conf)
                pos = (n - 1) * q  # the sample quantile lies between ranks floor+1 and ceil+1
                assert low is None or low <= math.floor(pos) + 1, (n, q)
                assert high is None or high >= math.ceil(pos) + 1, (n, q)


def test_an_interval_of_a_constant_sample_is_that_value_at_each_bounded_end() -> None:
    assert quantile_intervals([2.5] * 40, (0.5, 0.99)) == {0.5: (2.5, 2.5), 0.99: (2.5, None)}
    assert quantile_intervals([2.5] * 400, (0.99,)) == {0.99: (2.5, 2.5)}
    assert quantile_intervals([], (0.99,)) is None


MC_SEEDS = 1000
# The share of MC_SEEDS seeds holding the true quantile has a binomial standard deviation of
# at most sqrt(0.05 * 0.95 / 1000) = 0.69 points around a coverage of 95% or more; 3.5 of them
# is the Monte-Carlo tolerance (2.4 points): the coverage must be at least 92.6%.
MC_TOLERANCE = 3.5 * math.sqrt(0.05 * 0.95 / MC_SEEDS)


def test_coverage_over_many_seeds_is_at_least_the_confidence() -> None:
    # Samples of Exp(1), whose q-quantile is -ln(1 - q); every interval from the same seeds. The
    # percentile bootstrap this replaced held a p99 over 100 samples in only 65% of 300 seeds.
    qs = (0.5, 0.99)
    for n in (100, 200, 999):
        hits = dict.fromkeys(qs, 0)
        for s in range(MC_SEEDS):
            gen = random.Random(n * 100_003 + s)
            cis = quantile_intervals([gen.expovariate(1.0) for _ in range(n)], qs)
            assert cis is not None
            for q, (lo, hi) in cis.items():
                true = -math.log(1.0 - q)
                hits[q] += (lo is None or lo <= true) and (hi is None or true <= hi)
        for q in qs:
            seen, exact = hits[q] / MC_SEEDS, rank_coverage(n, q, *quantile_ranks(n, q))
            assert seen >= 0.95 - MC_TOLERANCE, (n, q, seen)
            assert abs(seen - exact) <= MC_TOLERANCE, (n, q, seen, exact)  # the ranks are used


def test_intervals_reject_bad_arguments() -> None:
    for kwargs in ({"confidence": 1.0}, {"confidence": 0.0}):
        with pytest.raises(ValueError, match="confidence"):
            quantile_intervals([1.0, 2.0], (0.5,), **kwargs)  # type: ignore[arg-type]
    for q in (0.0, 1.0, 99):
        with pytest.raises(ValueError, match="within"):
            quantile_intervals([1.0, 2.0], (q,))
    with pytest.raises(ValueError, match="at least 1"):
        quantile_ranks(0, 0.5)
