"""The link options of the CLI (--mtu, --queue-packets) and what `up` builds from them."""

from __future__ import annotations

import argparse

import pytest

from zcube_lab.cli.fabric_options import add_link_arguments, link_options_from_args
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.scale import Scale


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_link_arguments(parser.add_argument_group("lab"))
    return parser.parse_args(list(argv))


ZCUBE = build_fabric(FabricSpec.of("zcube", n=4))


def test_defaults_are_jumbo_frames_and_the_model() -> None:
    mtu, queue = link_options_from_args(parse(), ZCUBE, Scale())
    assert mtu == 9000
    assert queue.packets is None
    assert queue.limit(50, 200, mtu) == 64
    assert queue.host_packets == 1000


def test_auto_mtu_and_a_fixed_queue() -> None:
    mtu, queue = link_options_from_args(
        parse("--mtu", "auto", "--queue-packets", "64", "--host-queue-packets", "32"),
        ZCUBE,
        Scale(),
    )
    assert mtu == 6000  # 50 Mb/s ZCube ports: 0.96 ms per hop
    assert queue.limit(50, 200, mtu) == 64
    assert queue.host_packets == 32


def test_bad_values_are_refused() -> None:
    with pytest.raises(SystemExit):
        parse("--mtu", "jumbo")
    with pytest.raises(ConfigError, match="queue packets"):
        link_options_from_args(parse("--queue-packets", "1"), ZCUBE, Scale())


def test_up_serves_with_the_link_options_given() -> None:
    """`up --serve` builds `run`'s config, which carries the link options (refused before,
    when it built its own)."""
    import argparse

    from zcube_lab.cli.commands.up import add_arguments, serve_config

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = ["--serve", "--queue-packets", "32", "--host-queue-packets", "100", "--mtu", "1500"]
    config = serve_config(parser.parse_args(argv))
    assert (config.queue_packets, config.host_queue_packets, config.mtu) == (32, 100, 1500)
