"""A time-dilated run's summary in modelled seconds (pure): `undilate(summary, clock)`.

With time dilation k (docs/DOMAIN.md §4) the lab runs the modelled world k times slower:
compute, gaps and timeouts x k, link rates / k. What was timed on the wall clock and not
observed through a `Clock` is converted here, once, where the summary is built (`Clock.modelled`):

- the exact KV pull and all-to-all times from the engines' logs (`TransferFigures`, and their
  copies in the server figures);
- the window a link's peak utilization is measured over (the scrape interval: one modelled
  second at every k).

Not here, because they are modelled already or are ratios: the server histograms' quantiles
(gateway and engine TTFT, ITL: a dilated server observes modelled seconds,
`zcube_lab.serving.vllm_metrics`), the client's figures, its records and the load generator's
summary (the load generator divides its own measurements: `zcube_lab.workloads.locust_ext`), the
client TTFT it exports to Prometheus, the throughput series (from those records), link utilization
(bytes over the shaped capacity, both / k) and the ratio of a pull's time to its ideal one (both x
k). Not divided either: `window_s` and the health verdict, which judge the emulator in its own
(wall) time, and byte counts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields, replace
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any, TypeVar

from zcube_lab.core.clock import Clock
from zcube_lab.emulator.results.run.summary import RunSummary, ServerFigures, TransferFigures

_T = TypeVar("_T")

# Every time in the exact transfer figures (from the engines' logs: wall clock).
TRANSFER_TIMES = tuple(f.name for f in fields(TransferFigures) if f.name.endswith("_s"))
# Server figures on the wall clock: only the copies of the exact transfer times. The histogram
# quantiles (gateway and engine TTFT, ITL) are modelled already: a dilated server observes
# modelled seconds (`zcube_lab.serving.vllm_metrics`).
SERVER_WALL_TIMES = tuple(f.name for f in fields(ServerFigures) if f.name in TRANSFER_TIMES)


def _modelled(section: _T, names: tuple[str, ...], clock: Clock) -> _T:
    """`section` with each of `names` (wall seconds) in modelled seconds (None stays None)."""
    values: dict[str, Any] = {}
    for name in names:
        v = getattr(section, name)
        values[name] = None if v is None else clock.modelled(v)
    return replace(section, **values)  # type: ignore[type-var]


def undilate(summary: RunSummary, clock: Clock) -> RunSummary:
    """The summary of a run on `clock` in modelled seconds, recording its dilation; unchanged
    when the clock is not dilated."""
    if not clock.dilated:
        return summary
    stats = summary.fabric_stats
    directed = stats.directed
    if directed is not None:
        directed = _modelled(directed, ("util_peak_window_s",), clock)
    transfers = summary.transfers
    return replace(
        summary,
        dilation=clock.dilation,
        server=_modelled(summary.server, SERVER_WALL_TIMES, clock),
        transfers=None if transfers is None else _modelled(transfers, TRANSFER_TIMES, clock),
        fabric_stats=replace(stats, directed=directed),
    )


# What `bench/dilation_ladder.py` saved: its points and the smallest k it accepted for each.
# Package data (pyproject's package-data), so an installed copy quotes it too; the runs behind
# it stay in bench/results/dilation_ladder.json.
LADDER_FILE: Traversable = files("zcube_lab").joinpath("data", "dilation_ladder.json")


def read_ladder(path: Traversable = LADDER_FILE) -> dict[str, Any] | None:
    """The saved dilation ladder, or None when there is none (or it does not parse)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def ladder_note(dilation: float, ladder: Mapping[str, Any] | None) -> str:
    """What the saved dilation ladder says about a run at `dilation`: the smallest validated k
    of each of its points, and whether `dilation` is at or above one of them. The ladder's
    points are its own (a fabric, a workload, a rate), not necessarily the run's."""
    k = f"k={dilation:g}"
    if not ladder or not ladder.get("validated_k"):
        return f"dilation {k}: no dilation ladder saved (bench/dilation_ladder.py): not validated"
    points = ladder.get("points") or {}
    parts, found = [], []
    for name, smallest in sorted(ladder["validated_k"].items()):
        point = points.get(name) or {}
        on = point.get("fabric") or ladder.get("fabric")  # older ladders name one fabric
        where = f"{point.get('workload', '?')} at {point.get('rate', '?')} req/s" + (
            f", {on}" if on else ""
        )
        parts.append(f"{name} ({where}): {'none' if smallest is None else f'k={smallest:g}'}")
        if smallest is not None:
            found.append(float(smallest))
    verdict = (
        "at or above a validated k"
        if found and dilation >= min(found)
        else "below every validated k: its figures are not validated"
    )
    return f"dilation {k}: the ladder validated " + "; ".join(parts) + f"; {k} is {verdict}"
