"""The bill of materials of a fabric read from its description (any graph, any size the file
gives), as a `pricing.FabricCost`, so it prints beside the built-ins' count models.

Counts: switches by role; links by the roles of their two ends (`nic-<role>` for a GPU's port,
`<role>-<role>` between switches, the roles sorted) and rate; switch ports used are every switch
end of a link. Installed ports are each switch's radix; `switch_port_gbps` is the fastest link
on a switch, so installed switching capacity counts every port at that rate (a file mixing
rates says so in a note). Tiers: 1 + the largest distance from a switch to the nearest switch
with GPUs (ZCube 1, leaf-spine 2). Diameter: the switch hops of the longest shortest GPU path
over the pairs that have one. Prices: the caller's, else the file's `prices`.
"""

from __future__ import annotations

from collections import deque

from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.files.native import LoadedFabric
from zcube_lab.core.fabric.pricing import FabricCost, LinkGroup, SwitchGroup


def _int(value: float) -> int:
    return round(value)


def fabric_cost(
    loaded: LoadedFabric | Fabric,
    switch_price: float | None = None,
    optic_price: float | None = None,
    name: str | None = None,
) -> FabricCost:
    """Price a fabric description; a `LoadedFabric`'s own prices fill what is not given."""
    if isinstance(loaded, LoadedFabric):
        fabric = loaded.fabric
        if switch_price is None:
            switch_price = loaded.prices.get("switch")
        if optic_price is None:
            optic_price = loaded.prices.get("optic_400g")
        label = name or loaded.name
    else:
        fabric = loaded
        label = name or fabric.kind
    roles: dict[str, int] = {}
    for s in fabric.switches:
        roles[s.role] = roles.get(s.role, 0) + 1
    groups: dict[tuple[str, int], int] = {}
    rates = set()
    for lk in fabric.links:
        ends = sorted(
            fabric.switch(n).role if fabric.is_switch(n) else "nic" for n in (lk.node1, lk.node2)
        )
        if "nic" in ends:
            ends.remove("nic")
            ends.insert(0, "nic")
        key = ("-".join(ends), _int(lk.gbps))
        groups[key] = groups.get(key, 0) + 1
        rates.add(lk.gbps)
    port_gbps = max(
        (
            lk.gbps
            for lk in fabric.links
            if fabric.is_switch(lk.node1) or fabric.is_switch(lk.node2)
        ),
        default=0.0,
    )
    notes = [f"priced from the description of {len(fabric.hosts)} GPUs as the file gives it"]
    if len(rates) > 1:
        notes.append(
            f"links at {sorted(_int(r) for r in rates)} Gb/s: installed capacity counts every "
            f"port at {port_gbps:g}"
        )
    radixes = {s.radix for s in fabric.switches}
    if len(radixes) > 1:
        notes.append(f"switch radixes {sorted(radixes)}: ports_per_switch is the largest")
    used = sum(fabric.ports_used().values())
    cost = FabricCost(
        fabric=label,
        tiers=_tiers(fabric),
        diameter_hops=_diameter(fabric),
        switch_port_gbps=_int(port_gbps),
        ports_per_switch=max(radixes, default=0),
        switch_groups=tuple(SwitchGroup(r, c) for r, c in roles.items()),
        links=_link_groups(groups),
        switch_ports_used=used,
        switch_price=switch_price,
        optic_price=optic_price,
        notes=tuple(notes),
    )
    return cost


def _link_groups(groups: dict[tuple[str, int], int]) -> tuple[LinkGroup, ...]:
    """Link groups named by their ends' roles, with the rate when one role pair has several."""
    rates: dict[str, int] = {}
    for role, _ in groups:
        rates[role] = rates.get(role, 0) + 1
    return tuple(
        LinkGroup(role if rates[role] == 1 else f"{role}@{gbps}G", count, gbps)
        for (role, gbps), count in groups.items()
    )


def _tiers(fabric: Fabric) -> int:
    edge = {a.switch for a in fabric.attachments.values()}
    dist = {s: 0 for s in edge}
    queue = deque(edge)
    while queue:
        node = queue.popleft()
        for nbr in fabric.switch_adjacency[node]:
            if nbr not in dist:
                dist[nbr] = dist[node] + 1
                queue.append(nbr)
    return 1 + max(dist.values(), default=0)


def _diameter(fabric: Fabric) -> int:
    """Switch hops of the longest shortest GPU-to-GPU path, over pairs with a path."""
    best = 0
    seen: set[tuple[frozenset[str], frozenset[str]]] = set()
    ends = {
        h.name: frozenset(fabric.attachments[(h.name, i.index)].switch for i in h.interfaces)
        for h in fabric.hosts
    }
    classes = sorted(set(ends.values()), key=sorted)
    for i, a in enumerate(classes):
        for b in classes[i:]:
            if (a, b) in seen:
                continue
            seen.add((a, b))
            hops = [
                fabric.switch_distances[x][y] + 1
                for x in a
                for y in b
                if y in fabric.switch_distances[x]
            ]
            if hops:
                best = max(best, min(hops))
    return best
