"""`zcube-lab up --serve`'s options without a lab: what conflicts, and ports that are taken."""

from __future__ import annotations

import socket

import pytest
from rich.console import Console

from zcube_lab.adapters.ports import port_free
from zcube_lab.cli import main
from zcube_lab.cli.commands.up import _port


@pytest.fixture(autouse=True)
def _no_lab(monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit test must never bring a lab up: fail loudly if validation lets one through."""
    from zcube_lab.emulator.experiment.live import LiveLab
    from zcube_lab.emulator.lab.network import Lab

    def refuse(*_a: object, **_k: object) -> None:
        pytest.fail("a unit test tried to start a real lab")

    monkeypatch.setattr(Lab, "start", refuse)
    monkeypatch.setattr(LiveLab, "serve", refuse)


def test_serve_and_cli_do_not_go_together(capsys) -> None:
    assert main(["up", "--fabric", "zcube", "--serve", "--cli"]) == 2
    assert "--serve and --cli" in capsys.readouterr().err


def test_a_bad_plan_duration_is_refused_before_anything_starts(capsys) -> None:
    assert main(["up", "--fabric", "zcube", "--serve", "--duration", "99999"]) == 2
    assert "duration" in capsys.readouterr().err


def test_a_taken_port_is_replaced_by_a_free_one() -> None:
    console = Console(stderr=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = int(sock.getsockname()[1])
        assert not port_free(taken)
        other = _port(taken, "127.0.0.1", "Prometheus", console)
    assert other != taken
    free = _port(other, "127.0.0.1", "Prometheus", console)
    assert free == other


def test_serve_takes_the_profiles_hints_as_run_does() -> None:
    """`up --serve --workload hotspot` serves hotspot's cluster: 2 prefill servers, the hot
    decode set and the prefix-cache hit rate, as `run` would."""
    import argparse

    from zcube_lab.cli.commands.up import add_arguments, serve_config

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config = serve_config(parser.parse_args(["--serve", "--workload", "hotspot"]))
    # hotspot's 2 prefill servers of 4, kept as a share of the default fabric's 8
    assert config.layout.prefill_servers == 4
    assert (config.decode_hotspot, config.hotspot_period_s) == (2, 5.0)
    assert config.prefix_cache_hit_rate == 0.9
    plain = serve_config(parser.parse_args(["--serve"]))
    assert (plain.layout.prefill_servers, plain.decode_hotspot) == (2, 0)  # 1 of 4, 2 of 8
    old = serve_config(
        parser.parse_args(["--serve", "--workload", "hotspot", "--gpus-per-server", "4"])
    )
    assert old.layout.prefill_servers == 2


def test_serve_keeps_the_profiles_expert_parallelism_and_lossless_mode() -> None:
    """`up --serve --workload production` is `run`'s production cell: EP across the profile's
    servers and the lossless mode (built by hand before, it lost both), and `up` takes the run
    options it lacked: --dilation, --lossless/--no-lossless."""
    import argparse

    from zcube_lab.cli.commands.run import add_arguments as run_arguments
    from zcube_lab.cli.commands.run import config_from_args
    from zcube_lab.cli.commands.up import add_arguments, serve_config
    from zcube_lab.emulator.experiment.runconfig import RunConfig, profile_fallback
    from zcube_lab.workloads.profiles import load_profile

    profile = load_profile("production")
    assert profile.expert_parallel is not None and profile.expert_parallel.servers > 1
    assert profile.lossless
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config = serve_config(parser.parse_args(["--serve", "--workload", "production"]))
    assert config.layout.ep_servers == profile.expert_parallel.servers
    assert config.layout.alltoall == profile.expert_parallel.alltoall
    assert config.lossless is True
    # the same config `run` builds for these options (its load length aside)
    run_parser = argparse.ArgumentParser()
    run_arguments(run_parser)
    ran = config_from_args(run_parser.parse_args(["--workload", "production"]))
    assert config.layout == ran.layout and config.lossless == ran.lossless
    assert ran.layout.ep_servers == profile_fallback("production", ran.fabric)["ep_servers"]
    dilated = serve_config(
        parser.parse_args(["--serve", "--workload", "production", "--dilation", "2"])
    )
    assert dilated.dilation == 2.0
    off = serve_config(parser.parse_args(["--serve", "--workload", "production", "--no-lossless"]))
    assert off.lossless is False
    assert isinstance(config, RunConfig) and config.duration_s == 3600.0
