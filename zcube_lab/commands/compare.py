"""Compare fabrics on the same workload: runs each fabric --repeat times with identical requests
(same seed), interleaving fabrics so machine noise spreads evenly, then prints a side-by-side
table and writes report.html with plots (TTFT CDF, throughput over time, per-port utilization
heatmaps) to results/compare-<time>/. Needs root."""

from __future__ import annotations

import argparse
import math
import signal
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from zcube_lab.commands.run import add_run_arguments, config_from_args
from zcube_lab.errors import ConfigError
from zcube_lab.fabric.builders import BUILDERS
from zcube_lab.fabric.description import FabricSpec
from zcube_lab.procs import raise_interrupt


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fabrics, size, repeats, and the run options."""
    g = parser.add_argument_group("comparison")
    g.add_argument("--fabrics", default="zcube,roft", help="comma-separated fabric kinds")
    g.add_argument(
        "--gpus",
        type=int,
        default=16,
        help="GPU hosts per fabric, a square: zcube n=sqrt; roft/clos sqrt servers x sqrt GPUs",
    )
    g.add_argument("--spines", type=int, default=2, help="roft/clos spines")
    g.add_argument(
        "--planes", type=int, default=1, help="roft: parallel leaf-spine planes (MRC multi-plane)"
    )
    g.add_argument(
        "--policies",
        help="comma-separated policies to run on every fabric (static, ecmp, ff, recompute, "
        "spray; default: --policy); results are labelled fabric/policy",
    )
    g.add_argument("--repeat", type=int, default=3, help="runs per fabric (medians reported)")
    g.add_argument(
        "--baseline",
        default="roft",
        help="fabric (or fabric/policy label) the differences are taken against",
    )
    g.add_argument(
        "--report-only",
        type=Path,
        nargs="+",
        metavar="RUN",
        help="rebuild a report from run folders",
    )
    add_run_arguments(parser)


def fabric_specs(
    kinds: list[str], gpus: int, spines: int, planes: int = 1
) -> dict[str, FabricSpec]:
    """Same-size fabrics: the same GPU hosts (gid -> server, rank) on each."""
    side = math.isqrt(gpus)
    if side * side != gpus or side < 2:
        raise ConfigError("gpus", gpus, "a square of at least 4 (16, 36, 64)")
    specs = {}
    for k in kinds:
        if k not in BUILDERS:
            raise ConfigError("fabrics", k, f"comma-separated from {list(BUILDERS)}")
        if k == "zcube":
            specs[k] = FabricSpec.of("zcube", n=side, gpus_per_server=side)
        elif k == "roft":
            specs[k] = FabricSpec.of(
                "roft",
                servers=side,
                gpus_per_server=side,
                spines=spines,
                planes=planes if planes != 1 else None,
            )
        else:
            specs[k] = FabricSpec.of(
                "clos",
                servers=side,
                gpus_per_server=side,
                spines=spines,
                servers_per_leaf=2 if side % 2 == 0 else 1,
            )
    return specs


def run(args: argparse.Namespace) -> int:
    """Run the comparison and write the report."""
    from emulator.experiment.runner import Experiment
    from emulator.lab.network import LabError
    from emulator.prometheus.server import PrometheusError
    from emulator.results.figures import port_capacity_bps
    from emulator.results.report import (
        HEADLINE,
        aggregate,
        headline_rows,
        load_run,
        table_rows,
        trust,
        write_report,
    )
    from zcube_lab.fabric.builders import build_fabric
    from zcube_lab.fabric.scale import Scale

    console = Console(stderr=True)
    kinds = [k.strip() for k in args.fabrics.split(",") if k.strip()]
    specs = fabric_specs(kinds, args.gpus, args.spines, args.planes)
    policies = [p.strip() for p in (args.policies or args.policy).split(",") if p.strip()]
    if args.repeat < 1:
        raise ConfigError("repeat", args.repeat, "at least 1")
    if args.planes != 1 and "roft" not in kinds:
        raise ConfigError("planes", args.planes, "1 unless roft is among the compared fabrics")
    for text in args.fail:
        head, sep, _ = text.partition(":")
        if sep and head.strip().lower() in BUILDERS and head.strip().lower() not in kinds:
            raise ConfigError("fail", text, f"a prefix among the compared fabrics {kinds}")
    # Validate every run's configuration before the first one starts (fail in seconds, not
    # after a run): building an Experiment checks the fabric, placement, policy and faults.
    variants = [(kind, policy) for kind in kinds for policy in policies]
    labels = []
    for kind, policy in variants:
        args.policy = policy
        labels.append(Experiment(config_from_args(args, specs[kind])).label)
    baseline = args.baseline
    if baseline not in labels:
        matches = [lb for lb in labels if lb.split("/")[0] == baseline]
        if not matches:
            raise ConfigError("baseline", baseline, f"one of the compared fabrics {labels}")
        baseline = matches[0]
    out_dir = args.results / f"compare-{time.strftime('%Y%m%d-%H%M%S')}"
    runs = []
    failed = 0
    if args.report_only is not None:
        for p in args.report_only:
            if not (p / "summary.json").is_file():
                raise ConfigError("report_only", str(p), "run folders holding a summary.json")
        runs = [load_run(p) for p in args.report_only]
        unknown = sorted({r["fabric_kind"] for r in runs} - set(kinds))
        if unknown:
            raise ConfigError("fabrics", args.fabrics, f"must include the runs' fabrics {unknown}")
    else:
        signal.signal(signal.SIGTERM, raise_interrupt)
        total = len(variants) * args.repeat
        done = 0
        try:
            for rep in range(args.repeat):
                for (kind, policy), label in zip(variants, labels, strict=True):
                    done += 1
                    console.rule(f"run {done}/{total}: {label}, repeat {rep + 1}/{args.repeat}")
                    args.policy = policy
                    tag = f"{policy}-r{rep + 1}" if len(policies) > 1 else f"r{rep + 1}"
                    cfg = config_from_args(args, specs[kind], tag=tag)
                    exp = Experiment(cfg, progress=lambda m: console.print(f"[dim]»[/dim] {m}"))
                    result = exp.run()
                    runs.append(load_run(result.path))
                    c = result.summary["client"]
                    console.print(
                        f"  {label}: {c['completed']} done, {c['failed']} failed, TTFT p99 "
                        f"{c['ttft_p99_s'] or float('nan'):.3f}s -> {result.path}"
                    )
        except (LabError, PrometheusError) as exc:
            # Keep what completed: the report below covers the runs before the failure.
            console.print(f"[red]zcube-lab compare: {exc}[/red]")
            failed = 1
            if not runs:
                return 1
        except KeyboardInterrupt:
            console.print("interrupted: the current run was torn down")
            if not runs:
                return 130
    capacities = {
        k: {f"{s}:{p}": v for (s, p), v in port_capacity_bps(
            build_fabric(specs[k]), Scale(nic_mbps=args.nic_mbps)).items()}
        for k in kinds
    }  # fmt: skip
    page = write_report(runs, out_dir, baseline, capacities)
    agg = aggregate(runs)
    fabrics = sorted({r["fabric"] for r in runs}, key=lambda f: (f == baseline, f))
    if len(fabrics) <= 3:
        table = Table(title=f"{args.workload}: medians of {args.repeat} repeats [min-max]")
        table.add_column("metric")
        for f in fabrics:
            table.add_column(f, justify="right")
        for f in fabrics:
            if f != baseline:
                table.add_column(f"{f} vs {baseline}", justify="right")
        for row in table_rows(agg, fabrics, baseline):
            table.add_row(*row)
    else:  # many variants: one row each, headline medians (all of them are in report.html)
        table = Table(title=f"{args.workload}: medians of {args.repeat} repeats (see the report)")
        table.add_column("run")
        for m in HEADLINE:
            table.add_column(m, justify="right")
        for row in headline_rows(agg, fabrics):
            table.add_row(*row)
    Console().print(table)
    for f, reasons in trust(runs).items():
        if reasons:
            console.print(f"[red]{f}: NOT TRUSTWORTHY[/red]: " + "; ".join(reasons))
    console.print(f"report: {page}")
    return failed
