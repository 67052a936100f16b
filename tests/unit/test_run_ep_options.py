"""The run's expert-parallel options (`RunConfig`'s EP fields): they reach every engine of an EP
instance through the plan, a bad value is refused by name with what is allowed, and `compare`
and `sweep` parse them like `run`."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from zcube_lab.cli.commands import compare as compare_command
from zcube_lab.cli.commands import sweep as sweep_command
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.placement import LayoutSpec
from zcube_lab.core.options import parse_with_file
from zcube_lab.emulator.experiment.plan import RunConfig, plan_run
from zcube_lab.serving import decode, prefill
from zcube_lab.serving.eptraffic import FRAME_PACKETS

ZCUBE = FabricSpec.of("zcube", n=4)
EP = LayoutSpec(prefill_servers=2, ep_servers=2)
LOGS = Path("/results/run-1/logs")


def _engine_configs(**options: object) -> dict[str, object]:
    plan = plan_run(RunConfig(fabric=ZCUBE, layout=EP, **options))  # type: ignore[arg-type]
    out = {}
    for launch in plan.role_launches(18000, LOGS):
        module = {"prefill": prefill, "decode": decode}.get(launch.argv[2].split(".")[-1])
        if module is None:
            continue
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        out[launch.name] = module.config_from_args(parse_with_file(parser, list(launch.argv[3:])))
    return out


def test_by_default_engines_use_every_port_and_the_profiles_wire() -> None:
    for cfg in _engine_configs().values():
        assert cfg.ep_ports == "all"  # type: ignore[attr-defined]
        assert cfg.ep_frame_packets == FRAME_PACKETS  # type: ignore[attr-defined]
        assert (cfg.ep_per_node, cfg.ep_node_limit, cfg.ep_dbo) == (None, None, None)  # type: ignore[attr-defined]


def test_the_runs_ep_options_reach_every_engine_of_an_ep_instance() -> None:
    configs = _engine_configs(
        ep_ports="one", ep_per_node=False, ep_node_limit=1, ep_dbo=True, ep_frame_packets=8
    )
    assert configs  # prefill and decode engines, each in a 2-server instance
    for name, cfg in configs.items():
        got = (cfg.ep_ports, cfg.ep_per_node, cfg.ep_node_limit, cfg.ep_dbo, cfg.ep_frame_packets)  # type: ignore[attr-defined]
        assert got == ("one", False, 1, True, 8), name
        # one port kept: the exchange's paths are each peer's first address only
        assert all(len(p) == 1 for p in cfg.ep_paths)  # type: ignore[attr-defined]


def test_engines_without_ep_peers_carry_no_ep_flags() -> None:
    plan = plan_run(RunConfig(fabric=ZCUBE, ep_ports="one", ep_dbo=False))
    for launch in plan.role_launches(18000, LOGS):
        assert "--ep-ports" not in launch.argv and "--ep-dbo" not in launch.argv


@pytest.mark.parametrize(
    ("options", "field", "allowed"),
    [
        ({"ep_ports": "both"}, "ep_ports", "all or one"),
        ({"ep_per_node": "maybe"}, "ep_per_node", "on or off"),
        ({"ep_dbo": 1.5}, "ep_dbo", "on or off"),
        ({"ep_node_limit": -1}, "ep_node_limit", ">= 0"),
        ({"ep_frame_packets": 0}, "ep_frame_packets", "1 to 4096"),
    ],
)
def test_a_bad_ep_option_is_named_with_what_is_allowed(
    options: dict[str, object], field: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as err:
        RunConfig(fabric=ZCUBE, **options)  # type: ignore[arg-type]
    assert err.value.field == field and allowed in err.value.allowed


@pytest.mark.parametrize("command", [compare_command, sweep_command])
def test_compare_and_sweep_take_the_ep_flags(command: object) -> None:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)  # type: ignore[attr-defined]
    flags = ["--ep-ports", "one", "--ep-dbo", "on", "--ep-per-node", "off", "--ep-node-limit", "2"]
    args = parser.parse_args(flags)
    base = compare_command.config_from_args(args, ZCUBE)
    assert (base.ep_ports, base.ep_dbo, base.ep_per_node, base.ep_node_limit) == (
        "one",
        True,
        False,
        2,
    )


def test_a_bad_on_off_flag_is_named() -> None:
    parser = argparse.ArgumentParser()
    compare_command.add_arguments(parser)
    with pytest.raises(ConfigError) as err:
        compare_command.config_from_args(parser.parse_args(["--ep-dbo", "yes"]), ZCUBE)
    assert err.value.field == "ep_dbo" and err.value.allowed == "on or off"
