"""Fabric builders registered by short name: `zcube`, `roft`, `clos`.

Each builder validates its sizes up front (a `ConfigError` names the parameter and what would
fit) and returns a `Fabric` (see `zcube_lab.core.fabric.description` for the naming
scheme). Pure: no root needed.

Wiring (docs/DOMAIN.md §2):
- zcube: two groups of n switches, A and B; N = n*n NICs with two ports; NIC `gid` port 1 goes
  to `A[gid // n]`, port 2 to `B[gid % n]`; A-B is a complete bipartite graph with m links per
  pair. Port rate = NIC rate / 2.
- roft: rail-optimised fat tree: GPU r of every server goes to the rail-r leaf (one leaf per rail
  per group of `servers_per_leaf` servers); leaves meshed to every spine. One NIC port per GPU at
  the full NIC rate. With `planes` P > 1 (multi-plane, as MRC deploys it): P identical,
  disconnected leaf-spine planes `p<k>leaf<i>`, `p<k>spine<j>`; NIC port k (`h<gid>-eth<k>`,
  an address of plane k) goes to plane k, and every link of plane k runs at NIC rate / P, so
  the planes together carry what one plane would.
- clos: leaf-spine where all GPUs of a server sit under one leaf.
Addresses follow the lab's one address plan (`zcube_lab.core.fabric.addressing`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.addressing import (
    MAX_COLUMNS,
    check_rows,
    fabric_address,
    host_mac,
    plane_network,
    plane_rows,
    row_network,
)
from zcube_lab.core.fabric.description import (
    Fabric,
    FabricSpec,
    Host,
    Interface,
    Link,
    Route,
    Switch,
)

DEFAULT_NIC_GBPS = 400.0
ROLE_CODES = {"A": 0xA, "B": 0xB, "leaf": 0x1, "spine": 0x2, "core": 0x3}
# Plane k's names start `p<k>`: one digit keeps `p7leaf12-eth16` within Linux's 15 characters.
MAX_PLANES = 8
IFNAME_MAX = 15


def _dpid(role: str, index: int, plane: int = 0) -> int:
    # Hex digits read plane, role, index: plane 1's leaf 3 is 0x110004; plane 0 keeps the
    # 1-plane ids.
    return (plane << 20) | (ROLE_CODES[role] << 16) | (index + 1)


def _mac(gid: int, iface: int) -> str:
    return host_mac(gid, iface)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _require_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, value, "must be a whole number")
    if value < low or (high is not None and value > high):
        span = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise ConfigError(name, value, f"must be {span}")
    return value


def _require_rate(name: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigError(name, value, "must be a positive number of Gb/s")
    return float(value)


def _largest_divisor_upto(n: int, cap: int) -> int:
    return max(d for d in _divisors(n) if d <= cap)


# -- ZCube ---------------------------------------------------------------------------------
def zcube_addresses(gid: int, n: int) -> tuple[str, str]:
    """Fabric addresses of NIC `gid`: port 1 (on A[s]) and port 2 (on B[r])."""
    s, r = divmod(gid, n)
    return fabric_address(0, 2, s, r), fabric_address(1, 2, r, s)


def build_zcube(
    n: int = 4, m: int = 1, gpus_per_server: int | None = None, nic_gbps: float = DEFAULT_NIC_GBPS
) -> Fabric:
    """ZCube: n A switches, n B switches, n*n dual-port NICs, m links per A-B pair."""
    n = _require_int("n", n, 2, plane_rows(2))
    m = _require_int("m", m, 1, 16)
    nic = _require_rate("nic_gbps", nic_gbps)
    if gpus_per_server is None:
        gpus_per_server = _largest_divisor_upto(n, 8)
    gps = _require_int("gpus_per_server", gpus_per_server, 1)
    if n % gps:
        raise ConfigError(
            "gpus_per_server",
            gps,
            f"must divide n={n} (an A switch holds whole servers): one of {_divisors(n)}",
        )
    port = nic / 2
    hosts: list[Host] = []
    links: list[Link] = []
    for gid in range(n * n):
        s, r = divmod(gid, n)
        ip1, ip2 = zcube_addresses(gid, n)
        name = f"h{gid}"
        ifaces = (Interface(name, 0, ip1, _mac(gid, 0)), Interface(name, 1, ip2, _mac(gid, 1)))
        # Same segment: 1 hop via A[s] on port 1; same rail: 1 hop via B[r] on port 2;
        # otherwise dst port 1 is reached via B[r] (leave on port 2) and dst port 2 via A[s]
        # (leave on port 1): the two link-disjoint 2-hop paths.
        routes = (
            Route(row_network(0, 2, s), 0),
            Route(row_network(1, 2, r), 1),
            Route(str(plane_network(0, 2)), 1),
            Route(str(plane_network(1, 2)), 0),
        )
        hosts.append(Host(name, gid, gid // gps, gid % gps, r, ifaces, routes))
        links.append(Link(name, 0, f"a{s}", r + 1, port))
        links.append(Link(name, 1, f"b{r}", s + 1, port))
    for i in range(n):
        for j in range(n):
            for k in range(m):
                links.append(Link(f"a{i}", n + 1 + j * m + k, f"b{j}", n + 1 + i * m + k, port))
    radix = n + n * m
    switches = [Switch(f"a{i}", _dpid("A", i), "A", i, radix) for i in range(n)]
    switches += [Switch(f"b{j}", _dpid("B", j), "B", j, radix) for j in range(n)]
    spec = FabricSpec.of("zcube", n=n, m=m, gpus_per_server=gps, nic_gbps=nic)
    return Fabric(spec, nic, tuple(hosts), tuple(switches), tuple(links))


# -- leaf-spine (ROFT and Clos share the tier-2 wiring) -------------------------------------
def _uplinks(downlinks: int, oversubscription: Any, spines: int) -> int:
    """Links from one leaf to each spine, validated."""
    if (
        isinstance(oversubscription, bool)
        or not isinstance(oversubscription, int | float)
        or not math.isfinite(oversubscription)
    ):
        raise ConfigError("oversubscription", oversubscription, "must be a number >= 1")
    if oversubscription < 1:
        raise ConfigError("oversubscription", oversubscription, "must be >= 1 (1 means 1:1)")
    uplinks = downlinks / oversubscription
    if uplinks != int(uplinks) or uplinks < 1:
        fits = [downlinks // d for d in _divisors(downlinks)]
        raise ConfigError(
            "oversubscription",
            oversubscription,
            f"must divide the {downlinks} downlinks of a leaf: one of {fits}",
        )
    uplinks = int(uplinks)
    if uplinks % spines:
        raise ConfigError(
            "spines",
            spines,
            f"must divide the {uplinks} uplinks of a leaf (1:{oversubscription:g}): "
            f"one of {_divisors(uplinks)}",
        )
    return uplinks // spines


def _leaf_spine_links(
    leaves: int, downlinks: int, spines: int, per_spine: int, gbps: float, prefix: str = ""
) -> list[Link]:
    links = []
    for leaf in range(leaves):
        for sp in range(spines):
            for k in range(per_spine):
                links.append(
                    Link(
                        f"{prefix}leaf{leaf}",
                        downlinks + 1 + sp * per_spine + k,
                        f"{prefix}spine{sp}",
                        1 + leaf * per_spine + k,
                        gbps,
                    )
                )
    return links


def _leaf_spine_tier(
    leaves: int,
    downlinks: int,
    spines: int,
    per_spine: int,
    gbps: float,
    plane: int = 0,
    prefix: str = "",
) -> tuple[list[Switch], list[Link]]:
    """The leaf and spine switches and the links between them (ROFT and Clos alike); `plane`
    and `prefix` number and name the switches of one plane of a multi-plane fabric."""
    leaf_radix = downlinks + spines * per_spine
    switches = [
        Switch(f"{prefix}leaf{i}", _dpid("leaf", i, plane), "leaf", i, leaf_radix)
        for i in range(leaves)
    ]
    switches += [
        Switch(f"{prefix}spine{j}", _dpid("spine", j, plane), "spine", j, leaves * per_spine)
        for j in range(spines)
    ]
    return switches, _leaf_spine_links(leaves, downlinks, spines, per_spine, gbps, prefix)


def _check_divides_servers(servers_per_leaf: int, servers: int) -> None:
    if servers % servers_per_leaf:
        raise ConfigError(
            "servers_per_leaf",
            servers_per_leaf,
            f"must divide servers={servers}: one of {_divisors(servers)}",
        )


def _single_port_host(gid: int, server: int, rank: int, rail: int) -> Host:
    name = f"h{gid}"
    iface = Interface(name, 0, fabric_address(0, 1, server, rank), _mac(gid, 0))
    return Host(name, gid, server, rank, rail, (iface,), (Route(str(plane_network(0, 1)), 0),))


def _plane_host(gid: int, server: int, rank: int, planes: int) -> Host:
    """A ROFT host with one NIC port per plane: port k has a plane-k address, and plane k's /16
    leaves through port k, so naming a destination's plane-k address picks plane k. With one
    plane this is the single-port host."""
    name = f"h{gid}"
    ifaces = tuple(
        Interface(name, k, fabric_address(k, planes, server, rank), _mac(gid, k))
        for k in range(planes)
    )
    routes = tuple(Route(str(plane_network(k, planes)), k) for k in range(planes))
    return Host(name, gid, server, rank, rank, ifaces, routes)


def _check_interface_names(planes: int, links: list[Link]) -> None:
    """Mininet names a switch port `<switch>-eth<port>`, and Linux allows 15 characters."""
    names = (f"{n}-eth{p}" for lk in links for n, p in ((lk.node1, lk.port1), (lk.node2, lk.port2)))
    longest = max(names, key=len)
    if len(longest) > IFNAME_MAX:
        raise ConfigError(
            "planes",
            planes,
            f"1 at this size: the plane prefix makes interface names such as {longest} longer "
            f"than Linux's {IFNAME_MAX} characters; use fewer servers or GPUs per server",
        )


def _check_servers(servers: Any, gpus_per_server: Any, planes: int = 1) -> tuple[int, int]:
    servers = _require_int("servers", servers, 1, 255)
    check_rows("servers", servers, planes)
    gps = _require_int("gpus_per_server", gpus_per_server, 1, MAX_COLUMNS)
    return servers, gps


def build_roft(
    servers: int = 4,
    gpus_per_server: int = 4,
    spines: int = 2,
    oversubscription: float = 1,
    servers_per_leaf: int | None = None,
    nic_gbps: float = DEFAULT_NIC_GBPS,
    planes: int = 1,
) -> Fabric:
    """Rail-optimised fat tree: one leaf per rail per server group, leaves meshed to spines;
    `planes` > 1 builds that many disconnected copies, one NIC port into each."""
    planes = _require_int("planes", planes, 1, MAX_PLANES)
    servers, gps = _check_servers(servers, gpus_per_server, planes)
    spines = _require_int("spines", spines, 1)
    nic = _require_rate("nic_gbps", nic_gbps)
    spl = servers if servers_per_leaf is None else servers_per_leaf
    spl = _require_int("servers_per_leaf", spl, 1)
    _check_divides_servers(spl, servers)
    groups = servers // spl
    per_spine = _uplinks(spl, oversubscription, spines)
    leaves = groups * gps
    gbps = nic / planes
    # One plane keeps the plain names (`leaf0`); several are told apart by `p<k>`.
    prefixes = [""] if planes == 1 else [f"p{k}" for k in range(planes)]
    hosts: list[Host] = []
    links: list[Link] = []
    for server in range(servers):
        group, local = divmod(server, spl)
        for rank in range(gps):
            gid = server * gps + rank
            hosts.append(_plane_host(gid, server, rank, planes))
            for k, prefix in enumerate(prefixes):
                leaf = f"{prefix}leaf{group * gps + rank}"
                links.append(Link(f"h{gid}", k, leaf, local + 1, gbps))
    switches: list[Switch] = []
    for k, prefix in enumerate(prefixes):
        plane_switches, trunks = _leaf_spine_tier(leaves, spl, spines, per_spine, gbps, k, prefix)
        switches += plane_switches
        links += trunks
    notes: tuple[str, ...] = ()
    if planes > 1:
        _check_interface_names(planes, links)
        notes = (
            f"{planes} disconnected planes p0..p{planes - 1}; NIC port k and every link of "
            f"plane k at {gbps:g} Gb/s",
        )
    spec = FabricSpec.of(
        "roft",
        servers=servers,
        gpus_per_server=gps,
        spines=spines,
        oversubscription=oversubscription,
        servers_per_leaf=spl,
        nic_gbps=nic,
        # Absent for one plane, so 1-plane specs (and their JSON) stay as they were.
        planes=planes if planes > 1 else None,
    )
    return Fabric(spec, nic, tuple(hosts), tuple(switches), tuple(links), notes)


def build_clos(
    servers: int = 4,
    gpus_per_server: int = 4,
    spines: int = 2,
    oversubscription: float = 1,
    servers_per_leaf: int = 2,
    nic_gbps: float = DEFAULT_NIC_GBPS,
) -> Fabric:
    """Plain leaf-spine: all GPUs of a server under one leaf."""
    servers, gps = _check_servers(servers, gpus_per_server)
    spines = _require_int("spines", spines, 1)
    nic = _require_rate("nic_gbps", nic_gbps)
    spl = _require_int("servers_per_leaf", servers_per_leaf, 1)
    _check_divides_servers(spl, servers)
    leaves = servers // spl
    downlinks = spl * gps
    per_spine = _uplinks(downlinks, oversubscription, spines)
    hosts: list[Host] = []
    links: list[Link] = []
    for server in range(servers):
        leaf, local = divmod(server, spl)
        for rank in range(gps):
            gid = server * gps + rank
            hosts.append(_single_port_host(gid, server, rank, rank))
            links.append(Link(f"h{gid}", 0, f"leaf{leaf}", local * gps + rank + 1, nic))
    switches, trunks = _leaf_spine_tier(leaves, downlinks, spines, per_spine, nic)
    links += trunks
    spec = FabricSpec.of(
        "clos",
        servers=servers,
        gpus_per_server=gps,
        spines=spines,
        oversubscription=oversubscription,
        servers_per_leaf=spl,
        nic_gbps=nic,
    )
    return Fabric(spec, nic, tuple(hosts), tuple(switches), tuple(links))


def build_file(path: str | None = None) -> Fabric:
    """A fabric read from a file (docs/FABRIC_FILES.md; `zcube_lab.core.fabric.files`)."""
    from zcube_lab.core.fabric.files import fabric_from_path

    return fabric_from_path(path)


BUILDERS: dict[str, Callable[..., Fabric]] = {
    "zcube": build_zcube,
    "roft": build_roft,
    "clos": build_clos,
    "file": build_file,
}
PARAMETERS: dict[str, tuple[str, ...]] = {
    "zcube": ("n", "m", "gpus_per_server", "nic_gbps"),
    "roft": (
        "servers",
        "gpus_per_server",
        "spines",
        "oversubscription",
        "servers_per_leaf",
        "nic_gbps",
        "planes",
    ),
    "clos": (
        "servers",
        "gpus_per_server",
        "spines",
        "oversubscription",
        "servers_per_leaf",
        "nic_gbps",
    ),
    "file": ("path",),
}


def build_fabric(spec: FabricSpec) -> Fabric:
    """Build the fabric a spec names, rejecting unknown kinds and parameters by name."""
    if spec.kind not in BUILDERS:
        raise ConfigError("fabric", spec.kind, f"one of {sorted(BUILDERS)}")
    allowed = PARAMETERS[spec.kind]
    for key, value in spec.params:
        if key not in allowed:
            raise ConfigError(key, value, f"not a {spec.kind} parameter; it takes {list(allowed)}")
    return BUILDERS[spec.kind](**dict(spec.params))
