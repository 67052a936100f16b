"""Role command lines round-trip through each role's own flag parser."""

from __future__ import annotations

import argparse
import dataclasses

from zcube_lab.core.options import parse_with_file
from zcube_lab.serving import decode, gateway, prefill
from zcube_lab.serving.config import Address, DecodeConfig, GatewayConfig, PrefillConfig
from zcube_lab.serving.launch import decode_argv, gateway_argv, prefill_argv


def _back(mod: object, argv: list[str]) -> object:
    assert argv[1:3] == ["-m", f"zcube_lab.serving.{mod.__name__.split('.')[-1]}"]  # type: ignore[attr-defined]
    parser = argparse.ArgumentParser()
    mod.add_arguments(parser)  # type: ignore[attr-defined]
    return mod.config_from_args(parse_with_file(parser, argv[3:]))  # type: ignore[attr-defined]


def test_prefill_round_trip() -> None:
    cfg = PrefillConfig(
        model="glm-5.1", host="192.168.0.1", port=8100, bandwidth_scale=4000.0,
        kv_bind=(Address("10.1.0.1", 7100), Address("10.2.0.1", 7100)), engine_id="prefill-0",
        ep_peers=(Address("10.1.0.2", 7300),), kv_lease_s=12.5, engine_index="3",
        prefix_cache_hit_rate=0.75,
    )  # fmt: skip
    assert _back(prefill, prefill_argv(cfg)) == cfg
    assert not any(a.startswith("--ep-") and a != "--ep-peers" for a in prefill_argv(cfg))
    spray = dataclasses.replace(cfg, ep_subflows=8, ep_stall_timeout_s=0.5, ep_timeout_s=2.5)
    argv = prefill_argv(spray)
    assert "--ep-subflows" in argv and "--ep-stall-timeout-s" in argv and "--ep-timeout-s" in argv
    assert _back(prefill, argv) == spray


def test_decode_round_trip() -> None:
    cfg = DecodeConfig(
        model="deepseek-v3", host="192.168.0.2", port=8200, bandwidth_scale=4000.0,
        prefill_kv=(("prefill-0", (Address("10.1.0.1", 7100), Address("10.2.0.1", 7100))),),
        kv_streams=4, kv_retries=1, eos_probability=0.0, served_model_name="ds",
        kv_source_map=(("10.2.0.0/16", "10.1.0.1"), ("10.1.0.0/16", "10.2.0.1")),
    )  # fmt: skip
    assert _back(decode, decode_argv(cfg)) == cfg
    ep = dataclasses.replace(cfg, ep_subflows=8, ep_stall_timeout_s=0.5)
    assert "--ep-timeout-s" not in decode_argv(ep)  # default: not emitted
    assert _back(decode, decode_argv(ep)) == ep
    spraying = dataclasses.replace(
        cfg, kv_stall_timeout_s=0.25, kv_max_retired=0, kv_log="/tmp/run/kv-decode-0.jsonl"
    )
    argv = decode_argv(spraying)
    assert "--kv-stall-timeout-s" in argv and "--kv-log" in argv
    assert _back(decode, argv) == spraying
    assert "--kv-stall-timeout-s" not in decode_argv(cfg)  # off stays off
    assert "--kv-path-hold-s" not in argv  # unset: the default hold
    for hold in (0.0, 7.5):
        held = dataclasses.replace(spraying, kv_path_hold_s=hold)
        assert _back(decode, decode_argv(held)) == held


def test_gateway_round_trip() -> None:
    cfg = GatewayConfig(
        model="glm-5.1", host="192.168.0.10", prefill_urls=("http://192.168.0.1:8100",),
        decode_urls=("http://192.168.0.2:8200", "http://192.168.0.3:8200"), policy="round-robin",
    )  # fmt: skip
    assert _back(gateway, gateway_argv(cfg)) == cfg
