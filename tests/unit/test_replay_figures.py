"""A replay's figures from its agents' lines, against hand answers (issue 45 item 3)."""

from __future__ import annotations

import pytest

from zcube_lab.core.clock import Clock
from zcube_lab.core.replay.figures import (
    class_figures,
    contention,
    exchange_latencies,
    outcomes,
    pause_figures,
)
from zcube_lab.core.replay.recording import Transfer

TS = (
    Transfer(0, "kv", 0.0, "h0", "h1", 1000),
    Transfer(1, "kv", 0.0, "h2", "h1", 1000),
    Transfer(2, "ep", 0.0, "h3", "h4", 500, exchange="x"),
    Transfer(3, "ep", 0.0, "h4", "h3", 500, after=(2,), exchange="x"),
    Transfer(4, "kv", 0.0, "h3", "h1", 1000),  # never arrives
)
LINES = [
    {"id": 0, "sent_s": 0.0},
    {"id": 1, "sent_s": 0.0},
    {"id": 2, "sent_s": 0.1},
    {"id": 3, "sent_s": 0.3},
    {"id": 4, "sent_s": 0.0},
    {"id": 0, "arrived_s": 2.0, "first_s": 0.1, "bytes": 1000, "want": 1000},
    {"id": 1, "arrived_s": 4.0, "first_s": 0.1, "bytes": 1000, "want": 1000},
    {"id": 2, "arrived_s": 0.25, "first_s": 0.11, "bytes": 500, "want": 500},
    {"id": 3, "arrived_s": 0.6, "first_s": 0.31, "bytes": 500, "want": 500},
    {"id": 4, "arrived_s": None, "first_s": 0.2, "bytes": 10, "want": 1000},
]


def test_completion_times_their_ideal_ratio_and_the_incomplete():
    sent, got = outcomes(LINES)
    figs = class_figures(TS, sent, got, lambda t: 1.0)
    kv = figs["kv"]
    assert kv["transfers"] == 3 and kv["incomplete"] == 1
    assert kv["fct_s"]["n"] == 2 and kv["fct_s"]["max"] == 4.0
    assert kv["fct_over_ideal"]["max"] == 4.0
    ep = figs["ep"]
    # the exchange runs from the dispatch's start (0.1) to the combine's arrival (0.6)
    assert ep["exchange_s"]["max"] == pytest.approx(0.5)
    assert exchange_latencies(TS, sent, got) == [pytest.approx(0.5)]


def test_contention_is_the_contended_p99_over_the_isolated_p99():
    iso = {"ep": {"fct_s": {"p99": 0.2}, "exchange_s": {"p99": 0.5}}, "kv": {"fct_s": {"p99": 1}}}
    mix = {"ep": {"fct_s": {"p99": 0.3}, "exchange_s": {"p99": 1.5}}, "kv": {"fct_s": {"p99": 1}}}
    c = contention(iso, mix)
    assert c["ep"]["fct_p99_ratio"] == pytest.approx(1.5)
    assert c["ep"]["exchange_p99_ratio"] == pytest.approx(3.0)
    assert c["ep"]["exchange_p99_added_s"] == pytest.approx(1.0)
    assert c["kv"]["fct_p99_ratio"] == pytest.approx(1.0)


def test_pauses_count_episodes_and_sum_their_modelled_time():
    ports = {
        "s0-eth1": {"pauses": 3, "paused_s": 0.012},
        "h0-eth0": {"pauses": 1, "paused_s": 0.030},
        "s1-eth2": {"pauses": 0, "paused_s": 0.0},
    }
    p = pause_figures(ports, Clock(120.0))
    assert p["pause_frames"] == 4 and p["ports_paused"] == 2
    assert p["pause_total_us"] == pytest.approx(0.042 / 120 * 1e6)
    assert p["most_paused_port"] == "h0-eth0"
    assert pause_figures({}, Clock())["most_paused_port"] is None


def test_fidelity_holds_p50_within_10_and_p99_within_20_percent():
    from zcube_lab.core.replay.figures import fidelity

    ok = fidelity({"p50": 1.09, "p99": 2.39}, {"p50": 1.0, "p99": 2.0})
    assert ok["within"] and ok["p50"] == pytest.approx(1.09)
    assert not fidelity({"p50": 1.11, "p99": 2.0}, {"p50": 1.0, "p99": 2.0})["within"]
    assert not fidelity({"p50": 1.0, "p99": 2.5}, {"p50": 1.0, "p99": 2.0})["within"]
    assert not fidelity({"p50": None, "p99": 2.0}, {"p50": 1.0, "p99": 2.0})["within"]


def test_live_times_in_the_recording_are_set_against_the_replay():
    ts = (
        Transfer(0, "kv", 0.0, "h0", "h1", 1000, live_s=2.0),
        Transfer(1, "kv", 0.0, "h2", "h1", 1000, live_s=4.0),
    )
    sent, got = outcomes(LINES)
    kv = class_figures(ts, sent, got, lambda t: 1.0)["kv"]
    assert kv["live_fct_s"]["p50"] == pytest.approx(3.0)
    assert kv["replay_over_live"]["within"] is True


def test_receive_errors_are_summed_over_the_hosts():
    from zcube_lab.core.replay.figures import receive_errors

    lines = [
        {"host": "h1", "udp_errors": {"InErrors": 3, "RcvbufErrors": 3}},
        {"host": "h2", "udp_errors": {"InErrors": 1, "RcvbufErrors": 0}},
        {"id": 0, "sent_s": 0.0},
    ]
    assert receive_errors(lines) == {"InErrors": 4, "RcvbufErrors": 3}


def test_a_live_pulls_fixed_cost_is_taken_off_before_the_comparison():
    # the live pull took 52 ms, 5 of them the pull's fixed software cost (request, connection):
    # its network time, 47 ms, is what a datagram write of the same bytes is set against
    ts = (Transfer(0, "kv", 0.0, "h0", "h1", 1000, live_s=0.052),)
    lines = [{"id": 0, "sent_s": 0.0}, {"id": 0, "arrived_s": 0.045, "bytes": 1, "want": 1}]
    sent, got = outcomes(lines)
    kv = class_figures(ts, sent, got, lambda t: 1.0, live_fixed_s=0.005)["kv"]
    assert kv["live_fct_s"]["p50"] == pytest.approx(0.047)
    assert kv["replay_over_live"]["p50"] == pytest.approx(0.045 / 0.047)
    assert kv["live_fixed_s"] == 0.005
    plain = class_figures(ts, sent, got, lambda t: 1.0)["kv"]
    assert plain["replay_over_live"]["p50"] == pytest.approx(0.045 / 0.052)
