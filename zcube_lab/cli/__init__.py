"""The command line: the `zcube-lab` console command, one subcommand per module under
`zcube_lab.cli.commands` (`python -m zcube_lab.cli` runs it too).

Nothing imports this package; it may import any other package of ours.

Each subcommand module has `add_arguments(parser)` and `run(args) -> int` (an exit code); heavy
imports (Mininet, os-ken, aiohttp) happen inside `run`, so `--help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from zcube_lab import __version__
from zcube_lab.core.errors import ConfigError

# name -> (module, one-line help). Order is the order `--help` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": (
        "zcube_lab.cli.commands.doctor",
        "check this machine (or a cluster's machines and tunnels) can run the lab, with fixes",
    ),
    "fabric": ("zcube_lab.cli.commands.fabric", "describe a fabric: hosts, switches, links, paths"),
    "cost": ("zcube_lab.cli.commands.cost", "price full-size ROFT, Clos and ZCube side by side"),
    "up": ("zcube_lab.cli.commands.up", "build a fabric in Mininet, route it, check reachability"),
    "serve": ("zcube_lab.cli.commands.serve", "run the mock PD-disaggregated inference cluster"),
    "run": ("zcube_lab.cli.commands.run", "one experiment: fabric + serving + load + Prometheus"),
    "compare": (
        "zcube_lab.cli.commands.compare",
        "fabrics side by side on one workload, report.html",
    ),
    "sweep": (
        "zcube_lab.cli.commands.sweep",
        "load sweep to saturation: goodput, max rate under an SLO",
    ),
    "replay": (
        "zcube_lab.cli.commands.replay",
        "replay a run's transfers on fabrics at a µs time scale (paced datagrams, PFC)",
    ),
    "bmwg": (
        "zcube_lab.cli.commands.bmwg",
        "the IETF draft's inference-fabric tests by section: list them, run them on fabrics",
    ),
    "clean": (
        "zcube_lab.cli.commands.clean",
        "remove what a killed run left: processes, bridges, interfaces, namespaces",
    ),
}

EPILOG = """examples:
  zcube-lab doctor
  zcube-lab doctor --machines 198.19.254.1,198.19.254.2
  zcube-lab cost --gpus 1024 --nic-gbps 400 --switch-ports 64 --port-gbps 400
  zcube-lab fabric --fabric zcube --gpus 16
  zcube-lab up --fabric roft --gpus 64 --spines 4
  zcube-lab up --fabric roft --gpus-per-server 4 --servers-per-leaf 4   # the old 16-GPU size
  zcube-lab serve --local
  zcube-lab bmwg list
  sudo zcube-lab bmwg run 8.2 7.4 --fabrics zcube,roft,clos --trials 3 --trial-seconds 0.005
  zcube-lab clean
"""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """One default per option: the option's own text when it states its default ("default
    ..."), else `(default: X)` when there is an X to show (not None, an empty list or a flag's
    False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            "default" in text.lower()
            or default is None
            or default is argparse.SUPPRESS
            or action.nargs == 0  # a flag: off unless given
            or (isinstance(default, list | tuple | str) and not default)
        ):
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="zcube-lab",
        description="Emulate LLM inference fabrics (ZCube, ROFT, Clos) with real traffic.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"zcube-lab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        sp = sub.add_parser(
            name,
            help=help_text,
            description=(module.__doc__ or help_text).strip(),
            formatter_class=HelpFormatter,
            allow_abbrev=False,  # `run --gpus 16` must not be read as --gpus-per-server 16
        )
        module.add_arguments(sp)
        sp.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `zcube-lab` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args))
    except ConfigError as exc:
        print(f"zcube-lab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"zcube-lab {args.command}: interrupted", file=sys.stderr)
        return 130
