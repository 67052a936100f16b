"""The all-to-all's time on loopback: the histogram and the exchange log time the exchange
(dispatch sent to the last combine received), not the engine step; the slowest peer sets the
exchange (lockstep); without dual-batch overlap every frame's exchange adds to the step, with
it the other micro-batch's compute hides it.

Peers here answer after a set delay, so an exchange and the step's compute differ ten-fold in
either direction. Bounds are generous (a shared 2-core machine): lower bounds are the delays
themselves, upper bounds leave 0.15-0.25 s of slack."""

from __future__ import annotations

import contextlib
import itertools
import json
import struct
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from zcube_lab.serving.alltoall import AllToAll, exchange_log
from zcube_lab.serving.config import Address
from zcube_lab.serving.engine_step import run_step
from zcube_lab.serving.eptraffic import Frame, StepExchange, single_frame
from zcube_lab.serving.vllm_metrics import ALLTOALL_BUCKETS, EngineMetrics

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serving_fixtures import delayed_ep_peer, metric_sum, registry_text

_LEN = struct.Struct("!Q")
SLACK = 0.25


@contextlib.asynccontextmanager
async def _slow_peer(delay_s: float) -> AsyncIterator[Address]:
    """An EP peer that answers each dispatch after `delay_s` (a congested path)."""

    addr, server = await delayed_ep_peer(delay_s)
    try:
        yield addr
    finally:
        server.close()


async def _step(
    compute_s: float, delays: list[float], tmp_path: Path, exchange: StepExchange | None = None
) -> tuple[float, dict, str]:
    """One engine step against peers with these answer delays: (step seconds, log line,
    metrics text)."""
    registry = CollectorRegistry()
    metrics = EngineMetrics(registry, "tiny", "0")
    log = tmp_path / "ep.jsonl"
    async with contextlib.AsyncExitStack() as stack:
        peers = [await stack.enter_async_context(_slow_peer(d)) for d in delays]
        a2a = AllToAll(peers)
        try:
            with exchange_log(a2a, str(log)):
                step_s = await run_step(compute_s, a2a, exchange or single_frame(4096), metrics)
        finally:
            await a2a.close()
    (line,) = log.read_text().splitlines()
    return step_s, json.loads(line), registry_text(registry)


async def test_slow_exchange_short_compute_times_the_exchange(tmp_path: Path) -> None:
    step_s, rec, text = await _step(0.03, [0.3], tmp_path)
    assert 0.3 <= rec["seconds"] < 0.3 + SLACK
    assert rec["compute_s"] == 0.03
    # nothing hides the exchange (no overlap): the step is compute + exchange
    assert step_s >= 0.03 + rec["seconds"] - 0.002 and rec["step_s"] == step_s
    assert metric_sum(text, "zcube:ep_alltoall_seconds_sum") == rec["seconds"]
    assert metric_sum(text, "zcube:ep_step_seconds_sum") == step_s
    assert rec["bytes_sent"] == rec["bytes_received"] == 4096
    assert rec["peers"] == 1 and rec["failures"] == 0 and rec["step"] == 0
    assert rec["end"] - rec["start"] == pytest.approx(rec["seconds"])


async def test_fast_exchange_long_compute_is_not_the_step(tmp_path: Path) -> None:
    step_s, rec, text = await _step(0.3, [0.0], tmp_path)
    assert step_s >= 0.3
    assert rec["seconds"] < 0.03 + 0.1  # about 10x shorter than the step, with slack
    assert metric_sum(text, "zcube:ep_alltoall_seconds_sum") == rec["seconds"]
    # the exchange lands in a bucket far below the step's
    assert 0.1024 in ALLTOALL_BUCKETS
    assert metric_sum(text, "zcube:ep_alltoall_seconds_bucket", le="0.1024") == 1
    assert metric_sum(text, "zcube:ep_step_seconds_bucket", le="0.1024") == 0


async def test_the_slowest_peer_sets_the_exchange_and_the_step(tmp_path: Path) -> None:
    step_s, rec, _ = await _step(0.02, [0.0, 0.25, 0.0], tmp_path)
    assert 0.25 <= rec["seconds"] < 0.25 + SLACK
    assert rec["peers"] == 3 and rec["bytes_sent"] == rec["bytes_received"] == 3 * 4096
    assert step_s >= 0.27 - 0.002


@pytest.mark.parametrize("dbo", [False, True])
async def test_dual_batch_overlap_hides_the_frames_behind_compute(
    tmp_path: Path, dbo: bool
) -> None:
    # Four frames, each answered after 0.05 s, beside 0.4 s of compute.
    frames = StepExchange(tuple(Frame(1, 2048, 4096) for _ in range(4)), 2 if dbo else 1)
    step_s, rec, _ = await _step(0.4, [0.05], tmp_path, frames)
    assert rec["frames"] == 4 and rec["micro_batches"] == (2 if dbo else 1)
    assert rec["bytes_sent"] == 4 * 2048 and rec["bytes_received"] == 4 * 4096
    if dbo:
        # the other micro-batch computes while one waits: only the last exchange shows
        assert 0.45 - 0.002 <= step_s < 0.45 + 0.15
        assert rec["seconds"] >= 0.2  # in flight a while, overlapping compute
    else:
        assert step_s >= 0.4 + 4 * 0.05 - 0.002  # compute + every frame's exchange
        assert rec["seconds"] >= 4 * 0.05


def test_alltoall_buckets_are_fine_and_span_sub_ms_to_seconds() -> None:
    b = ALLTOALL_BUCKETS
    assert b[0] <= 0.0002 and b[-1] >= 10.0
    ratios = [hi / lo for lo, hi in itertools.pairwise(b)]
    assert max(ratios) < 1.25 and min(ratios) > 1.1
