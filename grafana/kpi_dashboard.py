"""The `kpis` dashboard: the live figures of a run under the KPI names of the IETF BMWG draft on
AI-fabric inference benchmarking (draft-calabria-bmwg-ai-fabric-inference-bench-04), one panel
per KPI that a scraped series can give while the run goes on.

Our /metrics keep the names vLLM and our exporters use (vLLM's own dashboards read them); this
dashboard is where the draft's names meet those series. The post-run figures under the same
names are `summary.json`'s `bmwg` section (`zcube_lab/emulator/results/ietf/bmwg.py`);
docs/GLOSSARY.md maps each KPI to its figure. KPIs with no live series are left out here, never
shown as zero: fabric_fraction (a per-request join of the KV log and the gateway log, after the
run), PFC_frame_count (the lossless agent's pause counts, in its report), ECN_marking_rate (no
switch
marks ECN), Request_Rate (a sweep's capacity)."""

from __future__ import annotations

from zcube_lab.controller.port_metrics import (
    PORT_RX_DROPPED,
    PORT_TX_BYTES,
    PORT_TX_DROPPED,
    PORT_TX_PACKETS,
)
from zcube_lab.serving.vllm_metrics import (
    ALLTOALL_BYTES,
    ALLTOALL_TIME,
    GENERATION_TOKENS,
    NIXL_BYTES_TRANSFERRED,
    NIXL_XFER_TIME,
    NUM_REQUESTS_RUNNING,
    PROMPT_TOKENS,
)
from zcube_lab.workloads.client_metrics import ITL as CLIENT_ITL
from zcube_lab.workloads.client_metrics import TTFT as CLIENT_TTFT

from .fabric_dashboard import UTILIZATION
from .panels import (
    CLIENT,
    RATE,
    RUN,
    SRV,
    Dashboard,
    Panel,
    Query,
    Variable,
    hist_sum,
    quantiles,
    run_variables,
    total,
)

DECODE = f'{SRV}, job="decode"'
PREFILL = f'{SRV}, job="prefill"'


def _per_engine(counter: str, matchers: str) -> str:
    """Tokens per second of `counter` over the engines that export it, per engine: the lab
    runs one engine per GPU host, so this is per GPU."""
    series = f"{total(counter)}{{{matchers}}}"
    return f"sum(rate({series}{RATE})) / count(count by (instance) ({series}))"


KV_BYTES = f"sum(rate({hist_sum(NIXL_BYTES_TRANSFERRED)}{{{SRV}}}{RATE}))"
EP_BYTES = f"sum(rate({total(ALLTOALL_BYTES)}{{{SRV}}}{RATE}))"


PANELS = (
    Panel(
        "TTFT",
        "Time to first token at the client (the load generator's histogram), p50/p90/p99. "
        "The draft's TTFT; post-run: summary.json bmwg.TTFT (exact, per request).",
        quantiles(CLIENT_TTFT, CLIENT),
        unit="s",
    ),
    Panel(
        "ITL",
        "Inter-token latency at the client: gaps between streamed chunks, p50/p90/p99.",
        quantiles(CLIENT_ITL, CLIENT),
        unit="s",
    ),
    Panel(
        "TTFT_fabric, KV_xfer_latency",
        f"The fabric's part of TTFT: one KV pull from prefill to decode ({NIXL_XFER_TIME}), "
        "p50/p90/p99. A whole pull over TCP, not one RDMA block.",
        quantiles(NIXL_XFER_TIME, SRV),
        unit="s",
    ),
    Panel(
        "ITL_fabric, EP_alltoall_latency",
        f"The fabric's part of a decode step: one expert-parallel exchange ({ALLTOALL_TIME}), "
        "p50/p90/p99. Empty unless the run spans instances over servers (--ep-servers).",
        quantiles(ALLTOALL_TIME, SRV),
        unit="s",
    ),
    Panel(
        "TPS_input, TPS_output",
        "Prompt tokens prefilled and output tokens generated per second, all engines.",
        (
            Query(f"sum(rate({total(PROMPT_TOKENS)}{{{PREFILL}}}{RATE}))", "TPS_input"),
            Query(f"sum(rate({total(GENERATION_TOKENS)}{{{DECODE}}}{RATE}))", "TPS_output"),
        ),
    ),
    Panel(
        "TPS_per_GPU",
        "Output tokens per second per decode GPU (the draft's), and prompt tokens per second "
        "per prefill GPU; one engine per GPU host.",
        (
            Query(_per_engine(GENERATION_TOKENS, DECODE), "output per decode GPU"),
            Query(_per_engine(PROMPT_TOKENS, PREFILL), "input per prefill GPU"),
        ),
    ),
    Panel(
        "KV_xfer_bandwidth, Fabric_Goodput",
        "Payload the fabric carried for serving, in the lab's bytes (full scale x "
        "bandwidth_scale): KV pulls, and KV plus all-to-all (Fabric_Goodput).",
        (
            Query(f"{KV_BYTES} / 1e9", "KV_xfer_bandwidth"),
            Query(f"({KV_BYTES} + ({EP_BYTES} or vector(0))) / 1e9", "Fabric_Goodput"),
        ),
        unit="decGBs",
    ),
    Panel(
        "Link_utilization",
        "Switch ports' transmit rate over the emulated link rate ($link_mbps Mb/s): the mean "
        "over ports and the busiest port.",
        (
            Query(f"avg({UTILIZATION})", "mean"),
            Query(f"max({UTILIZATION})", "max"),
        ),
        unit="percentunit",
    ),
    Panel(
        "Packet_drop_rate",
        "Packets the switches' OpenFlow ports dropped per million they sent. Queue drops in "
        "the ports' qdiscs are not exported live; summary.json's bmwg.Packet_drop_rate adds "
        "them after the run.",
        (
            Query(
                f"(sum(rate({PORT_RX_DROPPED}{{{RUN}}}{RATE})) "
                f"+ sum(rate({PORT_TX_DROPPED}{{{RUN}}}{RATE}))) "
                f"/ sum(rate({PORT_TX_PACKETS}{{{RUN}}}{RATE})) * 1e6",
                "drops per million packets",
            ),
        ),
    ),
)


def dashboard() -> Dashboard:
    """The dashboard of the draft's KPIs."""
    return Dashboard(
        uid="zcube-kpis",
        title="zcube-lab / KPIs by the IETF BMWG draft's names",
        description="A run's live figures under the KPI names of "
        "draft-calabria-bmwg-ai-fabric-inference-bench-04 (docs/GLOSSARY.md maps each to the "
        "lab's series). Latencies are modelled seconds (a dilated run's exporters convert); "
        "rates are per wall second, so a run dilated k times shows 1/k of its modelled rates.",
        variables=(
            *run_variables(PORT_TX_BYTES),
            Variable("model_name", "Model", NUM_REQUESTS_RUNNING, RUN),
        ),
        link_mbps=True,
        panels=PANELS,
    )
