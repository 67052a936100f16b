"""The KPIs of the IETF BMWG draft on AI inference fabric benchmarking that a lab run measures,
computed from its summary and its client records (pure): `run_kpis` gives `DraftKpis`
(`zcube_lab.emulator.results.ietf.kpis`, which names the draft and lists the KPIs), `with_kpis` a
summary that carries them (its `bmwg` section: the runner's hook).

From what (docs/GLOSSARY.md, "The draft's KPIs", says it for readers):
- latencies (TTFT, ITL, E2E_latency) are the client's quantiles; TTFT_fabric, KV_xfer_latency
  and Fabric_FCT are the exact KV pull times (`TransferFigures`), ITL_fabric and
  EP_alltoall_latency the exact all-to-all exchange times, all in modelled time;
  fabric_fraction is per request (`zcube_lab.emulator.results.fabric.transfers.fabric_fraction`),
  and so are TTFT's parts T_prefill, T_transfer and T_decode_init (`...transfers.ttft_parts`, in
  modelled ms);
- token rates count the requests that arrived in the load window (`window_s`, `--duration`),
  over it: TPS_input the prompt tokens of completed requests, TPS_output the output tokens
  streamed to every request (a failed stream's tokens were generated too), Inference_Goodput
  the output tokens of requests that completed without error (the terminology draft's
  definition: no SLO); TPS_per_GPU divides TPS_output by the decode GPUs and TPS_input by the
  prefill GPUs (one engine per GPU host; absent when the GPU counts are not given);
- byte rates are over the run's window in modelled seconds (`window_s / dilation`): Fabric_Goodput
  the payload of completed KV pulls and clean all-to-all exchanges, KV_xfer_bandwidth the
  pulls' alone, and per pull (its bytes over its time, summed over the pulls);
- PFC_frame_count is the lossless agent's pauses (one pause stands for one PAUSE frame);
  Packet_drop_rate the switch ports' queue and port drops per million TCP segments the hosts
  sent (`out_segs + retrans_segs`, the health verdict's TCP counters);
- Link_utilization is the mean transmit utilization over the switch ports and the highest
  peak of any link direction.
A KPI without a figure (no KV log, no EP, no lossless agent, no TCP counters) is left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from zcube_lab.core.fabric.placement import Placement
from zcube_lab.emulator.results.compare.compare_metrics import switch_queue_drops
from zcube_lab.emulator.results.ietf.kpis import DraftKpis, KvBandwidth, MeanPeak, PerGpu, Quantiles
from zcube_lab.emulator.results.run.goodput import arrived_in_window
from zcube_lab.emulator.results.run.summary import RunSummary

Record = Mapping[str, Any]


def _quantiles(p50: float | None, p99: float | None, scale: float) -> Quantiles | None:
    """Two quantiles in seconds as the KPI's unit (x 1e3: ms, x 1e6: us); None if either is
    missing."""
    if p50 is None or p99 is None:
        return None
    return Quantiles(p50 * scale, p99 * scale)


def _tokens(records: Sequence[Record], key: str) -> int:
    return sum(int(r.get(key) or 0) for r in records)


def gpus_by_role(placement: Placement) -> dict[str, int]:
    """How many GPU hosts run each role (`prefill`, `decode`): one engine per GPU host."""
    return dict(Counter(e.role for e in placement.engines))


def run_kpis(
    summary: RunSummary,
    records: Sequence[Record],
    window_s: float,
    gpus: Mapping[str, int] | None = None,
) -> DraftKpis:
    """The draft's KPIs one run measured (see the module docstring); `records` are the
    client's, `window_s` the load window, `gpus` the GPU hosts per role."""
    c = summary.client
    t = summary.transfers
    kv = t is not None and t.kv_pulls > 0
    ep = t is not None and t.alltoall_p50_s is not None
    out: dict[str, Any] = {
        "ttft": _quantiles(c.ttft_p50_s, c.ttft_p99_s, 1e3),
        "itl": _quantiles(c.itl_p50_s, c.itl_p99_s, 1e3),
        "e2e_latency": _quantiles(c.e2e_p50_s, c.e2e_p99_s, 1e3),
    }
    if t is not None and kv:
        out["ttft_fabric"] = _quantiles(t.kv_xfer_p50_s, t.kv_xfer_p99_s, 1e3)
        out["kv_xfer_latency"] = out["fabric_fct"] = _quantiles(
            t.kv_xfer_p50_s, t.kv_xfer_p99_s, 1e6
        )
        if t.fabric_fraction_requests:
            out["fabric_fraction"] = _quantiles(t.fabric_fraction_p50, t.fabric_fraction_p99, 1)
        if t.ttft_parts_requests:
            for part in ("prefill", "transfer", "decode_init"):
                out[f"t_{part}"] = _quantiles(
                    getattr(t, f"ttft_{part}_p50_s"), getattr(t, f"ttft_{part}_p99_s"), 1e3
                )
    if t is not None and ep:
        out["itl_fabric"] = _quantiles(t.alltoall_p50_s, t.alltoall_p99_s, 1e3)
        out["ep_alltoall_latency"] = _quantiles(t.alltoall_p50_s, t.alltoall_p99_s, 1e6)
    if window_s > 0:
        sent = arrived_in_window(records, window_s)
        done = [r for r in sent if r.get("outcome") == "ok"]
        out["tps_input"] = _tokens(done, "prompt_tokens") / window_s
        out["tps_output"] = _tokens(sent, "output_tokens") / window_s
        out["inference_goodput"] = _tokens(done, "output_tokens") / window_s
        out["tps_per_gpu"] = _per_gpu(out["tps_output"], out["tps_input"], gpus or {})
    out.update(_bytes(summary))
    out["pfc_frame_count"] = summary.lossless.pauses if summary.lossless is not None else None
    out["link_utilization"] = _link_utilization(summary)
    out["packet_drop_rate"] = _drop_rate(summary)
    return DraftKpis(**out)


def with_kpis(
    summary: RunSummary, records: Sequence[Record], window_s: float, placement: Placement
) -> RunSummary:
    """`summary` with its `bmwg` section: the KPIs of the run (`run_kpis`)."""
    return replace(summary, bmwg=run_kpis(summary, records, window_s, gpus_by_role(placement)))


def _per_gpu(output: float, input_: float, gpus: Mapping[str, int]) -> PerGpu | None:
    decode, prefill = gpus.get("decode", 0), gpus.get("prefill", 0)
    if not decode and not prefill:
        return None
    return PerGpu(
        output=output / decode if decode else None,
        input=input_ / prefill if prefill else None,
        decode_gpus=decode,
        prefill_gpus=prefill,
    )


def _bytes(summary: RunSummary) -> dict[str, Any]:
    """Fabric_Goodput and KV_xfer_bandwidth in GB/s, over the window in modelled seconds."""
    t = summary.transfers
    window = summary.clock.modelled(summary.window_s)
    if t is None or t.kv_bytes_total is None or window <= 0:
        return {}
    per_pull = t.kv_bytes_total / t.kv_xfer_total_s if t.kv_xfer_total_s else None
    payload = t.kv_bytes_total + (t.alltoall_bytes_total or 0)
    return {
        "fabric_goodput": payload / window / 1e9,
        "kv_xfer_bandwidth": KvBandwidth(
            aggregate=t.kv_bytes_total / window / 1e9,
            per_pull=per_pull / 1e9 if per_pull is not None else None,
        ),
    }


def _link_utilization(summary: RunSummary) -> MeanPeak | None:
    u = summary.fabric_stats.utilization
    d = summary.fabric_stats.directed
    peak = d.peak_link_util if d is not None else None
    if u.link_util_mean is None:
        return None
    return MeanPeak(100 * u.link_util_mean, 100 * (peak if peak is not None else u.link_util_max))


def _drop_rate(summary: RunSummary) -> float | None:
    """Drops per million packets the hosts sent; None without qdisc or TCP readings."""
    queue = switch_queue_drops(summary)
    tcp = summary.health.tcp or {}
    sent = sum(c.out_segs + c.retrans_segs for c in tcp.values())
    if queue is None or sent <= 0:
        return None
    return (queue + summary.fabric_stats.drops) / sent * 1e6
