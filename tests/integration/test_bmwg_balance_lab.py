"""`zcube-lab bmwg run 9.3` on a real lab (issue 46): the smallest §9.3, one 5 s trial of each
scenario under ECMP on ZCube and ROFT through the CLI; every row carries the draft's figures
(JFI, maximum and minimum link utilization, the oversubscription ratio) in range, each
scenario moved the traffic it names, and the figures agree with the run's own per-link
counters. About 3.5 minutes (202 s here, 2026-12-07, other helpers' work beside it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.integration]


def test_each_scenario_under_ecmp_on_zcube_and_roft(tmp_path, lab_available: None) -> None:
    from zcube_lab.core.bmwg import balance as b93
    from zcube_lab.emulator.bmwg.balance import run_fabric

    cmd = [sys.executable, "-m", "zcube_lab.cli", "bmwg", "run", "9.3", "--fabrics",
           "zcube,roft", "--balance", "ecmp", "--trials", "1", "--trial-seconds", "5",
           "--retries", "0", "--results", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout
    assert "§9.3 parameters, draft -> this run" in out and "trials: 20 x 60 s -> 1 x 5 s" in out
    (path,) = tmp_path.glob("bmwg-*/bmwg.json")
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["sections"] == ["9.3"] and doc["algorithms"] == ["ecmp"]
    rows = doc["rows"]
    assert sorted((r["fabric"], r["params"]["traffic"]) for r in rows) == sorted(
        (f, s) for f in ("zcube", "roft") for s in ("kv", "ep", "mixed")
    )
    for r in rows:
        f, traffic = r["figures"], r["params"]["traffic"]
        where = f"{r['fabric']} {traffic}: {f}"
        assert f["links"] == 16, where  # 16 A-B links on ZCube n=4, 16 leaf-spine on ROFT
        assert f["oversubscription_ratio"] == 1.0, where
        assert 1 / 16 <= f["JFI"] <= 1.0, where
        assert 0 <= f["Link_utilization_min_pct"] <= f["Link_utilization_mean_pct"], where
        assert f["Link_utilization_mean_pct"] <= f["Link_utilization_max_pct"] < 100, where
        assert f["Link_utilization_max_pct"] > 0.1, where  # the tier carried the traffic
        assert f["max_mean_ratio"] == pytest.approx(
            f["Link_utilization_max_pct"] / f["Link_utilization_mean_pct"]
        )
        # each scenario moved what it names: the KV-off control pulls one byte a request
        if traffic == "kv":
            assert f["EP_bytes_lab"] == 0 and f["KV_bytes_lab"] > 1e6, where
        elif traffic == "ep":
            assert f["EP_bytes_lab"] > 1e5 and f["KV_bytes_lab"] < 1e4, where
        else:
            assert f["EP_bytes_lab"] > 1e5 and f["KV_bytes_lab"] > 1e6, where
        # the figures are the run's own counters: its busier direction per tier link
        run = path.parent / r["run"]
        link_util = json.loads((run / "summary.json").read_text())["link_util"]
        links = b93.tier_links(run_fabric(run))
        top = max(max(link_util[lk.forward]["mean"], link_util[lk.back]["mean"]) for lk in links)
        assert f["Link_utilization_max_pct"] == pytest.approx(100 * top)
        assert len(r["link_util_pct"]) == 16
    assert {c["figure"] for c in doc["comparison"]} <= set(b93_headline())
    assert all(c["verdict"] for c in doc["comparison"])


def b93_headline() -> tuple[str, ...]:
    from zcube_lab.core.bmwg.report import HEADLINE

    return HEADLINE["9.3"]
