"""The BMWG draft's KPIs one run measured (zcube_lab.emulator.results.ietf.bmwg,
zcube_lab.emulator.results.ietf.kpis), under the draft's names: computed, left out without a figure,
in summary.json and back, and in
report.html's table (zcube_lab.emulator.results.ietf.kpitable)."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import pytest

from zcube_lab.emulator.results.ietf.bmwg import run_kpis
from zcube_lab.emulator.results.ietf.kpis import KPIS, DraftKpis, KvBandwidth, PerGpu, Quantiles
from zcube_lab.emulator.results.ietf.kpitable import kpi_rows, kpi_section
from zcube_lab.emulator.results.run.summary import (
    LosslessFigures,
    PortPauses,
    RunSummary,
    TransferFigures,
)
from zcube_lab.emulator.verdict.netstats import QueueFigures, TcpCounters

DATA = Path(__file__).parent / "data"
NAMES = {k.name for k in KPIS}


def _summary() -> RunSummary:
    return RunSummary.from_dict(json.loads((DATA / "summary-zcube.json").read_text()))


def _records() -> list[dict]:
    return [
        {"outcome": "ok", "sent_s": 0.5, "ttft_s": 0.4, "tpot_s": 0.02, "prompt_tokens": 100,
         "output_tokens": 10},
        {"outcome": "ok", "sent_s": 1.0, "ttft_s": 1.5, "tpot_s": 0.02, "prompt_tokens": 200,
         "output_tokens": 20},
        {"outcome": "error", "sent_s": 2.0, "prompt_tokens": 400, "output_tokens": 5},
        {"outcome": "ok", "sent_s": 12.0, "ttft_s": 0.1, "tpot_s": 0.01, "prompt_tokens": 800,
         "output_tokens": 40},  # after the window
    ]  # fmt: skip


def _transfers() -> TransferFigures:
    blank = {f.name: (0 if f.type == "int" else None) for f in fields(TransferFigures)}
    return TransferFigures(**{
        **blank, "kv_pulls": 5, "kv_xfer_p50_s": 0.004, "kv_xfer_p99_s": 0.02,
        "alltoall_p50_s": 0.0005, "alltoall_p99_s": 0.002, "kv_bytes_total": 4e9,
        "kv_xfer_total_s": 2.0, "alltoall_bytes_total": 1e9, "fabric_fraction_p50": 0.2,
        "fabric_fraction_p99": 0.6, "fabric_fraction_requests": 5,
        "ttft_prefill_p50_s": 0.05, "ttft_prefill_p99_s": 0.2, "ttft_transfer_p50_s": 0.004,
        "ttft_transfer_p99_s": 0.02, "ttft_decode_init_p50_s": 0.001,
        "ttft_decode_init_p99_s": 0.003, "ttft_parts_requests": 5, "ttft_parts_left_out": 0,
    })  # fmt: skip


def test_a_run_without_kv_ep_or_lossless_has_the_client_and_link_kpis_only() -> None:
    s = _summary()
    k = run_kpis(s, _records(), window_s=10.0).to_dict()
    assert set(k) <= NAMES
    assert k["TTFT"] == {"p50": pytest.approx(1000 * s.client.ttft_p50_s),
                         "p99": pytest.approx(1000 * s.client.ttft_p99_s)}  # fmt: skip
    assert k["ITL"]["p99"] == pytest.approx(1000 * s.client.itl_p99_s)
    assert k["E2E_latency"]["p50"] == pytest.approx(1000 * s.client.e2e_p50_s)
    assert k["TPS_input"] == pytest.approx((100 + 200) / 10.0)  # completed, sent in the window
    assert k["TPS_output"] == pytest.approx((10 + 20 + 5) / 10.0)  # every stream's tokens
    assert k["Inference_Goodput"] == pytest.approx((10 + 20) / 10.0)  # completed only
    u = s.fabric_stats.utilization
    assert k["Link_utilization"] == {"mean": pytest.approx(100 * u.link_util_mean),
                                     "peak": pytest.approx(100 * u.link_util_max)}  # fmt: skip
    for absent in ("TTFT_fabric", "Fabric_FCT", "ITL_fabric", "EP_alltoall_latency",
                   "fabric_fraction", "KV_xfer_bandwidth", "Fabric_Goodput", "PFC_frame_count",
                   "Packet_drop_rate", "TPS_per_GPU", "T_prefill", "T_transfer",
                   "T_decode_init"):  # fmt: skip
        assert absent not in k  # no figure in this run: left out, not zero


def test_transfer_lossless_and_drop_figures_are_the_fabric_kpis_in_the_drafts_units() -> None:
    s = _summary()
    health = replace(
        s.health,
        tcp={"h0": TcpCounters(out_segs=900_000, retrans_segs=100_000)},
        qdisc={"a0-eth3": QueueFigures(drops=7), "h0-eth0": QueueFigures(drops=50)},
    )
    lossless = LosslessFigures({"a0:3": PortPauses(4, 0.1), "b0:1": PortPauses(2, 0.05)},
                               6, None, None, None, None, 0.01, 0)  # fmt: skip
    s = replace(s, transfers=_transfers(), health=health, lossless=lossless, window_s=20.0,
                dilation=2.0, fabric_stats=replace(s.fabric_stats, drops=3.0))  # fmt: skip
    k = run_kpis(s, _records(), 10.0, {"prefill": 2, "decode": 6})
    assert k.ttft_fabric == Quantiles(pytest.approx(4.0), pytest.approx(20.0))  # ms
    assert (
        k.kv_xfer_latency
        == k.fabric_fct
        == Quantiles(pytest.approx(4000.0), pytest.approx(20000.0))
    )  # us
    assert k.itl_fabric == Quantiles(pytest.approx(0.5), pytest.approx(2.0))  # ms
    assert k.ep_alltoall_latency is not None and k.ep_alltoall_latency.p99 == pytest.approx(2e3)
    assert k.fabric_fraction == Quantiles(0.2, 0.6)
    # TTFT's parts in ms (modelled already: the summary's transfer times are undilated)
    assert k.t_prefill == Quantiles(pytest.approx(50.0), pytest.approx(200.0))
    assert k.t_transfer == Quantiles(pytest.approx(4.0), pytest.approx(20.0))
    assert k.t_decode_init == Quantiles(pytest.approx(1.0), pytest.approx(3.0))
    # 4 GB of pulls over the 10 modelled seconds (20 s of wall at k=2); 2 GB/s while pulling
    assert k.kv_xfer_bandwidth == KvBandwidth(pytest.approx(0.4), pytest.approx(2.0))
    assert k.fabric_goodput == pytest.approx(0.5)  # the all-to-all's 1 GB too
    assert k.pfc_frame_count == 6
    assert k.packet_drop_rate == pytest.approx((7 + 3) / 1e6 * 1e6)  # host NIC drops left out
    assert k.tps_per_gpu == PerGpu(pytest.approx(3.5 / 6), pytest.approx(30 / 2), 6, 2)


def test_the_kpis_round_trip_through_summary_json_and_reach_the_report(tmp_path: Path) -> None:
    s = _summary()
    kpis = run_kpis(replace(s, transfers=_transfers()), _records(), 10.0, {"decode": 3})
    run = replace(s, bmwg=kpis)
    run.write(tmp_path)
    back = RunSummary.read(tmp_path)
    assert back == run and back.bmwg == kpis
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["bmwg"]["TTFT_fabric"] == {"p50": pytest.approx(4.0), "p99": pytest.approx(20.0)}
    assert data["bmwg"]["TPS_per_GPU"]["decode_gpus"] == 3
    assert "bmwg" not in s.to_dict()  # an older run stays without the section
    assert DraftKpis.from_dict({"KV_BW": 1.0}) == DraftKpis()  # the older copy's name: ignored
    rows = kpi_rows([run, replace(run, bmwg=None)], [run.variant])
    assert rows[0][:3] == ["TTFT", "p50", "ms"]
    assert ["fabric_fraction", "p99", "ratio", "0.6"] in rows
    assert ["TPS_per_GPU", "output per decode GPU (3)", "tokens/s/GPU", "1.167"] in rows
    assert not any(r[0] == "TPS_per_GPU" and "prefill" in r[1] for r in rows)  # no prefill count
    html = "\n".join(kpi_section([run], [run.variant]))
    assert "draft-calabria-bmwg-ai-fabric-inference-bench-04" in html
    assert "ECN_marking_rate" in html


def test_a_loopback_run_with_no_tcp_readings_has_no_drop_rate_and_does_not_fail() -> None:
    s = _summary()
    health = replace(s.health, tcp=None, qdisc={"a0-eth3": QueueFigures(drops=7)})
    k = run_kpis(replace(s, health=health), _records(), window_s=10.0)
    assert k.packet_drop_rate is None  # nothing to divide by: left out, not a crash
