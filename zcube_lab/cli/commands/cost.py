"""Price full-size ROFT, Clos and ZCube side by side, with the differences vs ROFT in %.

All three use the same switch ASIC (--switch-ports x --port-gbps). ROFT and Clos run it at
--port-gbps, with 2 tiers or 3 where 2 cannot reach --gpus; ZCube breaks it out at half the NIC
rate (64x400G as 128x200G) since each NIC has two ports. --optic-price is per transceiver end at
400G; ends of other rates cost in proportion. Every link has two ends, NIC ends included.

--planes P > 1 prices multi-plane ROFT instead (MRC: each NIC as P ports of NIC/P, one into each
of P leaf-spine planes; the ASIC broken out at that rate) against ROFT in one plane.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from zcube_lab.core.fabric.cost import (
    COMPARED_METRICS,
    CostComparison,
    PlaneComparison,
    compare,
    compare_planes,
)
from zcube_lab.core.fabric.files.report import add_file_argument, run_cost_file
from zcube_lab.core.fabric.pricing import (
    CostInputs,
    FabricCost,
    roft_two_tier_max_gpus,
    zcube_max_gpus,
    zcube_port_gbps,
    zcube_ports_per_switch,
)

if TYPE_CHECKING:
    from rich.console import Console

TITLES = {"roft": "ROFT", "clos": "Clos", "zcube": "ZCube"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Cluster size, NIC rate, switch ASIC, optional prices, output format."""
    parser.add_argument("--gpus", type=int, default=1024, help="GPUs, one NIC each")
    parser.add_argument("--nic-gbps", type=int, default=400, help="NIC bandwidth per GPU, Gb/s")
    parser.add_argument(
        "--switch-ports", type=int, default=64, help="ports of the switch ASIC as ROFT uses it"
    )
    parser.add_argument("--port-gbps", type=int, default=400, help="rate of those ports, Gb/s")
    parser.add_argument(
        "--switch-price", type=float, default=None, help="price of one switch (any currency)"
    )
    parser.add_argument(
        "--optic-price",
        type=float,
        default=None,
        help="price of one 400G transceiver end; other rates in proportion",
    )
    parser.add_argument(
        "--planes",
        type=int,
        default=1,
        help="price ROFT in this many planes (each NIC as PLANES ports of NIC/PLANES, as MRC) "
        "against ROFT in one plane, instead of ROFT, Clos and ZCube",
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    add_file_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Print the comparison as a table, or as JSON with --json."""
    if args.file:
        return run_cost_file(args)
    inputs = CostInputs(
        gpus=args.gpus,
        nic_gbps=args.nic_gbps,
        switch_ports=args.switch_ports,
        port_gbps=args.port_gbps,
        switch_price=args.switch_price,
        optic_price=args.optic_price,
        planes=args.planes,
    )
    if inputs.planes > 1:
        planes = compare_planes(inputs)
        if args.json:
            print(json.dumps(planes.to_dict(), indent=2))
        else:
            print_planes_table(planes)
        return 0
    comparison = compare(inputs)
    if args.json:
        print(json.dumps(comparison.to_dict(), indent=2))
    else:
        print_table(comparison)
    return 0


def _number(value: float | int | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.1f}"


def _pct(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:+.1f}%"


def _switch_roles(fabric: FabricCost) -> str:
    # One role per line keeps a 3-tier column as narrow as the numbers under it.
    return "\n".join(f"{g.count:,} {g.role}" for g in fabric.switch_groups)


def _head_rows(fabrics: Sequence[FabricCost | None], blanks: int) -> list[list[str]]:
    """The shape rows (ports, tiers, diameter, roles); a missing fabric shows '-'."""
    shapes: list[tuple[str, Callable[[FabricCost], str]]] = [
        ("switch ports", lambda f: f"{f.ports_per_switch}x{f.switch_port_gbps}G"),
        ("switch tiers", lambda f: str(f.tiers)),
        ("diameter (switch hops)", lambda f: str(f.diameter_hops)),
        ("switches by role", _switch_roles),
    ]
    return [
        [label, *("-" if f is None else show(f) for f in fabrics), *([""] * blanks)]
        for label, show in shapes
    ]


def _metric_rows(
    fabrics: Sequence[FabricCost | None], diffs: Callable[[str], list[float | None]]
) -> list[list[str]]:
    """One row per compared metric: the values, then the differences `diffs(metric)`."""
    table = []
    for key, label in COMPARED_METRICS:
        values = [None if f is None else getattr(f, key) for f in fabrics]
        if all(v is None for v in values):
            continue  # no price given: no CapEx rows
        table.append([label, *(_number(v) for v in values), *(_pct(d) for d in diffs(key))])
    return table


def rows(comparison: CostComparison) -> list[list[str]]:
    """Table rows: label, ROFT, Clos, ZCube, Clos vs ROFT, ZCube vs ROFT."""
    fabrics = comparison.fabrics
    others = (comparison.clos, comparison.zcube)
    return _head_rows(fabrics, 2) + _metric_rows(
        fabrics, lambda key: [comparison.diff_pct(f, key) for f in others]
    )


def plane_rows(comparison: PlaneComparison) -> list[list[str]]:
    """Table rows: label, ROFT in one plane, ROFT in P planes, P planes vs one."""
    fabrics = comparison.fabrics
    return _head_rows(fabrics, 1) + _metric_rows(fabrics, lambda key: [comparison.diff_pct(key)])


def _console() -> Console:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        # Piped or captured output gets rich's 80-column default, which would truncate cells.
        console = Console(width=120)
    return console


def print_planes_table(comparison: PlaneComparison) -> None:
    """Render ROFT in one plane and in P planes side by side, with limits and notes."""
    from rich.table import Table

    i = comparison.inputs
    p = i.planes
    table = Table(
        title=(
            f"{i.gpus:,} GPUs x {i.nic_gbps}G NIC on {i.switch_ports}x{i.port_gbps}G switches: "
            f"ROFT in 1 plane vs {p} planes of {i.plane_gbps}G"
        ),
    )
    table.add_column("", no_wrap=True)
    for title in ("ROFT, 1 plane", f"ROFT, {p} planes", f"{p} planes vs 1"):
        table.add_column(title, justify="right", no_wrap=True)
    for row in plane_rows(comparison):
        table.add_row(*row)
    console = _console()
    console.print(table)
    one = replace(i, planes=1)
    console.print(
        f"2-tier ROFT reaches at most {roft_two_tier_max_gpus(one):,} GPUs in 1 plane of "
        f"{one.roft_switch_ports}x{one.roft_port_gbps}G, {roft_two_tier_max_gpus(i):,} in "
        f"{p} planes of {i.roft_switch_ports}x{i.roft_port_gbps}G."
    )
    if comparison.one_plane_error is not None:
        console.print(f"ROFT, 1 plane: {comparison.one_plane_error}", markup=False, highlight=False)
    if i.optic_price is not None:
        console.print(f"optic price {i.optic_price:g} per 400G end, other rates in proportion.")
    for title, f in (
        ("ROFT, 1 plane", comparison.one_plane),
        (f"ROFT, {p} planes", comparison.planes),
    ):
        for note in () if f is None else f.notes:
            console.print(f"{title}: {note}", markup=False, highlight=False)


def print_table(comparison: CostComparison) -> None:
    """Render the side-by-side table, size limits and notes with rich."""
    from rich.table import Table

    i = comparison.inputs
    table = Table(
        title=(f"{i.gpus:,} GPUs x {i.nic_gbps}G NIC on {i.switch_ports}x{i.port_gbps}G switches"),
    )
    table.add_column("", no_wrap=True)
    for f in comparison.fabrics:
        table.add_column(TITLES[f.fabric], justify="right", no_wrap=True)
    table.add_column("Clos vs ROFT", justify="right", no_wrap=True)
    table.add_column("ZCube vs ROFT", justify="right", no_wrap=True)
    for row in rows(comparison):
        table.add_row(*row)
    console = _console()
    console.print(table)
    console.print(
        f"2-tier ROFT/Clos reaches at most {roft_two_tier_max_gpus(i):,} GPUs on "
        f"{i.switch_ports}x{i.port_gbps}G; ZCube at most {zcube_max_gpus(i):,} on "
        f"{zcube_ports_per_switch(i)}x{zcube_port_gbps(i)}G."
    )
    if i.optic_price is not None:
        console.print(f"optic price {i.optic_price:g} per 400G end, other rates in proportion.")
    seen: set[str] = set()
    for f in comparison.fabrics:
        for note in f.notes:
            # Clos repeats ROFT's rounding notes word for word; say each once.
            if note not in seen:
                seen.add(note)
                console.print(f"{TITLES[f.fabric]}: {note}", markup=False, highlight=False)
