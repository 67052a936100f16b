"""`zcube-lab bmwg run 12.3` on a real lab (issue 46): the smallest §12.3, one trial of 10 s on
Clos through the CLI; the link chosen by role (the first of leaf3's two parallel links to spine0,
`leaf3-spine0#0`) failed and came back, and the trial's figures agree with its run's own summary
and records. About 36 s here (2026-12-07).

One fabric (issue 48, suite time; before: ZCube and Clos, 71 s). Clos, for the one fault of a
parallel link in a whole run; ZCube's link (a3-b0) fails in the same way in
tests/integration/test_bmwg_soak_lab.py. Left to unit tests in tests/unit/test_bmwg_linkfail.py:
each fabric's link (test_every_16_gpu_fabric_loses_one_link_into_its_decode_hosts_switch) and
the comparison of the headline figures
(test_the_comparison_judges_the_headline_figures_and_an_untrusted_run_is_out_of_reach)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def test_one_link_failure_trial_on_clos(tmp_path: Path, lab_available: None) -> None:
    from zcube_lab.core.bmwg.linkfail import fault_timing

    cmd = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "12.3", "--fabrics",
           "clos", "--trials", "1", "--trial-seconds", "10", "--retries", "0",
           "--results", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "estimated wall time" in out and "draft: 20 of >= 60 s | here: 1 of 10 s" in out
    assert "[1/1] §12.3 clos" in out
    (path,) = tmp_path.glob("bmwg-*/bmwg.json")
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["sections"] == ["12.3"] and doc["policy"] == "ff"
    at, span = fault_timing(10)
    want = {"clos": "leaf3-spine0#0"}
    assert {k: v["spec"] for k, v in doc["failed_links"].items()} == want
    assert [r["fabric"] for r in doc["rows"]] == ["clos"]
    for r in doc["rows"]:
        f, run = r["figures"], path.parent / r["run"]
        summary = json.loads((run / "summary.json").read_text())
        faults = summary["faults"]
        # the fault happened: the link went down at its time, held its span, came back
        events = _jsonl(run / "faults.jsonl")
        assert [e["action"] for e in events] == ["down", "up"], events
        assert {e["fault"] for e in events} == {f"link {want[r['fabric']]}"}
        assert all(e["interfaces"] and not e["error"] for e in events)
        assert events[0]["planned_s"] == at and f["fault_held_s"] == pytest.approx(span, abs=0.5)
        assert summary["policy"] == "ff" and r["policy"] == "ff"
        assert [i["label"] for i in faults["injected"]] == [f"link {want[r['fabric']]}"]
        # the figures are the run's: phases as its fault report counts them
        for phase in ("before", "during", "after"):
            assert f[f"requests_{phase}"] == faults[f"requests_{phase}"], phase
            assert f[f"failed_{phase}"] == faults[f"failed_{phase}"], phase
            p99 = faults[f"ttft_p99_{phase}_s"]
            assert f[f"TTFT_p99_{phase}_ms"] == pytest.approx(p99 * 1e3), phase
            assert f[f"TTFT_p50_{phase}_ms"] <= f[f"TTFT_p99_{phase}_ms"]
        assert f["requests"] == sum(f[f"requests_{p}"] for p in ("before", "during", "after"))
        assert f["requests"] >= 30  # 4 req/s for 10 s
        assert f["failed_requests"] == faults["failed_requests"]
        assert f["KV_pulls_retried"] == faults["kv_retried"]
        assert f["requests_during"] > 0 and f["ttft_bound_ms"] >= f["TTFT_p99_before_ms"]
        if f["unrecovered"]:
            assert f["recovery_time_s"] is None
        else:
            assert f["recovery_time_s"] >= f["disruption_time_s"] >= 0
    assert doc["comparison"] == []  # one fabric: nothing to compare with
