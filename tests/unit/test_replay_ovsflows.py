"""What ovs-vswitchd forwarded to each switch port, from its OpenFlow counters, so a replay can
place the datagrams it drops after a full queue refused one of a batch (issue 45)."""

from __future__ import annotations

from zcube_lab.core.replay.losses import diff, locate
from zcube_lab.emulator.replay.ovsflows import (
    bucket_packets,
    flow_outputs,
    forwarded,
    group_buckets,
    refused,
)

# as `ovs-ofctl -O OpenFlow13 --no-names` prints them for a lab's switch (one direct route each
# to ports 1 and 5, two through a select group over ports 5 and 6, the drops)
FLOWS = """OFPST_FLOW reply (OF1.3) (xid=0x2):
 cookie=0x2c0be, duration=5.148s, table=0, n_packets=0, n_bytes=0, priority=2000,arp actions=drop
 cookie=0x2c0be, duration=5.148s, table=0, n_packets=30, n_bytes=2940, priority=1000,ip,nw_dst=198.18.0.1 actions=output:1
 cookie=0x2c0be, duration=5.148s, table=0, n_packets=3, n_bytes=294, priority=1000,ip,nw_dst=198.18.128.1 actions=output:5
 cookie=0x2c0be, duration=5.148s, table=0, n_packets=100, n_bytes=9800, priority=1000,ip,nw_dst=198.18.1.1 actions=group:1
 cookie=0x2c0be, duration=5.148s, table=0, n_packets=20, n_bytes=1960, priority=1000,ip,nw_dst=198.18.1.2 actions=group:1
 cookie=0x2c0be, duration=5.148s, table=0, n_packets=7, n_bytes=0, priority=0 actions=drop
"""  # noqa: E501
GROUPS = """OFPST_GROUP_DESC reply (OF1.3) (xid=0x2):
 group_id=1,type=select,bucket=watch_port:5,actions=output:5,bucket=watch_port:6,actions=output:6
"""
GROUP_STATS = """OFPST_GROUP reply (OF1.3) (xid=0x2):
 group_id=1,duration=5.150s,ref_count=2,packet_count=120,byte_count=11760,bucket0:packet_count=45,byte_count=4410,bucket1:packet_count=75,byte_count=7350
"""


def test_rules_count_what_they_output_directly_and_hand_to_groups():
    ports, groups = flow_outputs(FLOWS)
    assert ports == {1: 30, 5: 3}
    assert groups == {1: 120}


def test_a_groups_buckets_are_read_in_order_with_their_ports_and_packets():
    assert group_buckets(GROUPS) == {1: [5, 6]}
    assert bucket_packets(GROUP_STATS) == {1: [45, 75]}


def test_a_port_is_forwarded_its_direct_rules_packets_and_its_buckets():
    assert forwarded(FLOWS, GROUPS, GROUP_STATS) == {1: 30, 5: 3 + 45, 6: 75}


def test_refused_is_forwarded_less_what_the_queue_took_and_the_agents_resume_frames():
    # s1-eth5: 48 forwarded; its queue sent 20 (2 of them the agent's resume frames after
    # 2 pauses) and holds 1: 48 - 20 - 1 + 2 = 29 never reached it
    got = refused({"s1-eth5": 48, "s1-eth6": 75}, {"s1-eth5": 20}, {"s1-eth5": 1}, {"s1-eth5": 2})
    assert got == {"s1-eth5": 29.0}  # s1-eth6: no queue reading, left out


def test_a_refused_batchs_uncounted_rest_is_placed_at_the_switch_queue():
    """The queue counted 2 drops (the refused packet, sent twice), ovs-vswitchd dropped the
    other 29 of its batch: all 31 are the switch queue's; before, 29 were unlocated."""
    before = {"qdisc_drops": {"s1-eth5": 0}, "refused": {"s1-eth5": 4.0}}
    after = {"qdisc_drops": {"s1-eth5": 2}, "refused": {"s1-eth5": 35.0}}
    located = locate(diff(before, after), lambda d: d.startswith("s"), lost_datagrams=31)
    assert located["datagrams"]["switch_queue"] == 31
    assert located["switch_queue_counted"] == 2
    assert located["detail"]["switch_queue"] == {"s1-eth5": 31}
    assert located["unlocated"] == 0


def test_the_queues_own_count_stands_where_it_is_the_larger():
    before = {"qdisc_drops": {"s1-eth5": 0, "h0-eth0": 0}, "refused": {"s1-eth5": 0.0}}
    after = {"qdisc_drops": {"s1-eth5": 6, "h0-eth0": 0}, "refused": {"s1-eth5": 5.0}}
    located = locate(diff(before, after), lambda d: d.startswith("s"), lost_datagrams=6)
    assert located["detail"]["switch_queue"] == {"s1-eth5": 6}
    assert located["unlocated"] == 0


class FakeLab:
    """What `CounterReader` asks of a lab for `refused`, without one."""

    def __init__(self, pauses: dict[str, int]) -> None:
        from types import SimpleNamespace

        from zcube_lab.core.fabric.builders import build_fabric
        from zcube_lab.core.fabric.description import FabricSpec
        from zcube_lab.core.fabric.scale import Scale
        from zcube_lab.core.fabric.scaledown import scaled_sizes

        self.fabric = build_fabric(FabricSpec.of("roft", **scaled_sizes("roft", 16)))
        self.options = SimpleNamespace(scale=Scale(nic_mbps=100.0))
        self.datapath = "user"
        self.report = SimpleNamespace(errors=0, ports={p: {"pauses": n} for p, n in pauses.items()})
        self.fresh: list[bool] = []

    def lossless_report(self, fresh: bool = False):
        self.fresh.append(fresh)
        return self.report


def test_the_driver_reads_refused_from_the_rules_the_queues_and_the_agents_pauses(monkeypatch):
    from zcube_lab.emulator.replay import driver

    probe = driver.CounterReader(FakeLab({}))  # type: ignore[arg-type]
    port = sorted(p for p in probe.ports if probe.is_switch_port(p))[0]
    lab = FakeLab({port: 2})
    reader = driver.CounterReader(lab)  # type: ignore[arg-type]
    asked: list[list[str]] = []

    def forwarded(bridges):
        asked.append(list(bridges))
        return {port: 48, "h0-eth0": 9}

    monkeypatch.setattr(driver, "ovs_forwarded", forwarded)
    out: dict = {"qdisc_packets": {port: 20.0}, "backlog": {port: 1.0}}
    reader._refused(out)
    assert asked == [sorted(reader.switches)]
    assert out["refused"] == {port: 29.0}  # 48 - (20 - 2 resume frames) - 1; no host port
    reader.readings.append(out)
    reader._refused({"qdisc_packets": {port: 20.0}, "backlog": {port: 1.0}})
    assert lab.fresh == [False, True]  # the closing reading asks the agent for a fresh report

    monkeypatch.setattr(driver, "ovs_forwarded", lambda bridges: {})
    silent: dict = {"qdisc_packets": {}, "backlog": {}}
    reader._refused(silent)
    assert "refused" not in silent
    assert reader.missing == set()  # not a counter the verdict needs: the agents count losses
