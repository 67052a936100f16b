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
