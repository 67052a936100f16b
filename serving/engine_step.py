"""One engine step as both engines run it: the compute sleep and, with EP, the all-to-all.

The step ends when both are done. The compute sleep's overrun (how late the event loop woke
up) is recorded in `zcube:engine_step_overrun_seconds`: when it grows, the machine running the
lab cannot keep up and the run measures the emulator, not the fabric (docs/DOMAIN.md §4).
"""

from __future__ import annotations

import asyncio

from serving.alltoall import AllToAll
from serving.metrics import EngineMetrics


async def run_step(
    compute_s: float, a2a: AllToAll, a2a_bytes_per_peer: int, metrics: EngineMetrics
) -> None:
    """Sleep `compute_s` real seconds alongside one all-to-all exchange (if any)."""
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def compute() -> None:
        await asyncio.sleep(compute_s)
        metrics.step_overrun.observe(max(0.0, loop.time() - start - compute_s))

    if a2a_bytes_per_peer > 0 and a2a.peers:
        moved, _ = await asyncio.gather(a2a.exchange(a2a_bytes_per_peer), compute())
        metrics.a2a_bytes.inc(moved)
        metrics.a2a_time.observe(loop.time() - start)
    else:
        await compute()
