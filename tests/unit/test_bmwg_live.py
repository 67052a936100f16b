"""The live sections' one runner (zcube_lab.emulator.bmwg.live): the registry builds every live
section from a config, and `run_section` against a fake `zcube-lab run` runs every case's
trials on every fabric with the section's own arguments, rows and document fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from zcube_lab.core.bmwg import catalogue as cat
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.emulator.bmwg import live


def test_every_live_section_is_a_runner_of_the_catalogue_and_builds_from_the_defaults() -> None:
    cfg = BmwgConfig()
    for section in live.SECTIONS:
        assert section in cat.RUNNERS
        sec = live.build(section, cfg)
        assert sec.section == section and sec.cases
        assert len({c.key for c in sec.cases}) == len(sec.cases)  # folder names differ
        for c in sec.cases:
            assert c.profile["arrival"]["rate"] > 0 and c.profile["model"] == "glm-5.1"


def test_a_new_results_folder_each_time_even_within_one_second(tmp_path: Path) -> None:
    a, b, c = (live.results_folder(tmp_path) for _ in range(3))
    assert len({a, b, c}) == 3 and all(p.is_dir() for p in (a, b, c))


def _section(said: list[Any]) -> live.LiveSection:
    cases = (
        live.LiveCase("a", "case=a", {"n": 1}, {"name": "wa"}, argv=("--x", "1"), shown="A"),
        live.LiveCase("b", "case=b", {"n": 2}, {"name": "wb"}),
    )

    def row(run: Path, fabric: str, case: live.LiveCase) -> dict[str, Any]:
        said.append((run.parent.name, fabric, case.key))
        summary = json.loads((run / "summary.json").read_text())
        return {"figures": {"TTFT_p99_ms": summary["v"]}, "extra": case.params["n"]}

    return live.LiveSection(
        section="6.1",
        cases=cases,
        row=row,
        headline=lambda f: f"p99 {f['TTFT_p99_ms']}",
        head={"mine": 7},
        notes=("a note",),
        fabric_argv=lambda fabric, _case: ["--fab", fabric],
        finish=lambda doc: {"rows_seen": len(doc["rows"])},
        closing=lambda doc: [f"closing over {len(doc['rows'])} rows"],
    )


def test_the_runner_runs_each_case_s_trials_on_each_fabric_and_writes_the_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **_kw: Any) -> Any:
        calls.append(argv)
        folder = Path(argv[argv.index("--results") + 1]) / "run-1"
        folder.mkdir(parents=True)
        seed = int(argv[argv.index("--seed") + 1])
        trusted = {"trustworthy": True, "health": {"reasons": []}}
        (folder / "summary.json").write_text(json.dumps({**trusted, "v": 100.0 + seed}))

        class Done:
            returncode, stderr = 0, ""

        return Done

    monkeypatch.setattr(live.subprocess, "run", fake_run)
    monkeypatch.setattr(
        "zcube_lab.emulator.bmwg.runner.software",
        lambda ingress: {"transport": "replaced", "ingress": ingress},
    )
    said: list[Any] = []
    progress: list[str] = []
    path = live.run_section(
        _section(said), ["zcube", "roft"], 16, 2, 10.0, 5, tmp_path, progress.append
    )
    assert len(calls) == 2 * 2 * 2  # cases x fabrics x trials
    first = calls[0]
    assert first[first.index("--fabric") + 1] == "zcube"
    assert first[-4:] == ["--x", "1", "--fab", "zcube"]  # the case's, then the fabric's
    assert calls[2][-2:] == ["--fab", "zcube"] and "--x" not in calls[2]
    workload = Path(first[first.index("--workload") + 1])
    assert json.loads(workload.read_text()) == {"name": "wa"}
    doc = json.loads(path.read_text())
    assert doc["complete"] and doc["mine"] == 7 and doc["notes"] == ["a note"]
    assert doc["software"]["transport"] == live.LIVE_TRANSPORT
    assert doc["software"]["ingress"] is False  # live labs: no ingress accounting, recorded so
    assert doc["rows_seen"] == 8 and "closing over 8 rows" in progress
    r = doc["rows"][1]
    assert (r["case"], r["fabric"], r["trial"], r["params"], r["extra"]) == (
        "case=a",
        "zcube",
        1,
        {"n": 1},
        1,
    )
    assert r["figures"] == {"TTFT_p99_ms": 106.0}  # seed 5 + trial 1
    assert r["run"] == "zcube-a-t1/run-1" and r["spoiled_by_machine"] == []
    assert said[0] == ("zcube-a-t0", "zcube", "a")
    assert {(s["case"], s["fabric"]) for s in doc["summary"]} == {
        (c, f) for c in ("case=a", "case=b") for f in ("zcube", "roft")
    }
    assert any(line.startswith("[8/8] §6.1 roft case=b trial 2: p99 106.0") for line in progress)
    assert any(line.startswith("[1/8] §6.1 zcube A trial 1: p99 105.0") for line in progress)
