"""The fabric description: plain, frozen data that every other part of the lab reads.

One `Fabric` is the single source of truth for Mininet (what to build), the controller (what to
route), the cost model, the tests and the reports. It needs no root and starts nothing.

Naming scheme:
- GPU hosts are `h<gid>`; a host's interfaces are numbered from 0 (`h3-eth0`, `h3-eth1`).
- Switches are `<role><index>`: ZCube `a0..`, `b0..`; ROFT and Clos `leaf0..`, `spine0..`
  (and `core0..` in a third tier). A switch port number is its OpenFlow port number (from 1).
- Fabric addresses are in 10.0.0.0/8 and assigned to interfaces as /32; each host carries the
  routes that pick the egress interface for every destination prefix, so choosing a
  destination address chooses a path (ZCube: port 1 or port 2).
- Rates are full-scale (the real cluster's) in Gb/s; the emulator divides them by its scale.
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any


@dataclass(frozen=True)
class Interface:
    """One NIC port of a GPU host, with its fabric address."""

    host: str
    index: int
    ip: str
    mac: str

    @property
    def name(self) -> str:
        return f"{self.host}-eth{self.index}"


@dataclass(frozen=True)
class Route:
    """A host route: packets to `prefix` leave through interface `interface`."""

    prefix: str
    interface: int


@dataclass(frozen=True)
class Host:
    """A GPU host: one GPU and its NIC (one or more ports)."""

    name: str
    gid: int
    server: int
    rank: int  # GPU index within its server
    rail: int  # ROFT/Clos: the rail; ZCube: the B switch its port 2 reaches (gid % n)
    interfaces: tuple[Interface, ...]
    routes: tuple[Route, ...]


@dataclass(frozen=True)
class Switch:
    """A switch of the fabric."""

    name: str
    dpid: int
    role: str  # "A", "B", "leaf", "spine", "core"
    index: int
    radix: int  # ports the full-scale part has for this role (used ports may be fewer)


@dataclass(frozen=True)
class Link:
    """A link between two ports. Host ports are interface indexes; switch ports are OpenFlow
    port numbers."""

    node1: str
    port1: int
    node2: str
    port2: int
    gbps: float

    def other(self, node: str) -> tuple[str, int]:
        """The far end (node, port) seen from `node`."""
        return (self.node2, self.port2) if node == self.node1 else (self.node1, self.port1)


@dataclass(frozen=True)
class Attachment:
    """Where a host interface plugs in: switch name and OpenFlow port."""

    switch: str
    port: int


@dataclass(frozen=True)
class Path:
    """A path between two hosts: the interfaces used and the switches crossed, in order."""

    src_interface: int
    dst_interface: int
    switches: tuple[str, ...]

    @property
    def hops(self) -> int:
        """Switch hops: the number of switches crossed."""
        return len(self.switches)


@dataclass(frozen=True)
class FabricSpec:
    """What to build: a registered builder name and its parameters (JSON-serialisable)."""

    kind: str
    params: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, kind: str, **params: Any) -> FabricSpec:
        return cls(kind, tuple(sorted((k, v) for k, v in params.items() if v is not None)))

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "params": dict(self.params)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> FabricSpec:
        data = json.loads(text)
        return cls.of(data["kind"], **data.get("params", {}))


@dataclass(frozen=True)
class Fabric:
    """A whole fabric: hosts, switches and links, plus the spec that built it."""

    spec: FabricSpec
    nic_gbps: float
    hosts: tuple[Host, ...]
    switches: tuple[Switch, ...]
    links: tuple[Link, ...]
    notes: tuple[str, ...] = field(default=())

    # -- lookups -------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        return self.spec.kind

    @cached_property
    def _hosts_by_name(self) -> dict[str, Host]:
        return {h.name: h for h in self.hosts}

    @cached_property
    def _switches_by_name(self) -> dict[str, Switch]:
        return {s.name: s for s in self.switches}

    def host(self, name: str) -> Host:
        """The host called `name`."""
        return self._hosts_by_name[name]

    def switch(self, name: str) -> Switch:
        """The switch called `name`."""
        return self._switches_by_name[name]

    def is_switch(self, name: str) -> bool:
        return name in self._switches_by_name

    def switch_interfaces(self, links: Iterable[Link] | None = None) -> tuple[str, ...]:
        """Root-namespace names of the switch ends of `links` (default: every link), sorted:
        `<switch>-eth<port>`, the interfaces a fault sets down and the lab configures."""
        names = {
            f"{node}-eth{port}"
            for lk in (self.links if links is None else links)
            for node, port in ((lk.node1, lk.port1), (lk.node2, lk.port2))
            if self.is_switch(node)
        }
        return tuple(sorted(names))

    @cached_property
    def attachments(self) -> dict[tuple[str, int], Attachment]:
        """(host, interface index) -> the switch port it plugs into."""
        out: dict[tuple[str, int], Attachment] = {}
        for link in self.links:
            for node, port in ((link.node1, link.port1), (link.node2, link.port2)):
                far, far_port = link.other(node)
                if node in self._hosts_by_name and far in self._switches_by_name:
                    out[(node, port)] = Attachment(far, far_port)
        return out

    @cached_property
    def _links_by_end(self) -> dict[tuple[str, int], Link]:
        return {
            end: link
            for link in self.links
            for end in ((link.node1, link.port1), (link.node2, link.port2))
        }

    def link_at(self, node: str, port: int) -> Link | None:
        """The link plugged into `port` of `node` (switch port or host interface), if any."""
        return self._links_by_end.get((node, port))

    def without_links(self, links: Iterable[Link]) -> Fabric:
        """A copy of this fabric with `links` removed (failed); everything else is the same.
        Derived lookups (attachments, adjacency, distances) are recomputed on the copy."""
        gone = set(links)
        unknown = gone.difference(self.links)
        if unknown:
            raise ValueError(f"not links of this fabric: {sorted(map(repr, unknown))}")
        return dataclasses.replace(self, links=tuple(lk for lk in self.links if lk not in gone))

    @cached_property
    def interfaces_by_ip(self) -> dict[str, Interface]:
        """Fabric address -> interface."""
        return {i.ip: i for h in self.hosts for i in h.interfaces}

    @cached_property
    def switch_adjacency(self) -> dict[str, dict[str, tuple[tuple[int, int], ...]]]:
        """switch -> neighbour switch -> the (local port, far port) of every link between them."""
        adj: dict[str, dict[str, list[tuple[int, int]]]] = {s.name: {} for s in self.switches}
        for link in self.links:
            if link.node1 in adj and link.node2 in adj:
                adj[link.node1].setdefault(link.node2, []).append((link.port1, link.port2))
                adj[link.node2].setdefault(link.node1, []).append((link.port2, link.port1))
        return {
            s: {n: tuple(sorted(ports)) for n, ports in sorted(nbrs.items())}
            for s, nbrs in adj.items()
        }

    @cached_property
    def switch_distances(self) -> dict[str, dict[str, int]]:
        """Hop distance between every two switches (BFS over switch links)."""
        out: dict[str, dict[str, int]] = {}
        for src in self.switch_adjacency:
            dist = {src: 0}
            queue = deque([src])
            while queue:
                node = queue.popleft()
                for nbr in self.switch_adjacency[node]:
                    if nbr not in dist:
                        dist[nbr] = dist[node] + 1
                        queue.append(nbr)
            out[src] = dist
        return out

    # -- reports -------------------------------------------------------------------------
    def ports_used(self) -> dict[str, int]:
        """Ports in use on each switch."""
        used = {s.name: 0 for s in self.switches}
        for link in self.links:
            for node in (link.node1, link.node2):
                if node in used:
                    used[node] += 1
        return used

    def switching_capacity_gbps(self) -> float:
        """Total switching capacity in use: the sum of the rates of every used switch port."""
        total = 0.0
        for link in self.links:
            total += link.gbps * sum(1 for n in (link.node1, link.node2) if self.is_switch(n))
        return total

    def shortest_paths(self, src: str, dst: str) -> list[Path]:
        """Every shortest path (fewest switches) from host `src` to host `dst`, over all pairs of
        their interfaces. Parallel links between two switches count as one path."""
        if src == dst:
            return []
        candidates: list[Path] = []
        best = None
        src_host, dst_host = self.host(src), self.host(dst)
        for si in src_host.interfaces:
            a = self.attachments[(src, si.index)].switch
            for di in dst_host.interfaces:
                b = self.attachments[(dst, di.index)].switch
                d = self.switch_distances[a].get(b)
                if d is None:
                    continue
                if best is None or d < best:
                    best, candidates = d, []
                if d == best:
                    candidates.extend(Path(si.index, di.index, p) for p in self._switch_paths(a, b))
        return candidates

    def _switch_paths(self, a: str, b: str) -> Iterator[tuple[str, ...]]:
        """All shortest switch sequences from switch a to switch b."""
        to_b = self.switch_distances[b]
        if a not in to_b:
            return

        def walk(node: str, acc: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
            if node == b:
                yield acc
                return
            for nbr in self.switch_adjacency[node]:
                if to_b.get(nbr) == to_b[node] - 1:
                    yield from walk(nbr, (*acc, nbr))

        yield from walk(a, (a,))

    def host_hops(self, src: str, dst: str) -> int:
        """Switch hops on a shortest path between two hosts."""
        paths = self.shortest_paths(src, dst)
        if not paths:
            raise ValueError(f"no path from {src} to {dst}")
        return paths[0].hops

    def diameter(self) -> int:
        """The largest number of switch hops between any two hosts on their shortest path."""
        best = 0
        for i, src in enumerate(self.hosts):
            for dst in self.hosts[i + 1 :]:
                hops = min(
                    self.switch_distances[self.attachments[(src.name, si.index)].switch].get(
                        self.attachments[(dst.name, di.index)].switch, 10**9
                    )
                    + 1
                    for si in src.interfaces
                    for di in dst.interfaces
                )
                best = max(best, hops)
        return best

    def summary(self) -> Mapping[str, Any]:
        """The figures a user wants first: counts, capacity, diameter."""
        roles: dict[str, int] = {}
        for s in self.switches:
            roles[s.role] = roles.get(s.role, 0) + 1
        used = self.ports_used()
        return {
            "fabric": self.kind,
            "params": dict(self.spec.params),
            "hosts": len(self.hosts),
            "host_interfaces": sum(len(h.interfaces) for h in self.hosts),
            "switches": len(self.switches),
            "switches_by_role": roles,
            "links": len(self.links),
            "switch_links": sum(
                1 for lk in self.links if self.is_switch(lk.node1) and self.is_switch(lk.node2)
            ),
            "ports_used_max": max(used.values()) if used else 0,
            "switching_capacity_gbps": self.switching_capacity_gbps(),
            "diameter_hops": self.diameter(),
            "nic_gbps": self.nic_gbps,
        }
