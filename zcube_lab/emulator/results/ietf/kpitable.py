"""report.html's table of the IETF BMWG draft's KPIs, by the draft's names (pure): one row per
figure (`DraftKpis.rows`: a latency's p50 and p99, link utilization's mean and peak), one column
per variant, the median over its runs with [min-max]. Runs whose summary has no `bmwg` section
(written before it existed) count as runs without the figure; a figure no run has is `-`.
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Sequence

from zcube_lab.emulator.results.ietf.kpis import BY_NAME, DRAFT, KPIS
from zcube_lab.emulator.results.run.summary import RunSummary

NOT_MEASURED = (
    "ECN_marking_rate (the emulated switches mark no ECN), EP_alltoall_bandwidth, "
    "Buffer_utilization, Prefix_cache_hit_rate and JFI_decode: docs/GLOSSARY.md says why"
)
_ORDER = {k.name: i for i, k in enumerate(KPIS)}


def cell(values: Sequence[float]) -> str:
    """Median [min-max] of values (just the value for one run); `-` for none."""
    if not values:
        return "-"
    mid = f"{statistics.median(values):.4g}"
    if len(values) == 1:
        return mid
    return f"{mid} [{min(values):.4g}-{max(values):.4g}]"


def kpi_rows(runs: Sequence[RunSummary], variants: Sequence[str]) -> list[list[str]]:
    """[KPI, what, unit, one cell per variant] for every figure some run has, in the draft's
    order."""
    figures: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in runs:
        if r.bmwg is None:
            continue
        for name, what, value in r.bmwg.rows():
            if value is not None:
                figures.setdefault((name, what), {}).setdefault(r.variant, []).append(value)
    return [
        [name, what, BY_NAME[name].unit, *(cell(by.get(v, [])) for v in variants)]
        for (name, what), by in sorted(figures.items(), key=lambda kv: _ORDER[kv[0][0]])
    ]


def kpi_section(runs: Sequence[RunSummary], variants: Sequence[str]) -> list[str]:
    """The HTML section: a heading, the table and the KPIs the lab does not measure."""
    rows = kpi_rows(runs, variants)
    parts = [f"<h2>KPIs by the IETF BMWG draft's names ({html.escape(DRAFT)})</h2>"]
    if not rows:
        return [*parts, "<p>No run carries the draft's KPIs (summaries from before them).</p>"]
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ("KPI", "figure", "unit", *variants))
    parts += ["<table>", f"<tr>{head}</tr>"]
    for row in rows:
        parts.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    parts += ["</table>", f"<p>Not measured: {html.escape(NOT_MEASURED)}.</p>"]
    return parts
