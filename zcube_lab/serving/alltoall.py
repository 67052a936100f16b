"""Expert-parallel all-to-all over TCP: an instance's leader exchanges bytes with its EP peers.

Each frame of an engine step (`zcube_lab.serving.eptraffic`: a group of MoE layers) sends a dispatch
payload to every peer and reads its combine payload back; the frame ends when all peers
answered. Peers are `ep_worker` processes on the instance's other hosts, each reached at one or
more fabric addresses (one per NIC port and path, `zcube_lab.serving.addresses.EpPeer`). Every
address gets `subflows` connections (lanes), each bound to the local address the source map names
for it (`zcube_lab.serving.kvwire.paths.pick_source`, the KV pulls' rule: on ZCube each path leaves
its own port), and a peer's bytes are split evenly over its lanes. On the wire a request is a u64
length, a u64 answer length and that many bytes; the answer a u64 length and that many bytes.

`AllToAll.timed_exchange` returns an `Exchange`: when the dispatch started and the last
combine arrived (the slowest peer ends it: the group runs in lockstep), bytes each way, peers,
lanes and failures. With a log file (`exchange_log`), `log_exchange` appends one JSON line per
engine step: `{"start", "end", "seconds", "bytes_sent", "bytes_received", "peers", "lanes",
"failures", "frames", "micro_batches", "step", "compute_s", "step_s"}` (wall-clock
`start`/`end`; `seconds` from the monotonic clock, the time any frame of the step was in
flight; `step` counts the engine's steps from 0; `compute_s` the step's modelled compute and
`step_s` the whole step as it ran).
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

from zcube_lab.serving.addresses import Address, EpPeer, as_ep_peers
from zcube_lab.serving.config import EngineCommon
from zcube_lab.serving.kvwire.paths import pick_source
from zcube_lab.serving.trafficclass import EP, mark_stream
from zcube_lab.serving.vllm_metrics import EngineMetrics

_LEN = struct.Struct("!Q")
_REQ = struct.Struct("!QQ")  # dispatch bytes, combine bytes asked back
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
    mark_stream(writer, EP)  # the combine leaves here: EP's class (zcube_lab.serving.trafficclass)
    zeros = _ZeroPool()
    try:
        while True:
            n, back = _REQ.unpack(await reader.readexactly(_REQ.size))
            remaining = n
            while remaining:
                got = await reader.read(min(remaining, 2**20))
                if not got:
                    return
                remaining -= len(got)
            writer.write(_LEN.pack(back))
            writer.write(zeros.view(back))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        return
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def start_ep_server(addr: Address) -> asyncio.Server:
    """Listen on `addr` and answer each dispatch with the combine payload it asks for."""
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


def split_even(n: int, k: int) -> list[int]:
    """`n` bytes as exactly `k` parts differing by at most one (some 0 when n < k)."""
    base, extra = divmod(max(0, n), k)
    return [base + (1 if i < extra else 0) for i in range(k)]


def lane_parts(dispatch: int, combine: int, lanes: int) -> list[tuple[int, int, int]]:
    """A peer's (lane, dispatch, combine) parts: both split evenly over `lanes`, the lanes left
    with nothing dropped."""
    sends, backs = split_even(dispatch, lanes), split_even(combine, lanes)
    return [(i, d, c) for i, (d, c) in enumerate(zip(sends, backs, strict=True)) if d or c]


@dataclass(frozen=True)
class Exchange:
    """One all-to-all: dispatch started (`start`, wall s) to the last combine received (`end`);
    `seconds` on the monotonic clock; bytes sent to and received from the peers that answered;
    `lanes` the connections it used; `failures` peers that did not."""

    start: float
    end: float
    seconds: float
    bytes_sent: int
    bytes_received: int
    peers: int
    failures: int
    step: int
    lanes: int = 1

    @property
    def moved(self) -> int:
        """Bytes sent plus received."""
        return self.bytes_sent + self.bytes_received


_Moved = tuple[int, int]  # (bytes sent, bytes received)
_Part = tuple[int, int]  # (dispatch bytes, combine bytes)
_Key = tuple[int, int, int]  # (peer index, lane index, channel: a micro-batch's own)


class _PeerExchange:
    """One peer's share of one sprayed exchange: parts waiting, parts left, bytes moved."""

    def __init__(self, parts: list[_Part], workers: int) -> None:
        self.queue: asyncio.Queue[_Part | None] = asyncio.Queue()
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
    """The leader's side: persistent connections to every peer, one exchange per frame.

    A peer is an `EpPeer` (its addresses, one per path) or a bare `Address`. `subflows`
    connections per address (each its own source port, so its own ECMP hash), bound to the
    local address `source_map` names for it; an exchange's bytes for a peer are split evenly
    over those lanes, one part per lane. With
    `stall_timeout_s`, a subflow that receives nothing for that long while it has a frame
    outstanding is retired (connection aborted; its frame goes to an idle subflow of the peer, or
    to a fresh connection in its place). A peer whose exchange is not answered within `timeout_s`
    (or whose connection fails) counts in `failures`; the step goes on without it.
    """

    def __init__(
        self,
        peers: Sequence[EpPeer | Address],
        subflows: int = 1,
        stall_timeout_s: float | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        failed_counter: _Counter | None = None,
        retired_counter: _Counter | None = None,
        source_map: Sequence[tuple[str, str]] = (),
    ) -> None:
        if subflows < 1:
            raise ValueError(f"subflows must be >= 1, got {subflows}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if stall_timeout_s is not None and stall_timeout_s <= 0:
            raise ValueError(f"stall_timeout_s must be > 0 or None, got {stall_timeout_s}")
        self.peers = as_ep_peers(peers)
        if not all(self.peers):
            raise ValueError("every EP peer needs at least one address")
        self.subflows = subflows
        # Per peer, its lanes: (address, local address to bind or None), `subflows` per address.
        self.lanes: tuple[tuple[tuple[Address, str | None], ...], ...] = tuple(
            tuple(
                (addr, pick_source(addr.host, source_map)) for addr in peer for _ in range(subflows)
            )
            for peer in self.peers
        )
        self.stall_timeout_s = stall_timeout_s
        self.timeout_s = timeout_s
        self._failed_counter = failed_counter
        self._retired_counter = retired_counter
        # (peer index, lane index, channel) -> open connection
        self._conns: dict[_Key, _Conn] = {}
        self._zeros = _ZeroPool()
        self.failures = 0
        self.retired = 0
        self.steps = 0  # exchanges run
        self.log: TextIO | None = None  # one JSON line per exchange (`exchange_log`)

    def _drop(self, key: _Key) -> None:
        """Abort a connection left mid-frame (no graceful close on a possibly dead path)."""
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn[1].transport.abort()

    async def _connect(self, key: _Key) -> _Conn:
        conn = self._conns.get(key)
        if conn is None:
            addr, local = self.lanes[key[0]][key[1]]
            conn = await asyncio.open_connection(
                addr.host, addr.port, limit=_LIMIT, local_addr=(local, 0) if local else None
            )
            mark_stream(conn[1], EP)
            self._conns[key] = conn
        return conn

    async def _frame(self, key: _Key, part: _Part) -> _Moved:
        """Send one frame on lane `key` and read its answer: bytes sent, received."""
        n, ask = part
        try:
            reader, writer = await self._connect(key)
            writer.write(_REQ.pack(n, ask))
            writer.write(self._zeros.view(n))
            await writer.drain()
            (back,) = _LEN.unpack(await reader.readexactly(_LEN.size))
            await reader.readexactly(back)
            return n, back
        except BaseException:
            # A half-read connection is useless; open a fresh one next time.
            self._drop(key)
            raise

    async def _watched_frame(self, key: _Key, part: _Part, stall_s: float) -> _Moved:
        """`_frame`, raising _Stalled when no progress is made for `stall_s`: progress is the
        connection opening, a send chunk accepted (the peer acknowledged earlier bytes), or
        bytes received."""
        loop = asyncio.get_running_loop()
        n, ask = part
        try:
            async with asyncio.timeout(stall_s) as watch:
                reader, writer = await self._connect(key)
                watch.reschedule(loop.time() + stall_s)
                writer.write(_REQ.pack(n, ask))
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

    async def _worker(self, key: _Key, ex: _PeerExchange) -> None:
        peer, slot = key[0], key[1]
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
                addr = self.lanes[peer][slot][0]
                log.debug("all-to-all subflow %d to %s retired: stalled %.3g s", slot, addr, stall)
                ex.queue.put_nowait(part)
                # Let a subflow already waiting (it just answered, so its path works) take the
                # part; otherwise this slot takes it on a fresh connection (new source port).
                await asyncio.sleep(0)
                continue
            ex.finished(moved)

    async def _one(self, peer: int, dispatch: int, combine: int, channel: int) -> _Moved:
        parts = lane_parts(dispatch, combine, len(self.lanes[peer]))
        keys = [(peer, i, channel) for i, _, _ in parts]
        async with asyncio.timeout(self.timeout_s):
            if self.stall_timeout_s is None:
                return await self._lanes(keys, parts)
            return await self._spray(keys, parts)

    async def _lanes(self, keys: list[_Key], parts: list[tuple[int, int, int]]) -> _Moved:
        """Each part on its own lane at once; one lane failing stops the others."""
        tasks = [
            asyncio.create_task(self._frame(k, (d, c)))
            for k, (_, d, c) in zip(keys, parts, strict=True)
        ]
        try:
            moved = await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return sum(m[0] for m in moved), sum(m[1] for m in moved)

    async def _spray(self, keys: list[_Key], parts: list[tuple[int, int, int]]) -> _Moved:
        ex = _PeerExchange([(d, c) for _, d, c in parts], len(parts))
        tasks = [asyncio.create_task(self._worker(k, ex)) for k in keys]
        try:
            await asyncio.gather(*tasks)
        finally:
            # On failure or timeout: stop the other subflows (those mid-frame abort themselves).
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return ex.sent, ex.received

    async def exchange(self, bytes_per_peer: int, combine: int | None = None) -> int:
        """Dispatch to and combine from every peer; return bytes moved (0 from a failed peer)."""
        if not self.peers or bytes_per_peer <= 0:
            return 0
        return (await self.timed_exchange(bytes_per_peer, combine)).moved

    async def timed_exchange(
        self, dispatch: int, combine: int | None = None, channel: int = 0
    ) -> Exchange:
        """Dispatch `dispatch` bytes to every peer at once and wait for every combine (`combine`
        bytes from each; default as many as sent): the exchange ends with the slowest peer's
        answer (or its failure). Exchanges in flight at once need distinct `channel`s (their
        own connections: a micro-batch's)."""
        back = dispatch if combine is None else combine
        loop = asyncio.get_running_loop()
        wall, start = time.time(), loop.time()
        failures_before = self.failures
        results = await asyncio.gather(
            *(self._one(i, dispatch, back, channel) for i in range(len(self.peers))),
            return_exceptions=True,
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
            step=self.steps,
            lanes=sum(len(lane_parts(dispatch, back, len(ls))) for ls in self.lanes),
        )

    def next_step(self) -> int:
        """The index of a new engine step (counted from 0)."""
        step = self.steps
        self.steps += 1
        return step

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
                log.warning("all-to-all with %s failed: %s", "+".join(map(str, peer)), why)
            else:
                sent += r[0]
                received += r[1]
        return sent, received

    def log_exchange(
        self,
        ex: Exchange,
        compute_s: float,
        step_s: float,
        frames: int = 1,
        micro_batches: int = 1,
    ) -> None:
        """Append a step's exchange `ex` to the exchange log (if any) as one JSON line, flushed
        at once."""
        if self.log is None:
            return
        record = {
            "start": ex.start,
            "end": ex.end,
            "seconds": ex.seconds,
            "bytes_sent": ex.bytes_sent,
            "bytes_received": ex.bytes_received,
            "peers": ex.peers,
            "lanes": ex.lanes,
            "failures": ex.failures,
            "frames": frames,
            "micro_batches": micro_batches,
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
        cfg.ep_paths,
        subflows=cfg.ep_subflows,
        stall_timeout_s=(
            None if cfg.ep_stall_timeout_s is None else cfg.wall_s(cfg.ep_stall_timeout_s)
        ),
        timeout_s=cfg.wall_s(cfg.ep_timeout_s),
        failed_counter=metrics.a2a_failures,
        retired_counter=metrics.ep_subflows_retired,
        # One port: the host's shortest routes, as before; all: each path from its own port.
        source_map=cfg.ep_source_map if cfg.ep_ports == "all" else (),
    )
