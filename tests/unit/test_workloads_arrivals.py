"""Arrival processes: mean rate and burstiness within statistical tolerance, for fixed seeds."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zcube_lab.core.errors import ConfigError
from zcube_lab.workloads import arrivals
from zcube_lab.workloads.arrivals import ArrivalSpec, Stage


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


def _cv(times: list[float]) -> float:
    g = _gaps(times)
    return statistics.pstdev(g) / statistics.fmean(g)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_poisson_mean_rate_and_cv(seed: int) -> None:
    times = arrivals.poisson(random.Random(seed), rate=50.0, duration=200.0)
    # 10,000 expected arrivals: the count's standard deviation is 100 (1%); allow 4 sigma.
    assert abs(len(times) / 200.0 - 50.0) < 50.0 * 0.04
    assert 0.95 < _cv(times) < 1.05
    assert times == sorted(times)
    assert times[0] > 0.0 and times[-1] < 200.0


@pytest.mark.parametrize(("k", "cv"), [(0.25, 2.0), (1.0, 1.0), (4.0, 0.5)])
def test_gamma_keeps_the_rate_and_sets_cv_to_one_over_sqrt_k(k: float, cv: float) -> None:
    times = arrivals.gamma(random.Random(7), rate=20.0, burstiness=k, duration=500.0)
    # Bursty gaps make the count noisier (variance ~ n * cv^2): tolerance scales with cv.
    assert abs(len(times) / 500.0 - 20.0) < 20.0 * 0.03 * max(1.0, cv)
    assert abs(_cv(times) - cv) < 0.1 * cv


def test_gamma_below_one_is_burstier_than_poisson() -> None:
    rng_a, rng_b = random.Random(11), random.Random(11)
    bursty = arrivals.gamma(rng_a, rate=10.0, burstiness=0.3, duration=300.0)
    plain = arrivals.poisson(rng_b, rate=10.0, duration=300.0)
    assert _cv(bursty) > 1.4 * _cv(plain)

    # Burstier also means more crowded 1-second windows.
    def busiest(times: list[float]) -> int:
        counts = [0] * 300
        for t in times:
            counts[int(t)] += 1
        return max(counts)

    assert busiest(bursty) > busiest(plain)


@pytest.mark.parametrize(("rate", "duration"), [(8.0, 20.0), (0.7, 12.0), (33.3, 7.0)])
def test_counted_sends_the_rate_times_the_window(rate: float, duration: float) -> None:
    times = arrivals.counted(random.Random(1), rate, duration)
    assert len(times) == round(rate * duration)
    assert times == sorted(times) and times[0] > 0 and times[-1] < duration
    # What schedule draws for poisson and gamma, at every seed (an open-ended draw at 8/s for
    # 20 s gives 160 +- 13).
    for seed in range(20):
        for spec in (ArrivalSpec("poisson", rate=rate), ArrivalSpec("gamma", rate, 0.5)):
            n = len(arrivals.schedule(spec, duration, random.Random(seed)))
            assert n == round(rate * duration)


@pytest.mark.parametrize(("k", "cv"), [(0.25, 2.0), (1.0, 1.0), (4.0, 0.5)])
def test_counted_gaps_keep_the_process_shape(k: float, cv: float) -> None:
    times = arrivals.counted(random.Random(7), rate=20.0, duration=500.0, burstiness=k)
    assert len(times) == 10_000
    assert abs(_cv(times) - cv) < 0.1 * cv
    # Poisson conditioned on its count: uniform order statistics, so every tenth of the window
    # holds about a tenth of the arrivals (1,000 +- 30; allow 5 sigma).
    if k == 1.0:
        counts = [sum(1 for t in times if 50 * i <= t < 50 * (i + 1)) for i in range(10)]
        assert all(abs(c - 1000) < 150 for c in counts), counts


def test_fixed_rate_is_evenly_spaced_from_zero() -> None:
    times = arrivals.fixed(rate=4.0, duration=2.0)
    assert times == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
    assert len(arrivals.fixed(rate=100.0, duration=20.0)) == 2000
    assert len(arrivals.fixed(rate=3.0, duration=1.0)) == 3


def test_staged_rates_per_stage() -> None:
    stages = [Stage(100.0, 5.0), Stage(50.0, 0.0), Stage(100.0, 40.0)]
    times = arrivals.staged(random.Random(3), stages)
    first = [t for t in times if t < 100]
    idle = [t for t in times if 100 <= t < 150]
    last = [t for t in times if t >= 150]
    assert abs(len(first) / 100 - 5.0) < 5.0 * 0.15
    assert idle == []
    assert abs(len(last) / 100 - 40.0) < 40.0 * 0.06
    assert max(times) < 250.0


def test_staged_fixed_is_exact() -> None:
    times = arrivals.staged(random.Random(0), [Stage(1.0, 2.0), Stage(1.0, 4.0)], "fixed")
    assert times == [0.0, 0.5, 1.0, 1.25, 1.5, 1.75]


def test_schedule_dispatches_and_cuts_at_duration() -> None:
    spec = ArrivalSpec("staged", stages=(Stage(5, 10), Stage(5, 10)), stage_process="fixed")
    assert len(arrivals.schedule(spec, 6.0, random.Random(0))) == 60
    assert arrivals.schedule(ArrivalSpec("fixed", rate=2), 1.0, random.Random(0)) == [0.0, 0.5]
    with pytest.raises(ConfigError) as e:
        arrivals.schedule(ArrivalSpec("trace"), 1.0, random.Random(0))
    assert e.value.field == "arrival"


def test_same_seed_same_schedule_different_seed_different() -> None:
    spec = ArrivalSpec("gamma", rate=30.0, burstiness=0.5)
    a = arrivals.schedule(spec, 10.0, random.Random(5))
    b = arrivals.schedule(spec, 10.0, random.Random(5))
    c = arrivals.schedule(spec, 10.0, random.Random(6))
    assert a == b
    assert a != c


def test_rescale_trace_times_to_a_rate() -> None:
    ms = [1000.0, 1500.0, 3000.0, 5000.0]
    assert arrivals.rescale(ms, None, None) == [0.0, 500.0, 2000.0, 4000.0]
    fast = arrivals.rescale([t / 1000 for t in ms], rate=2.0, duration=None)
    # n / span = 4 / 4 s = 1 req/s in the trace; at 2 req/s every gap halves.
    assert fast == [0.0, 0.25, 1.0, 2.0]
    assert arrivals.rescale([0.0, 1.0, 2.0], None, 1.5) == [0.0, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"process": "lumpy"}, "arrival"),
        ({"rate": 0.0}, "rate"),
        ({"rate": float("nan")}, "rate"),
        ({"burstiness": -1.0}, "burstiness"),
        ({"process": "staged"}, "stages"),
        ({"process": "staged", "stages": (Stage(-1, 2),)}, "stages[0].duration"),
        ({"stage_process": "trace"}, "stage_process"),
    ],
)
def test_bad_specs_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as e:
        ArrivalSpec(**kwargs)  # type: ignore[arg-type]
    assert e.value.field == field


def test_parse_stages() -> None:
    assert arrivals.parse_stages("10:5,20:50.5") == (Stage(10.0, 5.0), Stage(20.0, 50.5))
    with pytest.raises(ConfigError) as e:
        arrivals.parse_stages("10-5")
    assert e.value.field == "stages"


@settings(max_examples=60, deadline=None)
@given(
    process=st.sampled_from(["poisson", "gamma", "fixed"]),
    rate=st.floats(0.1, 500.0),
    burstiness=st.floats(0.05, 20.0),
    duration=st.floats(0.01, 20.0),
    seed=st.integers(0, 2**32),
)
def test_any_schedule_is_sorted_inside_the_window(
    process: str, rate: float, burstiness: float, duration: float, seed: int
) -> None:
    spec = ArrivalSpec(process, rate=rate, burstiness=burstiness)
    times = arrivals.schedule(spec, duration, random.Random(seed))
    assert times == sorted(times)
    assert all(0.0 <= t < duration for t in times)
    assert times == arrivals.schedule(spec, duration, random.Random(seed))
