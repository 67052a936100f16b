"""The datapath ceiling behind the rate guard (zcube_lab.emulator.lab.datapath_ceiling) and
LabOptions' use of
it: measured figures when bench/datapath.py ran on this machine, else the stated default."""

from __future__ import annotations

from pathlib import Path

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.lab import datapath_ceiling
from zcube_lab.emulator.lab.datapath_ceiling import (
    DEFAULT_CEILING_MBPS,
    MININET_MAX_MBPS,
    DatapathCeiling,
    DatapathResults,
    Measurement,
    ceiling_from,
    check_nic_rate,
    load_results,
)
from zcube_lab.emulator.lab.options import LabOptions


def results(machine: str = "m1") -> DatapathResults:
    return DatapathResults(
        machine_id=machine,
        cores=2,
        measured_at="2026-12-01T05:00:00+00:00",
        seconds=60.0,
        bridges=1,
        points=(
            Measurement(1500, 1, 0.45, 37_000),
            Measurement(1500, 4, 0.62, 52_000),
            Measurement(9000, 1, 1.9, 26_000),
            Measurement(9000, 8, 1.4, 19_000),
        ),
    )


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "datapath.json"
    results().write(path)
    assert load_results(path) == results()
    assert DatapathResults.from_dict(results().to_dict()) == results()


def test_missing_or_broken_file_reads_as_none(tmp_path: Path) -> None:
    assert load_results(tmp_path / "absent.json") is None
    (tmp_path / "bad.json").write_text('{"machine_id": "x"}')
    assert load_results(tmp_path / "bad.json") is None


def test_total_is_the_best_flow_count_at_the_largest_mtu_not_above() -> None:
    r = results()
    assert r.total_mbps(9000) == pytest.approx(1900)
    assert r.total_mbps(6000) == pytest.approx(620)  # measured 1500 is the largest below
    assert r.total_mbps(1280) == pytest.approx(620)  # below all: the smallest measured


def test_the_ceiling_is_measured_only_on_the_machine_that_measured_it() -> None:
    measured = ceiling_from(results("m1"), 9000, "m1")
    assert measured.mbps == pytest.approx(1900)
    assert "measured" in measured.source
    other = ceiling_from(results("m1"), 9000, "m2")
    assert other.mbps == DEFAULT_CEILING_MBPS
    assert "another machine" in other.source
    none = ceiling_from(None, 9000, "m1")
    assert none.mbps == DEFAULT_CEILING_MBPS
    assert "not measured" in none.source


def test_guard_names_the_figure_and_its_source() -> None:
    check_nic_rate(500, DatapathCeiling(500, "default"))
    with pytest.raises(ConfigError, match=r"carries 500 Mb/s in total \(default, not measured"):
        check_nic_rate(501, DatapathCeiling(500, "default, not measured"))
    with pytest.raises(ConfigError):
        check_nic_rate(0, DatapathCeiling(500, "default"))
    # A faster datapath still cannot shape above Mininet's limit.
    check_nic_rate(MININET_MAX_MBPS, DatapathCeiling(1900, "measured"))
    with pytest.raises(ConfigError, match="Mininet shapes at most 1000"):
        check_nic_rate(1001, DatapathCeiling(1900, "measured"))


def test_lab_options_use_the_measured_figure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "datapath.json"
    monkeypatch.setattr(datapath_ceiling, "RESULTS_PATH", path)
    monkeypatch.setattr(datapath_ceiling, "machine_id", lambda: "m1")
    with pytest.raises(ConfigError, match="not measured"):
        LabOptions(scale=Scale(nic_mbps=600))
    results("m1").write(path)
    LabOptions(scale=Scale(nic_mbps=600))  # 1.9 Gb/s measured at MTU 9000
    with pytest.raises(ConfigError, match="carries 620 Mb/s"):
        LabOptions(scale=Scale(nic_mbps=700), mtu=1500)


def test_lab_options_queue_limits() -> None:
    fabric = build_fabric(FabricSpec.of("zcube", n=2))
    assert {s.packets for s in LabOptions().port_shapes(fabric).values()} == {64, 1000}
    assert LabOptions(shaped=False).port_shapes(fabric) == {}
