"""Compare fabrics on the same workload: runs each fabric --repeat times with identical requests
(same seed), interleaving fabrics so machine noise spreads evenly, then prints a side-by-side
table and writes report.html with plots (TTFT CDF, throughput over time, per-port utilization
heatmaps) to results/compare-<time>/. Needs root."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from zcube_lab.adapters.procs import interrupt_on_stop_signals
from zcube_lab.cli.commands.run import add_run_arguments, config_from_args
from zcube_lab.cli.fabric_options import (
    DEFAULT_GPUS,
    add_size_arguments,
    gpus_of,
    size_params,
    sized_specs,
)
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import FabricSpec

if TYPE_CHECKING:
    from zcube_lab.emulator.experiment.comparison import PlannedRun, Variant
    from zcube_lab.emulator.results.run.summary import RunSummary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fabrics, size, repeats, and the run options."""
    g = parser.add_argument_group("comparison")
    add_variant_arguments(g, "runs per fabric (medians reported)")
    g.add_argument(
        "--report-only",
        type=Path,
        nargs="+",
        metavar="RUN",
        help="run nothing: rebuild the report (the table and report.html) from the run "
        "folders RUN that earlier runs wrote (each its summary.json)",
    )
    add_run_arguments(parser)


def add_variant_arguments(g: argparse._ArgumentGroup, repeat_help: str) -> None:
    """The variants side by side (fabrics, size, policies, repeats, baseline): `compare`'s and
    `sweep`'s."""
    g.add_argument("--fabrics", default="zcube,roft", help="comma-separated fabric kinds")
    add_size_arguments(g, compared=True)
    g.add_argument(
        "--policies",
        help="comma-separated policies to run on every fabric (static, ecmp, ff, recompute, "
        "spray; default: --policy); results are labelled fabric/policy",
    )
    g.add_argument("--repeat", type=int, default=3, help=repeat_help)
    g.add_argument(
        "--retries",
        default="2",
        help="run a repeat again (same seed) when only the machine spoiled it (steal, other "
        "processes' load), up to this many times; a fabric's fault never (0: off)",
    )
    g.add_argument(
        "--baseline",
        default=None,
        help="fabric (or fabric/policy label) the differences are taken against (default: "
        "roft when compared, else the first fabric)",
    )


def run(args: argparse.Namespace) -> int:
    """Run the comparison and write the report."""
    from zcube_lab.emulator.experiment.comparison import port_capacities
    from zcube_lab.emulator.results.compare.report import write_report

    console = Console(stderr=True)
    kinds, specs, plan, baseline = _plan(args)
    out_dir = args.results / f"compare-{time.strftime('%Y%m%d-%H%M%S')}"
    status = 0
    if args.report_only is not None:
        runs = _report_only(args, kinds)
    else:
        runs, status = _run_all(plan, console, args.retries)
        if not runs:
            return status
    capacities = port_capacities(specs, args.nic_mbps, args.dilation)
    page = write_report(runs, out_dir, baseline, capacities)
    _print_table(runs, baseline, args)
    console.print(f"report: {page}")
    # A failed run fails the comparison; an interrupted one still reports what completed.
    return 1 if status == 1 else 0


def _plan(
    args: argparse.Namespace,
) -> tuple[list[str], dict[str, FabricSpec], list[PlannedRun], str]:
    """The compared fabrics, their specs, the interleaved runs and the baseline label: every
    run's configuration is validated before the first one starts (fail in seconds)."""
    from zcube_lab.emulator.experiment.comparison import interleave

    kinds, specs, variants, baseline = variants_from_args(args)
    return kinds, specs, interleave(variants, args.repeat), baseline


def variants_from_args(
    args: argparse.Namespace,
) -> tuple[list[str], dict[str, FabricSpec], list[Variant], str]:
    """The fabrics, their specs, the validated variants and the baseline label that
    `add_variant_arguments` and the run options describe (`compare`'s and `sweep`'s)."""
    from zcube_lab.emulator.experiment.comparison import (
        check_fault_prefixes,
        fabric_specs,
        plan_variants,
        resolve_baseline,
    )
    from zcube_lab.emulator.experiment.runloop import check_retries

    kinds = [k.strip() for k in args.fabrics.split(",") if k.strip()]
    sizes = size_params(args)
    gpus = args.gpus or next(filter(None, (gpus_of(k, sizes) for k in kinds)), DEFAULT_GPUS)
    specs = sized_specs(fabric_specs(kinds, gpus, spines=2, sizes=sizes), sizes)
    policies = [p.strip() for p in (args.policies or args.policy).split(",") if p.strip()]
    if args.repeat < 1:
        raise ConfigError("repeat", args.repeat, "at least 1")
    args.retries = check_retries(args.retries)  # before the first run starts
    check_fault_prefixes(args.fail, kinds)
    if policies:  # the base config carries a policy the variants then replace
        args.policy = policies[0]
    base = config_from_args(args, next(iter(specs.values()), None))
    variants = plan_variants(base, specs, policies)
    baseline = resolve_baseline(args.baseline, [v.label for v in variants])
    return kinds, specs, variants, baseline


def _report_only(args: argparse.Namespace, kinds: list[str]) -> list[RunSummary]:
    """The summaries of the run folders given to --report-only."""
    from zcube_lab.emulator.results.run.summary import RunSummary

    for p in args.report_only:
        if not (p / "summary.json").is_file():
            raise ConfigError("report_only", str(p), "run folders holding a summary.json")
    runs = [RunSummary.read(p) for p in args.report_only]
    unknown = sorted({r.fabric for r in runs} - set(kinds))
    if unknown:
        raise ConfigError("fabrics", args.fabrics, f"must include the runs' fabrics {unknown}")
    return runs


def _run_all(
    plan: list[PlannedRun], console: Console, retries: int | str = 2
) -> tuple[list[RunSummary], int]:
    """Run the plan: the summaries of the runs that completed, and 0, 1 if a run failed (the
    runs before it are kept) or 130 if interrupted."""
    from zcube_lab.emulator.experiment.comparison import run_planned
    from zcube_lab.emulator.lab.system import LabError
    from zcube_lab.emulator.prometheus.server import PrometheusError

    def progress(message: str) -> None:
        console.print(f"[dim]»[/dim] {message}")

    def starting(p: PlannedRun) -> None:
        console.rule(f"run {p.number}/{p.total}: {p.variant.label}, repeat {p.repeat}/{p.repeats}")

    interrupt_on_stop_signals()
    runs: list[RunSummary] = []
    try:
        for planned, result in run_planned(plan, progress, starting, retries):
            runs.append(result.summary)
            c = result.summary.client
            console.print(
                f"  {planned.variant.label}: {c.completed} done, {c.failed} failed, TTFT p99 "
                f"{c.ttft_p99_s or float('nan'):.3f}s -> {result.path}"
            )
    except (LabError, PrometheusError) as exc:
        console.print(f"[red]zcube-lab compare: {exc}[/red]")
        return runs, 1
    except KeyboardInterrupt:
        console.print("interrupted: the current run was torn down")
        return runs, 130
    return runs, 0


def _print_table(runs: list[RunSummary], baseline: str, args: argparse.Namespace) -> None:
    """The medians in the terminal, and the health of each run (every reason: report.html)."""
    from zcube_lab.emulator.results.compare.report import busiest_link, health_rows_of, variants
    from zcube_lab.emulator.results.compare.verdicttext import HEALTH_COLUMNS, health_summary

    Console().print(comparison_table(runs, baseline, args.workload, args.repeat))
    console = Console(stderr=True)
    rows = health_rows_of(runs, variants(runs, baseline))
    table = Table(title=escape(f"emulator health: {health_summary(rows)}"), title_justify="left")
    for name in HEALTH_COLUMNS:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*(_red_no(c) for c in row.cells()))
    console.print(table)
    console.print("[dim]every reason of every run: report.html, Emulator health[/dim]")
    for r in runs:
        console.print(f"[dim]{r.variant} {r.run}: busiest link {busiest_link(r)}[/dim]")


def comparison_table(runs: list[RunSummary], baseline: str, workload: str, repeat: int) -> Table:
    """The console table of the runs: a row per figure the runs have (no fault rows without a
    fault, no all-to-all rows without EP, no row empty in every run) and a column per variant
    and per difference for up to 3 variants, else a row per variant with the headline figures.
    With 2 variants it fits 100 columns: a cell wraps only at its space (before `[min-max]`) and
    a first reason too long for its column ends in an ellipsis (`compare` prints a health row
    per run after the table); a table that cannot fit folds its numbers rather than cut them."""
    from zcube_lab.emulator.results.compare.compare_metrics import shown_metrics
    from zcube_lab.emulator.results.compare.report import (
        aggregate,
        table_rows,
        variants,
        verdict_rows,
        with_interval_row,
    )

    fabrics = variants(runs, baseline)
    over = "one run each" if repeat == 1 else f"medians of {repeat} repeats"
    if len(fabrics) > 3:
        return _headline_table(runs, fabrics, f"{workload}: {over}")
    table = Table(title=escape(f"{workload}: {over}" + ("" if repeat == 1 else " [min-max]")))
    table.add_column("metric", no_wrap=True)
    for f in fabrics:
        table.add_column(f, justify="right", overflow="fold")
    for f in fabrics:
        if f != baseline:
            table.add_column(f"{f} vs {baseline}", justify="right")
    for row in verdict_rows(runs, fabrics, baseline):
        table.add_row(row[0], *(_one_line(_red_no(c)) for c in row[1:]))
    table.add_section()
    rows = table_rows(aggregate(runs), fabrics, baseline, shown_metrics(runs))
    for row in with_interval_row(rows, runs, fabrics, baseline):
        table.add_row(*row)
    return table


def _headline_table(runs: list[RunSummary], fabrics: list[str], title: str) -> Table:
    """Many variants: a row each with its verdict, `yes` or `no (k of n trusted)` (the runs'
    health follows the table), and the headline medians (all figures are in report.html)."""
    from zcube_lab.emulator.results.compare.report import (
        HEADLINE,
        aggregate,
        headline_columns,
        headline_rows,
    )

    agg = aggregate(runs)
    columns = headline_columns(agg, runs)
    table = Table(title=f"{title} (see the report)")
    table.add_column("run", no_wrap=True)
    table.add_column("trustworthy", no_wrap=True)
    for m in columns:
        table.add_column(HEADLINE[m], justify="right", overflow="fold")
    for row in headline_rows(agg, fabrics, runs, columns):
        table.add_row(row[0], _red_no(row[-2]), *row[1:-2])
    return table


def _one_line(markup: str) -> Text:
    """A cell on one line, cut with an ellipsis when its column is narrower."""
    text = Text.from_markup(markup, overflow="ellipsis")
    text.no_wrap = True
    return text


def _red_no(cell: str) -> str:
    """A verdict cell as console markup (a reason may hold brackets), red when it says no."""
    bad = cell.startswith(("no (", "not ", "rejected"))
    return f"[red]{escape(cell)}[/red]" if bad else escape(cell)
