"""`zcube-lab bmwg run` on a real lab (issue 46): one tiny §8.2 trial on ZCube through the CLI,
its exit code, and the results JSON carrying the draft's figures for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]


def test_one_tiny_pfc_trial_on_zcube_writes_the_draft_s_figures(
    tmp_path: Path, lab_available: None
) -> None:
    cmd = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "8.2", "--fabrics", "zcube",
           "--trials", "2", "--trial-seconds", "0.001", "--n-burst", "4", "--within-us", "100",
           "--xoff-bytes", "1e5", "--results", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "estimated wall time" in proc.stdout
    assert "[2/2] §8.2 zcube" in proc.stdout
    (path,) = tmp_path.glob("bmwg-*/bmwg.json")
    assert f"results folder: {path.parent}" in proc.stdout
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["sections"] == ["8.2"] and doc["trials"] == 2
    assert doc["resolution"]["dilation"] == 120
    rows = doc["rows"]
    assert [r["trial"] for r in rows] == [0, 1]
    for r in rows:
        f = r["figures"]
        assert r["xoff"]["frames"] == 2  # 100 KB at S = 33.3
        assert f["incomplete"] == 0 and f["transfers"] == 4
        # four 16 MB into one 400 Gb/s NIC take at least 1.28 ms; a 2-frame XOFF pauses
        assert f["Fabric_FCT_p99_us"] >= 1280
        assert f["PFC_frame_count"] > 0 and f["PAUSE_duration_us"] > 0
        # the 1 MB other-class flow completed, and took at least its time alone
        assert f["HOL_delay_us"] is not None and f["HOL_delay_us"] >= 0
    (summary,) = doc["summary"]
    fct = summary["figures"]["Fabric_FCT_p99_us"]
    assert fct["n"] == 2 and fct["ci95_low"] <= fct["mean"] <= fct["ci95_high"]
    assert doc["comparison"] == []  # one fabric: nothing to compare with


def test_kv_throughput_and_latency_under_load_on_zcube(tmp_path: Path, lab_available: None) -> None:
    """§5.1 and §5.2, one tiny case each, two trials: the figures the draft names, in range."""
    cmd = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "5.1", "5.2", "--fabrics",
           "zcube", "--trials", "2", "--trial-seconds", "0.002", "--sizes", "1e6", "--qps", "2",
           "--loads", "0.25", "--results", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (path,) = tmp_path.glob("bmwg-*/bmwg.json")
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["sections"] == ["5.1", "5.2"]
    by = {r["section"]: [] for r in doc["rows"]}
    for r in doc["rows"]:
        by[r["section"]].append(r)
    for r in by["5.1"]:
        f = r["figures"]
        # 2 x 1 MB a round: 40 µs at 400 Gb/s, 2 ms hold 16 rounds (ROUNDS_MAX), 32 transfers
        assert f["transfers"] == 32 and f["incomplete"] == 0
        assert 0 < f["KV_xfer_bandwidth_GBps"] <= 50 * 1.05  # never past the 400 Gb/s NIC
    for r in by["5.2"]:
        f = r["figures"]
        assert f["incomplete"] == 0
        # a 1 MB message takes at least its 20 µs at line rate
        assert 20 <= f["KV_xfer_latency_p50_us"] <= f["KV_xfer_latency_p99_us"]
        assert f["background_offered_GBps"] == 7 * 0.25 * 50
        assert f["background_GBps"] > 0


def _kpis_carried(section: str, figures: dict) -> set[str]:
    """The test's KPIs (the catalogue's names) that a trial's figures carry, by name prefix."""
    from zcube_lab.core.bmwg.catalogue import test_of

    return {k for k in test_of(section).kpis if any(f.startswith(k) for f in figures)}


def test_three_tests_on_two_fabrics_carry_the_kpis_they_name(
    tmp_path: Path, lab_available: None
) -> None:
    """Issue 46's short form: §8.2 and §5.3 as replays and §6.1 as live serving runs, each on
    ZCube and ROFT, one trial; every trial's figures carry the KPIs the test's catalogue entry
    names, and the comparison has a verdict for each fabric pair. About 3 minutes."""
    replays = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "8.2", "5.3", "--fabrics",
               "zcube,roft", "--trials", "1", "--trial-seconds", "0.001", "--n-burst", "4",
               "--within-us", "100", "--xoff-bytes", "1e5", "--pairs", "2",
               "--results", str(tmp_path / "replays")]  # fmt: skip
    live = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "6.1", "--fabrics",
            "zcube,roft", "--trials", "1", "--trial-seconds", "8", "--prompts", "2048",
            "--results", str(tmp_path / "live")]  # fmt: skip
    docs = []
    for cmd in (replays, live):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        (path,) = (Path(cmd[-1])).glob("bmwg-*/bmwg.json")
        docs.append(json.loads(path.read_text()))
    rows = [r for d in docs for r in d["rows"]]
    assert {(r["section"], r["fabric"]) for r in rows} == {
        (s, f) for s in ("8.2", "5.3", "6.1") for f in ("zcube", "roft")
    }
    # Every KPI the catalogue names for the test, but §5.3's Link_utilization: a replay reads
    # no port counters over its span yet (said in the closing note of issue 46)
    want = {"8.2": {"PFC_frame_count", "PAUSE_duration", "Fabric_FCT", "HOL_delay"},
            "5.3": {"KV_xfer_bandwidth", "KV_xfer_latency", "Fabric_FCT", "JFI"},
            "6.1": {"TTFT", "TTFT_fabric", "T_prefill", "T_transfer", "T_decode_init",
                    "fabric_fraction"}}  # fmt: skip
    for r in rows:
        carried = _kpis_carried(r["section"], r["figures"])
        assert want[r["section"]] <= carried, (r["section"], r["fabric"], sorted(r["figures"]))
    for r in (r for r in rows if r["section"] == "6.1"):
        f = r["figures"]
        assert f["requests"] and f["requests"] >= 4, f
        # the medians of the parts are each a request's part: none exceeds TTFT's median much
        parts = [f[f"{p}_p50_ms"] for p in ("T_prefill", "T_transfer", "T_decode_init")]
        assert all(v > 0 for v in parts) and max(parts) <= f["TTFT_p50_ms"] * 1.1, f
        # 2,048 tokens of GLM-5.1 KV (184 MB) take at least 3.7 ms at 400 Gb/s
        assert f["T_transfer_p50_ms"] >= 3.6, f
    verdicts = {(c["section"], c["versus"]) for d in docs for c in d["comparison"]}
    assert {("8.2", "roft"), ("5.3", "roft"), ("6.1", "roft")} <= verdicts


def test_decode_worker_fairness_on_zcube_is_jain_over_the_decode_pool(
    tmp_path: Path, lab_available: None
) -> None:
    """§9.4 at its smallest: one 5 s trial at half the knee on ZCube. The trial's indexes are in
    (0, 1], over the 8 decode workers of its placement, and agree with the run's own records:
    the engines' token and KV-byte counters against their KV logs (every request pulls once and
    generates the profile's output tokens), the requests against the client's. About 30 s here
    (2026-12-07).

    One fabric (issue 48, suite time; before: ZCube and ROFT, 61 s); the comparison of the
    indexes and TTFT is unit-tested (tests/unit/test_bmwg_fairness.py::
    test_the_comparison_judges_each_index_and_ttft_and_the_page_says_a_tie_is_measured)."""
    from zcube_lab.core.bmwg import fairness as f94
    from zcube_lab.core.bmwg.trials import jain

    cmd = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "9.4", "--fabrics",
           "zcube", "--trials", "1", "--trial-seconds", "5", "--jfi-loads", "0.5",
           "--results", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "estimated wall time" in proc.stdout and "8, 16, 32, 64 -> 8" in proc.stdout
    assert "[1/1] §9.4 zcube load 0.5 trial 1" in proc.stdout
    (path,) = tmp_path.glob("bmwg-*/bmwg.json")
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["sections"] == ["9.4"] and doc["decode_workers"] == 8
    assert [r["fabric"] for r in doc["rows"]] == ["zcube"]
    for r in doc["rows"]:
        f, w = r["figures"], r["workers"]
        run = json.loads((path.parent / r["run"] / "config.json").read_text())
        decodes = [e["engine_id"] for e in run["placement"] if e["role"] == "decode"]
        assert f["decode_workers"] == len(decodes) == len(w["engines"]) == 8
        assert [f"decode-{e}" for e in w["engines"]] == decodes
        for k in ("JFI_decode", "JFI_kv", "JFI_busy"):
            assert 1 / 8 - 1e-9 <= f[k] <= 1.0, (k, f[k])
        tokens = w["decode"]
        pulled = w["kv_log"]["requests"]
        assert f["JFI_decode"] == jain(list(tokens.values()))
        for e in w["engines"]:
            # the engine's own counters against its KV log
            assert tokens[e] == f94.OUTPUT_TOKENS * pulled[e], (e, tokens, pulled)
            assert w["kv"][e] == w["kv_log"]["kv_bytes"][e]
        summary = json.loads(next((path.parent / r["run"]).glob("summary.json")).read_text())
        assert sum(pulled.values()) == summary["client"]["completed"] == f["requests"] > 0
    assert doc["comparison"] == []  # one fabric: nothing to compare with


def test_ep_alltoall_dispatch_on_two_fabrics_carries_latency_and_throughput(
    tmp_path: Path, lab_available: None
) -> None:
    """§7.1 at its smallest: 128 tokens a GPU at EP 4, one 1 ms trial on ZCube and ROFT. Every
    exchange's latency is at least its time alone at line rate, so a GPU's throughput is at
    most its NIC's 50 GB/s; the KPIs the test names are carried and compared."""
    from zcube_lab.core.bmwg import alltoall as a2a

    cmd = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "7.1", "--fabrics",
           "zcube,roft", "--trials", "1", "--trial-seconds", "0.001", "--tokens", "128",
           "--ep-sizes", "4", "--results", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=200, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "[2/2] §7.1 roft ep_size=4, tokens=128 trial 1" in proc.stdout
    (path,) = tmp_path.glob("bmwg-*/bmwg.json")
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["sections"] == ["7.1"]
    assert {r["fabric"] for r in doc["rows"]} == {"zcube", "roft"}
    ideal_us = a2a.ideal_s(128, 4) * 1e6  # 3 x 256 tokens x 21,728 B through 400 Gb/s: 334 µs
    for r in doc["rows"]:
        f = r["figures"]
        assert r["dilation"] >= 120 and r["recordings"]["ep"]["transfers"] == f["transfers"]
        assert {"EP_alltoall_latency", "EP_alltoall_bandwidth"} <= _kpis_carried("7.1", f)
        assert f["dispatch_bytes_per_peer"] == 256 * 7392
        if f["incomplete"]:
            continue  # a lost datagram leaves its exchange out; the comparison says so
        assert f["exchanges"] == f["exchanges_run"] >= 2
        assert ideal_us * 0.98 <= f["EP_alltoall_latency_p50_us"]
        assert f["EP_alltoall_latency_p50_us"] <= f["EP_alltoall_latency_p99_us"]
        assert 0 < f["EP_alltoall_bandwidth_GBps"] <= 50 * 1.02
    verdicts = {(c["figure"], c["versus"]) for c in doc["comparison"]}
    assert ("EP_alltoall_bandwidth_GBps", "roft") in verdicts
    assert ("EP_alltoall_latency_p99_us", "roft") in verdicts


def test_xpyd_smallest_split_on_zcube_places_x_prefill_and_y_decode(
    tmp_path: Path, lab_available: None
) -> None:
    """§6.2 at its smallest: one 5 s trial of 2P14D on ZCube. The run placed 2 prefill and 14
    decode engines, its figures are the run's own (T_transfer inside TTFT, goodput at the SLO
    no more than the tokens carried, per GPU over all 16), and the report names the fabric's
    best split. About 31 s here (2026-12-07).

    One fabric (issue 48, suite time; before: ZCube and ROFT, 61 s); unit-tested in
    tests/unit/test_bmwg_xpyd.py: the best split per fabric
    (test_best_split_is_the_highest_goodput_among_splits_that_met_the_slo_ties_named) and the
    comparison (test_the_comparison_judges_the_headline_figures_zcube_against_the_others)."""
    from zcube_lab.core.bmwg import xpyd as x62

    cmd = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "6.2", "--fabrics",
           "zcube", "--trials", "1", "--trial-seconds", "5", "--xpyd", "2",
           "--results", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "estimated wall time" in proc.stdout and "-> 2P14D of 16 GPU hosts" in proc.stdout
    assert "[1/1] §6.2 zcube 2P14D trial 1" in proc.stdout
    (path,) = tmp_path.glob("bmwg-*/bmwg.json")
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["sections"] == ["6.2"] and doc["splits"] == ["2P14D"]
    assert [r["fabric"] for r in doc["rows"]] == ["zcube"]
    for r in doc["rows"]:
        f = r["figures"]
        run = json.loads((path.parent / r["run"] / "config.json").read_text())
        roles = [e["role"] for e in run["placement"]]
        assert roles.count("prefill") == 2 and roles.count("decode") == 14
        summary = json.loads(next((path.parent / r["run"]).glob("summary.json")).read_text())
        assert f["requests"] == summary["client"]["completed"] > 0
        assert 0 < f["T_transfer_p50_ms"] < f["TTFT_p50_ms"]
        assert f["TPS_per_GPU"] == summary["bmwg"]["TPS_output"] / 16
        assert 0 <= f["goodput_per_GPU"] <= f["TPS_per_GPU"] + 1e-9
        assert r["slo"]["good"] <= r["slo"]["requests"]
        assert r["params"]["rate"] == pytest.approx(x62.LOAD * r["params"]["knee"], abs=1e-3)
    assert [b["fabric"] for b in doc["best_split"]] == ["zcube"]
    assert doc["comparison"] == []  # one fabric: nothing to compare with
