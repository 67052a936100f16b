"""Check this machine can run the lab: root, Open vSwitch, datapath, Mininet, tc qdiscs, os-ken,
Prometheus and the measuring tools. Each line is pass, warn or fail with the fix; exit 1 if any
check fails. The tc checks build and delete a throwaway namespace `zcl-doctor-<pid>`.

With --machines (this machine's wire address first), check every machine of a cluster lab and
the way between them: this machine's checks and sudo; on each other machine root over ssh
without a password, the same checkout and venv at the same path (and the checks above, run
there), sudo, and sshd's MaxSessions and MaxStartups (at least 100); between machine 0 and each
other machine the wire's MTU on both sides (the lab's 9000-byte frames plus 50 bytes of VXLAN),
and a throwaway VXLAN tunnel's capacity and round-trip time (about 8 s per machine; --no-tunnel
skips it). Each line is named after the machine it was checked on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from zcube_lab.core.errors import ConfigError

if TYPE_CHECKING:
    from zcube_lab.emulator.lab.doctor import Check

STYLES = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Which machines to check, whether to measure the tunnels, and the output format."""
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument(
        "--machines",
        metavar="ADDRS",
        help="check every machine of a cluster lab and the tunnels between them: their wire "
        "addresses, comma-separated, this machine's first (e.g. 198.19.254.1,198.19.254.2); the "
        "others are reached as root over ssh",
    )
    parser.add_argument(
        "--no-tunnel",
        action="store_true",
        help="with --machines: do not measure the tunnels (about 8 s per other machine)",
    )


def run(args: argparse.Namespace) -> int:
    """Run every check, print them, exit 0 when none failed."""
    from zcube_lab.emulator.lab.doctor import exit_code, run_checks

    if args.machines is None:
        if args.no_tunnel:
            raise ConfigError("no_tunnel", True, "only with --machines")
        checks = run_checks()
        title = "zcube-lab doctor"
    else:
        from rich.console import Console

        from zcube_lab.emulator.cluster.doctor import run_cluster_checks
        from zcube_lab.emulator.cluster.remote import parse_machines

        machines = parse_machines(args.machines)
        console = Console(stderr=True)
        checks = run_cluster_checks(
            machines,
            measure=not args.no_tunnel,
            progress=lambda msg: console.print(f"[dim]»[/dim] {msg}"),
        )
        title = f"zcube-lab doctor: {len(machines)} machines"
    print_checks(checks, args.json, title)
    return exit_code(checks)


def print_checks(checks: Sequence[Check], as_json: bool, title: str = "zcube-lab doctor") -> None:
    """The checks as JSON, or as a table with the counts under it."""
    if as_json:
        print(json.dumps([dataclasses.asdict(c) for c in checks], indent=2))
        return

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail")
    table.add_column("fix")
    for c in checks:
        # Text, not markup: details quote tool output, which may contain brackets.
        table.add_row(c.name, Text(c.status, style=STYLES[c.status]), Text(c.detail), Text(c.fix))
    console = Console()
    if not console.is_terminal:
        # Piped or captured output gets rich's 80-column default, too narrow for the fixes.
        console = Console(width=140)
    console.print(table)
    failed = sum(c.status == "fail" for c in checks)
    warned = sum(c.status == "warn" for c in checks)
    console.print(f"{failed} failed, {warned} warnings, {len(checks) - failed - warned} passed")
