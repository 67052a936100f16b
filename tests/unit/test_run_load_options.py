"""The run's and the load generator's options are declared once, on `RunConfig` and
`LoadConfig`: every flagged field away from its default goes to argv and parses back (through
the command's own parser) to an equal config."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import configargparse
import pytest

from zcube_lab.cli.commands import run as run_command
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.placement import LayoutSpec
from zcube_lab.core.fabric.queues import CHIPS, DEFAULT_CHIP
from zcube_lab.core.options import flag_names
from zcube_lab.emulator.experiment.runconfig import RunConfig, run_argv_of
from zcube_lab.workloads import locust_ext
from zcube_lab.workloads.loadconfig import LoadConfig, load_argv, load_config

ZCUBE = FabricSpec.of("zcube", n=4, gpus_per_server=2)  # the default size (structure-keeping)
# Three runs that together move every flagged field off its default (some exclude others:
# faults need k = 1, machines refuse faults, lossless and mrc; kv_warm refuses mrc).
RUNS = [
    RunConfig(
        fabric=ZCUBE, workload="chat", duration_s=30.5, rate=2.5, arrival="gamma",
        burstiness=0.5, seed=7, model="deepseek-v3", length_scale=0.25, nic_mbps=50.0,
        mtu="auto", queue_packets=128, host_queue_packets=500, buffer_model="bytes",
        switch_chip=next(c for c in sorted(CHIPS) if c != DEFAULT_CHIP),
        congestion_control="cubic", ovs_instances=2, lossless=True, policy="ff",
        faults=("link a0-b1 at 10s for 5s", "switch a1 at 20s for 2s"),
        layout=LayoutSpec(prefill_servers=2, decode_servers=1, ep_servers=2, layout="rail-aligned",
                          alltoall="all"),
        kv_streams=4, kv_warm=2, prefix_cache_hit_rate=0.5, kv_paths="shortest",
        decode_hotspot=2, hotspot_period_s=2.5, drain_s=12.0, results_root=Path("/tmp/r"),
        ep_ports="one", ep_per_node=False, ep_node_limit=2, ep_dbo=True, ep_frame_packets=4,
        kv_off=True,
    ),
    RunConfig(fabric=ZCUBE, dilation=2.0, kv_transport="mrc"),
    RunConfig(fabric=ZCUBE, machines=("198.19.254.1", "198.19.254.2")),
]  # fmt: skip


def _parse_run(argv: list[str]) -> RunConfig:
    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    return run_command.config_from_args(parser.parse_args(argv))


@pytest.mark.parametrize("cfg", RUNS)
def test_a_run_config_round_trips_through_the_run_flags(cfg: RunConfig) -> None:
    assert _parse_run(run_argv_of(**{f.name: getattr(cfg, f.name) for f in _flagged()})) == cfg


def _flagged() -> list[dataclasses.Field]:
    return [
        f
        for f in dataclasses.fields(RunConfig)
        if f.name not in ("fabric", "tag", "scrape_interval_s")
    ]


def test_every_flagged_run_field_is_moved_by_one_of_the_configs() -> None:
    base = RunConfig(fabric=ZCUBE)
    for f in _flagged():
        assert any(getattr(c, f.name) != getattr(base, f.name) for c in RUNS), f.name
    for sub in dataclasses.fields(LayoutSpec):
        assert any(getattr(c.layout, sub.name) != getattr(base.layout, sub.name) for c in RUNS)


def test_run_defaults_are_the_commands_and_unset_flags_take_the_profiles_hints() -> None:
    default = _parse_run([])
    assert (default.workload, default.seed) == ("coding-agent", 1)
    hinted = _parse_run(["--workload", "rail-aligned"])
    assert hinted.layout.layout == "rail-aligned" and hinted.prefix_cache_hit_rate == 0.75


LOAD = LoadConfig(
    workload="coding-agent", seed=3, arrival="staged", rate=1.5, burstiness=0.5,
    stages="2:5,3:10", model="glm", trace="/t.jsonl", length_scale=0.1, duration=12.5,
    metrics_port=9400, metrics_addr="0.0.0.0", metrics_linger=3.0, requests_out="/r.jsonl",
    summary_out="/s.json", max_in_flight=64, request_timeout=30.0, keep_running=True,
    dilation=2.0, plan_shard="1/2",
)  # fmt: skip


def _parse_load(argv: list[str]) -> LoadConfig:
    parser = configargparse.ArgumentParser()
    locust_ext.add_arguments(parser)
    return load_config(parser.parse_args(argv, env_vars={}))


def test_every_load_field_away_from_its_default_round_trips() -> None:
    for f in dataclasses.fields(LOAD):
        assert getattr(LOAD, f.name) != f.default, f.name
    assert _parse_load(load_argv(LOAD)) == LOAD
    assert _parse_load(load_argv(LoadConfig())) == LoadConfig()
    assert len(flag_names(LoadConfig)) == len(dataclasses.fields(LoadConfig))


def test_the_load_generator_keeps_its_own_defaults() -> None:
    assert (LoadConfig().workload, LoadConfig().seed) == ("chat", 0)
    assert load_argv(LoadConfig())[:4] == ["--workload", "chat", "--seed", "0"]
