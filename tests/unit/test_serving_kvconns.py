"""KV connections kept across pulls (zcube_lab.serving.kvwire.conns) on loopback: reuse, the idle
cap, reconnecting a kept connection that broke while idle, RELEASE over a kept connection, and
spraying's replacement lanes still opening new connections (new path ids), and warming a pool
before any pull."""

from __future__ import annotations

import asyncio
import zlib

import pytest

from zcube_lab.adapters.ports import free_port
from zcube_lab.serving.config import Address
from zcube_lab.serving.kvstore import KVStore, make_kv_buffer
from zcube_lab.serving.kvwire import (
    IDLE_PULLS,
    KVConnection,
    KVConnections,
    pull_kv,
    release_kv,
    start_kv_server,
    warm,
)


class _Relay:
    """A TCP relay in front of a KV server that counts the connections made through it.
    `silence()` makes the connections open now go quiet (nothing more crosses them, they stay
    open: a path that died); `drop()` resets them (a peer that went away)."""

    def __init__(self, target: Address) -> None:
        self.target = target
        self.connections = 0
        self._live: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter, list[bool]]] = []
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.Server | None = None

    async def start(self, host: str = "127.0.0.3") -> Address:
        addr = Address(host, free_port(host))
        self._server = await asyncio.start_server(self._handle, addr.host, addr.port)
        return addr

    def silence(self) -> None:
        for _, _, quiet in self._live:
            quiet[0] = True

    def drop(self) -> None:
        for down, up, _ in self._live:
            down.transport.abort()
            up.transport.abort()
        self._live.clear()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        self.drop()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(self.target.host, self.target.port)
        quiet = [False]
        self._live.append((writer, up_writer, quiet))
        await asyncio.gather(
            self._pump(reader, up_writer, [False]),
            self._pump(up_reader, writer, quiet),
            return_exceptions=True,
        )
        self._tasks.discard(task)

    @staticmethod
    async def _pump(
        src: asyncio.StreamReader, dst: asyncio.StreamWriter, quiet: list[bool]
    ) -> None:
        while data := await src.read(65536):
            if quiet[0]:
                await asyncio.Event().wait()  # the path is dead: hold everything
            dst.write(data)
            await dst.drain()
        dst.close()


async def _served(size: int) -> tuple[bytes, KVStore, Address, asyncio.Server]:
    store = KVStore(10**6)
    data = make_kv_buffer("req", 5, size)
    store.put("req", data, 100, now=0.0, lease_s=60)
    addr = Address("127.0.0.1", free_port())
    return data, store, addr, await start_kv_server(store.get_bytes, store.release, addr)


async def test_pulls_over_kept_connections_open_them_once() -> None:
    data, _store, addr, server = await _served(1 << 20)
    relay = _Relay(addr)
    via = await relay.start()
    pool = KVConnections()
    try:
        results = []
        for _ in range(12):
            buf, result = await pull_kv(
                "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=3,
                timeout_s=5, connections=pool,
            )  # fmt: skip
            assert bytes(buf) == data
            results.append(result)
        # the first pull opens its three lanes' connections, every later one reuses them
        assert relay.connections == 3 == pool.opened
        assert [r.opened for r in results] == [3] + [0] * 11
        assert all(r.paths_used == 3 for r in results)
        assert {frozenset(r.source_ports) for r in results} == {frozenset(results[0].source_ports)}
        assert pool.reused == 33 and pool.idle(via) == 3
    finally:
        await pool.aclose()
        await relay.close()
        server.close()
    assert pool.idle() == 0


async def test_without_kept_connections_every_pull_opens_its_own() -> None:
    data, _store, addr, server = await _served(300_000)
    relay = _Relay(addr)
    via = await relay.start()
    try:
        for k in range(1, 4):
            _, result = await pull_kv(
                "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
                timeout_s=5,
            )  # fmt: skip
            assert result.opened == 2 and relay.connections == 2 * k
    finally:
        await relay.close()
        server.close()


async def test_a_kept_connection_reset_while_idle_is_replaced_without_failing() -> None:
    data, _store, addr, server = await _served(500_000)
    relay = _Relay(addr)
    via = await relay.start()
    pool = KVConnections()

    async def pull() -> int:
        buf, result = await pull_kv(
            "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
            timeout_s=5, connections=pool,
        )  # fmt: skip
        assert bytes(buf) == data and result.retired_lanes == 0
        return result.opened

    try:
        assert await pull() == 2
        relay.drop()  # the peer went away while the connections sat idle
        await asyncio.sleep(0.05)  # ... and the loop has seen it
        assert await pull() == 2 and pool.idle(via) == 2
        assert relay.connections == 4
    finally:
        await pool.aclose()
        await relay.close()
        server.close()


async def test_a_kept_connection_that_breaks_before_its_first_answer_is_reopened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reset not yet seen when the connection is taken: the lane's first read fails; the
    lane opens a new connection and the pull goes on (no retirement, no failed attempt)."""
    data, _store, addr, server = await _served(500_000)
    relay = _Relay(addr)
    via = await relay.start()
    pool = KVConnections()
    try:
        await pull_kv(
            "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
            timeout_s=5, connections=pool,
        )  # fmt: skip
        relay.drop()
        await asyncio.sleep(0.05)
        monkeypatch.setattr(KVConnection, "usable", lambda self: True)  # looks fine when taken
        buf, result = await pull_kv(
            "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
            timeout_s=5, connections=pool,
        )  # fmt: skip
        assert bytes(buf) == data
        assert result.retired_lanes == 0 and result.opened == 2 and result.paths_used == 4
    finally:
        await pool.aclose()
        await relay.close()
        server.close()


async def test_stalled_kept_connections_are_retired_and_replaced_by_new_ones() -> None:
    """Spraying with kept connections: a kept connection on a path that died stalls, is
    retired and aborted, and its replacement opens a new connection (a new path id)."""
    data, _store, addr, server = await _served(1 << 20)
    relay = _Relay(addr)
    via = await relay.start()
    pool = KVConnections()

    async def pull():
        buf, result = await pull_kv(
            "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
            timeout_s=5, stall_timeout_s=0.15, connections=pool,
        )  # fmt: skip
        assert bytes(buf) == data
        return result

    try:
        first = await pull()
        relay.silence()  # the path of both kept connections dies
        second = await pull()
        assert second.retired_lanes == 2 and second.opened == 2
        assert set(first.source_ports) < set(second.source_ports)  # the kept ones, then new
        assert relay.connections == 4 and pool.idle(via) == 2  # the stalled ones dropped
        third = await pull()  # over the replacements, kept
        assert third.opened == 0 and third.retired_lanes == 0
        assert set(third.source_ports) == set(second.source_ports) - set(first.source_ports)
    finally:
        await pool.aclose()
        await relay.close()
        server.close()


async def test_release_goes_over_a_kept_connection() -> None:
    data, store, addr, server = await _served(200_000)
    relay = _Relay(addr)
    via = await relay.start()
    pool = KVConnections()
    try:
        await pull_kv(
            "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=1,
            timeout_s=5, connections=pool,
        )  # fmt: skip
        assert await release_kv("req", via, connections=pool) is True
        assert store.get("req") is None and relay.connections == 1
        assert await release_kv("req", via, connections=pool) is False  # already freed
        assert relay.connections == 1 and pool.idle(via) == 1
        # without kept connections a RELEASE has one of its own
        assert await release_kv("req", via) is False and relay.connections == 2
    finally:
        await pool.aclose()
        await relay.close()
        server.close()


async def test_the_idle_cap_closes_connections_given_back_beyond_it() -> None:
    data, _store, addr, server = await _served(400_000)
    pool = KVConnections(max_idle=2)
    try:
        for _ in range(2):
            _, result = await pull_kv(
                "req", [addr], len(data), zlib.crc32(data), chunk_bytes=65536, streams=4,
                timeout_s=5, connections=pool,
            )  # fmt: skip
        # each pull had four lanes; only two connections were kept after each
        assert pool.idle(addr) == 2 and pool.opened == 4 + 2 and result.opened == 2
    finally:
        await pool.aclose()
        server.close()
    with pytest.raises(ValueError):
        KVConnections(max_idle=-1)


async def test_connections_given_back_after_close_are_closed() -> None:
    _data, _store, addr, server = await _served(100_000)
    pool = KVConnections()
    try:
        conn = await pool.open(addr, None)
        await pool.aclose()
        pool.give_back(conn)
        assert pool.idle() == 0 and conn.writer.is_closing()
        assert pool.take(addr, None) is None
    finally:
        server.close()


def test_the_decode_engine_keeps_enough_for_its_concurrent_pulls() -> None:
    from zcube_lab.serving.config import DecodeConfig
    from zcube_lab.serving.decode_engine import kv_connections

    pool = kv_connections(DecodeConfig(kv_streams=3))
    assert pool.max_idle == IDLE_PULLS * 3 + 1


async def test_a_replacement_lane_never_takes_a_kept_connection() -> None:
    """Two kept connections on a path that died and a one-lane pull: its lane takes one and
    stalls; the replacement opens a new connection (a new path id) rather than the other kept
    one, which would be on the same dead path."""
    data, _store, addr, server = await _served(300_000)
    relay = _Relay(addr)
    via = await relay.start()
    pool = KVConnections()
    try:
        await pull_kv(
            "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=2,
            timeout_s=5, connections=pool,
        )  # fmt: skip
        assert pool.idle(via) == 2
        relay.silence()
        buf, result = await pull_kv(
            "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=1,
            timeout_s=5, stall_timeout_s=0.15, connections=pool,
        )  # fmt: skip
        assert bytes(buf) == data
        assert result.retired_lanes == 1 and result.opened == 1 and relay.connections == 3
    finally:
        await pool.aclose()
        await relay.close()
        server.close()


async def test_warm_opens_the_connections_before_any_pull_and_pulls_then_open_none() -> None:
    data, _store, addr, server = await _served(400_000)
    relay = _Relay(addr)
    via = await relay.start()
    pool = KVConnections(max_idle=4)
    try:
        assert await warm(pool, [(via, None)], 3, deadline_s=5) == 3
        assert relay.connections == 3 == pool.opened and pool.idle(via) == 3
        for _ in range(4):
            buf, result = await pull_kv(
                "req", [via], len(data), zlib.crc32(data), chunk_bytes=65536, streams=3,
                timeout_s=5, connections=pool,
            )  # fmt: skip
            assert bytes(buf) == data and result.opened == 0
        assert relay.connections == 3
    finally:
        await pool.aclose()
        await relay.close()
        server.close()


async def test_warm_waits_for_a_server_still_starting_and_gives_up_on_a_dead_one() -> None:
    store = KVStore(10**6)
    late = Address("127.0.0.1", free_port())
    dead = Address("127.0.0.1", free_port())
    pool = KVConnections()

    async def start_late() -> asyncio.Server:
        await asyncio.sleep(0.6)  # refused until then: warm retries
        return await start_kv_server(store.get_bytes, store.release, late)

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    opened, server = await asyncio.gather(
        warm(pool, [(late, None), (dead, None)], 2, deadline_s=1.5), start_late()
    )
    try:
        # both to the late server, none to the one never listening, and only until the deadline
        assert opened == 2 and pool.idle(late) == 2 and pool.idle(dead) == 0
        assert 1.4 <= loop.time() - t0 < 3.0
    finally:
        await pool.aclose()
        server.close()
