"""`zcube-lab bmwg run 10.1` on a real lab (issue 46): the smallest §10.1, one 5 s trial of
1,024-token prompts on ZCube through the CLI; requests one at a time, every KPI the draft names
for it (TTFT, T_transfer and T_transfer/TTFT at p50, p95, p99, and the split) in a sane range and
agreeing with the run's own records. About 31 s here (2026-12-07).

One fabric (issue 48, suite time; before: ZCube and Clos, 57 s). Left to unit tests: the
comparison of the headline figures (tests/unit/test_bmwg_ttftlen.py::
test_the_comparison_judges_the_headline_and_refuses_overlapped_runs) and a verdict without
spread from one trial each (tests/unit/test_bmwg_catalogue.py::
test_versus_needs_intervals_that_do_not_overlap)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def test_one_ttft_by_length_trial_on_zcube(tmp_path: Path, lab_available: None) -> None:
    from zcube_lab.core.bmwg import ttftlen
    from zcube_lab.core.stats import quantile
    from zcube_lab.serving.models import decode_step_seconds, get_profile

    cmd = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "10.1", "--fabrics",
           "zcube", "--trials", "1", "--trial-seconds", "5", "--prompts", "1024",
           "--retries", "0", "--results", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "§10.1 parameters, draft -> this run" in out and "CFG-E" in out
    assert "[1/1] §10.1 zcube 1024 tokens trial 1" in out
    (path,) = tmp_path.glob("bmwg-*/bmwg.json")
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["sections"] == ["10.1"] and doc["configuration"] == "CFG-E"
    gap = doc["gaps_s"]["1024"]
    pull_s = get_profile("glm-5.1").kv_bytes_per_token * 1024 * 8 / 400e9
    step_ms = decode_step_seconds(get_profile("glm-5.1"), 1) * 1e3
    assert [r["fabric"] for r in doc["rows"]] == ["zcube"]
    for r in doc["rows"]:
        f, run = r["figures"], path.parent / r["run"]
        for name in ("TTFT", "T_prefill", "T_transfer", "T_decode_init"):
            qs = [f[f"{name}_p{q}_ms"] for q in ttftlen.QUANTILES]
            assert all(v is not None for v in qs) and qs == sorted(qs), (name, qs)
        ratios = [f[f"T_transfer_over_TTFT_p{q}"] for q in ttftlen.QUANTILES]
        assert ratios == sorted(ratios) and ratios[0] > 0 and ratios[-1] < 1
        # single requests: one every gap, never two in flight
        records = _jsonl(run / "requests.jsonl")
        assert f["in_flight_max"] == 1 and f["overlapped"] == 0
        assert f["repetitions"] == ttftlen.repetitions(5, gap) == len(records)
        assert all(r["outcome"] == "ok" for r in records)
        # TTFT is the client's, quantile for quantile
        ttft = [x["ttft_s"] for x in records]
        assert f["TTFT_p95_ms"] == pytest.approx(quantile(ttft, 0.95) * 1e3, abs=1e-6)
        # the split covers every request and sums to about TTFT (the gateway's, a hop inside)
        assert f["requests"] == len(records) and f["parts_left_out"] == 0
        parts = sum(f[f"{p}_p50_ms"] for p in ("T_prefill", "T_transfer", "T_decode_init"))
        assert parts == pytest.approx(f["TTFT_p50_ms"], rel=0.2)
        # a pull takes at least its ideal time; the first decode step about one step
        assert pull_s * 1e3 <= f["T_transfer_p50_ms"] < f["TTFT_p50_ms"]
        assert 0.9 * step_ms <= f["T_decode_init_p50_ms"] < 3 * step_ms
        assert f["TTFT_p99_ms"] < gap * 1e3
    assert doc["comparison"] == []  # one fabric: nothing to compare with
