"""Run one experiment: bring up a fabric, place a PD-disaggregated serving cluster on its GPU
hosts, start a real Prometheus, drive the workload with Locust (open loop), collect, tear down.
Results go to results/<time>-<fabric>-<workload>/ (config, Locust CSV/JSON, per-request records,
Prometheus TSDB and snapshot, emulator health, summary.json). Needs root."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from rich.console import Console

from zcube_lab.adapters.procs import interrupt_on_stop_signals
from zcube_lab.cli.fabric_options import add_fabric_arguments, spec_from_args
from zcube_lab.core.fabric.description import FabricSpec

if TYPE_CHECKING:
    from zcube_lab.emulator.experiment.plan import RunConfig


def add_run_arguments(parser: argparse.ArgumentParser, rate: bool = True) -> None:
    """Workload, cluster and lab options shared by `run`, `compare` and `sweep` (which sets its
    rates itself: `rate=False` keeps `--rate` out of its help, and refused): `RunConfig`'s
    fields, each declared once there."""
    from zcube_lab.core.options import add_flags
    from zcube_lab.emulator.experiment.runconfig import (
        CLUSTER_FIELDS,
        LAB_FIELDS,
        WORKLOAD_FIELDS,
        RunConfig,
    )

    hidden = () if rate else ("rate",)
    add_flags(parser.add_argument_group("workload"), RunConfig, WORKLOAD_FIELDS, hidden=hidden)
    add_flags(parser.add_argument_group("cluster"), RunConfig, CLUSTER_FIELDS)
    add_flags(parser.add_argument_group("lab"), RunConfig, LAB_FIELDS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fabric plus run options."""
    add_fabric_arguments(parser)
    add_run_arguments(parser)


def config_from_args(
    args: argparse.Namespace, fabric_spec: FabricSpec | None = None, tag: str = ""
) -> RunConfig:
    """The RunConfig the options describe (unset ones from the workload profile)."""
    from zcube_lab.core.options import from_args
    from zcube_lab.emulator.experiment.runconfig import RunConfig, profile_fallback

    spec = fabric_spec or spec_from_args(args)
    return from_args(RunConfig, args, profile_fallback(args.workload, spec), fabric=spec, tag=tag)


def run(args: argparse.Namespace) -> int:
    """One run; prints where the results are and the headline figures."""
    from zcube_lab.emulator.experiment.runner import Experiment
    from zcube_lab.emulator.lab.system import LabError
    from zcube_lab.emulator.prometheus.server import PrometheusError
    from zcube_lab.emulator.results.compare.report import busiest_link
    from zcube_lab.emulator.results.run.dilation import ladder_note, read_ladder

    console = Console(stderr=True)
    interrupt_on_stop_signals()
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
    tps = s.bmwg.tps_per_gpu if s.bmwg else None
    print(json.dumps({
        "results": str(result.path),
        "completed": c.completed,
        "failed": c.failed,
        "requests_per_s": c.requests_per_s,
        "ttft_p50_s": c.ttft_p50_s,
        "ttft_p99_s": c.ttft_p99_s,
        # production's GPU throughput: tokens per GPU-second (the BMWG draft's TPS_per_GPU)
        "decode_tokens_per_gpu_s": tps.output if tps else None,
        "prefill_tokens_per_gpu_s": tps.input if tps else None,
        "kv_xfer_p99_s": s.transfers.kv_xfer_p99_s if s.transfers else None,
        "kv_pulls_stalled": s.transfers.kv_pulls_stalled if s.transfers else None,
        "busiest_link": busiest_link(s),
        "congestion_control": exp.config.congestion_control,
        "buffer_model": exp.config.buffer_model,
        "lossless": s.lossless.brief() if s.lossless else None,
        "class_bytes": s.class_totals(),  # EP and KV bytes into the switch ports (--lossless)
        "trustworthy": s.trustworthy,
        "reasons": list(s.health.reasons),
    }, indent=2))  # fmt: skip
    return 0
