"""The lossless mode's pure parts: who feeds whom, thresholds, the pause state machine, the
agent's plan and report round trips, and the netlink messages it sends and reads."""

from __future__ import annotations

import struct

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.lossless import (
    PauseMachine,
    PortThresholds,
    feeders,
    fifo_bytes,
    headroom_bytes,
    holding_leaf_line,
    port_thresholds,
    thresholds,
)
from zcube_lab.emulator.lab import qdisc_netlink as nl
from zcube_lab.emulator.lab.lossless import AgentPlan, AgentReport

ZCUBE = build_fabric(FabricSpec.of("zcube", n=2))
ROFT = build_fabric(FabricSpec.of("roft", servers=2, gpus_per_server=2))


def test_zcube_feeders_follow_its_two_hop_paths() -> None:
    feeds = feeders(ZCUBE)
    # a0's port to h0 gets h1 (same segment, same switch) and both B switches' traffic: h2 and
    # h3 reach h0's a0 address through their B port (src.p2 > B > A > dst.p1)
    assert feeds["a0-eth1"] == {"h1-eth0", "b0-eth3", "b1-eth3"}
    # a0's port up to b0 carries only what a0's own hosts send: no switch-switch-switch path
    assert feeds["a0-eth3"] == {"h1-eth0"}
    assert all(not up.startswith(("a", "b")) for p, up_set in feeds.items()
               if p.split("-")[0] in ("a0", "a1", "b0", "b1") and p.endswith(("eth3", "eth4"))
               for up in up_set)  # fmt: skip


def test_roft_spine_ports_are_fed_by_leaves_only() -> None:
    feeds = feeders(ROFT)
    spine_ports = [p for p in feeds if p.startswith("spine")]
    assert spine_ports
    for port in spine_ports:
        assert feeds[port] and all(up.startswith("leaf") for up in feeds[port])
    # a port never feeds itself, and every feeder is the far end of a link into its switch
    ends = {f"{lk.node1}-eth{lk.port1}" for lk in ROFT.links} | {
        f"{lk.node2}-eth{lk.port2}" for lk in ROFT.links
    }
    for port, ups in feeds.items():
        assert port not in ups and ups <= ends


def test_thresholds_xoff_is_the_model_limit_and_xon_two_frames_lower() -> None:
    assert thresholds(64, 9000) == (576_000, 558_000)
    assert thresholds(2, 9000) == (18_000, 9_000)  # never below half of XOFF
    with pytest.raises(ConfigError):
        thresholds(0, 9000)


def test_headroom_covers_the_feeders_for_the_reaction_budget() -> None:
    # two 100 Mb/s feeders for 50 ms: 1.25 MB, plus a frame each
    assert headroom_bytes([100.0, 100.0], 9000) == 1_250_000 + 2 * 9064


def test_port_thresholds_put_headroom_above_xoff() -> None:
    ports = {p for lk in ZCUBE.links for p in (f"{lk.node1}-eth{lk.port1}",
                                                f"{lk.node2}-eth{lk.port2}")}  # fmt: skip
    limits = port_thresholds(ZCUBE, dict.fromkeys(ports, 8), dict.fromkeys(ports, 50.0), 9000)
    lim = limits["a0-eth1"]
    assert (lim.xoff, lim.xon) == (72_000, 54_000)
    assert lim.limit == 72_000 + headroom_bytes([50.0, 50.0, 50.0], 9000)


def machine() -> PauseMachine:
    lim = PortThresholds(xoff=100, xon=50, limit=1000)
    return PauseMachine(
        {"s1-eth1": lim, "s2-eth1": lim},
        {"s1-eth1": frozenset({"h1-eth0", "s2-eth1"}), "s2-eth1": frozenset({"h2-eth0"})},
    )


def test_pause_at_xoff_resume_at_xon_with_hysteresis() -> None:
    m = machine()
    assert m.observe(0.0, {"s1-eth1": 99}).pause == ()
    d = m.observe(1.0, {"s1-eth1": 100})
    assert d.pause == ("h1-eth0", "s2-eth1") and d.congested == ("s1-eth1",)
    assert m.observe(2.0, {"s1-eth1": 60}) == m.observe(2.5, {"s1-eth1": 51})  # still paused
    assert m.paused == {"h1-eth0", "s2-eth1"}
    d = m.observe(3.0, {"s1-eth1": 50})
    assert d.resume == ("h1-eth0", "s2-eth1") and not m.paused
    assert m.totals(3.0) == {"h1-eth0": (1, 2.0), "s2-eth1": (1, 2.0)}


def test_backpressure_spreads_hop_by_hop() -> None:
    m = machine()
    m.observe(0.0, {"s1-eth1": 200, "s2-eth1": 0})  # s1 congested: s2's port paused
    d = m.observe(1.0, {"s1-eth1": 200, "s2-eth1": 150})  # its queue grows past XOFF
    assert d.pause == ("h2-eth0",) and m.paused == {"h1-eth0", "s2-eth1", "h2-eth0"}
    d = m.observe(2.0, {"s1-eth1": 10, "s2-eth1": 150})  # root clears: s2's port resumes
    assert d.resume == ("h1-eth0", "s2-eth1") and m.paused == {"h2-eth0"}
    m.observe(4.0, {"s2-eth1": 0})
    assert m.totals(4.0)["h2-eth0"] == (1, 3.0)


def test_a_port_fed_twice_stays_paused_until_both_clear() -> None:
    lim = PortThresholds(xoff=10, xon=5, limit=100)
    m = PauseMachine({"x": lim, "y": lim}, {"x": frozenset({"f"}), "y": frozenset({"f"})})
    m.observe(0.0, {"x": 10, "y": 10})
    assert m.observe(1.0, {"x": 0, "y": 10}).resume == ()
    assert m.observe(2.0, {"x": 0, "y": 0}).resume == ("f",)
    assert m.totals(2.0) == {"f": (1, 2.0)}


def test_unknown_and_missing_ports_keep_state_and_release_all_ends_pauses() -> None:
    m = machine()
    m.observe(0.0, {"s1-eth1": 500, "other": 10**9})
    m.observe(1.0, {})  # a failed read: no change
    assert m.paused == {"h1-eth0", "s2-eth1"}
    assert m.release_all(4.0) == ("h1-eth0", "s2-eth1")
    assert not m.paused and not m.congested
    assert m.totals(10.0)["h1-eth0"] == (1, 4.0)  # closed at release, not counted on


def test_open_pause_is_counted_up_to_now() -> None:
    m = machine()
    m.observe(1.0, {"s1-eth1": 500})
    assert m.totals(1.5)["s2-eth1"] == (1, 0.5)


def test_agent_plan_and_report_round_trip() -> None:
    plan = AgentPlan(
        thresholds={"s1-eth1": PortThresholds(100, 50, 1000)},
        feeds={"s1-eth1": ("h1-eth0",)},
        fifo_bytes={"h1-eth0": 9000},
        namespaces={"h1-eth0": "/proc/1/ns/net"},
        mtu=9000,
        poll_s=0.002,
    )
    assert AgentPlan.from_json(plan.to_json()) == plan
    report = AgentReport(ports={"h1-eth0": {"pauses": 2, "paused_s": 0.5}}, cpu_s=1, wall_s=4)
    assert report.cores == 0.25
    assert AgentReport.from_dict(report.to_dict()) == report


def test_histogram_quantiles_by_bucket_never_above_the_largest() -> None:
    from zcube_lab.core.fabric.lossless import Histogram

    h = Histogram()
    assert h.quantile(0.5) is None
    for ms in (1.0, 2.0, 3.0, 4.0):
        h.add(ms / 1e3)
    assert h.quantile(0.5) == pytest.approx(0.00201)  # the 2 ms bucket's upper edge
    assert h.quantile(0.99) == pytest.approx(0.004)  # the largest, not its bucket's edge
    h.add(5.0)  # beyond the last bucket: counted there, the largest kept
    assert (h.n, h.largest, h.quantile(1.0)) == (5, 5.0, 5.0)


def test_holding_leaf_is_a_tbf_under_the_htb_class() -> None:
    assert holding_leaf_line("a0-eth1", 123456) == (
        "qdisc replace dev a0-eth1 parent 5:1 handle 10: tbf rate 4000000000bit burst 65536 "
        "limit 123456"
    )


def test_tbf_request_layout() -> None:
    msg = nl.tbf_request(7, ifindex=3, handle=nl.tc_handle("10:"), parent=nl.tc_handle("5:1"),
                         rate_bytes=1, burst=9064, limit=50_000)  # fmt: skip
    ((kind, seq, body),) = list(nl.messages(msg))
    assert (kind, seq) == (nl.RTM_NEWQDISC, 7)
    _fam, ifindex, handle, parent, _info = nl.TCMSG.unpack_from(body)
    assert (ifindex, handle, parent) == (3, 0x100000, 0x50001)
    top = dict(nl.attrs(body[nl.TCMSG.size :]))
    assert top[nl.TCA_KIND] == b"tbf\0"
    opts = dict(nl.attrs(top[nl.TCA_OPTIONS]))
    rate = nl.RATESPEC.unpack_from(opts[nl.TCA_TBF_PARMS])
    assert rate[1] == nl.TC_LINKLAYER_ETHERNET and rate[5] == 1
    assert struct.unpack_from("=I", opts[nl.TCA_TBF_PARMS], 24)[0] == 50_000  # limit
    assert struct.unpack("=I", opts[nl.TCA_TBF_BURST]) == (9064,)
    with pytest.raises(ValueError):
        nl.tbf_request(1, 3, 0, 0, rate_bytes=0, burst=1, limit=1)


def test_parse_qdisc_reads_backlog_from_stats2() -> None:
    queue = nl.attr(nl.TCA_STATS_QUEUE, nl.GNET_QUEUE.pack(4, 36000, 2, 0, 9))
    body = (
        nl.TCMSG.pack(0, 5, nl.tc_handle("10:"), nl.tc_handle("5:1"), 1)
        + nl.attr(nl.TCA_KIND, b"tbf\0")
        + nl.attr(nl.TCA_STATS2 | nl.NLA_F_NESTED, queue)
    )
    q = nl.parse_qdisc(body)
    assert (q.ifindex, q.kind, q.backlog_bytes, q.backlog_packets, q.drops) == (
        5, "tbf", 36000, 4, 2,
    )  # fmt: skip


def test_error_code_and_bad_lengths() -> None:
    assert nl.error_code(struct.pack("=i", -1)) == 1
    with pytest.raises(nl.NetlinkError):
        list(nl.attrs(struct.pack("=HH", 2, 1)))
    with pytest.raises(nl.NetlinkError):
        list(nl.messages(nl.NLMSG_HDR.pack(4, 1, 0, 0, 0)))


def test_agent_plan_watches_switch_ports_and_pauses_feeders_in_their_namespaces() -> None:
    from zcube_lab.core.fabric.linkplan import port_shapes
    from zcube_lab.core.fabric.queues import QueueModel
    from zcube_lab.core.fabric.scale import Scale
    from zcube_lab.emulator.lab.lossless import agent_plan

    shapes = port_shapes(ZCUBE, Scale(), 9000, QueueModel(packets=8), lossless=True)
    pids = {h.name: 100 + h.gid for h in ZCUBE.hosts}
    plan = agent_plan(ZCUBE, shapes, pids, 9000)
    assert set(plan.thresholds) == set(ZCUBE.switch_interfaces())
    assert plan.thresholds["a0-eth1"].xoff == 8 * 9000
    assert plan.feeds["a0-eth1"] == ("b0-eth3", "b1-eth3", "h1-eth0")
    assert plan.namespaces == {
        f"{h.name}-eth{i.index}": f"/proc/{100 + h.gid}/ns/net"
        for h in ZCUBE.hosts for i in h.interfaces
    }  # fmt: skip
    assert plan.fifo_bytes["b1-eth3"] == plan.thresholds["b1-eth3"].limit
    assert plan.fifo_bytes["h1-eth0"] == 2 * 1000 * (9000 + 64)  # the host's 1000 packets
    lossy = port_shapes(ZCUBE, Scale(), 9000, QueueModel(packets=8))
    with pytest.raises(ValueError):
        agent_plan(ZCUBE, lossy, pids, 9000)


def test_a_slow_poll_does_not_move_where_the_reaction_starts_after_a_quiet_reading() -> None:
    from zcube_lab.core.fabric.linkplan import port_shapes
    from zcube_lab.core.fabric.queues import QueueModel
    from zcube_lab.core.fabric.scale import Scale
    from zcube_lab.emulator.lab.lossless import agent_plan

    shapes = port_shapes(ZCUBE, Scale(), 9000, QueueModel(), lossless=True)
    fast = agent_plan(ZCUBE, shapes, {}, 9000, poll_s=0.001)
    slow = agent_plan(ZCUBE, shapes, {}, 9000, poll_s=0.05)
    assert fast.quiet_s == slow.quiet_s == fast.idle_poll_s  # the fabric's bound, at most 10 ms
    assert slow.idle_poll_s == 0.05  # it sleeps as long as it polls...
    assert slow.quiet_s is not None and slow.quiet_s <= 0.01  # ...but is timed from the bound
    assert AgentPlan.from_json(slow.to_json()) == slow


def test_fifo_bytes_give_watched_ports_their_headroom() -> None:
    ports = {f"{n}-eth{p}" for lk in ZCUBE.links for n, p in ((lk.node1, lk.port1),
                                                              (lk.node2, lk.port2))}  # fmt: skip
    packets = {p: (8 if p[0] in "ab" else 1000) for p in ports}
    sizes = fifo_bytes(ZCUBE, packets, dict.fromkeys(ports, 50.0), 9000)
    assert sizes["a0-eth1"] == 72_000 + headroom_bytes([50.0, 50.0, 50.0], 9000)
    assert sizes["h0-eth0"] == 2 * 1000 * 9064


def test_scan_backlogs_reads_only_the_wanted_leaves_until_done() -> None:
    def qdisc(seq: int, ifindex: int, handle: str, backlog: int) -> bytes:
        stats = nl.TC_STATS.pack(0, 0, 0, 0, 0, 0, backlog // 9000, backlog)
        body = (
            nl.TCMSG.pack(0, ifindex, nl.tc_handle(handle), 0, 1)
            + nl.attr(nl.TCA_KIND, b"tbf\0")
            + nl.attr(nl.TCA_STATS, stats)
        )
        return nl.message(nl.RTM_NEWQDISC, 2, seq, body)

    leaf = nl.tc_handle("10:")
    data = qdisc(5, 3, "10:", 18000) + qdisc(5, 3, "5:", 99) + qdisc(5, 4, "10:", 7)
    data += qdisc(4, 6, "10:", 1)  # an older dump's answer: ignored
    out: dict[str, int] = {}
    assert not nl.scan_backlogs(data, 5, {3: "a0-eth1", 6: "x"}, leaf, out)
    assert out == {"a0-eth1": 18000}
    assert nl.scan_backlogs(nl.message(nl.NLMSG_DONE, 2, 5, b"\0" * 4), 5, {}, leaf, out)
    with pytest.raises(nl.NetlinkError):
        nl.scan_backlogs(nl.message(nl.NLMSG_ERROR, 0, 5, struct.pack("=i", -1)), 5, {}, leaf, {})


def test_idle_interval_is_the_time_the_fastest_queue_needs_from_half_xoff_to_xoff() -> None:
    from zcube_lab.core.fabric.lossless import HTB_BURST_BYTES, IDLE_MAX_S, idle_interval_s

    lim = {"p": PortThresholds(xoff=64 * 9000, xon=62 * 9000, limit=10**7)}
    rates = {"p": 50.0, "f1": 50.0, "f2": 50.0, "f3": 50.0}
    feeds = {"p": ("f1", "f2", "f3")}
    # (288,000 - 3 bursts) bytes at (150 - 50) Mb/s
    expect = (288_000 - 3 * HTB_BURST_BYTES) / 12.5e6
    assert idle_interval_s(lim, feeds, rates, 0.001) == pytest.approx(min(expect, IDLE_MAX_S))
    assert idle_interval_s(lim, feeds, rates, 0.001, most_s=1.0) == pytest.approx(expect)
    small = {"p": PortThresholds(xoff=8 * 9000, xon=6 * 9000, limit=10**6)}
    assert idle_interval_s(small, feeds, rates, 0.001) == 0.001  # bursts exceed the margin
    assert idle_interval_s(lim, {"p": ("f1",)}, rates, 0.001) == IDLE_MAX_S  # cannot fill


def test_quiet_only_when_nothing_is_paused_and_every_queue_is_below_half_xoff() -> None:
    m = machine()
    assert m.quiet({"s1-eth1": 49, "s2-eth1": 0})
    assert not m.quiet({"s1-eth1": 50})
    m.observe(0.0, {"s1-eth1": 100})
    assert not m.quiet({"s1-eth1": 0})  # still congested until XON is seen
    m.observe(1.0, {"s1-eth1": 0})
    assert m.quiet({"s1-eth1": 0})


def test_reaction_starts_where_the_queue_could_first_have_passed_xoff() -> None:
    from zcube_lab.core.fabric.lossless import reaction_origin

    # after a busy reading the queue may have passed XOFF right after it
    assert reaction_origin(10.0, False, 0.008) == 10.0
    # after a quiet one it cannot have reached XOFF within the idle interval
    assert reaction_origin(10.0, True, 0.008) == pytest.approx(10.008)
    # the same true reaction (XOFF passed at 10.009, paused at 10.010) measures the same on a
    # fabric polling idly every 8 ms and on one polling every 1 ms: the bound no longer
    # carries the fabric's idle interval as slack
    slow = 10.010 - reaction_origin(10.000, True, 0.008)
    fast = 10.010 - reaction_origin(10.007, True, 0.001)
    assert slow == pytest.approx(0.002) and fast == pytest.approx(0.002)
