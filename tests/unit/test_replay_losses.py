"""A replay judges itself as a live run does: where its datagrams were lost, the machine's CPU,
and a trusted / not trusted line with the first reason (issue 45)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.core.fabric.scaledown import scaled_sizes
from zcube_lab.core.replay.losses import (
    cpu_shares,
    diff,
    in_flight,
    locate,
    verdict,
    verdict_line,
    where_text,
)


def switch_port(dev: str) -> bool:
    return dev.startswith("s")


BEFORE = {
    "qdisc_drops": {"h0-eth0": 5, "s1-eth1": 0, "s1-eth2": 7},
    "tx_dropped": {"s1-eth1": 0, "h0-eth0": 0},
    "rx_dropped": {"s1-eth1": 0, "h1-eth0": 3},
    "softnet": {"cpu0": 1},
    "udp": {"h0 SndbufErrors": 2, "h1 InErrors": 0, "h1 RcvbufErrors": 0},
    "datapath": {"s1-eth1 socket drops": 0},
    "cpu": {"total": 1000, "busy": 500, "steal": 0},
}
AFTER = {
    "qdisc_drops": {"h0-eth0": 45, "s1-eth1": 12, "s1-eth2": 7},  # host 40, switch 12
    "tx_dropped": {"s1-eth1": 3, "h0-eth0": 0},  # a port 3
    "rx_dropped": {"s1-eth1": 0, "h1-eth0": 9},  # host rx: resume frames, not counted
    "softnet": {"cpu0": 1},
    "udp": {"h0 SndbufErrors": 44, "h1 InErrors": 4, "h1 RcvbufErrors": 4},  # 42 sends, 4 rx
    "datapath": {"s1-eth1 socket drops": 1},  # a port 1 more
    "cpu": {"total": 3000, "busy": 2100, "steal": 100},
}


def test_counters_are_diffed_never_negative():
    d = diff(BEFORE, AFTER)
    assert d["qdisc_drops"] == {"h0-eth0": 40, "s1-eth1": 12, "s1-eth2": 0}
    assert diff(AFTER, BEFORE)["qdisc_drops"]["h0-eth0"] == 0  # a counter reset reads 0
    assert diff({}, {"udp": {"h2 InErrors": 3}})["udp"]["h2 InErrors"] == 3


def test_each_lost_datagram_is_put_where_it_was_counted():
    located = locate(diff(BEFORE, AFTER), switch_port, lost_datagrams=64)
    n = located["datagrams"]
    # the host's queue dropped 40 and UDP counted 42 refused sends: the same datagrams, the larger
    assert n["host_send_queue"] == 42
    assert n["switch_queue"] == 12
    assert n["port"] == 3 + 1
    assert n["receiver"] == 4
    assert located["unlocated"] == 64 - (42 + 12 + 4 + 4)
    assert located["detail"]["switch_queue"] == {"s1-eth1": 12}
    assert located["host_rx_dropped"] == 6  # reported, never counted as lost datagrams
    text = where_text(located)
    assert text.startswith("64 datagrams lost on the way: the host's send queue 42")
    assert "no counter saw where 2" in text


def test_what_a_queue_still_holds_at_the_end_is_undelivered_not_unlocated():
    end = {**AFTER, "backlog": {"s1-eth1": 2, "h0-eth0": 0}}
    located = locate(diff(BEFORE, AFTER), switch_port, lost_datagrams=64, end=end)
    assert located["still_queued"] == {"s1-eth1": 2}
    assert located["unlocated"] == 0  # 64 - 62 counted - 2 queued
    assert "still queued at the end 2" in where_text(located)
    v = verdict(located, {})
    assert "2 datagrams still queued at the end, undelivered (s1-eth1 2)" in v["reasons"]


def test_pipeline_drops_are_reported_apart_other_datapath_drops_counted_at_a_port():
    after = {**AFTER, "ovs_coverage": {"drop_action_of_pipeline": 50, "drop_action_too_many": 3}}
    before = {**BEFORE, "ovs_coverage": {"drop_action_of_pipeline": 20}}
    located = locate(diff(before, after), switch_port)
    assert located["pipeline_drops"] == 30
    assert located["datagrams"]["port"] == 3 + 1 + 3


def test_ovs_drops_of_a_port_overlap_the_kernels_the_larger_counts():
    after = {**AFTER, "ovs_tx_dropped": {"s1-eth1": 30, "s1-eth2": 0}}
    located = locate(diff(BEFORE, after), switch_port)
    # s1-eth1: the kernel counted 3, ovs-vswitchd 30 (a refused send's whole batch): 30
    assert located["detail"]["port"]["ports"] == {"s1-eth1": 30}
    assert located["datagrams"]["port"] == 30 + 1


def test_nothing_lost_reads_so_and_is_trusted():
    same = diff(BEFORE, BEFORE)
    located = locate(same, switch_port, lost_datagrams=0)
    assert where_text(located) == "none lost"
    v = verdict(located, {"busy": 0.5, "steal": 0.0})
    assert v == {"trusted": True, "reasons": []}
    assert verdict_line(v) == "trusted"


def test_the_verdict_names_the_first_place_datagrams_were_lost():
    d = diff(BEFORE, AFTER)
    located = locate(d, switch_port, lost_datagrams=60)
    v = verdict(located, cpu_shares(d), incomplete=3)
    assert not v["trusted"]
    assert v["reasons"][0] == "42 datagrams lost at the host's send queue (h0-eth0 40)"
    assert v["reasons"][1].startswith("12 datagrams lost at a switch queue (s1-eth1 12)")
    assert any(r.startswith("3 transfers incomplete") and "unsent" not in r for r in v["reasons"])
    # the CPU over the replay: 1600 of 2000 jiffies busy, 100 stolen
    assert cpu_shares(d) == {"busy": 0.8, "steal": 0.05}
    assert verdict_line(v).startswith("not trusted: 42 datagrams lost at the host's send queue")


def test_cpu_steal_busy_the_agent_and_unread_counters_each_make_a_reason():
    clean = locate(diff(BEFORE, BEFORE), switch_port, lost_datagrams=0)
    v = verdict(clean, {"busy": 0.95, "steal": 0.07})
    assert v["reasons"] == [
        "CPU steal averaged 7% (allowed 5%)",
        "the machine's CPUs averaged 95% busy (allowed 90%)",
    ]
    v = verdict(clean, {"busy": None, "steal": None}, lossless={"alive": False, "errors": 2})
    assert v["reasons"][0].startswith("lossless agent: exited")
    v = verdict(clean, {}, missing=["h3's UDP counters"], incomplete=1)
    assert v["reasons"] == [
        "h3's UDP counters not read: unchecked",
        "1 transfers incomplete (none lost: unsent at the deadline)",
    ]


def test_what_the_agents_sent_less_what_arrived_is_lost_in_flight():
    lines = [
        {"id": 0, "sent_s": 0.0, "sent_bytes": 3000},
        {"id": 1, "sent_s": 0.0, "sent_bytes": 1000},  # stopped at the deadline
        {"id": 0, "arrived_s": None, "first_s": 0.1, "bytes": 1000, "want": 3000},
        {"id": 1, "arrived_s": None, "first_s": 0.1, "bytes": 1000, "want": 5000},
        {"id": 2, "sent_s": 0.0},  # an agent of before: no count, left out
        {"id": 2, "arrived_s": None, "first_s": 0.1, "bytes": 0, "want": 100},
    ]
    got = in_flight(lines, payload=1000)
    assert got == {"bytes": 2000, "datagrams": 2, "unsent_bytes": 4000}
    assert in_flight([*lines[:1], {**lines[2], "bytes": 2999}], 1000)["datagrams"] == 1


class FakeLab:
    """What `CounterReader.judge` asks of a lab, without one."""

    def __init__(self) -> None:
        self.fabric = build_fabric(FabricSpec.of("roft", **scaled_sizes("roft", 16)))
        self.options = SimpleNamespace(scale=Scale(nic_mbps=100.0))
        self.datapath = "user"

    def lossless_report(self, fresh: bool = False):
        return SimpleNamespace(errors=0)

    def lossless_alive(self) -> bool:
        return True


def test_the_driver_adds_losses_cpu_and_the_verdict_to_a_replay():
    from zcube_lab.emulator.replay.driver import CounterReader

    reader = CounterReader(FakeLab())  # type: ignore[arg-type]
    host_port = next(p for p in reader.ports if p.startswith("h"))
    switch = next(p for p in reader.ports if not p.startswith("h"))
    assert reader.is_switch_port(switch) and not reader.is_switch_port(host_port)
    reader.readings = [
        {"qdisc_drops": {host_port: 0, switch: 0}, "cpu": {"total": 100, "busy": 10, "steal": 0}},
        {"qdisc_drops": {host_port: 0, switch: 5}, "cpu": {"total": 200, "busy": 60, "steal": 0}},
    ]
    lines = [
        {"id": 0, "sent_s": 0.0, "sent_bytes": 14620},
        {"id": 0, "arrived_s": None, "first_s": 0.0, "bytes": 7310, "want": 14620},
    ]
    out = reader.judge(lines, mtu=1500, incomplete=1)
    assert out["losses"]["lost_datagrams"] == 5  # 7,310 B of 1,462 B payloads
    assert out["losses"]["datagrams"]["switch_queue"] == 5
    assert out["cpu"] == {"busy": 0.5, "steal": 0.0}
    assert out["verdict"]["reasons"][0] == f"5 datagrams lost at a switch queue ({switch} 5)"
    fresh = CounterReader(FakeLab())  # type: ignore[arg-type]
    assert fresh.judge(lines, 1500, 0) == {}  # without both readings there is nothing to judge


@pytest.mark.parametrize("busy", [0.91, 0.99])
def test_the_busy_limit_is_the_live_verdicts(busy: float):
    from zcube_lab.emulator.verdict.limits import Limits

    clean = locate(diff(BEFORE, BEFORE), switch_port, lost_datagrams=0)
    v = verdict(clean, {"busy": busy, "steal": 0.0}, busy_limit=Limits().machine_cpu)
    assert not v["trusted"]


def test_the_driver_reads_a_hosts_ports_through_the_samplers_readers(monkeypatch):
    from zcube_lab.emulator.lab import netsampler as ns
    from zcube_lab.emulator.replay.driver import CounterReader
    from zcube_lab.emulator.verdict.netstats import DevCounters, QdiscStats

    asked: list[tuple[str, int | None]] = []

    def qdiscs(pid=None, proc=None, timeout=5.0):
        asked.append(("tc", pid))
        return {"h0-eth0": QdiscStats("h0-eth0", "tbf", "1:", "root", drops=3, backlog_packets=2),
                "lo": QdiscStats("lo", "noqueue", "0:", "root", drops=9)}  # fmt: skip

    def devs(pid=None, proc=None):
        asked.append(("dev", pid))
        return {"h0-eth0": DevCounters(tx_dropped=4, rx_dropped=5), "lo": DevCounters(1, 1)}

    monkeypatch.setattr(ns, "qdisc_stats", qdiscs)
    monkeypatch.setattr(ns, "dev_counters", devs)
    reader = CounterReader(FakeLab())  # type: ignore[arg-type]
    out: dict = {"qdisc_drops": {}, "tx_dropped": {}, "rx_dropped": {}}
    reader._ports(out, 4242, "h0's ports")
    assert asked == [("tc", 4242), ("dev", 4242)]  # the host's namespace, not the root's
    assert out == {  # only the shaped ports
        "qdisc_drops": {"h0-eth0": 3.0}, "qdisc_packets": {"h0-eth0": 0.0},
        "backlog": {"h0-eth0": 2.0},
        "tx_dropped": {"h0-eth0": 4.0}, "rx_dropped": {"h0-eth0": 5.0},
    }  # fmt: skip

    def gone(pid=None, proc=None):
        raise OSError("no such process")

    monkeypatch.setattr(ns, "dev_counters", gone)
    reader._ports(out, 4242, "h0's ports")
    assert reader.missing == {"h0's ports' counters (/proc/4242/net/dev)"}


def test_losses_of_a_replay_paced_above_the_datapaths_share_name_the_pace_first():
    over = {"within_share": False, "window_wall_s": 0.3, "of_ceiling": 0.84,
            "ceiling_pps": 92006, "share": 0.7}  # fmt: skip
    d = diff(BEFORE, AFTER)
    lossy = locate(d, switch_port, lost_datagrams=60)
    v = verdict(lossy, {}, load=over)
    assert v["reasons"][0] == (
        "paced above the datapath's share: its busiest 0.3 wall s at 84% of the measured "
        "92,006 pps (allowed 70%), so its losses may be the machine's: a higher --dilation"
    )
    assert v["reasons"][1].startswith("42 datagrams lost at the host's send queue")
    # within its share, or nothing lost: no such reason
    within = {**over, "within_share": True}
    assert verdict(lossy, {}, load=within)["reasons"][0].startswith("42 datagrams")
    clean = locate(diff(BEFORE, BEFORE), switch_port, lost_datagrams=0)
    assert verdict(clean, {}, load=over) == {"trusted": True, "reasons": []}
