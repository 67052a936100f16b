"""Check this machine can run the lab: root, Open vSwitch, datapath, Mininet, tc qdiscs, os-ken,
Prometheus and the measuring tools. Each line is pass, warn or fail with the fix; exit 1 if any
check fails. The tc checks build and delete a throwaway namespace `zcl-doctor-<pid>`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

STYLES = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Output format only: the checks themselves take no options."""
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def run(args: argparse.Namespace) -> int:
    """Run every check, print them, exit 0 when none failed."""
    from emulator.lab.doctor import exit_code, run_checks

    checks = run_checks()
    if args.json:
        print(json.dumps([dataclasses.asdict(c) for c in checks], indent=2))
        return exit_code(checks)

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title="zcube-lab doctor")
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
    return exit_code(checks)
