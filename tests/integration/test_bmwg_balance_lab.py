"""§9.3 on a real lab (issue 46) through the live sections' runner: one 5 s trial of the mixed
scenario (KV pulls with EP all-to-all) under ECMP on ZCube; the row carries the draft's figures
(JFI, maximum and minimum link utilization, the oversubscription ratio) in range, the run moved
both kinds of traffic it names, and the figures agree with the run's own per-link counters.
About 34 s here (2026-12-07).

One scenario on one fabric (issue 48, suite time; before: each of the three scenarios on ZCube
and ROFT through the CLI, 196 s). The CLI hands every live section to this runner, and the other
tests of tests/integration/test_bmwg_*.py run it through the CLI. What is left out is pure and
unit-tested, in tests/unit/test_bmwg_balance.py unless named:
- each scenario's profile and run flags:
  test_the_scenarios_profiles_and_flags_shape_the_traffic_they_name
- a case per scenario and algorithm, with its flags:
  test_the_section_builds_a_case_per_scenario_and_algorithm_with_its_flags
- the tier of each fabric (ROFT's and Clos's leaf-spine links too), named as a run names them:
  test_the_tier_is_every_switch_to_switch_link_named_as_the_run_names_its_directions
- the comparison: test_the_comparison_judges_the_draft_s_figures_and_the_page_shows_every_case
- the EP-only scenario's one-byte KV pulls: tests/unit/test_production.py::
  test_kv_off_makes_prefill_move_one_byte, and the verdict not judging such pulls:
  tests/unit/test_verdict_limits.py::
  test_a_kv_off_run_s_one_byte_pulls_are_not_judged_and_the_verdict_says_why
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]


def test_the_mixed_scenario_under_ecmp_on_zcube(tmp_path: Path, lab_available: None) -> None:
    from zcube_lab.core.bmwg import balance as b93
    from zcube_lab.core.bmwg.config import BmwgConfig
    from zcube_lab.emulator.bmwg.balance import run_fabric
    from zcube_lab.emulator.bmwg.live import build, run_section

    cfg = BmwgConfig(fabrics="zcube", balance="ecmp", trials=1, trial_seconds=5.0, retries=0,
                     results=tmp_path)  # fmt: skip
    sec = build("9.3", cfg)
    assert [c.params["traffic"] for c in sec.cases] == ["kv", "ep", "mixed"]
    sec = replace(sec, cases=tuple(c for c in sec.cases if c.params["traffic"] == "mixed"))
    said: list[str] = []
    path = run_section(sec, cfg.fabric_kinds, cfg.gpus, cfg.trials, cfg.trial_seconds,
                       cfg.seed, cfg.results, progress=said.append,
                       retries=cfg.retries)  # fmt: skip
    assert "§9.3 parameters, draft -> this run:" in said
    assert "  trials: 20 x 60 s -> 1 x 5 s" in said
    assert any(line.startswith("[1/1] §9.3 zcube mixed ecmp trial 1: JFI") for line in said)
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["sections"] == ["9.3"] and doc["algorithms"] == ["ecmp"]
    (r,) = doc["rows"]
    f = r["figures"]
    where = f"zcube mixed: {f}"
    assert (r["fabric"], r["params"]) == ("zcube", {"traffic": "mixed", "balance": "ecmp"})
    assert f["links"] == 16, where  # the 16 A-B links of ZCube n=4
    assert f["oversubscription_ratio"] == 1.0, where
    assert 1 / 16 <= f["JFI"] <= 1.0, where
    assert 0 <= f["Link_utilization_min_pct"] <= f["Link_utilization_mean_pct"], where
    assert f["Link_utilization_mean_pct"] <= f["Link_utilization_max_pct"] < 100, where
    assert f["Link_utilization_max_pct"] > 0.1, where  # the tier carried the traffic
    assert f["max_mean_ratio"] == pytest.approx(
        f["Link_utilization_max_pct"] / f["Link_utilization_mean_pct"]
    )
    # the scenario moved both kinds it names: EP dispatches and whole KV pulls
    assert f["EP_bytes_lab"] > 1e5 and f["KV_bytes_lab"] > 1e6, where
    # the figures are the run's own counters: its busier direction per tier link
    run = path.parent / r["run"]
    link_util = json.loads((run / "summary.json").read_text())["link_util"]
    links = b93.tier_links(run_fabric(run))
    top = max(max(link_util[lk.forward]["mean"], link_util[lk.back]["mean"]) for lk in links)
    assert f["Link_utilization_max_pct"] == pytest.approx(100 * top)
    assert len(r["link_util_pct"]) == 16
    assert doc["comparison"] == []  # one fabric: nothing to compare with
