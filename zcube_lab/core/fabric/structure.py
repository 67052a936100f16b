"""Does a scaled fabric keep its full-size structure? The structure table (pure, no root).

For one fabric description and the traffic pairs of a scenario, `fabric_structure` counts where
pairs meet: the share at 1, 2 and 3 switch hops (and, at 1 hop, on which switch role), the
link-disjoint shortest paths per pair, the NIC ports a transfer can use, servers per ZCube A
segment or ROFT rail leaf, leaves per rail, bisection per GPU and oversubscription.
`zcube_lab.core.fabric.fullsize` sets a scaled fabric beside the full size it stands for
(docs/DOMAIN.md §2 and §7; the goal is every share within `SHARE_GOAL_POINTS` points).

Pair sets (`PAIR_SETS`), counted as ordered pairs of distinct GPU hosts:
- `all`: every GPU with every other, same-server partners included (the hand count of §7:
  of a GPU's 255 partners in ZCube n=16, 15 share its A switch, 15 its B, 225 are 2 hops);
- `pd`: each prefill GPU with every decode GPU the router may pick (`default` layout: any;
  `rail-aligned`: the same rank), from `placement.place`;
- `ep`: each engine with its expert-parallel peers (`Engine.ep_peers`).

How pairs are counted, without a path per pair: hosts are grouped by the switch each interface
attaches to; pairs sharing exactly a set S of attachment switches are counted per block of
pairs with counters and inclusion-exclusion over interface subsets. Interfaces that split the
hosts alike (ROFT's planes) count as one. Every class S of pairs is then measured once, on a
representative pair, from the description itself: hops by breadth-first search, link-disjoint
shortest paths by a unit-capacity max-flow over the links on shortest paths, usable ports by
reachability. That relies on the builders' fabrics being symmetric (every pair of one class is
alike); a unit test checks it against every pair of small fabrics.

Bisection per GPU: the capacity across a cut that halves the servers, over the GPUs of one
side. On a 2-tier leaf-spine at down:up o it is NIC / o; ZCube's K(n,n) at m >= 1 carries the
NIC rate (the cut through half the A switches crosses n*n*(1+m)/2 links of NIC/2, for n*n/2
GPUs a side, and the NIC ports bound it). Oversubscription is the largest host-facing to
switch-facing capacity ratio of a switch with hosts (ZCube: 1/m).
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.placement import LayoutSpec, Placement, place

PAIR_SETS: dict[str, str] = {
    "all": "all GPU pairs",
    "pd": "PD pulls (prefill -> decode)",
    "ep": "EP exchanges",
}
SHARE_GOAL_POINTS = 5.0
HOPS = (1, 2, 3)


@dataclass(frozen=True)
class PairClass:
    """Pairs that share exactly the attachment switches of roles `shared` (empty: none)."""

    shared: tuple[str, ...]
    hops: int
    disjoint_paths: int
    ports: int
    pairs: int


@dataclass(frozen=True)
class PairStats:
    """One pair set on one fabric: its pairs, split by class."""

    name: str
    pairs: int
    classes: tuple[PairClass, ...]

    def share(self, hops: int) -> float | None:
        """Share of the pairs at `hops` switch hops, in %; None without pairs."""
        if not self.pairs:
            return None
        return 100 * sum(c.pairs for c in self.classes if c.hops == hops) / self.pairs

    def share_via(self, role: str) -> float | None:
        """Share of the pairs meeting on one switch of `role` (1 hop), in %."""
        if not self.pairs:
            return None
        hit = sum(c.pairs for c in self.classes if c.hops == 1 and role in c.shared)
        return 100 * hit / self.pairs

    def mean(self, attribute: str) -> float | None:
        """Mean over pairs of a class attribute (`disjoint_paths`, `ports`)."""
        if not self.pairs:
            return None
        return sum(getattr(c, attribute) * c.pairs for c in self.classes) / self.pairs


@dataclass(frozen=True)
class FabricStructure:
    """Where a fabric's pairs meet, and its fabric-wide figures."""

    kind: str
    label: str
    gpus: int
    gpus_per_server: int
    servers: int
    servers_per_group: int  # per ZCube A segment, ROFT rail leaf, Clos leaf
    leaves_per_rail: int  # switches holding one rank: ROFT rail leaves, ZCube B switches
    bisection_gbps_per_gpu: float
    oversubscription: float
    one_hop_roles: tuple[str, ...]
    pair_sets: tuple[PairStats, ...]
    layout: dict[str, Any]

    def pair_set(self, name: str) -> PairStats:
        """The pair set called `name`."""
        return next(p for p in self.pair_sets if p.name == name)


# -- counting -------------------------------------------------------------------------------
def _signatures(fabric: Fabric) -> tuple[dict[str, tuple[str, ...]], tuple[int, ...]]:
    """Host -> its attachment switch per interface, and the interfaces that split the hosts
    differently (ROFT's planes split them alike, so one stands for all)."""
    sig = {
        h.name: tuple(fabric.attachments[(h.name, i.index)].switch for i in h.interfaces)
        for h in fabric.hosts
    }
    width = {len(s) for s in sig.values()}
    if len(width) != 1:
        raise ConfigError("fabric", fabric.kind, "hosts with one number of NIC ports each")
    kept: list[int] = []
    seen: set[tuple[int, ...]] = set()
    for i in range(width.pop()):
        first: dict[str, int] = {}
        partition = tuple(first.setdefault(s[i], len(first)) for s in sig.values())
        if partition not in seen:
            seen.add(partition)
            kept.append(i)
    return {h: tuple(s[i] for i in kept) for h, s in sig.items()}, tuple(kept)


def _count_block(
    sig: dict[str, tuple[str, ...]], xs: Sequence[str], ys: Sequence[str], k: int
) -> Counter[int]:
    """Ordered pairs (x, y), x != y, of xs by ys, by the bitmask of interfaces whose switch they
    share (inclusion-exclusion over interface subsets, no pair enumerated)."""
    at_least: dict[int, int] = {}
    for mask in range(1 << k):
        idx = [i for i in range(k) if mask >> i & 1]
        cx = Counter(tuple(sig[x][i] for i in idx) for x in xs)
        cy = Counter(tuple(sig[y][i] for i in idx) for y in ys)
        at_least[mask] = sum(n * cy[key] for key, n in cx.items())
    exact: Counter[int] = Counter()
    for mask in range(1 << k):
        total = 0
        for sup in range(1 << k):
            if sup & mask == mask:
                total += (-1) ** (bin(sup).count("1") - bin(mask).count("1")) * at_least[sup]
        if total:
            exact[mask] = total
    selves = len(set(xs).intersection(ys))
    exact[(1 << k) - 1] -= selves
    return exact


class _Graph:
    """The fabric as a multigraph for per-pair measures: hosts do not forward."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.adj: dict[str, list[tuple[str, int]]] = {}
        for n, lk in enumerate(fabric.links):
            self.adj.setdefault(lk.node1, []).append((lk.node2, n))
            self.adj.setdefault(lk.node2, []).append((lk.node1, n))

    def _dist(self, src: str) -> dict[str, int]:
        dist = {src: 0}
        queue = deque([src])
        while queue:
            node = queue.popleft()
            if node != src and not self.fabric.is_switch(node):
                continue
            for nbr, _ in self.adj.get(node, ()):
                if nbr not in dist:
                    dist[nbr] = dist[node] + 1
                    queue.append(nbr)
        return dist

    def measure(self, x: str, y: str) -> tuple[int, int, int]:
        """(switch hops, link-disjoint shortest paths, usable source ports) from x to y."""
        dx, dy = self._dist(x), self._dist(y)
        if y not in dx:
            raise ConfigError("fabric", self.fabric.kind, f"a path from {x} to {y}")
        length = dx[y]
        cap: Counter[tuple[str, str]] = Counter()
        for lk in self.fabric.links:
            for u, v in ((lk.node1, lk.node2), (lk.node2, lk.node1)):
                if u in dx and v in dy and dx[u] + 1 + dy[v] == length:
                    cap[(u, v)] += 1
        ports = 0
        for iface in self.fabric.host(x).interfaces:
            switch = self.fabric.attachments[(x, iface.index)].switch
            ports += y in self._dist(switch) if self.fabric.is_switch(switch) else 0
        return length - 1, _max_flow(cap, x, y), ports


def _max_flow(cap: Counter[tuple[str, str]], src: str, dst: str) -> int:
    """Integer max-flow (Edmonds-Karp) over arcs with capacities `cap`."""
    residual: Counter[tuple[str, str]] = Counter(cap)
    out: dict[str, set[str]] = {}
    for u, v in cap:
        out.setdefault(u, set()).add(v)
        out.setdefault(v, set()).add(u)
    flow = 0
    while True:
        parent = {src: src}
        queue = deque([src])
        while queue and dst not in parent:
            u = queue.popleft()
            for v in out.get(u, ()):
                if v not in parent and residual[(u, v)] > 0:
                    parent[v] = u
                    queue.append(v)
        if dst not in parent:
            return flow
        v = dst
        while v != src:
            u = parent[v]
            residual[(u, v)] -= 1
            residual[(v, u)] += 1
            v = u
        flow += 1


def _blocks(fabric: Fabric, placement: Placement | None) -> dict[str, list[tuple[list, list]]]:
    """Each pair set as blocks (xs, ys) whose products, self pairs left out, are its pairs."""
    names = [h.name for h in fabric.hosts]
    out: dict[str, list[tuple[list, list]]] = {"all": [(names, names)], "pd": [], "ep": []}
    if placement is None:
        return out
    prefill, decode = placement.role("prefill"), placement.role("decode")
    if placement.layout.layout == "rail-aligned":
        for rail in sorted({e.rail for e in prefill}):
            xs = [e.host for e in prefill if e.rail == rail]
            ys = [e.host for e in decode if e.rail == rail]
            out["pd"].append((xs, ys or [e.host for e in decode]))
    else:
        out["pd"].append(([e.host for e in prefill], [e.host for e in decode]))
    out["ep"] = [([e.host], list(e.ep_peers)) for e in placement.engines if e.ep_peers]
    return out


def _role(fabric: Fabric, switch: str) -> str:
    return fabric.switch(switch).role


def fabric_structure(fabric: Fabric, layout: LayoutSpec | None = None) -> FabricStructure:
    """Where `fabric`'s pairs meet: all pairs, and the scenario's (placed by `layout`)."""
    placement = None if layout is None else place(fabric, layout)
    sig, kept = _signatures(fabric)
    k = len(kept)
    graph = _Graph(fabric)
    hosts = [h.name for h in fabric.hosts]
    classes: dict[int, tuple[int, int, int]] = {}

    def measured(mask: int, xs: Sequence[str], ys: Sequence[str]) -> tuple[int, int, int]:
        if mask not in classes:
            rep = _representative(sig, mask, hosts, hosts) or _representative(sig, mask, xs, ys)
            if rep is None:  # cannot happen: the block counted a pair of this class
                raise ConfigError("fabric", fabric.kind, "a pair of every counted class")
            classes[mask] = graph.measure(*rep)
        return classes[mask]

    stats = []
    for name, blocks in _blocks(fabric, placement).items():
        by_mask: Counter[int] = Counter()
        kinds: dict[int, tuple[int, int, int]] = {}
        for xs, ys in blocks:
            for mask, count in _count_block(sig, xs, ys, k).items():
                if count:
                    by_mask[mask] += count
                    kinds[mask] = measured(mask, xs, ys)
        pair_classes = []
        for mask in sorted(by_mask):
            hops, paths, ports = kinds[mask]
            roles = tuple(
                sorted({_role(fabric, sig[hosts[0]][i]) for i in range(k) if mask >> i & 1})
            )
            pair_classes.append(PairClass(roles, hops, paths, ports, by_mask[mask]))
        stats.append(PairStats(name, sum(by_mask.values()), tuple(pair_classes)))
    return _fabric_figures(fabric, sig, kept, tuple(stats), placement)


def _representative(
    sig: dict[str, tuple[str, ...]], mask: int, xs: Sequence[str], ys: Sequence[str]
) -> tuple[str, str] | None:
    k = len(next(iter(sig.values())))
    for x in xs[:1] if xs is ys else xs:
        for y in ys:
            if y != x and sum(1 << i for i in range(k) if sig[x][i] == sig[y][i]) == mask:
                return x, y
    return None


def _fabric_figures(
    fabric: Fabric,
    sig: dict[str, tuple[str, ...]],
    kept: tuple[int, ...],
    stats: tuple[PairStats, ...],
    placement: Placement | None,
) -> FabricStructure:
    servers = {h.server for h in fabric.hosts}
    gps = len(fabric.hosts) // len(servers)
    first = fabric.hosts[0]
    group_switch = sig[first.name][0]
    per_group = len({h.server for h in fabric.hosts if sig[h.name][0] == group_switch})
    rank0 = [h for h in fabric.hosts if h.rank == 0]
    per_rail = min(len({sig[h.name][i] for h in rank0}) for i in range(len(kept)))
    roles = tuple(sorted({_role(fabric, sig[first.name][i]) for i in range(len(kept))}))
    over = oversubscription(fabric)
    params = dict(fabric.spec.params)
    label = f"{fabric.kind} " + " ".join(f"{k}={v}" for k, v in params.items() if k != "nic_gbps")
    return FabricStructure(
        kind=fabric.kind,
        label=label,
        gpus=len(fabric.hosts),
        gpus_per_server=gps,
        servers=len(servers),
        servers_per_group=per_group,
        leaves_per_rail=per_rail,
        bisection_gbps_per_gpu=fabric.nic_gbps / max(1.0, over),
        oversubscription=over,
        one_hop_roles=roles,
        pair_sets=stats,
        layout={} if placement is None else _layout_dict(placement.layout),
    )


def oversubscription(fabric: Fabric) -> float:
    """The largest host-facing : switch-facing capacity ratio of a switch with hosts."""
    down: Counter[str] = Counter()
    up: Counter[str] = Counter()
    for lk in fabric.links:
        ends = [n for n in (lk.node1, lk.node2) if fabric.is_switch(n)]
        if len(ends) == 1:
            down[ends[0]] += lk.gbps
        else:
            for n in ends:
                up[n] += lk.gbps
    ratios = [down[s] / up[s] for s in down if up[s]]
    return max(ratios) if ratios else math.inf


def _layout_dict(layout: LayoutSpec) -> dict[str, Any]:
    return {
        "prefill_servers": layout.prefill_servers,
        "decode_servers": layout.decode_servers,
        "ep_servers": layout.ep_servers,
        "layout": layout.layout,
        "alltoall": layout.alltoall,
    }
