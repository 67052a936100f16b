"""The lossless agent's sleep while the fabric is still: when it may sleep (`Stillness`), the
tap's filter (which interfaces wake it), the kernel's receive stamp read from ancillary data,
and the packet counters the qdisc dump now returns beside the backlogs."""

from __future__ import annotations

import socket

from zcube_lab.core.fabric.lossless import Stillness
from zcube_lab.emulator.lab import qdisc_netlink as nl
from zcube_lab.emulator.lab.losslesstap import (
    CHUNK,
    KEEP_BYTES,
    SO_TIMESTAMPNS,
    SOCK_FILTER,
    TIMESPEC,
    ifindex_filter,
    run_filter,
    stamp_s,
)


def test_still_only_after_quiet_empty_readings_without_a_packet_sent_for_long_enough() -> None:
    s = Stillness(after_s=0.05)
    assert not s.observe(0.00, True, {"p": 0}, 100)  # first reading: nothing to compare
    assert not s.observe(0.01, True, {"p": 0}, 100)  # still since 0.01
    assert not s.observe(0.05, True, {"p": 0}, 100)
    assert s.observe(0.07, True, {"p": 0}, 100)  # still for 60 ms


def test_a_packet_sent_a_queue_not_empty_or_a_busy_reading_starts_stillness_over() -> None:
    s = Stillness(after_s=0.05)
    s.observe(0.0, True, {"p": 0}, 7)
    s.observe(0.01, True, {"p": 0}, 7)
    assert not s.observe(0.07, True, {"p": 0}, 8)  # one packet went through a watched port
    assert not s.observe(0.08, True, {"p": 0}, 8)
    assert not s.observe(0.20, True, {"p": 1500}, 8)  # a frame waits (below half XOFF)
    assert not s.observe(0.21, False, {"p": 0}, 8)  # something paused or congested
    assert not s.observe(0.22, True, {"p": 0}, 8)
    assert s.observe(0.28, True, {"p": 0}, 8)
    s.woken()  # a packet woke the agent: 50 ms of still readings again before it sleeps
    assert not s.observe(0.29, True, {"p": 0}, 8)
    assert s.observe(0.35, True, {"p": 0}, 8)


def test_the_filter_keeps_arrivals_at_the_watched_ports_only() -> None:
    watched = [3, 5, 900, 17]
    program = ifindex_filter(watched)
    for index in watched:
        assert run_filter(program, index) == KEEP_BYTES
    for index in (0, 1, 4, 6, 899, 10_000):  # loopback, the management bridge, hosts' veths
        assert run_filter(program, index) == 0


def test_the_filter_stays_within_classic_bpf_jumps_for_a_large_fabric() -> None:
    watched = list(range(10, 10 + 3 * CHUNK + 7, 1))  # more compares than one jump can span
    program = ifindex_filter(watched)
    ops = [SOCK_FILTER.unpack_from(program, o) for o in range(0, len(program), SOCK_FILTER.size)]
    assert len(ops) <= 4096  # the kernel's BPF_MAXINSNS
    assert all(jt <= 255 and jf <= 255 for _code, jt, jf, _k in ops)
    assert all(run_filter(program, i) == KEEP_BYTES for i in watched)
    assert run_filter(program, 9) == 0 and run_filter(program, 10 + 3 * CHUNK + 7) == 0
    assert run_filter(ifindex_filter([]), 1) == 0  # nothing watched: nothing wakes it


def test_the_receive_stamp_is_read_from_the_ancillary_data() -> None:
    stamp = (socket.SOL_SOCKET, SO_TIMESTAMPNS, TIMESPEC.pack(1_700_000_000, 250_000_000))
    assert stamp_s([(0, 1, b"x"), stamp]) == 1_700_000_000.25
    assert stamp_s([]) is None
    assert stamp_s([(socket.SOL_SOCKET, SO_TIMESTAMPNS, b"\0" * 4)]) is None  # truncated


def test_the_dump_scan_returns_each_watched_leaf_s_packets_sent_beside_its_backlog() -> None:
    def qdisc(ifindex: int, handle: str, packets: int, backlog: int) -> bytes:
        stats = nl.TC_STATS.pack(packets * 9000, packets, 0, 0, 0, 0, 0, backlog)
        body = (
            nl.TCMSG.pack(0, ifindex, nl.tc_handle(handle), 0, 1)
            + nl.attr(nl.TCA_KIND, b"tbf\0")
            + nl.attr(nl.TCA_STATS, stats)
        )
        return nl.message(nl.RTM_NEWQDISC, 2, 9, body)

    leaf = nl.tc_handle("10:")
    data = qdisc(3, "10:", 41, 9000) + qdisc(3, "5:", 99, 0) + qdisc(4, "10:", 12, 0)
    out: dict[str, int] = {}
    sent: dict[str, int] = {}
    nl.scan_backlogs(data, 9, {3: "a0-eth1", 4: "a0-eth2"}, leaf, out, sent)
    assert out == {"a0-eth1": 9000, "a0-eth2": 0}
    assert sent == {"a0-eth1": 41, "a0-eth2": 12}
