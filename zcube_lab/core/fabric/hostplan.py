"""How a GPU host's network is configured, as pure data: addresses, routes, static ARP, sysctls.

The Mininet realization feeds these lines to `ip -batch` and `sysctl` inside each host's
namespace. Keeping them pure lets the unit tests check, for every host pair, that the egress
interface a host picks for an address is the one the fabric's paths expect.
"""

from __future__ import annotations

import ipaddress

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.addressing import (
    MGMT_PREFIX_LEN,
    MGMT_ROOT_IP,
    management_address,
    plane_network,
)
from zcube_lab.core.fabric.description import Fabric, Host

SOURCE_TABLE_BASE = 100
MGMT_BRIDGE = "zcl-mgmt"

# TCP congestion control of every host namespace (`--cc`; docs/DOMAIN.md §5): the algorithms
# this kernel has. The default is bbr: the kernel's own default (CONFIG_DEFAULT_TCP_CONG), which
# every host namespace inherited before the choice was stated, so earlier runs used it.
CONGESTION_CONTROLS = ("bbr", "cubic", "reno")
DEFAULT_CONGESTION_CONTROL = "bbr"


def check_congestion_control(name: str) -> str:
    """`name` when it is one of CONGESTION_CONTROLS, else a ConfigError naming them."""
    if name not in CONGESTION_CONTROLS:
        raise ConfigError("congestion control", name, f"one of {list(CONGESTION_CONTROLS)}")
    return name


def management_interface(host: Host) -> str:
    """The host-side name of its management interface."""
    return f"{host.name}-mgmt"


def management_peer(host: Host) -> str:
    """The root-namespace end of a host's management link, enslaved to `MGMT_BRIDGE`."""
    return f"zm-{host.name}"


def management_root_batch(fabric: Fabric, pids: dict[str, int]) -> list[str]:
    """`ip -batch` lines, run in the root namespace, that create the management bridge and one
    veth per host, moving the host end into the namespace of the host's shell (`pids`)."""
    lines = [
        f"link add {MGMT_BRIDGE} type bridge",
        f"addr add {MGMT_ROOT_IP}/{MGMT_PREFIX_LEN} dev {MGMT_BRIDGE}",
        f"link set {MGMT_BRIDGE} up",
    ]
    for h in fabric.hosts:
        inner, outer = management_interface(h), management_peer(h)
        lines.append(f"link add {outer} type veth peer name {inner}")
        lines.append(f"link set {inner} netns {pids[h.name]}")
        lines.append(f"link set {outer} master {MGMT_BRIDGE} up")
    return lines


def management_host_batch(host: Host) -> list[str]:
    """`ip -batch` lines, run in the host, that address its management interface."""
    name = management_interface(host)
    return [
        "link set lo up",
        f"addr add {management_address(host.gid)}/{MGMT_PREFIX_LEN} dev {name}",
        f"link set {name} up",
    ]


def egress_interface(host: Host, ip: str) -> int | None:
    """The interface index the host's routes pick for `ip` (longest prefix match)."""
    addr = ipaddress.ip_address(ip)
    best: tuple[int, int] | None = None
    for route in host.routes:
        net = ipaddress.ip_network(route.prefix)
        if addr in net and (best is None or net.prefixlen > best[0]):
            best = (net.prefixlen, route.interface)
    return None if best is None else best[1]


def ip_batch(fabric: Fabric, host: Host, mtu: int, route_options: str = "") -> list[str]:
    """`ip -batch` lines that set up one host: /32 addresses, MTU, routes, static ARP; every
    fabric route gets `route_options` (TCP's per-route timers: `zcube_lab.core.clock`)."""
    opts = f" {route_options}" if route_options else ""
    lines: list[str] = []
    for iface in host.interfaces:
        lines.append(f"addr flush dev {iface.name}")
        lines.append(f"link set dev {iface.name} address {iface.mac} mtu {mtu} up")
        lines.append(f"addr add {iface.ip}/32 dev {iface.name}")
    for route in host.routes:
        iface = host.interfaces[route.interface]
        lines.append(f"route replace {route.prefix} dev {iface.name} src {iface.ip}{opts}")
    multi = len(host.interfaces) > 1
    if multi:
        # Source routing: a packet from a port's address leaves through that port. Replies
        # then retrace their request's path, and a sender that binds a port's address (a
        # dual-port NIC queue pair) picks its path; unbound traffic keeps the shortest routes.
        # (Multi-plane ROFT: a port's address and its plane's prefix name the same port.)
        for iface in host.interfaces:
            table = SOURCE_TABLE_BASE + iface.index
            lines.append(f"rule add from {iface.ip} table {table} priority {table}")
            lines.append(
                f"route replace default dev {iface.name} src {iface.ip} table {table}{opts}"
            )
    # Every other address is resolved statically, so the fabric never carries ARP (on every
    # port of a multi-port host, since source routing may send anything out of any port).
    for other in fabric.hosts:
        if other.name == host.name:
            continue
        for dst in other.interfaces:
            out = egress_interface(host, dst.ip)
            if out is None:
                continue
            ports = host.interfaces if multi else (host.interfaces[out],)
            for port in ports:
                lines.append(
                    f"neigh replace {dst.ip} lladdr {dst.mac} dev {port.name} nud permanent"
                )
    return lines


def kv_source_map(fabric: Fabric, host: Host) -> tuple[tuple[str, str], ...]:
    """For a ZCube host: pull port-2 addresses (group B's plane) from local port 1 and port-1
    addresses (group A's) from local port 2, so each KV lane takes its own link-disjoint path,
    both NIC ports carry it at both ends, and same-rail or same-segment pairs do not squeeze the
    whole transfer through one port. Other fabrics: no mapping. A multi-plane ROFT needs none
    either: plane k's addresses are routed out of port k, so each pull already stays in its
    plane."""
    if fabric.kind != "zcube":
        return ()
    p1, p2 = host.interfaces
    return ((str(plane_network(1, 2)), p1.ip), (str(plane_network(0, 2)), p2.ip))


def sysctls(host: Host, congestion_control: str | None = None) -> list[str]:
    """`key=value` settings for one host: no reverse-path filter (ZCube replies may arrive on
    the other port), no IPv6 chatter on the fabric, and TCP's congestion control when given
    (per network namespace on this kernel; None keeps what the namespace inherited)."""
    out = [
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
        "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1",
    ]
    out += [f"net.ipv4.conf.{i.name}.rp_filter=0" for i in host.interfaces]
    if congestion_control is not None:
        out.append(
            f"net.ipv4.tcp_congestion_control={check_congestion_control(congestion_control)}"
        )
    return out
