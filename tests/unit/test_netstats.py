"""Network counters: parsers on text captured from a real lab (`data/netstats/`, a ZCube n=4 run:
host h0's namespace and the root namespace), per-window events, run totals, and the sampler
against a fake /proc."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.lab.netsampler import NetSampler
from zcube_lab.emulator.verdict.netstats import (
    DEV_DROPS,
    OVER_RATE,
    QDISC_DROPS,
    SOFTNET_DROPS,
    STALLED,
    SYN_RETRANS,
    TIMEOUTS,
    DevCounters,
    NetReading,
    QdiscStats,
    RateLimits,
    TcpCounters,
    parse_net_dev,
    parse_proc_table,
    parse_qdiscs,
    parse_softnet,
    parse_tcp_counters,
    queue_figures,
    root_qdiscs,
    shaped_rates,
    softnet_totals,
    tcp_totals,
    window_events,
)

DATA = Path(__file__).parent / "data" / "netstats"
NETSTAT = (DATA / "h0-netstat.txt").read_text()
SNMP = (DATA / "h0-snmp.txt").read_text()


def test_tcp_counters_of_a_real_namespace() -> None:
    assert parse_tcp_counters(NETSTAT, SNMP) == TcpCounters(
        out_segs=2686, retrans_segs=15, timeouts=0, syn_retrans=0, lost_retrans=0, fast_retrans=15
    )


def test_tcp_counters_find_each_counter_by_name_not_position() -> None:
    netstat = NETSTAT.replace("TCPTimeouts", "TCPTimeoutz")  # a kernel without the counter
    assert parse_tcp_counters(netstat, SNMP).timeouts == 0
    header, values = NETSTAT.splitlines()[:2]
    names, vals = header.split(), values.split()
    vals[names.index("TCPTimeouts")] = "7"
    vals[names.index("TCPSynRetrans")] = "2"
    text = "\n".join([" ".join(names), " ".join(vals), *NETSTAT.splitlines()[2:]])
    counters = parse_tcp_counters(text, SNMP)
    assert (counters.timeouts, counters.syn_retrans) == (7, 2)


def test_proc_table_refuses_lines_that_do_not_pair() -> None:
    with pytest.raises(ValueError, match="pair"):
        parse_proc_table("Tcp: A B\nUdp: 1 2\n")
    assert parse_proc_table(SNMP)["Tcp"]["MaxConn"] == -1


def test_tcp_difference_is_what_happened_in_between() -> None:
    before = TcpCounters(out_segs=100, retrans_segs=3, timeouts=1)
    after = TcpCounters(out_segs=250, retrans_segs=5, timeouts=3, fast_retrans=2)
    assert after.minus(before) == TcpCounters(150, 2, 2, 0, 0, 2)
    assert before.minus(after).out_segs == 0  # never negative


def test_qdiscs_of_a_host_namespace_keep_only_queues() -> None:
    qdiscs = parse_qdiscs((DATA / "h0-qdisc.json").read_text())
    assert {q.dev for q in qdiscs} == {"lo", "h0-eth0", "h0-eth1", "h0-mgmt"}
    roots = root_qdiscs(qdiscs)
    assert set(roots) == {"h0-eth0", "h0-eth1"}  # noqueue (lo, management) has no queue
    eth0 = roots["h0-eth0"]
    assert (eth0.kind, eth0.handle, eth0.parent, eth0.key) == ("htb", "5:", "root", "h0-eth0/5:")
    assert (eth0.bytes, eth0.packets, eth0.overlimits) == (7024413, 1086, 389)


def test_root_qdisc_stands_for_its_children() -> None:
    text = (DATA / "root-qdisc.json").read_text().rstrip()
    child = (
        '{"kind":"bfifo","handle":"10:","parent":"5:1","dev":"a0-eth5","bytes":9,"packets":1,'
        '"drops":4,"overlimits":0,"requeues":0,"backlog":9000,"qlen":1}'
    )
    qdiscs = parse_qdiscs(text[:-1] + "," + child + "]")
    assert [q.parent for q in qdiscs if q.dev == "a0-eth5"] == ["root", "5:1"]
    assert root_qdiscs(qdiscs)["a0-eth5"].kind == "htb"


def test_net_dev_and_softnet() -> None:
    devs = parse_net_dev((DATA / "h0-dev.txt").read_text())
    assert devs["h0-eth0"] == DevCounters(62250, 882, 0, 5758200, 895, 0)
    text = (DATA / "softnet_stat.txt").read_text()
    assert parse_softnet(text) == {"cpu0": 0, "cpu1": 0}
    cols = text.splitlines()[1].split()
    cols[1] = "0000001a"  # 26 drops on the second line's CPU
    assert parse_softnet(" ".join(cols)) == {"cpu1": 26}
    assert parse_softnet("00000001 00000002 00000000\n") == {"cpu0": 2}  # old kernels: no id


def test_shaped_rates_name_both_ends_of_every_link() -> None:
    fabric = build_fabric(FabricSpec.of("zcube", n=4))
    rates = shaped_rates(fabric, Scale(nic_mbps=100))
    assert len(rates) == 2 * len(fabric.links)
    assert rates["h0-eth0"] == Scale(nic_mbps=100).link_mbps(fabric, fabric.links[0].gbps)
    assert set(fabric.switch_interfaces()) <= set(rates)


# --- windows ---------------------------------------------------------------------------------

RATES = {"s1-eth1": 80.0}  # 10 MB/s


def _q(sent: int, drops: int = 0, backlog: int = 0, qlen: int = 0) -> QdiscStats:
    return QdiscStats("s1-eth1", "htb", "5:", "root", sent, 0, drops, 0, 0, backlog, qlen)


def _at(t: float, **parts: object) -> NetReading:
    return NetReading(t, t + 0.01, **parts)  # type: ignore[arg-type]


def test_events_name_the_host_the_interface_and_the_cpu() -> None:
    readings = [
        _at(0.0, tcp={"h3": TcpCounters(timeouts=1)}, softnet={"cpu1": 0}),
        _at(0.0, qdiscs={"s1-eth1": _q(0)}, devs={"s1-eth1": DevCounters(), "eth0": DevCounters()}),
        _at(1.0, tcp={"h3": TcpCounters(timeouts=3, syn_retrans=1, fast_retrans=9)}),
        _at(1.0, qdiscs={"s1-eth1": _q(1_000_000, drops=5)}, softnet={"cpu1": 2}),
        _at(1.0, devs={"s1-eth1": DevCounters(tx_dropped=1), "eth0": DevCounters(rx_dropped=9)}),
    ]
    found = {(e.where, e.quantity, e.count) for e in window_events(readings, RATES)}
    assert found == {
        ("h3", TIMEOUTS, 2),
        ("h3", SYN_RETRANS, 1),
        ("s1-eth1", QDISC_DROPS, 5),
        ("cpu1", SOFTNET_DROPS, 2),
        ("s1-eth1", DEV_DROPS, 1),  # eth0 is not the lab's: ignored
    }


def test_a_key_is_compared_with_the_last_reading_that_had_it() -> None:
    # Host qdiscs are read every few seconds: the window spans the readings in between.
    readings = [
        _at(0.0, qdiscs={"s1-eth1": _q(0)}),
        _at(1.0, tcp={"h0": TcpCounters()}),
        _at(5.0, qdiscs={"s1-eth1": _q(5_000_000, drops=1)}),
    ]
    (event,) = window_events(readings, RATES)
    assert (event.t0, event.t1, event.count) == (0.01, 5.0, 1)


def test_a_link_above_its_rate_is_flagged_with_a_margin_for_timing() -> None:
    # 10 MB/s is the rate; the dumps were at most 1.01 s apart, and 5% more is tolerated:
    # 10.5 MB in that window is 83.2 Mb/s (allowed up to 84), 11 MB is 87.1 Mb/s.
    at_rate = [_at(0.0, qdiscs={"s1-eth1": _q(0)}), _at(1.0, qdiscs={"s1-eth1": _q(10_500_000)})]
    assert window_events(at_rate, RATES) == []
    over = [_at(0.0, qdiscs={"s1-eth1": _q(0)}), _at(1.0, qdiscs={"s1-eth1": _q(11_000_000)})]
    (event,) = window_events(over, RATES)
    assert event.quantity == OVER_RATE
    assert event.detail["mbps"] == pytest.approx(11e6 * 8 / 1.01 / 1e6)


def test_a_queue_that_never_emptied_but_sent_slowly_is_stalled() -> None:
    # 3 MB held at the start, 2 MB sent: it never ran empty, yet sent at 20% of 10 MB/s.
    stalled = [
        _at(0.0, qdiscs={"s1-eth1": _q(0, backlog=3_000_000, qlen=400)}),
        _at(1.0, qdiscs={"s1-eth1": _q(2_000_000, backlog=1_500_000, qlen=200)}),
    ]
    (event,) = window_events(stalled, RATES)
    assert event.quantity == STALLED and event.detail["mbps"] < 40
    # The same rate with a short queue proves nothing: it may have run empty in between.
    bursty = [
        _at(0.0, qdiscs={"s1-eth1": _q(0, backlog=90_000, qlen=10)}),
        _at(1.0, qdiscs={"s1-eth1": _q(2_000_000, backlog=90_000, qlen=10)}),
    ]
    assert window_events(bursty, RATES) == []


def test_run_totals_and_queue_figures() -> None:
    readings = [
        _at(0.0, tcp={"h0": TcpCounters(out_segs=10)}, softnet={"cpu0": 4}),
        _at(0.0, qdiscs={"s1-eth1": _q(0, drops=2)}, devs={"s1-eth1": DevCounters()}),
        _at(1.0, qdiscs={"s1-eth1": _q(5_000_000, backlog=250_000, qlen=30)}),
        _at(
            2.0, qdiscs={"s1-eth1": _q(6_000_000, drops=7)}, devs={"s1-eth1": DevCounters(0, 0, 3)}
        ),
        _at(2.0, tcp={"h0": TcpCounters(out_segs=60, retrans_segs=2)}, softnet={"cpu0": 5}),
    ]
    assert tcp_totals(readings) == {"h0": TcpCounters(out_segs=50, retrans_segs=2)}
    assert softnet_totals(readings) == {"cpu0": 1}
    fig = queue_figures(readings, RATES)["s1-eth1"]
    assert (fig.drops, fig.dev_drops) == (5, 3)
    assert (fig.peak_backlog_bytes, fig.peak_backlog_packets) == (250_000, 30)
    assert fig.peak_delay_ms == pytest.approx(25.0)  # 250 KB at 10 MB/s
    assert fig.peak_mbps == pytest.approx(5e6 * 8 / 1.01 / 1e6)


# --- the sampler, against a fake /proc -------------------------------------------------------


def _fake_proc(root: Path, netstat: str) -> None:
    host = root / "4242" / "net"
    host.mkdir(parents=True, exist_ok=True)
    (host / "netstat").write_text(netstat)
    (host / "snmp").write_text(SNMP)
    (host / "dev").write_text((DATA / "h0-dev.txt").read_text())
    (root / "net").mkdir(exist_ok=True)
    (root / "net" / "dev").write_text((DATA / "h0-dev.txt").read_text())
    (root / "net" / "softnet_stat").write_text((DATA / "softnet_stat.txt").read_text())


def test_sampler_reads_hosts_before_during_and_after(tmp_path: Path) -> None:
    _fake_proc(tmp_path, NETSTAT)
    sampler = NetSampler(
        {"h0": 4242}, {"h0-eth0": 100.0}, interval_s=0.05, host_qdisc_every=1000, proc=tmp_path
    ).start()
    header, values = NETSTAT.splitlines()[:2]
    vals = values.split()
    vals[header.split().index("TCPTimeouts")] = "2"
    time.sleep(0.2)
    _fake_proc(tmp_path, "\n".join([header, " ".join(vals), *NETSTAT.splitlines()[2:]]))
    readings = sampler.stop()
    assert sampler.taken["h0"] >= 3  # start, at least one tick, the end
    assert readings == sum(sampler.taken.values())
    evidence = sampler.evidence()
    assert evidence.tcp["h0"].timeouts == 2
    assert [(e.where, e.quantity, e.count) for e in evidence.events] == [("h0", TIMEOUTS, 2)]
    assert set(evidence.queues) == {"h0-eth0"}  # its interface counters were read
    assert sampler.stop() == readings  # stopping twice is harmless


def test_sampler_survives_a_host_that_is_gone(tmp_path: Path) -> None:
    _fake_proc(tmp_path, NETSTAT)
    sampler = NetSampler({"h0": 4242, "h9": 9999}, {}, interval_s=0.05, proc=tmp_path)
    sampler.start()
    sampler.stop()
    assert set(sampler.taken) == {"root", "h0"}  # h9 is gone: no reading of it
    assert sampler.failures > 0


def test_reading_replace_keeps_parts_apart() -> None:
    r = _at(0.0, tcp={"h0": TcpCounters()})
    assert replace(r, t1=1.0).tcp == {"h0": TcpCounters()} and not r.qdiscs


# --- bounded memory: readings are tallied, not kept ------------------------------------------


def _busy_readings(n: int, start: int = 0) -> list[NetReading]:
    """`n` seconds of a root namespace (one shaped queue) and a host, read each second: nothing
    that makes an event (events are kept, one per window something was counted in)."""
    return [
        r
        for t in range(start, start + n)
        for r in (
            _at(float(t), qdiscs={"s1-eth1": _q(t * 100_000, backlog=t % 7)}, softnet={"cpu0": 3}),
            _at(float(t), tcp={"h0": TcpCounters(out_segs=10 * t)}),
        )
    ]


def test_a_sampler_fed_readings_keeps_no_more_memory_after_ten_times_as_many() -> None:
    import gc
    import tracemalloc

    sampler = NetSampler({}, RATES)

    def grown(n: int, start: int) -> int:
        readings = _busy_readings(n, start)  # made before measuring: only what the sampler keeps
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for r in readings:
            sampler._add(r)
        del readings
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return after - before

    grown(100, 0)  # the first keys and records are made once
    assert grown(2000, 100) < 5_000  # a kept reading alone is a few hundred bytes
    assert sampler.readings == 4200
    # ... and its figures are those of all 4200 readings.
    assert sampler.evidence().tcp == tcp_totals(_busy_readings(2100))
    assert sampler.evidence().queues == queue_figures(_busy_readings(2100), RATES)


def test_a_sampler_refuses_rate_limits_other_than_its_own() -> None:
    sampler = NetSampler({}, RATES, limits=RateLimits(over=1.2))
    assert sampler.evidence(limits=RateLimits(over=1.2)).events == ()
    with pytest.raises(ValueError, match="differ"):
        sampler.evidence(limits=RateLimits())


def test_the_counter_readers_read_the_namespace_asked(tmp_path: Path, monkeypatch) -> None:
    """The sampler's readers (shared with the replay's CounterReader): /proc/net of the root
    namespace or of a host's process, and tc in it through nsenter."""
    from types import SimpleNamespace

    from zcube_lab.emulator.lab import netsampler as ns

    _fake_proc(tmp_path, NETSTAT)
    assert ns.net_path("dev", 4242, tmp_path) == tmp_path / "4242" / "net" / "dev"
    assert ns.net_path("dev", None, tmp_path) == tmp_path / "net" / "dev"
    assert ns.dev_counters(4242, tmp_path) == parse_net_dev((DATA / "h0-dev.txt").read_text())
    softnet = parse_softnet((DATA / "softnet_stat.txt").read_text())
    assert ns.softnet_counters(tmp_path) == softnet
    calls: list[list[str]] = []

    def tc(argv: list[str], **_: object) -> SimpleNamespace:
        calls.append(argv)
        return SimpleNamespace(stdout=(DATA / "h0-qdisc.json").read_text())

    monkeypatch.setattr(ns.subprocess, "run", tc)
    want = root_qdiscs(parse_qdiscs((DATA / "h0-qdisc.json").read_text()))
    assert ns.qdisc_stats(4242, tmp_path) == want
    assert calls[-1] == ["nsenter", f"--net={tmp_path}/4242/ns/net", *ns.TC_QDISCS]
    assert ns.qdisc_stats() == want and calls[-1] == list(ns.TC_QDISCS)
    with pytest.raises(OSError):
        ns.dev_counters(9999, tmp_path)  # a host that is gone
