"""Prefill's KV buffer is ready when its modelled time ends: it is made, with its CRC-32, while
the request's modelled compute runs, not after (a real engine's KV is in GPU memory by then)."""

from __future__ import annotations

import asyncio
import contextlib
import zlib

import pytest
from prometheus_client import CollectorRegistry

import zcube_lab.serving.prefill as prefill
from zcube_lab.serving.config import PrefillConfig
from zcube_lab.serving.kvstore import make_kv_buffer
from zcube_lab.serving.models import kv_transfer_bytes, prefill_step_seconds


async def test_the_kv_buffer_is_made_while_the_modelled_compute_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = PrefillConfig()
    tokens = 8000  # one step of about 80 ms
    step_s = prefill_step_seconds(cfg.profile, tokens, 0)
    assert step_s > 0.05
    engine = prefill.make_prefill_app(cfg, CollectorRegistry())[prefill.ENGINE_KEY]
    loop = asyncio.get_running_loop()
    made: list[float] = []
    real = prefill.kv_buffer_and_checksum

    def recorded(request_id: str, seed: int, num_bytes: int) -> tuple[bytes, int]:
        made.append(loop.time())
        return real(request_id, seed, num_bytes)

    monkeypatch.setattr(prefill, "kv_buffer_and_checksum", recorded)
    run = asyncio.create_task(engine.run())
    try:
        arrival = loop.time()
        held, queue_s, prefill_s = await engine.submit("r1", tokens, arrival)
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
    started, done_at = arrival + queue_s, arrival + queue_s + prefill_s
    assert prefill_s >= step_s
    # made once, at the start of the compute, well before the modelled time ended
    assert len(made) == 1 and started <= made[0] < started + step_s / 2 < done_at
    nbytes = kv_transfer_bytes(cfg.profile, tokens, cfg.bandwidth_scale)
    assert held.data == make_kv_buffer("r1", cfg.seed, nbytes)
    assert held.checksum == zlib.crc32(held.data)


def test_the_store_keeps_a_given_checksum_and_computes_a_missing_one() -> None:
    from zcube_lab.serving.kvstore import KVStore

    store = KVStore(100)
    assert store.put("a", b"abc", 1, 0.0, 1.0, checksum=7).checksum == 7
    assert store.put("b", b"abc", 1, 0.0, 1.0).checksum == zlib.crc32(b"abc")


async def test_the_kv_off_control_holds_one_byte_per_request() -> None:
    cfg = PrefillConfig(kv_share=0.0)
    engine = prefill.make_prefill_app(cfg, CollectorRegistry())[prefill.ENGINE_KEY]
    run = asyncio.create_task(engine.run())
    try:
        held, _queue_s, _prefill_s = await engine.submit(
            "r1", 2000, asyncio.get_running_loop().time()
        )
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
    assert len(held.data) == 1 and held.checksum == zlib.crc32(held.data)
