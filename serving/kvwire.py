"""The KV-cache pull protocol: plain TCP, framed, chunked, every chunk CRC-32 checked.

Decode pulls (like vLLM's NIXL connector): it opens `streams` connections ("lanes") to each of
the prefill's KV addresses (a ZCube host has one per NIC port), deals the chunks of one
request's buffer over all those lanes from one shared queue, pipelines its requests, and
reassembles the bytes.

Spraying with end-host failover (MRC-style): every lane is its own TCP connection, so its own
source port, so its own ECMP hash: a path id, like MRC's entropy values. With a stall timeout,
a lane that has requests outstanding and receives no byte for that long is retired: its
connection is aborted, its chunks go back to the front of the queue for the other lanes, and
a replacement lane (a new source port, so a new path id) is opened, preferring an address on
which lanes still move bytes. Without a stall timeout a stalled lane holds its chunks until the
pull's overall timeout (the static reference).

Path health across pulls (optional, `PathHealth`): like MRC, which keeps an entropy value's
state for the connection's lifetime, a decode engine remembers which addresses had a lane
retired and moved nothing since. A later pull plans its lanes on the other addresses and sends
each suspect address only a probe (a zero-length GET on its own connection, not waited for by
the pull): an answer clears the suspicion, silence for the stall timeout renews it.

Frames (network byte order):
- request:  op u8 (1 GET, 2 RELEASE), id_len u16, id bytes, offset u64, length u32
- response: status u8 (0 OK, 1 NOT FOUND, 2 BAD RANGE), crc32 u32, length u32, payload
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import math
import struct
import time
import zlib
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from serving.config import Address

OP_GET = 1
OP_RELEASE = 2
OK = 0
NOT_FOUND = 1
BAD_RANGE = 2

_REQ_HEAD = struct.Struct("!BH")
_REQ_RANGE = struct.Struct("!QI")
_RESP = struct.Struct("!BII")


class KVTransferError(Exception):
    """A KV pull failed: connection refused or reset, timeout, missing buffer, bad checksum.

    Raised by `pull_kv`, it also says what the attempt did: `received` bytes of verified
    chunks, `lanes` it started with, `retired_lanes`, `paths_used` (connections opened) and
    `checksum_ok` (False: a checksum mismatch; None: the attempt ended before the check)."""

    def __init__(self, message: str, *, checksum_ok: bool | None = None) -> None:
        super().__init__(message)
        self.checksum_ok = checksum_ok
        self.received = 0
        self.lanes = 0
        self.retired_lanes = 0
        self.paths_used = 0


def encode_request(op: int, request_id: str, offset: int = 0, length: int = 0) -> bytes:
    """One request frame."""
    rid = request_id.encode()
    return _REQ_HEAD.pack(op, len(rid)) + rid + _REQ_RANGE.pack(offset, length)


Lookup = Callable[[str], bytes | None]
Release = Callable[[str], bool]


async def _serve_connection(
    lookup: Lookup, release: Release, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            try:
                op, id_len = _REQ_HEAD.unpack(await reader.readexactly(_REQ_HEAD.size))
                rid = (await reader.readexactly(id_len)).decode(errors="replace")
                offset, length = _REQ_RANGE.unpack(await reader.readexactly(_REQ_RANGE.size))
            except asyncio.IncompleteReadError:
                return
            if op == OP_RELEASE:
                writer.write(_RESP.pack(OK if release(rid) else NOT_FOUND, 0, 0))
            elif op == OP_GET:
                data = lookup(rid)
                if data is None:
                    writer.write(_RESP.pack(NOT_FOUND, 0, 0))
                elif offset + length > len(data):
                    writer.write(_RESP.pack(BAD_RANGE, 0, 0))
                else:
                    piece = memoryview(data)[offset : offset + length]
                    writer.write(_RESP.pack(OK, zlib.crc32(piece), length))
                    writer.write(piece)
            else:
                return
            await writer.drain()
    except (ConnectionError, OSError):
        return
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def start_kv_server(lookup: Lookup, release: Release, addr: Address) -> asyncio.Server:
    """Listen on `addr` and answer GET/RELEASE frames from the given store callbacks."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _serve_connection(lookup, release, reader, writer)

    return await asyncio.start_server(handle, addr.host, addr.port, limit=2**20)


@dataclass(frozen=True)
class PullResult:
    """What a pull moved: total bytes, per-address bytes, lanes it started with, checksum
    verified, lanes retired for stalling, and the path ids used: `paths_used` connections
    opened in all, `source_ports` their local ports (each a distinct ECMP hash)."""

    num_bytes: int
    bytes_by_address: dict[str, int]
    lanes: int
    checksum: int
    retired_lanes: int = 0
    paths_used: int = 0
    source_ports: tuple[int, ...] = ()


def pick_source(remote: str, source_map: Sequence[tuple[str, str]]) -> str | None:
    """The local address to bind when connecting to `remote`: the first `(cidr, local)` entry
    whose network holds it (on ZCube, pulling a port-2 address from local port 1 and a port-1
    address from local port 2 puts each lane on its own disjoint path), or None."""
    if not source_map:
        return None
    addr = ipaddress.ip_address(remote)
    for cidr, local in source_map:
        if addr in ipaddress.ip_network(cidr, strict=False):
            return local
    return None


def plan_lanes(
    num_bytes: int,
    chunk_bytes: int,
    addrs: Sequence[Address],
    streams: int,
    avoid: Collection[Address] = (),
) -> list[tuple[Address, list[tuple[int, int]]]]:
    """Deal chunks (offset, length) round-robin over `streams` lanes per address. The lanes
    that would go to an address in `avoid` go to the other addresses instead (as many lanes in
    all), unless every address is to be avoided."""
    chunks = [(off, min(chunk_bytes, num_bytes - off)) for off in range(0, num_bytes, chunk_bytes)]
    use = [a for a in addrs if a not in avoid] or list(addrs)
    # Interleave addresses so that fewer chunks than lanes still use every address.
    count = min(streams * len(addrs), max(1, len(chunks)))
    lanes_addrs = [use[i % len(use)] for i in range(count)]
    lanes: list[tuple[Address, list[tuple[int, int]]]] = [(a, []) for a in lanes_addrs]
    for i, c in enumerate(chunks):
        lanes[i % len(lanes)][1].append(c)
    return lanes


def pick_replacement(
    addrs: Sequence[Address],
    last_progress: Mapping[Address, float],
    last_retired: Mapping[Address, float],
    turn: int,
) -> Address:
    """The address for a replacement lane: rotate (by `turn`) over the addresses whose latest
    news is a lane receiving bytes, or no news; if every address has had a lane retired since
    its last progress, the one whose last retirement is oldest.

    On ZCube one address pair can be the dead path, so reopening there would only stall again;
    on a fat tree a new source port re-hashes to another spine, so the same address is fine."""
    never = -math.inf
    healthy = [a for a in addrs if last_retired.get(a, never) <= last_progress.get(a, never)]
    if healthy:
        return healthy[turn % len(healthy)]
    return min(addrs, key=lambda a: last_retired.get(a, never))


PATH_HOLD_STALLS = 10  # default hold of a path suspicion: this many stall timeouts (5 s at 0.5)


class PathHealth:
    """What the pulls of one decode engine learnt about each KV address, kept across pulls.

    Keyed by `str(Address)`; on ZCube an address (with its mapped source port) is one 2-hop
    path. Pulls report every retired lane (`retired`) and every byte received (`progress`). An
    address is *suspect* while its latest retirement is less than `hold_s` old and nothing has
    arrived from it since. `probe` checks a suspect address in the background: one zero-length
    GET on a new connection, at most one in flight per address; an answer counts as progress
    (the suspicion is cleared), silence or a refused connection for `timeout_s` as a
    retirement (the suspicion is renewed). `clock` must be monotonic seconds."""

    def __init__(self, hold_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if not hold_s > 0:
            raise ValueError(f"hold_s must be > 0, not {hold_s!r}")
        self.hold_s = hold_s
        self.clock = clock
        self._retired: dict[str, float] = {}
        self._progress: dict[str, float] = {}
        self._probes: dict[str, asyncio.Task[None]] = {}

    def retired(self, addr: Address | str, now: float | None = None) -> None:
        """A lane (or probe) on `addr` was retired: stalled, refused or reset."""
        self._retired[str(addr)] = self.clock() if now is None else now

    def progress(self, addr: Address | str, now: float | None = None) -> None:
        """Bytes arrived from `addr`."""
        self._progress[str(addr)] = self.clock() if now is None else now

    def last_retired(self, addr: Address | str) -> float:
        """When a lane on `addr` was last retired (-inf: never)."""
        return self._retired.get(str(addr), -math.inf)

    def last_progress(self, addr: Address | str) -> float:
        """When bytes last arrived from `addr` (-inf: never)."""
        return self._progress.get(str(addr), -math.inf)

    def is_suspect(self, addr: Address | str, now: float | None = None) -> bool:
        """Retired less than `hold_s` ago, and nothing received since."""
        key = str(addr)
        at = self._retired.get(key)
        if at is None:
            return False
        now = self.clock() if now is None else now
        return now - at < self.hold_s and self._progress.get(key, -math.inf) < at

    def suspects(self, now: float | None = None) -> set[str]:
        """Every suspect address."""
        now = self.clock() if now is None else now
        return {a for a in self._retired if self.is_suspect(a, now)}

    @property
    def probing(self) -> set[str]:
        """Addresses with a probe in flight."""
        return set(self._probes)

    def probe(
        self, addr: Address, request_id: str, *, timeout_s: float, local: str | None = None
    ) -> bool:
        """Start a background probe of `addr` (unless one is in flight); True if started."""
        key = str(addr)
        if key in self._probes:
            return False
        task = asyncio.create_task(self._probe(addr, request_id, timeout_s, local))
        self._probes[key] = task
        task.add_done_callback(lambda _: self._probes.pop(key, None))
        return True

    async def _probe(
        self, addr: Address, request_id: str, timeout_s: float, local: str | None
    ) -> None:
        if await probe_path(addr, request_id, timeout_s=timeout_s, local=local):
            self.progress(addr)
        else:
            self.retired(addr)

    async def wait_probes(self) -> None:
        """Wait until the probes in flight have their answer."""
        while self._probes:
            await asyncio.gather(*self._probes.values(), return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel the probes in flight."""
        tasks = list(self._probes.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def probe_path(
    addr: Address, request_id: str, *, timeout_s: float, local: str | None = None
) -> bool:
    """One round trip on a new connection (a new path id): a GET of zero bytes of
    `request_id`. True when any answer (OK or NOT FOUND) arrives within `timeout_s`."""
    writer: asyncio.StreamWriter | None = None
    ok = False
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(
                addr.host, addr.port, local_addr=(local, 0) if local else None
            )
            writer.write(encode_request(OP_GET, request_id, 0, 0))
            await writer.drain()
            await reader.readexactly(_RESP.size)
        ok = True
    except (TimeoutError, OSError, asyncio.IncompleteReadError):
        pass
    finally:
        if writer is not None:
            # A dead path would hold a graceful close; a live one has nothing left to say.
            writer.transport.abort()
    return ok


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
    health: PathHealth | None = None
    last_progress: dict[Address, float] = field(default_factory=dict)
    last_retired: dict[Address, float] = field(default_factory=dict)
    ports: list[int] = field(default_factory=list)


async def _run_lane(pull: _Pull, lane: _Lane) -> None:
    """Pull the lane's chunks, then chunks from the shared queue until it is empty: a lane on
    a faster path takes more chunks, so a transfer is not held back by its slowest lane
    (multi-rail transports share work the same way). A lane keeps a second request
    outstanding only while the queue holds enough for every lane, so the tail is not hoarded
    by one lane. With a stall timeout, a dead path raises `_LaneRetired`; the lane's unfinished
    chunks stay in `lane.inflight` (a partly received one is simply fetched again in full)."""
    loop = asyncio.get_running_loop()
    stall = pull.stall_timeout_s
    writer: asyncio.StreamWriter | None = None
    done = False
    try:
        # One timer per lane, pushed back whenever bytes arrive: a slow lane that keeps
        # moving is never retired, only a silent one. Its first period bounds the connect.
        async with asyncio.timeout(stall) as watchdog:
            reader, conn = await asyncio.open_connection(
                lane.addr.host,
                lane.addr.port,
                limit=2**20,
                local_addr=(lane.local, 0) if lane.local else None,
            )
            writer = conn
            lane.port = int(conn.get_extra_info("sockname")[1])
            pull.ports.append(lane.port)

            def alive() -> None:
                now = loop.time()
                pull.last_progress[lane.addr] = now
                if pull.health is not None:
                    pull.health.progress(lane.addr)
                if stall is not None:
                    watchdog.reschedule(now + stall)

            def ask() -> bool:
                if not pull.queue or (lane.inflight and len(pull.queue) < pull.lanes):
                    return False
                chunk = pull.queue.popleft()
                lane.inflight.append(chunk)
                conn.write(encode_request(OP_GET, pull.request_id, *chunk))
                return True

            if stall is not None:
                watchdog.reschedule(loop.time() + stall)
            for chunk in lane.inflight:
                conn.write(encode_request(OP_GET, pull.request_id, *chunk))
            while len(lane.inflight) < LANE_WINDOW and ask():
                pass
            await conn.drain()
            while lane.inflight:
                offset, length = lane.inflight[0]
                status, crc, got_len = _RESP.unpack(await reader.readexactly(_RESP.size))
                alive()
                if status == NOT_FOUND:
                    raise KVTransferError(
                        f"prefill at {lane.addr} holds no KV for {pull.request_id}"
                    )
                if status != OK or got_len != length:
                    raise KVTransferError(f"prefill at {lane.addr} refused range {offset}+{length}")
                # Read in pieces straight into place, checking the CRC as it goes. If the lane
                # is retired mid-chunk the chunk stays owned by it, is requeued whole, and the
                # lane that fetches it again overwrites these bytes with the same ones.
                got, running_crc = 0, 0
                while got < length:
                    piece = await reader.read(min(length - got, _READ_PIECE))
                    if not piece:
                        raise asyncio.IncompleteReadError(b"", length - got)
                    pull.out[offset + got : offset + got + len(piece)] = piece
                    running_crc = zlib.crc32(piece, running_crc)
                    got += len(piece)
                    alive()
                if running_crc != crc:
                    raise KVTransferError(
                        f"chunk {offset}+{length} from {lane.addr}: checksum mismatch",
                        checksum_ok=False,
                    )
                lane.inflight.popleft()
                lane.moved += length
                sent = False
                while len(lane.inflight) < LANE_WINDOW and ask():
                    sent = True
                if sent:
                    await conn.drain()
        done = True
    except TimeoutError as exc:
        # Only the watchdog's own expiry is a stall; the OS's ETIMEDOUT is a lost connection.
        if stall is None:
            raise
        if watchdog.expired():
            what = "connect" if writer is None else "no bytes"
            raise _LaneRetired(f"{what} for {stall}s") from None
        raise _LaneRetired(f"{type(exc).__name__}: {exc}") from None
    except (OSError, asyncio.IncompleteReadError) as exc:
        if stall is None:
            raise
        raise _LaneRetired(f"{type(exc).__name__}: {exc}") from None
    finally:
        if writer is not None:
            if done:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            else:
                # Failed, retired or cancelled: a graceful close would wait on a dead path.
                writer.transport.abort()


def _summary(retired: Sequence[_Lane], most: int = 4) -> str:
    listed = "; ".join(str(lane) for lane in retired[-most:])
    more = f" and {len(retired) - most} earlier" if len(retired) > most else ""
    return f"{len(retired)} lanes retired: {listed}{more}"


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
) -> tuple[bytearray, PullResult]:
    """Pull one request's KV over every address and stream; verify bytes and checksum.

    With `stall_timeout_s`, a lane that receives nothing for that long is retired and
    replaced by a new connection (a new path id), at most `max_retired` times per pull
    (default `RETIRE_BUDGET_PER_LANE` x the starting lanes); a lane that stalls after that is
    retired without replacement and the lanes still running take its chunks. Protocol errors
    (missing KV, bad range, checksum) fail the pull at once.

    With `health` (needs `stall_timeout_s`), what earlier pulls learnt is used and extended:
    the lanes are planned over the addresses that are not suspect (as many lanes), each suspect
    one gets a background probe instead (the pull does not wait for it), replacements avoid
    addresses suspected by any pull, and this pull's retirements and progress are recorded.
    If every address is suspect the lanes are planned as without `health`."""
    if not addrs:
        raise KVTransferError("no KV address to pull from")
    if stall_timeout_s is not None and not stall_timeout_s > 0:
        raise ValueError(f"stall_timeout_s must be > 0 or None, not {stall_timeout_s!r}")
    if health is not None and stall_timeout_s is None:
        raise ValueError("path health needs a stall timeout")
    avoid: list[Address] = []
    if health is not None:
        now = health.clock()
        distinct = list(dict.fromkeys(addrs))
        avoid = [a for a in distinct if health.is_suspect(a, now)]
        if len(avoid) == len(distinct):
            avoid = []
    buf = bytearray(num_bytes)
    view = memoryview(buf)
    plan = plan_lanes(num_bytes, chunk_bytes, addrs, streams, avoid)
    budget = RETIRE_BUDGET_PER_LANE * len(plan) if max_retired is None else max_retired
    # Each lane starts with one chunk; the rest go, in offset order, to whichever lane is free.
    chunks = sorted(c for _, cs in plan for c in cs)
    pull = _Pull(request_id, view, deque(chunks[len(plan) :]), len(plan), stall_timeout_s, health)
    running: dict[asyncio.Task[None], _Lane] = {}
    ended: list[_Lane] = []
    retired: list[_Lane] = []
    loop = asyncio.get_running_loop()

    def launch(addr: Address, first: list[tuple[int, int]]) -> None:
        lane = _Lane(addr, pick_source(addr.host, source_map), deque(first))
        running[asyncio.create_task(_run_lane(pull, lane))] = lane

    def failed(exc: KVTransferError) -> KVTransferError:
        exc.received = sum(lane.moved for lane in (*ended, *running.values()))
        exc.lanes, exc.retired_lanes, exc.paths_used = len(plan), len(retired), len(pull.ports)
        return exc

    def replacement(turn: int) -> Address:
        if health is None:
            return pick_replacement(addrs, pull.last_progress, pull.last_retired, turn)
        # Any pull's news counts; a retirement older than the hold is forgotten.
        now = health.clock()
        progress = {a: health.last_progress(a) for a in addrs}
        suspect = {a: health.last_retired(a) for a in addrs if health.is_suspect(a, now)}
        return pick_replacement(addrs, progress, suspect, turn)

    try:
        async with asyncio.timeout(timeout_s):
            for i, (addr, _) in enumerate(plan):
                launch(addr, chunks[i : i + 1])
            if health is not None and stall_timeout_s is not None:
                for addr in avoid:
                    local = pick_source(addr.host, source_map)
                    health.probe(addr, request_id, timeout_s=stall_timeout_s, local=local)
            while running:
                finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    lane = running.pop(task)
                    ended.append(lane)
                    exc = task.exception()
                    if exc is None:
                        continue
                    if isinstance(exc, KVTransferError):
                        raise failed(exc)
                    if not isinstance(exc, _LaneRetired):
                        raise failed(
                            KVTransferError(f"KV pull failed: {type(exc).__name__}: {exc}")
                        )
                    lane.reason = str(exc)
                    retired.append(lane)
                    pull.last_retired[lane.addr] = loop.time()
                    if health is not None:
                        health.retired(lane.addr)
                    pull.queue.extendleft(reversed(lane.inflight))
                    lane.inflight.clear()
                    if pull.queue and len(retired) <= budget:
                        launch(replacement(len(retired)), [])
            if pull.queue:
                raise failed(
                    KVTransferError(
                        f"KV pull of {num_bytes} bytes failed: no live lane left and the "
                        f"replacement budget ({budget}) is spent; {_summary(retired)}"
                    )
                )
    except TimeoutError:
        why = f"; {_summary(retired)}" if retired else ""
        raise failed(
            KVTransferError(f"KV pull of {num_bytes} bytes timed out after {timeout_s}s{why}")
        ) from None
    finally:
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        view.release()
    by_addr: dict[str, int] = {}
    for lane in ended:
        by_addr[str(lane.addr)] = by_addr.get(str(lane.addr), 0) + lane.moved
    total = sum(lane.moved for lane in ended)
    if total != num_bytes:
        raise failed(KVTransferError(f"received {total} bytes, expected {num_bytes}"))
    crc = zlib.crc32(buf)
    if crc != expected_checksum:
        raise failed(
            KVTransferError(
                f"KV checksum {crc:#010x} != expected {expected_checksum:#010x}",
                checksum_ok=False,
            )
        )
    return buf, PullResult(
        total, by_addr, len(plan), crc, len(retired), len(pull.ports), tuple(pull.ports)
    )


async def release_kv(request_id: str, addr: Address, timeout_s: float = 5.0) -> bool:
    """Tell prefill it may free the request's KV; True if it was still held."""
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(addr.host, addr.port)
        try:
            writer.write(encode_request(OP_RELEASE, request_id))
            await writer.drain()
            status, _, _ = _RESP.unpack(await reader.readexactly(_RESP.size))
            return status == OK
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
