"""Price full-size ROFT, Clos and ZCube side by side, with the differences vs ROFT in %.

All three use the same switch ASIC (--switch-ports x --port-gbps). ROFT and Clos run it at
--port-gbps, with 2 tiers or 3 where 2 cannot reach --gpus; ZCube breaks it out at half the NIC
rate (64x400G as 128x200G) since each NIC has two ports. --optic-price is per transceiver end at
400G; ends of other rates cost in proportion. Every link has two ends, NIC ends included.
"""

from __future__ import annotations

import argparse
import json

from emulator.cost import (
    COMPARED_METRICS,
    CostComparison,
    CostInputs,
    FabricCost,
    compare,
    roft_two_tier_max_gpus,
    zcube_max_gpus,
    zcube_port_gbps,
    zcube_ports_per_switch,
)

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
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def run(args: argparse.Namespace) -> int:
    """Print the comparison as a table, or as JSON with --json."""
    inputs = CostInputs(
        gpus=args.gpus,
        nic_gbps=args.nic_gbps,
        switch_ports=args.switch_ports,
        port_gbps=args.port_gbps,
        switch_price=args.switch_price,
        optic_price=args.optic_price,
    )
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


def rows(comparison: CostComparison) -> list[list[str]]:
    """Table rows: label, ROFT, Clos, ZCube, Clos vs ROFT, ZCube vs ROFT."""
    fabrics = comparison.fabrics
    others = (comparison.clos, comparison.zcube)
    table = [
        ["switch ports", *(f"{f.ports_per_switch}x{f.switch_port_gbps}G" for f in fabrics), "", ""],
        ["switch tiers", *(str(f.tiers) for f in fabrics), "", ""],
        ["diameter (switch hops)", *(str(f.diameter_hops) for f in fabrics), "", ""],
        ["switches by role", *(_switch_roles(f) for f in fabrics), "", ""],
    ]
    for key, label in COMPARED_METRICS:
        values = [getattr(f, key) for f in fabrics]
        if all(v is None for v in values):
            continue  # no price given: no CapEx rows
        table.append(
            [
                label,
                *(_number(v) for v in values),
                *(_pct(comparison.diff_pct(f, key)) for f in others),
            ]
        )
    return table


def print_table(comparison: CostComparison) -> None:
    """Render the side-by-side table, size limits and notes with rich."""
    from rich.console import Console
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
    console = Console()
    if not console.is_terminal:
        # Piped or captured output gets rich's 80-column default, which would truncate cells.
        console = Console(width=120)
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
