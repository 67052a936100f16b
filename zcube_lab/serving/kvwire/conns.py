"""Persistent KV connections: a decode engine's TCP connections to each prefill KV address,
kept open between pulls and reused (as NIXL and UCX keep one endpoint per peer).

A pull takes an idle connection to `(remote address, local address)` for each lane, or opens
one when none is idle; a lane that ends cleanly (every request answered) gives its connection
back; a lane that fails, stalls or is cancelled aborts it. So a decode engine pulling one
request at a time keeps the same few connections, and a pull pays no handshake, no SYN timeout
and (while the connection's window lasts) no slow start. A connection the peer closed while it
sat idle (a prefill restarted) is dropped when next taken; one that breaks before its first
answer is replaced by the lane (`zcube_lab.serving.kvwire.pull`).

Replacement lanes of spraying do not take idle connections: they open a new one, so a new
source port, so a new path id (docs/FAILURES.md).

`warm` opens connections before any load, so pulls under load take kept ones instead of sending
a SYN through loaded queues: in a dilated run the kernel's 1 s initial SYN timeout is not
dilated, and a SYN that only waits behind a paused or full queue is retransmitted although
nothing was lost (docs/DOMAIN.md §4). A transfer engine that sets its endpoints up front
(RDMA queue pairs connected before the first transfer) never meets that timer either.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from zcube_lab.serving.config import Address
from zcube_lab.serving.trafficclass import KV, mark_stream

READ_LIMIT = 2**20  # the StreamReader's buffer limit of a KV connection

# Idle connections kept per (remote, local) pair: enough for this many pulls of `streams` lanes
# each at once; a connection given back beyond that is closed.
IDLE_PULLS = 4
# `warm`: connections opened at once by one pool, and the wait before retrying a refused one.
WARM_CONCURRENCY = 16
WARM_RETRY_S = 0.25


@dataclass(eq=False)
class KVConnection:
    """One open TCP connection to a KV address, from `local` (None: unbound) and `port`."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    remote: Address
    local: str | None
    port: int
    uses: int = 0  # lanes (or releases) it served before this one

    def usable(self) -> bool:
        """Open both ways, nothing unread: a closed peer shows as EOF, a reset as closing."""
        return (
            not self.writer.is_closing()
            and not self.reader.at_eof()
            and self.reader.exception() is None
        )

    def abort(self) -> None:
        """Drop it at once (a graceful close would wait on a dead path)."""
        self.writer.transport.abort()

    async def close(self) -> None:
        """Close it gracefully."""
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


class KVConnections:
    """The idle KV connections of one decode engine, by (remote address, local address).

    `take` an idle usable one (most recently given back first: its window is the warmest) or
    None; `open` a new one; `give_back` one whose every request was answered; `abort` one that
    failed. At most `max_idle` idle connections are kept per pair. `opened` and `reused` count
    connections opened and taken again over the pool's life."""

    def __init__(self, max_idle: int = 8) -> None:
        if max_idle < 0:
            raise ValueError(f"max_idle must be >= 0, not {max_idle!r}")
        self.max_idle = max_idle
        self.opened = 0
        self.reused = 0
        self._idle: dict[tuple[Address, str | None], deque[KVConnection]] = {}
        self._closed = False

    def idle(self, remote: Address | None = None, local: str | None = None) -> int:
        """Idle connections kept: to `(remote, local)`, or in all when `remote` is None."""
        if remote is None:
            return sum(len(q) for q in self._idle.values())
        return len(self._idle.get((remote, local), ()))

    def take(self, remote: Address, local: str | None) -> KVConnection | None:
        """An idle usable connection to `remote` from `local`, or None; unusable idle ones
        met on the way are aborted."""
        idle = self._idle.get((remote, local))
        while idle:
            conn = idle.pop()
            if conn.usable():
                conn.uses += 1
                self.reused += 1
                return conn
            conn.abort()
        return None

    async def open(self, remote: Address, local: str | None) -> KVConnection:
        """A new connection to `remote`, bound to `local` when given (OSError if refused)."""
        reader, writer = await asyncio.open_connection(
            remote.host,
            remote.port,
            limit=READ_LIMIT,
            local_addr=(local, 0) if local else None,
        )
        mark_stream(writer, KV)
        self.opened += 1
        port = int(writer.get_extra_info("sockname")[1])
        return KVConnection(reader, writer, remote, local, port)

    def give_back(self, conn: KVConnection) -> None:
        """Keep a connection whose every request was answered for the next pull (closed
        instead when the pool is closed or holds `max_idle` to that pair already)."""
        if not conn.usable():
            conn.abort()
            return
        idle = self._idle.setdefault((conn.remote, conn.local), deque())
        if self._closed or len(idle) >= self.max_idle:
            conn.writer.close()  # the FIN goes out; nobody waits for the peer's
            return
        idle.append(conn)

    def abort(self, conn: KVConnection) -> None:
        """Drop a connection that failed, stalled or was left mid-request."""
        conn.abort()

    async def aclose(self) -> None:
        """Close every idle connection; connections given back later are closed too."""
        self._closed = True
        conns = [c for q in self._idle.values() for c in q]
        self._idle.clear()
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)


async def warm(
    pool: KVConnections,
    targets: Sequence[tuple[Address, str | None]],
    per_target: int,
    deadline_s: float,
) -> int:
    """Open `per_target` connections to each `(remote, local)` target and keep them idle in
    `pool` (at most `pool.max_idle` per target stay); a refused or unanswered connection is
    retried until `deadline_s` wall seconds from the call. Returns how many were opened: fewer
    than asked when a target did not answer in time (its pulls then open their own)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    gate = asyncio.Semaphore(WARM_CONCURRENCY)

    async def one(remote: Address, local: str | None) -> int:
        async with gate:
            while (left := end - loop.time()) > 0:
                try:
                    async with asyncio.timeout(left):
                        conn = await pool.open(remote, local)
                except (OSError, TimeoutError):
                    await asyncio.sleep(min(WARM_RETRY_S, max(0.0, end - loop.time())))
                    continue
                pool.give_back(conn)
                return 1
            return 0

    opened = await asyncio.gather(*(one(r, lo) for r, lo in targets for _ in range(per_target)))
    return sum(opened)
