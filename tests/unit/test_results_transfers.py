"""Exact KV pull and all-to-all times from synthetic engine logs
(zcube_lab.emulator.results.fabric.transfers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zcube_lab.core.fabric.builders import build_roft, build_zcube
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.results.fabric.transfers import (
    ep_figures,
    kv_figures,
    pull_rate_bps,
    transfer_figures,
)


def _pull(took: float, size: int, ok: bool = True, src: str = "prefill-0") -> dict:
    return {"engine_id": src, "start": 100.0, "end": 100.0 + took, "ok": ok, "bytes": size}


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_pull_is_bounded_by_the_slower_nic() -> None:
    scale = Scale(nic_mbps=100)
    zcube = build_zcube(n=4)  # two 50 Mb/s ports per host
    assert pull_rate_bps(zcube, scale, "h0", "h5") == pytest.approx(100e6)
    roft = build_roft()
    assert pull_rate_bps(roft, scale, "h0", "h3") == pytest.approx(100e6)


def test_kv_figures_are_exact_quantiles_ratios_and_stalls() -> None:
    rate = 8e6  # 1 MB/s: a 100 kB pull takes 0.1 s ideally
    rows = [_pull(0.1 + 0.01 * i, 100_000) for i in range(9)]
    rows.append(_pull(1.05, 100_000))  # a retransmission timeout: 10.5 x ideal
    rows.append(_pull(0.05, 40_000, ok=False))  # a failed attempt: counted apart
    figs = kv_figures([("decode-4", r) for r in rows], lambda src, dst: rate)
    assert figs["kv_pulls"] == 10 and figs["kv_attempts_failed"] == 1
    assert figs["kv_xfer_p50_s"] == pytest.approx(0.145)
    assert figs["kv_xfer_max_s"] == pytest.approx(1.05)
    assert figs["kv_xfer_bytes_p50"] == 100_000
    assert figs["kv_xfer_ratio_p50"] == pytest.approx(1.45)
    assert figs["kv_xfer_ratio_max"] == pytest.approx(10.5)
    # stalled: slower than 2 x 0.1 s + 0.1 s = 0.3 s
    assert (figs["kv_pulls_rated"], figs["kv_pulls_stalled"]) == (10, 1)
    assert figs["kv_stalled_max_s"] == pytest.approx(1.05)


def test_an_unknown_rate_leaves_the_ratio_out_but_keeps_the_times() -> None:
    figs = kv_figures([("decode-4", _pull(2.0, 1000))], lambda src, dst: None)
    assert figs["kv_xfer_p99_s"] == 2.0
    assert figs["kv_xfer_ratio_p50"] is None
    assert (figs["kv_pulls_rated"], figs["kv_pulls_stalled"]) == (0, 0)


def test_ep_figures_time_clean_exchanges_and_count_failures() -> None:
    rows = [
        {"seconds": 0.002 * (i + 1), "bytes_sent": 4096, "bytes_received": 2048, "failures": 0}
        for i in range(5)
    ]
    rows.append({"start": 1.0, "end": 3.0, "bytes_sent": 0, "bytes_received": 0, "failures": 2})
    figs = ep_figures(rows)
    assert figs["alltoall_exchanges"] == 6
    assert figs["alltoall_p50_s"] == pytest.approx(0.006)
    assert figs["alltoall_max_s"] == pytest.approx(0.010)  # not the failed one's 2 s
    assert figs["alltoall_bytes_sent_p50"] == 4096
    assert figs["alltoall_bytes_received_p50"] == 2048
    assert figs["alltoall_exchange_failures"] == 2
    none = ep_figures(None)
    assert none["alltoall_p50_s"] is None and none["alltoall_exchange_failures"] is None


def test_transfer_figures_read_the_run_logs(tmp_path: Path) -> None:
    fabric, scale = build_zcube(n=4), Scale(nic_mbps=100)
    hosts = {"prefill-0": "h0", "decode-5": "h5"}
    # 1.25 MB at 100 Mb/s takes 0.1 s ideally
    _write(tmp_path / "kv-decode-5.jsonl", [_pull(0.11, 1_250_000), _pull(0.5, 1_250_000)])
    (tmp_path / "ep-h3.log").write_text("not an exchange log\n")
    figs = transfer_figures(tmp_path, fabric, scale, hosts)
    assert figs.kv_pulls == 2 and figs.kv_pulls_stalled == 1
    assert figs.kv_xfer_ratio_p50 == pytest.approx(3.05)
    assert figs.alltoall_exchanges == 0 and figs.alltoall_p50_s is None
    assert figs.alltoall_exchange_failures is None  # no exchange log: no figure
    _write(tmp_path / "ep-decode-5.jsonl", [{"seconds": 0.004, "bytes_sent": 10, "failures": 0}])
    assert transfer_figures(tmp_path, fabric, scale, hosts).alltoall_p50_s == 0.004


def test_the_fabric_fraction_is_per_request_pull_time_over_gateway_ttft() -> None:
    from zcube_lab.emulator.results.fabric.transfers import fabric_fraction

    pulls = [
        ("decode-4", {"request_id": "a", "start": 0.0, "end": 0.1, "ok": False}),
        ("decode-4", {"request_id": "a", "start": 0.2, "end": 0.3, "ok": True}),  # retried
        ("decode-5", {"request_id": "b", "start": 0.0, "end": 0.4, "ok": True}),
        ("decode-5", {"request_id": "c", "start": 0.0, "end": 0.4, "ok": True}),  # no TTFT
    ]
    gateway = [
        {"request_id": "a", "ttft_s": 1.0},
        {"request_id": "b", "ttft_s": 0.5},
        {"request_id": "c", "ttft_s": None},
        {"request_id": "d", "ttft_s": 0.5},  # no pull logged
    ]
    f = fabric_fraction(pulls, gateway)
    assert f["fabric_fraction_requests"] == 2
    assert f["fabric_fraction_p50"] == pytest.approx((0.2 + 0.8) / 2)
    assert f["fabric_fraction_p99"] == pytest.approx(0.2 + 0.99 * 0.6)


def test_ttft_parts_split_the_gateway_ttft_at_the_first_pull_start_and_last_pull_end() -> None:
    from zcube_lab.emulator.results.fabric.transfers import ttft_parts

    pulls = [
        # a: a failed attempt 1.2-1.3 and its retry 1.4-1.6: transfer 1.2 to 1.6
        ("decode-4", {"request_id": "a", "start": 1.2, "end": 1.3, "ok": False}),
        ("decode-4", {"request_id": "a", "start": 1.4, "end": 1.6, "ok": True}),
        ("decode-5", {"request_id": "b", "start": 10.5, "end": 10.6, "ok": True}),
        ("decode-5", {"request_id": "c", "start": 20.0, "end": 21.0, "ok": True}),
        ("decode-5", {"request_id": "e", "start": None, "end": 3.0, "ok": False}),
    ]
    gateway = [
        {"request_id": "a", "arrival": 1.0, "first_token": 1.7, "ttft_s": 0.7},
        {"request_id": "b", "arrival": 10.0, "first_token": 10.9, "ttft_s": 0.9},
        {"request_id": "c", "arrival": 20.5, "first_token": 21.5},  # pulled before it arrived
        {"request_id": "d", "arrival": 5.0, "first_token": 5.5},  # no pull logged
        {"request_id": "e", "arrival": 2.0, "first_token": 3.5},  # its one pull has no start
    ]
    f = ttft_parts(pulls, gateway)
    # a: prefill 0.2, transfer 0.4, decode_init 0.1; b: prefill 0.5, transfer 0.1, decode 0.3
    assert (f["ttft_parts_requests"], f["ttft_parts_left_out"]) == (2, 1)
    assert f["ttft_prefill_p50_s"] == pytest.approx(0.35)
    assert f["ttft_prefill_p99_s"] == pytest.approx(0.2 + 0.99 * 0.3)
    assert f["ttft_transfer_p50_s"] == pytest.approx(0.25)
    assert f["ttft_decode_init_p50_s"] == pytest.approx(0.2)
    assert f["ttft_decode_init_p99_s"] == pytest.approx(0.1 + 0.99 * 0.2)
    # the parts of one request sum to its TTFT at the gateway
    only_a = ttft_parts(pulls[:2], gateway[:1])
    total = sum(only_a[f"ttft_{p}_p50_s"] for p in ("prefill", "transfer", "decode_init"))
    assert total == pytest.approx(gateway[0]["ttft_s"])
    assert ttft_parts([], gateway)["ttft_prefill_p50_s"] is None
