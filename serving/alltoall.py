"""Expert-parallel all-to-all over TCP: an instance's leader exchanges bytes with its EP peers.

Each engine step of an instance spanning several GPU hosts sends a dispatch payload to every peer
and reads an equally sized combine payload back; the step ends when all peers answered. Peers
are `ep_worker` processes on the instance's other hosts (their fabric addresses). Frames are a
u64 length and that many bytes, both ways. Sizes come from `profiles.alltoall_bytes_per_peer`
(already divided by `bandwidth_scale`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Sequence

from serving.config import Address

_LEN = struct.Struct("!Q")
log = logging.getLogger(__name__)


class _ZeroPool:
    """A reusable zero buffer so payloads are not allocated per step."""

    def __init__(self) -> None:
        self._buf = b""

    def view(self, n: int) -> memoryview:
        if len(self._buf) < n:
            self._buf = bytes(n)
        return memoryview(self._buf)[:n]


async def _serve_peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    zeros = _ZeroPool()
    try:
        while True:
            (n,) = _LEN.unpack(await reader.readexactly(_LEN.size))
            remaining = n
            while remaining:
                got = await reader.read(min(remaining, 2**20))
                if not got:
                    return
                remaining -= len(got)
            writer.write(_LEN.pack(n))
            writer.write(zeros.view(n))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        return
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def start_ep_server(addr: Address) -> asyncio.Server:
    """Listen on `addr` and answer each dispatch with an equal-sized combine payload."""
    return await asyncio.start_server(_serve_peer, addr.host, addr.port, limit=2**20)


class AllToAll:
    """The leader's side: persistent connections to every peer, one exchange per step."""

    def __init__(self, peers: Sequence[Address]) -> None:
        self.peers = tuple(peers)
        self._conns: dict[Address, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        self._zeros = _ZeroPool()
        self.failures = 0

    async def _one(self, peer: Address, n: int) -> int:
        conn = self._conns.get(peer)
        if conn is None:
            conn = await asyncio.open_connection(peer.host, peer.port, limit=2**20)
            self._conns[peer] = conn
        reader, writer = conn
        try:
            writer.write(_LEN.pack(n))
            writer.write(self._zeros.view(n))
            await writer.drain()
            (back,) = _LEN.unpack(await reader.readexactly(_LEN.size))
            await reader.readexactly(back)
            return n + back
        except BaseException:
            # A half-read connection is useless; open a fresh one next step.
            self._conns.pop(peer, None)
            writer.close()
            raise

    async def exchange(self, bytes_per_peer: int) -> int:
        """Dispatch to and combine from every peer; return bytes moved (0 on failure)."""
        if not self.peers or bytes_per_peer <= 0:
            return 0
        results = await asyncio.gather(
            *(self._one(p, bytes_per_peer) for p in self.peers), return_exceptions=True
        )
        moved = 0
        for peer, r in zip(self.peers, results, strict=True):
            if isinstance(r, BaseException):
                if isinstance(r, asyncio.CancelledError):
                    raise r
                self.failures += 1
                log.warning("all-to-all with %s failed: %s", peer, r)
            else:
                moved += r
        return moved

    async def close(self) -> None:
        """Close every peer connection."""
        for _, writer in self._conns.values():
            writer.close()
        self._conns.clear()
