"""Build a fabric in Mininet on Open vSwitch, start our os-ken controller with a routing policy,
wait until every switch holds its rules, check that every host reaches every other host's
addresses, print a summary, then tear down (or stay up with Mininet's CLI with --cli).
With --serve the lab stays up serving traffic instead: the serving cluster in its hosts,
Prometheus on a fixed port and Locust's web UI, for live exploration in Grafana
(`zcube_lab/emulator/experiment/live.py`). Needs root. Ctrl-C (or SIGTERM) tears everything down; a
run
after a crash first removes stale state."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from zcube_lab.adapters.procs import interrupt_on_stop_signals
from zcube_lab.cli.fabric_options import (
    add_fabric_arguments,
)

if TYPE_CHECKING:
    from zcube_lab.emulator.experiment.plan import RunConfig


# `RunConfig`'s fields `up` takes (zcube_lab.cli.commands.run declares `run`'s): the lab's, then
# the serving plan's (with --serve), each flag declared once on its field.
UP_LAB_FIELDS = (
    "policy", "nic_mbps", "dilation", "machines", "mtu", "buffer_model", "switch_chip",
    "queue_packets", "host_queue_packets", "lossless", "congestion_control", "ovs_instances",
)  # fmt: skip
UP_SERVE_FIELDS = (
    "workload", "duration_s", "rate", "arrival", "burstiness", "length_scale", "seed",
    "kv_transport", "results_root",
)  # fmt: skip
UP_HELPS = {
    "duration_s": "seconds of planned arrivals (at most 3600); the UI stays up after",
    "results_root": "folder for the live lab's files",
}
PLAN_DURATION_S = 3600.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fabric, routing and realization options; with --serve, the run's workload and cluster
    options (`RunConfig`'s fields, as `run` takes them)."""
    from zcube_lab.core.options import add_flags
    from zcube_lab.emulator.experiment.runconfig import CLUSTER_FIELDS, RunConfig

    add_fabric_arguments(parser)
    lab = parser.add_argument_group("lab")
    add_flags(lab, RunConfig, UP_LAB_FIELDS)
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
    serve = parser.add_argument_group("serve (stay up with traffic, for Grafana)")
    serve.add_argument(
        "--serve",
        action="store_true",
        help="keep the lab up serving traffic: serving cluster, Prometheus, Locust web UI",
    )
    add_flags(serve, RunConfig, UP_SERVE_FIELDS, helps=UP_HELPS)
    serve.add_argument(
        "--prometheus-port",
        type=int,
        default=9090,
        help="Prometheus port; a free one is picked when it is taken",
    )
    serve.add_argument(
        "--locust-port",
        type=int,
        default=8089,
        help="Locust web UI port; a free one is picked when it is taken",
    )
    serve.add_argument(
        "--bind",
        default="127.0.0.1",
        help="address for Prometheus and Locust (0.0.0.0 in the VM, for forwarded ports)",
    )
    add_flags(parser.add_argument_group("cluster (with --serve)"), RunConfig, CLUSTER_FIELDS)
    parser.set_defaults(duration=PLAN_DURATION_S)


def lab_config(args: argparse.Namespace) -> RunConfig:
    """The run's config the options describe (the one builder `run` uses, with the workload
    profile's fallbacks): the lab `up` builds, and with --serve the cluster it serves."""
    from zcube_lab.cli.commands.run import config_from_args

    return config_from_args(args, tag="live")


def run(args: argparse.Namespace) -> int:
    """Bring the lab up, check it, report, tear down (or serve until Ctrl-C with --serve)."""
    if args.serve:
        return serve(args)
    from zcube_lab.core.errors import ConfigError
    from zcube_lab.core.fabric.builders import build_fabric
    from zcube_lab.core.fabric.scale import Scale
    from zcube_lab.core.policies import get_policy
    from zcube_lab.emulator.lab.network import Lab
    from zcube_lab.emulator.lab.options import LabOptions
    from zcube_lab.emulator.lab.system import LabError

    console = Console(stderr=True)
    try:
        config = lab_config(args)
        fabric = build_fabric(config.fabric)
        policy = get_policy(config.policy)
        scale = Scale(nic_mbps=config.nic_mbps, dilation=config.dilation)
        options = LabOptions(
            scale=scale,
            mtu=config.link_mtu(fabric, scale),
            queue=config.queue_model(),
            congestion_control=config.congestion_control,
            lossless=config.lossless,
            datapath=args.datapath,
            ovs_instances=config.ovs_instances,
            policy=policy.routing,
            recompute=policy.recompute,
            of_port=args.of_port,
            metrics_port=args.metrics_port,
        )
        machines = None
        if config.machines:
            if args.cli:
                raise ConfigError("machines", ",".join(config.machines), "not with --cli yet")
            from zcube_lab.emulator.cluster.remote import parse_machines

            machines = parse_machines(",".join(config.machines))
    except ConfigError as exc:
        console.print(f"[red]zcube-lab up: {exc}[/red]")
        return 2
    interrupt_on_stop_signals()

    def progress(msg: str) -> None:
        console.print(f"[dim]»[/dim] {msg}")

    if machines:
        from zcube_lab.emulator.cluster.lab import ClusterLab

        lab: Lab = ClusterLab(fabric, machines, options, progress=progress)
    else:
        lab = Lab(fabric, options, progress=progress)
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
    except ConfigError as exc:  # a cluster plan over its measured tunnel capacity
        console.print(f"[red]zcube-lab up: {exc}[/red]")
        return 2
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
        elif key == "machines":
            value = "; ".join(
                f"{m['machine']} ({m['address']}): {m['hosts']} hosts, {m['switches']} switches"
                for m in value  # type: ignore[union-attr]
            )
        elif key == "tunnels":
            value = "; ".join(
                f"{t['a']}-{t['b']}: {t['mbps_ab']:g}/{t['mbps_ba']:g} Mb/s, rtt {t['rtt_ms']:g} ms"
                for t in value  # type: ignore[union-attr]
            )
        elif key == "queues":
            value = "; ".join(
                f"{q['links']} links at {q['mbps']:g} Mb/s: {q['queue_packets']} packets "
                f"(full queue {q['max_queue_ms']:g} ms), {q['serialization_ms']:g} ms/hop"
                for q in value  # type: ignore[union-attr]
            )
        table.add_row(key.replace("_", " "), str(value))
    Console().print(table)
    bad = {k: v for k, v in failures.items() if v}
    for host, addrs in bad.items():
        print(f"{host} cannot reach: {' '.join(addrs)}", file=sys.stderr)


def _port(wanted: int, bind: str, what: str, console: Console) -> int:
    from zcube_lab.adapters.ports import free_port, port_free

    if port_free(wanted, bind):
        return wanted
    port = free_port()
    console.print(f"[yellow]port {wanted} is taken: {what} uses {port}[/yellow]")
    return port


def serve_config(args: argparse.Namespace) -> RunConfig:
    """The serving plan of `up --serve`: `run`'s config of these options (the workload
    profile's hints where an option is left out); ConfigError names a bad one."""
    return lab_config(args)


def serve(args: argparse.Namespace) -> int:
    """The lab with the serving cluster, Prometheus and Locust's UI, up until Ctrl-C."""
    from zcube_lab.core.errors import ConfigError
    from zcube_lab.emulator.experiment.live import LiveLab
    from zcube_lab.emulator.lab.system import LabError
    from zcube_lab.emulator.prometheus.server import PrometheusError

    console = Console(stderr=True)
    if args.cli:
        console.print("[red]zcube-lab up: --serve and --cli do not go together[/red]")
        return 2
    try:
        config = serve_config(args)
        if config.machines:
            raise ConfigError("machines", ",".join(config.machines), "not with --serve yet")
    except ConfigError as exc:
        console.print(f"[red]zcube-lab up: {exc}[/red]")
        return 2
    live = LiveLab(
        config,
        prometheus_port=_port(args.prometheus_port, args.bind, "Prometheus", console),
        locust_port=_port(args.locust_port, args.bind, "the Locust UI", console),
        bind=args.bind,
        progress=lambda msg: console.print(f"[dim]»[/dim] {msg}"),
    )

    def ready(urls: dict[str, str]) -> None:
        title = f"{config.fabric.kind} lab serving {config.workload}"
        table = Table(title=title, show_header=False)
        table.add_row("Prometheus", urls["prometheus"])
        table.add_row("Locust web UI", urls["locust"])
        table.add_row("OpenAI API (gateway)", urls["gateway"])
        table.add_row("Grafana (in the VM)", "http://localhost:3000")
        table.add_row("files", str(live.dir))
        Console().print(table)
        console.print("serving; Ctrl-C tears everything down")

    interrupt_on_stop_signals()  # Ctrl-C, SIGTERM and a closed ssh session all tear down
    try:
        live.serve(ready)
    except (LabError, PrometheusError) as exc:
        console.print(f"[red]zcube-lab up: {exc}[/red]\nlogs: {live.dir / 'logs'}")
        return 1
    except KeyboardInterrupt:
        console.print("interrupted: torn down")
        return 0
    return 0
