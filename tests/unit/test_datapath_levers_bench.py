"""bench/datapath_levers.py without a lab: /proc and coverage parsing, the figures of a window,
medians over repeats, the keep/drop rule and the lever names."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.datapath_levers import (
    Counters,
    median_window,
    parse_coverage,
    parse_thread_stat,
    parse_voluntary_switches,
    table,
    verdicts,
    window,
)

COVERAGE = """Event coverage, avg rate over last: 5 seconds, last minute, last hour,  hash=1a2b3c4d:
bridge_reconfigure         0.0/sec     0.000/sec        0.0003/sec   total: 3
poll_create_node         4614.8/sec  4400.100/sec     1200.0000/sec   total: 998877
netdev_received          182.2/sec   170.000/sec        50.0000/sec   total: 12345
51 events never hit
"""
# /proc/<pid>/task/<tid>/stat of a thread whose name has a space and a parenthesis.
STAT = "4242 (ovs (vswitchd) S 1 4242 4242 0 -1 4194624 777 0 3 0 150 50 0 0 20 0 9 0 100 0 0"


def test_coverage_totals() -> None:
    assert parse_coverage(COVERAGE) == {
        "bridge_reconfigure": 3,
        "poll_create_node": 998877,
        "netdev_received": 12345,
    }


def test_thread_stat_and_status() -> None:
    assert parse_thread_stat(STAT) == (200, 777)  # utime 150 + stime 50, minflt 777
    status = "Name:\tovs-vswitchd\nvoluntary_ctxt_switches:\t9001\nnonvoluntary_ctxt_switches:\t4\n"
    assert parse_voluntary_switches(status) == 9001
    with pytest.raises(ValueError):
        parse_voluntary_switches("Name:\tx\n")


def counters(t: float, **kw: object) -> Counters:
    base = dict(
        cpu_ticks=0,
        main_ticks=(0, 0),
        main_faults=0,
        main_wakeups=0,
        ingress_bytes=0,
        switch_packets=0,
        coverage={"netdev_received": 0, "poll_create_node": 0},
    )
    base.update(kw)
    return Counters(t=t, **base)  # type: ignore[arg-type]


def test_a_window() -> None:
    before = counters(10.0)
    after = counters(
        20.0,
        cpu_ticks=300,  # 3 s of CPU at 100 ticks/s over 10 s: 0.3 cores
        main_ticks=(150, 50),
        main_faults=40,
        main_wakeups=2000,
        ingress_bytes=62_500_000,  # 500 Mb: 50 Mb/s
        switch_packets=5000,
        coverage={"netdev_received": 4000, "poll_create_node": 100_000},
    )
    w = window("inst2", before, after, clk_tck=100, kv_ratios={1_000_000: 1.02})
    assert (w.seconds, w.daemons, w.ovs_cores, w.ingress_mbps) == (10.0, 2, 0.3, 50.0)
    assert w.cpu_ms_per_mb == 6.0  # 3000 ms / 500 Mb
    assert (w.switch_pps, w.wakeups_per_s, w.packets_per_wakeup) == (500.0, 200.0, 2.5)
    assert w.polls_per_batch == 25.0
    assert w.main_faults_per_s == 4.0
    assert w.busiest_main_cores == 0.15
    assert w.kv_ratios == {1_000_000: 1.02}
    idle = window("system", before, counters(20.0), clk_tck=100)
    assert idle.cpu_ms_per_mb == float("inf") and idle.packets_per_wakeup == 0.0
    assert idle.polls_per_batch is None


def test_medians_and_verdicts() -> None:
    before = counters(0.0)
    after = counters(10.0, cpu_ticks=600, ingress_bytes=125_000_000, main_wakeups=100)
    base = window("system", before, after, 100, {10: 1.0, 20: 1.1})
    reps = [
        replace(base, cpu_ms_per_mb=x, kv_ratios={10: r, 20: None})
        for x, r in ((6.0, 1.0), (5.0, 1.2), (7.0, 1.1))
    ]
    med = median_window(reps)
    assert med.cpu_ms_per_mb == 6.0 and med.kv_ratios == {10: 1.1, 20: None}
    system = replace(base, cpu_ms_per_mb=10.0)
    keep = replace(base, lever="inst2", cpu_ms_per_mb=7.9, kv_ratios={10: 1.04, 20: 1.1})
    small = replace(base, lever="inst4", cpu_ms_per_mb=8.5)
    unfaithful = replace(base, lever="inst8", cpu_ms_per_mb=5.0, kv_ratios={10: 1.2, 20: 1.1})
    failed = replace(base, lever="inst3", cpu_ms_per_mb=5.0, kv_ratios={10: None, 20: 1.1})
    got = verdicts([system, keep, small, unfaithful, failed])
    assert got["inst2"].startswith("keep")
    assert got["inst4"].startswith("drop: CPU/Mb")
    assert got["inst8"].startswith("drop: KV") and "[10]" in got["inst8"]
    assert got["inst3"].startswith("drop: KV")
    assert verdicts([keep]) == {}  # no baseline, no verdict
    text = table([system, keep], reference=replace(base, lever="one-flow", cpu_ms_per_mb=2.0))
    assert "| system | 2 |" in text and "| 5.0 |" in text  # 10 / 2 = 5x the one-flow cost


def test_a_lever_that_bypasses_the_qdiscs_is_dropped_whatever_it_saves() -> None:
    before = counters(0.0, switch_tx=1000, qdisc_sent=900)
    after = counters(10.0, cpu_ticks=100, ingress_bytes=125_000_000, switch_tx=3000, qdisc_sent=920)
    w = window("inst1+afxdp@3000", before, after, 100, {10: 1.0})
    assert w.qdisc_share == 0.01  # 20 of 2000 sends went through a qdisc
    system = replace(w, lever="system", cpu_ms_per_mb=10.0, qdisc_share=1.0)
    got = verdicts([system, replace(w, cpu_ms_per_mb=1.0)])
    assert got["inst1+afxdp@3000"].startswith("drop: the qdiscs saw 1%")
    assert "| 0.010 |" in table([w], None)


def test_select_groups_rewritten_to_hash_fields() -> None:
    from zcube_lab.emulator.lab.ovsbridges import hash_group_line

    line = (
        "group_id=7,type=select,selection_method=dp_hash,bucket=bucket_id:0,weight:100,"
        'actions=output:"A0-eth5",bucket=bucket_id:1,weight:100,actions=output:"A0-eth6"'
    )
    assert hash_group_line(line, "ip_src,ip_dst") == (
        "group_id=7,type=select,selection_method=hash,fields(ip_src,ip_dst),"
        'bucket=bucket_id:0,weight:100,actions=output:"A0-eth5",'
        'bucket=bucket_id:1,weight:100,actions=output:"A0-eth6"'
    )
    again = hash_group_line(hash_group_line(line, "ip_src") or "", "ip_dst")
    assert again is not None and again.count("selection_method") == 1 and "fields(ip_dst)" in again
    assert hash_group_line("group_id=1,type=ff,bucket=actions=output:1", "ip_src") is None
    assert hash_group_line("OFPST_GROUP_DESC reply (OF1.5) (xid=0x2):", "ip_src") is None
