"""`zcube-lab bmwg run 11.1` on a real lab (issue 46): the smallest §11.1, one 5 s trial at a
fifth of the cell's knee on ZCube through the CLI; the row carries every KPI the draft's test
names, in range of what the cell can do, and bmwg.json the fabric's SLO boundary. About 32 s
here (2026-12-07).

One fabric (issue 48, suite time; before: ZCube and ROFT, 59 s). Left to unit tests in
tests/unit/test_bmwg_throughput.py: the boundary over several fabrics and rates
(test_the_boundary_is_the_rate_below_the_first_a_trial_missed,
test_a_boundary_is_censored_when_no_rate_missed_and_none_when_the_lowest_did) and the
comparison's figures
(test_the_comparison_judges_throughput_goodput_latency_and_the_busiest_link)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]


def test_one_rung_on_zcube_carries_the_throughput_kpis_and_a_boundary(
    tmp_path: Path, lab_available: None
) -> None:
    from zcube_lab.core.bmwg import throughput as t111
    from zcube_lab.core.bmwg.catalogue import test_of
    from zcube_lab.serving.models import decode_step_seconds, get_profile, prefill_step_seconds

    cmd = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "11.1", "--fabrics",
           "zcube", "--trials", "1", "--trial-seconds", "5", "--tps-rates", "0.2",
           "--retries", "0", "--results", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "§11.1 parameters, draft -> this run" in out and "trials: 20 x 60 s -> 1 x 5 s" in out
    assert "§11.1 SLO boundary on zcube" in out
    (path,) = tmp_path.glob("bmwg-*/bmwg.json")
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["sections"] == ["11.1"] and doc["ladder"] == [0.2]
    rate = doc["rates"][0]
    assert [r["fabric"] for r in doc["rows"]] == ["zcube"]
    p = get_profile(t111.MODEL)
    for row in doc["rows"]:
        f = row["figures"]
        # every KPI the catalogue names for §11.1 is there, with a value
        for kpi in test_of("11.1").kpis:
            assert any(k.startswith(kpi) and f[k] is not None for k in f), kpi
        assert f["requests"] >= 5 and 0 < f["Request_Rate"] <= 3 * rate
        # the cell's tokens: 4,096 in and 64 out a request, goodput a part of the output
        assert f["TPS_input"] == pytest.approx(f["Request_Rate"] * t111.PROMPT_TOKENS)
        assert 0 < f["Inference_Goodput"] <= f["TPS_output"] <= 3 * rate * t111.OUTPUT_TOKENS
        # a request's TTFT holds its prefill at least; a gap a decode step
        assert f["TTFT_p99_ms"] >= prefill_step_seconds(p, t111.PROMPT_TOKENS) * 1e3
        assert f["ITL_p50_ms"] >= decode_step_seconds(p, 1) * 1e3 * 0.9
        assert f["slo_met"] == int(t111.met_slo(f["TTFT_p99_ms"], f["ITL_p99_ms"]))
        # KV pulls crossed the fabric: links in use, none above its rate on average
        assert 0 < f["Link_utilization_mean"] <= f["Link_utilization_max"] <= 100
        assert 0 < f["Trunk_utilization_max"] <= f["Link_utilization_max"]
        assert f["Link_utilization_peak"] >= f["Link_utilization_max"] * 0.5
    assert [b["fabric"] for b in doc["boundary"]] == ["zcube"]
    for b in doc["boundary"]:
        met = next(r for r in doc["rows"] if r["fabric"] == b["fabric"])["figures"]["slo_met"]
        assert (b["rate"] == rate) == bool(met) and b["censored"] == bool(met)
    assert doc["comparison"] == []  # one fabric: nothing to compare with
