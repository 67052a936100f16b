"""The KPIs of the IETF BMWG draft on AI inference fabric benchmarking that a lab run measures,
under the draft's names and in its units (pure).

The draft is draft-calabria-bmwg-ai-fabric-inference-bench ("Benchmarking Methodology for AI
Inference Serving Network Fabrics"; read in its editor's copy of June 2026, section "KPI
Framework and Metrics Taxonomy"). `run_kpis` gives, for one run, every KPI of the draft the lab
has a figure for; a KPI the run has no figure for (no KV pulls logged, no expert parallelism)
is left out rather than written as zero. Which lab figure stands for which KPI, and which KPIs
the lab does not measure, is docs/RESULTS.md's "BMWG KPIs"; `KPI_SOURCES` says it in one line
each. Latencies are quantiles (`p50`, `p99`) over the run, as the draft asks percentiles but
names no single one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from emulator.results.goodput import Slo, arrived_in_window, request_meets_slo
from emulator.results.summary import RunSummary

DRAFT = "draft-calabria-bmwg-ai-fabric-inference-bench"

# KPI name -> unit and the lab figure behind it (the unit is the draft's).
KPI_SOURCES: dict[str, str] = {
    "TTFT": "ms; client TTFT per request (send to first token), p50 and p99",
    "ITL": "ms; client gaps between streamed tokens, p50 and p99",
    "E2E_latency": "ms; client send to last token per request, p50 and p99",
    "TTFT_fabric": "ms; exact KV pull time (the engines' KV log), p50 and p99",
    "ITL_fabric": "ms; exact all-to-all exchange time per decode step (EP runs), p50 and p99",
    "EP_alltoall_latency": "us; the same all-to-all exchange times as ITL_fabric",
    "Fabric_FCT": "us; the same KV pull times as TTFT_fabric (one pull is one flow)",
    "TPS_input": "tokens/s; prompt tokens of completed requests sent in the window, over it",
    "TPS_output": "tokens/s; output tokens of completed requests sent in the window, over it",
    "Inference_Goodput": "tokens/s; output tokens of requests meeting the SLO, over the window",
    "KV_BW": "GB/s; KV bytes the servers reported sending in the run, over the run's window",
    "Link_utilization": "%; mean transmit utilization over the switch ports, and the highest "
    "peak of any link direction",
    "Request_Rate": "req/s; the fabric's capacity under the SLO (per fabric, not per run)",
}


def _ms(values: Sequence[float | None], scale: float = 1000.0) -> dict[str, float] | None:
    """{p50, p99} of two quantiles in seconds, scaled (ms by default); None if either is
    missing."""
    p50, p99 = values
    if p50 is None or p99 is None:
        return None
    return {"p50": p50 * scale, "p99": p99 * scale}


def run_kpis(
    summary: RunSummary, records: Sequence[Mapping[str, Any]], slo: Slo, window_s: float
) -> dict[str, Any]:
    """The draft's KPIs one run measured, by name (`KPI_SOURCES`), each a number or
    {p50, p99}; a KPI without a figure in this run is absent."""
    c = summary.client
    out: dict[str, Any] = {
        "TTFT": _ms([c.ttft_p50_s, c.ttft_p99_s]),
        "ITL": _ms([c.itl_p50_s, c.itl_p99_s]),
        "E2E_latency": _ms([c.e2e_p50_s, c.e2e_p99_s]),
    }
    t = summary.transfers
    if t is not None and t.kv_pulls > 0:
        out["TTFT_fabric"] = _ms([t.kv_xfer_p50_s, t.kv_xfer_p99_s])
        out["Fabric_FCT"] = _ms([t.kv_xfer_p50_s, t.kv_xfer_p99_s], 1e6)
    if t is not None and t.alltoall_p50_s is not None:
        out["ITL_fabric"] = _ms([t.alltoall_p50_s, t.alltoall_p99_s])
        out["EP_alltoall_latency"] = _ms([t.alltoall_p50_s, t.alltoall_p99_s], 1e6)
    if window_s > 0:
        counted = [r for r in arrived_in_window(records, window_s) if r.get("outcome") == "ok"]
        prompt = sum(int(r.get("prompt_tokens") or 0) for r in counted)
        good = sum(int(r.get("output_tokens") or 0) for r in counted if request_meets_slo(r, slo))
        out["TPS_input"] = prompt / window_s
        out["TPS_output"] = c.output_tokens_per_s
        out["Inference_Goodput"] = good / window_s
    if summary.server.kv_bytes is not None and summary.window_s > 0:
        out["KV_BW"] = summary.server.kv_bytes / summary.window_s / 1e9
    u = summary.fabric_stats.utilization
    d = summary.fabric_stats.directed
    peak = d.peak_link_util if d is not None else None
    if u.link_util_mean is not None:
        out["Link_utilization"] = {
            "mean": 100 * u.link_util_mean,
            "peak": 100 * (peak if peak is not None else u.link_util_max),
        }
    return {k: v for k, v in out.items() if v is not None}
