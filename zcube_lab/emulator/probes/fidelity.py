"""Transfer fidelity, pure: what a fabric-limited transfer should take, and the verdict rows
that set measured times against it (the KV pulls' in `kvprobe`, the all-to-all's in `epprobe`).

A transfer that the fabric alone limits takes `ideal = bytes * 8 / rate` plus a fixed software
cost, so a size's figure of merit is `ratio = (median - fixed) / ideal`, within a tolerance of 1.
Names: `port_mbps` is one host port's emulated rate (`Scale.link_mbps` of its link),
`ideal_seconds` the time at a rate, a `FidelityRow` one transfer size, a `Fidelity` one fabric
(and path mode) with a row per size, `fidelity_table` their markdown table.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zcube_lab.core.fabric.description import Fabric
    from zcube_lab.core.fabric.scale import Scale


def port_mbps(fabric: Fabric, scale: Scale, host: str, index: int) -> float:
    """Emulated rate of interface `index` of `host`: its link's full-scale rate, scaled."""
    link = fabric.link_at(host, index)
    if link is None:
        raise ValueError(f"{host} interface {index} has no link")
    return scale.link_mbps(fabric, link.gbps)


def ideal_seconds(num_bytes: float, mbps: float) -> float:
    """Seconds `num_bytes` take at `mbps` (10^6 bits/s)."""
    return num_bytes * 8 / (mbps * 1e6)


@dataclass(frozen=True)
class FidelityRow:
    """One transfer size: the median of its times, the ideal, `ratio = (median - fixed) /
    ideal`, and whether that is within `tolerance` of 1."""

    size: int
    seconds: float | None  # median of the completed transfers; None: none completed
    runs: int
    failed: int
    ideal_s: float
    ratio: float | None
    within: bool

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def fidelity_row(
    size: int, times: Sequence[float], failed: int, fixed_s: float, ideal_s: float, tolerance: float
) -> FidelityRow:
    """The row of one size from its transfer times (seconds)."""
    if not times:
        return FidelityRow(size, None, 0, failed, ideal_s, None, False)
    median = statistics.median(times)
    ratio = (median - fixed_s) / ideal_s
    ok = abs(ratio - 1) <= tolerance and failed == 0
    return FidelityRow(size, median, len(times), failed, ideal_s, ratio, ok)


@dataclass(frozen=True)
class Fidelity:
    """A fidelity measurement of one fabric (and path mode): the rate, the fixed cost and a
    row per size."""

    fabric: str
    mode: str
    route: str  # "h0->h4" (KV: server->puller; all-to-all: leader->peers)
    mbps: float
    fixed_s: float
    rows: tuple[FidelityRow, ...]

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "rows"}
        return out | {"rows": [r.to_dict() for r in self.rows]}


def fidelity_table(results: Sequence[Fidelity], tolerance: float) -> list[str]:
    """A markdown table of fidelity results, one row per size."""
    heads = ["fabric", "mode", "route", "rate Mb/s", "fixed ms", "bytes", "median s", "ideal s"]
    heads += ["ratio", f"within {tolerance:.0%}"]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for f in results:
        for r in f.rows:
            median = "-" if r.seconds is None else f"{r.seconds:.4f}"
            ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
            failed = f" ({r.failed} failed)" if r.failed else ""
            cells = [f.fabric, f.mode, f.route, f"{f.mbps:g}", f"{f.fixed_s * 1e3:.1f}"]
            cells += [f"{r.size:,}", median, f"{r.ideal_s:.4f}", ratio]
            cells += [("yes" if r.within else "NO") + failed]
            lines.append("| " + " | ".join(cells) + " |")
    return lines
