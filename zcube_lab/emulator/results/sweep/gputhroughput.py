"""GPU throughput at the SLO (pure): production's "+15% GPU throughput" is tokens per GPU-second
at its operating point, so beside each fabric's capacity in requests/s the sweep reports the
decode tokens per GPU-second (output tokens over the decode GPUs) and prefill tokens per
GPU-second (prompt tokens over the prefill GPUs) that the runs at that capacity delivered: the
BMWG draft's TPS_per_GPU (`zcube_lab.emulator.results.ietf.bmwg`) read at each repeat's capacity
rate, the median over the repeats that have one.

A repeat whose capacity is 0 (no rate met the SLO) has no operating point and adds nothing; a
censored capacity (an untrustworthy run or the ladder's top in the way) is read at its lower
bound, as the capacity is, and the row says so through its `censored` count.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from zcube_lab.emulator.results.sweep.capacity import FabricCapacity


class _Run(Protocol):
    variant: str
    rate: float
    repeat: int

    @property
    def bmwg(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class TokensPerGpu:
    """One fabric's tokens per GPU-second at its capacity: medians over repeats (None where no
    repeat has a figure), the repeats read and how many of them were censored."""

    variant: str
    rate: float | None  # the capacity (requests/s) it is read at
    decode: float | None  # output tokens/s per decode GPU
    prefill: float | None  # prompt tokens/s per prefill GPU
    repeats: int
    censored: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def per_gpu(bmwg: Mapping[str, Any]) -> tuple[float | None, float | None]:
    """(decode, prefill) tokens/s per GPU from a run's BMWG KPIs (absent: None)."""
    tps = bmwg.get("TPS_per_GPU") or {}
    return tps.get("output"), tps.get("input")


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def at_capacity(runs: Sequence[_Run], capacities: Sequence[FabricCapacity]) -> list[TokensPerGpu]:
    """Each fabric's decode and prefill tokens per GPU-second at its capacity."""
    by_key = {(r.variant, r.repeat, r.rate): r for r in runs}
    out = []
    for cap in capacities:
        decode, prefill, censored = [], [], 0
        for rc in cap.capacity.repeats:
            run = by_key.get((cap.variant, rc.repeat, rc.rate))
            if rc.rate <= 0 or run is None:
                continue
            censored += rc.censored is not None
            d, p = per_gpu(run.bmwg)
            if d is not None:
                decode.append(d)
            if p is not None:
                prefill.append(p)
        out.append(
            TokensPerGpu(
                variant=cap.variant,
                rate=cap.rate,
                decode=_median(decode),
                prefill=_median(prefill),
                repeats=max(len(decode), len(prefill)),
                censored=censored,
            )
        )
    return out
