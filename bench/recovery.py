"""Benchmark: what each policy does when a link under KV traffic dies mid-run (issue 6).

For each fabric and policy, `--repeat` real runs (`zcube-lab run` machinery: Mininet, our
controller, the serving cluster, Prometheus, Locust) with the same workload, seed and fault: one
fabric link next to the prefill engines' switch goes down `--at` seconds into the load for
`--for` seconds. Runs are interleaved (repeat-major) so machine noise spreads evenly. Prints,
per fabric and policy, the medians [min-max] of: TTFT p99 overall and during the fault, completed
requests/s, failed requests, retried KV transfers, retired subflows, KV bytes lost, and the
recovery times (onset to the first and to the last KV transfer hit by the fault completing;
throughput back to 90% of the pre-fault rate). Saves every run under `--results` and the table
as JSON next to them.

    sudo .venv/bin/python -m bench.recovery                       # zcube,roft x 5 policies x 3
    sudo .venv/bin/python -m bench.recovery --fabrics zcube --policies ff,spray --repeat 1

The fault per fabric (`FAULTS`, or `--link roft=leaf0-spine0#0`): ZCube `a0-b1` (the prefill
servers' A switch to a B switch, its only link: half of every KV pull towards rail-1 decode
engines crosses it); ROFT `leaf0-spine0` (the rail-0 prefill leaf to spine 0: both parallel
links of the pair, so spine 0 loses leaf 0 entirely; `#0` cuts only one of them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from zcube_lab.core.fabric.placement import LayoutSpec
from zcube_lab.emulator.experiment.comparison import (
    PlannedRun,
    Variant,
    fabric_specs,
    interleave,
    plan_variants,
    run_planned,
)
from zcube_lab.emulator.experiment.plan import RunConfig
from zcube_lab.emulator.results.compare.compare_metrics import (
    Getter,
    fault_figure,
    figure,
    recovery_figure,
)
from zcube_lab.emulator.results.compare.report import median_spread
from zcube_lab.emulator.results.run.summary import RunSummary
from zcube_lab.workloads.profiles import load_profile

ROOT = Path(__file__).resolve().parents[1]

FAULTS = {"zcube": "link a0-b1", "roft": "link leaf0-spine0", "clos": "link leaf0-spine0"}
COLUMNS: tuple[tuple[str, Getter], ...] = (
    ("TTFT p99 (s)", lambda s: s.client.ttft_p99_s),
    ("TTFT p99 before (s)", recovery_figure(lambda f: f.ttft_p99_before_s)),
    ("TTFT p99 during (s)", recovery_figure(lambda f: f.ttft_p99_during_s)),
    ("TTFT p99 after (s)", recovery_figure(lambda f: f.ttft_p99_after_s)),
    ("req/s", lambda s: s.client.requests_per_s),
    ("failed", lambda s: s.client.failed),
    ("KV retried", fault_figure(lambda f: f.kv_retried)),
    ("subflows retired", fault_figure(lambda f: f.kv_lanes_retired)),
    ("KV bytes never delivered", fault_figure(lambda f: f.kv_bytes_lost)),
    ("KV checksum failures", fault_figure(lambda f: f.kv_checksum_failures)),
    ("recovery first KV (s)", recovery_figure(lambda f: f.recovery_kv_first_s)),
    ("recovery last KV (s)", recovery_figure(lambda f: f.recovery_kv_all_s)),
    ("recovery throughput (s)", recovery_figure(lambda f: f.recovery_throughput_s)),
    ("KV transfers hit", recovery_figure(lambda f: f.kv_hit_transfers)),
)
Rows = dict[tuple[str, str], list[RunSummary]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fabrics", default="zcube,roft")
    parser.add_argument("--policies", default="static,ecmp,ff,recompute,spray")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workload", default="coding-agent")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of arrivals")
    parser.add_argument("--at", type=float, default=10.0, help="fault onset (s into the load)")
    parser.add_argument("--for", dest="length", type=float, default=10.0, help="fault length")
    parser.add_argument("--rate", type=float, help="requests/s (default: the profile's)")
    parser.add_argument(
        "--link",
        action="append",
        default=[],
        metavar="FABRIC=LINK",
        help="the link to cut on a fabric instead of FAULTS', e.g. roft=leaf0-spine0#0",
    )
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "bench-recovery")
    parser.add_argument(
        "--table-only", action="store_true", help="only print the table of the runs in --results"
    )
    args = parser.parse_args()
    rows: Rows = {}
    if args.table_only:
        for path in sorted(args.results.glob("*/summary.json")):
            s = RunSummary.read(path.parent)
            rows.setdefault((s.fabric, s.policy or "ecmp"), []).append(s)
        print_table(rows, args.results)
        return 0
    args.results.mkdir(parents=True, exist_ok=True)
    started = [0.0]

    def starting(p: PlannedRun) -> None:
        v = p.variant
        fault = v.config.faults[0]
        print(f"[{p.number}/{p.total}] {v.kind} {v.policy} repeat {p.repeat}: {fault}", flush=True)
        started[0] = time.monotonic()

    plan = interleave(variants(args), args.repeat, tag_policy=True)
    for planned, result in run_planned(plan, starting=starting):
        v, s = planned.variant, result.summary
        rows.setdefault((v.kind, v.policy), []).append(s)
        rec = s.faults.recovery if s.faults is not None else None
        print(
            f"    {time.monotonic() - started[0]:.0f}s: failed {s.client.failed}, "
            f"TTFT p99 {s.client.ttft_p99_s}, "
            f"during {rec and rec.ttft_p99_during_s}, "
            f"recovery {rec and rec.recovery_kv_first_s}/{rec and rec.recovery_kv_all_s}, "
            f"trustworthy {s.trustworthy}",
            flush=True,
        )
    print_table(rows, args.results)
    return 0


def variants(args: argparse.Namespace) -> list[Variant]:
    """Every fabric with every policy, the fault on the fabric's link; the prefix-cache hit rate
    is the workload profile's, as `zcube-lab run` takes it."""
    faults = dict(FAULTS)
    for item in args.link:
        fabric, _, link = item.partition("=")
        faults[fabric] = f"link {link}"
    fabrics = [f for f in args.fabrics.split(",") if f]
    policies = [p for p in args.policies.split(",") if p]
    specs = fabric_specs(fabrics, 16, 2)
    timing = f"at {args.at:g}s for {args.length:g}s"
    base = RunConfig(
        fabric=specs[fabrics[0]],
        workload=args.workload,
        duration_s=args.duration,
        rate=args.rate,
        layout=LayoutSpec(),
        prefix_cache_hit_rate=load_profile(args.workload).prefix_cache_hit_rate,
        drain_s=45.0,
        results_root=args.results,
    )
    per_fabric = {k: (f"{faults[k]} {timing}",) for k in fabrics}
    return plan_variants(base, specs, policies, faults=per_fabric)


def print_table(rows: Rows, results: Path) -> None:
    """The medians table, and the same as JSON in `results`."""
    heads = ["fabric", "policy", "runs", *(c for c, _ in COLUMNS)]
    table = []
    for (fabric, policy), summaries in rows.items():
        cells = [
            median_spread([v for s in summaries if (v := figure(s, get)) is not None])
            for _, get in COLUMNS
        ]
        table.append([fabric, policy, str(len(summaries)), *cells])
    print("\n| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))
    for row in table:
        print("| " + " | ".join(row) + " |")
    untrusted = [s.run for summaries in rows.values() for s in summaries if not s.trustworthy]
    print(f"\nruns not trustworthy (emulator saturated): {untrusted or 'none'}")
    out = results / f"recovery-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(
        json.dumps(
            {"columns": heads, "rows": table, "runs": [s.run for v in rows.values() for s in v]},
            indent=2,
        )
        + "\n"
    )
    print(f"saved {out}")


if __name__ == "__main__":
    sys.exit(main())
