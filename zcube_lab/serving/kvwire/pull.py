"""Pulling one request's KV: lanes (TCP connections) sharing one chunk queue, stalled lanes
retired and replaced, and the pulled bytes verified.

Decode pulls (like vLLM's NIXL connector): it runs `streams` connections ("lanes") to each of
the prefill's KV addresses (one address per prefill NIC port, so `streams` per port on every
fabric), deals the chunks of one request's buffer over all those lanes from one shared queue,
pipelines its requests, and reassembles the bytes. With `connections` (a decode engine's
`KVConnections`) a lane reuses an idle connection kept from an earlier pull and gives it back
when it ends cleanly, as NIXL keeps its endpoints; a kept connection that broke while idle is
replaced by a new one before the lane counts as failed. The bytes are checked once, against
the buffer's CRC-32 from `kv_transfer_params`, when every chunk is in.

Spraying with end-host failover (MRC-style): every lane is its own TCP connection, so its own
source port, so its own ECMP hash: a path id, like MRC's entropy values. With a stall timeout,
a lane that has requests outstanding and receives no byte for that long is retired: its
connection is aborted, its chunks go back to the front of the queue for the other lanes, and
a replacement lane (a new source port, so a new path id) is opened, preferring an address on
which lanes still move bytes. Without a stall timeout a stalled lane holds its chunks until the
pull's overall timeout (the static reference).
"""

from __future__ import annotations

import asyncio
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from zcube_lab.serving.config import Address
from zcube_lab.serving.kvwire.conns import KVConnection, KVConnections
from zcube_lab.serving.kvwire.paths import (
    PathHealth,
    chunk_size,
    pick_replacement,
    pick_source,
    plan_lanes,
)
from zcube_lab.serving.kvwire.protocol import NOT_FOUND, OK, OP_GET, RESPONSE, encode_request


class KVTransferError(Exception):
    """A KV pull failed: connection refused or reset, timeout, missing buffer, bad checksum.

    Raised by `pull_kv`, it also says what the attempt did: `received` bytes of chunks,
    `lanes` it started with, `retired_lanes`, `paths_used` (connections used, kept or new),
    `opened` (of those, new ones) and `checksum_ok` (False: a checksum mismatch; None: the
    attempt ended before the check)."""

    def __init__(self, message: str, *, checksum_ok: bool | None = None) -> None:
        super().__init__(message)
        self.checksum_ok = checksum_ok
        self.received = 0
        self.lanes = 0
        self.retired_lanes = 0
        self.paths_used = 0
        self.opened = 0


@dataclass(frozen=True)
class PullResult:
    """What a pull moved: total bytes, per-address bytes, lanes it started with, checksum
    verified, lanes retired for stalling, and the path ids used: `paths_used` connections in
    all (kept from earlier pulls or new), `source_ports` their local ports (each a distinct
    ECMP hash), `opened` how many of them this pull opened."""

    num_bytes: int
    bytes_by_address: dict[str, int]
    lanes: int
    checksum: int
    retired_lanes: int = 0
    paths_used: int = 0
    source_ports: tuple[int, ...] = ()
    opened: int = 0


LANE_WINDOW = 2  # chunk requests a lane keeps outstanding, so the link never idles a round trip
RETIRE_BUDGET_PER_LANE = 4  # default replacement budget of one pull: 4 x its starting lanes
_READ_PIECE = 2**20  # most bytes one read takes; any bytes at all reset the stall timer


class _LaneRetired(Exception):
    """A lane's path looks dead: no bytes for the stall timeout, connect failed, or reset."""


@dataclass(eq=False)
class _Lane:
    """One TCP connection of a pull and the chunks it owns (requested or about to be)."""

    addr: Address
    local: str | None
    inflight: deque[tuple[int, int]]
    moved: int = 0
    port: int = 0
    reason: str = ""
    fresh: bool = False  # a replacement: a new connection (a new path id), never a kept one

    def __str__(self) -> str:
        return f"{self.addr} from port {self.port or '-'} ({self.reason})"


@dataclass(eq=False)
class _Pull:
    """State the lanes of one pull share."""

    request_id: str
    out: memoryview
    queue: deque[tuple[int, int]]
    lanes: int
    stall_timeout_s: float | None
    pool: KVConnections
    health: PathHealth | None = None
    last_progress: dict[Address, float] = field(default_factory=dict)
    last_retired: dict[Address, float] = field(default_factory=dict)
    ports: list[int] = field(default_factory=list)
    opened: int = 0


async def _run_lane(pull: _Pull, lane: _Lane) -> None:
    """Pull the lane's chunks, then chunks from the shared queue until it is empty: a lane on
    a faster path takes more chunks, so a transfer is not held back by its slowest lane
    (multi-rail transports share work the same way). The lane runs on a kept connection when
    one is idle (one that breaks before its first answer is replaced by a new one), else on a
    new one. With a stall timeout, a dead path raises `_LaneRetired`; the lane's unfinished
    chunks stay in `lane.inflight` (a partly received one is simply fetched again in full)."""
    loop = asyncio.get_running_loop()
    stall = pull.stall_timeout_s
    conn: KVConnection | None = None
    done = heard = False
    try:
        # One timer per lane, pushed back whenever bytes arrive: a slow lane that keeps
        # moving is never retired, only a silent one. Its first period bounds the connect.
        async with asyncio.timeout(stall) as watchdog:

            def alive() -> None:
                nonlocal heard
                heard = True
                now = loop.time()
                pull.last_progress[lane.addr] = now
                if pull.health is not None:
                    pull.health.progress(lane.addr)
                if stall is not None:
                    watchdog.reschedule(now + stall)

            conn = None if lane.fresh else pull.pool.take(lane.addr, lane.local)
            if conn is not None:
                _use(pull, lane, conn)
                try:
                    await _exchange(pull, lane, conn.reader, conn.writer, alive)
                    done = True
                except (OSError, asyncio.IncompleteReadError):
                    if heard:
                        raise
                    # Closed or reset while it sat idle (the peer restarted): not the path.
                    conn.abort()
                    conn = None
            if not done:
                conn = await pull.pool.open(lane.addr, lane.local)
                pull.opened += 1
                _use(pull, lane, conn)
                if stall is not None:
                    watchdog.reschedule(loop.time() + stall)
                await _exchange(pull, lane, conn.reader, conn.writer, alive)
                done = True
    except TimeoutError as exc:
        # Only the watchdog's own expiry is a stall; the OS's ETIMEDOUT is a lost connection.
        if stall is None:
            raise
        if watchdog.expired():
            what = "connect" if conn is None else "no bytes"
            raise _LaneRetired(f"{what} for {stall}s") from None
        raise _LaneRetired(f"{type(exc).__name__}: {exc}") from None
    except (OSError, asyncio.IncompleteReadError) as exc:
        if stall is None:
            raise
        raise _LaneRetired(f"{type(exc).__name__}: {exc}") from None
    finally:
        if conn is not None:
            if done:
                pull.pool.give_back(conn)  # every request answered: kept for the next pull
            else:
                # Failed, retired or cancelled: a graceful close would wait on a dead path.
                conn.abort()


def _use(pull: _Pull, lane: _Lane, conn: KVConnection) -> None:
    lane.port = conn.port
    pull.ports.append(conn.port)


async def _exchange(
    pull: _Pull,
    lane: _Lane,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    alive: Callable[[], None],
) -> None:
    """Request and receive the lane's chunks, `LANE_WINDOW` requests outstanding. A lane keeps
    a second request outstanding only while the queue holds enough for every lane, so the tail
    is not hoarded by one lane."""

    def ask() -> bool:
        if not pull.queue or (lane.inflight and len(pull.queue) < pull.lanes):
            return False
        chunk = pull.queue.popleft()
        lane.inflight.append(chunk)
        writer.write(encode_request(OP_GET, pull.request_id, *chunk))
        return True

    for chunk in lane.inflight:
        writer.write(encode_request(OP_GET, pull.request_id, *chunk))
    while len(lane.inflight) < LANE_WINDOW and ask():
        pass
    await writer.drain()
    while lane.inflight:
        offset, length = lane.inflight[0]
        await _receive_chunk(pull, lane, reader, offset, length, alive)
        lane.inflight.popleft()
        lane.moved += length
        sent = False
        while len(lane.inflight) < LANE_WINDOW and ask():
            sent = True
        if sent:
            await writer.drain()


async def _receive_chunk(
    pull: _Pull,
    lane: _Lane,
    reader: asyncio.StreamReader,
    offset: int,
    length: int,
    alive: Callable[[], None],
) -> None:
    """Read one response into place in the pull's buffer (the bytes are checked once, when
    the whole buffer is in: `_verified`)."""
    status, _crc, got_len = RESPONSE.unpack(await reader.readexactly(RESPONSE.size))
    alive()
    if status == NOT_FOUND:
        raise KVTransferError(f"prefill at {lane.addr} holds no KV for {pull.request_id}")
    if status != OK or got_len != length:
        raise KVTransferError(f"prefill at {lane.addr} refused range {offset}+{length}")
    # Read in pieces straight into place. If the lane is retired mid-chunk the chunk stays
    # owned by it, is requeued whole, and the lane that fetches it again overwrites these bytes
    # with the same ones.
    got = 0
    while got < length:
        piece = await reader.read(min(length - got, _READ_PIECE))
        if not piece:
            raise asyncio.IncompleteReadError(b"", length - got)
        pull.out[offset + got : offset + got + len(piece)] = piece
        got += len(piece)
        alive()


def _summary(retired: Sequence[_Lane], most: int = 4) -> str:
    listed = "; ".join(str(lane) for lane in retired[-most:])
    more = f" and {len(retired) - most} earlier" if len(retired) > most else ""
    return f"{len(retired)} lanes retired: {listed}{more}"


class _Lanes:
    """The running, ended and retired lanes of one pull, and the replacement of retired ones."""

    def __init__(
        self,
        pull: _Pull,
        addrs: Sequence[Address],
        source_map: Sequence[tuple[str, str]],
        budget: int,
    ) -> None:
        self.pull = pull
        self.addrs = addrs
        self.source_map = source_map
        self.budget = budget
        self.running: dict[asyncio.Task[None], _Lane] = {}
        self.ended: list[_Lane] = []
        self.retired: list[_Lane] = []

    def launch(self, addr: Address, first: list[tuple[int, int]], fresh: bool = False) -> None:
        """Start a lane to `addr` owning the chunks `first` (`fresh`: on a new connection)."""
        lane = _Lane(addr, pick_source(addr.host, self.source_map), deque(first), fresh=fresh)
        self.running[asyncio.create_task(_run_lane(self.pull, lane))] = lane

    def failed(self, exc: KVTransferError) -> KVTransferError:
        """`exc` with what the attempt did."""
        exc.received = sum(lane.moved for lane in (*self.ended, *self.running.values()))
        exc.lanes, exc.retired_lanes = self.pull.lanes, len(self.retired)
        exc.paths_used, exc.opened = len(self.pull.ports), self.pull.opened
        return exc

    def _replacement(self, turn: int) -> Address:
        health, addrs = self.pull.health, self.addrs
        if health is None:
            return pick_replacement(addrs, self.pull.last_progress, self.pull.last_retired, turn)
        # Any pull's news counts; a retirement older than the hold is forgotten.
        now = health.clock()
        progress = {a: health.last_progress(a) for a in addrs}
        suspect = {a: health.last_retired(a) for a in addrs if health.is_suspect(a, now)}
        return pick_replacement(addrs, progress, suspect, turn)

    def _ended(self, task: asyncio.Task[None]) -> None:
        lane = self.running.pop(task)
        self.ended.append(lane)
        exc = task.exception()
        if exc is None:
            return
        if isinstance(exc, KVTransferError):
            raise self.failed(exc)
        if not isinstance(exc, _LaneRetired):
            raise self.failed(KVTransferError(f"KV pull failed: {type(exc).__name__}: {exc}"))
        lane.reason = str(exc)
        self.retired.append(lane)
        self.pull.last_retired[lane.addr] = asyncio.get_running_loop().time()
        if self.pull.health is not None:
            self.pull.health.retired(lane.addr)
        self.pull.queue.extendleft(reversed(lane.inflight))
        lane.inflight.clear()
        if self.pull.queue and len(self.retired) <= self.budget:
            self.launch(self._replacement(len(self.retired)), [], fresh=True)

    async def wait(self, num_bytes: int) -> None:
        """Until every lane has ended; replace retired lanes while the budget lasts."""
        while self.running:
            finished, _ = await asyncio.wait(self.running, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                self._ended(task)
        if self.pull.queue:
            raise self.failed(
                KVTransferError(
                    f"KV pull of {num_bytes} bytes failed: no live lane left and the "
                    f"replacement budget ({self.budget}) is spent; {_summary(self.retired)}"
                )
            )

    async def cancel(self) -> None:
        """Stop the lanes still running."""
        for task in self.running:
            task.cancel()
        if self.running:
            await asyncio.gather(*self.running, return_exceptions=True)


def _suspects_to_avoid(addrs: Sequence[Address], health: PathHealth | None) -> list[Address]:
    """The addresses this pull plans no lane on: the suspect ones, unless all are."""
    if health is None:
        return []
    now = health.clock()
    distinct = list(dict.fromkeys(addrs))
    avoid = [a for a in distinct if health.is_suspect(a, now)]
    return [] if len(avoid) == len(distinct) else avoid


async def pull_kv(
    request_id: str,
    addrs: Sequence[Address],
    num_bytes: int,
    expected_checksum: int,
    *,
    chunk_bytes: int,
    streams: int,
    timeout_s: float,
    source_map: Sequence[tuple[str, str]] = (),
    stall_timeout_s: float | None = None,
    max_retired: int | None = None,
    health: PathHealth | None = None,
    chunks_per_lane: int | None = None,
    connections: KVConnections | None = None,
) -> tuple[bytearray, PullResult]:
    """Pull one request's KV over every address and stream; verify bytes and checksum.

    Chunks are `chunk_bytes` long, or, with `chunks_per_lane`, sized by `chunk_size` so that
    every lane gets that many (`chunk_bytes` then is the largest chunk).

    With `stall_timeout_s`, a lane that receives nothing for that long is retired and
    replaced by a new connection (a new path id), at most `max_retired` times per pull
    (default `RETIRE_BUDGET_PER_LANE` x the starting lanes); a lane that stalls after that is
    retired without replacement and the lanes still running take its chunks. Protocol errors
    (missing KV, bad range, checksum) fail the pull at once.

    With `health` (needs `stall_timeout_s`), what earlier pulls learnt is used and extended:
    the lanes are planned over the addresses that are not suspect (as many lanes), each suspect
    one gets a background probe instead (the pull does not wait for it), replacements avoid
    addresses suspected by any pull, and this pull's retirements and progress are recorded.
    If every address is suspect the lanes are planned as without `health`.

    With `connections`, lanes reuse its idle connections and give them back (a decode
    engine's, kept across pulls); without, the pull opens its own and closes them at the end.
    Replacement lanes always open a new connection."""
    if not addrs:
        raise KVTransferError("no KV address to pull from")
    if stall_timeout_s is not None and not stall_timeout_s > 0:
        raise ValueError(f"stall_timeout_s must be > 0 or None, not {stall_timeout_s!r}")
    if health is not None and stall_timeout_s is None:
        raise ValueError("path health needs a stall timeout")
    avoid = _suspects_to_avoid(addrs, health)
    buf = bytearray(num_bytes)
    view = memoryview(buf)
    if chunks_per_lane is not None:
        chunk_bytes = chunk_size(num_bytes, streams * len(addrs), chunk_bytes, chunks_per_lane)
    plan = plan_lanes(num_bytes, chunk_bytes, addrs, streams, avoid)
    budget = RETIRE_BUDGET_PER_LANE * len(plan) if max_retired is None else max_retired
    # Each lane starts with one chunk; the rest go, in offset order, to whichever lane is free.
    chunks = sorted(c for _, cs in plan for c in cs)
    pool = KVConnections() if connections is None else connections
    queue = deque(chunks[len(plan) :])
    pull = _Pull(request_id, view, queue, len(plan), stall_timeout_s, pool, health)
    lanes = _Lanes(pull, addrs, source_map, budget)
    try:
        async with asyncio.timeout(timeout_s):
            for i, (addr, _) in enumerate(plan):
                lanes.launch(addr, chunks[i : i + 1])
            if health is not None and stall_timeout_s is not None:
                for addr in avoid:
                    local = pick_source(addr.host, source_map)
                    health.probe(addr, request_id, timeout_s=stall_timeout_s, local=local)
            await lanes.wait(num_bytes)
    except TimeoutError:
        why = f"; {_summary(lanes.retired)}" if lanes.retired else ""
        raise lanes.failed(
            KVTransferError(f"KV pull of {num_bytes} bytes timed out after {timeout_s}s{why}")
        ) from None
    finally:
        await lanes.cancel()
        view.release()
        if connections is None:
            await pool.aclose()
    return buf, _verified(buf, expected_checksum, lanes)


def _verified(buf: bytearray, expected_checksum: int, lanes: _Lanes) -> PullResult:
    """What the pull moved, once its byte count and checksum are right."""
    by_addr: dict[str, int] = {}
    for lane in lanes.ended:
        by_addr[str(lane.addr)] = by_addr.get(str(lane.addr), 0) + lane.moved
    total = sum(lane.moved for lane in lanes.ended)
    if total != len(buf):
        raise lanes.failed(KVTransferError(f"received {total} bytes, expected {len(buf)}"))
    crc = zlib.crc32(buf)  # the one CRC of the pull
    if crc != expected_checksum:
        raise lanes.failed(
            KVTransferError(
                f"KV checksum mismatch: {crc:#010x} != expected {expected_checksum:#010x}",
                checksum_ok=False,
            )
        )
    pull = lanes.pull
    return PullResult(
        total,
        by_addr,
        pull.lanes,
        crc,
        len(lanes.retired),
        len(pull.ports),
        tuple(pull.ports),
        pull.opened,
    )
