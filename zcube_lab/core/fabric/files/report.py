"""What `zcube-lab fabric --file F` and `zcube-lab cost --file F` print (the CLI's hooks call
`add_file_argument`, `run_fabric_file` and `run_cost_file`; nothing else of the CLI changes).

Figures of a file fabric, computed on its description alone (any graph):
- hop classes: GPU pairs (unordered, distinct) by the switch hops of their shortest path; the
  same for PD pulls (prefill -> decode) when the file places roles;
- link-disjoint paths per pair (any length): a unit-capacity max flow between the two GPUs,
  NIC ports included, so a single-port GPU has at most 1;
- bisection: the max flow between the first and the second half of the servers, per GPU of a
  half (Gb/s);
- switching capacity: the sum of the rates of every used switch port.
Pairs are grouped by the switches their ports attach to; each group is measured once.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.files import FORMATS, load_fabric
from zcube_lab.core.fabric.files.cost import fabric_cost
from zcube_lab.core.fabric.files.native import LoadedFabric

if TYPE_CHECKING:
    import networkx as nx

UNREACHABLE = "none"
# Link-disjoint paths are a max flow per pair class; past this many classes they are sampled.
MAX_FLOW_CLASSES = 300


def add_file_argument(parser: argparse.ArgumentParser) -> None:
    """--file F and --format for `fabric` and `cost`."""
    parser.add_argument(
        "--file",
        metavar="F",
        help="a fabric from a file instead of a built-in (docs/FABRIC_FILES.md): "
        + ", ".join(FORMATS),
    )
    parser.add_argument(
        "--format", choices=sorted(FORMATS), help="the file's format (default: from its name)"
    )
    parser.add_argument(
        "--full-file",
        metavar="F",
        help="with --file: set the file's structure (shares of GPU pairs and PD pulls by hops "
        "and by link-disjoint paths, bisection) beside this full-size fabric file's",
    )


def load_from_args(args: argparse.Namespace) -> LoadedFabric:
    """Load `--file` in `--format`, printing what an importer assumed."""
    loaded = load_fabric(args.file, getattr(args, "format", None))
    for line in loaded.assumptions:
        print(f"assumed: {line}")
    return loaded


def _signature(fabric: Fabric, host: str) -> tuple[str, ...]:
    h = fabric.host(host)
    return tuple(fabric.attachments[(host, i.index)].switch for i in h.interfaces)


def _hops(fabric: Fabric, a: tuple[str, ...], b: tuple[str, ...]) -> int | None:
    dists = [
        fabric.switch_distances[x][y] + 1 for x in a for y in b if y in fabric.switch_distances[x]
    ]
    return min(dists) if dists else None


def _graph(fabric: Fabric, capacity: str = "links") -> nx.DiGraph:
    """The fabric as a flow network: switch links both ways; a GPU as two nodes, `("out", h)`
    that only sends and `("in", h)` that only receives, so no path crosses a GPU. Capacity per
    arc: the number of parallel links (`links`) or their Gb/s (`gbps`)."""
    import networkx as nx

    g = nx.DiGraph()

    def add(u: Any, v: Any, cap: float) -> None:
        g.add_edge(u, v, capacity=g[u][v]["capacity"] + cap if g.has_edge(u, v) else cap)

    for lk in fabric.links:
        cap = 1 if capacity == "links" else lk.gbps
        a, b = lk.node1, lk.node2
        if fabric.is_switch(a) and fabric.is_switch(b):
            add(a, b, cap)
            add(b, a, cap)
            continue
        host, switch = (a, b) if fabric.is_switch(b) else (b, a)
        add(("out", host), switch, cap)
        add(switch, ("in", host), cap)
    return g


def pair_figures(
    fabric: Fabric, pairs: Iterable[tuple[str, str]]
) -> tuple[Counter[str], Counter[int], str | None]:
    """(pairs by hops, pairs by link-disjoint paths, a note when those were sampled) over
    `pairs` of host names. Pairs whose ports attach to the same switches form a class, measured
    once; past `MAX_FLOW_CLASSES` classes the disjoint paths are counted on an even sample."""
    import networkx as nx
    from networkx.algorithms.flow import edmonds_karp

    g = _graph(fabric)
    hops: Counter[str] = Counter()
    by_class: dict[tuple[tuple[str, ...], tuple[str, ...]], list[tuple[str, str]]] = {}
    for a, b in pairs:
        sa, sb = _signature(fabric, a), _signature(fabric, b)
        by_class.setdefault((sa, sb) if sa <= sb else (sb, sa), []).append((a, b))
    keys = list(by_class)
    step = max(1, -(-len(keys) // MAX_FLOW_CLASSES))
    disjoint: Counter[int] = Counter()
    for i, key in enumerate(keys):
        members = by_class[key]
        h = _hops(fabric, *key)
        hops[UNREACHABLE if h is None else str(h)] += len(members)
        if i % step:
            continue
        a, b = members[0]
        cutoff = min(len(fabric.host(a).interfaces), len(fabric.host(b).interfaces))
        flow = 0
        if h is not None:
            flow = int(
                nx.maximum_flow_value(
                    g, ("out", a), ("in", b), flow_func=edmonds_karp, cutoff=cutoff
                )
            )
        disjoint[flow] += len(members)
    note = None
    if step > 1:
        note = f"link-disjoint paths counted on 1 in {step} of {len(keys)} pair classes"
    return hops, disjoint, note


def bisection_per_gpu(fabric: Fabric) -> float | None:
    """Max flow (Gb/s) from the first half of the servers to the second, per GPU of a half."""
    import networkx as nx

    servers = sorted({h.server for h in fabric.hosts})
    if len(servers) < 2:
        return None
    first = set(servers[: len(servers) // 2])
    g = _graph(fabric, "gbps")
    side = [h for h in fabric.hosts if h.server in first]
    for h in fabric.hosts:
        if h.server in first:
            g.add_edge("_src", ("out", h.name), capacity=float("inf"))
        else:
            g.add_edge(("in", h.name), "_dst", capacity=float("inf"))
    return nx.maximum_flow_value(g, "_src", "_dst") / len(side)


def role_hosts(loaded: LoadedFabric) -> tuple[list[str], list[str]]:
    """The prefill and decode GPUs the file's roles place: its host lists, else the first
    `prefill_servers` servers prefill and the next `decode_servers` (default: the rest) decode."""
    roles = loaded.roles
    if roles is None:
        return [], []
    if roles.prefill or roles.decode:
        return list(roles.prefill), list(roles.decode)
    if roles.prefill_servers is None:
        return [], []
    servers = sorted({h.server for h in loaded.fabric.hosts})
    pre = set(servers[: roles.prefill_servers])
    rest = servers[roles.prefill_servers :]
    dec = set(rest if roles.decode_servers is None else rest[: roles.decode_servers])
    hosts = loaded.fabric.hosts
    return [h.name for h in hosts if h.server in pre], [h.name for h in hosts if h.server in dec]


def file_summary(loaded: LoadedFabric) -> dict[str, Any]:
    """Plain data of `fabric --file`."""
    f = loaded.fabric
    names = [h.name for h in f.hosts]
    all_pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    hops, disjoint, sampled = pair_figures(f, all_pairs)
    roles: dict[str, int] = {}
    for s in f.switches:
        roles[s.role] = roles.get(s.role, 0) + 1
    out: dict[str, Any] = {
        "fabric": loaded.name,
        "source": loaded.source,
        "assumptions": list(loaded.assumptions),
        "hosts": len(f.hosts),
        "servers": len({h.server for h in f.hosts}),
        "host_interfaces": sum(len(h.interfaces) for h in f.hosts),
        "switches": len(f.switches),
        "switches_by_role": roles,
        "links": len(f.links),
        "ports_used_max": max(f.ports_used().values(), default=0),
        "switching_capacity_gbps": f.switching_capacity_gbps(),
        "diameter_hops": fabric_cost(f).diameter_hops,
        "pairs_by_hops": dict(sorted(hops.items())),
        "pairs_by_disjoint_paths": {str(k): v for k, v in sorted(disjoint.items())},
        "disjoint_paths_sampled": sampled,
        "bisection_gbps_per_gpu": bisection_per_gpu(f),
        "nvlink_forwarding": loaded.nvlink_forwarding,
    }
    prefill, decode = role_hosts(loaded)
    if prefill and decode:
        pd = [(a, b) for a in prefill for b in decode]
        pd_hops, pd_disjoint, _ = pair_figures(f, pd)
        out["pd_pulls_by_hops"] = dict(sorted(pd_hops.items()))
        out["pd_pulls_by_disjoint_paths"] = {str(k): v for k, v in sorted(pd_disjoint.items())}
    return out


def _shares(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {k: 100 * v / total for k, v in counts.items()} if total else {}


def structure_rows(small: dict[str, Any], full: dict[str, Any]) -> list[dict[str, Any]]:
    """The structure of a scaled file fabric beside a full-size one: each share of pairs (%)
    by hops and by link-disjoint paths, for all pairs and PD pulls, and the bisection per GPU,
    with the difference in points (`beyond_goal` past `SHARE_GOAL_POINTS`)."""
    from zcube_lab.core.fabric.structure import SHARE_GOAL_POINTS

    rows: list[dict[str, Any]] = []
    for key, label in (
        ("pairs_by_hops", "GPU pairs at {} hops"),
        ("pairs_by_disjoint_paths", "GPU pairs with {} link-disjoint paths"),
        ("pd_pulls_by_hops", "PD pulls at {} hops"),
        ("pd_pulls_by_disjoint_paths", "PD pulls with {} link-disjoint paths"),
    ):
        a, b = _shares(small.get(key, {})), _shares(full.get(key, {}))
        for cls in sorted(set(a) | set(b), key=lambda c: (c == UNREACHABLE, c)):
            sa, sb = a.get(cls, 0.0), b.get(cls, 0.0)
            rows.append(
                {
                    "metric": label.format(cls),
                    "scaled": round(sa, 1),
                    "full": round(sb, 1),
                    "diff_points": round(sa - sb, 1),
                    "beyond_goal": abs(sa - sb) > SHARE_GOAL_POINTS,
                }
            )
    sa, sb = small["bisection_gbps_per_gpu"], full["bisection_gbps_per_gpu"]
    rows.append(
        {
            "metric": "bisection Gb/s per GPU",
            "scaled": sa,
            "full": sb,
            "diff_points": None,
            "beyond_goal": False,
        }
    )
    return rows


def own_structure_text(loaded: LoadedFabric) -> str:
    """A file fabric's own structure, for a run's structure.txt and report: the shares of GPU
    pairs (and PD pulls, when the file places roles) by switch hops and by link-disjoint paths,
    and the bisection per GPU. A file is emulated as written, so there is no full size beside
    it; the last line says how to set one (`fabric --file F --full-file G`)."""
    s = file_summary(loaded)
    lines = [f"Structure of {loaded.name} ({s['hosts']} GPUs, from its file): shares in %"]
    for key, label in (
        ("pairs_by_hops", "GPU pairs at {} hops"),
        ("pairs_by_disjoint_paths", "GPU pairs with {} link-disjoint paths"),
        ("pd_pulls_by_hops", "PD pulls at {} hops"),
        ("pd_pulls_by_disjoint_paths", "PD pulls with {} link-disjoint paths"),
    ):
        shares = _shares(s.get(key, {}))
        for cls in sorted(shares, key=lambda c: (c == UNREACHABLE, c)):
            text = (
                label.format(cls)
                .replace("1 hops", "1 hop")
                .replace("1 link-disjoint paths", "1 link-disjoint path")
            )
            lines.append(f"  {text}  {shares[cls]:.1f}")
    bisection = s["bisection_gbps_per_gpu"]
    if bisection is not None:
        lines.append(f"  bisection per GPU  {bisection:g} Gb/s")
    if s.get("disjoint_paths_sampled"):
        lines.append(f"  {s['disjoint_paths_sampled']}")
    lines.append(
        "no full size beside it (a file is emulated as written): "
        "zcube-lab fabric --file F --full-file G sets it beside a full-size file"
    )
    return "\n".join(lines)


def run_fabric_file(args: argparse.Namespace) -> int:
    """`zcube-lab fabric --file F [--full-file G] [--paths A B] [--links] [--json]`."""
    loaded = load_from_args(args)
    if getattr(args, "full_file", None):
        return _run_structure(args, loaded)
    f = loaded.fabric
    summary = file_summary(loaded)
    paths = []
    if getattr(args, "paths", None):
        for name in args.paths:
            if name not in {h.name for h in f.hosts}:
                raise ConfigError("paths", name, f"a host name from h0 to h{len(f.hosts) - 1}")
        paths = f.shortest_paths(*args.paths)
    if getattr(args, "json", False):
        out: dict[str, Any] = {"summary": summary, "ports_used": f.ports_used()}
        if paths:
            out["paths"] = [
                {
                    "src_interface": p.src_interface,
                    "dst_interface": p.dst_interface,
                    "switches": list(p.switches),
                }
                for p in paths
            ]
        print(json.dumps(out, indent=2))
        return 0
    width = max(len(k) for k in summary)
    for key, value in summary.items():
        if key in ("assumptions", "source") or value is None:
            continue
        if key == "switching_capacity_gbps":
            value = f"{value / 1000:g} Tb/s (full scale)"
        elif key == "bisection_gbps_per_gpu" and value is not None:
            value = f"{value:g} Gb/s"
        print(f"{key.replace('_', ' '):<{width}}  {value}")
    if getattr(args, "paths", None):
        src, dst = args.paths
        for p in paths:
            print(
                f"{src}-eth{p.src_interface} > {' > '.join(p.switches)} > {dst}-eth"
                f"{p.dst_interface}  ({p.hops} switch hop{'s' if p.hops != 1 else ''})"
            )
        if not paths:
            print(f"{src} and {dst}: no path in the fabric")
    if getattr(args, "links", False):
        for lk in f.links:
            lat = loaded.latency_us.get(lk)
            extra = f"  {lat:g} us" if lat is not None else ""
            print(f"{lk.node1}:{lk.port1} <-> {lk.node2}:{lk.port2}  {lk.gbps:g}G{extra}")
    return 0


def _run_structure(args: argparse.Namespace, loaded: LoadedFabric) -> int:
    full = load_fabric(args.full_file)
    for line in full.assumptions:
        print(f"assumed (full size): {line}")
    small_summary, full_summary = file_summary(loaded), file_summary(full)
    rows = structure_rows(small_summary, full_summary)
    if getattr(args, "json", False):
        print(json.dumps({"scaled": small_summary, "full": full_summary, "rows": rows}, indent=2))
        return 0
    print(
        f"structure: {loaded.name} ({small_summary['hosts']} GPUs) against {full.name} "
        f"({full_summary['hosts']} GPUs); shares in %, difference in points"
    )
    width = max(len(r["metric"]) for r in rows)
    for r in rows:
        diff = "" if r["diff_points"] is None else f"{r['diff_points']:+.1f}"
        flag = "  beyond the goal" if r["beyond_goal"] else ""
        print(f"  {r['metric']:<{width}}  {r['scaled']!s:>7}  {r['full']!s:>7}  {diff:>6}{flag}")
    for name, summary in (("scaled", small_summary), ("full", full_summary)):
        if summary.get("disjoint_paths_sampled"):
            print(f"{name}: {summary['disjoint_paths_sampled']}")
    return 0


def cost_rows(loaded: LoadedFabric, args: argparse.Namespace) -> dict[str, Any]:
    """The file fabric priced from its description, beside the built-ins' count models at the
    same GPU count, NIC rate, ASIC and prices."""
    from zcube_lab.core.fabric.cost import COMPARED_METRICS, compare
    from zcube_lab.core.fabric.pricing import CostInputs

    f = loaded.fabric
    mine = fabric_cost(loaded, args.switch_price, args.optic_price)
    builtins: dict[str, Any] = {}
    error = None
    try:
        inputs = CostInputs(
            gpus=len(f.hosts),
            nic_gbps=round(f.nic_gbps),
            switch_ports=args.switch_ports,
            port_gbps=args.port_gbps,
            switch_price=mine.switch_price,
            optic_price=mine.optic_price,
        )
        cmp = compare(inputs)
        builtins = {c.fabric: c for c in cmp.fabrics}
    except ConfigError as exc:
        error = str(exc)
    fabrics = {"file": mine, **builtins}
    out: dict[str, Any] = {
        "gpus": len(f.hosts),
        "fabrics": {k: v.to_dict() for k, v in fabrics.items()},
        "builtins_error": error,
        "metrics": [key for key, _ in COMPARED_METRICS],
    }
    out["diff_vs_file_pct"] = {
        k: {key: _pct(getattr(v, key), getattr(mine, key)) for key, _ in COMPARED_METRICS}
        for k, v in builtins.items()
    }
    out["_labels"] = dict(COMPARED_METRICS)
    out["_objects"] = fabrics
    return out


def _pct(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return (value - base) / base * 100


def run_cost_file(args: argparse.Namespace) -> int:
    """`zcube-lab cost --file F`: the file fabric beside ROFT, Clos and ZCube at its GPUs."""
    loaded = load_from_args(args)
    rows = cost_rows(loaded, args)
    objects = rows.pop("_objects")
    labels = rows.pop("_labels")
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    names = list(objects)
    print(
        f"{loaded.name}: {rows['gpus']} GPUs priced from the file, beside the built-ins "
        f"({args.switch_ports}x{args.port_gbps}G ASIC); % vs the file"
    )
    head = ["metric", *[("file" if n == "file" else n) for n in names]]
    table = [head]
    table.append(["switches by role", *[_roles(objects[n]) for n in names]])
    for key in rows["metrics"]:
        line = [labels[key]]
        for n in names:
            value = getattr(objects[n], key)
            cell = _num(value)
            if n != "file":
                pct = rows["diff_vs_file_pct"][n][key]
                if pct is not None:
                    cell += f" ({pct:+.0f}%)"
            line.append(cell)
        table.append(line)
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    if rows["builtins_error"]:
        print(f"built-ins not priced: {rows['builtins_error']}")
    for n in names:
        for note in objects[n].notes:
            print(f"{n}: {note}")
    return 0


def _roles(cost: Any) -> str:
    return " ".join(f"{g.role}:{g.count}" for g in cost.switch_groups)


def _num(value: float | int | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


__all__ = [
    "add_file_argument",
    "bisection_per_gpu",
    "cost_rows",
    "file_summary",
    "pair_figures",
    "run_cost_file",
    "run_fabric_file",
]
