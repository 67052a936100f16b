"""A time-dilated run's summary in modelled seconds (pure): `undilate(summary, k)`.

With time dilation k (docs/DOMAIN.md §4) the lab runs the modelled world k times slower:
compute, gaps and timeouts x k, link rates / k. What was timed on the wall clock and not
observed through a `Clock` is divided by k here, once, where the summary is built:

- the exact KV pull and all-to-all times from the engines' logs (`TransferFigures`, and their
  copies in the server figures);
- the window a link's peak utilization is measured over (the scrape interval: one modelled
  second at every k).

Not here, because they are modelled already or are ratios: the server histograms' quantiles
(gateway and engine TTFT, ITL: a dilated server observes modelled seconds,
`serving.vllm_metrics`), the client's figures, its records and the load generator's summary
(the load generator divides its own measurements: `workloads.locust_ext`), the client TTFT it
exports to Prometheus, the throughput series (from those records), link utilization (bytes
over the shaped capacity, both / k) and the ratio of a pull's time to its ideal one (both x k).
Not divided either: `window_s` and the health verdict, which judge the emulator in its own
(wall) time, and byte counts.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, TypeVar

from emulator.results.summary import RunSummary, ServerFigures, TransferFigures

_T = TypeVar("_T")

# Every time in the exact transfer figures (from the engines' logs: wall clock).
TRANSFER_TIMES = tuple(f.name for f in fields(TransferFigures) if f.name.endswith("_s"))
# Server figures on the wall clock: only the copies of the exact transfer times. The histogram
# quantiles (gateway and engine TTFT, ITL) are modelled already: a dilated server observes
# modelled seconds (`serving.vllm_metrics`).
SERVER_WALL_TIMES = tuple(f.name for f in fields(ServerFigures) if f.name in TRANSFER_TIMES)


def _divided(section: _T, names: tuple[str, ...], k: float) -> _T:
    """`section` with each of `names` divided by k (None and NaN stay as they are)."""
    values: dict[str, Any] = {}
    for name in names:
        v = getattr(section, name)
        values[name] = None if v is None else v / k
    return replace(section, **values)  # type: ignore[type-var]


def undilate(summary: RunSummary, dilation: float) -> RunSummary:
    """The summary of a run dilated by `dilation` in modelled seconds, recording `dilation`;
    unchanged when it is 1."""
    if dilation == 1:
        return summary
    k = dilation
    stats = summary.fabric_stats
    directed = stats.directed
    if directed is not None:
        directed = _divided(directed, ("util_peak_window_s",), k)
    transfers = summary.transfers
    return replace(
        summary,
        dilation=k,
        server=_divided(summary.server, SERVER_WALL_TIMES, k),
        transfers=None if transfers is None else _divided(transfers, TRANSFER_TIMES, k),
        fabric_stats=replace(stats, directed=directed),
    )
