"""Turning a run's raw records into the figures users compare (pure).

Inputs are plain data: the client's per-request records (`requests.jsonl` written by the load
generator), per-port byte counts over the run window, and the fabric description. Outputs are
the sections of `RunSummary` (`zcube_lab.emulator.results.run.summary`) that `compare` compares. The
link sections come from `zcube_lab.emulator.results.fabric.linkstats`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.stats import mean, quantile
from zcube_lab.emulator.results.fabric.linkstats import directed_utilization, utilization_summary
from zcube_lab.emulator.results.run.goodput import arrived_in_window
from zcube_lab.emulator.results.run.summary import (
    QUANTILES,
    ClientFigures,
    FabricStats,
    LinkLoad,
)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file; none if it is missing, and a line that does not parse
    (one being written at that moment) is skipped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _ok(record: Mapping[str, Any]) -> bool:
    return record.get("outcome") == "ok"


def client_summary(records: Iterable[Mapping[str, Any]], window_s: float) -> ClientFigures:
    """Throughput and latency quantiles from the client's per-request records; the throughput
    counts the completed requests that arrived in the window (`goodput.arrived_in_window`)."""
    recs = list(records)
    ok = [r for r in recs if _ok(r)]
    counted = arrived_in_window(ok, window_s)
    ttft = [float(r["ttft_s"]) for r in ok if r.get("ttft_s") is not None]
    tpot = [float(r["tpot_s"]) for r in ok if r.get("tpot_s") is not None]
    e2e = [float(r["e2e_s"]) for r in ok if r.get("e2e_s") is not None]
    itl = [float(g) for r in ok for g in r.get("itl_s") or ()]
    tokens = sum(int(r.get("output_tokens") or 0) for r in ok)
    counted_tokens = sum(int(r.get("output_tokens") or 0) for r in counted)
    out: dict[str, Any] = {
        "requests": len(recs),
        "completed": len(ok),
        "failed": len(recs) - len(ok),
        "requests_per_s": len(counted) / window_s if window_s > 0 else None,
        "output_tokens_per_s": counted_tokens / window_s if window_s > 0 else None,
        "output_tokens": tokens,
    }
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2e", e2e)):
        for q in QUANTILES:
            out[f"{name}_p{q}_s"] = quantile(values, q / 100)
        out[f"{name}_mean_s"] = mean(values)
    return ClientFigures(**out)


def host_ingress_bytes(fabric: Fabric, rx_bytes: Mapping[tuple[str, int], float]) -> float:
    """Bytes that entered the fabric from GPU hosts: the switch rx counters of host ports."""
    total = 0.0
    for att in fabric.attachments.values():
        total += rx_bytes.get((att.switch, att.port), 0.0)
    return total


def fabric_stats(
    fabric: Fabric,
    util: Mapping[tuple[str, int], float],
    rx_bytes: Mapping[tuple[str, int], float],
    drops: float,
    server_reported_bytes: float,
    links: Mapping[str, LinkLoad] | None = None,
    peak_window_s: float | None = None,
) -> FabricStats:
    """Utilization, drops, and the bytes that entered the fabric from GPU hosts against what
    the servers say they sent (the fabric also carries headers, ACKs and KV framing); with
    `links` (`link_loads`), the busiest link in either direction too, its peak over windows of
    `peak_window_s`."""
    ingress = host_ingress_bytes(fabric, rx_bytes)
    sent = server_reported_bytes
    return FabricStats(
        utilization=utilization_summary(util, fabric),
        drops=drops,
        host_ingress_bytes=ingress,
        server_reported_bytes=sent,
        overhead_ratio=ingress / sent if sent else None,
        switches=len(fabric.switches),
        switching_capacity_gbps=fabric.switching_capacity_gbps(),
        directed=(
            directed_utilization(fabric, links, peak_window_s) if links is not None else None
        ),
    )


def throughput_series(
    records: Iterable[Mapping[str, Any]], bin_s: float = 5.0
) -> list[tuple[float, float]]:
    """Completed requests/s in bins of `bin_s` seconds, by completion time since the load
    generator's start."""
    done: dict[int, int] = {}
    for r in records:
        if _ok(r) and r.get("e2e_s") is not None:
            b = int((float(r["sent_s"]) + float(r["e2e_s"])) // bin_s)
            done[b] = done.get(b, 0) + 1
    if not done:
        return []
    return [(b * bin_s, done.get(b, 0) / bin_s) for b in range(max(done) + 1)]
