"""A KV server or one KV pull, run inside a lab host by the failure tests (real kvwire code).

python kv_probe.py serve --bytes N --seed S ADDR:PORT...
    serves one buffer (any request id) on every address; prints "ready" once listening.
python kv_probe.py pull --bytes N --seed S [--streams K] [--stall-s T] [--timeout-s T]
                  [--source CIDR=LOCAL]... ADDR:PORT...
    prints "started", pulls, prints one JSON line: ok, bytes, seconds, retired, error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from serving.config import Address
from serving.kvwire import KVTransferError, pull_kv, start_kv_server


def payload(num_bytes: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(num_bytes)


def _addr(text: str) -> Address:
    host, _, port = text.rpartition(":")
    return Address(host, int(port))


async def serve(args: argparse.Namespace) -> None:
    data = payload(args.bytes, args.seed)
    servers = [
        await start_kv_server(lambda _rid: data, lambda _rid: True, _addr(a)) for a in args.addrs
    ]
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


async def pull(args: argparse.Namespace) -> None:
    expected = zlib.crc32(payload(args.bytes, args.seed))
    sources = tuple(tuple(s.split("=", 1)) for s in args.source)
    print("started", flush=True)
    t0 = time.monotonic()
    kwargs = {}
    if args.stall_s:
        kwargs["stall_timeout_s"] = args.stall_s
    try:
        _buf, result = await pull_kv(
            "probe",
            [_addr(a) for a in args.addrs],
            args.bytes,
            expected,
            chunk_bytes=256 * 1024,
            streams=args.streams,
            timeout_s=args.timeout_s,
            source_map=sources,
            **kwargs,
        )
        out = {
            "ok": True,
            "bytes": result.num_bytes,
            "checksum_ok": result.checksum == expected,
            "retired": getattr(result, "retired_lanes", 0),
            "by_address": result.bytes_by_address,
            "error": "",
        }
    except KVTransferError as exc:
        out = {"ok": False, "bytes": 0, "checksum_ok": False, "retired": 0, "error": str(exc)}
    out["seconds"] = round(time.monotonic() - t0, 3)
    print(json.dumps(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["serve", "pull"])
    parser.add_argument("addrs", nargs="+")
    parser.add_argument("--bytes", type=int, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--stall-s", type=float, default=0.0)
    parser.add_argument("--timeout-s", type=float, default=8.0)
    parser.add_argument("--source", action="append", default=[])
    args = parser.parse_args()
    asyncio.run(serve(args) if args.mode == "serve" else pull(args))


if __name__ == "__main__":
    main()
