"""Describe a fabric without building it: hosts, switches, links, ports, switching capacity,
diameter, and the shortest paths between two hosts. Needs no root."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from zcube_lab.errors import ConfigError
from zcube_lab.fabric.builders import build_fabric
from zcube_lab.fabric_options import add_fabric_arguments, spec_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fabric and size options, --paths, --links, --json."""
    add_fabric_arguments(parser)
    parser.add_argument(
        "--paths", nargs=2, metavar=("SRC", "DST"), help="show shortest paths, e.g. h0 h5"
    )
    parser.add_argument("--links", action="store_true", help="list every link")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    """Print the fabric's summary (and paths or links when asked)."""
    fabric = build_fabric(spec_from_args(args))
    summary = dict(fabric.summary())
    paths = []
    if args.paths:
        for name in args.paths:
            if name not in {h.name for h in fabric.hosts}:
                raise ConfigError("paths", name, f"a host name from h0 to h{len(fabric.hosts) - 1}")
        paths = fabric.shortest_paths(*args.paths)
    if args.json:
        out = {"summary": summary, "ports_used": fabric.ports_used()}
        if args.paths:
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
    if args.paths:
        src, dst = args.paths
        for p in paths:
            hops = " > ".join(p.switches)
            plural = "s" if p.hops != 1 else ""
            console.print(
                f"{src}-eth{p.src_interface} > {hops} > {dst}-eth{p.dst_interface}"
                f"  ({p.hops} switch hop{plural})"
            )
    if args.links:
        for lk in fabric.links:
            console.print(f"{lk.node1}:{lk.port1} <-> {lk.node2}:{lk.port2}  {lk.gbps:g}G")
    return 0
