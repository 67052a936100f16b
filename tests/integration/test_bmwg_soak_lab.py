"""`zcube-lab bmwg run 13.3` on a real lab (issue 46): the smallest §13.3, one 20 s trial on
ZCube through the CLI; the link flapped at the midpoint for a second and came back, and the
trial carries the KPIs the draft names with figures that agree with its run's own records.
About 45 s here (2026-12-07).

One fabric (issue 48, suite time; before: ZCube and ROFT, 90 s). Left to unit tests: each
fabric's own link and its flap (tests/unit/test_bmwg_soak.py::
test_the_section_flaps_each_fabric_s_own_link_and_prints_the_draft_s_parameters, ROFT's
leaf6-spine0 among them; tests/unit/test_bmwg_linkfail.py::
test_every_16_gpu_fabric_loses_one_link_into_its_decode_hosts_switch) and the comparison of the
headline figures, which this row carries (tests/unit/test_bmwg_soak.py::
test_the_page_part_has_a_row_per_fabric_and_names_what_is_not_represented)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def test_one_soak_trial_with_a_link_flap_on_zcube(tmp_path: Path, lab_available: None) -> None:
    from zcube_lab.core.bmwg.catalogue import test_of
    from zcube_lab.core.bmwg.report import HEADLINE

    cmd = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "13.3", "--fabrics",
           "zcube", "--trials", "1", "--trial-seconds", "20", "--retries", "0",
           "--results", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "estimated wall time" in out and "one link flap at 12 h" in out
    assert "[1/1] §13.3 zcube" in out
    (path,) = tmp_path.glob("bmwg-*/bmwg.json")
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["sections"] == ["13.3"] and doc["flap_at_s"] == 10.0
    want = {"zcube": "a3-b0"}
    assert {k: v["spec"] for k, v in doc["flapped_links"].items()} == want
    assert [r["fabric"] for r in doc["rows"]] == ["zcube"]
    for r in doc["rows"]:
        f, run = r["figures"], path.parent / r["run"]
        events = _jsonl(run / "faults.jsonl")
        assert [e["action"] for e in events] == ["down", "up"], events
        assert {e["fault"] for e in events} == {f"link {want[r['fabric']]}"}
        assert events[0]["planned_s"] == 10.0
        assert f["fault_held_s"] == pytest.approx(1.0, abs=0.5)
        # every KPI the test names has its figure
        for kpi in test_of("13.3").kpis:
            assert any(k.startswith(kpi) for k in f), kpi
        health = json.loads((run / "health.json").read_text())
        assert f["TCP_retransmissions"] == sum(v["retrans_segs"] for v in health["tcp"].values())
        assert 0 <= f["Buffer_utilization_pct"] <= 100 and r["buffer_peak_port"][0] in "abls"
        assert f["requests"] >= 60 and f["TTFT_p99_drift"] > 0  # 4 req/s for 20 s
        assert f["adjacency_flaps"] == 0  # a data link flapped, not a control session
        summary = json.loads((run / "summary.json").read_text())
        assert f["failed_requests"] == summary["faults"]["failed_requests"]
        assert f["KV_connection_failures"] == summary["faults"]["kv_failed_attempts"]
        if not f["unrecovered"]:
            assert f["recovery_time_s"] >= f["disruption_time_s"] >= 0
        # the figures the comparison judges, each with a value
        assert all(f[k] is not None for k in HEADLINE["13.3"] if k != "recovery_time_s"), f
    assert doc["comparison"] == []  # one fabric: nothing to compare with
