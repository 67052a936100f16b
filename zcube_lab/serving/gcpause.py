"""Python's garbage collector in the role processes: how long its pauses are, and keeping them
short.

A collection stops the whole event loop: an engine's step timer cannot fire during it, so a
pause longer than a quarter of a decode step is a late step the verdict counts against the run
(`zcube_lab/emulator/verdict`). A full (generation 2) collection walks every tracked object; a role
process holds about 40,000 of them after start-up (aiohttp, prometheus_client, our modules), and
on the lab's machines one such walk took 16-27 ms (`bench/gc_pauses.py`), longer than a quarter
of a decode step. Those objects live as long as the process, so `freeze_heap` moves them out of
the collector's reach once the app has started (`gc.freeze`); later collections walk only what
serving created since.

`GC_PAUSES` records every collection's pause per generation (from `gc.callbacks`; plain
counters, no lock, since a collection can start inside any allocation, also inside a metric's
lock), and `GcPauseCollector` exports them on a role's /metrics as the histogram
`zcube:python_gc_pause_seconds{generation}`, the longest as
`zcube:python_gc_pause_longest_seconds{generation}`.
"""

from __future__ import annotations

import bisect
import gc
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)
GENERATIONS = (0, 1, 2)


class GcPauses:
    """Per generation: counts per bucket (the last one is +Inf), the sum and the longest pause,
    in seconds. `install` hooks it into `gc.callbacks` once per process."""

    def __init__(self) -> None:
        self.counts = {g: [0] * (len(BUCKETS) + 1) for g in GENERATIONS}
        self.sums = dict.fromkeys(GENERATIONS, 0.0)
        self.longest = dict.fromkeys(GENERATIONS, 0.0)
        self._started = 0.0

    def install(self) -> None:
        """Start recording (idempotent)."""
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        """Stop recording."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.observe(info["generation"], time.perf_counter() - self._started)

    def observe(self, generation: int, seconds: float) -> None:
        """Count one pause of `generation` lasting `seconds`."""
        self.counts[generation][bisect.bisect_left(BUCKETS, seconds)] += 1
        self.sums[generation] += seconds
        self.longest[generation] = max(self.longest[generation], seconds)


GC_PAUSES = GcPauses()


class GcPauseCollector(Collector):
    """Exports a `GcPauses` as `zcube:python_gc_pause_seconds` (one histogram per generation)."""

    def __init__(self, pauses: GcPauses = GC_PAUSES) -> None:
        self.pauses = pauses

    def collect(self) -> Iterator[HistogramMetricFamily | GaugeMetricFamily]:
        """A histogram per generation (cumulative buckets) and the longest pause so far."""
        fam = HistogramMetricFamily(
            "zcube:python_gc_pause_seconds",
            "Pauses of Python's garbage collector in this process (the event loop stands still).",
            labels=["generation"],
        )
        for g in GENERATIONS:
            counts = list(self.pauses.counts[g])
            running, buckets = 0, []
            for bound, n in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
                running += n
                buckets.append((bound, running))
            fam.add_metric([str(g)], buckets, self.pauses.sums[g])
        yield fam
        longest = GaugeMetricFamily(
            "zcube:python_gc_pause_longest_seconds",
            "The longest pause of Python's garbage collector in this process so far.",
            labels=["generation"],
        )
        for g in GENERATIONS:
            longest.add_metric([str(g)], self.pauses.longest[g])
        yield longest


def freeze_heap() -> None:
    """Collect once, then put every object alive now out of the collector's reach (they live
    as long as the process)."""
    gc.collect()
    gc.freeze()


async def freeze_on_startup(_app: object) -> None:
    """`freeze_heap` as an aiohttp `on_startup` handler (appended last, so it runs after the
    app's own start-up has built what it keeps)."""
    freeze_heap()
