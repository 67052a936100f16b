"""Each role option is declared once, on its config dataclass: every field is a flag, and every
config (every field away from its default) goes to argv and parses back to an equal config."""

from __future__ import annotations

import argparse
import dataclasses
from types import ModuleType

import pytest

from zcube_lab.core.options import parse_with_file, to_argv
from zcube_lab.serving import decode, ep_worker, gateway, prefill
from zcube_lab.serving.config import (
    Address,
    DecodeConfig,
    EngineCommon,
    EpWorkerConfig,
    GatewayConfig,
    PrefillConfig,
)
from zcube_lab.serving.launch import decode_argv, ep_worker_argv, gateway_argv, prefill_argv

A, B, C = Address("10.1.0.1", 7100), Address("10.2.0.1", 7100), Address("10.1.0.9", 7101)
COMMON = {
    "model": "deepseek-v3",  # MoE, so EP peers are allowed
    "served_model_name": "ds",
    "host": "192.168.0.7",
    "bandwidth_scale": 2.5,
    "seed": 7,
    "engine_index": "3",
    "max_waiting": 64,
    "ep_peers": ((Address("10.1.0.2", 7300), Address("10.2.0.9", 7300)), Address("10.2.0.2", 7300)),
    "ep_ports": "one",
    "ep_source_map": (("10.2.0.0/16", "10.1.0.1"),),
    "ep_subflows": 4,
    "ep_stall_timeout_s": 0.5,
    "ep_timeout_s": 2.5,
    "ep_per_node": False,
    "ep_node_limit": 2,
    "ep_dbo": True,
    "ep_frame_packets": 4,
    "ep_log": "/tmp/run/ep-x.jsonl",
    "dilation": 2.0,
}
PREFILL = PrefillConfig(
    **COMMON, port=9100, kv_bind=(A, B), engine_id="prefill-3", token_budget=4096,
    kv_lease_s=12.5, prefix_cache_hit_rate=0.75,
    kv_transport="mrc", kv_mrc_evs=8, kv_mrc_ev_base=0, kv_mrc_mtu=9000, kv_share=0.0,
)  # fmt: skip
DECODE = DecodeConfig(
    **COMMON, port=9200, prefill_kv=(("p0", (A, B)), ("p1", (C,))), kv_streams=4, kv_warm=3,
    kv_source_map=(("10.2.0.0/16", "10.1.0.1"), ("10.1.0.0/16", "10.2.0.1")),
    kv_chunk_bytes=65536, kv_chunks_per_lane=2, kv_retries=1, kv_timeout_s=4.0,
    kv_stall_timeout_s=0.25,
    kv_max_retired=0, kv_path_hold_s=7.5, kv_transport="mrc", kv_mrc_rate_mbps=47.5,
    kv_mrc_delay_bound_ms=412.5,
    kv_log="/tmp/run/kv-d0.jsonl", max_num_seqs=16,
    eos_probability=0.0,
)  # fmt: skip
GATEWAY = GatewayConfig(
    model="glm-5.1", served_model_name="glm", host="192.168.0.10", port=9000,
    prefill_urls=("http://192.168.0.1:8100#group=rail0", "http://192.168.0.3:8100"),
    decode_urls=("http://192.168.0.2:8200",), policy="round-robin", max_outstanding=16,
    upstream_timeout_s=30.0, request_log="/tmp/run/requests-gateway.jsonl", decode_hotspot=1,
    hotspot_period_s=2.5, dilation=1.5,
)  # fmt: skip
EP_WORKER = EpWorkerConfig(bind=(A, B))

ROLES = [
    (prefill, prefill_argv, PREFILL),
    (decode, decode_argv, DECODE),
    (gateway, gateway_argv, GATEWAY),
    (ep_worker, ep_worker_argv, EP_WORKER),
]


def _back(mod: ModuleType, argv: list[str]) -> object:
    assert argv[1:3] == ["-m", mod.__name__]
    parser = argparse.ArgumentParser()
    mod.add_arguments(parser)
    return mod.config_from_args(parse_with_file(parser, argv[3:]))


@pytest.mark.parametrize(("mod", "argv_of", "cfg"), ROLES, ids=lambda x: getattr(x, "__name__", ""))
def test_every_field_away_from_its_default_round_trips(mod, argv_of, cfg) -> None:  # type: ignore[no-untyped-def]
    for f in dataclasses.fields(cfg):
        assert getattr(cfg, f.name) != f.default, f"{f.name}: give it a non-default value here"
    assert _back(mod, argv_of(cfg)) == cfg


@pytest.mark.parametrize(("mod", "argv_of", "cfg"), ROLES, ids=lambda x: getattr(x, "__name__", ""))
def test_defaults_round_trip(mod, argv_of, cfg) -> None:  # type: ignore[no-untyped-def]
    if isinstance(cfg, GatewayConfig):  # no default backends: the URLs are required
        base = GatewayConfig(prefill_urls=("http://p:1",), decode_urls=("http://d:2",))
    else:
        base = type(cfg)()
    assert _back(mod, argv_of(base)) == base


@pytest.mark.parametrize("cfg", [PREFILL, DECODE, GATEWAY, EP_WORKER])
def test_every_field_is_a_flag(cfg: object) -> None:
    # Each field is on the command line once it leaves its default.
    flags = {a for a in to_argv(cfg) if a.startswith("--")}
    assert len(flags) == len(dataclasses.fields(cfg))


def test_options_that_are_off_stay_off_the_command_line() -> None:
    argv = decode_argv(DecodeConfig())
    for flag in ("--ep-subflows", "--ep-stall-timeout-s", "--ep-timeout-s", "--kv-log"):
        assert flag not in argv
    assert "--kv-streams" in argv and "--port" in argv


def test_engine_roles_share_the_common_fields() -> None:
    common = {f.name for f in dataclasses.fields(EngineCommon)}
    for cls in (PrefillConfig, DecodeConfig):
        assert common <= {f.name for f in dataclasses.fields(cls)}
    # decode's own default port, declared where its flag is
    assert DecodeConfig().port == 8200 and PrefillConfig().port == 8100
