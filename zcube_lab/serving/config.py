"""Frozen, validated settings for each serving role, read from flags and/or a JSON file.

Each role has one dataclass (`GatewayConfig`, `PrefillConfig`, `DecodeConfig`,
`EpWorkerConfig`); `__post_init__` validates and raises `ConfigError` naming the field, the
value and what is allowed. Each field is declared once, with its flag (`zcube_lab.core.options`):
the dataclass drives the role's parser and the command line the lab starts it with. A JSON
config file uses the flag names with `_` for `-` as keys (`{"kv_bind": ["10.1.0.1:7100"]}`);
flags given on the command line win over the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from zcube_lab.core.clock import Clock, check_dilation
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.evpaths import EV_BASE, EV_SPAN, MAX_EVS
from zcube_lab.core.options import option
from zcube_lab.serving.addresses import (
    Address,
    addresses,
    check_source_map,
    parse_address,
    parse_kv_sources,
    parse_prefill_kv,
    parse_urls,
    prefill_kv_item,
)
from zcube_lab.serving.epoptions import EpOptions
from zcube_lab.serving.eptraffic import EpTraffic
from zcube_lab.serving.models import PROFILES, ModelProfile, get_profile
from zcube_lab.serving.routing import BALANCERS

__all__ = [
    "Address",
    "DecodeConfig",
    "EngineCommon",
    "EpWorkerConfig",
    "GatewayConfig",
    "PrefillConfig",
    "addresses",
    "parse_address",
]

# The gateway's balancing policies (`--policy`): the registered balancers.
BALANCING_POLICIES = tuple(BALANCERS)
# Default hold of a KV path suspicion (`kv_path_hold_s` unset): this many stall timeouts
# (5 s at 0.5 s).
PATH_HOLD_STALLS = 10


KV_TRANSPORTS = ("tcp", "mrc")


def _check_transport(name: str) -> None:
    if name not in KV_TRANSPORTS:
        raise ConfigError("kv_transport", name, f"one of {list(KV_TRANSPORTS)}")


def _check(cond: bool, field_name: str, value: object, allowed: str) -> None:
    if not cond:
        raise ConfigError(field_name, value, allowed)


def _as_str(raw: object, field_name: str) -> str:
    # A JSON config file may give a number where the flag gives text.
    return str(raw)


def _dilation() -> Any:
    # Declared here once for the engines and the gateway (docs/DOMAIN.md §4, time dilation).
    return option(
        1.0,
        help="time dilation k: every modelled compute time and every timeout of the modelled "
        "world (KV, all-to-all, lease, upstream, hot-set period) x k; payload bytes unchanged",
        omit_default=True,
    )


class Dilated:
    """A role that runs the modelled world k = `dilation` times slower: its modelled
    seconds (compute, timeouts) last `wall_s(seconds)` on the clock."""

    dilation: float

    @property
    def clock(self) -> Clock:
        """This role's modelled and wall seconds."""
        return Clock(self.dilation)

    def wall_s(self, seconds: float) -> float:
        """Wall seconds of `seconds` modelled seconds."""
        return self.clock.wall(seconds)

    def _check_dilation(self) -> None:
        check_dilation(self.dilation, "dilation")


@dataclass(frozen=True)
class EngineCommon(EpOptions, Dilated):
    """Settings every engine role shares; the option values are modelled seconds (see
    `Dilated`)."""

    model: str = option("tiny", help="profile: " + ", ".join(PROFILES))
    served_model_name: str = option("", help="name clients send", omit_default=True)
    host: str = option("127.0.0.1", help="API/metrics (management) address")
    port: int = option(8100)
    bandwidth_scale: float = option(1.0)
    seed: int = option(0)
    engine_index: str = option("0", help="value of the `engine` label", parse=_as_str)
    max_waiting: int = option(1024, help="queue limit (then 503)")
    dilation: float = _dilation()

    def __post_init__(self) -> None:
        get_profile(self.model)
        _check(0 <= self.port <= 65535, "port", self.port, "0..65535")
        _check(self.bandwidth_scale >= 1.0, "bandwidth_scale", self.bandwidth_scale, ">= 1")
        self._check_dilation()
        _check(self.max_waiting >= 1, "max_waiting", self.max_waiting, ">= 1")
        self._check_ep(self.profile)

    @property
    def profile(self) -> ModelProfile:
        """The model profile named by `model`."""
        return get_profile(self.model)

    @property
    def model_name(self) -> str:
        """The name clients use in `model` (defaults to the profile name)."""
        return self.served_model_name or self.model

    @property
    def ep_traffic(self) -> EpTraffic:
        """This engine's all-to-all arithmetic (zcube_lab.serving.eptraffic)."""
        return self.ep_traffic_of(self.profile, self.bandwidth_scale)


@dataclass(frozen=True)
class PrefillConfig(EngineCommon):
    """A prefill instance: API on host:port, KV served on every `kv_bind` address."""

    kv_bind: tuple[Address, ...] = option(
        (Address("127.0.0.1", 7100),),
        help="host:port of a KV server (fabric address; repeat for each NIC port)",
        repeat=True,
        parse=addresses,
    )
    engine_id: str = option("", help="NIXL remote_engine_id", omit_default=True)
    token_budget: int = option(8192, help="prompt tokens per step")
    kv_lease_s: float = option(30.0, help="free unpulled KV after")
    prefix_cache_hit_rate: float = option(
        0.0, help="share of each prompt served from the prefix cache (no compute; KV still moves)"
    )
    # The KV transports served: TCP always; "mrc" also the MRC-style datagrams
    # (zcube_lab.serving.kvwire.mrc).
    kv_transport: str = option(
        "tcp",
        help="tcp, or mrc: also serve KV as MRC-style UDP datagrams on the kv-bind ports, one "
        "UDP socket per entropy value (EV)",
        omit_default=True,
    )
    kv_mrc_evs: int = option(
        16, help="mrc: EVs (UDP source ports) per KV address", omit_default=True
    )
    kv_mrc_ev_base: int = option(
        EV_BASE,
        help="mrc: the first EV source port (the fabric's EV rules read its bits); 0: ephemeral "
        "ports (loopback, no EV rules)",
        omit_default=True,
    )
    kv_mrc_mtu: int = option(1500, help="mrc: the path MTU datagrams fit", omit_default=True)
    # The KV-off control of the production cell (issue 33): 0 makes every request's KV one byte,
    # so a pull is a round trip and the EP exchanges run without KV load beside them.
    kv_share: float = option(
        1.0, help="share of each request's KV bytes that crosses the fabric", omit_default=True
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(0.0 <= self.kv_share <= 1.0, "kv_share", self.kv_share, "0 <= share <= 1")
        _check(
            0.0 <= self.prefix_cache_hit_rate < 1.0,
            "prefix_cache_hit_rate",
            self.prefix_cache_hit_rate,
            "0 <= rate < 1",
        )
        _check(len(self.kv_bind) >= 1, "kv_bind", self.kv_bind, "at least one host:port")
        _check(self.token_budget >= 1, "token_budget", self.token_budget, ">= 1")
        _check(self.kv_lease_s > 0, "kv_lease_s", self.kv_lease_s, "> 0 seconds")
        _check_transport(self.kv_transport)
        _check(1 <= self.kv_mrc_evs <= MAX_EVS, "kv_mrc_evs", self.kv_mrc_evs, f"1..{MAX_EVS}")
        _check(
            self.kv_mrc_ev_base == 0 or 1024 <= self.kv_mrc_ev_base <= 65536 - EV_SPAN,
            "kv_mrc_ev_base",
            self.kv_mrc_ev_base,
            "0 (ephemeral) or a port leaving room for the EVs",
        )
        _check(576 <= self.kv_mrc_mtu <= 65535, "kv_mrc_mtu", self.kv_mrc_mtu, "576..65535")

    @property
    def nixl_engine_id(self) -> str:
        """The id decode uses to look up this instance's KV addresses."""
        return self.engine_id or f"prefill@{self.host}:{self.port}"


@dataclass(frozen=True)
class DecodeConfig(EngineCommon):
    """A decode instance: pulls KV over `kv_streams` TCP streams per prefill KV address."""

    port: int = option(8200)
    # engine_id -> KV addresses; overrides the addresses prefill advertises.
    prefill_kv: tuple[tuple[str, tuple[Address, ...]], ...] = option(
        (),
        help="ENGINE_ID=host:port[,host:port]: a prefill's KV (fabric) addresses; repeatable",
        repeat=True,
        parse=lambda raw, _: parse_prefill_kv(raw),
        item=prefill_kv_item,
    )
    kv_streams: int = option(2, help="TCP streams per KV address")
    # KV connections opened to every --prefill-kv address before the engine answers its health
    # check, kept for pulls (zcube_lab.serving.kvwire.warm); 0: each opened by the first pull
    # needing it.
    kv_warm: int = option(
        0,
        help="open this many KV connections to every --prefill-kv address at start and keep "
        "them for pulls, so no SYN crosses a loaded fabric (ignored with --kv-transport mrc, "
        "which opens no connection; 0: opened on demand)",
        omit_default=True,
    )
    # (cidr, local address): the source address for KV pulls from addresses in cidr.
    kv_source_map: tuple[tuple[str, str], ...] = option(
        (),
        flag="--kv-source",
        help="CIDR=LOCAL: pull KV from addresses in CIDR with local source address LOCAL "
        "(repeatable; picks the NIC port, e.g. on ZCube)",
        repeat=True,
        parse=lambda raw, _: parse_kv_sources(raw),
        item=lambda entry: "=".join(entry),
    )
    kv_chunk_bytes: int = option(
        256 * 1024, help="largest KV chunk (with --kv-chunks-per-lane 0: every chunk's size)"
    )
    # Chunks per lane of every pull (zcube_lab.serving.kvwire.chunk_size); 0: fixed kv_chunk_bytes
    # chunks.
    kv_chunks_per_lane: int = option(
        4,
        help="split each KV pull into this many chunks per lane (at most --kv-chunk-bytes "
        "each); 0: fixed --kv-chunk-bytes chunks",
        omit_default=True,
    )
    kv_retries: int = option(3)
    kv_timeout_s: float = option(10.0)
    # Retire a KV lane that receives no byte for this long and reopen it (None: never).
    kv_stall_timeout_s: float | None = option(
        None,
        help="retire a KV lane (TCP connection, i.e. path id) that receives no byte for this "
        "long, move its chunks to the other lanes and open a new one (default: off)",
        type=float,
        omit_default=True,
    )
    # Retired lanes one pull may replace (None: RETIRE_BUDGET_PER_LANE x its lanes).
    kv_max_retired: int | None = option(
        None,
        help="retired lanes one pull may replace (default: 4 x its lanes)",
        type=int,
        omit_default=True,
    )
    # With a stall timeout: how long an address whose lane stalled stays avoided by later pulls
    # unless a probe or lane gets an answer (None: PATH_HOLD_STALLS x the stall timeout;
    # 0: no memory across pulls).
    kv_path_hold_s: float | None = option(
        None,
        help="with --kv-stall-timeout-s: how long later pulls avoid (and only probe) a KV "
        f"address whose lane stalled (default: {PATH_HOLD_STALLS} x the stall timeout; 0: off)",
        type=float,
        omit_default=True,
    )
    # How KV is pulled: "tcp" (zcube_lab.serving.kvwire.pull) or "mrc"
    # (zcube_lab.serving.kvwire.mrc).
    kv_transport: str = option(
        "tcp",
        help="tcp (lanes of TCP connections) or mrc (MRC-style UDP datagrams sprayed over "
        "entropy values; prefill must serve it: its --kv-transport mrc)",
        omit_default=True,
    )
    kv_mrc_rate_mbps: float = option(
        0.0, help="mrc: pace each leg at this rate, Mb/s (0: window-limited)", omit_default=True
    )
    kv_mrc_delay_bound_ms: float = option(
        0.0,
        help="mrc: the longest modelled ms a datagram may wait in its paths' queues without "
        "being lost (a pause is not a loss); 0: the sender's retransmission timeout only",
        omit_default=True,
    )
    # Append one JSON line per KV pull attempt to this file ("": no log).
    kv_log: str = option(
        "", help="append one JSON line per KV pull attempt to this file", omit_default=True
    )
    max_num_seqs: int = option(0, help="0: the profile's")
    eos_probability: float = option(0.02)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(1 <= self.kv_streams <= 64, "kv_streams", self.kv_streams, "1..64")
        _check(0 <= self.kv_warm <= 64, "kv_warm", self.kv_warm, "0..64")
        check_source_map(self.kv_source_map, "kv_source")
        _check(
            4096 <= self.kv_chunk_bytes <= 64 * 2**20,
            "kv_chunk_bytes",
            self.kv_chunk_bytes,
            "4096..67108864",
        )
        _check(
            0 <= self.kv_chunks_per_lane <= 64,
            "kv_chunks_per_lane",
            self.kv_chunks_per_lane,
            "0..64 (0: fixed --kv-chunk-bytes chunks)",
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
        _check_transport(self.kv_transport)
        _check(self.kv_mrc_rate_mbps >= 0, "kv_mrc_rate_mbps", self.kv_mrc_rate_mbps, ">= 0")
        bound = self.kv_mrc_delay_bound_ms
        _check(0 <= bound <= 60_000, "kv_mrc_delay_bound_ms", bound, "0..60000")
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
class GatewayConfig(Dilated):
    """The router: OpenAI API on host:port, prefill and decode management URLs behind it."""

    model: str = option("tiny")
    served_model_name: str = option("", omit_default=True)
    host: str = option("127.0.0.1")
    port: int = option(8000)
    prefill_urls: tuple[str, ...] = option(
        (), flag="--prefill-url", help="repeatable", repeat=True, parse=parse_urls
    )
    decode_urls: tuple[str, ...] = option(
        (), flag="--decode-url", help="repeatable", repeat=True, parse=parse_urls
    )
    policy: str = option("least-outstanding")
    max_outstanding: int = option(2048)
    upstream_timeout_s: float = option(600.0)
    # The shifting incast (zcube_lab.serving.routing.HotSet): each decode is chosen among this many
    # decode instances, redrawn every hotspot_period_s (0: among all of them).
    decode_hotspot: int = option(
        0,
        help="choose decodes among N hot instances that change over time (0: all)",
        omit_default=True,
    )
    hotspot_period_s: float = option(
        5.0, help="seconds before the hot decode set moves", omit_default=True
    )
    # Append one JSON line per answered request (exact timings) to this file ("": no log).
    request_log: str = option(
        "",
        help="append one JSON line per request (arrival, first token, TTFT, tokens, status)",
        omit_default=True,
    )
    dilation: float = _dilation()

    def __post_init__(self) -> None:
        get_profile(self.model)
        self._check_dilation()
        _check(0 <= self.port <= 65535, "port", self.port, "0..65535")
        for name in ("prefill_urls", "decode_urls"):
            urls = getattr(self, name)
            _check(len(urls) >= 1, name, list(urls), "at least one http://host:port URL")
            for u in urls:
                _check(u.startswith(("http://", "https://")), name, u, "an http(s):// URL")
        _check(
            self.policy in BALANCING_POLICIES,
            "policy",
            self.policy,
            "one of " + ", ".join(BALANCING_POLICIES),
        )
        _check(self.max_outstanding >= 1, "max_outstanding", self.max_outstanding, ">= 1")
        _check(self.upstream_timeout_s > 0, "upstream_timeout_s", self.upstream_timeout_s, "> 0")
        _check(
            0 <= self.decode_hotspot <= len(self.decode_urls),
            "decode_hotspot",
            self.decode_hotspot,
            f"0..{len(self.decode_urls)} (the decode instances)",
        )
        _check(self.hotspot_period_s > 0, "hotspot_period_s", self.hotspot_period_s, "> 0")
        _check("\n" not in self.request_log, "request_log", self.request_log, "a file path")

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

    bind: tuple[Address, ...] = option(
        (Address("127.0.0.1", 7200),),
        help="host:port, repeatable",
        repeat=True,
        required=True,
        parse=addresses,
    )

    def __post_init__(self) -> None:
        _check(len(self.bind) >= 1, "bind", self.bind, "at least one host:port")
