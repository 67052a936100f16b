"""Build a fabric in Mininet on Open vSwitch, start our os-ken controller with a routing policy,
wait until every switch holds its rules, check that every host reaches every other host's
addresses, print a summary, then tear down (or stay up with Mininet's CLI with --cli).
With --serve the lab stays up serving traffic instead: the serving cluster in its hosts,
Prometheus on a fixed port and Locust's web UI, for live exploration in Grafana
(`emulator/experiment/live.py`). Needs root. Ctrl-C (or SIGTERM) tears everything down; a run
after a crash first removes stale state."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from zcube_cli.fabric_options import (
    add_datapath_arguments,
    add_fabric_arguments,
    add_link_arguments,
    add_lossless_argument,
    add_transport_arguments,
    link_options_from_args,
    spec_from_args,
)
from zcube_lab.adapters.procs import interrupt_on_stop_signals

if TYPE_CHECKING:
    from emulator.experiment.plan import RunConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fabric, routing and realization options."""
    add_fabric_arguments(parser)
    lab = parser.add_argument_group("lab")
    lab.add_argument(
        "--policy",
        default="ecmp",
        help="routing policy: static, ecmp, ff, recompute or spray (see docs/FAILURES.md)",
    )
    lab.add_argument(
        "--nic-mbps",
        type=float,
        default=100.0,
        help="emulated rate of one GPU NIC in Mb/s (ZCube ports get half each); "
        "bandwidth_scale = full-scale NIC rate / this",
    )
    add_link_arguments(lab)
    add_lossless_argument(lab)
    add_transport_arguments(lab)
    add_datapath_arguments(lab)
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
    lab.add_argument(
        "--machines",
        metavar="ADDRS",
        help="spread the fabric over lab machines: wire addresses, this machine's first, e.g. "
        "198.19.254.1,198.19.254.2 (scripts/peer.sh makes a second one here; docs/SCALE.md)",
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
    serve.add_argument("--workload", default="coding-agent", help="workload profile")
    serve.add_argument("--rate", type=float, help="mean requests/s (default: the profile's)")
    serve.add_argument("--model", default="glm-5.1", help="model profile of the engines")
    serve.add_argument("--seed", type=int, default=1, help="seed of the request plan")
    serve.add_argument(
        "--plan-duration",
        type=float,
        default=3600.0,
        help="seconds of planned arrivals (at most 3600); the UI stays up after",
    )
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
    serve.add_argument(
        "--results", type=Path, default=Path("results"), help="folder for the live lab's files"
    )


def run(args: argparse.Namespace) -> int:
    """Bring the lab up, check it, report, tear down (or serve until Ctrl-C with --serve)."""
    if args.serve:
        return serve(args)
    from emulator.lab.network import Lab
    from emulator.lab.options import LabOptions
    from emulator.lab.system import LabError
    from zcube_lab.core.errors import ConfigError
    from zcube_lab.core.fabric.builders import build_fabric
    from zcube_lab.core.fabric.scale import Scale
    from zcube_lab.core.policies import get_policy

    console = Console(stderr=True)
    fabric = build_fabric(spec_from_args(args))
    policy = get_policy(args.policy)
    scale = Scale(nic_mbps=args.nic_mbps)
    try:
        mtu, queue = link_options_from_args(args, fabric, scale)
        options = LabOptions(
            scale=scale,
            mtu=mtu,
            queue=queue,
            congestion_control=args.cc,
            lossless=bool(args.lossless),
            datapath=args.datapath,
            ovs_instances=args.ovs_instances,
            policy=policy.routing,
            recompute=policy.recompute,
            of_port=args.of_port,
            metrics_port=args.metrics_port,
        )
        machines = None
        if args.machines:
            if args.lossless:
                raise ConfigError("lossless", True, "on one machine (its agent sees one)")
            if args.serve or args.cli:
                raise ConfigError("machines", args.machines, "not with --serve or --cli yet")
            from emulator.cluster.remote import parse_machines

            machines = parse_machines(args.machines)
    except ConfigError as exc:
        console.print(f"[red]zcube-lab up: {exc}[/red]")
        return 2
    interrupt_on_stop_signals()

    def progress(msg: str) -> None:
        console.print(f"[dim]»[/dim] {msg}")

    if machines:
        from emulator.cluster.lab import ClusterLab

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
    """The serving plan of `up --serve`: the fabric and the workload profile's hints (prefill
    servers, placement, prefix-cache hit rate, hot decode set); ConfigError names a bad one."""
    from emulator.experiment.runconfig import RunConfig, hotspot_hint, layout_hint, profile_hint
    from zcube_lab.core.fabric.placement import LayoutSpec

    hot_decodes, hot_period = hotspot_hint(args.workload)
    return RunConfig(
        fabric=spec_from_args(args),
        workload=args.workload,
        duration_s=args.plan_duration,
        rate=args.rate,
        seed=args.seed,
        model=args.model,
        nic_mbps=args.nic_mbps,
        congestion_control=args.cc,
        ovs_instances=args.ovs_instances,
        policy=args.policy,
        layout=LayoutSpec(
            prefill_servers=int(profile_hint(args.workload, "prefill_servers", 1)),  # type: ignore[call-overload]
            layout=layout_hint(args.workload),
        ),
        prefix_cache_hit_rate=float(
            profile_hint(args.workload, "prefix_cache_hit_rate", 0.0)  # type: ignore[arg-type]
        ),
        decode_hotspot=hot_decodes,
        hotspot_period_s=hot_period,
        results_root=args.results,
        tag="live",
    )


def serve(args: argparse.Namespace) -> int:
    """The lab with the serving cluster, Prometheus and Locust's UI, up until Ctrl-C."""
    from emulator.experiment.live import LiveLab
    from emulator.lab.system import LabError
    from emulator.prometheus.server import PrometheusError
    from zcube_lab.core.errors import ConfigError
    from zcube_lab.core.fabric.queues import (
        DEFAULT_BUFFER_MODEL,
        DEFAULT_CHIP,
        HOST_QUEUE_PACKETS,
        MAX_MTU,
    )

    console = Console(stderr=True)
    if args.cli:
        console.print("[red]zcube-lab up: --serve and --cli do not go together[/red]")
        return 2
    defaults = (MAX_MTU, None, HOST_QUEUE_PACKETS, DEFAULT_BUFFER_MODEL, DEFAULT_CHIP)
    given = (args.mtu, args.queue_packets, args.host_queue_packets)
    if (*given, args.buffer_model, args.switch_chip) != defaults or args.lossless:
        # The serving plan (emulator.experiment.plan.RunConfig) does not carry them yet.
        console.print("[red]zcube-lab up: the link options do not go with --serve yet[/red]")
        return 2
    try:
        config = serve_config(args)
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
