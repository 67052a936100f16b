"""The EP cell bench's modes: the port choice and the wire's modelling choices (issue 32)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pytest

from bench.ep_ports_cell import base_config, parse_mode


@pytest.mark.parametrize(
    ("mode", "given"),
    [
        ("all", {"ep_ports": "all"}),
        ("one", {"ep_ports": "one"}),
        ("all+dbo", {"ep_ports": "all", "ep_dbo": True}),
        ("all+nl1", {"ep_ports": "all", "ep_node_limit": 1}),
        ("one+dbo+nl4", {"ep_ports": "one", "ep_dbo": True, "ep_node_limit": 4}),
    ],
)
def test_a_mode_names_its_run_options(mode: str, given: dict[str, object]) -> None:
    assert parse_mode(mode) == given


@pytest.mark.parametrize("mode", ["all+fast", "all+nl", "all+nlx"])
def test_a_bad_mode_is_refused_naming_it(mode: str) -> None:
    with pytest.raises(SystemExit, match="--modes"):
        parse_mode(mode)


def test_the_modes_reach_the_run_config(tmp_path: Path) -> None:
    args = argparse.Namespace(prefill_servers=4, seed=1, gpus=16)
    config = base_config(args, "all+dbo+nl1", tmp_path)
    assert (config.ep_ports, config.ep_dbo, config.ep_node_limit) == ("all", True, 1)
    plain = base_config(args, "one", tmp_path)
    assert (plain.ep_ports, plain.ep_dbo, plain.ep_node_limit) == ("one", None, None)
