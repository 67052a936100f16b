"""Routing rules as plain data: `compute_rules(fabric, policy)` -> per-switch flows and groups.

Pure: no switch, no socket, no clock. Only `zcube_lab.controller.app` turns these specs into
OpenFlow 1.3 messages, so every forwarding decision can be checked in unit tests with
`zcube_lab.controller.flowtable`.

Forwarding model (one table, table 0):
- every host interface address is matched exactly (`eth_type=0x0800, ipv4_dst=<address>`);
- on the switch the address is attached to, the flow outputs to the host port;
- elsewhere it forwards towards that attachment switch, by policy:
  - `ecmp`: to every next hop on a shortest switch path (parallel links are separate next hops)
    through a select group. Each bucket watches its own port, and Open vSwitch leaves a bucket
    whose watch_port is down out of the hash, so ecmp already fails over locally among the
    equal-cost ports that remain; it cannot leave the shortest paths.
  - `static` (earlier `single`, still accepted): to one of those next hops, chosen by the
    destination's port number on its attachment switch (the hosts under one leaf spread over
    the spines while each destination keeps one path). The reference: plain outputs, nothing
    reacts to a failure.
  - `ff` (fast failover): a fast-failover group; the switch uses its first bucket whose
    watch_port is up. Buckets in order: the primary, one shortest next hop chosen as
    `ports[(attachment port + switch index) % len(ports)]` (the switch index in the formula
    makes neighbours pick different primaries, which is what gives detours); the other
    shortest next hops; then detours: ports to a neighbour off the shortest paths from which
    following primaries reaches the attachment switch without coming back here (shortest
    such chain first, then by port). With every port up each destination takes one path, over
    the primaries; a switch whose primary goes down reroutes locally, without the controller.
  A destination with one port gets a plain output; groups are shared by every destination
  with the same bucket list on a switch. An unreachable destination gets no flow.
- ARP and IPv6 are dropped explicitly (hosts carry static ARP entries for every fabric address;
  IPv6 router solicitations and the like are noise); anything else hits the table-miss drop.

Failures: a controller that reacts recomputes on what remains,
`rules_without(fabric, down_links, policy)` = `compute_rules(fabric.without_links(...))`, and
sends each switch `diff_rules(old, align_groups(old, new))`: the flows and groups that changed,
with group ids kept stable so that no flow ever points to a group meant for others.

ZCube needs nothing special: a host picks the destination's port-1 or port-2 address through its
routes, and shortest-path forwarding to that address's switch yields the 1-hop path or one of
the two link-disjoint 2-hop paths (A[s1] > B[r2] or B[r1] > A[s2]).

Naming: these are *routing* policies (`ROUTING_POLICIES`), what the switches are told; a run's
`--policy` is a *run* policy (`zcube_lab.core.policies.RUN_POLICIES`) that picks one of them and
adds who else reacts (the controller, the senders). Match fields use os-ken's OXM names (`eth_type`,
`ipv4_dst`, `in_port`); switches are keyed by dpid; group ids count from 1 per switch in the
order destinations are visited.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import count

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Attachment, Fabric, Link
from zcube_lab.core.fabric.evpaths import choice_bits, field_shift, shortest_next_hops

ROUTING_POLICIES = ("ecmp", "static", "ff")
# Earlier names, still accepted (`python -m zcube_lab.controller --policy single`).
ROUTING_ALIASES = {"single": "static"}

# Every flow we install carries this cookie, so our flows are easy to tell from anything else.
COOKIE = 0x2C0BE

ETH_TYPE_IPV4 = 0x0800
ETH_TYPE_ARP = 0x0806
ETH_TYPE_IPV6 = 0x86DD

IP_PROTO_UDP = 17

PRIORITY_TABLE_MISS = 0
PRIORITY_IPV4_DST = 1000
# EV rules (`ev_rules`): above the IPv4 routes, so a UDP packet's source port picks its next hop.
PRIORITY_EV = 1500
# Above the IPv4 routes so a future broad IPv4 rule can never shadow the explicit drops.
PRIORITY_DROP = 2000

MatchValue = int | str | tuple[int, int]  # a pair is (value, mask)


@dataclass(frozen=True)
class Output:
    """Send the packet out of one port."""

    port: int


@dataclass(frozen=True)
class ToGroup:
    """Hand the packet to a group."""

    group_id: int


@dataclass(frozen=True)
class DecTtl:
    """Decrement the IPv4 TTL (dropped at 0). Fast-failover flows carry it: their detours are
    loop-free for any single failed link, and the TTL bounds a loop that several failures at once
    (a switch, overlapping flaps) can still form."""


Action = DecTtl | Output | ToGroup


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


def port_peers(fabric: Fabric) -> dict[tuple[str, int], tuple[str, int]]:
    """(node, port) -> (far node, far port) for every link end. Switch ports are OpenFlow port
    numbers, host ports are interface indexes."""
    peers: dict[tuple[str, int], tuple[str, int]] = {}
    for link in fabric.links:
        peers[(link.node1, link.port1)] = (link.node2, link.port2)
        peers[(link.node2, link.port2)] = (link.node1, link.port1)
    return peers


def check_policy(policy: str) -> str:
    """The routing policy's name (an alias resolved), else a `ConfigError` naming the allowed
    ones."""
    name = ROUTING_ALIASES.get(policy, policy)
    if name not in ROUTING_POLICIES:
        raise ConfigError("policy", policy, f"one of {list(ROUTING_POLICIES)}")
    return name


GROUP_TYPE_OF_POLICY = {"ecmp": "select", "ff": "ff"}


def _destinations(fabric: Fabric) -> list[tuple[str, Attachment]]:
    """(address, attachment) of every plugged-in host interface, in host then interface order
    (an unplugged interface has nowhere to be delivered)."""
    out = []
    for host in fabric.hosts:
        for iface in host.interfaces:
            attachment = fabric.attachments.get((host.name, iface.index))
            if attachment is not None:
                out.append((iface.ip, attachment))
    return out


class _Routes:
    """Per-switch egress ports for every destination address, in bucket order."""

    def __init__(self, fabric: Fabric, policy: str) -> None:
        self.fabric = fabric
        self.policy = policy
        self.destinations = _destinations(fabric)
        self._next_hops: dict[tuple[str, str], tuple[int, ...]] = {}
        self._peers = port_peers(fabric)
        self._chains: dict[tuple[str, str], tuple[str, ...] | None] = {}
        # (switch, address) -> the fast-failover primary port (ff only)
        self._primary: dict[tuple[str, str], int] = {}
        if policy == "ff":
            for ip, attachment in self.destinations:
                for sw in fabric.switches:
                    ports = self.next_hops(sw.name, attachment.switch)
                    if ports:
                        index = (attachment.port + sw.index) % len(ports)
                        self._primary[(sw.name, ip)] = ports[index]

    def next_hops(self, switch: str, target: str) -> tuple[int, ...]:
        key = (switch, target)
        if key not in self._next_hops:
            self._next_hops[key] = shortest_next_hops(self.fabric, switch, target)
        return self._next_hops[key]

    def _primary_chain(self, switch: str, ip: str, target: str) -> tuple[str, ...] | None:
        """Switches visited from `switch` following primaries to `target` (both included), or
        None if there is no path."""
        key = (switch, ip)
        if key not in self._chains:
            chain = [switch]
            node = switch
            while node != target:
                port = self._primary.get((node, ip))
                if port is None:
                    self._chains[key] = None
                    return None
                # Primaries follow shortest paths, so the walk ends within the diameter.
                node = self._peers[(node, port)][0]
                chain.append(node)
            self._chains[key] = tuple(chain)
        return self._chains[key]

    def ports(self, switch: str, ip: str, attachment: Attachment) -> tuple[int, ...]:
        """The ports `switch` forwards `ip` through, in bucket order; () if unreachable."""
        if attachment.switch == switch:
            return (attachment.port,)
        ports = self.next_hops(switch, attachment.switch)
        if not ports or self.policy == "ecmp":
            return ports
        if self.policy == "static":
            return (ports[attachment.port % len(ports)],)
        primary = self._primary[(switch, ip)]
        others = tuple(p for p in ports if p != primary)
        return (primary, *others, *self._detours(switch, ip, attachment.switch))

    def _detours(self, switch: str, ip: str, target: str) -> tuple[int, ...]:
        """Ports to neighbours off the shortest paths whose primary chain reaches `target`
        without coming back through `switch`: shortest chain first, then by port."""
        to_target = self.fabric.switch_distances[target]
        here = to_target[switch]
        found: list[tuple[int, int]] = []
        for neighbour, links in self.fabric.switch_adjacency[switch].items():
            if to_target.get(neighbour) == here - 1:
                continue  # a shortest next hop: already a bucket
            chain = self._primary_chain(neighbour, ip, target)
            if chain is None or switch in chain:
                continue
            found.extend((len(chain) - 1, local) for local, _far in links)
        return tuple(port for _length, port in sorted(found))


def _ev_flows(routes: _Routes, switch: str, ip: str, attachment: Attachment) -> list[FlowSpec]:
    """The EV rules of one destination on one switch (`zcube_lab.core.fabric.evpaths`): with
    k > 1 equal-cost next hops, one flow per value of the source-port field this distance
    reads, sending UDP to next hop `value % k`; none with one next hop or on the attachment
    switch (the IPv4 route does)."""
    if attachment.switch == switch:
        return []
    hops = routes.next_hops(switch, attachment.switch)
    if len(hops) < 2:
        return []
    bits = choice_bits(len(hops))
    shift = field_shift(routes.fabric.switch_distances[attachment.switch][switch])
    mask = ((1 << bits) - 1) << shift
    return [
        FlowSpec(
            PRIORITY_EV,
            match(
                eth_type=ETH_TYPE_IPV4,
                ip_proto=IP_PROTO_UDP,
                ipv4_dst=ip,
                udp_src=(value << shift, mask),
            ),
            (Output(hops[value % len(hops)]),),
        )
        for value in range(1 << bits)
    ]


def _switch_rules(routes: _Routes, switch: str, ev_rules: bool = False) -> SwitchRules:
    group_type = GROUP_TYPE_OF_POLICY.get(routes.policy)
    groups: dict[tuple[int, ...], GroupSpec] = {}
    flows = list(base_flows())
    for ip, attachment in routes.destinations:
        ports = routes.ports(switch, ip, attachment)
        if not ports:
            continue  # unreachable from here: the table miss drops it
        if len(ports) == 1 or group_type is None:
            action: Action = Output(ports[0])
        else:
            if ports not in groups:
                groups[ports] = GroupSpec(
                    len(groups) + 1,
                    group_type,
                    # watch_port makes a bucket dead while its port is down: a select group
                    # then hashes over the live buckets only, a fast-failover group uses the
                    # first live one.
                    tuple(Bucket(p, 1, p) for p in ports),
                )
            action = ToGroup(groups[ports].group_id)
        actions: tuple[Action, ...] = (action,)
        if routes.policy == "ff":
            actions = (DecTtl(), action)
        flows.append(
            FlowSpec(PRIORITY_IPV4_DST, match(eth_type=ETH_TYPE_IPV4, ipv4_dst=ip), actions)
        )
        if ev_rules:
            flows.extend(_ev_flows(routes, switch, ip, attachment))
    sw = routes.fabric.switch(switch)
    return SwitchRules(sw.name, sw.dpid, tuple(flows), tuple(groups.values()))


def compute_rules(fabric: Fabric, policy: str, ev_rules: bool = False) -> dict[int, SwitchRules]:
    """The flows and groups of every switch, keyed by dpid, for routing `policy`; with
    `ev_rules`, also the static EV rules by which a UDP source port names its path (MRC's
    SRv6 stand-in, `zcube_lab.core.fabric.evpaths`)."""
    routes = _Routes(fabric, check_policy(policy))
    return {sw.dpid: _switch_rules(routes, sw.name, ev_rules) for sw in fabric.switches}


# -- failures --------------------------------------------------------------------------------
def failed_links(fabric: Fabric, down_ports: Iterable[tuple[str, int]]) -> tuple[Link, ...]:
    """The links with at least one end in `down_ports` ((node, port) pairs), in fabric order."""
    down = set(down_ports)
    return tuple(
        link
        for link in fabric.links
        if (link.node1, link.port1) in down or (link.node2, link.port2) in down
    )


def link_ends(links: Iterable[Link]) -> frozenset[tuple[str, int]]:
    """Both (node, port) ends of every link."""
    return frozenset(end for lk in links for end in ((lk.node1, lk.port1), (lk.node2, lk.port2)))


def link_states(
    fabric: Fabric, down_ports: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], bool]:
    """(switch, port) -> whether its link is up, for every switch port that is a link end.
    A link is down as soon as either end is."""
    dead = link_ends(failed_links(fabric, down_ports))
    return {
        end: end not in dead
        for link in fabric.links
        for end in ((link.node1, link.port1), (link.node2, link.port2))
        if fabric.is_switch(end[0])
    }


def rules_without(
    fabric: Fabric, down_links: Iterable[Link], policy: str, ev_rules: bool = False
) -> dict[int, SwitchRules]:
    """What a recomputing controller installs once `down_links` failed: `policy` on the fabric
    that remains. (Group ids restart from 1; `align_groups` keeps them stable against the
    rules a switch already holds.)"""
    return compute_rules(fabric.without_links(down_links), policy, ev_rules)


# -- changing installed rules -----------------------------------------------------------------
FlowKey = tuple[int, tuple[tuple[str, MatchValue], ...]]


def flow_key(flow: FlowSpec) -> FlowKey:
    """What identifies a flow on a switch: priority and match (OFPFC_ADD of an equal key
    replaces it)."""
    return (flow.priority, flow.match)


@dataclass(frozen=True)
class RuleDiff:
    """What to send one switch to turn its rules from one set into another, in this order:
    add groups, modify groups, add flows (new or with changed actions; an add replaces the
    flow of equal priority and match), delete flows (strict), delete groups. Groups come first
    and go last because flows point to them."""

    groups_added: tuple[GroupSpec, ...] = ()
    groups_modified: tuple[GroupSpec, ...] = ()
    flows_added: tuple[FlowSpec, ...] = ()
    flows_deleted: tuple[FlowSpec, ...] = ()
    groups_deleted: tuple[GroupSpec, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.flows_changed or self.groups_changed)

    @property
    def flows_changed(self) -> int:
        return len(self.flows_added) + len(self.flows_deleted)

    @property
    def groups_changed(self) -> int:
        return len(self.groups_added) + len(self.groups_modified) + len(self.groups_deleted)


def diff_rules(old: SwitchRules, new: SwitchRules) -> RuleDiff:
    """The changes that turn `old` into `new` on one switch, by flow key and group id."""
    old_flows = {flow_key(f): f for f in old.flows}
    new_keys = {flow_key(f) for f in new.flows}
    old_groups = {g.group_id: g for g in old.groups}
    return RuleDiff(
        groups_added=tuple(g for g in new.groups if g.group_id not in old_groups),
        groups_modified=tuple(
            g for g in new.groups if g.group_id in old_groups and old_groups[g.group_id] != g
        ),
        flows_added=tuple(f for f in new.flows if old_flows.get(flow_key(f)) != f),
        flows_deleted=tuple(f for f in old.flows if flow_key(f) not in new_keys),
        groups_deleted=tuple(g for g in old.groups if g.group_id not in new.group_ids),
    )


def _group_users(rules: SwitchRules) -> dict[int, frozenset[FlowKey]]:
    users: dict[int, set[FlowKey]] = {g.group_id: set() for g in rules.groups}
    for f in rules.flows:
        for a in f.actions:
            if isinstance(a, ToGroup) and a.group_id in users:
                users[a.group_id].add(flow_key(f))
    return {gid: frozenset(keys) for gid, keys in users.items()}


def align_groups(old: SwitchRules, new: SwitchRules) -> SwitchRules:
    """`new` with its group ids chosen against `old`, so that applying `diff_rules(old, result)`
    in order never shows a flow a group meant for other destinations:
    - a group equal to an old one (type and buckets) keeps that old id;
    - else a group used by every flow that used some old group takes that id (a modify: those
      flows get their new buckets at once);
    - else a fresh id no old group had (an add)."""
    old_users, new_users = _group_users(old), _group_users(new)
    by_content = {(g.type, g.buckets): g.group_id for g in old.groups}
    ids: dict[int, int] = {}
    for g in new.groups:
        same = by_content.get((g.type, g.buckets))
        if same is not None and same not in ids.values():
            ids[g.group_id] = same
    for g in new.groups:
        if g.group_id in ids:
            continue
        for old_id, users in old_users.items():
            if users and users <= new_users[g.group_id] and old_id not in ids.values():
                ids[g.group_id] = old_id
                break
    unavailable = set(old.group_ids) | set(ids.values())
    fresh = (i for i in count(1) if i not in unavailable)
    for g in new.groups:
        if g.group_id not in ids:
            ids[g.group_id] = next(fresh)

    def renumber(action: Action) -> Action:
        return ToGroup(ids[action.group_id]) if isinstance(action, ToGroup) else action

    return SwitchRules(
        new.name,
        new.dpid,
        tuple(
            FlowSpec(f.priority, f.match, tuple(renumber(a) for a in f.actions)) for f in new.flows
        ),
        tuple(
            sorted(
                (GroupSpec(ids[g.group_id], g.type, g.buckets) for g in new.groups),
                key=lambda g: g.group_id,
            )
        ),
    )


def rule_counts(rules: Mapping[int, SwitchRules]) -> dict[str, tuple[int, int]]:
    """Switch name -> (flows, groups) it should hold: compare with the lines of
    `ovs-ofctl -O OpenFlow13 --no-stats dump-flows` and `dump-groups` (minus its header)."""
    return {r.name: (len(r.flows), len(r.groups)) for r in rules.values()}
