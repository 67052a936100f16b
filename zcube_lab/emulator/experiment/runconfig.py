"""`RunConfig`: everything that defines a run, each option declared once (pure).

A field's `option(...)` (`zcube_lab.core.options`) carries its flag, default and help, and so
drives the flags of `run`, `compare` and `sweep` (and the link flags `up` and `fabric` share),
the copy of the parsed flags into the config (`from_args`) and the command lines benchmarks
write (`run_argv_of`). Options that default to the workload profile's hint (`unset`: prefill
servers, layout, prefix-cache hit rate, the hot decode set) take it from `profile_fallback`.
The run's placement options are `LayoutSpec`'s fields (`zcube_lab.core.fabric.placement`),
declared as flags here (`LAYOUT_OPTIONS`).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from zcube_lab.core.clock import Clock, check_dilation
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.clusterplan import check_machine_list
from zcube_lab.core.fabric.description import Fabric, FabricSpec
from zcube_lab.core.fabric.hostplan import (
    CONGESTION_CONTROLS,
    DEFAULT_CONGESTION_CONTROL,
    check_congestion_control,
)
from zcube_lab.core.fabric.placement import LayoutSpec
from zcube_lab.core.fabric.queues import (
    BUFFER_MODELS,
    CHIPS,
    DEFAULT_BUFFER_MODEL,
    DEFAULT_CHIP,
    HOST_QUEUE_PACKETS,
    MAX_MTU,
    MAX_QUEUE_PACKETS,
    MIN_MTU,
    MIN_QUEUE_PACKETS,
    QueueModel,
    fabric_mtu,
)
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.core.options import Option, argv_of, option
from zcube_lab.core.policies import get_policy
from zcube_lab.serving.epoptions import EP_PORTS, on_off, on_off_text
from zcube_lab.serving.eptraffic import FRAME_PACKETS
from zcube_lab.serving.models import PROFILES
from zcube_lab.workloads.profiles import load_profile

HOTSPOT_PERIOD_S = 5.0  # seconds a hot decode set lasts unless the run or profile says
# The servers a workload profile's counts are written for (`prefill_servers`: the 16-GPU
# fabrics of 4 servers the profiles were made on); other fabrics keep the share.
PROFILE_SERVERS = 4


def mtu_arg(text: str) -> int | str:
    """--mtu: a number of bytes or `auto` (the MTU rule of zcube_lab.core.fabric.queues)."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number or 'auto'") from None


def _machine_list(raw: str | None, field_name: str = "machines") -> tuple[str, ...]:
    return tuple(a.strip() for a in (raw or "").split(",") if a.strip())


# LayoutSpec's fields as the run's flags, in the order of the help.
LAYOUT_OPTIONS: tuple[tuple[str, Option], ...] = (
    (
        "prefill_servers",
        Option(
            type=int,
            unset=True,
            help="servers that prefill (default: the profile's, or 1)",
        ),
    ),
    ("decode_servers", Option(type=int, help="servers that decode (default: the rest)")),
    (
        "ep_servers",
        Option(type=int, unset=True, help="servers per EP instance (default: the profile's, or 1)"),
    ),
    (
        "alltoall",
        Option(
            unset=True,
            help="EP exchange: rail (same rank) or all (default: the profile's, or rail)",
        ),
    ),
    (
        "layout",
        Option(
            unset=True,
            help="default or rail-aligned (default: the workload profile's hint)",
        ),
    ),
)

# The flags of each help group, in order (`zcube_lab.cli.commands.run`).
WORKLOAD_FIELDS = (
    "workload", "duration_s", "rate", "arrival", "burstiness", "length_scale", "seed", "drain_s",
)  # fmt: skip
# How the expert-parallel exchange is sent (zcube_lab.serving.epoptions), with the cluster's flags.
EP_FIELDS = ("ep_ports", "ep_per_node", "ep_node_limit", "ep_dbo", "ep_frame_packets")
CLUSTER_FIELDS = (
    "model", "layout", "kv_streams", "kv_warm", "kv_paths", "prefix_cache_hit_rate",
    "decode_hotspot", "hotspot_period_s", "kv_off", *EP_FIELDS,
)  # fmt: skip
LINK_FIELDS = ("mtu", "buffer_model", "switch_chip", "queue_packets", "host_queue_packets")
LAB_FIELDS = (
    "policy", "faults", "nic_mbps", "dilation", "machines", *LINK_FIELDS, "lossless",
    "congestion_control", "kv_transport", "ovs_instances", "results_root",
)  # fmt: skip


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; written to config.json."""

    fabric: FabricSpec
    workload: str = option(
        "coding-agent",
        help="profile name (coding-agent, chat, kv-heavy, hotspot, production, rail-aligned, "
        "trace) or a profile JSON path",
    )
    duration_s: float = option(60.0, flag="--duration", help="seconds of arrivals")
    rate: float | None = option(None, type=float, help="mean requests/s (default: the profile's)")
    arrival: str | None = option(
        None, help="poisson, gamma, fixed or staged (default: the profile's)"
    )
    burstiness: float | None = option(
        None, type=float, help="gamma shape k (1 = Poisson, < 1 burstier)"
    )
    seed: int = option(1, help="same seed, same requests on every fabric")
    model: str = option("glm-5.1", help="model profile of the serving engines")
    length_scale: float | None = option(None, type=float, help="multiply every token length")
    nic_mbps: float = option(
        100.0,
        help="emulated rate of one GPU NIC in Mb/s (ZCube ports get half each); "
        "bandwidth_scale = full-scale NIC rate / this",
    )
    # or "auto": zcube_lab.core.fabric.queues.fabric_mtu
    mtu: int | str = option(
        MAX_MTU,
        type=mtu_arg,
        help=f"MTU of every fabric interface (default {MAX_MTU}); auto: the largest whose "
        "per-hop serialization on the slowest link stays within 2%% of a 50 ms transfer",
    )
    # every switch port's queue; None: the buffer model's
    queue_packets: int | None = option(
        None,
        type=int,
        help=f"queue limit of every switch port in packets ({MIN_QUEUE_PACKETS} to "
        f"{MAX_QUEUE_PACKETS}; default: the buffer model of zcube_lab/core/fabric/queues.py)",
    )
    host_queue_packets: int = option(
        HOST_QUEUE_PACKETS,
        help=f"queue limit of every host NIC port in packets (default {HOST_QUEUE_PACKETS}: "
        "a NIC back-pressures its host instead of dropping)",
    )
    buffer_model: str = option(
        DEFAULT_BUFFER_MODEL,
        choices=BUFFER_MODELS,
        help=f"switch buffer model sizing every switch port's queue (default "
        f"{DEFAULT_BUFFER_MODEL}; docs/DOMAIN.md section 5, Switch buffer models)",
    )
    # the chip whose buffer the shared/bytes/time models share
    switch_chip: str = option(
        DEFAULT_CHIP,
        choices=sorted(CHIPS),
        help=f"switch chip generation whose buffer the shared/bytes/time models share out "
        f"(default {DEFAULT_CHIP}, the same chip for every fabric)",
    )
    congestion_control: str = option(
        DEFAULT_CONGESTION_CONTROL,
        flag="--cc",
        choices=CONGESTION_CONTROLS,
        help=f"TCP congestion control in every host namespace (default "
        f"{DEFAULT_CONGESTION_CONTROL}: the kernel's own, which hosts inherited before; "
        "docs/DOMAIN.md section 5)",
    )
    ovs_instances: int = option(
        0,
        metavar="N",
        help="0 (default): every switch in the system Open vSwitch, whose one main thread "
        "serves every port; N: N private ovs-vswitchd instances, the switches dealt among them "
        "(userspace datapath; docs/BENCHMARKS.md, datapath levers)",
    )
    lossless: bool = option(
        False,
        switch=True,
        unset=True,
        help="lossless switch ports (PFC-like): a queue past XOFF (the buffer model's limit) "
        "pauses the ports feeding it until XON, hop by hop, instead of dropping; an agent "
        "process does it (docs/LOSSLESS.md; default: the workload profile's, the production "
        "profile's on; --no-lossless: off)",
    )
    policy: str = option(
        "ecmp",
        help="routing policy, what reacts to failures: static, ecmp, ff, recompute or spray "
        "(docs/FAILURES.md)",
    )
    faults: tuple[str, ...] = option(  # zcube_lab.core.fault_schedule's grammar
        (),
        flag="--fail",
        repeat=True,
        metavar="SPEC",
        help="inject a failure, repeatable: 'link a1-b2 at 30s for 10s', 'switch leaf1 at 20s "
        "for 5s', 'flaps 3 seed 7 for 4s', 'engine decode-3 at 20s', 'controller at 20s for "
        "10s', 'vswitchd at 20s' (times from the load start; docs/FAILURES.md); a 'zcube:' or "
        "'roft:' prefix applies it to that fabric only (for compare)",
    )
    # option() returns a dataclasses.field (ruff cannot tell)
    layout: LayoutSpec = option(default_factory=LayoutSpec, nested=LAYOUT_OPTIONS)  # noqa: RUF009
    kv_streams: int = option(2, help="TCP streams per KV address")
    kv_warm: int = option(
        0,
        metavar="N",
        help="each decode opens N KV connections to every prefill address before the load and "
        "keeps them for pulls, so no SYN crosses a loaded fabric: for dilated runs with deep "
        "queues, where the kernel's undilated 1 s SYN timeout fires (docs/DOMAIN.md §4; tcp "
        "only; default 0: opened by the pulls)",
    )
    kv_transport: str = option(
        "tcp",
        choices=("tcp", "mrc"),
        help="how decode pulls KV: tcp (lanes of TCP connections, the default) or mrc "
        "(MRC-style UDP datagrams sprayed over entropy values that name their paths; the "
        "controller installs the EV rules; docs/FAILURES.md)",
    )
    prefix_cache_hit_rate: float = option(
        0.0,
        type=float,
        unset=True,
        help="share of each prompt served from prefill's prefix cache (default: the profile's)",
    )
    kv_paths: str = option(
        "disjoint",
        choices=["disjoint", "shortest"],
        help="ZCube: disjoint binds each KV lane to its own NIC port and 2-hop path; "
        "shortest lets host routes pick (same-rail pulls then share one port)",
    )
    decode_hotspot: int = option(
        0,
        type=int,
        unset=True,
        help="the shifting incast: decodes go to N hot decode engines that move over time "
        "(default: the profile's, or 0 = every decode)",
    )
    hotspot_period_s: float = option(
        HOTSPOT_PERIOD_S,
        flag="--hotspot-period",
        type=float,
        unset=True,
        help="seconds before the hot decode set moves (default: the profile's, or 5)",
    )
    # -- expert-parallel traffic: the engines' EpOptions (zcube_lab.serving.epoptions), modelling
    # choices for the sensitivity table; None keeps the model profile's
    # (zcube_lab.serving.models.ExpertWire).
    ep_ports: str = option(
        "all",
        help="EP exchange: all (default) uses every NIC port of each peer, one connection per "
        "port and path, the bytes split evenly (ZCube's two ports, ROFT's planes); one: the "
        "first address only, on the host's shortest routes (the lab's behaviour before)",
    )
    ep_per_node: bool | None = option(
        None,
        metavar="on|off",
        parse=on_off,
        item=on_off_text,
        help="EP: on sends each token once per destination node (DeepEP's normal kernels), "
        "off once per routed expert (default: the model profile's)",
    )
    ep_node_limit: int | None = option(
        None,
        type=int,
        help="EP: route each token to at most this many nodes (0: no limit; default: the model "
        "profile's)",
    )
    ep_dbo: bool | None = option(
        None,
        metavar="on|off",
        parse=on_off,
        item=on_off_text,
        help="EP: dual-batch overlap on (two micro-batches hide each other's exchange behind "
        "compute) or off (each frame's exchange follows its compute; default: the model "
        "profile's)",
    )
    ep_frame_packets: int = option(
        FRAME_PACKETS,
        help=f"EP: group MoE layers into frames of at least this many 9,000-byte packets per "
        f"connection (default {FRAME_PACKETS}; zcube_lab.serving.eptraffic)",
    )
    scrape_interval_s: float = 1.0
    drain_s: float = option(60.0, flag="--drain", help="max seconds to finish in-flight")
    # Time dilation k (docs/DOMAIN.md §4): modelled times, gaps and timeouts x k, link rates / k,
    # reported times / k. duration_s and drain_s stay modelled seconds (k times longer in wall).
    dilation: float = option(
        1.0,
        metavar="K",
        help="time dilation (1-16): modelled times, arrival gaps and timeouts x K, link rates / K, "
        "reported times / K; for a point the machine cannot carry at 1 (docs/DOMAIN.md §4)",
    )
    results_root: Path = option(  # noqa: RUF009 (a field; a Path is immutable)
        Path("results"), flag="--results", type=Path, help="results folder"
    )
    tag: str = ""
    # Lab machines by wire address, this machine's first (zcube_lab.emulator.cluster); () = this one
    # only.
    machines: tuple[str, ...] = option(
        (),
        metavar="ADDRS",
        unset=True,
        parse=_machine_list,
        item=",".join,
        help="spread the lab over machines: wire addresses, this machine's first (e.g. "
        "198.19.254.1,198.19.254.2; scripts/peer.sh makes a second one here; docs/SCALE.md). "
        "Locust runs a master here and a worker on every machine",
    )

    # -- the production cell (issue 33): the KV-off control ------------------------------------
    kv_off: bool = option(
        False,
        switch=True,
        help="the KV-off control: each pull moves one byte instead of the request's KV, so the "
        "same seed's EP exchanges run without KV load beside them (docs/LOSSLESS.md, victim "
        "accounting)",
    )

    def __post_init__(self) -> None:
        if not 5 <= self.duration_s <= 3600:
            raise ConfigError("duration", self.duration_s, "between 5 and 3600 seconds")
        if self.model not in PROFILES:
            raise ConfigError("model", self.model, f"one of {list(PROFILES)}")
        if self.rate is not None and not 0 < self.rate <= 1000:
            raise ConfigError("rate", self.rate, "between 0 and 1000 requests/s")
        if not 0 < self.nic_mbps <= 1000:
            raise ConfigError("nic_mbps", self.nic_mbps, "between 0 and 1000 Mb/s")
        self.queue_model()  # names a bad queue option now, not when the lab starts
        check_congestion_control(self.congestion_control)
        if not 0 <= self.ovs_instances <= 64:
            raise ConfigError("ovs_instances", self.ovs_instances, "between 0 and 64")
        if self.mtu != "auto" and not (
            isinstance(self.mtu, int) and MIN_MTU <= self.mtu <= MAX_MTU
        ):
            raise ConfigError("mtu", self.mtu, f"auto or an integer {MIN_MTU}-{MAX_MTU}")
        if not 0 <= self.drain_s <= 3600:
            raise ConfigError("drain", self.drain_s, "between 0 and 3600 seconds")
        get_policy(self.policy)
        if self.kv_transport not in ("tcp", "mrc"):
            raise ConfigError("kv_transport", self.kv_transport, "tcp or mrc")
        if self.kv_transport == "mrc" and self.machines:
            # EV rules are checked on one machine's fabric only (tests/integration/test_mrc.py).
            raise ConfigError("kv_transport", "mrc", "tcp in a run over several machines")
        if not 1 <= self.kv_streams <= 16:
            raise ConfigError("kv_streams", self.kv_streams, "between 1 and 16")
        if not 0 <= self.kv_warm <= 16:
            raise ConfigError("kv_warm", self.kv_warm, "between 0 and 16")
        if self.kv_warm and self.kv_transport != "tcp":
            raise ConfigError("kv_warm", self.kv_warm, "0 with --kv-transport mrc")
        if self.kv_paths not in ("disjoint", "shortest"):
            raise ConfigError("kv_paths", self.kv_paths, "disjoint or shortest")
        if self.decode_hotspot < 0:
            raise ConfigError("decode_hotspot", self.decode_hotspot, "0 (off) or a count >= 1")
        if not 0 < self.hotspot_period_s <= 3600:
            raise ConfigError("hotspot_period", self.hotspot_period_s, "0 < seconds <= 3600")
        if not 0 <= self.prefix_cache_hit_rate < 1:
            raise ConfigError("prefix_cache_hit_rate", self.prefix_cache_hit_rate, "0 <= rate < 1")
        self._check_ep()
        check_dilation(self.dilation)
        if self.dilation != 1 and self.faults:
            # The fault schedule, the injector and the fault report run on wall time.
            raise ConfigError("dilation", self.dilation, "1 (off) in a run with --fail")
        if self.machines:
            check_machine_list(self.machines)
            if self.lossless:
                # The lossless agent watches and pauses the ports of this machine only.
                raise ConfigError("lossless", True, "off in a run over several machines")
            if self.faults:
                # The injector sets links down on this machine only.
                raise ConfigError("fail", list(self.faults), "none in a run over several machines")

    def _check_ep(self) -> None:
        """The EP options, named by their flag with the values allowed."""
        if self.ep_ports not in EP_PORTS:
            raise ConfigError("ep_ports", self.ep_ports, " or ".join(EP_PORTS))
        for name in ("ep_per_node", "ep_dbo"):
            if getattr(self, name) not in (None, True, False):
                raise ConfigError(name, getattr(self, name), "on or off")
        if self.ep_node_limit is not None and (
            isinstance(self.ep_node_limit, bool)
            or not isinstance(self.ep_node_limit, int)
            or self.ep_node_limit < 0
        ):
            raise ConfigError("ep_node_limit", self.ep_node_limit, "a whole number >= 0 (0: none)")
        if not 1 <= self.ep_frame_packets <= 4096:
            raise ConfigError("ep_frame_packets", self.ep_frame_packets, "1 to 4096")

    def ep_options(self) -> dict[str, Any]:
        """The engines' EP options these fields set (zcube_lab.serving.epoptions; unset ones left
        out)."""
        out: dict[str, Any] = {
            "ep_ports": self.ep_ports,
            "ep_frame_packets": self.ep_frame_packets,
        }
        for name in ("ep_per_node", "ep_node_limit", "ep_dbo"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    @property
    def clock(self) -> Clock:
        """The run's modelled and wall seconds (its time dilation)."""
        return Clock(self.dilation)

    @property
    def wall_s(self) -> float:
        """Wall seconds the load may take: the arrivals and the drain, dilated."""
        return self.clock.wall(self.duration_s + self.drain_s)

    def queue_model(self) -> QueueModel:
        """The queue limits of every shaped port (zcube_lab.core.fabric.queues)."""
        return QueueModel(
            packets=self.queue_packets,
            host_packets=self.host_queue_packets,
            buffer_model=self.buffer_model,
            chip=self.switch_chip,
        )

    def link_mtu(self, fabric: Fabric, scale: Scale) -> int:
        """The MTU of every fabric interface: as given, or the rule's for `auto`."""
        return fabric_mtu(fabric, scale) if self.mtu == "auto" else int(self.mtu)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fabric"] = json.loads(self.fabric.to_json())
        d["results_root"] = str(self.results_root)
        return d


def run_argv_of(**values: Any) -> list[str]:
    """The `zcube-lab run` flags that set these `RunConfig` fields (a benchmark's command line;
    the rest keep their defaults)."""
    return argv_of(RunConfig, **values)


def profile_hint(workload: str, name: str, default: object) -> object:
    """A workload profile's value for a run option (`placement`, `prefix_cache_hit_rate`), or
    `default` when the profile leaves it unset."""
    value = getattr(load_profile(workload), name, None)
    return default if value is None else value


def hotspot_hint(workload: str) -> tuple[int, float]:
    """A workload profile's hot decode set as (decodes, period_s); (0, the default period)
    when the profile has none (every decode is a candidate)."""
    hotspot = load_profile(workload).hotspot
    return (hotspot.decodes, hotspot.period_s) if hotspot else (0, HOTSPOT_PERIOD_S)


def layout_hint(workload: str) -> str:
    """The placement layout a workload profile asks for: `rail-aligned` or `default`."""
    placement = profile_hint(workload, "placement", "")
    return "rail-aligned" if placement == "rail-aligned" else "default"


def prefill_servers_hint(workload: str, servers: int = PROFILE_SERVERS) -> int:
    """The profile's prefill servers (1 unless it says) for a fabric of `servers` servers: its
    count is for `PROFILE_SERVERS`, so the prefill share of the servers is kept (coding-agent's
    1 of 4 is 2 of 8; kv-heavy's 3 of 4, 6 of 8), at least 1 and leaving a decode server."""
    hint = int(profile_hint(workload, "prefill_servers", 1))  # type: ignore[call-overload]
    if servers == PROFILE_SERVERS:
        return hint
    return min(max(1, round(hint * servers / PROFILE_SERVERS)), max(1, servers - 1))


def profile_fallback(workload: str, fabric: FabricSpec | None = None) -> dict[str, Any]:
    """The values of the `unset` run flags (by their argparse name) a workload profile gives:
    prefill servers (kept as a share of `fabric`'s servers: `prefill_servers_hint`), layout,
    prefix-cache hit rate, the hot decode set, expert parallelism and the lossless mode."""
    hot_decodes, hot_period = hotspot_hint(workload)
    servers = PROFILE_SERVERS
    if fabric is not None:
        servers = len({h.server for h in build_fabric(fabric).hosts})
    profile = load_profile(workload)
    ep = profile.expert_parallel
    return {
        "ep_servers": ep.servers if ep else 1,
        "alltoall": ep.alltoall if ep else "rail",
        "lossless": profile.lossless,
        "prefill_servers": prefill_servers_hint(workload, servers),
        "layout": layout_hint(workload),
        "prefix_cache_hit_rate": float(profile_hint(workload, "prefix_cache_hit_rate", 0.0)),  # type: ignore[arg-type]
        "decode_hotspot": hot_decodes,
        "hotspot_period": hot_period,
    }
