"""Frozen, validated settings for each serving role, read from flags and/or a JSON file.

Each role has one dataclass (`GatewayConfig`, `PrefillConfig`, `DecodeConfig`,
`EpWorkerConfig`); `__post_init__` validates and raises `ConfigError` naming the field, the
value and what is allowed. A JSON config file uses the flag names with `_` for `-` as keys
(`{"kv_bind": ["10.1.0.1:7100"]}`); flags given on the command line win over the file.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serving.models import PROFILES, ModelProfile, get_profile
from zcube_lab.errors import ConfigError

POLICIES = ("least-outstanding", "round-robin")


@dataclass(frozen=True, order=True)
class Address:
    """A TCP endpoint, `host:port`."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_address(text: str, field_name: str) -> Address:
    """`host:port` to an Address, or a ConfigError."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(field_name, text, "host:port with a port in 0..65535")
    return Address(host, int(port))


def _addresses(values: Sequence[str] | str | None, field_name: str) -> tuple[Address, ...]:
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    out: list[Address] = []
    for v in values:
        out.extend(parse_address(p, field_name) for p in str(v).split(",") if p)
    return tuple(out)


def _check(cond: bool, field_name: str, value: object, allowed: str) -> None:
    if not cond:
        raise ConfigError(field_name, value, allowed)


@dataclass(frozen=True)
class EngineCommon:
    """Settings every engine role shares."""

    model: str = "tiny"
    served_model_name: str = ""
    host: str = "127.0.0.1"
    port: int = 8100
    bandwidth_scale: float = 1.0
    seed: int = 0
    engine_index: str = "0"
    max_waiting: int = 1024
    ep_peers: tuple[Address, ...] = ()
    # All-to-all: TCP subflows (source ports, hence ECMP hashes) per EP peer; retire a subflow
    # that receives nothing for ep_stall_timeout_s (None: never); a peer not answered within
    # ep_timeout_s fails for that step.
    ep_subflows: int = 1
    ep_stall_timeout_s: float | None = None
    ep_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        get_profile(self.model)
        _check(0 <= self.port <= 65535, "port", self.port, "0..65535")
        _check(self.bandwidth_scale >= 1.0, "bandwidth_scale", self.bandwidth_scale, ">= 1")
        _check(self.max_waiting >= 1, "max_waiting", self.max_waiting, ">= 1")
        if self.ep_peers and not get_profile(self.model).is_moe:
            raise ConfigError("ep_peers", [str(a) for a in self.ep_peers], "empty: model is dense")
        _check(1 <= self.ep_subflows <= 64, "ep_subflows", self.ep_subflows, "1..64")
        _check(0 < self.ep_timeout_s <= 3600, "ep_timeout_s", self.ep_timeout_s, "0 < s <= 3600")
        if self.ep_stall_timeout_s is not None:
            _check(
                0 < self.ep_stall_timeout_s < self.ep_timeout_s,
                "ep_stall_timeout_s",
                self.ep_stall_timeout_s,
                f"> 0 and < ep_timeout_s ({self.ep_timeout_s}), or unset (off)",
            )

    @property
    def profile(self) -> ModelProfile:
        """The model profile named by `model`."""
        return get_profile(self.model)

    @property
    def model_name(self) -> str:
        """The name clients use in `model` (defaults to the profile name)."""
        return self.served_model_name or self.model

    @property
    def ep_size(self) -> int:
        """GPU hosts this instance spans: itself plus its EP peers."""
        return 1 + len(self.ep_peers)


@dataclass(frozen=True)
class PrefillConfig(EngineCommon):
    """A prefill instance: API on host:port, KV served on every `kv_bind` address."""

    kv_bind: tuple[Address, ...] = (Address("127.0.0.1", 7100),)
    engine_id: str = ""
    token_budget: int = 8192
    kv_lease_s: float = 30.0
    prefix_cache_hit_rate: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(
            0.0 <= self.prefix_cache_hit_rate < 1.0,
            "prefix_cache_hit_rate",
            self.prefix_cache_hit_rate,
            "0 <= rate < 1",
        )
        _check(len(self.kv_bind) >= 1, "kv_bind", self.kv_bind, "at least one host:port")
        _check(self.token_budget >= 1, "token_budget", self.token_budget, ">= 1")
        _check(self.kv_lease_s > 0, "kv_lease_s", self.kv_lease_s, "> 0 seconds")

    @property
    def nixl_engine_id(self) -> str:
        """The id decode uses to look up this instance's KV addresses."""
        return self.engine_id or f"prefill@{self.host}:{self.port}"


@dataclass(frozen=True)
class DecodeConfig(EngineCommon):
    """A decode instance: pulls KV over `kv_streams` TCP streams per prefill KV address."""

    # engine_id -> KV addresses; overrides the addresses prefill advertises.
    prefill_kv: tuple[tuple[str, tuple[Address, ...]], ...] = ()
    kv_streams: int = 2
    kv_chunk_bytes: int = 256 * 1024
    kv_retries: int = 3
    kv_timeout_s: float = 10.0
    max_num_seqs: int = 0
    eos_probability: float = 0.02
    # (cidr, local address): the source address for KV pulls from addresses in cidr.
    kv_source_map: tuple[tuple[str, str], ...] = ()
    # Retire a KV lane that receives no byte for this long and reopen it (None: never).
    kv_stall_timeout_s: float | None = None
    # Retired lanes one pull may replace (None: RETIRE_BUDGET_PER_LANE x its lanes).
    kv_max_retired: int | None = None
    # With a stall timeout: how long an address whose lane stalled stays avoided by later pulls
    # unless a probe or lane gets an answer (None: PATH_HOLD_STALLS x the stall timeout;
    # 0: no memory across pulls).
    kv_path_hold_s: float | None = None
    # Append one JSON line per KV pull attempt to this file ("": no log).
    kv_log: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(1 <= self.kv_streams <= 64, "kv_streams", self.kv_streams, "1..64")
        for cidr, local in self.kv_source_map:
            try:
                ipaddress.ip_network(cidr, strict=False)
                ipaddress.ip_address(local)
            except ValueError:
                _check(
                    False,
                    "kv_source",
                    f"{cidr}={local}",
                    "CIDR=LOCAL_IP, e.g. 10.2.0.0/16=10.1.0.1",
                )
        _check(
            4096 <= self.kv_chunk_bytes <= 64 * 2**20,
            "kv_chunk_bytes",
            self.kv_chunk_bytes,
            "4096..67108864",
        )
        _check(0 <= self.kv_retries <= 10, "kv_retries", self.kv_retries, "0..10")
        _check(self.kv_timeout_s > 0, "kv_timeout_s", self.kv_timeout_s, "> 0")
        if self.kv_stall_timeout_s is not None:
            _check(
                0 < self.kv_stall_timeout_s < self.kv_timeout_s,
                "kv_stall_timeout_s",
                self.kv_stall_timeout_s,
                f"> 0 and < kv_timeout_s ({self.kv_timeout_s}), or unset (off)",
            )
        if self.kv_max_retired is not None:
            _check(
                0 <= self.kv_max_retired <= 1024,
                "kv_max_retired",
                self.kv_max_retired,
                "0..1024, or unset (4 x lanes)",
            )
        if self.kv_path_hold_s is not None:
            _check(
                0 <= self.kv_path_hold_s <= 3600,
                "kv_path_hold_s",
                self.kv_path_hold_s,
                "0..3600 seconds (0: off), or unset (10 x kv_stall_timeout_s)",
            )
        _check("\n" not in self.kv_log, "kv_log", self.kv_log, "a file path")
        _check(self.max_num_seqs >= 0, "max_num_seqs", self.max_num_seqs, ">= 0 (0: profile)")
        _check(
            0.0 <= self.eos_probability <= 1.0,
            "eos_probability",
            self.eos_probability,
            "0..1",
        )

    @property
    def seq_limit(self) -> int:
        """Max running sequences: the flag, or the profile's."""
        return self.max_num_seqs or self.profile.max_num_seqs


@dataclass(frozen=True)
class GatewayConfig:
    """The router: OpenAI API on host:port, prefill and decode management URLs behind it."""

    model: str = "tiny"
    served_model_name: str = ""
    host: str = "127.0.0.1"
    port: int = 8000
    prefill_urls: tuple[str, ...] = ()
    decode_urls: tuple[str, ...] = ()
    policy: str = "least-outstanding"
    max_outstanding: int = 2048
    upstream_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        get_profile(self.model)
        _check(0 <= self.port <= 65535, "port", self.port, "0..65535")
        for name in ("prefill_urls", "decode_urls"):
            urls = getattr(self, name)
            _check(len(urls) >= 1, name, list(urls), "at least one http://host:port URL")
            for u in urls:
                _check(u.startswith(("http://", "https://")), name, u, "an http(s):// URL")
        _check(self.policy in POLICIES, "policy", self.policy, "one of " + ", ".join(POLICIES))
        _check(self.max_outstanding >= 1, "max_outstanding", self.max_outstanding, ">= 1")
        _check(self.upstream_timeout_s > 0, "upstream_timeout_s", self.upstream_timeout_s, "> 0")

    @property
    def profile(self) -> ModelProfile:
        """The model profile named by `model`."""
        return get_profile(self.model)

    @property
    def model_name(self) -> str:
        """The name clients use in `model`."""
        return self.served_model_name or self.model


@dataclass(frozen=True)
class EpWorkerConfig:
    """A secondary GPU host of an expert-parallel instance: answers all-to-all exchanges."""

    bind: tuple[Address, ...] = field(default=(Address("127.0.0.1", 7200),))

    def __post_init__(self) -> None:
        _check(len(self.bind) >= 1, "bind", self.bind, "at least one host:port")


# ---- flags -----------------------------------------------------------------------------


def add_common_arguments(parser: argparse.ArgumentParser, default_port: int) -> None:
    """Flags every engine role takes."""
    parser.add_argument("--config", help="JSON file with any of these options (flags win)")
    parser.add_argument("--model", default="tiny", help="profile: " + ", ".join(PROFILES))
    parser.add_argument("--served-model-name", default="", help="name clients send")
    parser.add_argument("--host", default="127.0.0.1", help="API/metrics (management) address")
    parser.add_argument("--port", type=int, default=default_port)
    parser.add_argument("--bandwidth-scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--engine-index", default="0", help="value of the `engine` label")
    parser.add_argument("--max-waiting", type=int, default=1024, help="queue limit (then 503)")
    parser.add_argument(
        "--ep-peers",
        action="append",
        default=None,
        help="host:port of an EP peer (repeat or comma-separate); none: EP size 1",
    )
    parser.add_argument(
        "--ep-subflows", type=int, default=1, help="all-to-all TCP subflows per EP peer"
    )
    parser.add_argument(
        "--ep-stall-timeout-s",
        type=float,
        default=None,
        help="retire an all-to-all subflow that receives nothing for this long (default: never)",
    )
    parser.add_argument(
        "--ep-timeout-s",
        type=float,
        default=5.0,
        help="an EP peer not answered within this fails for that step",
    )


def parse_with_file(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> argparse.Namespace:
    """Parse flags; a `--config` JSON file supplies defaults for flags not given."""
    args = parser.parse_args(argv)
    if not getattr(args, "config", None):
        return args
    path = Path(args.config)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError("config", str(path), f"a readable JSON file ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError("config", str(path), "a JSON object")
    known = {a.dest for a in parser._actions}
    for key in data:
        if key not in known:
            raise ConfigError(key, data[key], "one of " + ", ".join(sorted(known - {"help"})))
    parser.set_defaults(**data)
    return parser.parse_args(argv)


def common_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """EngineCommon fields from parsed flags."""
    return {
        "model": args.model,
        "served_model_name": args.served_model_name,
        "host": args.host,
        "port": args.port,
        "bandwidth_scale": args.bandwidth_scale,
        "seed": args.seed,
        "engine_index": str(args.engine_index),
        "max_waiting": args.max_waiting,
        "ep_peers": _addresses(args.ep_peers, "ep_peers"),
        "ep_subflows": args.ep_subflows,
        "ep_stall_timeout_s": args.ep_stall_timeout_s,
        "ep_timeout_s": args.ep_timeout_s,
    }


def addresses(values: Sequence[str] | str | None, field_name: str) -> tuple[Address, ...]:
    """Repeatable / comma-separated `host:port` flags to Addresses."""
    return _addresses(values, field_name)


def parse_kv_sources(values: Sequence[str] | None) -> tuple[tuple[str, str], ...]:
    """`CIDR=LOCAL` flags to the decode's KV source map."""
    out = []
    for v in values or ():
        cidr, sep, local = str(v).partition("=")
        if not sep or not cidr or not local:
            raise ConfigError("kv_source", v, "CIDR=LOCAL_IP, e.g. 10.2.0.0/16=10.1.0.1")
        out.append((cidr, local))
    return tuple(out)


def parse_prefill_kv(
    values: Sequence[str] | None,
) -> tuple[tuple[str, tuple[Address, ...]], ...]:
    """`ENGINE_ID=host:port[,host:port]` entries to the decode's override table."""
    out = []
    for v in values or ():
        engine_id, sep, addrs = str(v).partition("=")
        if not sep or not engine_id:
            raise ConfigError("prefill_kv", v, "ENGINE_ID=host:port[,host:port...]")
        out.append((engine_id, _addresses(addrs, "prefill_kv")))
    return tuple(out)
