"""Held KV: capacity, release and lease expiry with the clock passed in."""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable

from zcube_lab.serving.kvstore import KVStore, make_kv_buffer


def test_put_get_release_and_usage() -> None:
    store = KVStore(capacity_tokens=100)
    data = make_kv_buffer("r1", 0, 1000)
    held = store.put("r1", data, 40, now=0.0, lease_s=30.0)
    assert held.checksum == zlib.crc32(data) and store.get_bytes("r1") == data
    assert store.usage == 0.4 and store.fits(60) and not store.fits(61)
    assert store.release("r1") and not store.release("r1")
    assert store.used_tokens == 0 and store.get("r1") is None


def test_lease_expiry_frees_only_expired() -> None:
    store = KVStore(capacity_tokens=100)
    store.put("old", b"x" * 10, 10, now=0.0, lease_s=5.0)
    store.put("new", b"y" * 10, 10, now=4.0, lease_s=5.0)
    assert store.expire(4.99) == []
    assert store.expire(5.0) == ["old"]
    assert store.used_tokens == 10 and len(store) == 1


def test_buffers_are_deterministic_per_request() -> None:
    assert make_kv_buffer("a", 1, 64) == make_kv_buffer("a", 1, 64)
    assert make_kv_buffer("a", 1, 64) != make_kv_buffer("b", 1, 64)


def test_kv_buffers_are_cheap_and_no_two_chunks_alike() -> None:
    """Past one block the bytes repeat with a prime period, so power-of-two chunks all differ
    (a chunk written at the wrong offset fails the checksum) and buffers of other requests are
    other bytes; making 8 MiB costs well under half of drawing every byte."""
    size, chunk = 8 * 2**20 + 5, 256 * 1024
    make_kv_buffer("warm", 3, 1)  # the seed's block, drawn once per process
    took = min(timed(lambda: make_kv_buffer("req", 3, size)) for _ in range(3))  # best of 3:
    data = make_kv_buffer("req", 3, size)  # the machine's noise is one-sided
    assert len(data) == size and data == make_kv_buffer("req", 3, size)
    chunks = {data[i : i + chunk] for i in range(0, size - chunk, chunk)}
    assert len(chunks) == len(range(0, size - chunk, chunk))
    assert data[:4096] != make_kv_buffer("other", 3, 4096)
    assert make_kv_buffer("req", 4, 4096) != data[:4096]
    drawing = min(timed(lambda: random.Random(0).randbytes(size)) for _ in range(3))
    assert took < drawing / 2, (took, drawing)


def timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start
