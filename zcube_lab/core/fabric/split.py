"""Splitting one fabric across several lab machines (pure: no Mininet, no root).

A *machine* here is a physical lab machine, an emulation host running part of the Mininet
network; it is not a GPU server of the fabric description (`Host.server`). A link whose two
ends sit on different machines becomes a tunnel between them: a *cut* link.

The rule (docs/SCALE.md, "Placement across machines"):
1. Every GPU host sits on the machine of at least one switch it links to, so no host is alone
   across a tunnel from all its switches. We keep it by construction: a host goes with its
   *anchor*, the switch on its first NIC port (`eth0`: ZCube's A switch, a ROFT or Clos leaf,
   plane 0's leaf on a multi-plane ROFT). An anchor and its hosts form a *group*.
2. Groups are dealt to machines in order, in contiguous blocks whose sizes differ by at most
   one group, so the machines' GPU host counts differ by at most one group's hosts (every
   builder makes equal groups). For ZCube n <= 8 (default gpus_per_server) and square ROFT
   sizes a group is one GPU server's worth; a Clos leaf holds several servers, and its
   single-port hosts cannot leave it.
3. Every other switch (ZCube's B switches, spines, the leaves of planes 1..) goes, in fabric
   order, to the machine holding most of its links to nodes already placed; ties go to the
   machine with the fewest switches, then the lowest index (so spines spread).
4. A local pass then moves any switch to another machine when that strictly lowers the number
   of cut links and keeps rule 1, until no move does.

Rates: each cut link keeps its full-scale Gb/s, and its emulated Mb/s is `Scale.link_mbps`
(100 Mb/s per NIC by default), what a tunnel between the two machines must carry at most.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric, Link
from zcube_lab.core.fabric.scale import Scale

RULE = (
    "each GPU host stays with the switch on its first NIC port (its group); groups are dealt "
    "to machines in contiguous, equal blocks; every other switch goes where most of its links "
    "are; then single switch moves that cut fewer links are kept"
)
MAX_PASSES = 20


@dataclass(frozen=True)
class MachineLoad:
    """What one machine emulates: its GPU hosts, its switches and the links wholly inside it."""

    machine: int
    hosts: tuple[str, ...]
    switches: tuple[str, ...]
    links_inside: int


@dataclass(frozen=True)
class CutLink:
    """A link whose ends are on two machines (a tunnel), with its rates."""

    link: Link
    machines: tuple[int, int]  # (lower, higher) machine index
    gbps: float
    mbps: float

    @property
    def label(self) -> str:
        """`a3-b1`, `h5-b1`: the two node names."""
        return f"{self.link.node1}-{self.link.node2}"


@dataclass(frozen=True)
class Split:
    """A fabric placed on `machines` lab machines: every node's machine index and the cut."""

    fabric: Fabric
    machines: int
    host_machine: Mapping[str, int]
    switch_machine: Mapping[str, int]
    scale: Scale = field(default_factory=Scale)

    def machine_of(self, node: str) -> int:
        """The machine index of a host or switch."""
        return self.host_machine[node] if node in self.host_machine else self.switch_machine[node]

    @cached_property
    def cut(self) -> tuple[CutLink, ...]:
        """Every cut link, in fabric order, with its machines and rates."""
        out = []
        for lk in self.fabric.links:
            i, j = self.machine_of(lk.node1), self.machine_of(lk.node2)
            if i != j:
                mbps = self.scale.link_mbps(self.fabric, lk.gbps)
                out.append(CutLink(lk, (min(i, j), max(i, j)), lk.gbps, mbps))
        return tuple(out)

    @property
    def cut_links(self) -> tuple[Link, ...]:
        """The links that become tunnels."""
        return tuple(c.link for c in self.cut)

    @property
    def cut_gbps(self) -> float:
        """Full-scale rate of the cut links, summed."""
        return sum(c.gbps for c in self.cut)

    @property
    def cut_mbps(self) -> float:
        """Emulated rate of the cut links, summed."""
        return sum(c.mbps for c in self.cut)

    @cached_property
    def per_machine(self) -> tuple[MachineLoad, ...]:
        """Each machine's hosts, switches and inside links."""
        inside = Counter(
            self.machine_of(lk.node1)
            for lk in self.fabric.links
            if self.machine_of(lk.node1) == self.machine_of(lk.node2)
        )
        return tuple(
            MachineLoad(
                k,
                tuple(h.name for h in self.fabric.hosts if self.host_machine[h.name] == k),
                tuple(s.name for s in self.fabric.switches if self.switch_machine[s.name] == k),
                inside[k],
            )
            for k in range(self.machines)
        )

    def pairs(self) -> dict[tuple[int, int], tuple[CutLink, ...]]:
        """Machine pair -> the cut links between them (pairs with none are left out)."""
        out: dict[tuple[int, int], list[CutLink]] = {}
        for c in self.cut:
            out.setdefault(c.machines, []).append(c)
        return {pair: tuple(links) for pair, links in sorted(out.items())}

    def host_spread(self) -> int:
        """GPU hosts on the fullest machine minus those on the emptiest."""
        counts = [len(m.hosts) for m in self.per_machine]
        return max(counts) - min(counts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: the rule, each machine's load and the cut link by link."""
        return {
            "machines": self.machines,
            "rule": RULE,
            "nic_mbps": self.scale.nic_mbps,
            "per_machine": [
                {
                    "machine": m.machine,
                    "hosts": list(m.hosts),
                    "switches": list(m.switches),
                    "links_inside": m.links_inside,
                }
                for m in self.per_machine
            ],
            "cut": {
                "count": len(self.cut),
                "gbps": self.cut_gbps,
                "mbps": self.cut_mbps,
                "links": [
                    {
                        "link": c.label,
                        "ends": [
                            [c.link.node1, c.link.port1],
                            [c.link.node2, c.link.port2],
                        ],
                        "machines": list(c.machines),
                        "gbps": c.gbps,
                        "mbps": c.mbps,
                    }
                    for c in self.cut
                ],
                "by_pair": [
                    {
                        "machines": list(pair),
                        "count": len(links),
                        "mbps": sum(c.mbps for c in links),
                    }
                    for pair, links in self.pairs().items()
                ],
            },
        }


# -- placement -------------------------------------------------------------------------------
def anchor_groups(fabric: Fabric) -> dict[str, tuple[str, ...]]:
    """Anchor switch -> the GPU hosts whose first NIC port plugs into it, in fabric order."""
    groups: dict[str, list[str]] = {}
    for h in fabric.hosts:
        first = min(i.index for i in h.interfaces)
        groups.setdefault(fabric.attachments[(h.name, first)].switch, []).append(h.name)
    order = {s.name: k for k, s in enumerate(fabric.switches)}
    return {a: tuple(hs) for a, hs in sorted(groups.items(), key=lambda kv: order[kv[0]])}


def max_machines(fabric: Fabric) -> int:
    """The most machines a fabric can be split over: no more than its GPU servers, and no more
    than its host groups (each machine gets at least one)."""
    servers = len({h.server for h in fabric.hosts})
    return min(servers, len(anchor_groups(fabric)))


def split_fabric(fabric: Fabric, machines: int, scale: Scale | None = None) -> Split:
    """Place every GPU host and switch of `fabric` on one of `machines` lab machines by the rule
    of this module's docstring. Deterministic; refuses a machine count outside 1..the limit."""
    limit = max_machines(fabric)
    if isinstance(machines, bool) or not isinstance(machines, int):
        raise ConfigError("machines", machines, "must be a whole number")
    if not 1 <= machines <= limit:
        raise ConfigError(
            "machines",
            machines,
            f"between 1 and {limit} for this fabric (at most its GPU servers, and at most its "
            f"{len(anchor_groups(fabric))} host groups: each machine needs one)",
        )
    groups = anchor_groups(fabric)
    switch_at = _deal_groups(list(groups), machines)
    host_at = {h: switch_at[a] for a, hosts in groups.items() for h in hosts}
    neighbours = _neighbours(fabric)
    for s in fabric.switches:
        if s.name not in switch_at:
            switch_at[s.name] = _best_machine(s.name, neighbours, host_at, switch_at, machines)
    _improve(fabric, neighbours, host_at, switch_at, machines)
    return Split(fabric, machines, host_at, switch_at, scale or Scale())


def _deal_groups(anchors: list[str], machines: int) -> dict[str, int]:
    """Anchors in order to machines in contiguous blocks; the first blocks get one more."""
    base, extra = divmod(len(anchors), machines)
    out: dict[str, int] = {}
    k = 0
    for machine in range(machines):
        size = base + (1 if machine < extra else 0)
        for anchor in anchors[k : k + size]:
            out[anchor] = machine
        k += size
    return out


def _neighbours(fabric: Fabric) -> dict[str, list[str]]:
    """Node -> the far end of each of its links (a node repeats once per parallel link)."""
    out: dict[str, list[str]] = {}
    for lk in fabric.links:
        out.setdefault(lk.node1, []).append(lk.node2)
        out.setdefault(lk.node2, []).append(lk.node1)
    return out


def _best_machine(
    switch: str,
    neighbours: Mapping[str, list[str]],
    host_at: Mapping[str, int],
    switch_at: Mapping[str, int],
    machines: int,
) -> int:
    """The machine with most of `switch`'s links to placed nodes; ties: fewest switches, then
    the lowest index."""
    links = Counter(
        host_at.get(n, switch_at.get(n)) for n in neighbours.get(switch, []) if n != switch
    )
    links.pop(None, None)
    load = Counter(switch_at.values())
    return min(range(machines), key=lambda k: (-links[k], load[k], k))


def _improve(
    fabric: Fabric,
    neighbours: Mapping[str, list[str]],
    host_at: Mapping[str, int],
    switch_at: dict[str, int],
    machines: int,
) -> None:
    """Move single switches while a move strictly lowers the cut and keeps every host with at
    least one of its switches (in place, deterministic, at most MAX_PASSES sweeps)."""

    def where(node: str) -> int:
        return host_at[node] if node in host_at else switch_at[node]

    def host_keeps_a_switch(host: str) -> bool:
        return any(switch_at[s] == host_at[host] for s in neighbours[host])

    for _ in range(MAX_PASSES):
        moved = False
        for s in fabric.switches:
            here = switch_at[s.name]
            counts = Counter(where(n) for n in neighbours.get(s.name, []))
            better = sorted(
                (k for k in range(machines) if counts[k] > counts[here]),
                key=lambda k: (-counts[k], k),
            )
            hosts = [n for n in neighbours.get(s.name, []) if n in host_at]
            for k in better:
                switch_at[s.name] = k
                if all(host_keeps_a_switch(h) for h in hosts):
                    moved = True
                    break
                switch_at[s.name] = here
        if not moved:
            return
