"""`zcube-lab bmwg list` and the checks `bmwg run` makes before any lab (no root needed)."""

from __future__ import annotations

import json

from zcube_lab.cli import main
from zcube_lab.core.bmwg.catalogue import TESTS


def test_list_prints_every_test_with_its_status_and_reason(capsys) -> None:
    assert main(["bmwg", "list"]) == 0
    out = capsys.readouterr().out
    for t in TESTS:
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(t.section + " "))
        assert t.name in line and t.status in line and t.reason in line


def test_list_json_carries_the_catalogue_and_the_parameter_tables(capsys) -> None:
    assert main(["bmwg", "list", "--json", "--params"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [t["section"] for t in data["tests"]] == [t.section for t in TESTS]
    assert {t["section"] for t in data["tests"] if t["bmwg_run"]} >= {"8.2", "7.4"}
    assert any(r[:2] == ["8.2", "PFC threshold"] for r in data["parameters"])


def test_run_refuses_an_unknown_section_and_a_not_representable_one(capsys) -> None:
    assert main(["bmwg", "run", "5.9"]) == 2
    assert "5.9" in capsys.readouterr().err
    assert main(["bmwg", "run", "8.1"]) == 2
    assert "marking qdisc" in capsys.readouterr().err


def test_run_refuses_bad_options_before_any_lab(capsys) -> None:
    assert main(["bmwg", "run", "8.2", "--trials", "0"]) == 2
    assert "trials" in capsys.readouterr().err
    assert main(["bmwg", "run", "8.2", "--fabrics", "torus"]) == 2
    assert "torus" in capsys.readouterr().err
