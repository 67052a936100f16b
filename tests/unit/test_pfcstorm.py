"""§8.4's PFC storm (issue 46): the pause machine's forced pauses and pause log, the buffer
dependency check, the trial's recording and its figures, against hand answers; no lab."""

from __future__ import annotations

import pytest

from zcube_lab.core.bmwg import catalogue as cat
from zcube_lab.core.bmwg import pfcstorm as ps
from zcube_lab.core.bmwg import plan, report, scaling
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.bmwg.trials import OUT_OF_REACH
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.lossless import (
    ForcedPause,
    PauseMachine,
    PortThresholds,
    dependency_cycle,
    feeders,
)
from zcube_lab.core.fabric.scaledown import scaled_fabric
from zcube_lab.core.replay.recording import Transfer
from zcube_lab.emulator.lab.lossless import AgentReport

LIM = PortThresholds(xoff=1000, xon=500, limit=5000)
# s1-eth1 faces the stuck host; it is fed by host h1 and by s0's port toward s1, which is fed
# by host h2: two hops of backpressure from the stuck port.
FEEDS = {
    "s1-eth1": frozenset({"h1-eth0", "s0-eth2"}),
    "s0-eth2": frozenset({"h2-eth0"}),
}


def _machine() -> PauseMachine:
    m = PauseMachine({"s1-eth1": LIM, "s0-eth2": LIM}, FEEDS)
    m.force([ForcedPause("s1-eth1", 1.0, 2.0)])
    return m


def test_a_forced_port_pauses_in_its_window_and_its_feeders_follow_as_its_queue_fills():
    m = _machine()
    assert m.observe(0.5, {"s1-eth1": 0, "s0-eth2": 0}).pause == ()
    d = m.observe(1.0, {"s1-eth1": 0, "s0-eth2": 0})
    assert d.pause == ("s1-eth1",)  # the stuck receiver's PAUSE, whatever the queue
    d = m.observe(1.1, {"s1-eth1": 1000, "s0-eth2": 0})
    assert d.pause == ("h1-eth0", "s0-eth2") and d.congested == ("s1-eth1",)
    d = m.observe(1.2, {"s1-eth1": 1200, "s0-eth2": 1000})
    assert d.pause == ("h2-eth0",)  # the second hop
    assert m.paused == {"s1-eth1", "h1-eth0", "s0-eth2", "h2-eth0"}


def test_after_the_release_everything_resumes_as_the_queues_drain_without_a_cycle():
    m = _machine()
    m.observe(1.0, {"s1-eth1": 0, "s0-eth2": 0})
    m.observe(1.1, {"s1-eth1": 1000, "s0-eth2": 1000})
    m.observe(1.2, {"s1-eth1": 1000, "s0-eth2": 1000})
    d = m.observe(2.0, {"s1-eth1": 1000, "s0-eth2": 1000})
    assert d.resume == ("s1-eth1",)  # released; its queue still holds its feeders
    d = m.observe(2.1, {"s1-eth1": 400, "s0-eth2": 1000})
    assert d.resume == ("h1-eth0", "s0-eth2")
    d = m.observe(2.2, {"s1-eth1": 0, "s0-eth2": 500})
    assert d.resume == ("h2-eth0",) and m.paused == set()
    log = sorted((p, s, e) for p, s, e in m.history or [])
    assert log == [
        ("h1-eth0", 1.1, 2.1),
        ("h2-eth0", 1.1, 2.2),
        ("s0-eth2", 1.1, 2.1),
        ("s1-eth1", 1.0, 2.0),
    ]


def test_without_a_forced_pause_nothing_is_logged_and_an_empty_list_stops_it():
    m = PauseMachine({"s1-eth1": LIM, "s0-eth2": LIM}, FEEDS)
    m.observe(0.0, {"s1-eth1": 1000})
    assert m.history is None and m.paused == {"h1-eth0", "s0-eth2"}
    m.force([ForcedPause("s1-eth1", 1.0, 2.0)])
    assert sorted(p for p, _s, _e in m.history or []) == ["h1-eth0", "s0-eth2"]  # held now
    m.force([])
    assert m.history is None and m.forced == ()
    assert m.observe(1.5, {"s1-eth1": 0}).resume == ("h1-eth0", "s0-eth2")


def test_the_agent_s_report_carries_the_forced_windows_and_the_pause_log():
    r = AgentReport(forced=[["s1-eth1", 1.0, 2.0]], pause_log=[["s1-eth1", 1.0, None]])
    back = AgentReport.from_dict(r.to_dict())
    assert back.forced == [["s1-eth1", 1.0, 2.0]] and back.pause_log == [["s1-eth1", 1.0, None]]
    assert AgentReport.from_dict(AgentReport().to_dict()).pause_log is None


def test_a_ring_of_ports_feeding_each_other_is_a_cycle_and_a_chain_is_not():
    ring = {"a": {"d", "h0"}, "b": {"a"}, "c": {"b"}, "d": {"c"}}
    cycle = dependency_cycle(ring)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c", "d"}
    assert dependency_cycle({"a": {"h0"}, "b": {"a"}, "c": {"b", "a"}}) is None


@pytest.mark.parametrize("kind", ["zcube", "roft", "clos"])
def test_the_lab_s_routes_make_no_cyclic_buffer_dependency(kind):
    assert dependency_cycle(feeders(scaled_fabric(kind, 16))) is None


HOSTS = [f"h{i}" for i in range(16)]


def test_reach_follows_feeders_transitively():
    assert ps.reach(FEEDS, ["s1-eth1"]) == {"s1-eth1", "h1-eth0", "s0-eth2", "h2-eth0"}
    assert ps.reach(FEEDS, ["s0-eth2"]) == {"s0-eth2", "h2-eth0"}


@pytest.mark.parametrize(("kind", "hops"), [("zcube", 2), ("roft", 3), ("clos", 3)])
def test_a_storm_can_spread_two_hops_on_zcube_and_three_on_the_trees(kind, hops):
    # ZCube: the stuck port's feeders (hosts and the other tier's ports) and theirs (hosts);
    # leaf-spine-leaf: spine, leaf up port, host
    f = scaled_fabric(kind, 16)
    stuck = ps.stuck_ports(f, ps.stuck_host([h.name for h in f.hosts]))
    assert ps.possible_depth(f, stuck) == hops


def test_the_trial_sends_into_the_stuck_host_and_between_victim_pairs_at_their_loads():
    rec = ps.storm_trial(HOSTS, 0.01, seed=3)
    stuck = ps.stuck_host(HOSTS)
    assert stuck == "h5" and rec.meta["stuck_host"] == "h5"
    assert rec.meta["window_s"] == pytest.approx([0.001, 0.0025])
    assert rec.meta["bound_s"] == pytest.approx(4 * 0.0015)
    into = [t for t in rec.transfers if t.dst == stuck]
    assert {t.src for t in into} == set(HOSTS) - {stuck}
    assert not any(t.src == stuck for t in rec.transfers)
    # together IN_LOAD of one NIC: 0.3 x 400 Gb/s x 10 ms = 150 MB, of 256 KB messages
    assert abs(sum(t.bytes for t in into) - 150e6) <= 15 * 256e3
    victims = ps.victim_pairs(HOSTS)
    assert len(victims) == 14 and all(stuck not in v for v in victims)  # h5->h13, h13->h5 out
    one = [t for t in rec.transfers if (t.src, t.dst) == victims[0]]
    assert len(one) in (195, 196)  # 0.1 x 400 Gb/s x 10 ms / 256 KB
    assert [t.id for t in rec.transfers] == list(range(len(rec.transfers)))
    assert ps.trial_size(HOSTS, 0.01) == pytest.approx(len(rec.transfers), abs=20)


def test_a_trial_too_short_for_its_window_is_refused():
    with pytest.raises(ConfigError, match="trial_seconds"):
        ps.storm_trial(HOSTS, 0.001, seed=1)


def test_zero_throughput_is_the_longest_time_due_without_arrivals():
    ts = [Transfer(0, "kv", 0.0, "a", "b", 1e6), Transfer(1, "kv", 0.3, "a", "b", 1e6)]
    got = {0: {"first_s": 0.1, "arrived_s": 0.2}, 1: {"first_s": 0.9, "arrived_s": 1.0}}
    assert ps.zero_throughput_s(ts, got, 5.0) == pytest.approx(0.6)
    # the second never arrives: due from 0.3 to the end of the log
    assert ps.zero_throughput_s(ts, {0: got[0]}, 5.0) == pytest.approx(4.7)


CLOS = scaled_fabric("clos", 16)


def _figs(log, seen=0.02):
    victim = [Transfer(0, "kv", 0.0, "h0", "h8", 1e6, exchange="victim:h0>h8"),
              Transfer(1, "kv", 0.001, "h0", "h8", 1e6, exchange="victim:h0>h8")]  # fmt: skip
    got = {0: {"first_s": 0.0001, "arrived_s": 0.0002},
           1: {"first_s": 0.0042, "arrived_s": 0.0043}}  # fmt: skip
    return ps.storm_figures(log, ["leaf1-eth2"], (0.001, 0.003), 0.008, seen, CLOS, victim, got)


def test_storm_figures_by_hand_on_clos():
    # stuck leaf1-eth2 (toward h5); then spine0's port down to leaf1 (1 hop), leaf0's uplink
    # to spine0 (2 hops), host h0's port (3 hops); all clear 1.5 ms after the release
    log = [
        ["leaf1-eth2", 0.001, 0.003],
        ["spine0-eth3", 0.0012, 0.0035],
        ["leaf0-eth5", 0.0014, 0.004],
        ["h0-eth0", 0.0016, 0.0045],
        ["h1-eth0", 0.0002, 0.0003],  # ordinary congestion before the window
    ]
    f = _figs(log)
    assert f["PFC_storm"] == 1 and f["PFC_deadlock"] == 0
    assert f["PAUSE_propagation_depth_hops"] == 3
    assert f["recovery_time_ms"] == pytest.approx(1.5)
    assert f["zero_throughput_max_ms"] == pytest.approx(3.2)  # due from 1.0 ms, first at 4.2
    assert f["pauses_before_window"] == 1 and f["ports_paused_storm"] == 4
    assert f["incomplete"] == 0
    # the victim message due at 1.0 ms (before the 3 ms release) arrived at 4.3 ms
    assert f["drain_time_ms"] == pytest.approx(1.3)
    assert f["pause_rate_before_per_ms"] == pytest.approx(1.0)  # 1 pause in 1 ms
    assert f["pause_rate_after_per_ms"] == pytest.approx(0.0)  # none begun in 3-11 ms


def test_a_victim_message_held_past_the_end_leaves_no_drain_time():
    victim = [Transfer(0, "kv", 0.002, "h0", "h8", 1e6, exchange="victim:h0>h8")]
    log = [["leaf1-eth2", 0.001, 0.003], ["h0-eth0", 0.0031, 0.0032], ["h1-eth0", 0.004, 0.005]]
    f = ps.storm_figures(log, ["leaf1-eth2"], (0.001, 0.003), 0.008, 0.02, CLOS, victim, {})
    assert f["drain_time_ms"] is None and f["incomplete"] == 1
    assert f["pause_rate_after_per_ms"] == pytest.approx(2 / 8)


def test_a_pause_only_on_the_stuck_port_is_no_storm_and_recovers_at_once():
    f = _figs([["leaf1-eth2", 0.001, 0.003]])
    assert f["PFC_storm"] == 0 and f["PAUSE_propagation_depth_hops"] == 0
    assert f["recovery_time_ms"] == pytest.approx(0.0)


def test_pauses_held_past_the_bound_or_to_the_end_are_a_deadlock():
    held = _figs([["leaf1-eth2", 0.001, 0.003], ["spine0-eth3", 0.0012, None]])
    assert held["PFC_deadlock"] == 1 and held["recovery_time_ms"] is None
    late = _figs([["leaf1-eth2", 0.001, 0.003], ["spine0-eth3", 0.0012, 0.0115]])
    assert late["PFC_deadlock"] == 1  # 8.5 ms after the release, past the 8 ms bound
    ok = _figs([["leaf1-eth2", 0.001, 0.003], ["spine0-eth3", 0.0012, 0.0105]])
    assert ok["PFC_deadlock"] == 0 and ok["recovery_time_ms"] == pytest.approx(7.5)


def test_the_plan_has_one_storm_case_and_its_recording():
    cfg = BmwgConfig(trial_seconds=0.01)
    cases, refused = plan.cases(cfg, cat.runnable_sections(["8.4"]), 16, scaling.fine_scale(), 1e5)
    assert refused == [] and [c.replays for c in cases] == [("storm",)]
    recs = plan.trial_recordings(cases[0], HOSTS, 0.01, 1)
    assert list(recs) == ["storm"] and recs["storm"].meta["stuck_host"] == "h5"
    with pytest.raises(ConfigError, match="trial_seconds"):
        plan.cases(BmwgConfig(trial_seconds=0.001), cat.runnable_sections(["8.4"]), 16,
                   scaling.fine_scale(), 1e5)  # fmt: skip


def test_a_deadlocked_trial_puts_the_recovery_comparison_out_of_reach():
    def row(fabric, trial, deadlock, rec):
        figs = {"PFC_storm": 1, "PFC_deadlock": deadlock, "recovery_time_ms": rec,
                "PAUSE_propagation_depth_hops": 2, "zero_throughput_max_ms": 1.0,
                "incomplete": 0}  # fmt: skip
        return {"section": "8.4", "case": "c", "fabric": fabric, "params": {}, "trial": trial,
                "figures": figs}  # fmt: skip

    rows = [row("zcube", 0, 0, 1.0), row("zcube", 1, 0, 1.2),
            row("clos", 0, 1, None), row("clos", 1, 0, 2.0)]  # fmt: skip
    verdicts = {c["figure"]: c["verdict"] for c in report.compare(report.summarize(rows))}
    assert verdicts["recovery_time_ms"] == OUT_OF_REACH
    assert verdicts["PFC_deadlock"] != OUT_OF_REACH


def test_the_storm_replays_without_ingress_accounting_and_every_other_replay_with_it():
    """§8.4's deadlock rule reads the union of every port's pauses, so the traffic's own
    ingress pauses would count as a deadlock: its replays keep the egress rule alone, said in
    the run's notes; the other replayed sections keep the replays' setting."""
    from zcube_lab.emulator.bmwg import runner
    from zcube_lab.emulator.replay.driver import LOSSLESS_INGRESS

    assert runner._ingress("8.4") is False and runner.STORM_INGRESS is False
    assert all(runner._ingress(s) is LOSSLESS_INGRESS for s in ("5.3", "7.4", "8.2", "10.4"))
    assert "ingress" not in runner.software(ingress=False)["datapath"]
    assert "ingress accounting" in runner.software(ingress=True)["datapath"]
