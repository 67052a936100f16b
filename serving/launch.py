"""Command lines for each serving role, built from its frozen config (argument lists, no shell).

The lab calls these to start roles inside Mininet hosts, e.g.
`host.popen(prefill_argv(cfg))`; `LocalCluster` calls them on loopback. Each argv parses back
(through the role's own flag parser) to an equal config; the tests check that round trip.
"""

from __future__ import annotations

import sys

from serving.config import DecodeConfig, EngineCommon, EpWorkerConfig, GatewayConfig, PrefillConfig


def _common(cfg: EngineCommon) -> list[str]:
    argv = [
        "--model", cfg.model, "--host", cfg.host, "--port", str(cfg.port),
        "--bandwidth-scale", repr(cfg.bandwidth_scale), "--seed", str(cfg.seed),
        "--engine-index", cfg.engine_index, "--max-waiting", str(cfg.max_waiting),
    ]  # fmt: skip
    if cfg.served_model_name:
        argv += ["--served-model-name", cfg.served_model_name]
    for peer in cfg.ep_peers:
        argv += ["--ep-peers", str(peer)]
    if cfg.ep_subflows != 1:
        argv += ["--ep-subflows", str(cfg.ep_subflows)]
    if cfg.ep_stall_timeout_s is not None:
        argv += ["--ep-stall-timeout-s", repr(cfg.ep_stall_timeout_s)]
    if cfg.ep_timeout_s != EngineCommon.ep_timeout_s:
        argv += ["--ep-timeout-s", repr(cfg.ep_timeout_s)]
    return argv


def prefill_argv(cfg: PrefillConfig, python: str = sys.executable) -> list[str]:
    """`python -m serving.prefill ...` for this config."""
    argv = [python, "-m", "serving.prefill", *_common(cfg)]
    for a in cfg.kv_bind:
        argv += ["--kv-bind", str(a)]
    if cfg.engine_id:
        argv += ["--engine-id", cfg.engine_id]
    argv += ["--token-budget", str(cfg.token_budget), "--kv-lease-s", repr(cfg.kv_lease_s)]
    argv += ["--prefix-cache-hit-rate", repr(cfg.prefix_cache_hit_rate)]
    return argv


def decode_argv(cfg: DecodeConfig, python: str = sys.executable) -> list[str]:
    """`python -m serving.decode ...` for this config."""
    argv = [python, "-m", "serving.decode", *_common(cfg)]
    for engine_id, addrs in cfg.prefill_kv:
        argv += ["--prefill-kv", engine_id + "=" + ",".join(str(a) for a in addrs)]
    argv += [
        "--kv-streams", str(cfg.kv_streams), "--kv-chunk-bytes", str(cfg.kv_chunk_bytes),
        "--kv-retries", str(cfg.kv_retries), "--kv-timeout-s", repr(cfg.kv_timeout_s),
        "--max-num-seqs", str(cfg.max_num_seqs), "--eos-probability", repr(cfg.eos_probability),
    ]  # fmt: skip
    for cidr, local in cfg.kv_source_map:
        argv += ["--kv-source", f"{cidr}={local}"]
    if cfg.kv_stall_timeout_s is not None:
        argv += ["--kv-stall-timeout-s", repr(cfg.kv_stall_timeout_s)]
    if cfg.kv_max_retired is not None:
        argv += ["--kv-max-retired", str(cfg.kv_max_retired)]
    if cfg.kv_path_hold_s is not None:
        argv += ["--kv-path-hold-s", repr(cfg.kv_path_hold_s)]
    if cfg.kv_log:
        argv += ["--kv-log", cfg.kv_log]
    return argv


def gateway_argv(cfg: GatewayConfig, python: str = sys.executable) -> list[str]:
    """`python -m serving.gateway ...` for this config."""
    argv = [python, "-m", "serving.gateway", "--model", cfg.model, "--host", cfg.host,
            "--port", str(cfg.port)]  # fmt: skip
    if cfg.served_model_name:
        argv += ["--served-model-name", cfg.served_model_name]
    for u in cfg.prefill_urls:
        argv += ["--prefill-url", u]
    for u in cfg.decode_urls:
        argv += ["--decode-url", u]
    argv += [
        "--policy", cfg.policy, "--max-outstanding", str(cfg.max_outstanding),
        "--upstream-timeout-s", repr(cfg.upstream_timeout_s),
    ]  # fmt: skip
    return argv


def ep_worker_argv(cfg: EpWorkerConfig, python: str = sys.executable) -> list[str]:
    """`python -m serving.ep_worker ...` for this config."""
    argv = [python, "-m", "serving.ep_worker"]
    for a in cfg.bind:
        argv += ["--bind", str(a)]
    return argv
