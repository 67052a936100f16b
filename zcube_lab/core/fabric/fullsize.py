"""The full size a scaled fabric stands for, and the structure table that sets the two side
by side with the difference in points (`compare_structure`, `structure_rows`; pure). Where
pairs meet is counted by `zcube_lab.core.fabric.structure`.

The full-size fabric (`full_size_spec`) is built by the same builders: by default 1,024 GPUs,
8 per server, 400G NICs. ZCube: n = sqrt(GPUs), one link per A-B pair (n=32: 4 servers per A
segment). ROFT: leaves of `switch_ports` (64) ports at 1:1, each taking `switch_ports / 2`
servers' rail r (32), so several leaves per rail (4), and spines enough for every uplink (16),
as `cost.py` sizes it; its oversubscription and planes are the scaled fabric's. Clos: whole
servers per leaf, the same leaves and spines.

Mapping a scenario onto the full size (`full_size_layout`): the placement rule is the scaled
one (`place`: the first servers prefill, then decode, instances of `ep_servers` whole servers),
applied to the full-size servers with the prefill and decode counts scaled by
full servers / scaled servers (so 1 of 4 prefill servers becomes 32 of 128), rounded to whole
EP instances; the EP instance keeps its width in servers (an EP group of K servers is a model
and parallelism choice, not a cluster size), the layout (`default` / `rail-aligned`) and the
all-to-all pattern (`rail` / `all`) stay. So "prefill servers in other segments or leaf groups
than decode" and "an EP group of K servers" come out at full size where the rule puts them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.placement import LayoutSpec
from zcube_lab.core.fabric.structure import (
    HOPS,
    PAIR_SETS,
    SHARE_GOAL_POINTS,
    FabricStructure,
    PairClass,
    PairStats,
    fabric_structure,
)

FULL_GPUS = 1024
FULL_GPUS_PER_SERVER = 8
FULL_SWITCH_PORTS = 64


@dataclass(frozen=True)
class StructureComparison:
    """A scaled fabric beside the full-size one it stands for, for one scenario."""

    scenario: str
    scaled: FabricStructure
    full: FabricStructure

    def share_gaps(self) -> dict[str, float]:
        """Per pair set, the largest share difference in points (scaled - full, absolute)."""
        out = {}
        for name in PAIR_SETS:
            a, b = self.scaled.pair_set(name), self.full.pair_set(name)
            gaps = [abs(x - y) for x, y in _share_pairs(a, b, self._roles())]
            if gaps:
                out[name] = max(gaps)
        return out

    def _roles(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.scaled.one_hop_roles + self.full.one_hop_roles))

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output and the report."""
        return {
            "scenario": self.scenario,
            "scaled": _structure_dict(self.scaled),
            "full": _structure_dict(self.full),
            "share_gaps_points": self.share_gaps(),
            "goal_points": SHARE_GOAL_POINTS,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StructureComparison:
        """The comparison `to_dict` wrote."""
        return cls(data["scenario"], _structure_from(data["scaled"]), _structure_from(data["full"]))


@dataclass(frozen=True)
class Row:
    """One line of the table: values as text, and whether a share misses the goal."""

    section: str
    label: str
    scaled: str
    full: str
    diff: str
    beyond_goal: bool = False


def _share_pairs(a: PairStats, b: PairStats, roles: Sequence[str]) -> Iterable[tuple[float, float]]:
    for x, y in [(a.share(h), b.share(h)) for h in HOPS] + [
        (a.share_via(r), b.share_via(r)) for r in roles
    ]:
        if x is not None and y is not None:
            yield x, y


def structure_rows(cmp: StructureComparison) -> tuple[Row, ...]:
    """The table's rows: per pair set its shares and paths, then the fabric-wide figures."""
    rows: list[Row] = []
    roles = cmp._roles()
    multi_role = len(roles) > 1
    for name, title in PAIR_SETS.items():
        a, b = cmp.scaled.pair_set(name), cmp.full.pair_set(name)
        rows.append(Row(title, "pairs", str(a.pairs), str(b.pairs), ""))
        if not a.pairs or not b.pairs:
            continue
        for hops in HOPS:
            rows.append(
                _share_row(
                    title,
                    f"{hops} switch hop{'s' if hops > 1 else ''}",
                    a.share(hops),
                    b.share(hops),
                )
            )
            if hops == 1 and multi_role:
                for role in roles:
                    rows.append(
                        _share_row(
                            title, f"  1 hop on one {role}", a.share_via(role), b.share_via(role)
                        )
                    )
        for attr, label in (
            ("disjoint_paths", "link-disjoint shortest paths (mean)"),
            ("ports", "NIC ports a transfer can use (mean)"),
        ):
            x, y = a.mean(attr), b.mean(attr)
            diff = "" if x is None or y is None else _signed(x - y)
            rows.append(Row(title, label, _num(x), _num(y), diff))
    fabric = "fabric"
    group = {"zcube": "servers per A segment", "roft": "servers per rail leaf"}
    rails = {"zcube": "B switches per rank", "roft": "leaves per rail"}
    s, f = cmp.scaled, cmp.full
    for label, x, y in (
        ("GPUs", s.gpus, f.gpus),
        ("GPUs per server", s.gpus_per_server, f.gpus_per_server),
        (group.get(s.kind, "servers per leaf"), s.servers_per_group, f.servers_per_group),
        (rails.get(s.kind, "leaves per rank"), s.leaves_per_rail, f.leaves_per_rail),
        ("bisection per GPU (Gb/s)", s.bisection_gbps_per_gpu, f.bisection_gbps_per_gpu),
        ("oversubscription (down:up)", s.oversubscription, f.oversubscription),
    ):
        rows.append(Row(fabric, label, _num(x), _num(y), _signed(x - y)))
    return tuple(rows)


def _share_row(section: str, label: str, x: float | None, y: float | None) -> Row:
    if x is None or y is None:
        return Row(section, label, _pct(x), _pct(y), "")
    gap = x - y
    return Row(
        section, label, _pct(x), _pct(y), f"{gap:+.1f} pt", abs(gap) > SHARE_GOAL_POINTS + 1e-9
    )


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}%"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:g}" if float(x).is_integer() else f"{x:.2f}"


def _signed(x: float) -> str:
    if abs(x) < 1e-9:
        return "0"
    return f"{x:+g}" if float(x).is_integer() else f"{x:+.2f}"


# -- the full size --------------------------------------------------------------------------
def full_size_spec(
    scaled: FabricSpec,
    gpus: int = FULL_GPUS,
    gpus_per_server: int = FULL_GPUS_PER_SERVER,
    switch_ports: int = FULL_SWITCH_PORTS,
) -> FabricSpec:
    """The full-size fabric a scaled spec stands for (module docstring)."""
    if gpus < 2 or gpus % gpus_per_server:
        raise ConfigError(
            "full_gpus", gpus, f"a multiple of full_gpus_per_server={gpus_per_server}, >= 2"
        )
    params = dict(scaled.params)
    nic = params.get("nic_gbps")
    servers = gpus // gpus_per_server
    if scaled.kind == "zcube":
        n = math.isqrt(gpus)
        if n * n != gpus or n % gpus_per_server:
            fits = [s * s for s in range(gpus_per_server, 129, gpus_per_server)]
            raise ConfigError(
                "full_gpus",
                gpus,
                f"for ZCube a square n*n with {gpus_per_server} | n: one of {fits[:8]}...",
            )
        return FabricSpec.of("zcube", n=n, m=1, gpus_per_server=gpus_per_server, nic_gbps=nic)
    planes = int(params.get("planes", 1))
    over = params.get("oversubscription", 1)
    down = switch_ports * planes // 2  # a plane's port breaks out P-fold; half faces hosts
    if scaled.kind == "roft":
        per_leaf = min(servers, down)
        if servers % per_leaf:
            raise ConfigError("full_gpus", gpus, f"whole leaves of {per_leaf} servers per rail")
        leaves = servers // per_leaf * gpus_per_server
        uplinks = per_leaf / over
    else:
        per_leaf = max(1, min(servers, down // gpus_per_server))
        if servers % per_leaf:
            raise ConfigError("full_gpus", gpus, f"whole leaves of {per_leaf} servers")
        leaves = servers // per_leaf
        uplinks = per_leaf * gpus_per_server / over
    if uplinks != int(uplinks):
        raise ConfigError("oversubscription", over, f"dividing {per_leaf} servers per leaf")
    uplinks = int(uplinks)
    need = math.ceil(leaves * uplinks / (switch_ports * planes))
    spines = min(d for d in range(1, uplinks + 1) if uplinks % d == 0 and d >= min(need, uplinks))
    return FabricSpec.of(
        scaled.kind,
        servers=servers,
        gpus_per_server=gpus_per_server,
        spines=spines,
        oversubscription=over if over != 1 else None,
        servers_per_leaf=per_leaf,
        nic_gbps=nic,
        planes=planes if planes > 1 else None,
    )


def full_size_layout(scaled_servers: int, full_servers: int, layout: LayoutSpec) -> LayoutSpec:
    """The scenario's placement at full size: counts scaled, EP width and pattern kept."""
    factor = full_servers / scaled_servers
    k = layout.ep_servers

    def scaled(count: int) -> int:
        return max(k, round(count * factor / k) * k)

    prefill = scaled(layout.prefill_servers)
    decode = None if layout.decode_servers is None else scaled(layout.decode_servers)
    if decode is None and (full_servers - prefill) % k:
        decode = (full_servers - prefill) // k * k
    return replace(layout, prefill_servers=prefill, decode_servers=decode)


def compare_structure(
    scaled: FabricSpec,
    layout: LayoutSpec | None = None,
    scenario: str = "",
    gpus: int = FULL_GPUS,
    gpus_per_server: int = FULL_GPUS_PER_SERVER,
    switch_ports: int = FULL_SWITCH_PORTS,
) -> StructureComparison:
    """The scaled fabric's structure beside the full size's, for one scenario's pairs."""
    small = build_fabric(scaled)
    big = build_fabric(full_size_spec(scaled, gpus, gpus_per_server, switch_ports))
    big_layout = None
    if layout is not None:
        servers = len({h.server for h in small.hosts})
        big_layout = full_size_layout(servers, len({h.server for h in big.hosts}), layout)
    return StructureComparison(
        scenario, fabric_structure(small, layout), fabric_structure(big, big_layout)
    )


# -- plain data -----------------------------------------------------------------------------
def _structure_dict(s: FabricStructure) -> dict[str, Any]:
    out = {k: getattr(s, k) for k in FabricStructure.__dataclass_fields__ if k != "pair_sets"}
    out["one_hop_roles"] = list(s.one_hop_roles)
    out["pair_sets"] = [
        {
            "name": p.name,
            "pairs": p.pairs,
            "classes": [
                {
                    "shared": list(c.shared),
                    "hops": c.hops,
                    "disjoint_paths": c.disjoint_paths,
                    "ports": c.ports,
                    "pairs": c.pairs,
                }
                for c in p.classes
            ],
        }
        for p in s.pair_sets
    ]
    return out


def _structure_from(d: dict[str, Any]) -> FabricStructure:
    sets = tuple(
        PairStats(
            p["name"],
            p["pairs"],
            tuple(
                PairClass(
                    tuple(c["shared"]), c["hops"], c["disjoint_paths"], c["ports"], c["pairs"]
                )
                for c in p["classes"]
            ),
        )
        for p in d["pair_sets"]
    )
    fields = {k: v for k, v in d.items() if k not in ("pair_sets", "one_hop_roles")}
    return FabricStructure(**fields, one_hop_roles=tuple(d["one_hop_roles"]), pair_sets=sets)
