"""`zcube-lab bmwg run 8.4` on real labs (issue 46): the smallest §8.4, one 10 ms trial on ZCube
and Clos through the CLI; each row carries every figure the draft's §8.4 names, the stuck
receiver's pause spread beyond its own ports, and with no cyclic buffer dependency in the
routes every pause cleared after the release (no deadlock, every transfer arrived). About 1-2
minutes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

KPIS = ("PFC_storm", "PFC_deadlock", "PAUSE_propagation_depth_hops", "zero_throughput_max_ms",
        "recovery_time_ms", "PFC_frame_count")  # fmt: skip


def test_one_storm_trial_on_zcube_and_clos_spreads_and_recovers(
    tmp_path: Path, lab_available: None
) -> None:
    cmd = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "8.4", "--fabrics",
           "zcube,clos", "--trials", "1", "--trial-seconds", "0.01",
           "--results", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "[2/2] §8.4 clos" in proc.stdout
    (path,) = tmp_path.glob("bmwg-*/bmwg.json")
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["sections"] == ["8.4"]
    assert {r["fabric"] for r in doc["rows"]} == {"zcube", "clos"}
    for row in doc["rows"]:
        f = row["figures"]
        assert all(k in f for k in KPIS), (row["fabric"], f)
        assert f["routing_cycle"] == 0
        # the stuck ports' feeders paused in turn: at least one hop, at most the diameter
        assert f["PFC_storm"] == 1 and 1 <= f["PAUSE_propagation_depth_hops"] <= 4
        assert f["PFC_frame_count"] >= f["ports_paused_storm"] >= 2
        # no cycle: every pause cleared within the bound, every transfer arrived
        assert f["PFC_deadlock"] == 0 and f["incomplete"] == 0
        assert 0 <= f["recovery_time_ms"] <= f["deadlock_bound_ms"]
        # a victim's longest wait is within the replay's span, and the traffic the storm held
        # was all delivered after the release
        assert 0 <= f["zero_throughput_max_ms"] < 3 * 10
        assert f["drain_time_ms"] is not None and f["drain_time_ms"] >= 0
