"""One engine step as both engines run it: the compute sleep and, with EP, the all-to-all.

The exchange runs beside the compute; the step ends when both are done and, after that, when
the part of the exchange compute does not hide has passed (`models.ep_step_seconds`: the step
lasts `max(exchange, compute + exposed_fraction * exchange)`, with the exchange as it really
ran, so a congested peer slows the whole step). `zcube:ep_alltoall_seconds` observes the
exchange alone (dispatch sent to the last combine received), `zcube:ep_step_seconds` the whole
step. The compute sleep's overrun (how late the event loop woke up) is recorded in
`zcube:engine_step_overrun_seconds`, and as a share of the step's modelled compute time in
`zcube:engine_step_lateness_ratio`: when they grow, the machine running the lab cannot keep up
and the run measures the emulator, not the fabric (docs/DOMAIN.md §4).
"""

from __future__ import annotations

import asyncio

from serving.alltoall import AllToAll
from serving.models import EP_EXPOSED_FRACTION, ep_step_seconds
from serving.vllm_metrics import EngineMetrics


async def run_step(
    compute_s: float,
    a2a: AllToAll,
    a2a_bytes_per_peer: int,
    metrics: EngineMetrics,
    exposed_fraction: float = EP_EXPOSED_FRACTION,
) -> float:
    """Sleep `compute_s` real seconds alongside one all-to-all exchange (if any), then the
    exchange's exposed part; return the step's seconds."""
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def compute() -> None:
        await asyncio.sleep(compute_s)
        overrun = max(0.0, loop.time() - start - compute_s)
        metrics.step_overrun.observe(overrun)
        if compute_s > 0:
            metrics.step_lateness.observe(overrun / compute_s)

    if a2a_bytes_per_peer <= 0 or not a2a.peers:
        await compute()
        return loop.time() - start
    ex, _ = await asyncio.gather(a2a.timed_exchange(a2a_bytes_per_peer), compute())
    exposed = start + ep_step_seconds(compute_s, ex.seconds, exposed_fraction) - loop.time()
    if exposed > 0:
        await asyncio.sleep(exposed)
    step_s = loop.time() - start
    metrics.a2a_bytes.inc(ex.moved)
    metrics.a2a_time.observe(ex.seconds)
    metrics.ep_step_time.observe(step_s)
    a2a.log_exchange(ex, compute_s, step_s)
    return step_s
