"""Routing rules as plain data: `compute_rules(fabric, policy)` -> per-switch flows and groups.

Pure: no switch, no socket, no clock. Only `controller.app` turns these specs into OpenFlow 1.3
messages, so every forwarding decision can be checked in unit tests with `controller.flowtable`.

Forwarding model (one table, table 0):
- every host interface address is matched exactly (`eth_type=0x0800, ipv4_dst=<address>`);
- on the switch the address is attached to, the flow outputs to the host port;
- elsewhere it forwards to the next hops on a shortest switch path towards that attachment
  switch (parallel links are separate next hops). Policy `ecmp` sends to all of them through a
  select group (one group per distinct port set on a switch, shared by every destination using
  that set; a single next hop is a plain output); policy `single` outputs to one of them, chosen
  by the destination's port number on its attachment switch, so the hosts under one leaf spread
  over the spines while each destination keeps one path;
- ARP and IPv6 are dropped explicitly (hosts carry static ARP entries for every fabric address;
  IPv6 router solicitations and the like are noise); anything else hits the table-miss drop.

ZCube needs nothing special: a host picks the destination's port-1 or port-2 address through its
routes, and shortest-path forwarding to that address's switch yields the 1-hop path or one of
the two link-disjoint 2-hop paths (A[s1] > B[r2] or B[r1] > A[s2]).

Naming: match fields use os-ken's OXM names (`eth_type`, `ipv4_dst`, `in_port`); switches are
keyed by dpid; group ids count from 1 per switch in the order destinations are visited.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from emulator.fabric import Fabric
from zcube_lab.errors import ConfigError

POLICIES = ("ecmp", "single")
GROUP_TYPES = ("select", "indirect", "ff")

# Every flow we install carries this cookie, so our flows are easy to tell from anything else.
COOKIE = 0x2C0BE

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_IPV6 = 0x86DD

PRIORITY_TABLE_MISS = 0
PRIORITY_IPV4_DST = 1000
# Above the IPv4 routes so a future broad IPv4 rule can never shadow the explicit drops.
PRIORITY_DROP = 2000

MatchValue = int | str


@dataclass(frozen=True)
class Output:
    """Send the packet out of one port."""

    port: int


@dataclass(frozen=True)
class ToGroup:
    """Hand the packet to a group."""

    group_id: int


Action = Output | ToGroup


@dataclass(frozen=True)
class FlowSpec:
    """One flow entry of table 0; no actions means drop."""

    priority: int
    match: tuple[tuple[str, MatchValue], ...]  # sorted by field name
    actions: tuple[Action, ...]

    @property
    def match_fields(self) -> dict[str, MatchValue]:
        return dict(self.match)


@dataclass(frozen=True)
class Bucket:
    """One group bucket: output to `port`, live while `watch_port` is up."""

    port: int
    weight: int = 1
    watch_port: int | None = None


@dataclass(frozen=True)
class GroupSpec:
    """One group entry: `type` is select, indirect or ff (fast failover)."""

    group_id: int
    type: str
    buckets: tuple[Bucket, ...]


@dataclass(frozen=True)
class SwitchRules:
    """Everything one switch should hold: flows and the groups they point to."""

    name: str
    dpid: int
    flows: tuple[FlowSpec, ...]
    groups: tuple[GroupSpec, ...]

    @property
    def group_ids(self) -> frozenset[int]:
        return frozenset(g.group_id for g in self.groups)


def match(**fields: MatchValue) -> tuple[tuple[str, MatchValue], ...]:
    """A match as a sorted tuple of (OXM field, value)."""
    return tuple(sorted(fields.items()))


def base_flows() -> tuple[FlowSpec, ...]:
    """The flows every switch gets whatever the fabric: explicit drops and the table miss."""
    return (
        FlowSpec(PRIORITY_DROP, match(eth_type=ETH_TYPE_ARP), ()),
        FlowSpec(PRIORITY_DROP, match(eth_type=ETH_TYPE_IPV6), ()),
        FlowSpec(PRIORITY_TABLE_MISS, (), ()),
    )


def next_hop_ports(fabric: Fabric, switch: str, target: str) -> tuple[int, ...]:
    """Local ports of `switch` on a shortest switch path to `target` (all parallel links)."""
    to_target = fabric.switch_distances[target]
    here = to_target.get(switch)
    if here is None or here == 0:
        return ()
    ports: list[int] = []
    for neighbour, links in fabric.switch_adjacency[switch].items():
        if to_target.get(neighbour) == here - 1:
            ports.extend(local for local, _far in links)
    return tuple(sorted(ports))


def port_peers(fabric: Fabric) -> dict[tuple[str, int], tuple[str, int]]:
    """(node, port) -> (far node, far port) for every link end. Switch ports are OpenFlow port
    numbers, host ports are interface indexes."""
    peers: dict[tuple[str, int], tuple[str, int]] = {}
    for link in fabric.links:
        peers[(link.node1, link.port1)] = (link.node2, link.port2)
        peers[(link.node2, link.port2)] = (link.node1, link.port1)
    return peers


def check_policy(policy: str) -> str:
    """The policy if known, else a `ConfigError` naming the allowed ones."""
    if policy not in POLICIES:
        raise ConfigError("policy", policy, f"one of {list(POLICIES)}")
    return policy


def _switch_rules(fabric: Fabric, switch: str, policy: str) -> SwitchRules:
    groups: dict[tuple[int, ...], GroupSpec] = {}
    flows = list(base_flows())
    for host in fabric.hosts:
        for iface in host.interfaces:
            attachment = fabric.attachments.get((host.name, iface.index))
            if attachment is None:
                continue  # an unplugged interface has nowhere to be delivered
            if attachment.switch == switch:
                action: Action = Output(attachment.port)
            else:
                ports = next_hop_ports(fabric, switch, attachment.switch)
                if not ports:
                    continue  # unreachable from here: the table miss drops it
                if policy == "single":
                    action = Output(ports[attachment.port % len(ports)])
                elif len(ports) == 1:
                    action = Output(ports[0])
                else:
                    if ports not in groups:
                        groups[ports] = GroupSpec(
                            len(groups) + 1,
                            "select",
                            # watch_port lets the switch skip a bucket whose link is down.
                            tuple(Bucket(p, 1, p) for p in ports),
                        )
                    action = ToGroup(groups[ports].group_id)
            flows.append(
                FlowSpec(
                    PRIORITY_IPV4_DST,
                    match(eth_type=ETH_TYPE_IPV4, ipv4_dst=iface.ip),
                    (action,),
                )
            )
    sw = fabric.switch(switch)
    return SwitchRules(sw.name, sw.dpid, tuple(flows), tuple(groups.values()))


def compute_rules(fabric: Fabric, policy: str) -> dict[int, SwitchRules]:
    """The flows and groups of every switch, keyed by dpid, for routing `policy`."""
    check_policy(policy)
    return {sw.dpid: _switch_rules(fabric, sw.name, policy) for sw in fabric.switches}


def rule_counts(rules: Mapping[int, SwitchRules]) -> dict[str, tuple[int, int]]:
    """Switch name -> (flows, groups) it should hold: compare with the lines of
    `ovs-ofctl -O OpenFlow13 --no-stats dump-flows` and `dump-groups` (minus its header)."""
    return {r.name: (len(r.flows), len(r.groups)) for r in rules.values()}
