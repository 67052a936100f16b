"""Run one experiment: bring up a fabric, place a PD-disaggregated serving cluster on its GPU
hosts, start a real Prometheus, drive the workload with Locust (open loop), collect, tear down.
Results go to results/<time>-<fabric>-<workload>/ (config, Locust CSV/JSON, per-request records,
Prometheus TSDB and snapshot, emulator health, summary.json). Needs root."""

from __future__ import annotations

import argparse
import json
import signal
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from zcube_lab.cli.fabric_options import (
    add_datapath_arguments,
    add_fabric_arguments,
    add_kv_transport_argument,
    add_link_arguments,
    add_lossless_argument,
    add_transport_arguments,
    spec_from_args,
)
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.procs import raise_interrupt

if TYPE_CHECKING:
    from emulator.experiment.plan import RunConfig


def add_run_arguments(parser: argparse.ArgumentParser, rate: bool = True) -> None:
    """Workload, cluster and lab options shared by `run`, `compare` and `sweep` (which sets its
    rates itself: `rate=False` keeps `--rate` out of its help, and refused)."""
    w = parser.add_argument_group("workload")
    w.add_argument(
        "--workload",
        default="coding-agent",
        help="profile name (coding-agent, chat, kv-heavy, rail-aligned, trace) or a profile JSON "
        "path",
    )
    w.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals")
    w.add_argument(
        "--rate",
        type=float,
        help="mean requests/s (default: the profile's)" if rate else argparse.SUPPRESS,
    )
    w.add_argument("--arrival", help="poisson, gamma, fixed or staged (default: the profile's)")
    w.add_argument("--burstiness", type=float, help="gamma shape k (1 = Poisson, < 1 burstier)")
    w.add_argument("--length-scale", type=float, help="multiply every token length")
    w.add_argument("--seed", type=int, default=1, help="same seed, same requests on every fabric")
    w.add_argument("--drain", type=float, default=60.0, help="max seconds to finish in-flight")
    c = parser.add_argument_group("cluster")
    c.add_argument("--model", default="glm-5.1", help="model profile of the serving engines")
    c.add_argument(
        "--prefill-servers", type=int, help="servers that prefill (default: the profile's, or 1)"
    )
    c.add_argument("--decode-servers", type=int, help="servers that decode (default: the rest)")
    c.add_argument("--ep-servers", type=int, default=1, help="servers per EP instance")
    c.add_argument("--alltoall", default="rail", help="EP exchange: rail (same rank) or all")
    c.add_argument(
        "--layout", help="default or rail-aligned (default: the workload profile's hint)"
    )
    c.add_argument("--kv-streams", type=int, default=2, help="TCP streams per KV address")
    c.add_argument(
        "--kv-warm",
        type=int,
        default=0,
        metavar="N",
        help="each decode opens N KV connections to every prefill address before the load and "
        "keeps them for pulls, so no SYN crosses a loaded fabric: for dilated runs with deep "
        "queues, where the kernel's undilated 1 s SYN timeout fires (docs/DOMAIN.md §4; tcp "
        "only; default 0: opened by the pulls)",
    )
    c.add_argument(
        "--kv-paths",
        choices=["disjoint", "shortest"],
        default="disjoint",
        help="ZCube: disjoint binds each KV lane to its own NIC port and 2-hop path; "
        "shortest lets host routes pick (same-rail pulls then share one port)",
    )
    c.add_argument(
        "--prefix-cache-hit-rate",
        type=float,
        help="share of each prompt served from prefill's prefix cache (default: the profile's)",
    )
    c.add_argument(
        "--decode-hotspot",
        type=int,
        help="the shifting incast: decodes go to N hot decode engines that move over time "
        "(default: the profile's, or 0 = every decode)",
    )
    c.add_argument(
        "--hotspot-period",
        type=float,
        help="seconds before the hot decode set moves (default: the profile's, or 5)",
    )
    lab = parser.add_argument_group("lab")
    lab.add_argument(
        "--policy",
        default="ecmp",
        help="what reacts to failures: static, ecmp, ff, recompute or spray (docs/FAILURES.md)",
    )
    lab.add_argument(
        "--fail",
        action="append",
        default=[],
        metavar="SPEC",
        help="inject a failure, repeatable: 'link a1-b2 at 30s for 10s', 'switch leaf1 at 20s "
        "for 5s', 'flaps 3 seed 7 for 4s', 'engine decode-3 at 20s', 'controller at 20s for "
        "10s', 'vswitchd at 20s' (times from the load start; docs/FAILURES.md); a 'zcube:' or "
        "'roft:' prefix applies it to that fabric only (for compare)",
    )
    lab.add_argument("--nic-mbps", type=float, default=100.0, help="emulated GPU NIC rate")
    lab.add_argument(
        "--dilation",
        type=float,
        default=1.0,
        metavar="K",
        help="time dilation (1-16): modelled times, arrival gaps and timeouts x K, link rates / K, "
        "reported times / K; for a point the machine cannot carry at 1 (docs/DOMAIN.md §4)",
    )
    lab.add_argument(
        "--machines",
        metavar="ADDRS",
        help="spread the lab over machines: wire addresses, this machine's first (e.g. "
        "198.19.254.1,198.19.254.2; scripts/peer.sh makes a second one here; docs/SCALE.md). "
        "Locust runs a master here and a worker on every machine",
    )
    add_link_arguments(lab)
    add_lossless_argument(lab)
    add_transport_arguments(lab)
    add_kv_transport_argument(lab)
    add_datapath_arguments(lab)
    lab.add_argument("--results", type=Path, default=Path("results"), help="results folder")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fabric plus run options."""
    add_fabric_arguments(parser)
    add_run_arguments(parser)


def config_from_args(
    args: argparse.Namespace, fabric_spec: FabricSpec | None = None, tag: str = ""
) -> RunConfig:
    """The RunConfig the options describe."""
    from emulator.experiment.runconfig import RunConfig, hotspot_hint, layout_hint, profile_hint
    from zcube_lab.core.fabric.placement import LayoutSpec

    layout = LayoutSpec(
        prefill_servers=int(
            args.prefill_servers
            if args.prefill_servers is not None
            else profile_hint(args.workload, "prefill_servers", 1)
        ),
        decode_servers=args.decode_servers,
        ep_servers=args.ep_servers,
        layout=args.layout or layout_hint(args.workload),
        alltoall=args.alltoall,
    )
    hot_decodes, hot_period = hotspot_hint(args.workload)
    return RunConfig(
        fabric=fabric_spec or spec_from_args(args),
        workload=args.workload,
        duration_s=args.duration,
        rate=args.rate,
        arrival=args.arrival,
        burstiness=args.burstiness,
        seed=args.seed,
        model=args.model,
        length_scale=args.length_scale,
        nic_mbps=args.nic_mbps,
        mtu=args.mtu,
        queue_packets=args.queue_packets,
        host_queue_packets=args.host_queue_packets,
        buffer_model=args.buffer_model,
        switch_chip=args.switch_chip,
        congestion_control=args.cc,
        ovs_instances=args.ovs_instances,
        lossless=args.lossless,
        policy=args.policy,
        faults=tuple(args.fail),
        layout=layout,
        kv_streams=args.kv_streams,
        kv_warm=args.kv_warm,
        kv_transport=args.kv_transport,
        kv_paths=args.kv_paths,
        prefix_cache_hit_rate=float(
            args.prefix_cache_hit_rate
            if args.prefix_cache_hit_rate is not None
            else profile_hint(args.workload, "prefix_cache_hit_rate", 0.0)
        ),
        decode_hotspot=hot_decodes if args.decode_hotspot is None else args.decode_hotspot,
        hotspot_period_s=hot_period if args.hotspot_period is None else args.hotspot_period,
        drain_s=args.drain,
        dilation=args.dilation,
        results_root=args.results,
        tag=tag,
        machines=tuple(a.strip() for a in (args.machines or "").split(",") if a.strip()),
    )


def run(args: argparse.Namespace) -> int:
    """One run; prints where the results are and the headline figures."""
    from emulator.experiment.runner import Experiment
    from emulator.lab.system import LabError
    from emulator.prometheus.server import PrometheusError
    from emulator.results.dilation import ladder_note, read_ladder
    from emulator.results.report import busiest_link

    console = Console(stderr=True)
    signal.signal(signal.SIGTERM, raise_interrupt)
    exp = Experiment(config_from_args(args), progress=lambda m: console.print(f"[dim]»[/dim] {m}"))
    if args.dilation != 1:  # docs/DOMAIN.md §4: a dilated figure is as good as its validation
        console.print(f"[yellow]{ladder_note(args.dilation, read_ladder())}[/yellow]")
    try:
        result = exp.run()
    except (LabError, PrometheusError) as exc:
        console.print(f"[red]zcube-lab run: {exc}[/red]\nlogs: {exp.dir / 'logs'}")
        return 1
    except KeyboardInterrupt:
        console.print(f"interrupted: torn down; partial results in {exp.dir}")
        return 130
    s = result.summary
    c = s.client
    print(json.dumps({
        "results": str(result.path),
        "completed": c.completed,
        "failed": c.failed,
        "requests_per_s": c.requests_per_s,
        "ttft_p50_s": c.ttft_p50_s,
        "ttft_p99_s": c.ttft_p99_s,
        "kv_xfer_p99_s": s.transfers.kv_xfer_p99_s if s.transfers else None,
        "kv_pulls_stalled": s.transfers.kv_pulls_stalled if s.transfers else None,
        "busiest_link": busiest_link(s),
        "congestion_control": exp.config.congestion_control,
        "buffer_model": exp.config.buffer_model,
        "lossless": s.lossless.brief() if s.lossless else None,
        "trustworthy": s.trustworthy,
        "reasons": list(s.health.reasons),
    }, indent=2))  # fmt: skip
    return 0
