"""One engine step as both engines run it: the compute and, with EP, the all-to-all frames.

A step's exchange is a sequence of frames (`zcube_lab.serving.eptraffic.StepExchange`: groups of MoE
layers). Without dual-batch overlap each frame's compute share runs, then its exchange (a layer
waits for its combine before the next layer computes): the step lasts its compute plus every
frame's exchange as it really ran, so a congested peer slows the whole step. With dual-batch
overlap two micro-batches, each with half of every frame's bytes, take turns on the GPU (one
computes while the other's exchange is in flight), so compute hides the exchange as far as it
can. `zcube:ep_alltoall_seconds` observes the time any frame of the step was in flight,
`zcube:ep_step_seconds` the whole step. The compute sleeps' overrun (how late the event loop
woke up, summed over the step) is recorded in `zcube:engine_step_overrun_seconds`, and as a
share of the step's modelled compute time in `zcube:engine_step_lateness_ratio`: when they grow,
the machine running the lab cannot keep up and the run measures the emulator, not the fabric
(docs/DOMAIN.md §4).
"""

from __future__ import annotations

import asyncio

from zcube_lab.serving.alltoall import AllToAll, Exchange, split_even
from zcube_lab.serving.eptraffic import StepExchange, busy_seconds
from zcube_lab.serving.vllm_metrics import EngineMetrics


def _observe_overrun(metrics: EngineMetrics, overrun: float, compute_s: float) -> None:
    metrics.step_overrun.observe(overrun)
    if compute_s > 0:
        metrics.step_lateness.observe(overrun / compute_s)


async def run_step(
    compute_s: float, a2a: AllToAll, exchange: StepExchange, metrics: EngineMetrics
) -> float:
    """Run `compute_s` real seconds of compute with the step's all-to-all frames (if any), as
    the module docstring says; return the step's seconds."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    if not exchange or not a2a.peers:
        await asyncio.sleep(compute_s)
        _observe_overrun(metrics, max(0.0, loop.time() - start - compute_s), compute_s)
        return loop.time() - start
    step = a2a.next_step()
    frames, batches = exchange.frames, exchange.micro_batches
    slice_s = compute_s / (len(frames) * batches)
    gpu = asyncio.Lock()  # one micro-batch computes at a time
    overrun = [0.0]
    done: list[tuple[float, Exchange]] = []

    async def micro_batch(k: int) -> None:
        for f in frames:
            async with gpu:
                t0 = loop.time()
                await asyncio.sleep(slice_s)
                overrun[0] += max(0.0, loop.time() - t0 - slice_s)
            d, c = split_even(f.dispatch, batches)[k], split_even(f.combine, batches)[k]
            if d or c:
                t0 = loop.time()
                done.append((t0, await a2a.timed_exchange(d, c, channel=k)))

    await asyncio.gather(*(micro_batch(k) for k in range(batches)))
    step_s = loop.time() - start
    _observe_overrun(metrics, overrun[0], compute_s)
    exs = [ex for _, ex in done]
    whole = Exchange(
        start=min(ex.start for ex in exs),
        end=max(ex.end for ex in exs),
        seconds=busy_seconds([(t0, t0 + ex.seconds) for t0, ex in done]),
        bytes_sent=sum(ex.bytes_sent for ex in exs),
        bytes_received=sum(ex.bytes_received for ex in exs),
        peers=len(a2a.peers),
        failures=sum(ex.failures for ex in exs),
        step=step,
        lanes=max(ex.lanes for ex in exs),
    )
    metrics.a2a_bytes.inc(whole.moved)
    metrics.a2a_time.observe(whole.seconds)
    metrics.ep_step_time.observe(step_s)
    a2a.log_exchange(whole, compute_s, step_s, len(frames), batches)
    return step_s
