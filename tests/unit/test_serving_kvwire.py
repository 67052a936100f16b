"""The KV pull protocol on loopback: two addresses x N streams, checksums, failures, and
spraying with end-host failover (stalled lanes retired and replaced by new path ids)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import zlib
from collections.abc import Callable

import pytest

from zcube_lab.adapters.ports import free_port
from zcube_lab.serving.config import Address
from zcube_lab.serving.kvstore import KVStore, make_kv_buffer
from zcube_lab.serving.kvwire import (
    CHUNKS_PER_LANE,
    MIN_CHUNK_BYTES,
    KVTransferError,
    PathHealth,
    PullResult,
    chunk_size,
    pick_replacement,
    pick_source,
    plan_lanes,
    probe_path,
    pull_kv,
    release_kv,
    start_kv_server,
)


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
        # without a stall timeout nothing is retired: one connection (path id) per lane
        assert result.retired_lanes == 0 and result.paths_used == 6
        assert len(set(result.source_ports)) == 6
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


def _max_lane_bytes(num_bytes: int, lanes: int, max_chunk: int) -> tuple[int, int]:
    """(largest per-lane share, chunks) of a plan with `chunk_size` chunks, lanes dealt
    round-robin: what lanes of equal speed carry."""
    chunk = chunk_size(num_bytes, lanes, max_chunk)
    addrs = [Address("10.0.0.1", 1)]
    plan = plan_lanes(num_bytes, chunk, addrs, lanes)
    return max(sum(n for _, n in cs) for _, cs in plan), sum(len(cs) for _, cs in plan)


@pytest.mark.parametrize("lanes", range(1, 9))
@pytest.mark.parametrize(
    "num_bytes", [100_000, 216_000, 480_000, 640_000, 2_246_400, 9_000_000, 25_000_000]
)
@pytest.mark.parametrize("max_chunk", [64 * 1024, 256 * 1024])
def test_chunking_splits_every_size_evenly_over_the_lanes(
    num_bytes: int, lanes: int, max_chunk: int
) -> None:
    most, chunks = _max_lane_bytes(num_bytes, lanes, max_chunk)
    even = num_bytes / lanes
    # within a few bytes of an even split (the bound: one byte per chunk a lane carries)
    assert most - even <= math.ceil(chunks / lanes)
    assert most / even < 1.01
    chunk = chunk_size(num_bytes, lanes, max_chunk)
    assert MIN_CHUNK_BYTES <= chunk <= max_chunk
    if num_bytes <= lanes * CHUNKS_PER_LANE * max_chunk:
        # several chunks for every lane: 4, or fewer (3 at 100 KB over 7-8 lanes) where 4
        # would be smaller than MIN_CHUNK_BYTES
        per_lane = min(CHUNKS_PER_LANE, num_bytes // (lanes * MIN_CHUNK_BYTES))
        assert per_lane >= 3 and chunks == lanes * per_lane
    else:
        assert chunks % lanes == 0 and chunks >= lanes * CHUNKS_PER_LANE


def test_fixed_chunks_leave_one_lane_behind_and_sized_chunks_do_not() -> None:
    # the case: 640 KB in 256 KiB chunks over four lanes
    addrs = [Address("10.0.0.1", 1)]
    fixed = plan_lanes(640_000, 256 * 1024, addrs, 4)
    assert max(sum(n for _, n in cs) for _, cs in fixed) == 256 * 1024  # 64% over 160 KB
    most, _ = _max_lane_bytes(640_000, 4, 256 * 1024)
    assert most == 160_000


def test_chunk_size_edges() -> None:
    assert chunk_size(3000, 4, 256 * 1024) == 750  # below lanes x min: one chunk a lane
    assert chunk_size(0, 4, 256 * 1024) == MIN_CHUNK_BYTES
    assert chunk_size(40_000, 4, 256 * 1024) == 5000  # 2 a lane keeps chunks >= 4096
    assert chunk_size(10**8, 2, 2**20) <= 2**20


async def test_a_pull_with_chunks_per_lane_splits_evenly_over_addresses() -> None:
    data, addrs, servers = await _stored(640_000, 2)
    try:
        _, result = await pull_kv(
            "req", addrs, len(data), zlib.crc32(data), chunk_bytes=256 * 1024, streams=2,
            timeout_s=10, chunks_per_lane=4,
        )  # fmt: skip
        assert result.lanes == 4 and result.num_bytes == len(data)
        # 16 chunks of 40,000 bytes; each address carries some (exact shares depend on timing)
        assert all(n % 40_000 == 0 and n > 0 for n in result.bytes_by_address.values())
    finally:
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


# ---- spraying with end-host failover ---------------------------------------------------


class _Path:
    """A TCP proxy in front of a KV server standing for a network path. `dies_after(k)` says
    after how many answer bytes the k-th connection through it (0-based) goes silent (None:
    never; 0: at once), like a link failing mid-transfer: the connection stays open and nothing
    more crosses it. `piece` and `delay_s` pace the answers; `flip_at` corrupts that byte of
    every answer stream."""

    def __init__(
        self,
        target: Address,
        dies_after: Callable[[int], int | None] = lambda k: None,
        piece: int = 65536,
        delay_s: float = 0.0,
        flip_at: int | None = None,
    ) -> None:
        self.target, self.dies_after = target, dies_after
        self.piece, self.delay_s, self.flip_at = piece, delay_s, flip_at
        self.connections = 0
        self._tasks: set[asyncio.Task] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def start(self, host: str = "127.0.0.3") -> Address:
        addr = Address(host, free_port(host))
        self._server = await asyncio.start_server(self._handle, addr.host, addr.port)
        return addr

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for w in self._writers:
            w.transport.abort()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        limit = self.dies_after(self.connections)
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(self.target.host, self.target.port)
        self._writers += [writer, up_writer]
        await asyncio.gather(
            self._pump(reader, up_writer, None, 0.0, None),
            self._pump(up_reader, writer, limit, self.delay_s, self.flip_at),
            return_exceptions=True,
        )
        self._tasks.discard(task)

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        limit: int | None,
        delay_s: float,
        flip_at: int | None,
    ) -> None:
        sent = 0
        while data := await src.read(self.piece):
            if limit is not None:
                data = data[: max(0, limit - sent)]
                if not data:
                    await asyncio.Event().wait()  # the path is dead: hold everything
            if flip_at is not None and sent <= flip_at < sent + len(data):
                mutable = bytearray(data)
                mutable[flip_at - sent] ^= 0xFF
                data = bytes(mutable)
            if delay_s:
                await asyncio.sleep(delay_s)
            dst.write(data)
            await dst.drain()
            sent += len(data)
        dst.close()


async def _stored(size: int, n_addrs: int = 1) -> tuple[bytes, list[Address], list]:
    store = KVStore(10**6)
    data = make_kv_buffer("req", 7, size)
    store.put("req", data, 100, now=0.0, lease_s=60)
    addrs, servers = await _servers(store, n_addrs)
    return data, addrs, servers


def test_pick_replacement_avoids_an_address_whose_lanes_just_stalled() -> None:
    a, b, c = Address("10.1.0.1", 7100), Address("10.2.0.1", 7100), Address("10.3.0.1", 7100)
    # b had a lane retired after its last progress: rotate over a and c only
    progress, retired = {a: 5.0, b: 4.0, c: 1.0}, {b: 6.0}
    assert [pick_replacement([a, b, c], progress, retired, t) for t in range(4)] == [a, c, a, c]
    # progress after the retirement clears the suspicion (another lane there moves bytes)
    assert pick_replacement([b], {b: 7.0}, {b: 6.0}, 0) == b
    # nothing known yet: plain rotation
    assert pick_replacement([a, b], {}, {}, 1) == b
    # every address suspect: the one retired longest ago
    assert pick_replacement([a, b], {}, {a: 3.0, b: 2.0}, 0) == b
    assert pick_replacement([a, b], {a: -math.inf}, {a: 9.0, b: 9.5}, 5) == a


async def test_a_lane_that_stalls_mid_chunk_is_retired_and_its_chunks_refetched() -> None:
    data, addrs, servers = await _stored(1 << 20)
    # the first connection dies 100,000 bytes in: mid-way through its second 64 KiB chunk
    path = _Path(addrs[0], dies_after=lambda k: 100_000 if k == 0 else None)
    via = await path.start()
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        buf, result = await pull_kv(
            "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
            timeout_s=5, stall_timeout_s=0.2,
        )  # fmt: skip
    finally:
        await path.close()
        for s in servers:
            s.close()
    assert bytes(buf) == data and result.checksum == zlib.crc32(data)
    assert result.retired_lanes == 1
    assert result.lanes == 2 and result.paths_used == 3 == path.connections
    assert len(set(result.source_ports)) == 3  # the replacement is a new path id
    # the partial chunk's bytes were not counted: every byte counted exactly once
    assert result.num_bytes == sum(result.bytes_by_address.values()) == len(data)
    assert 0.2 <= loop.time() - start < 1.5


async def test_without_a_stall_timeout_a_stalled_lane_holds_the_pull_until_timeout() -> None:
    data, addrs, servers = await _stored(1 << 20)
    path = _Path(addrs[0], dies_after=lambda k: 100_000 if k == 0 else None)
    via = await path.start()
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        with pytest.raises(KVTransferError, match="timed out") as info:
            await pull_kv(
                "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
                timeout_s=0.5,
            )  # fmt: skip
    finally:
        await path.close()
        for s in servers:
            s.close()
    assert 0.5 <= loop.time() - start < 1.5
    assert info.value.retired_lanes == 0 and info.value.paths_used == 2
    assert 0 < info.value.received < len(data)  # the other lane moved all it could
    assert info.value.checksum_ok is None


async def test_a_dead_address_pair_is_abandoned_for_the_live_one() -> None:
    # ZCube: one address pair's path is dead; reopening there would stall again
    data, addrs, servers = await _stored(1 << 20, n_addrs=2)
    path = _Path(addrs[1], dies_after=lambda k: 0)
    via = await path.start()
    try:
        buf, result = await pull_kv(
            "req", [addrs[0], via], len(data), zlib.crc32(data), chunk_bytes=65536,
            streams=2, timeout_s=5, stall_timeout_s=0.15,
        )  # fmt: skip
    finally:
        await path.close()
        for s in servers:
            s.close()
    assert bytes(buf) == data
    assert result.retired_lanes == 2  # the two lanes on the dead pair, nothing more
    assert path.connections == 2  # no replacement went back to the dead pair
    assert result.paths_used == 6
    assert result.bytes_by_address == {str(addrs[0]): len(data), str(via): 0}


async def test_a_slow_but_moving_lane_is_not_retired() -> None:
    # 4 KiB every 10 ms: a 64 KiB chunk takes ~0.16 s, longer than the stall timeout, but
    # bytes keep arriving, so the lane is slow, not dead
    data, addrs, servers = await _stored(2 * 65536)
    path = _Path(addrs[0], piece=4096, delay_s=0.01)
    via = await path.start()
    try:
        buf, result = await pull_kv(
            "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=1,
            timeout_s=5, stall_timeout_s=0.1,
        )  # fmt: skip
    finally:
        await path.close()
        for s in servers:
            s.close()
    assert bytes(buf) == data
    assert result.retired_lanes == 0 and result.paths_used == 1


async def test_protocol_errors_fail_at_once_even_with_a_stall_timeout() -> None:
    data, addrs, servers = await _stored(4 * 65536)
    path = _Path(addrs[0], flip_at=100)  # one flipped payload byte on every connection
    via = await path.start()
    loop = asyncio.get_running_loop()
    try:
        start = loop.time()
        with pytest.raises(KVTransferError, match="holds no KV") as missing:
            await pull_kv(
                "nope", addrs, 10, 0, chunk_bytes=4096, streams=2, timeout_s=5,
                stall_timeout_s=1.0,
            )  # fmt: skip
        assert missing.value.retired_lanes == 0
        with pytest.raises(KVTransferError, match="checksum mismatch") as corrupt:
            await pull_kv(
                "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
                timeout_s=5, stall_timeout_s=1.0,
            )  # fmt: skip
        assert corrupt.value.checksum_ok is False and corrupt.value.retired_lanes == 0
        assert loop.time() - start < 0.5  # neither waited for a stall timeout
    finally:
        await path.close()
        for s in servers:
            s.close()


async def test_a_spent_retirement_budget_fails_with_the_retired_lanes_named() -> None:
    data, addrs, servers = await _stored(4 * 65536)
    path = _Path(addrs[0], dies_after=lambda k: 0)  # every connection through it is dead
    via = await path.start()
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        with pytest.raises(KVTransferError, match=r"budget \(2\) is spent") as info:
            await pull_kv(
                "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=1,
                timeout_s=5, stall_timeout_s=0.1, max_retired=2,
            )  # fmt: skip
    finally:
        await path.close()
        for s in servers:
            s.close()
    message = str(info.value)
    assert "3 lanes retired" in message and f"{via} from port" in message
    assert "no bytes for 0.1s" in message
    assert info.value.retired_lanes == 3 and info.value.paths_used == 3 == path.connections
    assert info.value.received == 0
    assert 0.3 <= loop.time() - start < 1.5  # three stall timeouts, not the overall timeout


async def test_connect_failures_count_as_retirements() -> None:
    dead = Address("127.0.0.1", free_port())
    with pytest.raises(KVTransferError, match="ConnectionRefused") as info:
        await pull_kv(
            "x", [dead], 10, 0, chunk_bytes=4096, streams=1, timeout_s=5,
            stall_timeout_s=0.5, max_retired=1,
        )  # fmt: skip
    assert info.value.retired_lanes == 2 and "budget (1)" in str(info.value)


# ---- path health kept across pulls ------------------------------------------------------


def test_path_health_suspects_a_retired_address_until_progress_or_hold_end() -> None:
    now = [100.0]
    health = PathHealth(hold_s=5.0, clock=lambda: now[0])
    a, b = Address("10.1.0.1", 7100), Address("10.2.0.1", 7100)
    assert health.suspects() == set() and not health.is_suspect(a)
    health.progress(a)
    health.retired(b)  # keyed by str(Address): the same key either way
    assert health.suspects() == {"10.2.0.1:7100"} and health.is_suspect("10.2.0.1:7100")
    now[0] = 104.9
    assert health.is_suspect(b)
    now[0] = 105.0  # the hold is over: forgotten
    assert health.suspects() == set()
    health.retired(b, now=106.0)
    health.progress(b, now=106.0)  # bytes at the same instant: not suspect
    assert not health.is_suspect(b, now=106.5)
    health.retired(a, now=107.0)
    assert health.suspects(now=107.0) == {str(a)}
    health.progress(a, now=107.5)  # a probe or a lane got an answer: cleared
    assert health.suspects(now=107.5) == set()
    assert health.last_progress(a) == 107.5 and health.last_retired(a) == 107.0
    assert health.last_retired(Address("10.3.0.1", 1)) == -math.inf
    with pytest.raises(ValueError, match="hold_s"):
        PathHealth(hold_s=0)


def test_plan_lanes_moves_lanes_off_avoided_addresses() -> None:
    a, b = Address("127.0.0.1", 1), Address("127.0.0.2", 2)
    plan = plan_lanes(10 * 1024, 1024, [a, b], 2, avoid={b})
    assert [addr for addr, _ in plan] == [a, a, a, a]  # as many lanes, all on a
    assert sum(n for _, cs in plan for _, n in cs) == 10 * 1024
    # every address avoided: planned as usual
    assert [addr for addr, _ in plan_lanes(10 * 1024, 1024, [a, b], 2, avoid={a, b})] == [
        a, b, a, b,
    ]  # fmt: skip


async def test_probe_path_answers_for_a_live_address_only() -> None:
    _, addrs, servers = await _stored(65536)
    path = _Path(addrs[0], dies_after=lambda k: 0)
    via = await path.start()
    loop = asyncio.get_running_loop()
    try:
        assert await probe_path(addrs[0], "req", timeout_s=1.0) is True
        assert await probe_path(addrs[0], "gone", timeout_s=1.0) is True  # NOT FOUND answers
        start = loop.time()
        assert await probe_path(via, "req", timeout_s=0.1) is False
        assert 0.1 <= loop.time() - start < 0.5
        refused = Address("127.0.0.1", free_port())
        assert await probe_path(refused, "req", timeout_s=1.0) is False
    finally:
        await path.close()
        for s in servers:
            s.close()


async def test_path_health_keeps_later_pulls_off_a_dead_address_until_it_answers() -> None:
    data, addrs, servers = await _stored(1 << 20, n_addrs=2)
    dead = [True]
    path = _Path(addrs[1], dies_after=lambda k: 0 if dead[0] else None)
    via = await path.start()
    health = PathHealth(hold_s=5.0)
    loop = asyncio.get_running_loop()

    async def pull() -> tuple[float, PullResult]:
        start = loop.time()
        buf, result = await pull_kv(
            "req", [via, addrs[0]], len(data), zlib.crc32(data), chunk_bytes=65536,
            streams=2, timeout_s=5, stall_timeout_s=0.15, health=health,
        )  # fmt: skip
        assert bytes(buf) == data and result.checksum == zlib.crc32(data)
        return loop.time() - start, result

    try:
        # 1: nothing known; the two lanes on the dead path stall and are retired
        took1, first = await pull()
        assert first.retired_lanes == 2 and path.connections == 2
        assert took1 >= 0.15
        assert health.suspects() == {str(via)} and health.probing == set()
        retired_at = health.last_retired(via)

        # 2: as many lanes, all on the live address; the dead one gets only the probe
        took2, second = await pull()
        assert second.lanes == first.lanes == 4
        assert second.retired_lanes == 0 and second.paths_used == 4
        assert second.bytes_by_address == {str(addrs[0]): len(data)}
        assert health.probing == {str(via)}  # not waited for by the pull
        assert took2 < 0.15 <= took1  # no stall timeout paid
        await health.wait_probes()  # the probe stalled: the suspicion is renewed
        assert path.connections == 3
        assert health.suspects() == {str(via)} and health.last_retired(via) > retired_at

        # 3: the path comes back; this pull still avoids it, its probe finds it alive
        dead[0] = False
        _, third = await pull()
        assert third.bytes_by_address == {str(addrs[0]): len(data)}
        await health.wait_probes()
        assert path.connections == 4 and health.suspects() == set()

        # 4: lanes over both addresses again
        _, fourth = await pull()
        assert fourth.retired_lanes == 0
        assert set(fourth.bytes_by_address) == {str(via), str(addrs[0])}
        assert all(n > 0 for n in fourth.bytes_by_address.values())
        assert path.connections == 6
    finally:
        await health.aclose()
        await path.close()
        for s in servers:
            s.close()


async def test_every_address_suspect_plans_as_usual_without_probes() -> None:
    data, addrs, servers = await _stored(1 << 20, n_addrs=2)
    health = PathHealth(hold_s=5.0)
    for a in addrs:
        health.retired(a)
    try:
        buf, result = await pull_kv(
            "req", addrs, len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
            timeout_s=5, stall_timeout_s=0.5, health=health,
        )  # fmt: skip
        assert bytes(buf) == data
        assert set(result.bytes_by_address) == {str(a) for a in addrs}
        assert result.paths_used == 4 and health.probing == set()
        assert health.suspects() == set()  # the lanes moved bytes: both cleared
        with pytest.raises(ValueError, match="stall timeout"):
            await pull_kv(
                "req", addrs, len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
                timeout_s=5, health=health,
            )  # fmt: skip
    finally:
        for s in servers:
            s.close()


async def test_a_replacement_avoids_an_address_another_pull_found_dead() -> None:
    # A flaky address's lane dies mid-transfer; its replacement goes to the live address, not
    # to the one an earlier pull found dead, though this pull has no news of that one.
    data, addrs, servers = await _stored(1 << 20, n_addrs=2)
    flaky = _Path(addrs[1], dies_after=lambda k: 100_000 if k == 0 else None)
    dead = _Path(addrs[1], dies_after=lambda k: 0)
    via_flaky, via_dead = await flaky.start(), await dead.start("127.0.0.4")
    health = PathHealth(hold_s=5.0)
    health.retired(via_dead)
    try:
        buf, result = await pull_kv(
            "req", [addrs[0], via_flaky, via_dead], len(data), zlib.crc32(data),
            chunk_bytes=65536, streams=1, timeout_s=5, stall_timeout_s=0.15, health=health,
        )  # fmt: skip
        assert bytes(buf) == data
        assert result.lanes == 3 and result.retired_lanes == 1 and result.paths_used == 4
        assert flaky.connections == 1 and str(via_dead) not in result.bytes_by_address
        await health.wait_probes()
        assert dead.connections == 1  # the probe only
        assert health.suspects() == {str(via_dead), str(via_flaky)}
    finally:
        await health.aclose()
        await flaky.close()
        await dead.close()
        for s in servers:
            s.close()
