"""Held KV: capacity, release and lease expiry with the clock passed in."""

from __future__ import annotations

import zlib

from serving.kvstore import KVStore, make_kv_buffer


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
