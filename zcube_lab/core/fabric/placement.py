"""Placing a PD-disaggregated serving cluster on a fabric's GPU hosts (pure).

Default layout (documented in docs/EXPERIMENTS.md): whole servers are either prefill or decode,
the first `prefill_servers` servers prefill and the rest decode (1:3 on 4 servers, close to the
4:18 node ratio of one public deployment). Every GPU host runs one engine, as with vLLM's
data-parallel attention for MLA models (GLM-5.1, DeepSeek-V3): each GPU holds its own requests'
KV cache, so a KV transfer runs from one prefill GPU to whichever decode GPU the router picks,
usually on another rail.

Expert parallelism: an instance spans `ep_servers` whole servers. Inside a server the all-to-all
would ride NVLink, which the lab does not emulate; across servers it crosses the fabric. With
`alltoall="rail"` a GPU exchanges with the same-rank GPU of every other server of its instance
(rail-aligned, PXN-style); with `alltoall="all"` with every GPU of the other servers.

`layout="rail-aligned"` tags each engine with its rail so the gateway pairs a prefill with a
decode on the same rail: the case a rail-optimised fabric is built for.

Names: engine ids are `prefill-<gid>` / `decode-<gid>`, after the GPU host they run on.
"""

from __future__ import annotations

from dataclasses import dataclass

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric

LAYOUTS = ("default", "rail-aligned")
ALLTOALL = ("rail", "all")


@dataclass(frozen=True)
class LayoutSpec:
    """How to place the cluster."""

    prefill_servers: int = 1
    decode_servers: int | None = None  # None: every server not prefilling
    ep_servers: int = 1
    layout: str = "default"
    alltoall: str = "rail"

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ConfigError("layout", self.layout, f"one of {list(LAYOUTS)}")
        if self.alltoall not in ALLTOALL:
            raise ConfigError("alltoall", self.alltoall, f"one of {list(ALLTOALL)}")
        if self.prefill_servers < 1:
            raise ConfigError("prefill_servers", self.prefill_servers, "at least 1")
        if self.decode_servers is not None and self.decode_servers < 1:
            raise ConfigError("decode_servers", self.decode_servers, "at least 1")
        if self.ep_servers < 1:
            raise ConfigError("ep_servers", self.ep_servers, "at least 1")


@dataclass(frozen=True)
class Engine:
    """One serving engine on one GPU host."""

    role: str  # "prefill" or "decode"
    host: str
    engine_id: str
    rail: int
    instance: int
    ep_peers: tuple[str, ...]  # hosts whose EP workers this engine exchanges with


@dataclass(frozen=True)
class Placement:
    """Every engine of the cluster."""

    engines: tuple[Engine, ...]
    layout: LayoutSpec

    def role(self, role: str) -> tuple[Engine, ...]:
        """The engines of one role."""
        return tuple(e for e in self.engines if e.role == role)

    @property
    def ep_hosts(self) -> tuple[str, ...]:
        """Hosts that must run an EP worker (some engine exchanges with them)."""
        return tuple(sorted({p for e in self.engines for p in e.ep_peers}, key=_host_key))


def _host_key(name: str) -> int:
    return int(name[1:])


def place(fabric: Fabric, spec: LayoutSpec) -> Placement:
    """Place prefill and decode engines on the fabric's servers."""
    servers = sorted({h.server for h in fabric.hosts})
    decode_servers = (
        len(servers) - spec.prefill_servers if spec.decode_servers is None else spec.decode_servers
    )
    if spec.prefill_servers + max(decode_servers, 0) > len(servers) or decode_servers < 1:
        raise ConfigError(
            "prefill_servers",
            spec.prefill_servers,
            f"prefill + decode servers must fit the fabric's {len(servers)} servers "
            f"with at least one of each",
        )
    for role, count in (("prefill", spec.prefill_servers), ("decode", decode_servers)):
        if spec.ep_servers > count:
            raise ConfigError(
                "ep_servers",
                spec.ep_servers,
                f"an EP instance of {spec.ep_servers} servers is wider than the {count} {role} "
                f"servers of a fabric with {len(servers)} servers",
            )
        if count % spec.ep_servers:
            raise ConfigError(
                "ep_servers",
                spec.ep_servers,
                f"must divide the {count} {role} servers (an instance spans whole servers)",
            )
    by_server: dict[int, list] = {}
    for h in fabric.hosts:
        by_server.setdefault(h.server, []).append(h)
    engines: list[Engine] = []
    plan = [("prefill", servers[: spec.prefill_servers])]
    plan.append(("decode", servers[spec.prefill_servers : spec.prefill_servers + decode_servers]))
    instance = 0
    for role, role_servers in plan:
        for start in range(0, len(role_servers), spec.ep_servers):
            group = role_servers[start : start + spec.ep_servers]
            for server in group:
                for h in sorted(by_server[server], key=lambda x: x.gid):
                    peers = tuple(
                        o.name
                        for other in group
                        if other != server
                        for o in sorted(by_server[other], key=lambda x: x.gid)
                        if spec.alltoall == "all" or o.rank == h.rank
                    )
                    engines.append(Engine(role, h.name, f"{role}-{h.gid}", h.rank, instance, peers))
            instance += 1
    return Placement(tuple(engines), spec)
