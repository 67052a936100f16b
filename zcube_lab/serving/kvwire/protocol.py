"""The KV wire format and the prefill side: framed GET/RELEASE requests over plain TCP.

Frames (network byte order):
- request:  op u8 (1 GET, 2 RELEASE), id_len u16, id bytes, offset u64, length u32
- response: status u8 (0 OK, 1 NOT FOUND, 2 BAD RANGE), crc32 u32, length u32, payload

The response's crc32 field is 0: the server computes no CRC per chunk; decode checks the whole
buffer once against the CRC-32 prefill computed when it made the buffer (`kv_transfer_params`
`checksum`). A connection carries any number of requests, one after another, for as long as
decode keeps it (`zcube_lab.serving.kvwire.conns`).

`start_kv_server` answers them from a store's lookup/release callbacks; `release_kv` is the
decode side of RELEASE (the GET side is `zcube_lab.serving.kvwire.pull`).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable

from zcube_lab.serving.config import Address
from zcube_lab.serving.kvwire.conns import KVConnection, KVConnections
from zcube_lab.serving.trafficclass import KV, mark_stream

OP_GET = 1
OP_RELEASE = 2
OK = 0
NOT_FOUND = 1
BAD_RANGE = 2

REQUEST_HEAD = struct.Struct("!BH")
REQUEST_RANGE = struct.Struct("!QI")
RESPONSE = struct.Struct("!BII")


def encode_request(op: int, request_id: str, offset: int = 0, length: int = 0) -> bytes:
    """One request frame."""
    rid = request_id.encode()
    return REQUEST_HEAD.pack(op, len(rid)) + rid + REQUEST_RANGE.pack(offset, length)


Lookup = Callable[[str], bytes | None]
Release = Callable[[str], bool]


async def _serve_connection(
    lookup: Lookup, release: Release, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        while True:
            try:
                op, id_len = REQUEST_HEAD.unpack(await reader.readexactly(REQUEST_HEAD.size))
                rid = (await reader.readexactly(id_len)).decode(errors="replace")
                offset, length = REQUEST_RANGE.unpack(await reader.readexactly(REQUEST_RANGE.size))
            except asyncio.IncompleteReadError:
                return
            if op == OP_RELEASE:
                writer.write(RESPONSE.pack(OK if release(rid) else NOT_FOUND, 0, 0))
            elif op == OP_GET:
                data = lookup(rid)
                if data is None:
                    writer.write(RESPONSE.pack(NOT_FOUND, 0, 0))
                elif offset + length > len(data):
                    writer.write(RESPONSE.pack(BAD_RANGE, 0, 0))
                else:
                    piece = memoryview(data)[offset : offset + length]
                    writer.write(RESPONSE.pack(OK, 0, length))
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
        mark_stream(
            writer, KV
        )  # the KV bytes leave here: KV's class (zcube_lab.serving.trafficclass)
        await _serve_connection(lookup, release, reader, writer)

    return await asyncio.start_server(handle, addr.host, addr.port, limit=2**20)


async def release_kv(
    request_id: str,
    addr: Address,
    timeout_s: float = 5.0,
    *,
    connections: KVConnections | None = None,
    local: str | None = None,
) -> bool:
    """Tell prefill it may free the request's KV; True if it was still held. With
    `connections`, over a kept connection to `addr` from `local` (a new one if none is idle or
    the kept one broke before answering), given back after the answer; without, over a
    connection of its own."""
    async with asyncio.timeout(timeout_s):
        conn = connections.take(addr, local) if connections is not None else None
        if conn is not None:
            try:
                return await _release_on(conn, request_id, connections)
            except (OSError, asyncio.IncompleteReadError):
                conn.abort()  # closed while idle: once more on a new connection
        pool = connections if connections is not None else KVConnections(max_idle=0)
        return await _release_on(await pool.open(addr, local), request_id, pool)


async def _release_on(conn: KVConnection, request_id: str, pool: KVConnections) -> bool:
    done = False
    try:
        conn.writer.write(encode_request(OP_RELEASE, request_id))
        await conn.writer.drain()
        status, _, _ = RESPONSE.unpack(await conn.reader.readexactly(RESPONSE.size))
        done = True
        return status == OK
    finally:
        if done:
            pool.give_back(conn)
        else:
            conn.abort()
