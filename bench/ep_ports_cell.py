"""The expert-parallel map cell on the structure-keeping fabrics, EP on both ports against one
(issue 32 item 5): the same sweep as `zcube-lab sweep` (its plan, stop rule, SLO verdict and
`sweep.json`), once with `--ep-ports all` and once with `--ep-ports one`, the two sweeps' runs
interleaved, each run under /tmp/zcube-heavy.lock so other work can run between them.

    .venv/bin/python -m bench.ep_ports_cell --fabrics zcube,roft --rates 0.5,1,2 --repeat 3 \\
        --results results/ep-ports
    .venv/bin/python -m bench.map_cell --name ep-ports-all results/ep-ports/sweep-all \\
        --out bench/results/map/ep-ports-all.json    # and the same for sweep-one
    .venv/bin/python -m bench.ep_ports_cell --fabrics zcube,roft --modes all,all+dbo,all+nl1 \\
        --results results/ep-wire      # the modelling choices of the wire, side by side

A mode is the `--ep-ports` value, then `+dbo` (dual-batch overlap on) and `+nlN` (each token
routed to at most N nodes) where wanted; a mode without them keeps the model profile's.

The scenario is the map's EP cell (`rail-aligned`, 2-server EP instances exchanging rank to
rank, `--alltoall rail`, 30 s of arrivals, 30 s of drain, SLO ttft_p99=2s,tpot=50ms), its
prefill servers scaled with the servers (2 of 4 then, 4 of 8 on the default 16-GPU fabrics of
2 GPUs per server). Needs root.
"""

from __future__ import annotations

import argparse
import fcntl
from collections.abc import Iterator
from dataclasses import replace
from itertools import zip_longest
from pathlib import Path

from zcube_lab.core.fabric.placement import LayoutSpec
from zcube_lab.core.options import from_args
from zcube_lab.emulator.experiment.comparison import (
    PlannedRun,
    fabric_specs,
    plan_variants,
    run_planned,
)
from zcube_lab.emulator.experiment.launcher import RunResult
from zcube_lab.emulator.experiment.runconfig import RunConfig, profile_fallback
from zcube_lab.emulator.experiment.sweep import parse_rates, plan_sweep, run_sweep
from zcube_lab.emulator.results.run.goodput import parse_slo
from zcube_lab.emulator.results.sweep.sweeppoints import RunPoint, SweepResult

LOCK = Path("/tmp/zcube-heavy.lock")
WORKLOAD = "rail-aligned"
SLO = "ttft_p99=2s,tpot=50ms"


def locked_run(planned: PlannedRun) -> RunResult:
    """One run of the sweep under the heavy lock (the wait for it not counted)."""
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            c = planned.config
            print(f"» {c.tag} {planned.variant.label} ports {c.ep_ports} dbo {c.ep_dbo} "
                  f"node limit {c.ep_node_limit}", flush=True)  # fmt: skip
            return next(iter(run_planned([planned])))[1]
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def parse_mode(mode: str) -> dict[str, object]:
    """A mode's run options: `all`, `one`, each optionally followed by `+dbo` and `+nlN`."""
    ports, *extras = mode.split("+")
    given: dict[str, object] = {"ep_ports": ports}
    for extra in extras:
        if extra == "dbo":
            given["ep_dbo"] = True
        elif extra.startswith("nl") and extra[2:].isdigit():
            given["ep_node_limit"] = int(extra[2:])
        else:
            raise SystemExit(f"--modes: {mode!r}: after the ports, +dbo or +nlN (N nodes), "
                             f"not {extra!r}")  # fmt: skip
    return given


def base_config(args: argparse.Namespace, mode: str, results: Path) -> RunConfig:
    """The EP cell's run options, as `zcube-lab sweep` would parse them."""
    fallback = profile_fallback(WORKLOAD)
    layout = LayoutSpec(
        prefill_servers=args.prefill_servers,
        ep_servers=2,
        alltoall="rail",
        layout=fallback["layout"],
    )
    given = {
        "workload": WORKLOAD,
        "duration_s": 30.0,
        "drain_s": 30.0,
        "layout": layout,
        **parse_mode(mode),
        "results_root": results,
        "seed": args.seed,
    }
    specs = fabric_specs(["zcube"], args.gpus, 2)
    return from_args(RunConfig, argparse.Namespace(), fallback, fabric=specs["zcube"], **given)


def sweep(args: argparse.Namespace, mode: str) -> tuple[SweepResult, Iterator[RunPoint]]:
    """One mode's empty result and the generator of its points."""
    out = args.results / f"sweep-{mode.replace('+', '-')}"
    kinds = [k for k in args.fabrics.split(",") if k]
    specs = fabric_specs(kinds, args.gpus, 2)
    variants = plan_variants(base_config(args, mode, out), specs, ["ecmp"])
    rates = parse_rates(args.rates)
    plan = plan_sweep(variants, rates, args.repeat)
    slo = parse_slo(SLO, 0.9)
    labels = tuple(v.label for v in variants)
    empty = SweepResult(WORKLOAD, slo, rates, args.repeat, "roft", labels, (), out)
    return empty, run_sweep(plan, slo, execute=locked_run)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--fabrics", default="zcube,roft", help="fabrics, comma-separated")
    parser.add_argument("--rates", default="0.5,1,2", help="offered requests/s, ascending")
    parser.add_argument("--repeat", type=int, default=3, help="seeds per rate (seed, seed+1...)")
    parser.add_argument("--seed", type=int, default=1, help="the first repeat's seed")
    parser.add_argument("--gpus", type=int, default=16, help="GPUs of each fabric")
    parser.add_argument(
        "--prefill-servers", type=int, default=4, help="servers that prefill (the rest decode)"
    )
    parser.add_argument(
        "--modes", "--ports", default="all,one",
        help="the modes, interleaved: an --ep-ports value, then +dbo and +nlN where wanted",
    )  # fmt: skip
    parser.add_argument(
        "--results", type=Path, default=Path("results/ep-ports"), help="one sweep-MODE per mode"
    )
    args = parser.parse_args()
    results, gens = {}, []
    for mode in args.modes.split(","):
        parse_mode(mode)  # a bad mode is refused before any run
        results[mode], gen = sweep(args, mode)
        results[mode].dir.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
        gens.append((mode, gen))
    # one run of each mode in turn, so machine load falls on both alike
    for step in zip_longest(*(g for _, g in gens)):
        for (mode, _), point in zip(gens, step, strict=True):
            if point is None:
                continue
            res = results[mode]
            results[mode] = replace(res, runs=(*res.runs, point))
            results[mode].write(res.dir)  # type: ignore[arg-type]
            print(f"  {mode}: {point.variant} at {point.rate} req/s seed-repeat {point.repeat}: "
                  f"TTFT p99 {point.ttft_p99_s}, SLO {'met' if point.slo_met else 'missed'}, "
                  f"trustworthy {point.trustworthy} -> {point.run}", flush=True)  # fmt: skip
    for mode, res in results.items():
        print(mode, [(m.variant, m.capacity.to_dict()) for m in res.max_rates()], flush=True)


if __name__ == "__main__":
    main()
