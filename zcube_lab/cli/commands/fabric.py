"""Describe a fabric without building it: hosts, switches, links, ports, switching capacity,
diameter, the shortest paths between two hosts (with --evs, the path each MRC entropy value
takes), and (with --machines) how the fabric splits
across several lab machines and which links become tunnels. With --vs-full-size: the structure
table, where the scenario's pairs meet on this fabric and on the full-size one it stands for
(docs/DOMAIN.md, Scale-downs that keep structure). Needs no root."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from zcube_lab.cli.fabric_options import (
    add_fabric_arguments,
    add_link_arguments,
    add_run_flags,
    link_options_from_args,
    spec_from_args,
)
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.evpaths import MAX_EVS, ev_path, ev_ports
from zcube_lab.core.fabric.files.report import add_file_argument, run_fabric_file
from zcube_lab.core.fabric.fullsize import (
    FULL_GPUS,
    FULL_GPUS_PER_SERVER,
    FULL_SWITCH_PORTS,
    StructureComparison,
    compare_structure,
    structure_rows,
)
from zcube_lab.core.fabric.queues import queue_summary
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.core.fabric.split import RULE, Split, split_fabric
from zcube_lab.emulator.results.structure.structuretable import structure_title, structure_verdict


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fabric and size options, --paths, --links, --json."""
    add_fabric_arguments(parser)
    add_file_argument(parser)
    parser.add_argument(
        "--paths", nargs=2, metavar=("SRC", "DST"), help="show shortest paths, e.g. h0 h5"
    )
    parser.add_argument(
        "--evs",
        type=int,
        default=0,
        metavar="N",
        help="with --paths: also the path each of the first N MRC entropy values (UDP source "
        "ports) takes from SRC to every DST address under the controller's EV rules",
    )
    parser.add_argument("--links", action="store_true", help="list every link")
    parser.add_argument(
        "--machines",
        type=int,
        help="split the fabric over this many lab machines (emulation hosts, not the fabric's "
        "GPU servers) and show each machine's share and the links that become tunnels",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_structure_arguments(parser)
    links = parser.add_argument_group("queues (what a lab of this fabric would set)")
    add_run_flags(links, ("nic_mbps",))
    add_link_arguments(links)


def add_structure_arguments(parser: argparse.ArgumentParser) -> None:
    """--vs-full-size, the full size it is set against, and the scenario whose pairs count."""
    g = parser.add_argument_group("structure table (--vs-full-size)")
    g.add_argument(
        "--vs-full-size",
        action="store_true",
        help="print the structure table instead: shares of pairs at 1, 2 and 3 switch hops, "
        "link-disjoint paths, NIC ports, servers per A segment or rail leaf, bisection and "
        "oversubscription, for all pairs and the scenario's PD and EP pairs, on this fabric "
        "and on the full-size one it stands for, with the difference in points",
    )
    g.add_argument("--full-gpus", type=int, default=FULL_GPUS, help="GPUs of the full-size fabric")
    g.add_argument(
        "--full-gpus-per-server",
        type=int,
        default=FULL_GPUS_PER_SERVER,
        help="GPUs per server of the full-size fabric",
    )
    g.add_argument(
        "--full-switch-ports",
        type=int,
        default=FULL_SWITCH_PORTS,
        help="ports of a full-size ROFT/Clos leaf at the NIC rate (half down, half up)",
    )
    g.add_argument(
        "--workload",
        action="append",
        metavar="W",
        help="workload profile whose placement hints (layout, prefill servers, expert "
        "parallelism) set the pairs; "
        "repeatable, one table each (default coding-agent)",
    )
    add_run_flags(g, ("layout",))  # the run's placement flags (RunConfig's, declared there)


def structure_comparisons(args: argparse.Namespace) -> list[StructureComparison]:
    """One structure comparison per workload the options name."""
    from zcube_lab.core.options import nested_from_args
    from zcube_lab.emulator.experiment.runconfig import RunConfig, profile_fallback

    spec = spec_from_args(args)
    out = []
    for workload in args.workload or ["coding-agent"]:
        # the flags left out take the profile's values (its prefill count kept as a share of
        # this fabric's servers, its expert parallelism), as a run's do
        layout = nested_from_args(RunConfig, "layout", args, profile_fallback(workload, spec))
        out.append(
            compare_structure(
                spec,
                layout,
                workload,
                args.full_gpus,
                args.full_gpus_per_server,
                args.full_switch_ports,
            )
        )
    return out


def _run_structure(args: argparse.Namespace) -> int:
    comparisons = structure_comparisons(args)
    if args.json:
        print(json.dumps([c.to_dict() for c in comparisons], indent=2))
        return 0
    console = Console()
    for cmp in comparisons:
        table = Table(title=structure_title(cmp))
        for column in ("", "scaled", "full size", "difference"):
            table.add_column(column, justify="left" if not column else "right")
        section = None
        for row in structure_rows(cmp):
            if row.section != section:
                section = row.section
                table.add_row(f"[bold]{section}[/bold]", "", "", "")
            diff = f"[red]{row.diff}[/red]" if row.beyond_goal else row.diff
            table.add_row(f"  {row.label}", row.scaled, row.full, diff)
        console.print(table)
        console.print(structure_verdict(cmp))
        layout = cmp.full.layout
        if layout:
            console.print(
                f"full-size placement: {layout['prefill_servers']} prefill servers, "
                f"{layout['decode_servers'] or 'the rest'} decode, EP {layout['ep_servers']} "
                f"server(s), {layout['layout']} layout, alltoall {layout['alltoall']}"
            )
    return 0


def run(args: argparse.Namespace) -> int:
    """Print the fabric's summary (and paths or links when asked)."""
    if args.file:
        return run_fabric_file(args)
    if args.vs_full_size:
        return _run_structure(args)
    fabric = build_fabric(spec_from_args(args))
    summary = dict(fabric.summary())
    paths = []
    if args.paths:
        for name in args.paths:
            if name not in {h.name for h in fabric.hosts}:
                raise ConfigError("paths", name, f"a host name from h0 to h{len(fabric.hosts) - 1}")
        paths = fabric.shortest_paths(*args.paths)
    evs = _ev_rows(fabric, args) if args.evs else []
    split = None if args.machines is None else split_fabric(fabric, args.machines)
    scale = Scale(nic_mbps=args.nic_mbps)
    mtu, queue = link_options_from_args(args, fabric, scale)
    queues = queue_summary(fabric, scale, mtu, queue)
    if args.json:
        out = {
            "summary": summary,
            "ports_used": fabric.ports_used(),
            "queue_model": queue.describe(),
            "queues": queues,
        }
        if args.paths:
            out["paths"] = [
                {
                    "src_interface": p.src_interface,
                    "dst_interface": p.dst_interface,
                    "switches": list(p.switches),
                }
                for p in paths
            ]
        if evs:
            out["ev_paths"] = [{"dst_ip": d, "ev": ev, "hops": list(h)} for d, ev, h in evs]
        if split is not None:
            out["split"] = split.to_dict()
        print(json.dumps(out, indent=2))
        return 0
    console = Console()
    table = Table(title=f"{fabric.kind} fabric", show_header=False)
    for key in (
        "params",
        "hosts",
        "host_interfaces",
        "switches",
        "switches_by_role",
        "links",
        "switch_links",
        "ports_used_max",
        "diameter_hops",
    ):
        table.add_row(key.replace("_", " "), str(summary[key]))
    table.add_row(
        "switching capacity", f"{summary['switching_capacity_gbps'] / 1000:g} Tb/s (full scale)"
    )
    console.print(table)
    _print_queues(console, queue.describe(), queues, args.nic_mbps, mtu)
    if args.paths:
        src, dst = args.paths
        for p in paths:
            hops = " > ".join(p.switches)
            plural = "s" if p.hops != 1 else ""
            console.print(
                f"{src}-eth{p.src_interface} > {hops} > {dst}-eth{p.dst_interface}"
                f"  ({p.hops} switch hop{plural})"
            )
    for dst_ip, ev, hops in evs:
        console.print(f"EV {ev} to {dst_ip}: {' > '.join(hops) or 'unreachable'}")
    if args.links:
        for lk in fabric.links:
            console.print(f"{lk.node1}:{lk.port1} <-> {lk.node2}:{lk.port2}  {lk.gbps:g}G")
    if split is not None:
        _print_split(console, split)
    return 0


def _ev_rows(fabric: Fabric, args: argparse.Namespace) -> list[tuple[str, int, tuple[str, ...]]]:
    """(DST address, EV, hops `switch:out port`) for the first `--evs` EVs, every DST address."""
    if not args.paths:
        raise ConfigError("evs", args.evs, "used with --paths SRC DST")
    if not 1 <= args.evs <= MAX_EVS:
        raise ConfigError("evs", args.evs, f"1..{MAX_EVS}")
    src, dst = args.paths
    return [
        (iface.ip, ev, ev_path(fabric, src, iface.ip, ev))
        for iface in fabric.host(dst).interfaces
        for ev in ev_ports(args.evs)
    ]


def _print_queues(
    console: Console, model: str, queues: list[dict], nic_mbps: float, mtu: int
) -> None:
    """The switch ports' queue limits per emulated link rate (zcube_lab.core.fabric.queues)."""
    table = Table(title=f"switch port queues at NIC {nic_mbps:g} Mb/s, MTU {mtu}")
    for column in ("links", "Mb/s", "packets", "full queue ms", "ms/hop"):
        table.add_column(column)
    for q in queues:
        table.add_row(
            str(q["links"]),
            f"{q['mbps']:g}",
            str(q["queue_packets"]),
            f"{q['max_queue_ms']:g}",
            f"{q['serialization_ms']:g}",
        )
    console.print(table)
    console.print(f"queue model: {model}")


def _print_split(console: Console, split: Split) -> None:
    """Each machine's share, then the cut links per machine pair with their emulated Mb/s."""
    table = Table(title=f"split over {split.machines} lab machines")
    for column in ("machine", "GPU hosts", "switches", "links inside"):
        table.add_column(column)
    for m in split.per_machine:
        hosts = f"{len(m.hosts)}: {_span(m.hosts)}"
        table.add_row(str(m.machine), hosts, " ".join(m.switches), str(m.links_inside))
    console.print(table)
    console.print(f"rule: {RULE}")
    cut = Table(
        title=f"cut: {len(split.cut)} of {len(split.fabric.links)} links become tunnels, "
        f"{split.cut_mbps:g} Mb/s emulated ({split.cut_gbps:g} Gb/s full scale, "
        f"NIC at {split.scale.nic_mbps:g} Mb/s)"
    )
    for column in ("machines", "links", "Mb/s", "cut links (emulated Mb/s each)"):
        cut.add_column(column)
    for (i, j), links in split.pairs().items():
        by_rate: dict[float, list[str]] = {}
        for c in links:
            by_rate.setdefault(c.mbps, []).append(c.label)
        listed = "; ".join(f"{' '.join(labels)} ({mbps:g})" for mbps, labels in by_rate.items())
        cut.add_row(f"{i}-{j}", str(len(links)), f"{sum(c.mbps for c in links):g}", listed)
    console.print(cut)


def _span(hosts: tuple[str, ...]) -> str:
    """`h0..h7` when the hosts are consecutive, else their names."""
    gids = [int(h[1:]) for h in hosts]
    if gids and gids == list(range(gids[0], gids[0] + len(gids))):
        return f"h{gids[0]}..h{gids[-1]}" if len(gids) > 1 else hosts[0]
    return " ".join(hosts)
