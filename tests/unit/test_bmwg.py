"""The BMWG draft's KPIs one run measured (emulator.results.bmwg), under the draft's names."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest

from emulator.results.bmwg import KPI_SOURCES, run_kpis
from emulator.results.goodput import parse_slo
from emulator.results.summary import RunSummary, TransferFigures

DATA = Path(__file__).parent / "data"
SLO = parse_slo("ttft_p99=1s,tpot=50ms")


def _summary() -> RunSummary:
    return RunSummary.from_dict(json.loads((DATA / "summary-zcube.json").read_text()))


def _records() -> list[dict]:
    return [
        {"outcome": "ok", "sent_s": 0.5, "ttft_s": 0.4, "tpot_s": 0.02, "prompt_tokens": 100,
         "output_tokens": 10},  # good
        {"outcome": "ok", "sent_s": 1.0, "ttft_s": 1.5, "tpot_s": 0.02, "prompt_tokens": 200,
         "output_tokens": 20},  # misses ttft
        {"outcome": "error", "sent_s": 2.0, "prompt_tokens": 400, "output_tokens": 0},
        {"outcome": "ok", "sent_s": 12.0, "ttft_s": 0.1, "tpot_s": 0.01, "prompt_tokens": 800,
         "output_tokens": 40},  # after the window
    ]  # fmt: skip


def test_a_run_without_kv_or_ep_logs_has_the_client_and_link_kpis() -> None:
    s = _summary()
    k = run_kpis(s, _records(), SLO, window_s=10.0)
    assert set(k) <= set(KPI_SOURCES)
    assert k["TTFT"] == {"p50": pytest.approx(1000 * s.client.ttft_p50_s),
                         "p99": pytest.approx(1000 * s.client.ttft_p99_s)}  # fmt: skip
    assert k["ITL"]["p99"] == pytest.approx(1000 * s.client.itl_p99_s)
    assert k["E2E_latency"]["p50"] == pytest.approx(1000 * s.client.e2e_p50_s)
    assert k["TPS_input"] == pytest.approx((100 + 200) / 10.0)  # completed, sent in the window
    assert k["Inference_Goodput"] == pytest.approx(10 / 10.0)  # output tokens of good requests
    assert k["TPS_output"] == s.client.output_tokens_per_s
    assert k["KV_BW"] == pytest.approx(s.server.kv_bytes / s.window_s / 1e9)
    u = s.fabric_stats.utilization
    assert k["Link_utilization"] == {"mean": pytest.approx(100 * u.link_util_mean),
                                     "peak": pytest.approx(100 * u.link_util_max)}  # fmt: skip
    for absent in ("TTFT_fabric", "Fabric_FCT", "ITL_fabric", "EP_alltoall_latency"):
        assert absent not in k  # no transfer log in this run: left out, not zero


def test_kv_and_all_to_all_times_are_the_fabric_kpis_in_the_drafts_units() -> None:
    blank = {f.name: (0 if f.type == "int" else None) for f in fields(TransferFigures)}
    t = TransferFigures(**{**blank, "kv_pulls": 5, "kv_xfer_p50_s": 0.004, "kv_xfer_p99_s": 0.02,
                           "alltoall_p50_s": 0.0005, "alltoall_p99_s": 0.002})  # fmt: skip
    k = run_kpis(replace(_summary(), transfers=t), _records(), SLO, window_s=10.0)
    assert k["TTFT_fabric"] == {"p50": pytest.approx(4.0), "p99": pytest.approx(20.0)}  # ms
    assert k["Fabric_FCT"] == {"p50": pytest.approx(4000.0), "p99": pytest.approx(20000.0)}  # us
    assert k["ITL_fabric"] == {"p50": pytest.approx(0.5), "p99": pytest.approx(2.0)}  # ms
    assert k["EP_alltoall_latency"]["p99"] == pytest.approx(2000.0)  # us
