"""Sweep the offered load from light to past saturation on each fabric, with the same seeded
requests at every rate (only the arrival gaps change; repeat k uses seed + k - 1) and repeats
interleaved, and judge every point against an SLO: goodput, whether it met the SLO, and each
fabric's capacity (per repeat the highest rate with every rate up to it met; "at least" when an
untrustworthy run stopped the walk) against the baseline's. Results go to
results/sweep-<time>/: the runs' folders, sweep.json and sweep.png. Needs root.

SLO: each target is a per-request threshold (ttft, tpot, e2e; s or ms); a point meets the SLO
when, for every target, at least its _pNN share (or --attainment) of the requests held it,
failed requests counting as misses.

A repeat's ramp ends at its first missed or untrustworthy rate (no higher rate can change its
capacity; --full-ladder runs them anyway, until a rate at which every repeat missed the SLO and
achieved below 90% of the offered rate or observed above 4x a target). The defaults (rates
1,2,4,8,16, 3 repeats of 30 s of arrivals and at most 30 s of drain) kept the default
two-fabric coding-agent sweep to 19.5 minutes on a 2-core machine; the start says how long it
may take, and each run how much is left at most.

example: zcube-lab sweep --rates 2,4,8,12,16 --slo ttft_p99=2s,tpot=100ms --repeat 2
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from zcube_lab.adapters.procs import interrupt_on_stop_signals
from zcube_lab.cli.commands.compare import add_variant_arguments, variants_from_args
from zcube_lab.cli.commands.run import add_run_arguments
from zcube_lab.core.errors import ConfigError

if TYPE_CHECKING:
    from zcube_lab.emulator.experiment.comparison import PlannedRun
    from zcube_lab.emulator.results.sweep.sweeppoints import SweepResult


SWEEP_DURATION_S = 30.0
SWEEP_DRAIN_S = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Rates, SLO, fabrics, repeats, and the run options."""
    s = parser.add_argument_group("sweep")
    s.add_argument(
        "--rates",
        default="1,2,4,8,16",
        help="offered requests/s, ascending: 1,2,4,8 or start:stop:xFACTOR (1:16:x2)",
    )
    s.add_argument(
        "--slo",
        help="required: per-request targets <ttft|tpot|e2e>[_pNN]=<value><s|ms>, comma-separated,"
        " e.g. ttft_p99=2s,tpot=50ms: 99%% of requests within 2 s to the first token, and a "
        "share --attainment (90%%) within 50 ms per output token, i.e. tpot's p90; tables and "
        "plots show each target with its percentile",
    )
    s.add_argument(
        "--attainment",
        type=float,
        default=0.9,
        help="share of requests that must meet a target written without _pNN, i.e. the "
        "percentile it sets (0.9: tpot=50ms means tpot_p90=50ms; DistServe's)",
    )
    s.add_argument(
        "--refine",
        type=int,
        default=0,
        metavar="N",
        help=(
            "after the ladder, N more rates per fabric bisecting its knee (last met-first "
            "missed); none for a fabric with an untrustworthy run at or below its first miss"
        ),
    )
    s.add_argument(
        "--resolution",
        type=float,
        metavar="SHARE",
        help="refuse a ladder and --refine that cannot bracket each knee to this share of its "
        "rate (0.1: 10%%), naming the --refine that would; capacity ratios are printed only "
        "as the brackets allow (`within X%%` when they hold 1)",
    )
    s.add_argument(
        "--full-ladder",
        action="store_true",
        help="run every rate of every repeat, past the rate where its capacity was settled "
        "(curves past the knee), until the variant is past saturation",
    )
    s.add_argument(
        "--report-only",
        type=Path,
        metavar="DIR",
        help="run nothing: rebuild the report (the tables and sweep.png) from the sweep "
        "folder DIR that an earlier sweep wrote (its sweep.json)",
    )
    add_variant_arguments(parser.add_argument_group("fabrics"), "runs per fabric and rate")
    add_run_arguments(parser, rate=False)
    # Shorter runs than `run`'s 60 s: every point is a run of its own (bring-up and collection
    # each time); points with few requests carry their p99's interval (sweeppoints).
    parser.set_defaults(duration=SWEEP_DURATION_S, drain=SWEEP_DRAIN_S)


def run(args: argparse.Namespace) -> int:
    """Run the sweep (or re-render one) and print its tables; 0 when it ran, even if points
    missed the SLO."""
    from zcube_lab.emulator.results.sweep.sweeppoints import SweepResult

    console = Console(stderr=True)
    if args.report_only is not None:
        result = SweepResult.read(args.report_only)
        _report(result, args.report_only, console)
        return 0
    from zcube_lab.emulator.experiment.sweep import wall_time_estimate

    plan, result = _plan(args)
    out_dir = result.dir
    assert out_dir is not None  # _plan names the folder
    least, most = wall_time_estimate(plan)
    console.print(
        f"sweep: at most {len(plan)} runs, about {least / 60:.0f}-{most / 60:.0f} min if every "
        f"rate runs (each repeat stops at its first miss, so usually less; --refine adds "
        f"runs), SLO {result.slo.shown} -> {out_dir}"
    )
    result, status = _run_all(plan, result, console, args.full_ladder, args.retries)
    if result.runs:
        _report(result, out_dir, console)
    # A failed run fails the sweep (the points before it are kept); missed SLOs do not.
    return status


def _plan(args: argparse.Namespace) -> tuple[list[PlannedRun], SweepResult]:
    """The planned runs and an empty result (its SLO, rates, baseline and folder): everything
    validated before the first run starts (fail in seconds)."""
    from zcube_lab.emulator.experiment.sweep import parse_rates, plan_sweep
    from zcube_lab.emulator.results.run.goodput import parse_slo
    from zcube_lab.emulator.results.sweep.capacity import check_resolution
    from zcube_lab.emulator.results.sweep.sweeppoints import SweepResult

    if not args.slo:
        raise ConfigError("slo", args.slo, "required: e.g. --slo ttft_p99=2s,tpot=50ms")
    if args.rate is not None:  # a hidden option (argparse would take --rate for --rates)
        raise ConfigError("rate", args.rate, "not used by sweep: give --rates")
    slo = parse_slo(args.slo, args.attainment)
    rates = parse_rates(args.rates)
    if not 0 <= args.refine <= 10:
        raise ConfigError("refine", args.refine, "0 (off) to 10 bisection rates")
    check_resolution(rates, args.refine, args.resolution)
    out_dir = args.results.resolve() / f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"
    args.results = out_dir  # the runs' folders go inside the sweep's
    _kinds, _specs, variants, baseline = variants_from_args(args)
    plan = plan_sweep(variants, rates, args.repeat)
    labels = tuple(v.label for v in variants)
    empty = SweepResult(args.workload, slo, rates, args.repeat, baseline, labels, (), out_dir,
                        refine=args.refine)  # fmt: skip
    return plan, empty


def _run_all(
    plan: list[PlannedRun],
    result: SweepResult,
    console: Console,
    full_ladder: bool = False,
    retries: int | str = 2,
) -> tuple[SweepResult, int]:
    """Run the sweep, rewriting sweep.json after every run: the result with the points of the
    runs that completed, and 0, 1 if a run failed or 130 if interrupted."""
    from zcube_lab.emulator.experiment.sweep import run_sweep
    from zcube_lab.emulator.lab.system import LabError
    from zcube_lab.emulator.prometheus.server import PrometheusError
    from zcube_lab.emulator.results.sweep.sweeppoints import rate_tag

    def progress(message: str) -> None:
        console.print(f"[dim]»[/dim] {message}")

    began = time.monotonic()
    started: list[PlannedRun] = []

    def starting(p: PlannedRun) -> None:
        rate = rate_tag(p.config.rate or 0)
        console.rule(
            f"run {p.number}/{p.total}: {p.variant.label} at {rate} req/s, "
            f"repeat {p.repeat}/{p.repeats}{_eta(time.monotonic() - began, started, p)}"
        )
        started.append(p)

    def skipped(p: PlannedRun) -> None:
        console.print(
            f"[dim]skip run {p.number}/{p.total}: {p.variant.label} at "
            f"{rate_tag(p.config.rate or 0)} req/s, repeat {p.repeat} (its capacity is settled "
            f"below: a miss or an untrustworthy run)[/dim]"
        )

    interrupt_on_stop_signals()
    assert result.dir is not None
    try:
        ramp = run_sweep(plan, result.slo, progress, starting, skipped, refine=result.refine,
                         full_ladder=full_ladder, retries=retries)  # fmt: skip
        for pt in ramp:
            result = replace(result, runs=(*result.runs, pt))
            result.write(result.dir)
            met = "met" if pt.slo_met else "missed"
            trust = "" if pt.trustworthy else " [red]NOT TRUSTWORTHY[/red]"
            console.print(
                f"  {pt.variant} at {rate_tag(pt.rate)} req/s: "
                f"{pt.achieved_per_s or 0:.2f} req/s achieved, TTFT p99 "
                f"{pt.ttft_p99_s or float('nan'):.3f}s, goodput {pt.goodput_per_s or 0:.2f}, "
                f"SLO {met}{trust} -> {pt.run}"
            )
    except (LabError, PrometheusError) as exc:
        console.print(f"[red]zcube-lab sweep: {escape(str(exc))}[/red]")
        return result, 1
    except KeyboardInterrupt:
        console.print("interrupted: the current run was torn down")
        return result, 130
    return result, 0


def _eta(elapsed_s: float, started: list[PlannedRun], now: PlannedRun) -> str:
    """` (12 min so far, at most ~20 min left)`: the runs not yet run or skipped, at the
    mean wall time of the runs done so far (none before the first run ends)."""
    if not started:
        return ""
    per_run = elapsed_s / len(started)
    left = (now.total - now.number + 1) * per_run
    return f" ({elapsed_s / 60:.0f} min so far, at most ~{left / 60:.0f} min left)"


def _report(result: SweepResult, out_dir: Path, console: Console) -> None:
    """sweep.png, the points table and the max-rate table."""
    from zcube_lab.emulator.results.sweep.sweepreport import (
        MAX_RATE_COLUMNS,
        POINT_COLUMNS,
        TOKENS_COLUMNS,
        max_rate_rows,
        plot_sweep,
        point_rows,
        structure_report,
        tokens_rows,
    )

    png = plot_sweep(result, out_dir / "sweep.png")
    out = Console()
    table = Table(title=escape(f"{result.workload}: SLO {result.slo.shown}, medians [min-max]"))
    rows = point_rows(result)
    last = len(POINT_COLUMNS) - 1
    notes: list[str] = []
    for row in rows:  # the reasons go under the table, so a narrow terminal keeps its columns
        verdict, sep, reason = row[last].partition(": ")
        if sep:
            notes.append(f"[{len(notes) + 1}] {row[1]} at {row[0]} req/s: {reason}")
            row[last] = f"{verdict} [{len(notes)}]"
    for i, name in enumerate(POINT_COLUMNS):
        # a narrow terminal wraps a figure at the space before its [min-max]
        left = i in (1, last) or name == "SLO met"
        table.add_column(name, justify="left" if left else "right", overflow="fold")
    for row in rows:
        table.add_row(*(_red_no(c) for c in row))
    out.print(table)
    for note in notes:
        out.print(escape(note), soft_wrap=True)
    out.print(escape(_samples_note(result)))
    table = Table(
        title=f"capacity: the highest rate with every rate up to it met (>= censored), vs "
        f"{result.baseline}"
    )
    for name in MAX_RATE_COLUMNS:
        table.add_column(name, no_wrap=name != "notes", overflow="ellipsis")
    for row in max_rate_rows(result):
        table.add_row(*(escape(c) for c in row))
    out.print(table)
    out.print(escape(structure_report(result, out_dir)))
    table = Table(title="GPU throughput at capacity: tokens per GPU-second, median over repeats")
    for name in TOKENS_COLUMNS:
        table.add_column(name)
    for row in tokens_rows(result):
        table.add_row(*(escape(c) for c in row))
    out.print(table)
    console.print(f"sweep: {out_dir / 'sweep.json'}\nplot: {png}")


def _samples_note(result: SweepResult) -> str:
    """What the CI and vLLM goodput columns are."""
    from zcube_lab.emulator.results.run.goodput import vllm_goodput_arg
    from zcube_lab.emulator.results.sweep.sweeppoints import ENOUGH_SAMPLES

    return (
        f"TTFT p99 95% CI: order-statistic [low, high] of a point with few samples "
        f"(`unbounded`: an end its samples cannot bound), `few (n)`: a "
        f"repeat below {ENOUGH_SAMPLES} requests, n the fewest; vLLM goodput: req/s as `vllm "
        f"bench serve --goodput "
        f"{vllm_goodput_arg(result.slo)}` counts them (start to last response)"
    )


def _red_no(c: str) -> str:
    """A cell as console markup (a reason may hold brackets), red when it says no."""
    return f"[red]{escape(c)}[/red]" if c == "no" or c.startswith("no (") else escape(c)
