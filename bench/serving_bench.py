"""Serving figures on loopback: gateway streaming throughput, gateway-added latency, KV goodput.

Starts local clusters (`zcube_lab.serving.cluster.LocalCluster`), drives them with an aiohttp client
in this process, and prints the median of several runs. Everything shares this machine's cores
(the client too), so read the figures as "what this box sustains", not as a server limit.

    .venv/bin/python -m bench.serving_bench [--runs 3] [--duration 5] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import urllib.request
from collections.abc import Sequence

import aiohttp

from zcube_lab.core.stats import quantile
from zcube_lab.serving.cluster import ClusterSpec, LocalCluster


def _body(words: int, out: int, stream: bool = True) -> dict:
    return {"model": "tiny", "prompt": "w " * words, "max_tokens": out, "stream": stream,
            "ignore_eos": True}  # fmt: skip


async def _stream_ttft(session: aiohttp.ClientSession, url: str, body: dict) -> float:
    """POST a streaming request; return seconds to the first data chunk; drain the rest."""
    start = time.perf_counter()
    ttft = 0.0
    async with session.post(url, json=body) as r:
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {await r.text()}")
        async for line in r.content:
            if not ttft and line.startswith(b"data: "):
                ttft = time.perf_counter() - start
    return ttft


async def throughput(url: str, duration: float, concurrency: int, out: int) -> float:
    """Completed streaming requests per second with `concurrency` closed-loop clients."""
    done = 0
    errors = 0
    stop_at = time.perf_counter() + duration

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal done, errors
        while time.perf_counter() < stop_at:
            try:
                await _stream_ttft(session, url + "/v1/completions", _body(16, out))
                done += 1
            except (RuntimeError, aiohttp.ClientError):
                errors += 1

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn) as s:
        start = time.perf_counter()
        await asyncio.gather(*(worker(s) for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    if errors:
        print(f"    ({errors} errors)")
    return done / elapsed


async def _direct_ttft(s: aiohttp.ClientSession, c: LocalCluster, body: dict) -> float:
    """The PD flow done by the client itself: prefill, then decode (no gateway)."""
    start = time.perf_counter()
    pbody = dict(body, stream=False, max_tokens=1, kv_transfer_params={"do_remote_decode": True})
    pbody.pop("stream_options", None)
    async with s.post(c.prefill_urls[0] + "/v1/completions", json=pbody) as r:
        params = (await r.json())["kv_transfer_params"]
    dbody = dict(body, kv_transfer_params=params)
    ttft = 0.0
    async with s.post(c.decode_urls[0] + "/v1/completions", json=dbody) as r:
        async for line in r.content:
            if not ttft and line.startswith(b"data: "):
                ttft = time.perf_counter() - start
    return ttft


async def added_latency(c: LocalCluster, n: int) -> tuple[list[float], list[float]]:
    """TTFT through the gateway and directly, interleaved one at a time."""
    via, direct = [], []
    async with aiohttp.ClientSession() as s:
        for i in range(n + 20):
            body = _body(16, 2)
            g = await _stream_ttft(s, c.gateway_url + "/v1/completions", body)
            d = await _direct_ttft(s, c, body)
            if i >= 20:  # warm-up
                via.append(g)
                direct.append(d)
    return via, direct


def _pct(xs: Sequence[float], q: float) -> float:
    """The q-quantile (0-1) of a non-empty sample: the lab's one quantile function."""
    value = quantile(xs, q)
    assert value is not None, "no samples"
    return value


def _scrape_sum(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


async def _kv_requests(url: str, words: int, n: int) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(n):
            await _stream_ttft(s, url + "/v1/completions", _body(words, 1))


def kv_goodput(kv_addresses: int, kv_streams: int, words: int, n: int) -> tuple[float, float]:
    """(MB/s, MB per transfer) of decode's KV pulls, from its own nixl metrics."""
    spec = ClusterSpec(kv_addresses=kv_addresses, kv_streams=kv_streams,
                       extra_decode_args=("--kv-chunk-bytes", str(1 << 20)))  # fmt: skip
    with LocalCluster(spec) as c:
        asyncio.run(_kv_requests(c.gateway_url, words, n))
        moved = _scrape_sum(c.decode_urls[0], "vllm:nixl_bytes_transferred_sum")
        secs = _scrape_sum(c.decode_urls[0], "vllm:nixl_xfer_time_seconds_sum")
    return moved / secs / 1e6, moved / n / 1e6


def main(argv: Sequence[str] | None = None) -> int:
    """Run every bench and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency-requests", type=int, default=300)
    ap.add_argument("--output-tokens", type=int, default=4)
    args = ap.parse_args(argv)

    print("== streaming throughput through one gateway (tiny profile, 16-word prompts, "
          f"{args.output_tokens} output tokens, {args.concurrency} clients) ==")  # fmt: skip
    rates = []
    with LocalCluster(ClusterSpec()) as c:
        asyncio.run(throughput(c.gateway_url, 1.0, args.concurrency, args.output_tokens))
        for i in range(args.runs):
            rate = asyncio.run(
                throughput(c.gateway_url, args.duration, args.concurrency, args.output_tokens)
            )
            rates.append(rate)
            print(f"  run {i + 1}: {rate:.0f} req/s")
    print(f"  median: {statistics.median(rates):.0f} req/s (target >= 300)")

    print(f"== gateway-added TTFT, one request at a time, {args.latency_requests} requests ==")
    p50s, p99s = [], []
    with LocalCluster(ClusterSpec()) as c:
        for i in range(args.runs):
            via, direct = asyncio.run(added_latency(c, args.latency_requests))
            p50 = (_pct(via, 0.5) - _pct(direct, 0.5)) * 1e3
            p99 = (_pct(via, 0.99) - _pct(direct, 0.99)) * 1e3
            pairs = [v - d for v, d in zip(via, direct, strict=True)]
            p50s.append(p50)
            p99s.append(p99)
            print(
                f"  run {i + 1}: via gateway p50 {_pct(via, 0.5) * 1e3:.2f} ms p99 "
                f"{_pct(via, 0.99) * 1e3:.2f} ms; direct p50 {_pct(direct, 0.5) * 1e3:.2f} ms "
                f"p99 {_pct(direct, 0.99) * 1e3:.2f} ms; added p50 {p50:.2f} ms p99 {p99:.2f} ms; "
                f"paired differences p50 {_pct(pairs, 0.5) * 1e3:.2f} ms "
                f"p99 {_pct(pairs, 0.99) * 1e3:.2f} ms"
            )
    print(f"  median added: p50 {statistics.median(p50s):.2f} ms, "
          f"p99 {statistics.median(p99s):.2f} ms (target p99 <= 5 ms)")  # fmt: skip

    print("== KV transfer goodput, decode pulling from prefill (8000-token prompts, 8 MB) ==")
    for addrs, streams in ((1, 1), (1, 4), (2, 2)):
        runs = [kv_goodput(addrs, streams, 8000, 20) for _ in range(args.runs)]
        mbps = statistics.median(r[0] for r in runs)
        print(f"  {addrs} address(es) x {streams} stream(s): {mbps:.0f} MB/s "
              f"({runs[0][1]:.1f} MB per transfer)")  # fmt: skip
    print(json.dumps({"throughput_rps": rates, "added_p50_ms": p50s, "added_p99_ms": p99s}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
