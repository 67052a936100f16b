"""Benchmark: time dilation validated by convergence (issue 20, item 5). Needs root.

The same point (fabric, workload, rate, seed) is run at k = 1, 2, 4 (8) and its modelled
figures compared across k: client TTFT p50/p99, TPOT p50, and the exact KV pull time p50/p99
(summary.json, all in modelled seconds). The emulator's fixed costs (Python per message, a KV
pull's set-up) shrink by k in modelled time, so figures move as k grows and settle once those
costs are small against the model; the smallest k whose figures agree with 2k's (5% at p50, 10%
at p99), with every run of both trustworthy and the trend from k on monotone, is the cheapest
faithful one (`validated_k`). A trend that turns back beyond the tolerance means something on the
kernel's clock is left (docs/DOMAIN.md §4 lists what is).

Each (point, k) is repeated with different seeds; the seed changes the requests, so figures are
compared as medians over the same seeds at every k, with their spread (min-max) printed.

Analytic anchors at the light point, per k: a KV pull's time over its ideal bytes * 8 / path rate
(`kv_xfer_ratio_p50`, 1.0 when nothing but the link is in the way), and the prefill engines' mean
wait against the M/D/c mean for the arrival rate (completed requests / duration), the measured
mean compute time D and c = the prefill engines (M/D/1's `rho D / (2 (1 - rho))` when c = 1,
half the M/M/c wait otherwise: the gateway's least-outstanding choice makes the prefills close
to one queue with c servers). The engines' `vllm:request_queue_time_seconds` and
`vllm:request_prefill_time_seconds` are read back from the run's Prometheus TSDB afterwards.
Prefill batches waiting requests into one step and compute times vary, so the anchor is loose:
a wait of the model's order and the same at every k is what it checks.

The wall time of a run grows with k, so the default points are small: ZCube n=2 (4 GPU hosts:
2 prefill, 2 decode), coding-agent, 20 modelled seconds of arrivals. Results are merged into
`--out` by (point, k, seed), so the ladder can be run in pieces (e.g. `--ks 1,2` then `--ks 4`)
and `--report` prints the table from what was saved. The verdict alone (points and validated k)
also goes to `--ladder`, the package data `zcube-lab run` quotes to a dilated run
(`zcube_lab/data/dilation_ladder.json`, read by
`zcube_lab.emulator.results.run.dilation.read_ladder`).

    sudo .venv/bin/python -m bench.dilation_ladder --points light --ks 1,2,4 --seeds 1,2
    sudo .venv/bin/python -m bench.dilation_ladder --points heavy --ks 1,2,4 --seeds 1,2
    .venv/bin/python -m bench.dilation_ladder --report
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from bench.labrun import LabRun
from zcube_lab.adapters.procs import raise_interrupt
from zcube_lab.emulator.prometheus.config import scrape_config
from zcube_lab.emulator.prometheus.server import PrometheusServer
from zcube_lab.emulator.results.run.dilation import LADDER_FILE
from zcube_lab.emulator.results.run.summary import RunSummary
from zcube_lab.emulator.verdict.combine import Judged, all_trustworthy, over_runs

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "bench" / "results" / "dilation_ladder.json"


@dataclass(frozen=True)
class Point:
    """A ladder point: the workload, its rate and the fabric's `zcube-lab run` options."""

    workload: str
    rate: float
    fabric: tuple[str, ...] = ("--fabric", "zcube", "--n", "2", "--gpus-per-server", "2")
    options: tuple[str, ...] = ()  # more `zcube-lab run` options (the congestion model)


# light and heavy: ZCube n=2 (4 GPU hosts), small enough for k=8. kv-heavy-60: the 16-GPU
# kv-heavy scenario at its decode-NIC 60% point (issue 20's goal: about 47 req/s by the
# profile's arithmetic), where links, not the CPU, load up: lossy (the default model, whose
# incast drops end in TCP retransmission timeouts the verdict counts against the run) and
# lossless (`--lossless`: PFC-like pauses instead of drops).
ZCUBE16 = ("--fabric", "zcube", "--n", "4", "--gpus-per-server", "4")  # the sizes measured
POINTS: dict[str, Point] = {
    "light": Point("coding-agent", 1.0),
    "heavy": Point("coding-agent", 4.0),
    "kv-heavy-60": Point("kv-heavy", 47.0, ZCUBE16),
    "kv-heavy-60-lossless": Point("kv-heavy", 47.0, ZCUBE16, ("--lossless",)),
}
# Judged figures: (name, the row's field, tolerance between k and 2k).
P50_TOLERANCE, P99_TOLERANCE = 0.05, 0.10
FIGURES: tuple[tuple[str, str, float], ...] = (
    ("TTFT p50", "ttft_p50_s", P50_TOLERANCE),
    ("TTFT p99", "ttft_p99_s", P99_TOLERANCE),
    ("TPOT p50", "tpot_p50_s", P50_TOLERANCE),
    ("KV p50", "kv_p50_s", P50_TOLERANCE),
    ("KV p99", "kv_p99_s", P99_TOLERANCE),
)


@dataclass(frozen=True)
class Row:
    """One run of the ladder: what it measured (modelled seconds) and whether to trust it."""

    point: str
    k: float
    seed: int
    run: str
    trustworthy: bool
    reasons: tuple[str, ...]
    machine_cpu_mean: float | None
    completed: int
    failed: int
    duration_s: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    kv_p50_s: float | None
    kv_p99_s: float | None
    kv_ratio_p50: float | None
    prefills: int
    prefill_queue_mean_s: float | None = None
    prefill_time_mean_s: float | None = None
    wall_s: float | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Row:
        values = dict(data)
        values["reasons"] = tuple(values.get("reasons") or ())
        return cls(**values)


# --- pure: the ladder's verdict ---------------------------------------------------------------


def median(values: Iterable[float | None]) -> float | None:
    """The median of the values that are not None (None when none is)."""
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def level(
    rows: Sequence[Row], point: str, k: float, field: str
) -> tuple[float | None, float, float]:
    """(median, min, max) over the seeds of `field` at (point, k); (None, nan, nan) without."""
    values = [getattr(r, field) for r in rows if r.point == point and r.k == k]
    present = [v for v in values if v is not None]
    if not present:
        return None, float("nan"), float("nan")
    return statistics.median(present), min(present), max(present)


def relative_change(a: float | None, b: float | None) -> float | None:
    """(b - a) / a; None when either is missing or a is 0."""
    if a is None or b is None or a == 0:
        return None
    return (b - a) / a


def monotone(values: Sequence[float | None], tolerance: float) -> bool:
    """Whether the sequence moves one way only, steps back of up to `tolerance` (relative)
    allowed; missing values are skipped."""
    present = [v for v in values if v is not None]
    moves = [s for a, b in pairwise(present) if (s := relative_change(a, b)) is not None]
    return all(s >= -tolerance for s in moves) or all(s <= tolerance for s in moves)


@dataclass(frozen=True)
class Check:
    """k against 2k at one point: each figure's relative change, and the verdict."""

    point: str
    k: float
    changes: dict[str, float | None]  # figure name -> (value at 2k - value at k) / value at k
    trustworthy: bool  # every run at k and at 2k
    monotone: bool  # every figure's trend over the ladder from k on
    agree: bool

    @property
    def accepted(self) -> bool:
        return self.agree and self.trustworthy and self.monotone


def checks(rows: Sequence[Row], point: str) -> list[Check]:
    """One check per k of the point whose 2k was run too, in order of k."""
    ks = sorted({r.k for r in rows if r.point == point})
    out = []
    for k in ks:
        if 2 * k not in ks:
            continue
        changes: dict[str, float | None] = {}
        agree, steady = True, True
        for name, field, tolerance in FIGURES:
            change = relative_change(
                level(rows, point, k, field)[0], level(rows, point, 2 * k, field)[0]
            )
            changes[name] = change
            agree = agree and change is not None and abs(change) <= tolerance
            trend = [level(rows, point, j, field)[0] for j in ks if j >= k]
            steady = steady and monotone(trend, tolerance)
        trusted = all_trustworthy(r for r in rows if r.point == point and r.k in (k, 2 * k))
        out.append(Check(point, k, changes, trusted, steady, agree))
    return out


def validated_k(rows: Sequence[Row], point: str) -> float | None:
    """The smallest k of the point that agrees with 2k, trusted and monotone; None if none."""
    return next((c.k for c in checks(rows, point) if c.accepted), None)


def erlang_c(servers: int, offered: float) -> float:
    """The probability that an arrival waits in M/M/c with `servers` and `offered` = rate x
    mean service (Erlang's C formula); offered < servers."""
    term, total = 1.0, 1.0  # a^n / n!, summed for n < c
    for n in range(1, servers):
        term *= offered / n
        total += term
    last = term * offered / servers / (1 - offered / servers)  # a^c / c! / (1 - rho)
    return last / (total + last)


def mdc_wait_s(rate_per_s: float, service_s: float, servers: int = 1) -> float | None:
    """The mean wait of M/D/c: half the M/M/c wait (exact for c = 1, where it is M/D/1's
    `rho D / (2 (1 - rho))`; the usual approximation for c > 1); None when unstable."""
    offered = rate_per_s * service_s
    if offered >= servers:
        return None
    return 0.5 * erlang_c(servers, offered) * service_s / (servers - offered)


def queue_anchor(row: Row) -> tuple[float | None, float | None]:
    """(measured mean prefill wait, M/D/c mean with c = the prefill engines) of a run, in
    modelled seconds. The gateway sends each request to the least busy prefill, which is
    closer to one queue with c servers than to c queues of M/D/1."""
    if row.prefill_time_mean_s is None or row.prefills < 1 or row.duration_s <= 0:
        return row.prefill_queue_mean_s, None
    rate = row.completed / row.duration_s
    return row.prefill_queue_mean_s, mdc_wait_s(rate, row.prefill_time_mean_s, row.prefills)


def merge(saved: Sequence[Row], new: Sequence[Row]) -> list[Row]:
    """`saved` with `new` added, a new row replacing a saved one of the same (point, k, seed)."""
    key = {(r.point, r.k, r.seed): r for r in saved}
    key.update({(r.point, r.k, r.seed): r for r in new})
    return sorted(key.values(), key=lambda r: (r.point, r.k, r.seed))


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def report(rows: Sequence[Row]) -> list[str]:
    """The ladder as text: per point and k, each figure's median (min-max) in ms over the
    seeds, the runs' CPU and verdicts; then each k-vs-2k check, the anchors, the validated k."""
    lines: list[str] = []
    for point in sorted({r.point for r in rows}):
        ks = sorted({r.k for r in rows if r.point == point})
        lines.append(f"{point}: " + ", ".join(f"{n} ms" for n, _, _ in FIGURES))
        for k in ks:
            runs = [r for r in rows if r.point == point and r.k == k]
            cells = []
            for _, field, _ in FIGURES:
                mid, lo, hi = level(rows, point, k, field)
                cells.append(f"{_ms(mid)} ({_ms(lo)}-{_ms(hi)})" if mid is not None else "-")
            cpu = median(r.machine_cpu_mean for r in runs)
            verdict = over_runs(Judged(r.run, r.trustworthy, r.reasons) for r in runs)
            lines.append(
                f"  k={k:g}: " + " | ".join(cells)
                + f" | CPU {'-' if cpu is None else f'{cpu:.0%}'},"
                + f" {verdict.trusted}/{verdict.runs} trusted"
            )  # fmt: skip
        for c in checks(rows, point):
            moves = ", ".join(
                f"{n} {'-' if v is None else f'{v:+.1%}'}" for n, v in c.changes.items()
            )
            verdict = "accepted" if c.accepted else "not accepted"
            why = [
                w
                for w, bad in (
                    ("disagree", not c.agree),
                    ("untrusted runs", not c.trustworthy),
                    ("non-monotone", not c.monotone),
                )
                if bad
            ]
            lines.append(
                f"  k={c.k:g} vs {2 * c.k:g}: {moves}: {verdict}"
                + (f" ({', '.join(why)})" if why else "")
            )
        for k in ks:
            runs = [r for r in rows if r.point == point and r.k == k]
            ratio = median(r.kv_ratio_p50 for r in runs)
            measured = median(queue_anchor(r)[0] for r in runs)
            model = median(queue_anchor(r)[1] for r in runs)
            lines.append(
                f"  anchors k={k:g}: KV time / ideal p50 {'-' if ratio is None else f'{ratio:.2f}'}"
                f"; prefill wait {_ms(measured)} ms against M/D/c {_ms(model)} ms"
            )
        found = validated_k(rows, point)
        lines.append(f"  validated k: {'none' if found is None else f'{found:g}'}")
    return lines


# --- adapter: the runs ------------------------------------------------------------------------


def prefill_means(run_dir: Path, after: float) -> tuple[float | None, float | None]:
    """The prefill engines' mean wait and compute (modelled seconds), read from a copy of the
    run's Prometheus TSDB with a Prometheus of its own (the run's folder is left as it is)."""
    tsdb = run_dir / "prometheus" / "tsdb"
    if not tsdb.is_dir():
        return None, None
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(tsdb, Path(tmp) / "tsdb", ignore=shutil.ignore_patterns("snapshots"))
        text = scrape_config({"none": ["127.0.0.1:9"]})

        def mean(metric: str) -> float | None:
            def total(part: str) -> str:
                return f'sum(max_over_time({metric}_{part}{{job="prefill"}}[1h]))'

            return prom.query_value(f"{total('sum')} / {total('count')}", time=after)

        with PrometheusServer(text, tmp) as prom:
            return (
                mean("vllm:request_queue_time_seconds"),
                mean("vllm:request_prefill_time_seconds"),
            )


def _row(point: str, k: float, seed: int, summary: RunSummary, duration: float, wall: float) -> Row:
    health = summary.health.to_dict()
    t = summary.transfers
    c = summary.client
    records = [json.loads(x) for x in (summary.dir / "requests.jsonl").read_text().splitlines()]
    # A record's e2e is modelled (the load generator's); it ended that long later on the wall.
    ends = [
        r["wall_time"] + summary.clock.wall(r.get("e2e_s") or 0)
        for r in records
        if r.get("wall_time")
    ]
    queue, compute = prefill_means(summary.dir, max(ends, default=time.time()) + 5)
    prefills = len(list((summary.dir / "logs").glob("prefill-*.log")))
    return Row(
        point=point,
        k=k,
        seed=seed,
        run=str(summary.dir),
        trustworthy=summary.trustworthy,
        reasons=tuple(health.get("reasons") or ()),
        machine_cpu_mean=health.get("machine_cpu_mean"),
        completed=c.completed,
        failed=c.failed,
        duration_s=duration,
        ttft_p50_s=c.ttft_p50_s,
        ttft_p99_s=c.ttft_p99_s,
        tpot_p50_s=c.tpot_p50_s,
        kv_p50_s=None if t is None else t.kv_xfer_p50_s,
        kv_p99_s=None if t is None else t.kv_xfer_p99_s,
        kv_ratio_p50=None if t is None else t.kv_xfer_ratio_p50,
        prefills=prefills,
        prefill_queue_mean_s=queue,
        prefill_time_mean_s=compute,
        wall_s=wall,
    )


def run_point(
    point: str, k: float, seed: int, args: argparse.Namespace, extra: Sequence[str]
) -> Row | None:
    """One `zcube-lab run` of the point at dilation k; None when it produced no summary."""
    p = POINTS[point]
    argv = [
        sys.executable, "-m", "zcube_lab.cli", "run", *p.fabric,
        "--workload", p.workload, "--rate", f"{p.rate:g}", "--seed", str(seed),
        "--duration", f"{args.duration:g}", "--drain", f"{args.drain:g}",
        "--dilation", f"{k:g}", "--results", str(args.results), *p.options, *extra,
    ]  # fmt: skip
    print(f"{point} k={k:g} seed {seed}: {' '.join(argv[3:])}", flush=True)
    t0 = time.monotonic()
    run = LabRun(argv).start()
    try:
        run.proc.wait()  # type: ignore[union-attr]
    except KeyboardInterrupt:
        run.stop()
        raise
    summary = run.summary()
    if summary is None:
        print(f"  no summary (exit {run.exit_code})", flush=True)
        return None
    return _row(point, k, seed, summary, args.duration, time.monotonic() - t0)


def _read(path: Path) -> list[Row]:
    if not path.exists():
        return []
    return [Row.from_dict(r) for r in json.loads(path.read_text())["rows"]]


def ladder(rows: Sequence[Row]) -> dict[str, Any]:
    """What the library quotes to a dilated run
    (`zcube_lab.emulator.results.run.dilation.read_ladder`): the
    points and the smallest k accepted for each, without the runs behind them."""
    return {
        "written": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "points": {
            name: {
                "workload": p.workload,
                "rate": p.rate,
                "fabric": " ".join(p.fabric + p.options),
            }
            for name, p in POINTS.items()
        },
        "validated_k": {p: validated_k(rows, p) for p in sorted({r.point for r in rows})},
    }


def _write(path: Path, ladder_path: Path, rows: Sequence[Row]) -> None:
    """The runs and their verdict to `path`; the verdict alone to `ladder_path` (package data)."""
    verdict = ladder(rows)
    path.write_text(json.dumps({**verdict, "rows": [asdict(r) for r in rows]}, indent=2) + "\n")
    ladder_path.write_text(json.dumps(verdict, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", default="light,heavy", help=f"of {list(POINTS)}")
    parser.add_argument("--ks", default="1,2,4", help="dilations, comma-separated")
    parser.add_argument("--seeds", default="1,2", help="one repeat per seed")
    parser.add_argument("--duration", type=float, default=20.0, help="modelled s of arrivals")
    parser.add_argument("--drain", type=float, default=20.0, help="modelled s to finish")
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "dilation-ladder")
    parser.add_argument("--out", type=Path, default=RESULTS, help="merged results (JSON)")
    parser.add_argument(
        "--ladder", type=Path, default=Path(str(LADDER_FILE)), help="the verdict the lab quotes"
    )
    parser.add_argument("--report", action="store_true", help="print the saved ladder only")
    args, extra = parser.parse_known_args()
    saved = _read(args.out)
    if args.report:
        print("\n".join(report(saved)))
        return 0
    points = [p for p in args.points.split(",") if p]
    if unknown := [p for p in points if p not in POINTS]:
        parser.error(f"--points: unknown {unknown}; choose from {list(POINTS)}")
    ks = [float(k) for k in args.ks.split(",") if k]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    signal.signal(signal.SIGTERM, raise_interrupt)
    new: list[Row] = []
    try:
        for point in points:
            for seed in seeds:
                for k in ks:
                    row = run_point(point, k, seed, args, extra)
                    if row is None:  # a broken run: the next ones would break the same way
                        return 1
                    new.append(row)
                    _write(args.out, args.ladder, merge(saved, new))
                    print(
                        f"  TTFT p50 {_ms(row.ttft_p50_s)} ms, KV p50 {_ms(row.kv_p50_s)} ms,"
                        f" trustworthy {row.trustworthy}, {row.wall_s:.0f} s wall",
                        flush=True,
                    )
    except KeyboardInterrupt:
        print("interrupted: the runs finished so far are saved", file=sys.stderr)
        return 130
    print("\n".join(report(merge(saved, new))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
