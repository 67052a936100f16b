"""An in-memory model of the rules installed on every switch, to ask where packets go.

`FabricTable(fabric, rules, down_ports)` holds each switch's flows and groups exactly as
`compute_rules` produced them, on the fabric's links with some of them failed, and answers two
questions without any switch:
- `output_ports(switch, packet)`: the ports the highest-priority matching flow sends to (every
  live bucket of a select group, since any of them may be chosen; the first live bucket of a
  fast-failover group);
- `trace(switch, in_port, packet)` / `send(host, dst_ip)`: the packet followed hop by hop over the
  fabric's links, returning every switch sequence that delivers it (and to which host interface),
  and every one that drops or loops.

Failures: `down_ports` lists (node, port) link ends that are down (switch ports by OpenFlow
number, host ports by interface index); a link is down as soon as either end is, and then both
its ends count as down, as both sides of a real link lose carrier. Output to a down port drops;
a group bucket is live while its watch_port is up; a group with no live bucket drops; a packet
whose sending host's own link is down is dropped before any switch (an empty switch sequence).
`with_failed(links)` returns the same table with more links down.

Packets are plain mappings of OXM field names to values (`in_port`, `eth_type`, `ipv4_dst`).
Matching is exact on every field of a flow's match, except a (value, mask) pair (the EV rules'
`udp_src`), which matches the masked bits.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from zcube_lab.controller.rules import (
    ETH_TYPE_IPV4,
    IP_PROTO_UDP,
    Bucket,
    FlowSpec,
    GroupSpec,
    MatchValue,
    Output,
    SwitchRules,
    ToGroup,
    failed_links,
    link_ends,
    port_peers,
)
from zcube_lab.core.fabric import hostplan as hostconfig
from zcube_lab.core.fabric.description import Fabric, Host, Link

Packet = Mapping[str, int | str]

# Far more hops than any fabric here has; a walk this long has lost its way.
MAX_HOPS = 32


@dataclass(frozen=True)
class Delivery:
    """A path that reaches a host: switches crossed in order, then the receiving interface."""

    switches: tuple[str, ...]
    host: str
    interface: int


@dataclass(frozen=True)
class Trace:
    """Every way a packet can go: delivered, dropped (no rule, hairpin, dangling port) or
    looped (a switch seen twice), each as its switch sequence."""

    delivered: frozenset[Delivery]
    dropped: frozenset[tuple[str, ...]]
    looped: frozenset[tuple[str, ...]]

    @property
    def paths(self) -> frozenset[tuple[str, ...]]:
        return frozenset(d.switches for d in self.delivered)

    @property
    def receivers(self) -> frozenset[tuple[str, int]]:
        return frozenset((d.host, d.interface) for d in self.delivered)


def _matches(got: int | str | None, want: MatchValue) -> bool:
    """Exact, or for a (value, mask) pair masked."""
    if isinstance(want, tuple):
        value, mask = want
        return isinstance(got, int) and got & mask == value
    return got == want


def egress_interface(host: Host, dst_ip: str) -> int:
    """The interface a host sends `dst_ip` through (its routes, longest prefix first)."""
    out = hostconfig.egress_interface(host, dst_ip)
    if out is None:
        raise LookupError(f"{host.name} has no route to {dst_ip}")
    return out


def ipv4_packet(dst_ip: str) -> dict[str, int | str]:
    """An IPv4 packet to `dst_ip`, as the fields our rules look at."""
    return {"eth_type": ETH_TYPE_IPV4, "ipv4_dst": dst_ip}


class FabricTable:
    """The installed rules of a whole fabric, and the links that join the switches (some of
    them down)."""

    def __init__(
        self,
        fabric: Fabric,
        rules: Mapping[int, SwitchRules],
        down_ports: Collection[tuple[str, int]] = (),
    ) -> None:
        self.fabric = fabric
        self.rules = rules
        self.down_links = failed_links(fabric, down_ports)
        self.down_ports = link_ends(self.down_links)
        self._rules = {r.name: r for r in rules.values()}
        self._groups = {r.name: {g.group_id: g for g in r.groups} for r in self._rules.values()}
        # Highest priority first, so the first match wins as on a switch.
        self._flows = {
            name: sorted(r.flows, key=lambda f: -f.priority) for name, r in self._rules.items()
        }
        self._peers = port_peers(fabric)

    def with_failed(self, links: Iterable[Link]) -> FabricTable:
        """The same rules with `links` down as well (both ends)."""
        return FabricTable(self.fabric, self.rules, self.down_ports | link_ends(links))

    def is_up(self, node: str, port: int) -> bool:
        """Whether the link at (node, port) carries packets."""
        return (node, port) not in self.down_ports

    def _live(self, switch: str, bucket: Bucket) -> bool:
        return bucket.watch_port is None or self.is_up(switch, bucket.watch_port)

    def _group_ports(self, switch: str, group: GroupSpec) -> list[int]:
        live = [b.port for b in group.buckets if self._live(switch, b)]
        if group.type == "ff":
            return live[:1]
        if group.type == "indirect":
            return [b.port for b in group.buckets[:1]]
        return live

    def lookup(self, switch: str, packet: Packet) -> FlowSpec | None:
        """The flow a packet hits on `switch`, or None (no table-miss flow either)."""
        for flow in self._flows[switch]:
            if all(_matches(packet.get(k), v) for k, v in flow.match):
                return flow
        return None

    def output_ports(self, switch: str, packet: Packet) -> tuple[int, ...]:
        """Every port the packet may leave `switch` through: an output, every live bucket of a
        select group, the first live bucket of a fast-failover group. Ports whose link is down
        are left out (the switch drops what it sends there)."""
        flow = self.lookup(switch, packet)
        if flow is None:
            return ()
        ports: list[int] = []
        for action in flow.actions:
            if isinstance(action, Output):
                ports.append(action.port)
            elif isinstance(action, ToGroup):
                group = self._groups[switch].get(action.group_id)
                if group is None:
                    raise LookupError(f"{switch}: flow points to missing group {action.group_id}")
                ports.extend(self._group_ports(switch, group))
        return tuple(p for p in ports if self.is_up(switch, p))

    def trace(self, switch: str, in_port: int, packet: Packet) -> Trace:
        """Follow a packet entering `switch` on `in_port` through every branch."""
        delivered: set[Delivery] = set()
        dropped: set[tuple[str, ...]] = set()
        looped: set[tuple[str, ...]] = set()

        def walk(node: str, port_in: int, path: tuple[str, ...]) -> None:
            if node in path or len(path) >= MAX_HOPS:
                looped.add((*path, node))
                return
            here = (*path, node)
            ports = self.output_ports(node, {**packet, "in_port": port_in})
            if not ports:
                dropped.add(here)
            for port in ports:
                far = self._peers.get((node, port))
                # A switch does not send a packet back out of its in_port (no IN_PORT action).
                if port == port_in or far is None:
                    dropped.add(here)
                elif self.fabric.is_switch(far[0]):
                    walk(far[0], far[1], here)
                else:
                    delivered.add(Delivery(here, far[0], far[1]))

        walk(switch, in_port, ())
        return Trace(frozenset(delivered), frozenset(dropped), frozenset(looped))

    def send(self, src: str, dst_ip: str, udp_src: int | None = None) -> Trace:
        """An IPv4 packet from host `src` to `dst_ip`, leaving by the host's own route (a UDP
        packet from source port `udp_src`, if given)."""
        iface = egress_interface(self.fabric.host(src), dst_ip)
        attachment = self.fabric.attachments[(src, iface)]
        if not self.is_up(src, iface):
            return Trace(frozenset(), frozenset({()}), frozenset())
        packet = ipv4_packet(dst_ip)
        if udp_src is not None:
            packet |= {"ip_proto": IP_PROTO_UDP, "udp_src": udp_src}
        return self.trace(attachment.switch, attachment.port, packet)
