"""`zcube-lab bmwg run 10.2` on a real lab (issue 46): the smallest §10.2, one 5 s trial on
ZCube through the CLI; the trial's gaps are every completed request's, its quantiles agree with
the run's own client summary, and a gap is about one decode step of the engine. About 1 minute."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def test_one_itl_trial_on_zcube_pools_every_gap_of_its_run(
    tmp_path: Path, lab_available: None
) -> None:
    from zcube_lab.core.bmwg import itl
    from zcube_lab.serving.models import decode_step_seconds, get_profile

    cmd = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "10.2", "--fabrics", "zcube",
           "--trials", "1", "--trial-seconds", "5", "--retries", "0",
           "--results", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "estimated wall time" in out and "§10.2 parameters, draft -> this run" in out
    assert "trials: 20 x 60 s -> 1 x 5 s" in out and "[1/1] §10.2 zcube 1 req/s trial 1" in out
    (path,) = tmp_path.glob("bmwg-*/bmwg.json")
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["sections"] == ["10.2"] and doc["output_tokens"] == 512
    (row,) = doc["rows"]
    f, run = row["figures"], path.parent / row["run"]
    records = [r for r in _jsonl(run / "requests.jsonl") if r["outcome"] == "ok"]
    assert f["requests"] == len(records) >= 2
    # every completed request streamed its 512 tokens: 511 gaps each, all pooled
    assert f["full_output_share"] == 1.0
    assert f["itl_samples"] == sum(r["output_tokens"] - 1 for r in records) == 511 * len(records)
    # the same pool and quantile as the run's own client summary
    client = json.loads((run / "summary.json").read_text())["client"]
    assert f["ITL_p50_ms"] == pytest.approx(client["itl_p50_s"] * 1e3, abs=1e-3)
    assert f["ITL_p99_ms"] == pytest.approx(client["itl_p99_s"] * 1e3, abs=1e-3)
    qs = [f[f"ITL_{q}_ms"] for q in itl.QUANTILES] + [f["ITL_max_ms"]]
    assert qs == sorted(qs)
    # a gap is a decode step: at least one step of a batch of one, and its median far below
    # the draft's 100 ms stall
    step_ms = decode_step_seconds(get_profile("glm-5.1"), 1) * 1e3
    assert step_ms * 0.9 <= f["ITL_p50_ms"] < 100
    assert f["TPOT_p50_ms"] == pytest.approx(f["ITL_mean_ms"], rel=0.25)
    assert 0 <= f["stall_share"] < 0.5
    assert row["itl_cdf_ms"][-1] == [pytest.approx(f["ITL_max_ms"], abs=1e-3), 1.0]
    assert doc["comparison"] == []  # one fabric: nothing to compare with
