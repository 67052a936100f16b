"""The run's PromQL (zcube_lab.emulator.prometheus.queries) against a fake Prometheus: the queries,
built from the exported metric names, are the ones the runner has always sent, but the KV and
all-to-all histograms, whose quantiles now come exactly from the engines' logs; port peaks from
the counters' raw samples."""

from __future__ import annotations

from typing import Any

import pytest

from zcube_lab.emulator.prometheus.queries import (
    EXPORTED_SERIES,
    counter_increase,
    port_counters,
    server_figures,
)
from zcube_lab.emulator.results.fabric.transfers import ep_figures, kv_figures
from zcube_lab.emulator.results.run.summary import TransferFigures


class FakePrometheus:
    """Answers every query from a table; records what it was asked and when."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values
        self.asked: list[tuple[str, float | None]] = []

    def query(self, promql: str, time: float | None = None) -> list[dict[str, Any]]:
        self.asked.append((promql, time))
        answer = self.values.get(promql, [])
        if isinstance(answer, Exception):
            raise answer
        return answer

    def query_value(self, promql: str, time: float | None = None) -> float | None:
        self.asked.append((promql, time))
        answer = self.values.get(promql)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _quantile(metric: str, q: str, sel: str = "") -> str:
    return f"histogram_quantile({q}, sum by (le) (increase({metric}_bucket{sel}[35s])))"


def _points(values: list[float], start: float = 965.0) -> list[list[Any]]:
    return [[start + i, str(v)] for i, v in enumerate(values)]


def test_server_figures_ask_the_same_promql_as_before() -> None:
    gw = _quantile("zcube:gateway_time_to_first_token_seconds", "0.99", '{job="gateway"}')
    prom = FakePrometheus(
        {
            gw: 1.5,
            # two engines' histogram sums: their steps, summed
            "vllm:nixl_bytes_transferred_sum[35s]": [
                {"metric": {"engine": "0"}, "values": _points([0, 0, 1e7, 3e7, 3e7])},
                {"metric": {"engine": "1"}, "values": _points([5e6, 5e6, 1.5e7])},
            ],
            "zcube:ep_alltoall_bytes_total[35s]": [{"metric": {}, "values": _points([0, 1e5])}],
            "zcube:ep_alltoall_failures_total[35s]": RuntimeError("no series"),
        }
    )
    s = server_figures(prom, t1=1000.0, window_s=30.4)
    asked = [q for q, _ in prom.asked]
    assert asked[:3] == [
        _quantile("zcube:gateway_time_to_first_token_seconds", q, '{job="gateway"}')
        for q in ("0.5", "0.9", "0.99")
    ]
    assert _quantile("vllm:time_to_first_token_seconds", "0.5", '{job="decode"}') in asked
    assert _quantile("vllm:inter_token_latency_seconds", "0.9", '{job="decode"}') in asked
    assert not any("nixl_xfer_time" in q or "ep_alltoall_seconds" in q for q in asked)
    assert _quantile("zcube_client_ttft_seconds", "0.99", '{job="loadgen"}') in asked
    assert "vllm:nixl_num_failed_transfers_total[35s]" in asked
    assert "zcube:ep_subflows_retired_total[35s]" in asked
    assert not any(q.startswith("sum(increase(") for q in asked)  # totals are not extrapolated
    assert len(asked) == 4 * 3 + 5
    assert s.kv_xfer_p99_s is None and s.alltoall_p50_s is None  # no logs: no figure
    assert {t for _, t in prom.asked} == {1000.0}
    assert s.gateway_ttft_p99_s == 1.5 and s.kv_bytes == 4e7
    assert s.alltoall_failed is None  # a failed query is a gap, not a failed run
    assert s.kv_failed is None  # no series: a gap too
    assert s.ttft_p50_s is None
    assert s.reported_bytes == pytest.approx(4e7 + 1e5)


def test_a_counter_counts_its_steps_and_restarts_from_zero() -> None:
    assert counter_increase([]) == 0.0
    assert counter_increase([(0.0, 7.0)]) == 0.0  # one sample: nothing seen counted
    assert counter_increase([(0.0, 5.0), (1.0, 5.0), (2.0, 9.0)]) == 4.0
    # a restart (a step down) counts the new value whole
    assert counter_increase([(0.0, 5.0), (1.0, 9.0), (2.0, 3.0), (3.0, 4.0)]) == 4 + 3 + 1


def test_totals_are_not_scaled_by_where_the_scrapes_fall() -> None:
    """The same bytes, scraped at two phases of a 35 s range: PromQL's increase() would scale
    each by its own sampled span (the bug: the fabric's bytes 0.9994 of the servers' where
    headers make them more); the exact steps give the same total."""

    def port(offset: float) -> dict[str, Any]:
        values = [0.0] * 5 + [1e6 * i for i in range(1, 21)] + [2e7] * 6
        return {
            "metric": {"switch": "a0", "port": "1"},
            "values": _points(values, start=965.0 + offset),
        }

    early = port_counters(
        FakePrometheus({"zcube_port_rx_bytes_total[35s]": [port(0.0)]}), 1000.0, 30.4
    )
    late = port_counters(
        FakePrometheus({"zcube_port_rx_bytes_total[35s]": [port(3.9)]}), 1000.0, 30.4
    )
    assert early.rx_bytes == late.rx_bytes == {("a0", 1): 2e7}


def test_server_kv_and_alltoall_quantiles_are_the_exact_ones_from_the_logs() -> None:
    pulls = [("decode-1", {"ok": True, "start": 0.0, "end": t, "bytes": 1000}) for t in (1, 2, 3)]
    ep = [{"seconds": 0.01, "bytes_sent": 5, "bytes_received": 5, "failures": 0}]
    transfers = TransferFigures(**kv_figures(pulls, lambda a, b: None), **ep_figures(ep))
    s = server_figures(FakePrometheus({}), t1=1000.0, window_s=30.4, transfers=transfers)
    assert (s.kv_xfer_p50_s, s.kv_xfer_p99_s) == (2.0, pytest.approx(2.98))
    assert s.alltoall_p50_s == 0.01


def test_port_counters_key_by_switch_and_port_and_sum_drops() -> None:
    def series(switch: str, port: str, values: list[float]) -> dict[str, Any]:
        return {"metric": {"switch": switch, "port": port}, "values": _points(values, 990.0)}

    prom = FakePrometheus(
        {
            "zcube_port_tx_bytes_total[15s]": [series("a0", "5", [0, 4, 10]), {"metric": {}}],
            "zcube_port_rx_bytes_total[15s]": [series("a0", "1", [3, 10])],
            "zcube_port_tx_dropped_total[15s]": [series("a0", "5", [2, 3])],
            "zcube_port_rx_dropped_total[15s]": RuntimeError("down"),
        }
    )
    c = port_counters(prom, t1=1000.0, window_s=10.0)
    assert c.tx_bytes == {("a0", 5): 10.0}
    assert c.rx_bytes == {("a0", 1): 7.0}
    assert c.drops == 1.0
    assert not any(q.startswith("increase(") for q, _ in prom.asked)


def test_port_counters_without_samples_have_no_peak() -> None:
    c = port_counters(FakePrometheus({}), t1=1000.0, window_s=10.0)
    assert c.tx_bytes == {} and c.drops == 0.0
    assert c.tx_peak_bytes_per_s == {} and c.peak_window_s is None  # no samples: no peak


def test_port_peaks_come_from_the_raw_samples_of_both_counters() -> None:
    def samples(switch: str, port: str, values: list[float]) -> dict[str, Any]:
        points = [[990.0 + i, str(v)] for i, v in enumerate(values)]
        return {"metric": {"switch": switch, "port": port}, "values": points}

    prom = FakePrometheus(
        {
            "zcube_port_tx_bytes_total[15s]": [samples("a0", "5", [0, 100, 400, 500])],
            "zcube_port_rx_bytes_total[15s]": [samples("a0", "1", [0, 0, 0, 50])],
        }
    )
    c = port_counters(prom, t1=1000.0, window_s=10.0)
    assert c.tx_peak_bytes_per_s == {("a0", 5): 300.0}
    assert c.rx_peak_bytes_per_s == {("a0", 1): 50.0}  # idle, then busy: not merged
    assert c.peak_window_s == 1.0


def test_the_exported_series_are_the_report_plots() -> None:
    assert EXPORTED_SERIES == (
        "zcube_port_tx_bytes_total",
        "zcube_port_rx_bytes_total",
        "zcube:gateway_time_to_first_token_seconds_bucket",
        "zcube_client_ttft_seconds_bucket",
    )
