"""The expert-parallel all-to-all on loopback: per-exchange timeout, subflows (path ids) that split
each peer's bytes, retirement of a stalled subflow (issue 6, spraying), and a peer reached over
several addresses, one lane per path bound to its own source (issue 32)."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry

from zcube_lab.adapters.ports import free_port
from zcube_lab.serving import alltoall, decode, prefill
from zcube_lab.serving.alltoall import AllToAll, split_bytes, start_ep_server
from zcube_lab.serving.config import Address, DecodeConfig, PrefillConfig
from zcube_lab.serving.vllm_metrics import EngineMetrics

_LEN = struct.Struct("!Q")
_REQ = struct.Struct("!QQ")


def _metrics() -> EngineMetrics:
    return EngineMetrics(CollectorRegistry(), "tiny", "0")


class _Count:
    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


@dataclass
class _Recorder:
    """An EP peer speaking the wire protocol itself: records (source port, frame size); while
    `answer` is false it reads frames and never answers (a black hole)."""

    answer: bool = True
    frames: list[tuple[int, int]] = field(default_factory=list)
    accepted: int = 0
    closed: int = 0
    sources: list[str] = field(default_factory=list)  # each connection's source address
    answered: int = 0  # combine bytes sent back

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        host, port = writer.get_extra_info("peername")[:2]
        self.sources.append(host)
        try:
            while True:
                n, back = _REQ.unpack(await reader.readexactly(_REQ.size))
                await reader.readexactly(n)
                self.frames.append((port, n))
                if self.answer:
                    self.answered += back
                    writer.write(_LEN.pack(back) + bytes(back))
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed += 1
            writer.close()


@contextlib.asynccontextmanager
async def _serve(handler, host: str = "127.0.0.1") -> AsyncIterator[Address]:  # type: ignore[no-untyped-def]
    addr = Address(host, free_port())
    server = await asyncio.start_server(handler, addr.host, addr.port)
    try:
        yield addr
    finally:
        server.close()


@dataclass
class _Proxy:
    """Forwards to `upstream`; connections whose accept index is in `frozen` stop forwarding
    anything (a dead path for that one source port)."""

    upstream: Address
    frozen: set[int] = field(default_factory=set)
    accepted: int = 0
    tasks: set[asyncio.Task] = field(default_factory=set)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = self.accepted
        self.accepted += 1
        if index in self.frozen:
            with contextlib.suppress(ConnectionError):
                while await reader.read(2**16):
                    pass  # swallow, never forward or answer
            writer.close()
            return
        up_r, up_w = await asyncio.open_connection(self.upstream.host, self.upstream.port)

        async def pump(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await r.read(2**16):
                    w.write(data)
                    await w.drain()
            w.close()

        await asyncio.gather(pump(reader, up_w), pump(up_r, writer))


def test_split_bytes() -> None:
    assert split_bytes(10, 4) == [3, 3, 2, 2]
    assert split_bytes(3, 8) == [1, 1, 1]  # never an empty part
    assert split_bytes(0, 4) == []
    assert sum(split_bytes(1_000_003, 8)) == 1_000_003


async def test_one_subflow_reuses_one_connection_as_before() -> None:
    rec = _Recorder()
    async with _serve(rec.serve) as addr:
        a2a = AllToAll([addr])
        assert (a2a.subflows, a2a.stall_timeout_s, a2a.timeout_s) == (1, None, 5.0)
        for _ in range(3):
            assert await a2a.exchange(1000) == 2000
        await a2a.close()
    assert rec.accepted == 1 and [n for _, n in rec.frames] == [1000] * 3
    assert a2a.failures == 0 and a2a.retired == 0


async def test_refused_peer_fails_fast_and_the_step_goes_on() -> None:
    good = Address("127.0.0.1", free_port())
    server = await start_ep_server(good)
    dead = Address("127.0.0.1", free_port())
    failed = _Count()
    a2a = AllToAll([good, dead], subflows=4, stall_timeout_s=0.2, failed_counter=failed)
    try:
        async with asyncio.timeout(1.0):
            assert await a2a.exchange(4096) == 2 * 4096
    finally:
        await a2a.close()
        server.close()
    assert a2a.failures == 1 and failed.value == 1 and a2a.retired == 0


async def test_black_holed_peer_times_out_then_recovers_on_a_fresh_connection() -> None:
    good = Address("127.0.0.1", free_port())
    server = await start_ep_server(good)
    hole = _Recorder(answer=False)
    failed = _Count()
    try:
        async with _serve(hole.serve) as bad:
            a2a = AllToAll([good, bad], timeout_s=0.2, failed_counter=failed)
            loop = asyncio.get_running_loop()
            start = loop.time()
            assert await a2a.exchange(5000) == 2 * 5000  # only the good peer's bytes
            assert 0.2 <= loop.time() - start < 0.5
            assert a2a.failures == 1 and failed.value == 1
            await asyncio.sleep(0.05)
            assert hole.closed == 1  # the leader aborted the connection left mid-frame
            hole.answer = True  # the path is back
            assert await a2a.exchange(5000) == 2 * 2 * 5000
            assert hole.accepted == 2 and a2a.failures == 1
            await a2a.close()
    finally:
        server.close()


async def test_sprayed_black_hole_also_times_out() -> None:
    hole = _Recorder(answer=False)
    async with _serve(hole.serve) as bad:
        a2a = AllToAll([bad], subflows=4, stall_timeout_s=0.05, timeout_s=0.3)
        async with asyncio.timeout(1.0):
            assert await a2a.exchange(4000) == 0
        assert a2a.failures == 1 and a2a.retired >= 4  # every path id stalled, some twice
        await asyncio.sleep(0.05)
        assert hole.closed == hole.accepted  # nothing left open mid-frame
        await a2a.close()


async def test_subflows_split_each_peers_bytes_over_distinct_source_ports() -> None:
    recs = [_Recorder(), _Recorder()]
    async with _serve(recs[0].serve) as a, _serve(recs[1].serve) as b:
        a2a = AllToAll([a, b], subflows=4)
        n = 100_001
        assert await a2a.exchange(n) == 2 * 2 * n
        for rec in recs:
            assert rec.accepted == 4
            assert sorted(size for _, size in rec.frames) == sorted(split_bytes(n, 4))
            assert len({port for port, _ in rec.frames}) == 4  # 4 path ids
        first = {port for port, _ in recs[0].frames}
        assert await a2a.exchange(n) == 2 * 2 * n
        assert recs[0].accepted == 4  # persistent: the same 4 connections next step
        assert {port for port, _ in recs[0].frames[4:]} == first
        await a2a.close()
    assert a2a.retired == 0 and a2a.failures == 0


@pytest.mark.parametrize("subflows", [1, 4])
async def test_stalled_subflow_is_retired_and_the_exchange_completes(subflows: int) -> None:
    peer = Address("127.0.0.1", free_port())
    server = await start_ep_server(peer)
    proxy = _Proxy(peer, frozen={0})  # the first connection's path is dead
    retired = _Count()
    try:
        async with _serve(proxy.serve) as front:
            a2a = AllToAll(
                [front], subflows=subflows, stall_timeout_s=0.1, timeout_s=2.0,
                retired_counter=retired,
            )  # fmt: skip
            n = 4 * 65_536 + 3
            loop = asyncio.get_running_loop()
            start = loop.time()
            assert await a2a.exchange(n) == 2 * n  # counted once, nothing lost
            assert 0.1 <= loop.time() - start < 0.6
            assert a2a.retired == 1 and retired.value == 1 and a2a.failures == 0
            # the retired path id is replaced by a new connection (new source port)
            assert await a2a.exchange(n) == 2 * n
            assert proxy.accepted == subflows + 1 and a2a.retired == 1
            await a2a.close()
    finally:
        server.close()


def test_engines_build_the_exchange_from_their_config() -> None:
    peers = (Address("127.0.0.1", 1),)
    p = prefill.make_prefill_app(
        PrefillConfig(ep_peers=peers, ep_subflows=8, ep_stall_timeout_s=0.5)
    )[prefill.ENGINE_KEY].a2a
    assert (p.subflows, p.stall_timeout_s, p.timeout_s) == (8, 0.5, 5.0)
    d = decode.make_decode_app(DecodeConfig(ep_peers=peers, ep_timeout_s=2.0))[
        decode.ENGINE_KEY
    ].a2a
    assert (d.subflows, d.stall_timeout_s, d.timeout_s) == (1, None, 2.0)


async def test_a_peer_with_two_addresses_gets_half_the_bytes_on_each_from_its_own_source() -> None:
    recs = [_Recorder(), _Recorder()]
    # Loopback answers every 127/8 address: the peer's two addresses and two local "ports".
    async with _serve(recs[0].serve) as a, _serve(recs[1].serve, "127.0.0.4") as b:
        smap = (("127.0.0.1/32", "127.0.0.2"), ("127.0.0.4/32", "127.0.0.3"))
        a2a = AllToAll([(a, b)], source_map=smap)
        ex = await a2a.timed_exchange(100_001, 200_000)
        await a2a.close()
    assert ex.lanes == 2 and ex.bytes_sent == 100_001 and ex.bytes_received == 200_000
    assert [size for _, size in recs[0].frames] == [50_001]
    assert [size for _, size in recs[1].frames] == [50_000]
    assert recs[0].answered == recs[1].answered == 100_000  # the combine split the same way
    assert recs[0].sources == ["127.0.0.2"] and recs[1].sources == ["127.0.0.3"]


async def test_one_port_uses_a_peers_first_address_only() -> None:
    recs = [_Recorder(), _Recorder()]
    async with _serve(recs[0].serve) as a, _serve(recs[1].serve) as b:
        cfg = PrefillConfig(model="tiny", ep_peers=((a, b),), ep_ports="one")
        a2a = alltoall.engine_alltoall(cfg, _metrics())
        assert a2a.peers == ((a,),) and a2a.lanes == (((a, None),),)
        assert await a2a.exchange(1000) == 2000
        await a2a.close()
    assert recs[0].accepted == 1 and recs[1].accepted == 0


def test_all_ports_binds_each_path_to_the_source_map_and_splits_subflows_per_path() -> None:
    a, b = Address("198.18.128.2", 7300), Address("198.18.1.1", 7300)
    smap = (("198.18.128.0/17", "198.18.0.1"), ("198.18.0.0/17", "198.18.128.1"))
    cfg = DecodeConfig(ep_peers=((a, b),), ep_source_map=smap, ep_subflows=2)
    lanes = alltoall.engine_alltoall(cfg, _metrics()).lanes
    assert lanes == (((a, "198.18.0.1"),) * 2 + ((b, "198.18.128.1"),) * 2,)
    assert alltoall.lane_parts(10, 21, 4) == [(0, 3, 6), (1, 3, 5), (2, 2, 5), (3, 2, 5)]
    assert alltoall.lane_parts(1, 0, 4) == [(0, 1, 0)]  # lanes with nothing to carry idle
