"""The production workload: its profile's hints reach the run (EP across 2 servers in both
roles, the default layout, the hot decode set, lossless on unless `--no-lossless`), the KV-off
control, and its all-to-all arithmetic against hand-computed answers."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from zcube_lab.cli.commands import run as run_command
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.experiment.plan import plan_run
from zcube_lab.emulator.experiment.runconfig import RunConfig, profile_fallback, run_argv_of
from zcube_lab.serving.eptraffic import EpTraffic
from zcube_lab.serving.models import get_profile
from zcube_lab.workloads.profiles import PROFILE_DIR, load_profile, parse_profile

ZCUBE = FabricSpec.of("zcube", n=4)  # 4 servers of 4 GPU hosts


def _parse(argv: list[str]) -> RunConfig:
    parser = argparse.ArgumentParser()
    run_command.add_arguments(parser)
    return run_command.config_from_args(parser.parse_args(argv))


def test_the_profile_is_coding_agent_with_ep_hotspot_and_lossless() -> None:
    prod, agent = load_profile("production"), load_profile("coding-agent")
    for f in ("model", "endpoint", "arrival", "prompt", "output", "session",
              "prefix_cache_hit_rate", "placement"):  # fmt: skip
        assert getattr(prod, f) == getattr(agent, f), f
    assert prod.expert_parallel is not None
    assert (prod.expert_parallel.servers, prod.expert_parallel.alltoall) == (2, "rail")
    assert prod.hotspot is not None and prod.hotspot.decodes == 2
    assert prod.lossless and not agent.lossless and agent.expert_parallel is None


def test_profile_fallback_carries_ep_and_lossless() -> None:
    prod = profile_fallback("production")
    assert (prod["ep_servers"], prod["alltoall"], prod["lossless"]) == (2, "rail", True)
    other = profile_fallback("coding-agent")
    assert (other["ep_servers"], other["alltoall"], other["lossless"]) == (1, "rail", False)


def test_lossless_by_default_for_production_and_off_on_request() -> None:
    cfg = _parse(["--workload", "production"])
    assert cfg.lossless and cfg.layout.ep_servers == 2 and cfg.decode_hotspot == 2
    assert cfg.layout.layout == "default" and cfg.layout.prefill_servers == 4  # 2 of 4, 4 of 8
    assert not _parse(["--workload", "production", "--no-lossless"]).lossless
    assert _parse(["--workload", "coding-agent", "--lossless"]).lossless
    assert not _parse(["--workload", "coding-agent"]).lossless
    assert _parse(["--workload", "production", "--ep-servers", "1"]).layout.ep_servers == 1


def test_a_lossy_production_run_writes_no_lossless_so_it_parses_back() -> None:
    argv = run_argv_of(workload="production", lossless=False)
    assert "--no-lossless" in argv
    assert not _parse(argv).lossless
    assert "--lossless" in run_argv_of(lossless=True)


def test_the_plan_places_ep_in_both_roles() -> None:
    cfg = _parse(["--workload", "production", "--gpus-per-server", "4"])  # the old size
    plan = plan_run(RunConfig(**{**cfg.__dict__, "fabric": ZCUBE}))
    for role in ("prefill", "decode"):
        engines = plan.placement.role(role)
        assert len(engines) == 8
        assert all(len(e.ep_peers) == 1 for e in engines)  # the same-rank GPU of the other server
    assert plan.placement.ep_hosts  # EP workers run


def test_kv_off_makes_prefill_move_one_byte() -> None:
    cfg = RunConfig(fabric=ZCUBE, workload="production", kv_off=True)
    plan = plan_run(cfg)
    launches = plan.role_launches(9000, Path("/tmp/logs"))
    prefill = [launch for launch in launches if launch.name.startswith("prefill-")]
    assert prefill and all("--kv-share" in launch.argv for launch in prefill)
    i = prefill[0].argv.index("--kv-share")
    assert float(prefill[0].argv[i + 1]) == 0.0
    plain = plan_run(RunConfig(fabric=ZCUBE, workload="production")).role_launches(
        9000, Path("/tmp/logs")
    )
    assert not any("--kv-share" in launch.argv for launch in plain)


def test_bad_expert_parallel_names_its_field() -> None:
    data = {**load_profile_json("production"), "expert_parallel": {"servers": 0}}
    with pytest.raises(ConfigError) as e:
        parse_profile(data)
    assert e.value.field == "production.expert_parallel.servers"
    data = {**load_profile_json("production"), "lossless": "yes"}
    with pytest.raises(ConfigError) as e:
        parse_profile(data)
    assert e.value.field == "production.lossless"


def load_profile_json(name: str) -> dict:
    import json

    return json.loads((PROFILE_DIR / f"{name}.json").read_text())


def test_two_node_glm_all_to_all_by_hand() -> None:
    # top-8 of 256 experts over 2 nodes of 128: P(no expert on a node) =
    # 128/256 x 127/255 x ... x 121/249 = 0.0034899, so D = 2 (1 - 0.0034899) = 1.99302 nodes
    # per token and one peer receives D / 2 = 0.996510 copies of each token.
    t = EpTraffic(get_profile("glm-5.1"), nodes=2)
    d, c = t.layer_bytes(32)
    # per layer, 32 tokens: 32 x 0.996510 x 6,336 (FP8 + scales) and x 12,288 (BF16)
    assert d == pytest.approx(32 * 0.996510 * 6336, rel=1e-5)  # 202,044 bytes
    assert c == pytest.approx(32 * 0.996510 * 12288, rel=1e-5)  # 391,844 bytes
    # per step: the 75 MoE layers
    sd, sc = t.step_bytes(32)
    assert sd == pytest.approx(75 * d) and sc == pytest.approx(75 * c)
    assert sd == pytest.approx(15_153_331, rel=1e-6)


@pytest.mark.parametrize("command", ["compare", "sweep"])
def test_compare_and_sweep_take_the_profiles_hints(command: str) -> None:
    from zcube_lab.cli import build_parser
    from zcube_lab.cli.commands.compare import variants_from_args

    argv = [command, "--workload", "production", "--fabrics", "zcube,roft"]
    _kinds, _specs, variants, _baseline = variants_from_args(build_parser().parse_args(argv))
    for v in variants:
        assert v.config.lossless and v.config.layout.ep_servers == 2, v.label
    lossy = [*argv, "--no-lossless"]
    _kinds, _specs, variants, _baseline = variants_from_args(build_parser().parse_args(lossy))
    assert not any(v.config.lossless for v in variants)
