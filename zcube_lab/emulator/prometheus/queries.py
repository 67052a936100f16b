"""What a run asks its Prometheus once the load is done: PromQL over the run window, written with
the metric names the components export (`zcube_lab.serving.vllm_metrics`,
`zcube_lab.controller.port_metrics`, `zcube_lab.workloads.client_metrics`), returning typed figures.

Every query is an instant query at the end of the run `t1` over a range of the window plus 5 s
(so the last scrape before the load started is inside it). Totals (bytes, failures, port
counters) are the exact sum of the raw samples' steps over that range (`counter_increase`), not
PromQL's `increase()`: that one scales the sampled increase up to the whole range, by a factor
that depends on where each target's scrapes fall (a few percent over a 30 s run), so two totals
taken from different targets would not compare (the fabric's bytes against the servers'). A
query that fails or finds no series gives None: a gap in the report, not a failed run. Port
peaks come from the same raw samples (a range vector at `t1`): the rate between consecutive
scrapes, at their own timestamps, so a peak is over one scrape interval and never resampled.

KV pull and all-to-all times are not asked here: they come exactly from the engines' logs
(`zcube_lab.emulator.results.fabric.transfers`), and the bucketed histograms stay for Grafana.

The functions take anything with the `PrometheusServer` query methods (`PromQuery`), so they
are tested with a fake.

Counters are named here as scraped: prometheus_client appends `_total` to a counter and
`_bucket`/`_sum` to a histogram's series.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from itertools import pairwise
from typing import Any, Protocol

from zcube_lab.controller import port_metrics as fabric_metrics
from zcube_lab.emulator.results.fabric.linkstats import PortKey, SwitchPortTraffic, peak_rate
from zcube_lab.emulator.results.run.summary import QUANTILES, ServerFigures, TransferFigures
from zcube_lab.serving import vllm_metrics as serving_metrics
from zcube_lab.workloads import client_metrics


class PromQuery(Protocol):
    """The query side of `PrometheusServer`."""

    def query(self, promql: str, time: float | None = None) -> list[dict[str, Any]]: ...

    def query_value(self, promql: str, time: float | None = None) -> float | None: ...


# Histograms whose quantiles the summary keeps: (name in summary.json, metric, scrape job or
# None for all jobs). Not the KV and all-to-all times: those are exact, from the logs.
LATENCIES: tuple[tuple[str, str, str | None], ...] = (
    ("gateway_ttft", serving_metrics.GATEWAY_TTFT, "gateway"),
    ("ttft", serving_metrics.TIME_TO_FIRST_TOKEN, "decode"),
    ("itl", serving_metrics.INTER_TOKEN_LATENCY, "decode"),
    ("client_ttft", client_metrics.TTFT, "loadgen"),
)
# The server figures taken from the exact transfer logs, by the same name.
EXACT_LATENCIES = ("kv_xfer", "alltoall")
# Totals over the window: (name in summary.json, series as scraped).
TOTALS: tuple[tuple[str, str], ...] = (
    ("kv_bytes", serving_metrics.NIXL_BYTES_TRANSFERRED + "_sum"),
    ("alltoall_bytes", serving_metrics.ALLTOALL_BYTES + "_total"),
    ("kv_failed", serving_metrics.NIXL_NUM_FAILED_TRANSFERS + "_total"),
    ("alltoall_failed", serving_metrics.ALLTOALL_FAILURES + "_total"),
    ("alltoall_subflows_retired", serving_metrics.EP_SUBFLOWS_RETIRED + "_total"),
)
# What `series.json` keeps for the report's plots (per-link heatmap, TTFT over time).
EXPORTED_SERIES = (
    fabric_metrics.PORT_TX_BYTES,
    fabric_metrics.PORT_RX_BYTES,  # host ports' rx: the host -> switch direction
    serving_metrics.GATEWAY_TTFT + "_bucket",
    client_metrics.TTFT + "_bucket",
)


def window_range(window_s: float) -> str:
    """The PromQL range covering a run window of `window_s` seconds."""
    return f"[{int(window_s) + 5}s]"


def histogram_quantile(metric: str, q: float, rng: str, job: str | None = None) -> str:
    """PromQL for the q-quantile (0-1) of histogram `metric` over `rng`, all engines pooled."""
    sel = f'{{job="{job}"}}' if job else ""
    return f"histogram_quantile({q}, sum by (le) (increase({metric}_bucket{sel}{rng})))"


def value(prom: PromQuery, promql: str, t1: float) -> float | None:
    """One value at `t1`, or None when the query fails or finds nothing."""
    try:
        return prom.query_value(promql, time=t1)
    except Exception:  # a missing series is a gap in the report, not a failed run
        return None


def server_figures(
    prom: PromQuery, t1: float, window_s: float, transfers: TransferFigures | None = None
) -> ServerFigures:
    """The servers' latency quantiles and transfer totals over the run window; the KV and
    all-to-all quantiles are the exact ones of `transfers` (None without it)."""
    rng = window_range(window_s)
    figures: dict[str, float | None] = {
        f"{name}_p{q}_s": value(prom, histogram_quantile(metric, q / 100, rng, job), t1)
        for name, metric, job in LATENCIES
        for q in QUANTILES
    }
    for name in EXACT_LATENCIES:
        for q in QUANTILES:
            key = f"{name}_p{q}_s"
            figures[key] = getattr(transfers, key) if transfers is not None else None
    for name, series in TOTALS:
        figures[name] = total_increase(prom, series, t1, window_s)
    return ServerFigures(**figures)


Samples = list[tuple[float, float]]


def counter_increase(values: Samples) -> float:
    """What a counter counted between its first and last sample: the sum of its steps, a step
    down being a restart from zero (the new value counts whole). No extrapolation."""
    total = 0.0
    for (_, a), (_, b) in pairwise(values):
        total += b - a if b >= a else b
    return total


def _raw(prom: PromQuery, metric: str, t1: float, window_s: float) -> list[dict[str, Any]]:
    return prom.query(f"{metric}{window_range(window_s)}", time=t1)


def _values(series: dict[str, Any]) -> Samples:
    return [(float(t), float(v)) for t, v in series.get("values") or ()]


def total_increase(prom: PromQuery, metric: str, t1: float, window_s: float) -> float | None:
    """What every series of a counter counted over the window, summed (`counter_increase`);
    None when the query fails or finds no series."""
    try:
        found = _raw(prom, metric, t1, window_s)
    except Exception:  # a missing series is a gap in the report, not a failed run
        return None
    if not found:
        return None
    return sum(counter_increase(_values(s)) for s in found)


def port_increase(prom: PromQuery, metric: str, t1: float, window_s: float) -> dict[PortKey, float]:
    """What a per-port counter counted over the window (`counter_increase`), by (switch, port);
    empty on failure."""
    return {key: counter_increase(v) for key, v in port_samples(prom, metric, t1, window_s).items()}


def port_samples(
    prom: PromQuery, metric: str, t1: float, window_s: float
) -> dict[PortKey, Samples]:
    """The raw (time, value) samples of a per-port counter over the window, by (switch, port);
    empty on failure."""
    try:
        series = _raw(prom, metric, t1, window_s)
    except Exception:
        return {}
    out: dict[PortKey, Samples] = {}
    for s in series:
        m = s.get("metric", {})
        if "switch" in m and "port" in m:
            values = _values(s)
            out[(m["switch"], int(m["port"]))] = sorted(values)
    return out


def sample_interval(*samples: dict[PortKey, Samples]) -> float | None:
    """The median time between consecutive samples of all series: the peaks' window."""
    gaps = [
        b[0] - a[0]
        for by_port in samples
        for values in by_port.values()
        for a, b in pairwise(values)
    ]
    return statistics.median(gaps) if gaps else None


def _peaks(samples: dict[PortKey, Samples]) -> dict[PortKey, float]:
    peaks = {key: peak_rate(values) for key, values in samples.items()}
    return {key: p for key, p in peaks.items() if p is not None}


def port_counters(prom: PromQuery, t1: float, window_s: float) -> SwitchPortTraffic:
    """The switch ports' counters (the controller's port stats) over the run window."""
    dropped: Iterable[str] = (fabric_metrics.PORT_TX_DROPPED, fabric_metrics.PORT_RX_DROPPED)
    tx = port_samples(prom, fabric_metrics.PORT_TX_BYTES, t1, window_s)
    rx = port_samples(prom, fabric_metrics.PORT_RX_BYTES, t1, window_s)
    return SwitchPortTraffic(
        tx_bytes={key: counter_increase(v) for key, v in tx.items()},
        rx_bytes={key: counter_increase(v) for key, v in rx.items()},
        drops=sum(sum(port_increase(prom, m, t1, window_s).values()) for m in dropped),
        tx_peak_bytes_per_s=_peaks(tx),
        rx_peak_bytes_per_s=_peaks(rx),
        peak_window_s=sample_interval(tx, rx),
        samples={"tx": tx, "rx": rx},
    )
