"""A replay's trials: each figure's median and range over the trials, every trial kept
(issue 45)."""

from __future__ import annotations

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.replay.config import ReplayConfig
from zcube_lab.core.replay.trials import aggregate, contention_spread, headline, spread, text


def result(kv_p99: float, ep_p99: float | None, pauses: int, lost: int, trusted: bool) -> dict:
    return {
        "classes": {
            "kv": {"fct_s": {"p50": kv_p99 / 2, "p99": kv_p99, "max": kv_p99}, "incomplete": 0},
            "ep": {
                "fct_s": {"p50": 1e-5, "p99": 2e-5, "max": 3e-5},
                "incomplete": 0,
                "exchange_s": {"p50": 1e-5, "p99": ep_p99},
            },
        },
        "pauses": {"pause_frames": pauses, "pause_total_us": 10.0 * pauses},
        "pause_reaction_p99_us": 50.0,
        "losses": {
            "lost_datagrams": lost,
            "datagrams": {"host_send_queue": lost, "switch_queue": 0, "port": 0, "receiver": 0},
            "unlocated": 0,
        },
        "cpu": {"busy": 0.6, "steal": 0.0},
        "verdict": {"trusted": trusted, "reasons": [] if trusted else ["x"]},
    }


def test_spread_is_the_median_and_range_with_missing_counted():
    assert spread([3.0, 1.0, 2.0]) == {"n": 3, "median": 2.0, "min": 1.0, "max": 3.0, "missing": 0}
    assert spread([4.0, None, 1.0])["median"] == 2.5
    assert spread([4.0, None, 1.0])["missing"] == 1
    assert spread([None])["median"] is None
    assert spread(iter([1.0, 5.0]))["median"] == 3.0  # any iterable, read once


def test_trials_are_not_pooled_each_figure_is_the_median_of_the_trials_own():
    trials = [
        result(100e-6, 50e-6, 10, 0, True),
        result(300e-6, 70e-6, 30, 12, False),
        result(200e-6, None, 20, 4, False),  # no exchange completed in this trial
    ]
    agg = aggregate(trials)
    assert agg["kv.fct_p99_s"]["median"] == pytest.approx(200e-6)
    assert (agg["kv.fct_p99_s"]["min"], agg["kv.fct_p99_s"]["max"]) == (100e-6, 300e-6)
    assert agg["ep.exchange_p99_s"]["n"] == 2 and agg["ep.exchange_p99_s"]["missing"] == 1
    assert agg["ep.exchange_p99_s"]["median"] == pytest.approx(60e-6)
    assert agg["pauses"]["median"] == 20
    assert agg["lost_at.host_send_queue"]["max"] == 12
    assert agg["trusted"]["median"] == 0.0  # 1 of 3 trusted
    assert headline(trials[0])["cpu.busy"] == 0.6


def test_contention_ratios_spread_per_class():
    per = [
        {"ep": {"exchange_p99_ratio": 1.5}},
        {"ep": {"exchange_p99_ratio": 2.5}, "kv": {"fct_p99_ratio": 1.0}},
    ]
    c = contention_spread(per)
    assert c["ep"]["exchange_p99_ratio"]["median"] == 2.0
    assert c["kv"]["fct_p99_ratio"] == {
        "n": 1, "median": 1.0, "min": 1.0, "max": 1.0, "missing": 1,
    }  # fmt: skip


def test_text_prints_median_and_range_and_collapses_agreement():
    assert text(spread([1e-4, 3e-4, 2e-4]), ",.0f", 1e6) == "200 [100-300]"
    assert text(spread([1.001, 1.002]), ".2f") == "1.00"
    assert text(spread([None])) == "-"
    assert text(None) == "-"


def test_trials_must_be_at_least_one():
    assert ReplayConfig(trials=3).trials == 3
    with pytest.raises(ConfigError, match="trials"):
        ReplayConfig(trials=0)
