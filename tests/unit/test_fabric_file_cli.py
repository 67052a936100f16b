"""The hooks that bring file fabrics into the rest of the lab: `build_fabric` of a `file` spec
(what the lab and the controller call), `compare`'s `file:PATH`, and `fabric --file` and
`cost --file` through the CLI's entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from zcube_lab.cli import main
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.files import file_spec, load_fabric
from zcube_lab.emulator.experiment.comparison import fabric_specs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "fabrics"
HPN = EXAMPLES / "hpn-pod.yaml"


def test_build_fabric_of_a_file_spec_survives_json(tmp_path: Path) -> None:
    spec = file_spec(HPN)
    again = FabricSpec.from_json(spec.to_json())  # as the lab hands it to the controller
    fabric = build_fabric(again)
    assert fabric.kind == "file" and fabric.hosts == load_fabric(HPN).fabric.hosts
    with pytest.raises(ConfigError, match="a fabric file"):
        build_fabric(FabricSpec.of("file"))


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(HPN.read_text())
    first = build_fabric(file_spec(path))
    path.write_text(HPN.read_text().replace("gbps: 200, count: 2", "gbps: 100, count: 2"))
    import os

    os.utime(path, ns=(1, 1))  # a different version stamp, whatever the clock's resolution
    second = build_fabric(file_spec(path))
    assert {lk.gbps for lk in first.links} != {lk.gbps for lk in second.links}


def test_compare_takes_file_fabrics_of_the_same_gpu_count() -> None:
    specs = fabric_specs(["zcube", "roft", f"file:{HPN}"], 16, spines=2)
    assert specs[f"file:{HPN}"].kind == "file"
    assert len(build_fabric(specs[f"file:{HPN}"]).hosts) == 16
    with pytest.raises(ConfigError, match="the file has 16"):
        fabric_specs(["zcube", f"file:{HPN}"], 64, spines=2)


def test_fabric_file_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fabric", "--file", str(HPN), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["hosts"] == 16 and out["summary"]["diameter_hops"] == 3
    assert out["summary"]["pairs_by_hops"] == {"1": 24, "3": 96}


def test_fabric_file_command_prints_paths(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fabric", "--file", str(EXAMPLES / "irregular.yaml"), "--paths", "h0", "h2"]) == 0
    out = capsys.readouterr().out
    assert "h0-eth0 > s0 > h2-eth1  (1 switch hop)" in out


def test_bad_file_is_one_error_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(HPN.read_text().replace('b: "p0agg{0..1}"', 'b: "p0agg{0..2}"'))
    assert main(["fabric", "--file", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err
    assert f"{bad}:" in err and "p0agg2 is not a declared switch [unknown-node]" in err


def test_cost_file_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cost", "--file", str(HPN), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["fabrics"]) == {"file", "roft", "clos", "zcube"}
    mine = out["fabrics"]["file"]
    # 8 ToRs + 4 aggregation switches; 32 NIC links and 16 x 2 uplinks, all 200G
    assert mine["switches"] == 12 and mine["links"] == 64
    assert mine["capex_switches"] == 12 * 30000  # the file's own price
    assert out["fabrics"]["zcube"]["links"] == 16 * 3  # the built-in model at 16 GPUs


def test_importer_assumptions_are_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gml = tmp_path / "zoo.gml"
    gml.write_text(
        "graph [ node [ id 0 ] node [ id 1 ] node [ id 2 ]"
        " edge [ source 0 target 1 ] edge [ source 1 target 2 ] edge [ source 2 target 0 ] ]"
    )
    assert main(["fabric", "--file", str(gml)]) == 0
    out = capsys.readouterr().out
    assert "assumed: no node says type: gpu and none has degree 1" in out
    # two degree-1 nodes are GPUs, and a GPU-GPU link is refused by name
    pair = tmp_path / "pair.gml"
    pair.write_text("graph [ node [ id 0 ] node [ id 1 ] edge [ source 0 target 1 ] ]")
    assert main(["fabric", "--file", str(pair)]) == 2
    assert "joins two GPUs" in capsys.readouterr().err


def test_structure_against_a_full_size_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from zcube_lab.core.fabric.builders import build_zcube
    from zcube_lab.core.fabric.files import write_fabric

    full = write_fabric(build_zcube(8, gpus_per_server=2), tmp_path / "z64.yaml")
    small = EXAMPLES / "zcube-16.yaml"
    assert main(["fabric", "--file", str(small), "--full-file", str(full), "--json"]) == 0
    rows = {r["metric"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    # ZCube n: a GPU meets 2(n-1) of its n*n-1 partners at 1 hop: 6/15 at n=4, 14/63 at n=8
    one = rows["GPU pairs at 1 hops"]
    assert (one["scaled"], one["full"]) == (40.0, 22.2)
    assert one["diff_points"] == 17.8 and one["beyond_goal"]
    assert rows["GPU pairs with 2 link-disjoint paths"]["diff_points"] == 0
    assert rows["bisection Gb/s per GPU"]["full"] == 400


def test_size_options_beside_a_file_fabric_apply_to_the_builtins_only() -> None:
    from zcube_lab.cli.fabric_options import sized_specs

    specs = fabric_specs(["zcube", f"file:{HPN}"], 16, spines=2)
    out = sized_specs(specs, {"gpus_per_server": 2})
    assert out[f"file:{HPN}"] == specs[f"file:{HPN}"]
    assert dict(out["zcube"].params)["gpus_per_server"] == 2
    with pytest.raises(ConfigError, match="GPU hosts: zcube 64, file:"):
        sized_specs(specs, {"gpus_per_server": 4, "n": 8})
