"""The KV pull protocol on loopback: two addresses x N streams, checksums, failures."""

from __future__ import annotations

import asyncio
import contextlib
import zlib

import pytest

from serving.config import Address
from serving.kvstore import KVStore, make_kv_buffer
from serving.kvwire import (
    KVTransferError,
    pick_source,
    plan_lanes,
    pull_kv,
    release_kv,
    start_kv_server,
)
from zcube_lab.ports import free_port


def test_plan_lanes_deals_chunks_over_addresses_and_streams() -> None:
    a, b = Address("127.0.0.1", 1), Address("127.0.0.2", 2)
    lanes = plan_lanes(10 * 1024 + 1, 1024, [a, b], 2)
    assert [addr for addr, _ in lanes] == [a, b, a, b]
    chunks = sorted(c for _, cs in lanes for c in cs)
    assert sum(n for _, n in chunks) == 10 * 1024 + 1 and len(chunks) == 11
    # a single chunk still makes one lane, never an empty one
    assert len(plan_lanes(100, 1024, [a, b], 4)) == 1


async def _servers(store: KVStore, n: int) -> tuple[list[Address], list[asyncio.Server]]:
    addrs = [Address(f"127.0.0.{k + 1}", free_port(f"127.0.0.{k + 1}")) for k in range(n)]
    servers = [await start_kv_server(store.get_bytes, store.release, a) for a in addrs]
    return addrs, servers


async def test_pull_over_two_addresses_verifies_bytes_and_checksum() -> None:
    store = KVStore(10**6)
    data = make_kv_buffer("req", 3, 5 * 2**20 + 17)
    store.put("req", data, 1000, now=0.0, lease_s=60)
    addrs, servers = await _servers(store, 2)
    try:
        buf, result = await pull_kv(
            "req", addrs, len(data), zlib.crc32(data), chunk_bytes=64 * 1024, streams=3,
            timeout_s=10,
        )  # fmt: skip
        assert bytes(buf) == data
        assert result.num_bytes == len(data) and result.lanes == 6
        # both fabric addresses carried a share
        assert set(result.bytes_by_address) == {str(a) for a in addrs}
        # (shares follow each lane's speed: lanes take chunks from one queue)
        assert all(n > 2**20 for n in result.bytes_by_address.values())
        assert await release_kv("req", addrs[1]) is True
        assert store.get("req") is None
    finally:
        for s in servers:
            s.close()


async def test_checksum_mismatch_is_detected() -> None:
    store = KVStore(10**6)
    data = make_kv_buffer("req", 0, 100_000)
    store.put("req", data, 10, now=0.0, lease_s=60)
    addrs, servers = await _servers(store, 1)
    try:
        with pytest.raises(KVTransferError, match="checksum"):
            await pull_kv(
                "req", addrs, len(data), zlib.crc32(data) ^ 1, chunk_bytes=8192, streams=2,
                timeout_s=5,
            )  # fmt: skip
    finally:
        for s in servers:
            s.close()


async def test_unknown_request_and_dead_address_fail_fast() -> None:
    store = KVStore(10**6)
    addrs, servers = await _servers(store, 1)
    try:
        with pytest.raises(KVTransferError, match="holds no KV"):
            await pull_kv("nope", addrs, 10, 0, chunk_bytes=4096, streams=1, timeout_s=5)
    finally:
        for s in servers:
            s.close()
    dead = [Address("127.0.0.1", free_port())]
    with pytest.raises(KVTransferError, match="ConnectionRefused"):
        await pull_kv("x", dead, 10, 0, chunk_bytes=4096, streams=1, timeout_s=5)


async def test_silent_server_times_out_within_bounds() -> None:
    async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 20)
        await asyncio.sleep(5)

    port = free_port()
    server = await asyncio.start_server(mute, "127.0.0.1", port)
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        with pytest.raises(KVTransferError, match="timed out"):
            await pull_kv(
                "x", [Address("127.0.0.1", port)], 10, 0, chunk_bytes=4096, streams=1,
                timeout_s=0.3,
            )  # fmt: skip
    finally:
        server.close()
    assert 0.3 <= loop.time() - start < 1.5


def test_pick_source_maps_remote_networks_to_local_ports() -> None:
    zcube = (("10.2.0.0/16", "10.1.0.1"), ("10.1.0.0/16", "10.2.0.1"))
    assert pick_source("10.2.3.1", zcube) == "10.1.0.1"  # a port-2 address: from local port 1
    assert pick_source("10.1.3.1", zcube) == "10.2.0.1"
    assert pick_source("10.0.0.1", zcube) is None
    assert pick_source("10.2.3.1", ()) is None


async def test_pull_binds_the_mapped_source_address() -> None:
    store = KVStore(10**6)
    data = make_kv_buffer("req", 5, 300_000)
    store.put("req", data, 100, now=0.0, lease_s=60)
    addrs, servers = await _servers(store, 2)
    try:
        good = (("127.0.0.0/8", "127.0.0.3"),)
        buf, _ = await pull_kv(
            "req", addrs, len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
            timeout_s=10, source_map=good,
        )  # fmt: skip
        assert bytes(buf) == data
        # A source address this machine does not have cannot be bound: the map is applied.
        bad = (("127.0.0.0/8", "192.0.2.1"),)
        with pytest.raises(KVTransferError):
            await pull_kv(
                "req", addrs, len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
                timeout_s=10, source_map=bad,
            )  # fmt: skip
    finally:
        for s in servers:
            s.close()


async def _slow_proxy(target: Address, delay_s: float) -> tuple[Address, asyncio.Server]:
    """A TCP proxy that holds every piece of the server's answer for `delay_s`: a slow path."""

    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await src.read(65536):
                if delay:
                    await asyncio.sleep(delay)
                dst.write(data)
                await dst.drain()
        dst.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(target.host, target.port)
        await asyncio.gather(pump(reader, up_writer, 0.0), pump(up_reader, writer, delay_s))

    addr = Address("127.0.0.3", free_port("127.0.0.3"))
    return addr, await asyncio.start_server(handle, addr.host, addr.port)


async def test_a_faster_lane_takes_more_chunks() -> None:
    store = KVStore(10**6)
    data = make_kv_buffer("req", 9, 4 * 2**20)
    store.put("req", data, 1000, now=0.0, lease_s=60)
    addrs, servers = await _servers(store, 2)
    slow, proxy = await _slow_proxy(addrs[1], 0.02)
    try:
        buf, result = await pull_kv(
            "req", [addrs[0], slow], len(data), zlib.crc32(data), chunk_bytes=64 * 1024,
            streams=1, timeout_s=30,
        )  # fmt: skip
        assert bytes(buf) == data
        fast_share = result.bytes_by_address[str(addrs[0])]
        slow_share = result.bytes_by_address[str(slow)]
        assert fast_share + slow_share == len(data)
        assert slow_share > 0  # the slow path still carried some
        assert fast_share > 3 * slow_share  # but the work went where it moves fastest
    finally:
        proxy.close()
        for s in servers:
            s.close()


async def test_a_short_transfer_spreads_one_chunk_per_lane() -> None:
    store = KVStore(10**6)
    data = make_kv_buffer("req", 4, 3 * 65536)  # three chunks, four lanes asked for
    store.put("req", data, 100, now=0.0, lease_s=60)
    addrs, servers = await _servers(store, 2)
    try:
        _, result = await pull_kv(
            "req", addrs, len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
            timeout_s=10,
        )  # fmt: skip
        # Lanes a, b, a: no lane hoards the tail, so both addresses carry their share.
        assert result.lanes == 3
        assert result.bytes_by_address == {str(addrs[0]): 2 * 65536, str(addrs[1]): 65536}
    finally:
        for s in servers:
            s.close()
