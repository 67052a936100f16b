"""Ingress accounting in the lossless mode (issue 45, the third cause): a switch port's ingress
backlog (ovs-vswitchd's receive socket on it) past XOFF pauses exactly that link's far end and
resumes it at XON; the egress rule is unchanged."""

from __future__ import annotations

import pytest

from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.linkplan import port_shapes
from zcube_lab.core.fabric.lossless import (
    HTB_BURST_BYTES,
    PauseMachine,
    PortThresholds,
    far_ends,
    idle_interval_s,
    ingress_watch,
    thresholds,
)
from zcube_lab.core.fabric.queues import QueueModel
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.core.fabric.scaledown import scaled_sizes
from zcube_lab.emulator.lab.ingressbacklog import IngressReader, parse_packet_sockets
from zcube_lab.emulator.lab.lossless import AgentPlan, AgentReport, agent_plan

ZCUBE16 = build_fabric(FabricSpec.of("zcube", **scaled_sizes("zcube", 16)))
LIM = PortThresholds(xoff=10_000, xon=7_000, limit=50_000)
# a2-eth6 (a2's uplink to b1) and its feeders; a2's host ports and the uplink counted at ingress
FEEDS = {"a2-eth6": frozenset({"h8-eth0", "h9-eth0", "h10-eth0", "h11-eth0"})}
INGRESS = {"a2-eth1": "h8-eth0", "a2-eth2": "h9-eth0", "a2-eth6": "b1-eth7"}
IN_LIM = PortThresholds(xoff=8_000, xon=5_000, limit=8_000)


def machine(ingress: bool = True) -> PauseMachine:
    return PauseMachine(
        {"a2-eth6": LIM},
        FEEDS,
        ingress=INGRESS if ingress else {},
        ingress_limits={p: IN_LIM for p in INGRESS} if ingress else {},
    )


def test_an_ingress_backlog_past_xoff_pauses_exactly_its_links_far_end():
    m = machine()
    d = m.observe(0.0, {"a2-eth6": 0}, {"a2-eth1": 0, "a2-eth2": 8_000, "a2-eth6": 100})
    assert d.pause == ("h9-eth0",) and d.resume == () and d.congested == ()
    assert d.ingress == ("a2-eth2",) and m.paused == {"h9-eth0"}
    # between XON and XOFF it stays paused; nothing else joins
    d = m.observe(0.001, {"a2-eth6": 0}, {"a2-eth1": 7_999, "a2-eth2": 5_001})
    assert d == type(d)() and m.paused == {"h9-eth0"}
    # at XON it resumes
    d = m.observe(0.002, {"a2-eth6": 0}, {"a2-eth2": 5_000})
    assert d.resume == ("h9-eth0",) and m.paused == set()
    assert m.totals(0.003)["h9-eth0"] == (1, pytest.approx(0.002))


def test_a_switch_to_switch_ingress_pauses_the_upstream_switch_port():
    m = machine()
    d = m.observe(0.0, {}, {"a2-eth6": 9_000})
    assert d.pause == ("b1-eth7",) and d.ingress == ("a2-eth6",)
    # the port's egress queue of the same name is another count: it pauses a2-eth6's feeders
    d = m.observe(0.001, {"a2-eth6": 10_000}, {"a2-eth6": 9_000})
    assert d.pause == ("h10-eth0", "h11-eth0", "h8-eth0", "h9-eth0") and d.congested == ("a2-eth6",)


def test_egress_pauses_are_unchanged_by_ingress_accounting():
    steps = [
        {"a2-eth6": 10_000},
        {"a2-eth6": 8_000},
        {"a2-eth6": 7_000},
        {"a2-eth6": 12_000},
    ]
    old, new = machine(ingress=False), machine()
    for i, backlogs in enumerate(steps):
        quiet_ingress = {p: 0 for p in INGRESS}
        assert new.observe(i * 1e-3, backlogs, quiet_ingress) == old.observe(i * 1e-3, backlogs)
    assert new.totals(0.01) == old.totals(0.01)


def test_a_port_wanted_by_both_rules_resumes_only_when_neither_wants_it():
    m = machine()
    m.observe(0.0, {"a2-eth6": 10_000}, {"a2-eth2": 9_000})
    assert "h9-eth0" in m.paused
    d = m.observe(0.001, {"a2-eth6": 10_000}, {"a2-eth2": 0})  # ingress clear, egress not
    assert "h9-eth0" not in d.resume and "h9-eth0" in m.paused
    d = m.observe(0.002, {"a2-eth6": 0}, {"a2-eth2": 0})
    assert "h9-eth0" in d.resume and m.paused == set()
    assert m.records["h9-eth0"].pauses == 1  # one pause, held by both in turn


def test_quiet_and_release_count_the_ingress_too():
    m = machine()
    assert m.quiet({"a2-eth6": 0}, {"a2-eth1": 3_999})
    assert not m.quiet({"a2-eth6": 0}, {"a2-eth1": 4_000})  # half of the ingress XOFF
    m.observe(0.0, {}, {"a2-eth1": 8_000})
    assert m.release_all(0.001) == ("h8-eth0",) and m.ingress_congested == set()


def test_every_switch_port_is_counted_at_ingress_with_its_own_thresholds_on_zcube():
    ends = far_ends(ZCUBE16)
    assert ends["a2-eth2"] == "h9-eth0" and ends["a2-eth6"] == "b1-eth7"
    assert ends["b1-eth7"] == "a2-eth6"
    assert len(ends) == len(ZCUBE16.switch_interfaces())
    packets = {p: 8 for p in ends}
    got, limits = ingress_watch(ZCUBE16, {"h9-eth0", "b1-eth7"}, packets, 9000)
    assert got == {"a2-eth2": "h9-eth0", "a2-eth6": "b1-eth7"}  # only pausable far ends
    xoff, xon = thresholds(8, 9000)
    assert limits["a2-eth2"] == PortThresholds(xoff, xon, xoff)


def test_the_agents_plan_counts_ingress_unless_told_not_to_and_round_trips():
    shapes = port_shapes(ZCUBE16, Scale(), 9000, QueueModel(packets=8), lossless=True)
    pids = {h.name: 100 + h.gid for h in ZCUBE16.hosts}
    plan = agent_plan(ZCUBE16, shapes, pids, 9000)
    assert plan.ingress["a2-eth2"] == "h9-eth0" and plan.ingress["b1-eth7"] == "a2-eth6"
    assert set(plan.ingress.values()) <= set(plan.fifo_bytes)  # every far end is pausable
    assert AgentPlan.from_json(plan.to_json()) == plan
    off = agent_plan(ZCUBE16, shapes, pids, 9000, ingress=False)
    assert off.ingress == {} and off.ingress_thresholds == {}
    assert off.thresholds == plan.thresholds and off.feeds == plan.feeds
    # an older plan file (no ingress keys) reads as egress only
    old = (
        plan.to_json()
        .replace('"ingress"', '"x_ingress"')
        .replace('"ingress_thresholds"', '"x_ingress_thresholds"')
    )
    assert AgentPlan.from_json(old).ingress == {}
    report = AgentReport(ingress=True, ingress_ports=64, ingress_congestions=3)
    assert AgentReport.from_dict(report.to_dict()) == report


def test_an_ingress_fed_at_line_rate_shortens_the_idle_interval():
    limits = {"s-eth1": PortThresholds(1_000_000, 990_000, 2_000_000)}
    feeds = {"s-eth1": ["h-eth0"]}
    rates = {"s-eth1": 100.0, "h-eth0": 100.0}  # one feeder at the port's rate: never fills
    assert idle_interval_s(limits, feeds, rates, 0.001) == 0.010
    ing = {"s-eth2": "h-eth0"}
    ing_limits = {"s-eth2": PortThresholds(200_000, 180_000, 200_000)}
    # (100,000 - 15 KiB) at 12.5 MB/s: the switch may forward none of it
    want = (100_000 - HTB_BURST_BYTES) / 12.5e6
    got = idle_interval_s(limits, feeds, rates, 0.001, ingress=ing, ingress_limits=ing_limits)
    assert got == pytest.approx(want)


# /proc/net/packet as this machine's kernel (6.18) writes it: lines of a capture with a lab up,
# some Rmem values and one duplicated socket set by hand. The agent's tap (Iface 0), a kick
# socket (protocol 0, bound to a port), ovs-vswitchd's receive sockets (protocol 0003 =
# ETH_P_ALL), one of them holding 1,765,888 B (docs/REPLAY.md's a2 host ports at +1.744 s)
SAMPLE = """\
sk               RefCnt Type Proto  Iface R Rmem   User   Inode
0000000005dc3a36 2      3    0000   0     0 0      0      145175200
00000000abeecfe9 3      3    0003   133850 1 0      0      145227398
0000000092596de5 3      3    0003   133835 1 1765888 0      145227399
00000000b3ba0992 3      3    0003   133858 1 2304   0      145227400
00000000cb5a79d8 3      3    0003   133858 1 4608   0      145227401
000000006e2819cc 3      3    0000   133843 0 0      0      145227404
00000000ee2f42ae 3      3    0003   0     1 9216   0      145227410
"""


def test_parse_proc_net_packet_sums_receive_memory_per_bound_interface():
    assert parse_packet_sockets(SAMPLE) == {
        133850: 0,
        133835: 1_765_888,
        133858: 6_912,  # two sockets on one port (two receive queues): summed
        133843: 0,  # a kick socket: bound, receives nothing
    }  # a socket on every interface (Iface 0) is nobody's ingress
    assert parse_packet_sockets("") == {}
    with pytest.raises(ValueError, match="header"):
        parse_packet_sockets("sk RefCnt Type\n1 2 3\n")


def test_the_reader_reads_the_file_again_on_each_call(tmp_path):
    path = tmp_path / "packet"
    path.write_text(SAMPLE)
    reader = IngressReader(str(path))
    first = reader.read()
    assert first[133835] == 1_765_888 and reader.read() == first
    path.write_text(SAMPLE.replace("1765888", "4096"))  # the same file, its contents moved on
    assert reader.read()[133835] == 4096  # read again, not the first reading kept
    reader.close()


def test_a_failed_ingress_read_counts_an_error_and_resumes_what_ingress_paused():
    """A read of /proc/net/packet that fails must not hold a far end paused without end: it
    reads as empty backlogs (every counted port 0), and the error is counted."""
    from zcube_lab.emulator.lab.lossless import Agent

    class Broken:
        def read(self) -> dict[int, int]:
            raise OSError("gone")

    agent = Agent.__new__(Agent)  # only what _ingress reads; no lab
    agent.ingress_reader = Broken()
    agent.ingress_index = {7: "b1-eth7", 8: "b1-eth8"}
    agent.errors, agent.last_error, agent.ingress_peak = 0, "", (0, "")
    assert agent._ingress() == {"b1-eth7": 0, "b1-eth8": 0}
    assert agent.errors == 1 and agent.last_error == "ingress: gone"
    machine = PauseMachine(
        limits={}, feeds={}, ingress={"b1-eth7": "a2-eth6"},
        ingress_limits={"b1-eth7": PortThresholds(10_000, 4_000, 10_000)},
    )  # fmt: skip
    assert machine.observe(0.0, {}, {"b1-eth7": 20_000}).pause == ("a2-eth6",)
    assert machine.observe(0.1, {}, agent._ingress()).resume == ("a2-eth6",)
