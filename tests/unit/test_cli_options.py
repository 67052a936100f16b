"""Every CLI flag that sets a config field comes from the field (`zcube_lab.core.options`): no
command re-declares one by hand, so no command's default can drift from its field's."""

from __future__ import annotations

import argparse
import ast
import json
from pathlib import Path

import pytest

from zcube_lab.cli import build_parser, main
from zcube_lab.core.options import flag_names
from zcube_lab.emulator.experiment.runconfig import RunConfig
from zcube_lab.serving.cluster import ClusterSpec
from zcube_lab.workloads.profiles import load_profile

CLI = Path(__file__).resolve().parents[2] / "zcube_lab" / "cli"
# Flags a command declares by hand that share a field's flag but mean something else there.
OWN_MEANING = {
    ("fabric.py", "--workload"): "repeatable: one structure table per profile",
    ("fabric.py", "--machines"): "a count of lab machines to split over, not their addresses",
    ("doctor.py", "--machines"): "the machines to check: no run is configured",
    ("serve.py", "--duration"): "how long the local cluster stays up, not a load's length",
}


def _hand_flags() -> set[tuple[str, str]]:
    """(file, flag) of every `add_argument("--flag", ...)` written in zcube_lab.cli."""
    out = set()
    for path in CLI.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and str(arg.value).startswith("--"):
                        out.add((path.name, str(arg.value)))
    return out


def test_no_command_declares_a_config_fields_flag_by_hand() -> None:
    fields = set(flag_names(RunConfig)) | set(flag_names(ClusterSpec))
    repeated = {(f, flag) for f, flag in _hand_flags() if flag in fields}
    assert repeated - set(OWN_MEANING) == set()


def _sub(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def test_serve_defaults_are_the_cluster_specs() -> None:
    """`serve --local` starts `ClusterSpec()`'s cluster (its --port was 8000 against the
    field's 0, a free port)."""
    from zcube_lab.core.options import from_args

    args = _sub("serve").parse_args(["--local"])
    assert from_args(ClusterSpec, args) == ClusterSpec()
    assert args.port == ClusterSpec().gateway_port == 0


def test_fabric_structure_table_takes_the_profiles_expert_parallelism(capsys) -> None:
    """`fabric --vs-full-size --workload production` places the profile's EP instances, as a
    run of it does (its --ep-servers defaulted to 1 before)."""
    ep = load_profile("production").expert_parallel
    assert ep is not None and ep.servers > 1
    assert main(["fabric", "--vs-full-size", "--workload", "production", "--json"]) == 0
    (table,) = json.loads(capsys.readouterr().out)
    assert table["scaled"]["layout"]["ep_servers"] == ep.servers
    assert main(["fabric", "--vs-full-size", "--workload", "production", "--ep-servers", "1",
                 "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)[0]["scaled"]["layout"]["ep_servers"] == 1


@pytest.mark.parametrize("command", ["run", "up", "compare", "sweep"])
def test_every_run_building_command_takes_dilation_and_the_profiles_options(command) -> None:
    flags = {s for a in _sub(command)._actions for s in a.option_strings}
    assert {"--dilation", "--lossless", "--no-lossless", "--workload", "--ep-servers"} <= flags


@pytest.mark.parametrize("command", ["run", "up", "fabric"])
def test_one_fabric_commands_take_the_size_compare_takes(command: str) -> None:
    """`--gpus N` on every command that builds a fabric, sized by the structure-keeping rule by
    default as `compare` sizes it (run, up and fabric built 4 GPUs a server at n=4 before); the
    old sizes by explicit options."""
    from zcube_lab.cli.commands.compare import variants_from_args
    from zcube_lab.cli.fabric_options import spec_from_args
    from zcube_lab.core.errors import ConfigError

    parser = _sub(command)
    base = ["--serve"] if command == "up" else []

    def spec(*argv: str) -> dict[str, object]:
        return dict(spec_from_args(parser.parse_args([*base, *argv])).params)

    _k, compared, _v, _b = variants_from_args(build_parser().parse_args(["compare"]))
    assert spec() == dict(compared["zcube"].params) == {"n": 4, "gpus_per_server": 2}
    assert {**spec("--fabric", "roft"), "spines": 2} == dict(compared["roft"].params)
    assert spec("--gpus", "64") == {"n": 8, "gpus_per_server": 2}
    assert spec("--n", "8") == spec("--gpus", "64")  # --n fixes the GPU count
    old = spec("--fabric", "roft", "--gpus-per-server", "4", "--servers-per-leaf", "4")
    assert (old["servers"], old["gpus_per_server"], old["servers_per_leaf"]) == (4, 4, 4)
    assert spec("--gpus-per-server", "4") == {"n": 4, "gpus_per_server": 4}
    with pytest.raises(ConfigError) as err:
        spec("--gpus", "16", "--n", "8")  # 64 GPU hosts, not 16
    assert err.value.field == "gpus"
