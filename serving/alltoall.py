"""Expert-parallel all-to-all over TCP: an instance's leader exchanges bytes with its EP peers.

Each engine step of an instance spanning several GPU hosts sends a dispatch payload to every peer
and reads an equally sized combine payload back; the step ends when all peers answered. Peers
are `ep_worker` processes on the instance's other hosts (their fabric addresses). Frames are a
u64 length and that many bytes, both ways. Sizes come from `models.alltoall_bytes_per_peer`
(every MoE layer's dispatch in one frame, already divided by `bandwidth_scale`).

`AllToAll.timed_exchange` returns an `Exchange`: when the dispatch started and the last
combine arrived (the slowest peer ends it: the group runs in lockstep), bytes each way, peers
and failures. With a log file (`exchange_log`), `log_exchange` appends one JSON line per
exchange: `{"start", "end", "seconds", "bytes_sent", "bytes_received", "peers", "failures",
"step", "compute_s", "step_s"}` (wall-clock `start`/`end`; `seconds` from the monotonic
clock; `step` counts the engine's exchanges from 0; `compute_s` the step's modelled compute
and `step_s` the whole step as it ran).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO

from serving.config import Address, EngineCommon
from serving.vllm_metrics import EngineMetrics

_LEN = struct.Struct("!Q")
_LIMIT = 2**20  # stream buffer and read size
_CHUNK = 256 * 1024  # send granularity when watching for stalls
DEFAULT_TIMEOUT_S = 5.0
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


class _Counter(Protocol):
    """What AllToAll needs of a metric: a prometheus_client counter child fits."""

    def inc(self, amount: float = 1) -> None: ...


_Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class _Stalled(Exception):
    """A subflow received nothing for the stall timeout while it had a part outstanding."""


def split_bytes(n: int, k: int) -> list[int]:
    """`n` bytes as at most `k` near-equal nonzero parts (fewer when n < k)."""
    if n <= 0:
        return []
    count = min(k, n)
    base, extra = divmod(n, count)
    return [base + (1 if i < extra else 0) for i in range(count)]


@dataclass(frozen=True)
class Exchange:
    """One all-to-all: dispatch started (`start`, wall s) to the last combine received (`end`);
    `seconds` on the monotonic clock; bytes sent to and received from the peers that answered;
    `failures` peers that did not."""

    start: float
    end: float
    seconds: float
    bytes_sent: int
    bytes_received: int
    peers: int
    failures: int
    step: int

    @property
    def moved(self) -> int:
        """Bytes sent plus received."""
        return self.bytes_sent + self.bytes_received


_Moved = tuple[int, int]  # (bytes sent, bytes received)


class _PeerExchange:
    """One peer's share of one sprayed exchange: parts waiting, parts left, bytes moved."""

    def __init__(self, parts: list[int], workers: int) -> None:
        self.queue: asyncio.Queue[int | None] = asyncio.Queue()
        for p in parts:
            self.queue.put_nowait(p)
        self.left = len(parts)
        self.workers = workers
        self.sent = 0
        self.received = 0

    def finished(self, moved: _Moved) -> None:
        self.sent += moved[0]
        self.received += moved[1]
        self.left -= 1
        if self.left == 0:
            for _ in range(self.workers):
                self.queue.put_nowait(None)  # idle workers exit


class AllToAll:
    """The leader's side: persistent connections to every peer, one exchange per step.

    `subflows` connections per peer (each its own source port, so its own ECMP hash); an
    exchange's bytes for a peer are split into that many frames, one per subflow. With
    `stall_timeout_s`, a subflow that receives nothing for that long while it has a frame
    outstanding is retired (connection aborted; its frame goes to an idle subflow of the peer, or
    to a fresh connection in its place). A peer whose exchange is not answered within `timeout_s`
    (or whose connection fails) counts in `failures`; the step goes on without it.
    """

    def __init__(
        self,
        peers: Sequence[Address],
        subflows: int = 1,
        stall_timeout_s: float | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        failed_counter: _Counter | None = None,
        retired_counter: _Counter | None = None,
    ) -> None:
        if subflows < 1:
            raise ValueError(f"subflows must be >= 1, got {subflows}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if stall_timeout_s is not None and stall_timeout_s <= 0:
            raise ValueError(f"stall_timeout_s must be > 0 or None, got {stall_timeout_s}")
        self.peers = tuple(peers)
        self.subflows = subflows
        self.stall_timeout_s = stall_timeout_s
        self.timeout_s = timeout_s
        self._failed_counter = failed_counter
        self._retired_counter = retired_counter
        # (peer, subflow index) -> open connection
        self._conns: dict[tuple[Address, int], _Conn] = {}
        self._zeros = _ZeroPool()
        self.failures = 0
        self.retired = 0
        self.steps = 0  # exchanges run
        self.log: TextIO | None = None  # one JSON line per exchange (`exchange_log`)

    def _drop(self, key: tuple[Address, int]) -> None:
        """Abort a connection left mid-frame (no graceful close on a possibly dead path)."""
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn[1].transport.abort()

    async def _connect(self, key: tuple[Address, int]) -> _Conn:
        conn = self._conns.get(key)
        if conn is None:
            peer = key[0]
            conn = await asyncio.open_connection(peer.host, peer.port, limit=_LIMIT)
            self._conns[key] = conn
        return conn

    async def _frame(self, key: tuple[Address, int], n: int) -> _Moved:
        """Send one n-byte frame on subflow `key` and read its answer: bytes sent, received."""
        try:
            reader, writer = await self._connect(key)
            writer.write(_LEN.pack(n))
            writer.write(self._zeros.view(n))
            await writer.drain()
            (back,) = _LEN.unpack(await reader.readexactly(_LEN.size))
            await reader.readexactly(back)
            return n, back
        except BaseException:
            # A half-read connection is useless; open a fresh one next time.
            self._drop(key)
            raise

    async def _watched_frame(self, key: tuple[Address, int], n: int, stall_s: float) -> _Moved:
        """`_frame`, raising _Stalled when no progress is made for `stall_s`: progress is the
        connection opening, a send chunk accepted (the peer acknowledged earlier bytes), or
        bytes received."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(stall_s) as watch:
                reader, writer = await self._connect(key)
                watch.reschedule(loop.time() + stall_s)
                writer.write(_LEN.pack(n))
                view = self._zeros.view(n)
                for off in range(0, n, _CHUNK):
                    writer.write(view[off : off + _CHUNK])
                    await writer.drain()
                    watch.reschedule(loop.time() + stall_s)
                (back,) = _LEN.unpack(await reader.readexactly(_LEN.size))
                remaining = back
                while remaining:
                    watch.reschedule(loop.time() + stall_s)
                    got = await reader.read(min(remaining, _LIMIT))
                    if not got:
                        raise asyncio.IncompleteReadError(b"", remaining)
                    remaining -= len(got)
            return n, back
        except TimeoutError:
            self._drop(key)
            raise _Stalled(f"no progress for {stall_s} s") from None
        except BaseException:
            self._drop(key)
            raise

    async def _worker(self, peer: Address, slot: int, ex: _PeerExchange) -> None:
        key = (peer, slot)
        stall = self.stall_timeout_s
        while (part := await ex.queue.get()) is not None:
            if stall is None:
                ex.finished(await self._frame(key, part))
                continue
            try:
                moved = await self._watched_frame(key, part, stall)
            except _Stalled:
                self.retired += 1
                if self._retired_counter is not None:
                    self._retired_counter.inc()
                log.debug("all-to-all subflow %d to %s retired: stalled %.3g s", slot, peer, stall)
                ex.queue.put_nowait(part)
                # Let a subflow already waiting (it just answered, so its path works) take the
                # part; otherwise this slot takes it on a fresh connection (new source port).
                await asyncio.sleep(0)
                continue
            ex.finished(moved)

    async def _one(self, peer: Address, n: int) -> _Moved:
        async with asyncio.timeout(self.timeout_s):
            if self.subflows == 1 and self.stall_timeout_s is None:
                return await self._frame((peer, 0), n)
            return await self._spray(peer, n)

    async def _spray(self, peer: Address, n: int) -> _Moved:
        parts = split_bytes(n, self.subflows)
        ex = _PeerExchange(parts, len(parts))
        tasks = [asyncio.create_task(self._worker(peer, i, ex)) for i in range(len(parts))]
        try:
            await asyncio.gather(*tasks)
        finally:
            # On failure or timeout: stop the other subflows (those mid-frame abort themselves).
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return ex.sent, ex.received

    async def exchange(self, bytes_per_peer: int) -> int:
        """Dispatch to and combine from every peer; return bytes moved (0 from a failed peer)."""
        if not self.peers or bytes_per_peer <= 0:
            return 0
        return (await self.timed_exchange(bytes_per_peer)).moved

    async def timed_exchange(self, bytes_per_peer: int) -> Exchange:
        """Dispatch `bytes_per_peer` to every peer at once and wait for every combine: the
        exchange ends with the slowest peer's answer (or its failure)."""
        loop = asyncio.get_running_loop()
        wall, start = time.time(), loop.time()
        step = self.steps
        self.steps += 1
        failures_before = self.failures
        results = await asyncio.gather(
            *(self._one(p, bytes_per_peer) for p in self.peers), return_exceptions=True
        )
        seconds = loop.time() - start
        sent, received = self._tally(results)
        return Exchange(
            start=wall,
            end=wall + seconds,
            seconds=seconds,
            bytes_sent=sent,
            bytes_received=received,
            peers=len(self.peers),
            failures=self.failures - failures_before,
            step=step,
        )

    def _tally(self, results: list[_Moved | BaseException]) -> _Moved:
        """Bytes sent and received by the peers that answered; count and log the others."""
        sent = received = 0
        for peer, r in zip(self.peers, results, strict=True):
            if isinstance(r, BaseException):
                if isinstance(r, asyncio.CancelledError):
                    raise r
                self.failures += 1
                if self._failed_counter is not None:
                    self._failed_counter.inc()
                why = f"no answer within {self.timeout_s} s" if isinstance(r, TimeoutError) else r
                log.warning("all-to-all with %s failed: %s", peer, why)
            else:
                sent += r[0]
                received += r[1]
        return sent, received

    def log_exchange(self, ex: Exchange, compute_s: float, step_s: float) -> None:
        """Append `ex` to the exchange log (if any) as one JSON line, flushed at once."""
        if self.log is None:
            return
        record = {
            "start": ex.start,
            "end": ex.end,
            "seconds": ex.seconds,
            "bytes_sent": ex.bytes_sent,
            "bytes_received": ex.bytes_received,
            "peers": ex.peers,
            "failures": ex.failures,
            "step": ex.step,
            "compute_s": compute_s,
            "step_s": step_s,
        }
        self.log.write(json.dumps(record) + "\n")
        self.log.flush()

    async def close(self) -> None:
        """Close every peer connection."""
        for _, writer in self._conns.values():
            writer.close()
        self._conns.clear()


@contextlib.contextmanager
def exchange_log(a2a: AllToAll, path: str) -> Iterator[None]:
    """While open, `a2a` appends one JSON line per exchange to `path` ("": no log)."""
    if not path:
        yield
        return
    with open(path, "a", encoding="utf-8") as f:
        a2a.log = f
        try:
            yield
        finally:
            a2a.log = None


def engine_alltoall(cfg: EngineCommon, metrics: EngineMetrics) -> AllToAll:
    """The exchange an engine runs with its EP peers, as configured, counting into `metrics`."""
    return AllToAll(
        cfg.ep_peers,
        subflows=cfg.ep_subflows,
        stall_timeout_s=(
            None if cfg.ep_stall_timeout_s is None else cfg.wall_s(cfg.ep_stall_timeout_s)
        ),
        timeout_s=cfg.wall_s(cfg.ep_timeout_s),
        failed_counter=metrics.a2a_failures,
        retired_counter=metrics.ep_subflows_retired,
    )
