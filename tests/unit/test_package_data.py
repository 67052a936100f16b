"""What the library reads at run time ships with it or lives in this machine's state folder,
never in the source tree's bench/ (an installed copy has none): the dilation ladder is package
data, the datapath measurement a machine's state; without one the lab says so."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

from zcube_lab.emulator.lab import datapath_ceiling
from zcube_lab.emulator.lab.datapath_ceiling import (
    DEFAULT_CEILING_MBPS,
    DatapathResults,
    Measurement,
    UnmeasuredCeiling,
)
from zcube_lab.emulator.results.run.dilation import LADDER_FILE, ladder_note, read_ladder

REPO = Path(__file__).resolve().parents[2]
LIBRARY = ("zcube_lab", "zcube_lab.cli", "controller", "emulator", "serving", "workloads")


def bench_paths(source: str) -> list[int]:
    """The lines of `source` that build a path into bench/ (`x / "bench"`, `Path("bench/...")`,
    `x.joinpath("bench", ...)`)."""

    def names_bench(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and (
            node.value == "bench" or str(node.value).startswith("bench/")
        )

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if names_bench(node.left) or names_bench(node.right):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and any(names_bench(a) for a in node.args):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
            if name in ("Path", "joinpath", "open"):
                lines.append(node.lineno)
    return lines


def test_the_library_builds_no_path_into_bench() -> None:
    found = [
        f"{p.relative_to(REPO)}:{line}"
        for package in LIBRARY
        for p in sorted((REPO / package).rglob("*.py"))
        for line in bench_paths(p.read_text())
    ]
    assert found == [], "ship it as package data or read it from the state folder: " + ", ".join(
        found
    )
    caught = ['p = ROOT / "bench" / "results" / "x.json"', 'p = Path("bench/results/x.json")']
    assert all(bench_paths(src) for src in caught)
    assert not bench_paths('msg = "run bench/datapath.py"')


def _package_data() -> dict[str, list[str]]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return pyproject["tool"]["setuptools"]["package-data"]


def test_the_ladder_ships_in_the_package_and_is_declared() -> None:
    package = REPO / "zcube_lab"
    path = Path(str(LADDER_FILE))
    assert package in path.parents
    rel = path.relative_to(package)
    assert any(rel.match(glob) for glob in _package_data()["zcube_lab"])
    ladder = read_ladder()
    assert ladder is not None and ladder["validated_k"] and "rows" not in ladder
    # What bench/dilation_ladder.py recorded, verdict for verdict.
    record = json.loads((REPO / "bench" / "results" / "dilation_ladder.json").read_text())
    assert ladder["validated_k"] == record["validated_k"]
    assert "the ladder validated" in ladder_note(2.0, ladder)


def test_the_measurement_lives_in_the_state_folder_and_moves_with_it(tmp_path: Path) -> None:
    assert REPO not in datapath_ceiling.RESULTS_PATH.parents
    code = "from zcube_lab.emulator.lab.datapath_ceiling import RESULTS_PATH; print(RESULTS_PATH)"
    env = {**os.environ, "ZCUBE_LAB_MEASUREMENTS": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == str(tmp_path / "datapath.json")


def _results(machine: str) -> DatapathResults:
    return DatapathResults(
        machine_id=machine,
        cores=2,
        measured_at="2026-12-01T05:00:00+00:00",
        seconds=60.0,
        bridges=1,
        points=(Measurement(9000, 1, 1.9, 26_000),),
    )


def test_the_default_ceiling_is_stated_where_it_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "datapath.json"
    monkeypatch.setattr(datapath_ceiling, "RESULTS_PATH", path)
    monkeypatch.setattr(datapath_ceiling, "machine_id", lambda: "m1")
    with pytest.warns(UnmeasuredCeiling, match=f"500 Mb/s: default, not measured: no {path}"):
        ceiling = datapath_ceiling.datapath_ceiling(9000)
    assert ceiling.mbps == DEFAULT_CEILING_MBPS and not ceiling.measured
    assert "bench.datapath" in ceiling.source  # how to measure it
    _results("m2").write(path)
    with pytest.warns(UnmeasuredCeiling, match="measured on another machine"):
        datapath_ceiling.datapath_ceiling(9000)
    _results("m1").write(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        measured = datapath_ceiling.datapath_ceiling(9000)
    assert measured.measured and measured.mbps == pytest.approx(1900)
