"""The MRC-style transport's cheaper paths (issue 36 item 5): batched socket reads, batched and
deduplicated ACKs, the paced sender's batched wakes, the sender's per-ack work, and the
bench's arithmetic (bench/mrc_cost.py)."""

from __future__ import annotations

import asyncio
import random
import socket
import zlib

import pytest

from bench import mrc_cost
from zcube_lab.serving.config import Address
from zcube_lab.serving.kvwire import mrcpull, mrcsender
from zcube_lab.serving.kvwire import mrcwire as w
from zcube_lab.serving.kvwire.mrc import MrcServer, pull_kv_mrc
from zcube_lab.serving.kvwire.mrcreceiver import ReceiverState
from zcube_lab.serving.kvwire.mrcsock import open_endpoint


def _sender(**kw: float) -> mrcsender.SenderState:
    st = mrcsender.SenderState(int(kw.get("num_bytes", 1000)), mss=100, window=10_000,
                               rate=kw.get("rate", 0.0), now=0.0)  # fmt: skip
    st.add_leg(0, [1000, 1001, 1002, 1003])
    return st


def test_a_datagram_acknowledged_in_two_parts_leaves_flight_with_the_second() -> None:
    st = _sender()
    sends = [st.next_send(0.0) for _ in range(3)]
    middle = sends[1]
    assert middle is not None and (middle.offset, middle.length) == (100, 100)
    st.on_ack(w.Ack(0, 0, 0, 0, ((100, 150),)), 0.001)
    assert middle.seq in st.inflight  # half of it acknowledged
    st.on_ack(w.Ack(0, 0, 0, 0, ((150, 200),)), 0.002)
    assert middle.seq not in st.inflight and st.inflight_bytes == 200
    assert st.ev_acked_seq[middle.ev.key] == middle.seq


def test_a_paced_sender_asks_to_wake_when_a_batch_may_go_at_most_the_bucket() -> None:
    st = _sender(num_bytes=100_000, rate=100_000.0)  # 1000 datagrams/s; bucket 4 datagrams
    assert st.next_send(0.0) is not None and st.next_send(0.0) is None
    assert st.wake_at(0.0) == pytest.approx(0.001)  # one datagram (the default)
    assert st.wake_at(0.0, batch=3) == pytest.approx(0.003)
    assert st.wake_at(0.0, batch=8) == pytest.approx(0.004)  # the bucket holds 4
    n = 0
    while st.next_send(0.004) is not None:
        n += 1
    assert n == 4


def test_an_endpoint_reads_every_waiting_datagram_in_one_wake_then_calls_the_batch_end() -> None:
    async def go() -> tuple[list[bytes], int]:
        got: list[bytes] = []
        batches = 0

        def batch() -> None:
            nonlocal batches
            batches += 1

        ep = open_endpoint(lambda d, _src: got.append(bytes(d)), "127.0.0.1", 0, batch)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for i in range(10):
                s.sendto(b"d%d" % i, ("127.0.0.1", ep.port))
            for _ in range(5):
                await asyncio.sleep(0.01)
        ep.close()
        ep.close()  # twice: harmless
        return got, batches

    got, batches = asyncio.run(go())
    assert got == [b"d%d" % i for i in range(10)] and batches == 1


async def _serve(data: bytes) -> tuple[MrcServer, list[Address]]:
    addrs = []
    for host in ("127.0.0.1", "127.0.0.2"):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((host, 0))
            addrs.append(Address(host, s.getsockname()[1]))
    server = MrcServer(lambda rid: data if rid == "r" else None, addrs, evs=4)
    return await server.start(), addrs


def test_a_pull_acknowledges_in_batches_and_prefill_reads_one_copy_of_each_ack() -> None:
    data = random.Random(7).randbytes(600_000)  # 418 datagrams

    async def go() -> tuple[int, int, int]:
        server, addrs = await _serve(data)
        decoded = 0
        real = server._on_ack

        def counting(*args: object) -> None:
            nonlocal decoded
            decoded += 1
            real(*args)  # type: ignore[arg-type]

        server._on_ack = counting  # type: ignore[method-assign]
        try:
            buf, res = await pull_kv_mrc("r", addrs, len(data), zlib.crc32(data), timeout_s=10)
        finally:
            server.close()
        assert bytes(buf) == data and res.retired_evs == ()
        return decoded, res.datagrams_received, res.retransmitted_bytes or 0

    decoded, datagrams, resent = asyncio.run(go())
    assert resent == 0
    # One ACK per ACK_EVERY datagrams at most (and the final ones), one copy of each decoded.
    assert decoded <= datagrams / mrcpull.ACK_EVERY + 8


class _Leg:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def sendto(self, data: bytes, _addr: tuple[str, int]) -> None:
        self.sent.append(data)


def test_a_partial_ack_is_followed_by_an_echo_of_each_datagram_it_leaves_unreported() -> None:
    rx = ReceiverState(100_000)
    arrived = []
    for k in range(1, w.MAX_SACK_RANGES + 9):  # a hole before every datagram: 40 ranges
        d = w.Data(200 * k, k, 5, 0, b"x" * 100)
        rx.on_data(d)
        arrived.append(d)
    c = mrcpull._Client(1, rx)
    leg = _Leg()
    c.legs = [leg]  # type: ignore[list-item]
    c.pending = [*arrived[-5:], arrived[20]]  # arrived since the last ack
    mrcpull._send_ack(c, [Address("127.0.0.1", 1)], arrived[-1])
    acks = [w.decode_ack(w.open_datagram(raw)[3]) for raw in leg.sent]
    assert acks[0].partial and acks[0].echo_seq == arrived[-1].seq
    hidden = acks[0].unreported()
    assert hidden is not None and hidden[0] <= arrived[20].offset < hidden[1]
    # Only the hidden one is echoed again: the last five are in the ack's highest ranges.
    assert [a.echo_seq for a in acks[1:]] == [arrived[20].seq]
    assert c.pending == [] and c.unacked == 0


def test_the_bench_figures_are_cpu_seconds_per_gb_and_gbps_over_the_pulls() -> None:
    mib = 2**20
    pulls = [
        mrc_cost.Pull(mib, 0.1, 0.02, 0.03, 0, 0.01, 50),
        mrc_cost.Pull(4 * mib, 0.4, 0.08, 0.12, 4 * mib // 10, 0.04, 150),
    ]
    f = mrc_cost.figures(pulls)
    moved = 5 * mib
    assert f.cpu_s_per_gb == pytest.approx(0.25 / moved * 1e9)
    assert f.client_s_per_gb == pytest.approx(0.10 / moved * 1e9)
    assert f.gbps == pytest.approx(moved * 8 / 0.5 / 1e9)
    assert f.resent_share == pytest.approx(0.08) and f.kernel_share == pytest.approx(0.2)
    assert f.wakes_per_mb == pytest.approx(200 / moved * 1e6)
    assert mrc_cost.figures(pulls, mib).gbps == pytest.approx(mib * 8 / 0.1 / 1e9)
    assert mrc_cost.spread([3.0, 1.0, 2.0]) == "2.00 [1.00-3.00]"
    assert "all" in mrc_cost.table({("new", "mrc"): [pulls]}, [mib, 4 * mib])[-1]
