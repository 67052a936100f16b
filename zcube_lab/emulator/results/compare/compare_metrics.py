"""The figures set side by side in a comparison: `METRICS`, each a label, how to read it from a
run summary (`RunSummary`), whether lower is better (None: neither way, as a link's load or a
fabric's size), and which runs it is about (pure).

Quantiles interpolated within Prometheus histogram buckets say so in their label
(`bucket-interp.`) and come below the exact client figures they approximate.

A metric `only_with` `FAULT` is about runs with an injected fault (the fault report's phases,
retries and recovery times), one `only_with` `EP` about runs whose engines exchanged all-to-all
(expert parallelism); the rest are about every run. `shown_metrics(runs)` leaves out those whose
runs are not among the given ones, so a table of fault-free runs has no fault rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from zcube_lab.emulator.results.run.summary import (
    DirectedUtilization,
    FaultRecovery,
    FaultReport,
    RunSummary,
    TransferFigures,
)

Getter = Callable[[RunSummary], Any]

FAULT = "fault"
EP = "ep"


def fault_figure(get: Callable[[FaultReport], Any]) -> Getter:
    """A getter of the fault report; None in runs from before fault reports."""
    return lambda s: get(s.faults) if s.faults is not None else None


def recovery_figure(get: Callable[[FaultRecovery], Any]) -> Getter:
    """A getter of the fault report's per-phase and recovery figures; None in a run in which
    no fault held."""
    return lambda s: get(s.faults.recovery) if s.faults and s.faults.recovery else None


def transfer_figure(get: Callable[[TransferFigures], Any]) -> Getter:
    """A getter of the exact transfer figures; None in runs from before they were logged (their
    KV quantiles were bucketed, so they are not set beside exact ones)."""
    return lambda s: get(s.transfers) if s.transfers is not None else None


def directed_figure(get: Callable[[DirectedUtilization], Any]) -> Getter:
    """A getter of the per-direction link figures; None in runs that counted transmit only."""
    return lambda s: get(s.fabric_stats.directed) if s.fabric_stats.directed else None


def _tps(s: RunSummary, which: str) -> float | None:
    """Tokens/s per GPU from the run's BMWG KPIs: `output` per decode GPU, `input` per prefill
    GPU; None in runs without them."""
    tps = s.bmwg.tps_per_gpu if s.bmwg is not None else None
    return getattr(tps, which) if tps is not None else None


HOST_INTERFACE = re.compile(r"h\d+-")  # a GPU host's NIC (h<N>-eth<M>); the rest are switches'


def switch_queue_drops(s: RunSummary) -> int | None:
    """Packets the switch ports' queues dropped (the qdiscs the verdict read; host NICs left
    out): the modelled switches' congestion. None in runs without qdisc readings. The OpenFlow
    port counters (`fabric_stats.drops`) do not see these: the queue is below the datapath."""
    if not s.health.qdisc:
        return None
    return sum(q.drops for name, q in s.health.qdisc.items() if not HOST_INTERFACE.match(name))


class Metric(NamedTuple):
    """A compared figure: its label (at most 28 characters, to keep the console table within
    100 columns), its getter, its direction (None: no better way) and the runs it is about
    (`FAULT`, `EP`, or "")."""

    label: str
    get: Getter
    lower_is_better: bool | None
    only_with: str = ""


METRICS: tuple[Metric, ...] = (
    Metric("completed requests/s", lambda s: s.client.requests_per_s, False),
    Metric("output tokens/s", lambda s: s.client.output_tokens_per_s, False),
    # production's GPU throughput (the BMWG draft's TPS_per_GPU)
    Metric("decode tokens/s per GPU", lambda s: _tps(s, "output"), False),
    Metric("prefill tokens/s per GPU", lambda s: _tps(s, "input"), False),
    Metric("failed requests", lambda s: s.client.failed, True),
    Metric("TTFT p50 client (s)", lambda s: s.client.ttft_p50_s, True),
    Metric("TTFT p90 client (s)", lambda s: s.client.ttft_p90_s, True),
    Metric("TTFT p99 client (s)", lambda s: s.client.ttft_p99_s, True),
    Metric("TPOT p50 (s)", lambda s: s.client.tpot_p50_s, True),
    Metric("TPOT p99 (s)", lambda s: s.client.tpot_p99_s, True),
    Metric("ITL p50 (s)", lambda s: s.client.itl_p50_s, True),
    Metric("ITL p99 (s)", lambda s: s.client.itl_p99_s, True),
    # The gateway's histogram, interpolated within its buckets: approximate, below the exact.
    Metric("TTFT p50 bucket-interp. (s)", lambda s: s.server.gateway_ttft_p50_s, True),
    Metric("TTFT p99 bucket-interp. (s)", lambda s: s.server.gateway_ttft_p99_s, True),
    # Exact, from the engines' logs (the bucketed histograms are for Grafana).
    Metric("KV transfer p50 (s)", transfer_figure(lambda t: t.kv_xfer_p50_s), True),
    Metric("KV transfer p99 (s)", transfer_figure(lambda t: t.kv_xfer_p99_s), True),
    Metric("KV transfer max (s)", transfer_figure(lambda t: t.kv_xfer_max_s), True),
    Metric("KV transfer / ideal p50", transfer_figure(lambda t: t.kv_xfer_ratio_p50), True),
    Metric("KV transfer / ideal p99", transfer_figure(lambda t: t.kv_xfer_ratio_p99), True),
    Metric("KV pulls stalled", transfer_figure(lambda t: t.kv_pulls_stalled), True),
    Metric("KV bytes per pull p50", transfer_figure(lambda t: t.kv_xfer_bytes_p50), None),
    Metric("all-to-all p50 (s)", transfer_figure(lambda t: t.alltoall_p50_s), True, EP),
    Metric("all-to-all p99 (s)", transfer_figure(lambda t: t.alltoall_p99_s), True, EP),
    Metric(
        "all-to-all bytes/exchange", transfer_figure(lambda t: t.alltoall_bytes_sent_p50), None, EP
    ),
    # A link's load: neither way is better (a busier link may carry more of the work).
    Metric("link util max", lambda s: s.fabric_stats.utilization.link_util_max, None),
    Metric("link util mean", lambda s: s.fabric_stats.utilization.link_util_mean, None),
    Metric("busiest link util mean", directed_figure(lambda d: d.busiest_link_util_mean), None),
    Metric("busiest link util peak", directed_figure(lambda d: d.busiest_link_util_peak), None),
    Metric("link util peak max", directed_figure(lambda d: d.peak_link_util), None),
    Metric("host uplink util max", directed_figure(lambda d: d.host_uplink_util_max), None),
    Metric("switch queue drops", switch_queue_drops, True),
    # ovs-vswitchd's own port counters: a drop in a port's queue is not among them.
    Metric("OpenFlow port drops", lambda s: s.fabric_stats.drops, True),
    # Faults (docs/FAILURES.md): "-" in runs without an injected failure.
    Metric(
        "TTFT p99 before fault (s)", recovery_figure(lambda f: f.ttft_p99_before_s), True, FAULT
    ),
    Metric(
        "TTFT p99 during fault (s)", recovery_figure(lambda f: f.ttft_p99_during_s), True, FAULT
    ),
    Metric("TTFT p99 after fault (s)", recovery_figure(lambda f: f.ttft_p99_after_s), True, FAULT),
    Metric("failed during fault", recovery_figure(lambda f: f.failed_during), True, FAULT),
    Metric("KV transfers retried", fault_figure(lambda f: f.kv_retried), True, FAULT),
    Metric("KV subflows retired", fault_figure(lambda f: f.kv_lanes_retired), True, FAULT),
    Metric("all-to-all exchanges failed", lambda s: s.server.alltoall_failed, True, EP),
    Metric("KV bytes never delivered", fault_figure(lambda f: f.kv_bytes_lost), True, FAULT),
    Metric(
        "KV checksum failures caught", fault_figure(lambda f: f.kv_checksum_failures), True, FAULT
    ),
    Metric(
        "recovery: first hit KV (s)", recovery_figure(lambda f: f.recovery_kv_first_s), True, FAULT
    ),
    Metric(
        "recovery: last hit KV (s)", recovery_figure(lambda f: f.recovery_kv_all_s), True, FAULT
    ),
    Metric(
        "recovery: throughput (s)", recovery_figure(lambda f: f.recovery_throughput_s), True, FAULT
    ),
    Metric("emulated switches", lambda s: s.fabric_stats.switches, None),
    Metric("emulated switching Tb/s", lambda s: s.fabric_stats.switching_capacity_tbps, None),
)


def figure(summary: RunSummary, get: Getter) -> float | None:
    """The number `get` reads from a run summary, or None (missing, not a number, NaN)."""
    value = get(summary)
    if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
        return float(value)
    return None


def had_fault(summary: RunSummary) -> bool:
    """Whether a fault was injected in the run."""
    return summary.faults is not None and summary.faults.faults > 0


def had_ep(summary: RunSummary) -> bool:
    """Whether the run's engines exchanged all-to-all (logged, or counted by Prometheus in runs
    from before the exchange log)."""
    logged = summary.transfers is not None and summary.transfers.alltoall_exchanges > 0
    return logged or (summary.server.alltoall_bytes or 0) > 0


_ABOUT: dict[str, Callable[[RunSummary], bool]] = {FAULT: had_fault, EP: had_ep}


def shown_metrics(runs: Sequence[RunSummary]) -> tuple[Metric, ...]:
    """The metrics about these runs: those about every run, and a fault or EP metric when one of
    the runs had a fault or exchanged all-to-all, or counted something in it anyway (a KV
    transfer retried with no fault is worth seeing). Rows with no value in any run are for the
    table to drop."""
    return tuple(m for m in METRICS if _is_about(m, runs))


def _is_about(metric: Metric, runs: Sequence[RunSummary]) -> bool:
    if not metric.only_with or any(_ABOUT[metric.only_with](r) for r in runs):
        return True
    return any(figure(r, metric.get) for r in runs)  # not None or 0 in every run
