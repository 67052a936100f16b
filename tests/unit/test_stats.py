"""The lab's one quantile function (0-1 scale, linear interpolation like numpy's default)."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zcube_lab.core.stats import mean, quantile


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
