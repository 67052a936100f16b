"""Build a fabric in Mininet on Open vSwitch, start our os-ken controller with a routing policy,
wait until every switch holds its rules, check that every host reaches every other host's
addresses, print a summary, then tear down (or stay up with Mininet's CLI with --cli).
Needs root. Ctrl-C tears everything down; a run after a crash first removes stale state."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from types import FrameType

from rich.console import Console
from rich.table import Table

from zcube_lab.fabric_options import add_fabric_arguments, spec_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fabric, routing and realization options."""
    add_fabric_arguments(parser)
    lab = parser.add_argument_group("lab")
    lab.add_argument("--policy", default="ecmp", help="routing policy: ecmp or single")
    lab.add_argument(
        "--nic-mbps",
        type=float,
        default=100.0,
        help="emulated rate of one GPU NIC in Mb/s (ZCube ports get half each); "
        "bandwidth_scale = full-scale NIC rate / this",
    )
    lab.add_argument("--mtu", type=int, default=9000, help="MTU of every fabric interface")
    lab.add_argument(
        "--datapath",
        choices=["auto", "user", "kernel"],
        default="auto",
        help="OVS datapath; auto = kernel when the openvswitch module loads, else userspace",
    )
    lab.add_argument("--of-port", type=int, default=6653, help="controller OpenFlow port")
    lab.add_argument(
        "--metrics-port", type=int, default=9101, help="controller Prometheus metrics port"
    )
    lab.add_argument("--no-ping", action="store_true", help="skip the all-pairs check")
    lab.add_argument("--cli", action="store_true", help="stay up with Mininet's CLI")
    lab.add_argument("--json", action="store_true", help="print the summary as JSON")


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(args: argparse.Namespace) -> int:
    """Bring the lab up, check it, report, tear down."""
    from emulator.builders import build_fabric
    from emulator.hostconfig import Scale
    from emulator.network import Lab, LabError, LabOptions

    fabric = build_fabric(spec_from_args(args))
    options = LabOptions(
        scale=Scale(nic_mbps=args.nic_mbps),
        mtu=args.mtu,
        datapath=args.datapath,
        policy=args.policy,
        of_port=args.of_port,
        metrics_port=args.metrics_port,
    )
    console = Console(stderr=True)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    lab = Lab(fabric, options, progress=lambda msg: console.print(f"[dim]»[/dim] {msg}"))
    failures: dict[str, list[str]] = {}
    try:
        lab.start()
        if not args.no_ping:
            console.print("[dim]»[/dim] checking all-pairs reachability")
            failures = lab.check_reachability()
        summary = lab.summary()
        unreachable = sum(len(v) for v in failures.values())
        pairs = sum(
            len(h.interfaces) * (sum(len(o.interfaces) for o in fabric.hosts) - len(h.interfaces))
            for h in fabric.hosts
        )
        summary["reachability"] = (
            "skipped" if args.no_ping else f"{pairs - unreachable}/{pairs} address pairs"
        )
        if args.json:
            summary["unreachable"] = {k: v for k, v in failures.items() if v}
            print(json.dumps(summary, indent=2))
        else:
            _print_summary(summary, failures)
        if args.cli:
            from mininet.cli import CLI

            CLI(lab.net)
    except LabError as exc:
        console.print(f"[red]zcube-lab up: {exc}[/red]")
        return 1
    except KeyboardInterrupt:
        console.print("interrupted: tearing down")
        return 130
    finally:
        lab.stop()
    return 1 if any(failures.values()) else 0


def _print_summary(summary: dict[str, object], failures: dict[str, list[str]]) -> None:
    table = Table(title=f"{summary['fabric']} lab", show_header=False)
    for key, value in summary.items():
        if key == "phase_seconds":
            value = ", ".join(f"{k} {v:g}s" for k, v in value.items())  # type: ignore[union-attr]
        table.add_row(key.replace("_", " "), str(value))
    Console().print(table)
    bad = {k: v for k, v in failures.items() if v}
    for host, addrs in bad.items():
        print(f"{host} cannot reach: {' '.join(addrs)}", file=sys.stderr)
