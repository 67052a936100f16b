"""The KV wire format and the prefill side: framed GET/RELEASE requests over plain TCP.

Frames (network byte order):
- request:  op u8 (1 GET, 2 RELEASE), id_len u16, id bytes, offset u64, length u32
- response: status u8 (0 OK, 1 NOT FOUND, 2 BAD RANGE), crc32 u32, length u32, payload

`start_kv_server` answers them from a store's lookup/release callbacks; `release_kv` is the
decode side of RELEASE (the GET side is `serving.kvwire.pull`).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import Callable

from serving.config import Address

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
                    writer.write(RESPONSE.pack(OK, zlib.crc32(piece), length))
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


async def release_kv(request_id: str, addr: Address, timeout_s: float = 5.0) -> bool:
    """Tell prefill it may free the request's KV; True if it was still held."""
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(addr.host, addr.port)
        try:
            writer.write(encode_request(OP_RELEASE, request_id))
            await writer.drain()
            status, _, _ = RESPONSE.unpack(await reader.readexactly(RESPONSE.size))
            return status == OK
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
