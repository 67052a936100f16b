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


# -- known answers: a tiny EP group, a victim, a production window, each worked out by hand -----

US = 1e-6


def _ep_two_gpus() -> tuple[Transfer, ...]:
    """h0 and h1 exchange for three layers: per layer each dispatches to the other (d) and gets
    its combine back (c); a layer's dispatch waits for the combine the host received last layer
    plus 5 µs of compute. Recorded starts are all 0: only the agents' send times count."""
    ts = []
    into = {"h0": (), "h1": ()}  # the combines into each host last layer
    for layer in range(3):
        new = {}
        for m, j in (("h0", "h1"), ("h1", "h0")):
            d = Transfer(len(ts), "ep", 0.0, m, j, 500, into[m], 5 * US if into[m] else 0.0,
                         f"l{layer}")  # fmt: skip
            ts.append(d)
            c = Transfer(len(ts), "ep", 0.0, j, m, 500, (d.id,), 0.0, f"l{layer}")
            ts.append(c)
            new[m] = (c.id,)
        into = new
    ts.append(Transfer(len(ts), "kv", 0.0, "h2", "h0", 4000))  # beside: not part of any exchange
    return tuple(ts)


def _lines(sent_us: dict[int, float], arrived_us: dict[int, float | None]) -> list[dict]:
    """The agents' lines (agent.py's format) for sends and arrivals given in µs."""
    out: list[dict] = [{"id": i, "sent_s": s * US, "sent_bytes": 500} for i, s in sent_us.items()]
    out.append({"host": "h0", "udp_errors": {"InErrors": 0, "RcvbufErrors": 0}})
    for i, a in arrived_us.items():
        at = None if a is None else a * US
        out.append({"id": i, "arrived_s": at, "first_s": 0.0, "bytes": 500, "want": 500})
    return out


def test_ep_exchange_latency_is_last_combine_arrival_minus_first_dispatch_send_known_answer():
    ts = _ep_two_gpus()
    # ids by layer: l0 d0 h0->h1, c1 h1->h0, d2 h1->h0, c3 h0->h1; l1 d4..c7; l2 d8..c11; kv 12
    sent = {
        0: 10, 2: 12,  # l0's dispatches; their combines leave when the dispatch arrives
        1: 30, 3: 31,
        4: 60, 6: 55,  # l1: h0 got c1 at 55, +5 -> 60; h1 got c3 at 50, +5 -> 55
        5: 80, 7: 75,
        8: 105, 10: 109,  # l2: h0 got c5 at 100 -> 105; h1 got c7 at 104 -> 109
        9: 130, 11: 128,
        12: 0,
    }  # fmt: skip
    arrived = {
        0: 30, 2: 31, 1: 55, 3: 50,
        4: 80, 6: 75, 5: 100, 7: 104,
        8: 130, 10: 128, 9: None, 11: 150,  # l2's combine into h0 (c9) never arrives
        12: 400,
    }  # fmt: skip
    s, got = outcomes(_lines(sent, arrived))
    # l0: the last combine's arrival is c1's at 55, the first dispatch d0's send at 10: 45 µs;
    # l1: c7 arrives last at 104, d6 left first at 55: 49 µs (not 104: the recorded starts, 0,
    # do not count). l2 lost c9, so it has no latency.
    assert sorted(exchange_latencies(ts, s, got)) == [pytest.approx(45 * US),
                                                      pytest.approx(49 * US)]  # fmt: skip
    ep = class_figures(ts, s, got, lambda t: 10 * US)["ep"]
    assert ep["transfers"] == 12 and ep["incomplete"] == 1
    # two latencies, 45 and 49: p50 their mean 47; p99 by linear interpolation 45 + 0.99 x 4
    assert ep["exchange_s"]["n"] == 2
    assert ep["exchange_s"]["p50"] == pytest.approx(47 * US)
    assert ep["exchange_s"]["p99"] == pytest.approx(48.96 * US)
    assert ep["exchange_s"]["max"] == pytest.approx(49 * US)
    # completion times: the slowest is c7, 75 -> 104 = 29 µs, 2.9 times its ideal 10 µs
    assert ep["fct_s"]["n"] == 11 and ep["fct_s"]["max"] == pytest.approx(29 * US)
    assert ep["fct_over_ideal"]["max"] == pytest.approx(2.9)
    # the KV transfer beside has no exchange and is counted in its own class
    kv = class_figures(ts, s, got, lambda t: 10 * US)["kv"]
    assert "exchange_s" not in kv and kv["fct_s"]["max"] == pytest.approx(400 * US)


def test_an_exchange_never_sent_in_full_has_no_latency():
    ts = _ep_two_gpus()[:4]
    sent = {0: 10, 2: 12, 1: 30}  # c3 never left (its host stopped at the deadline)
    s, got = outcomes(_lines(sent, {0: 30, 2: 31, 1: 55, 3: None}))
    assert exchange_latencies(ts, s, got) == []
    assert class_figures(ts, s, got, lambda t: 1.0)["ep"]["exchange_s"]["p99"] is None


def test_a_victim_keeps_its_time_alone_over_its_time_beside_known_answer():
    from zcube_lab.core.replay.figures import victim_keeps

    # a 2-to-1 incast into h2 and a victim h0 -> h3 (id 2) sharing the first sender's NIC
    both = (
        Transfer(0, "kv", 0.0, "h0", "h2", 1000),
        Transfer(1, "kv", 0.0, "h1", "h2", 1000),
        Transfer(2, "other", 0.0, "h0", "h3", 4000),
    )
    alone = both[2:]
    times = {"alone": [], "beside": []}
    # three trials: the victim alone takes 2.0, 2.2 and 1.8 ms; beside the incast 5, 4 and 6 ms
    for a_ms, b_ms, start_ms in ((2.0, 5.0, 0.1), (2.2, 4.0, 0.0), (1.8, 6.0, 0.2)):
        sent, got = outcomes(_lines({2: start_ms * 1e3}, {2: (start_ms + a_ms) * 1e3}))
        times["alone"].append(
            class_figures(alone, sent, got, lambda t: 1.0)["other"]["fct_s"]["max"]
        )
        lines = _lines({0: 0, 1: 0, 2: start_ms * 1e3},
                       {0: 3000, 1: 3500, 2: (start_ms + b_ms) * 1e3})  # fmt: skip
        sent, got = outcomes(lines)
        times["beside"].append(
            class_figures(both, sent, got, lambda t: 1.0)["other"]["fct_s"]["max"]
        )
    assert times["alone"] == [pytest.approx(x * 1e-3) for x in (2.0, 2.2, 1.8)]
    # the medians: 2.0 ms alone, 5.0 ms beside: the victim keeps 2/5 = 0.4 of its rate
    assert victim_keeps(times["alone"], times["beside"]) == pytest.approx(0.4)
    # a trial where the victim never completed gives no figure rather than a wrong one
    assert victim_keeps(times["alone"], [*times["beside"][:2], None]) is None
    assert victim_keeps([], times["beside"]) is None
