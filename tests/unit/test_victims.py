"""Victim accounting: pauses attributed to the class that raised them, time and bytes behind
pauses per class, EP exchanges delayed by a pause they did not cause (hand-computed answers)."""

from __future__ import annotations

import pytest

from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.results.lossless.victims import (
    PauseEpisode,
    Transfer,
    VictimReport,
    account,
    counter_deltas,
    exchange_ports,
    raiser,
    route_ports,
    union_seconds,
)

ROFT = build_fabric(FabricSpec.of("roft", servers=2, gpus_per_server=2))
ZCUBE = build_fabric(FabricSpec.of("zcube", n=2))


def test_the_class_with_most_bytes_raised_the_pause() -> None:
    assert raiser({"ep": 9_000, "kv": 72_000}) == "kv"
    assert raiser({"ep": 9_000, "kv": 9_000}) == "ep"  # a tie: the first name, any order
    assert raiser({"kv": 9_000, "ep": 9_000}) == "ep"
    assert raiser({"ep": 0, "kv": 0}) is None
    assert raiser({}) is None


def test_counter_deltas_survive_a_reset() -> None:
    assert counter_deltas({"ep": 100, "kv": 50}, {"ep": 180, "kv": 20, "x": 5}) == {
        "ep": 80,
        "kv": 20,
        "x": 5,
    }


def test_union_of_intervals() -> None:
    assert union_seconds([(0, 1), (0.5, 2), (3, 4), (3.5, 3.6)]) == pytest.approx(3.0)
    assert union_seconds([(1, 1), (2, 1)]) == 0.0


def test_accounting_by_hand() -> None:
    kv_pause = PauseEpisode("leaf1-eth2", 1.0, 1.5, frozenset({"spine0-eth2"}), "kv")
    ep_pause = PauseEpisode("leaf0-eth2", 3.0, 3.2, frozenset({"h1-eth0"}), "ep")
    unknown = PauseEpisode("leaf0-eth3", 5.0, 5.1, frozenset({"h0-eth0"}), None)
    ep_ports = frozenset({"h0-eth0", "spine0-eth2", "h1-eth0"})
    transfers = [
        # behind the KV pause for 0.5 s of its 1 s: a victim, half its bytes behind
        Transfer("ep", 0.8, 1.8, 1_000, ep_ports),
        # behind the EP pause only: delayed, but by its own class: not a victim
        Transfer("ep", 3.1, 3.3, 400, ep_ports),
        # in flight during no pause on its ports
        Transfer("ep", 6.0, 6.1, 100, ep_ports),
        # behind the unattributed pause: delayed, not counted a victim
        Transfer("ep", 5.0, 5.2, 200, ep_ports),
        # the KV pull behind its own pause for 0.5 of 2 s
        Transfer("kv", 0.5, 2.5, 8_000, frozenset({"spine0-eth2"})),
    ]
    r = account(transfers, [kv_pause, ep_pause, unknown])
    assert r.ep_exchanges == 4 and r.ep_victims == 1
    assert r.victim_share == pytest.approx(0.25)
    ep, kv = r.classes["ep"], r.classes["kv"]
    assert (ep.transfers, ep.nbytes, ep.delayed) == (4, 1_700, 3)
    assert ep.seconds_behind == pytest.approx(0.5 + 0.1 + 0.1)
    assert ep.bytes_behind == pytest.approx(500 + 200 + 100)
    assert (kv.transfers, kv.delayed, kv.seconds_behind) == (1, 1, pytest.approx(0.5))
    assert kv.bytes_behind == pytest.approx(2_000)
    assert (ep.pauses_raised, kv.pauses_raised) == (1, 1)
    assert (r.pauses, r.pauses_unattributed) == (3, 1)
    # the EP times: 1.0, 0.2, 0.1, 0.2
    assert r.ep_p50_s == pytest.approx(0.2) and r.ep_p99_s == pytest.approx(0.976)
    assert VictimReport.from_dict(r.to_dict()) == r


def test_overlapping_pauses_count_once() -> None:
    a = PauseEpisode("p", 0.0, 1.0, frozenset({"x"}), "kv")
    b = PauseEpisode("q", 0.5, 1.5, frozenset({"x"}), "kv")
    r = account([Transfer("ep", 0.0, 2.0, 100, frozenset({"x"}))], [a, b])
    assert r.classes["ep"].seconds_behind == pytest.approx(1.5)
    assert r.ep_victims == 1


def test_no_exchange_no_share() -> None:
    r = account([Transfer("kv", 0.0, 1.0, 10, frozenset())], [])
    assert r.victim_share is None and r.ep_p50_s is None


def test_route_ports_on_roft() -> None:
    # h0 (rail 0, leaf0) to h2 (rail 0, leaf0): one switch; to h3 (rail 1): both spines
    assert route_ports(ROFT, "h0", "h2") == {"h0-eth0", "leaf0-eth2"}
    assert route_ports(ROFT, "h0", "h3") == {
        "h0-eth0", "leaf0-eth3", "leaf0-eth4", "spine0-eth2", "spine1-eth2", "leaf1-eth2",
    }  # fmt: skip


def test_zcube_exchange_uses_both_ports_both_ways() -> None:
    ports = exchange_ports(ZCUBE, "h0", ["h3"])
    assert {"h0-eth0", "h0-eth1", "h3-eth0", "h3-eth1"} <= ports
    assert all(p.startswith(("h0", "h3", "a", "b")) for p in ports)
