"""The KV-cache pull protocol: plain TCP, framed, chunked, every chunk CRC-32 checked.

Decode pulls (like vLLM's NIXL connector): it opens `streams` connections to each of the
prefill's KV addresses (a ZCube host has one per NIC port), deals the chunks of one request's
buffer round-robin over all those lanes, pipelines its requests, and reassembles the bytes.

Frames (network byte order):
- request:  op u8 (1 GET, 2 RELEASE), id_len u16, id bytes, offset u64, length u32
- response: status u8 (0 OK, 1 NOT FOUND, 2 BAD RANGE), crc32 u32, length u32, payload
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import struct
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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
    """A KV pull failed: connection refused or reset, timeout, missing buffer, bad checksum."""


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
    """What a pull moved: total bytes, per-address bytes, lanes used, checksum verified."""

    num_bytes: int
    bytes_by_address: dict[str, int]
    lanes: int
    checksum: int


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
    num_bytes: int, chunk_bytes: int, addrs: Sequence[Address], streams: int
) -> list[tuple[Address, list[tuple[int, int]]]]:
    """Deal chunks (offset, length) round-robin over `streams` lanes per address."""
    chunks = [(off, min(chunk_bytes, num_bytes - off)) for off in range(0, num_bytes, chunk_bytes)]
    # Interleave addresses so that fewer chunks than lanes still use every address.
    lanes_addrs = [a for _ in range(streams) for a in addrs][: max(1, len(chunks))]
    lanes: list[tuple[Address, list[tuple[int, int]]]] = [(a, []) for a in lanes_addrs]
    for i, c in enumerate(chunks):
        lanes[i % len(lanes)][1].append(c)
    return lanes


LANE_WINDOW = 2  # chunk requests a lane keeps outstanding, so the link never idles a round trip


async def _pull_lane(
    request_id: str,
    addr: Address,
    first: tuple[int, int],
    queue: deque[tuple[int, int]],
    lanes: int,
    out: memoryview,
    local: str | None = None,
) -> int:
    """Pull `first`, then chunks from the shared queue until it is empty: a lane on a faster
    path takes more chunks, so a transfer is not held back by its slowest lane (multi-rail
    transports share work the same way). A lane keeps a second request outstanding only while
    the queue holds enough for every lane, so the tail is not hoarded by one lane."""
    reader, writer = await asyncio.open_connection(
        addr.host, addr.port, limit=2**20, local_addr=(local, 0) if local else None
    )
    inflight: deque[tuple[int, int]] = deque()

    def send(chunk: tuple[int, int]) -> None:
        inflight.append(chunk)
        writer.write(encode_request(OP_GET, request_id, *chunk))

    def ask() -> bool:
        if not queue or (inflight and len(queue) < lanes):
            return False
        send(queue.popleft())
        return True

    try:
        send(first)
        while len(inflight) < LANE_WINDOW and ask():
            pass
        await writer.drain()
        moved = 0
        while inflight:
            offset, length = inflight.popleft()
            status, crc, got_len = _RESP.unpack(await reader.readexactly(_RESP.size))
            if status == NOT_FOUND:
                raise KVTransferError(f"prefill at {addr} holds no KV for {request_id}")
            if status != OK or got_len != length:
                raise KVTransferError(f"prefill at {addr} refused range {offset}+{length}")
            data = await reader.readexactly(length)
            if zlib.crc32(data) != crc:
                raise KVTransferError(f"chunk {offset}+{length} from {addr}: checksum mismatch")
            out[offset : offset + length] = data
            moved += length
            sent = False
            while len(inflight) < LANE_WINDOW and ask():
                sent = True
            if sent:
                await writer.drain()
        return moved
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


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
) -> tuple[bytearray, PullResult]:
    """Pull one request's KV over every address and stream; verify bytes and checksum."""
    if not addrs:
        raise KVTransferError("no KV address to pull from")
    buf = bytearray(num_bytes)
    view = memoryview(buf)
    lanes = plan_lanes(num_bytes, chunk_bytes, addrs, streams)
    # Each lane starts with one chunk; the rest go, in offset order, to whichever lane is free.
    chunks = sorted(c for _, cs in lanes for c in cs)
    queue = deque(chunks[len(lanes) :])
    try:
        async with asyncio.timeout(timeout_s), asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(
                    _pull_lane(
                        request_id,
                        a,
                        chunks[i],
                        queue,
                        len(lanes),
                        view,
                        pick_source(a.host, source_map),
                    )
                )
                for i, (a, _) in enumerate(lanes)
            ]
    except TimeoutError:
        raise KVTransferError(
            f"KV pull of {num_bytes} bytes timed out after {timeout_s}s"
        ) from None
    except ExceptionGroup as group:
        # A TaskGroup cancels the other lanes when one fails; report the first failure.
        exc = group.exceptions[0]
        if isinstance(exc, KVTransferError):
            raise exc from None
        raise KVTransferError(f"KV pull failed: {type(exc).__name__}: {exc}") from None
    finally:
        view.release()
    moved = [t.result() for t in tasks]
    by_addr: dict[str, int] = {}
    for (a, _), n in zip(lanes, moved, strict=True):
        by_addr[str(a)] = by_addr.get(str(a), 0) + n
    total = sum(moved)
    if total != num_bytes:
        raise KVTransferError(f"received {total} bytes, expected {num_bytes}")
    crc = zlib.crc32(buf)
    if crc != expected_checksum:
        raise KVTransferError(f"KV checksum {crc:#010x} != expected {expected_checksum:#010x}")
    return buf, PullResult(total, by_addr, len(lanes), crc)


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
