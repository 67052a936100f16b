"""How a GPU host's network is configured, as pure data: addresses, routes, static ARP, sysctls.

The Mininet realization feeds these lines to `ip -batch` and `sysctl` inside each host's
namespace. Keeping them pure lets the unit tests check, for every host pair, that the egress
interface a host picks for an address is the one the fabric's paths expect.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from emulator.fabric import Fabric, Host


@dataclass(frozen=True)
class Scale:
    """Times stay real, bytes shrink: a full-scale NIC of `fabric.nic_gbps` is emulated at
    `nic_mbps`, and every link by the same factor (DOMAIN.md §4)."""

    nic_mbps: float = 100.0

    def bandwidth_scale(self, fabric: Fabric) -> float:
        """Real NIC rate over emulated NIC rate (e.g. 400 Gb/s / 100 Mb/s = 4000)."""
        return fabric.nic_gbps * 1000.0 / self.nic_mbps

    def link_mbps(self, fabric: Fabric, gbps: float) -> float:
        """Emulated rate of a link whose full-scale rate is `gbps`."""
        return gbps * 1000.0 / self.bandwidth_scale(fabric)


def egress_interface(host: Host, ip: str) -> int | None:
    """The interface index the host's routes pick for `ip` (longest prefix match)."""
    addr = ipaddress.ip_address(ip)
    best: tuple[int, int] | None = None
    for route in host.routes:
        net = ipaddress.ip_network(route.prefix)
        if addr in net and (best is None or net.prefixlen > best[0]):
            best = (net.prefixlen, route.interface)
    return None if best is None else best[1]


def ip_batch(fabric: Fabric, host: Host, mtu: int) -> list[str]:
    """`ip -batch` lines that set up one host: /32 addresses, MTU, routes, static ARP."""
    lines: list[str] = []
    for iface in host.interfaces:
        lines.append(f"addr flush dev {iface.name}")
        lines.append(f"link set dev {iface.name} address {iface.mac} mtu {mtu} up")
        lines.append(f"addr add {iface.ip}/32 dev {iface.name}")
    for route in host.routes:
        iface = host.interfaces[route.interface]
        lines.append(f"route replace {route.prefix} dev {iface.name} src {iface.ip}")
    # Every other address is resolved statically, so the fabric never carries ARP.
    for other in fabric.hosts:
        if other.name == host.name:
            continue
        for dst in other.interfaces:
            out = egress_interface(host, dst.ip)
            if out is None:
                continue
            dev = host.interfaces[out].name
            lines.append(f"neigh replace {dst.ip} lladdr {dst.mac} dev {dev} nud permanent")
    return lines


def sysctls(host: Host) -> list[str]:
    """`key=value` settings for one host: no reverse-path filter (ZCube replies may arrive on
    the other port), no IPv6 chatter on the fabric."""
    out = [
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
        "net.ipv6.conf.all.disable_ipv6=1",
        "net.ipv6.conf.default.disable_ipv6=1",
    ]
    out += [f"net.ipv4.conf.{i.name}.rp_filter=0" for i in host.interfaces]
    return out
