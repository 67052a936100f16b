"""Role configuration: frozen, validated, one error type naming field, value and allowed."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.options import parse_with_file
from zcube_lab.serving import decode, gateway, prefill
from zcube_lab.serving.config import (
    PATH_HOLD_STALLS,
    Address,
    DecodeConfig,
    GatewayConfig,
    PrefillConfig,
)
from zcube_lab.serving.decode_engine import path_health, stall_wall_s
from zcube_lab.serving.launch import decode_argv


def _parse(mod: object, argv: list[str]) -> object:
    parser = argparse.ArgumentParser()
    mod.add_arguments(parser)  # type: ignore[attr-defined]
    return mod.config_from_args(parse_with_file(parser, argv))  # type: ignore[attr-defined]


def test_prefill_flags_with_two_kv_addresses() -> None:
    cfg = _parse(prefill, ["--kv-bind", "10.1.0.1:7100", "--kv-bind", "10.2.0.1:7100"])
    assert isinstance(cfg, PrefillConfig)
    assert cfg.kv_bind == (Address("10.1.0.1", 7100), Address("10.2.0.1", 7100))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.port = 1  # type: ignore[misc]


def test_decode_prefill_kv_table() -> None:
    cfg = _parse(decode, ["--prefill-kv", "p0=10.1.0.1:7100,10.2.0.1:7100", "--kv-streams", "4"])
    assert isinstance(cfg, DecodeConfig)
    assert dict(cfg.prefill_kv)["p0"] == (Address("10.1.0.1", 7100), Address("10.2.0.1", 7100))
    assert cfg.kv_streams == 4


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: PrefillConfig(model="nope"), "model"),
        (lambda: PrefillConfig(bandwidth_scale=0.5), "bandwidth_scale"),
        (lambda: PrefillConfig(token_budget=0), "token_budget"),
        (lambda: DecodeConfig(kv_streams=0), "kv_streams"),
        (lambda: DecodeConfig(kv_warm=-1), "kv_warm"),
        (lambda: DecodeConfig(eos_probability=2.0), "eos_probability"),
        (lambda: DecodeConfig(kv_stall_timeout_s=0.0), "kv_stall_timeout_s"),
        (lambda: DecodeConfig(kv_stall_timeout_s=-1.0), "kv_stall_timeout_s"),
        (lambda: DecodeConfig(kv_timeout_s=2.0, kv_stall_timeout_s=2.0), "kv_stall_timeout_s"),
        (lambda: DecodeConfig(kv_max_retired=-1), "kv_max_retired"),
        (lambda: DecodeConfig(kv_max_retired=5000), "kv_max_retired"),
        (lambda: DecodeConfig(kv_path_hold_s=-1.0), "kv_path_hold_s"),
        (lambda: DecodeConfig(kv_path_hold_s=1e6), "kv_path_hold_s"),
        (lambda: DecodeConfig(model="llama-3.1-8b", ep_peers=(Address("h", 1),)), "ep_peers"),
        (lambda: PrefillConfig(ep_subflows=0), "ep_subflows"),
        (lambda: DecodeConfig(ep_subflows=65), "ep_subflows"),
        (lambda: PrefillConfig(ep_timeout_s=0.0), "ep_timeout_s"),
        (lambda: DecodeConfig(ep_stall_timeout_s=0.0), "ep_stall_timeout_s"),
        (lambda: PrefillConfig(ep_timeout_s=1.0, ep_stall_timeout_s=1.0), "ep_stall_timeout_s"),
        (lambda: PrefillConfig(ep_ports="both"), "ep_ports"),
        (lambda: PrefillConfig(ep_source_map=(("x", "10.0.0.1"),)), "ep_source"),
        (lambda: DecodeConfig(ep_node_limit=-1), "ep_node_limit"),
        (lambda: DecodeConfig(ep_frame_packets=0), "ep_frame_packets"),
        (lambda: DecodeConfig(ep_peers=((),)), "ep_peers"),
        (lambda: PrefillConfig(dilation=0.5), "dilation"),
        (lambda: DecodeConfig(dilation=17.0), "dilation"),
        (lambda: GatewayConfig(), "prefill_urls"),
        (
            lambda: GatewayConfig(
                prefill_urls=("http://a",), decode_urls=("http://b",), dilation=0.0
            ),
            "dilation",
        ),
        (
            lambda: GatewayConfig(
                prefill_urls=("http://a",), decode_urls=("http://b",), policy="x"
            ),
            "policy",
        ),
        (
            lambda: GatewayConfig(
                prefill_urls=("http://a",), decode_urls=("http://b",), decode_hotspot=2
            ),
            "decode_hotspot",
        ),
        (
            lambda: GatewayConfig(
                prefill_urls=("http://a",), decode_urls=("http://b",), hotspot_period_s=0.0
            ),
            "hotspot_period_s",
        ),
    ],
)
def test_bad_values_raise_config_error_naming_the_field(build, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as exc:
        build()
    assert exc.value.field == field


def test_ep_spray_flags_on_both_engines() -> None:
    flags = ["--ep-subflows", "8", "--ep-stall-timeout-s", "0.5", "--ep-timeout-s", "3"]
    for mod in (prefill, decode):
        cfg = _parse(mod, flags)
        assert (cfg.ep_subflows, cfg.ep_stall_timeout_s, cfg.ep_timeout_s) == (8, 0.5, 3.0)  # type: ignore[attr-defined]
        off = _parse(mod, [])
        assert (off.ep_subflows, off.ep_stall_timeout_s, off.ep_timeout_s) == (1, None, 5.0)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError) as exc:
        _parse(prefill, ["--ep-stall-timeout-s", "6"])  # not below the 5 s exchange timeout
    assert exc.value.field == "ep_stall_timeout_s"


def test_bad_address_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as exc:
        _parse(prefill, ["--kv-bind", "10.1.0.1"])
    assert exc.value.field == "kv_bind"


def test_json_config_file_and_flags_win(tmp_path: Path) -> None:
    f = tmp_path / "gw.json"
    f.write_text(
        json.dumps({"prefill_url": ["http://p:1"], "decode_url": ["http://d:2"], "port": 9})
    )
    cfg = _parse(gateway, ["--config", str(f), "--port", "9000"])
    assert isinstance(cfg, GatewayConfig)
    assert cfg.prefill_urls == ("http://p:1",) and cfg.port == 9000


def test_unknown_key_in_config_file(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"kv_bnid": ["1.2.3.4:5"]}))
    with pytest.raises(ConfigError) as exc:
        _parse(prefill, ["--config", str(f)])
    assert exc.value.field == "kv_bnid"


def test_decode_kv_sources_pick_the_nic_port() -> None:
    cfg = _parse(
        decode, ["--kv-source", "10.2.0.0/16=10.1.0.1", "--kv-source", "10.1.0.0/16=10.2.0.1"]
    )
    assert isinstance(cfg, DecodeConfig)
    assert cfg.kv_source_map == (("10.2.0.0/16", "10.1.0.1"), ("10.1.0.0/16", "10.2.0.1"))
    for bad in ("10.2.0.0/16", "10.2.0.0/99=10.1.0.1", "nonsense=10.1.0.1"):
        with pytest.raises(ConfigError) as info:
            _parse(decode, ["--kv-source", bad])
        assert info.value.field == "kv_source"


def test_decode_stall_retirement_and_kv_log_flags(tmp_path: Path) -> None:
    cfg = _parse(decode, [])
    assert isinstance(cfg, DecodeConfig)
    # off by default: the static reference behaviour
    assert cfg.kv_stall_timeout_s is None and cfg.kv_max_retired is None and cfg.kv_log == ""
    log = str(tmp_path / "kv.jsonl")
    cfg = _parse(
        decode,
        ["--kv-stall-timeout-s", "0.5", "--kv-max-retired", "0", "--kv-log", log],
    )
    assert isinstance(cfg, DecodeConfig)
    assert (cfg.kv_stall_timeout_s, cfg.kv_max_retired, cfg.kv_log) == (0.5, 0, log)
    with pytest.raises(ConfigError) as info:
        _parse(decode, ["--kv-timeout-s", "1", "--kv-stall-timeout-s", "3"])
    assert info.value.field == "kv_stall_timeout_s" and "kv_timeout_s" in info.value.allowed
    f = tmp_path / "d.json"
    f.write_text(json.dumps({"kv_stall_timeout_s": 0.25, "kv_max_retired": 8}))
    cfg = _parse(decode, ["--config", str(f)])
    assert isinstance(cfg, DecodeConfig)
    assert (cfg.kv_stall_timeout_s, cfg.kv_max_retired) == (0.25, 8)


def test_decode_path_memory_follows_the_stall_timeout_and_hold_flag() -> None:
    assert _parse(decode, []).kv_path_hold_s is None  # type: ignore[attr-defined]
    # static (no stall timeout): no memory, whatever the hold says
    assert path_health(DecodeConfig()) is None
    assert path_health(DecodeConfig(kv_path_hold_s=3.0)) is None
    health = path_health(DecodeConfig(kv_stall_timeout_s=0.5))
    assert health is not None and health.hold_s == PATH_HOLD_STALLS * 0.5 == 5.0
    cfg = _parse(decode, ["--kv-stall-timeout-s", "0.5", "--kv-path-hold-s", "2"])
    assert isinstance(cfg, DecodeConfig) and cfg.kv_path_hold_s == 2.0
    health = path_health(cfg)
    assert health is not None and health.hold_s == 2.0
    assert path_health(DecodeConfig(kv_stall_timeout_s=0.5, kv_path_hold_s=0.0)) is None


def test_dilation_stretches_the_timeouts_of_the_modelled_world() -> None:
    # The flags stay modelled seconds; the engine runs them x k on the clock.
    cfg = _parse(decode, ["--kv-stall-timeout-s", "0.5", "--dilation", "2"])
    assert isinstance(cfg, DecodeConfig) and cfg.dilation == 2.0
    assert (cfg.kv_stall_timeout_s, cfg.wall_s(cfg.kv_timeout_s)) == (0.5, 20.0)
    assert stall_wall_s(cfg) == 1.0
    health = path_health(cfg)
    assert health is not None and health.hold_s == 2 * PATH_HOLD_STALLS * 0.5
    assert stall_wall_s(DecodeConfig()) is None
    assert "--dilation" not in decode_argv(DecodeConfig())  # off stays off the command line


def test_ep_options_change_the_profiles_wire_for_the_exchange() -> None:
    from zcube_lab.serving.epoptions import on_off

    peer = (Address("10.1.0.2", 7300), Address("10.2.0.2", 7300))
    cfg = DecodeConfig(model="deepseek-v3", ep_peers=(peer, Address("10.1.0.3", 7300)))
    assert cfg.ep_peers == (peer, (Address("10.1.0.3", 7300),))  # bare address: one path
    t = cfg.ep_traffic
    assert (t.nodes, t.lanes, t.profile.wire.node_limit) == (3, 1, 4)  # the fewest paths
    assert t.profile.wire.dual_batch_overlap  # the profile's
    off = DecodeConfig(
        model="deepseek-v3", ep_peers=(peer,), ep_dbo=False, ep_node_limit=0, ep_per_node=False
    )
    w = off.ep_traffic.profile.wire
    assert (w.dual_batch_overlap, w.node_limit, w.per_node) == (False, 0, False)
    assert off.ep_traffic.lanes == 2
    one = DecodeConfig(model="deepseek-v3", ep_peers=(peer,), ep_ports="one")
    assert one.ep_paths == ((peer[0],),) and one.ep_traffic.lanes == 1
    assert on_off("ON", "ep_dbo") is True and on_off("off", "ep_dbo") is False
    with pytest.raises(ConfigError, match="ep_dbo"):
        on_off("maybe", "ep_dbo")
