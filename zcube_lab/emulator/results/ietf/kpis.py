"""The KPIs of the IETF BMWG draft on AI inference fabric benchmarking, as typed data (pure):
`DraftKpis`, the `bmwg` section of `summary.json` and of each run point of `sweep.json`.

The draft is draft-calabria-bmwg-ai-fabric-inference-bench-04 ("Benchmarking Methodology for AI
Inference Serving Network Fabrics", section 4 "KPI Framework and Metrics Taxonomy", and 6.1 for
the fabric fraction; its Goodput is the companion terminology draft's, qualified as
Inference_Goodput or Fabric_Goodput). `KPIS` is the one list of the KPIs the lab writes: the
draft's name, the attribute that holds it, its unit, and the lab figure behind it. What each
is computed from: `zcube_lab.emulator.results.ietf.bmwg`; the KPIs the lab does not measure, and
why: docs/GLOSSARY.md, "The draft's KPIs".

JSON: each KPI under the draft's name, a number or a small object (`{p50, p99}` for a
latency's quantiles, `{mean, peak}` for link utilization); a KPI without a figure is absent,
never zero. Units are the draft's: ms and us for latencies, %, GB/s (1e9 bytes), ppm.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

DRAFT = "draft-calabria-bmwg-ai-fabric-inference-bench-04"


@dataclass(frozen=True)
class Quantiles:
    """A latency's p50 and p99 in the KPI's unit (the draft asks P50 to P99.9; the lab's runs
    are too short for more than the p99)."""

    p50: float
    p99: float


@dataclass(frozen=True)
class MeanPeak:
    """Average and peak, in %."""

    mean: float
    peak: float


@dataclass(frozen=True)
class PerGpu:
    """Tokens/s per GPU: output tokens over the decode GPUs (the draft's TPS_per_GPU) and input
    tokens over the prefill GPUs, with the two denominators (one engine per GPU host)."""

    output: float | None
    input: float | None
    decode_gpus: int
    prefill_gpus: int


@dataclass(frozen=True)
class KvBandwidth:
    """KV transfer throughput in GB/s: the aggregate between the prefill and decode pools (bytes
    of completed pulls over the run's window) and one pull's own (bytes over time, summed over
    the completed pulls)."""

    aggregate: float
    per_pull: float | None


class Kpi(NamedTuple):
    """One KPI: the draft's name, the `DraftKpis` attribute, its unit, and the lab's figure."""

    name: str
    attr: str
    unit: str
    source: str


KPIS: tuple[Kpi, ...] = (
    Kpi("TTFT", "ttft", "ms", "client: send to first streamed token, per request"),
    Kpi("ITL", "itl", "ms", "client: gaps between streamed tokens"),
    Kpi("E2E_latency", "e2e_latency", "ms", "client: send to last token, per request"),
    Kpi("TTFT_fabric", "ttft_fabric", "ms", "engines' exact KV log: one KV pull's time"),
    Kpi("ITL_fabric", "itl_fabric", "ms", "engines' exact all-to-all log: one exchange"),
    Kpi("fabric_fraction", "fabric_fraction", "ratio",
        "per request: its KV pull time / its TTFT at the gateway (KV and gateway logs)"),
    Kpi("T_prefill", "t_prefill", "ms",
        "per request: gateway arrival to its first KV pull's start (queue, prefill, hand-over)"),
    Kpi("T_transfer", "t_transfer", "ms",
        "per request: its first KV pull's start to its last pull's end (retries included)"),
    Kpi("T_decode_init", "t_decode_init", "ms",
        "per request: its last KV pull's end to its first token at the gateway"),
    Kpi("TPS_input", "tps_input", "tokens/s", "prompt tokens of completed requests"),
    Kpi("TPS_output", "tps_output", "tokens/s", "output tokens streamed, every request"),
    Kpi("TPS_per_GPU", "tps_per_gpu", "tokens/s/GPU",
        "TPS_output per decode GPU, TPS_input per prefill GPU"),
    Kpi("Inference_Goodput", "inference_goodput", "tokens/s",
        "output tokens of requests that completed without error"),
    Kpi("Fabric_Goodput", "fabric_goodput", "GB/s",
        "payload bytes of completed KV pulls and clean all-to-all exchanges"),
    Kpi("KV_xfer_latency", "kv_xfer_latency", "us", "the KV pull times of TTFT_fabric"),
    Kpi("KV_xfer_bandwidth", "kv_xfer_bandwidth", "GB/s",
        "KV bytes of completed pulls: over the window, and per pull"),
    Kpi("EP_alltoall_latency", "ep_alltoall_latency", "us", "the exchanges of ITL_fabric"),
    Kpi("Fabric_FCT", "fabric_fct", "us", "the KV pull times (a pull is one flow)"),
    Kpi("PFC_frame_count", "pfc_frame_count", "frames",
        "the lossless agent's pauses, every port, over its life (--lossless only)"),
    Kpi("Link_utilization", "link_utilization", "%",
        "mean over switch ports' transmit; highest peak of any link direction"),
    Kpi("Packet_drop_rate", "packet_drop_rate", "ppm",
        "switch queue and port drops per million TCP segments the hosts sent"),
)  # fmt: skip
BY_NAME: Mapping[str, Kpi] = {k.name: k for k in KPIS}

_RECORDS: dict[str, type] = {
    "fabric_fraction": Quantiles,
    "tps_per_gpu": PerGpu,
    "kv_xfer_bandwidth": KvBandwidth,
    "link_utilization": MeanPeak,
}
_QUANTILES = ("ttft", "itl", "e2e_latency", "ttft_fabric", "itl_fabric", "kv_xfer_latency",
              "ep_alltoall_latency", "fabric_fct", "t_prefill", "t_transfer",
              "t_decode_init")  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class DraftKpis:
    """One run's KPIs by the draft's names (`KPIS`); None where the run has no figure."""

    ttft: Quantiles | None = None
    itl: Quantiles | None = None
    e2e_latency: Quantiles | None = None
    ttft_fabric: Quantiles | None = None
    itl_fabric: Quantiles | None = None
    fabric_fraction: Quantiles | None = None
    t_prefill: Quantiles | None = None
    t_transfer: Quantiles | None = None
    t_decode_init: Quantiles | None = None
    tps_input: float | None = None
    tps_output: float | None = None
    tps_per_gpu: PerGpu | None = None
    inference_goodput: float | None = None
    fabric_goodput: float | None = None
    kv_xfer_latency: Quantiles | None = None
    kv_xfer_bandwidth: KvBandwidth | None = None
    ep_alltoall_latency: Quantiles | None = None
    fabric_fct: Quantiles | None = None
    pfc_frame_count: int | None = None
    link_utilization: MeanPeak | None = None
    packet_drop_rate: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The KPIs with a figure, by the draft's names, in `KPIS` order."""
        out: dict[str, Any] = {}
        for k in KPIS:
            value = getattr(self, k.attr)
            if value is not None:
                out[k.name] = _plain(value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DraftKpis:
        """The KPIs from their JSON object; names it does not know are ignored (the older
        copy's `KV_BW`)."""
        values: dict[str, Any] = {}
        for k in KPIS:
            raw = data.get(k.name)
            if raw is None:
                continue
            kind = Quantiles if k.attr in _QUANTILES else _RECORDS.get(k.attr)
            values[k.attr] = kind(**raw) if kind is not None else raw
        return cls(**values)

    def rows(self) -> Iterator[tuple[str, str, float | None]]:
        """(draft name, what the number is, number) for every figure: a latency's p50 and p99,
        link utilization's mean and peak, and so on; the report's table."""
        for k in KPIS:
            value = getattr(self, k.attr)
            if value is None:
                continue
            if isinstance(value, PerGpu):
                yield k.name, f"output per decode GPU ({value.decode_gpus})", value.output
                yield k.name, f"input per prefill GPU ({value.prefill_gpus})", value.input
            elif hasattr(value, "__dataclass_fields__"):
                for f in fields(value):
                    yield k.name, f.name.replace("_", " "), getattr(value, f.name)
            else:
                yield k.name, "", value


def _plain(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    return value
