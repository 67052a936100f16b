"""Benchmark: a soak at the kv-heavy SLO point (issue 12). One `zcube-lab run` for a long load;
no failed request, every lab process's memory flat within 10%, no growth in its open fds or TCP
connections. Needs root.

    sudo .venv/bin/python -m bench.soak                    # 30 min: zcube, kv-heavy, 8 req/s
    sudo .venv/bin/python -m bench.soak --duration 120     # smoke test (about 5 min in all)
    sudo .venv/bin/python -m bench.soak --fabric roft --drain 90   # unknown flags go to the run

From the moment the run's Locust appears (the load start), every `--interval` seconds until
the end of the arrivals, every lab process (`bench/procwatch.py`: serving roles, Locust,
Prometheus, the controller, ovs-vswitchd, and the run itself) is read from /proc: RSS, open
fds, TCP sockets held (not listening). Per process, *first* is the median over the first
`--window` seconds of load (default: 120 s, or a quarter of a shorter run; the sample at 0 s,
taken as Locust starts, before any request, is left out) and *last* the median over the last
window: medians, so one sample taken mid-burst does not decide.

PASS needs: no failed request and none left unsent (summary.json); for every process, the run
itself included (issue 24: its samplers stream to disk, so its memory must stay flat too), RSS
last at most 10% above first, one pid all along (no restart), presence in both windows, and
fds and TCP sockets last at most `--slack`
(2) above first *plus the spread (max - min) the count already had within the first window*.
Why the spread: a gateway's or an engine's sockets follow the requests and KV pulls in flight,
which move by several at any instant under Poisson arrivals, so two medians differ by a few
with no leak at all; a count that is steady (the controller, ovs-vswitchd, Prometheus) has no
spread and gets the bare +2. A leak grows with the requests served and passes any of these
allowances over 30 minutes. The run's trustworthy verdict is reported beside PASS/FAIL.
Writes bench/results/soak.json (figures, problems, every sample); exit 0 PASS, 1 FAIL, 130
Ctrl-C (the run is stopped with SIGINT and tears the lab down first).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.labrun import ZCUBE, LabRun, run_argv, run_options
from bench.procwatch import ProcSample, display_order, scan
from zcube_lab.adapters.procs import raise_interrupt
from zcube_lab.emulator.results.run.summary import RunSummary

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "bench" / "results" / "soak.json"
Point = tuple[float, ProcSample]  # (seconds since the load start, one process read then)


@dataclass(frozen=True)
class Limits:
    """What PASS allows."""

    rss_growth_pct: float = 10.0
    slack: int = 2  # fds and TCP sockets


# --- pure: figures and verdict ---------------------------------------------------------------


def _median(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _growth_pct(first: float | None, value: float | None) -> float | None:
    if first is None or value is None or first <= 0:
        return None
    return (value / first - 1) * 100


@dataclass(frozen=True)
class ProcessFigures:
    """One process over the load: medians of the first and last windows, the peak RSS."""

    name: str
    role: str
    samples: int
    restarts: int  # pids after the first (a restarted process)
    rss_first_mb: float | None
    rss_last_mb: float | None
    rss_max_mb: float | None
    rss_growth_pct: float | None  # last against first
    rss_max_growth_pct: float | None  # peak against first
    fds_first: float | None
    fds_last: float | None
    fds_allowed: float | None  # growth allowed: the slack plus the first window's spread
    tcp_first: float | None
    tcp_last: float | None
    tcp_allowed: float | None
    judged: bool  # every process is judged; kept so soak.json keeps its shape
    problems: tuple[str, ...]


def process_figures(
    points: Sequence[Point], duration: float, window: float, limits: Limits
) -> ProcessFigures:
    """Figures and problems of one process's points: first window (0, window], last window
    (duration - window, duration]; the peak is over [0, duration], later points are ignored."""
    load = [(t, s) for t, s in points if 0 <= t <= duration]
    name, role = points[0][1].name, points[0][1].role
    first = [s for t, s in load if 0 < t <= window]
    last = [s for t, s in load if t > duration - window]
    mb = 1 / 1024

    def med(samples: list[ProcSample], attr: str, scale: float = 1.0) -> float | None:
        value = _median(getattr(s, attr) for s in samples)
        return None if value is None else value * scale

    def allowed(attr: str) -> float | None:
        values = [v for s in first if (v := getattr(s, attr)) is not None]
        return limits.slack + max(values) - min(values) if values else None

    rss_first, rss_last = med(first, "rss_kb", mb), med(last, "rss_kb", mb)
    rss_max = max((s.rss_kb for _t, s in load if s.rss_kb is not None), default=None)
    rss_max_mb = None if rss_max is None else rss_max * mb
    f = ProcessFigures(
        name=name,
        role=role,
        samples=len(load),
        restarts=max(0, len({s.key for _t, s in load}) - 1),
        rss_first_mb=rss_first,
        rss_last_mb=rss_last,
        rss_max_mb=rss_max_mb,
        rss_growth_pct=_growth_pct(rss_first, rss_last),
        rss_max_growth_pct=_growth_pct(rss_first, rss_max_mb),
        fds_first=med(first, "fds"),
        fds_last=med(last, "fds"),
        fds_allowed=allowed("fds"),
        tcp_first=med(first, "tcp"),
        tcp_last=med(last, "tcp"),
        tcp_allowed=allowed("tcp"),
        judged=True,
        problems=(),
    )
    return _with_problems(f, window, limits)


def _with_problems(f: ProcessFigures, window: float, limits: Limits) -> ProcessFigures:
    problems = []
    if f.rss_first_mb is None:
        problems.append(f"not running in the first {window:g} s of load")
    if f.rss_last_mb is None:
        problems.append(f"not running in the last {window:g} s of load")
    if f.restarts:
        problems.append(f"restarted ({f.restarts + 1} pids)")
    # Rounded: 110 MB after 100 MB is 10% growth, not 10.000000000000009%.
    if f.rss_growth_pct is not None and round(f.rss_growth_pct, 6) > limits.rss_growth_pct:
        problems.append(f"RSS grew {f.rss_growth_pct:.1f}% (limit {limits.rss_growth_pct:g}%)")
    for what, a, b, allowed in (
        ("fds", f.fds_first, f.fds_last, f.fds_allowed),
        ("TCP sockets", f.tcp_first, f.tcp_last, f.tcp_allowed),
    ):
        if a is not None and b is not None and allowed is not None and b - a > allowed:
            problems.append(f"{what} grew from {a:g} to {b:g} (allowed +{allowed:g})")
    return replace(f, problems=tuple(problems))


def by_process(points: Iterable[Point]) -> dict[str, list[Point]]:
    """Points grouped by process name, in time order."""
    out: dict[str, list[Point]] = {}
    for t, s in sorted(points, key=lambda p: p[0]):
        out.setdefault(s.name, []).append((t, s))
    return out


@dataclass(frozen=True)
class RequestFigures:
    """What the run's summary.json says about requests, and its verdict."""

    planned: int | None
    requests: int
    completed: int
    failed: int
    not_sent: int  # planned but never recorded
    errors: dict[str, int]
    trustworthy: bool
    reasons: tuple[str, ...]


def request_figures(summary: RunSummary) -> RequestFigures:
    """The request counts and verdict of a finished run."""
    c = summary.client
    planned = summary.loadgen.get("planned")
    return RequestFigures(
        planned=planned,
        requests=c.requests,
        completed=c.completed,
        failed=c.failed,
        not_sent=max(0, planned - c.requests) if planned is not None else 0,
        errors=dict(summary.faults.errors) if summary.faults is not None else {},
        trustworthy=summary.trustworthy,
        reasons=tuple(summary.health.reasons),
    )


def soak_problems(
    requests: RequestFigures | None, processes: Sequence[ProcessFigures], exit_code: int | None
) -> list[str]:
    """Everything that makes the soak FAIL; empty means PASS."""
    problems = []
    if requests is None:
        problems.append(f"the run left no summary.json (exit code {exit_code})")
    else:
        if requests.failed:
            problems.append(f"{requests.failed} failed requests {requests.errors or ''}".strip())
        if requests.not_sent:
            problems.append(f"{requests.not_sent} planned requests never sent")
    if not processes:
        problems.append("no lab process was sampled during the load")
    problems += [f"{p.name}: {why}" for p in processes for why in p.problems]
    return problems


# --- adapter: sampling a run -----------------------------------------------------------------


def log(message: str) -> None:
    print(f"[soak] {message}", file=sys.stderr, flush=True)


def sample_load(run: LabRun, duration: float, interval: float, points: list[Point]) -> None:
    """Read every lab process at 0, interval, 2 x interval, ... seconds of load up to
    `duration`, or until the run exits, into `points` (stamped with that offset: a Ctrl-C
    keeps what was read)."""
    t_load, k = time.monotonic(), 0
    while k * interval <= duration + 1e-9:
        if not run.sleep(t_load + k * interval - time.monotonic()):
            log("the run exited during the load")
            break
        samples = scan(run.pid)
        points += [(k * interval, s) for s in samples]
        if k and int(k * interval) % 60 < interval:
            rss = sum(s.rss_kb or 0 for s in samples) / 1024
            fds, tcp = sum(s.fds or 0 for s in samples), sum(s.tcp or 0 for s in samples)
            log(
                f"{k * interval:5.0f} / {duration:g} s of load: {len(samples)} processes, "
                f"RSS {rss:,.0f} MB, {fds} fds, {tcp} TCP sockets"
            )
        k += 1


def table(processes: Sequence[ProcessFigures]) -> Table:
    """Per process: RSS first/last/peak and growth, fds and TCP first -> last (growth
    allowed), problems."""
    t = Table(title="soak: every lab process, first window -> last window (medians)")
    for col in ("process", "RSS MB first", "last", "peak", "growth", "fds", "TCP", "verdict"):
        t.add_column(col, justify="left" if col in ("process", "verdict") else "right")

    def num(v: float | None, fmt: str = "{:.0f}") -> str:
        return "-" if v is None else fmt.format(v)

    for p in processes:
        verdict = "info" if not p.judged else ("; ".join(p.problems) or "ok")
        t.add_row(
            p.name,
            num(p.rss_first_mb, "{:.1f}"),
            num(p.rss_last_mb, "{:.1f}"),
            num(p.rss_max_mb, "{:.1f}"),
            num(p.rss_growth_pct, "{:+.1f}%"),
            f"{num(p.fds_first)} -> {num(p.fds_last)} (+{num(p.fds_allowed)})",
            f"{num(p.tcp_first)} -> {num(p.tcp_last)} (+{num(p.tcp_allowed)})",
            verdict,
        )
    return t


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The options; `cmd` is the `zcube-lab run` command line (unknown flags passed on)."""
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--duration", type=float, default=1800.0, help="seconds of load (arrivals)")
    p.add_argument("--rate", type=float, default=8.0, help="requests/s")
    p.add_argument("--fabric", default="zcube")
    p.add_argument("--workload", default="kv-heavy")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    p.add_argument("--window", type=float, help="seconds of the first and last windows")
    p.add_argument("--rss-growth", type=float, default=10.0, help="allowed RSS growth, %%")
    p.add_argument(
        "--slack", type=int, default=2, help="fd and TCP socket growth allowed beyond the spread"
    )
    p.add_argument("--zcube", type=Path, default=ZCUBE, help="the zcube-lab command")
    p.add_argument("--out", type=Path, default=RESULTS, help="JSON file to write")
    args, extra = p.parse_known_args(argv)
    args.window = args.window or min(120.0, args.duration / 4)
    if not 0 < args.interval <= args.window <= args.duration / 2:
        p.error("need 0 < --interval <= --window <= --duration / 2")
    try:
        args.cmd = run_argv(
            args.zcube, run_options(args.fabric, args.workload, args.rate, args.duration), extra
        )
    except ValueError as exc:
        p.error(str(exc))
    if os.geteuid() != 0:
        p.error("needs root, as zcube-lab run does")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the soak, print the table, write the JSON; 0 PASS, 1 FAIL, 130 interrupted."""
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupt)
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    log(f"starting: {' '.join(args.cmd)}")
    points: list[Point] = []
    run, interrupted = LabRun(args.cmd).start(), False
    try:
        if run.wait_for_load(progress=lambda s: log(f"waiting for the load ({s:.0f} s)")) is None:
            log("the run exited before its load started")
        else:
            log(f"load started; sampling every {args.interval:g} s for {args.duration:g} s")
            sample_load(run, args.duration, args.interval, points)
            log("load over: waiting for the run to collect and tear down")
            while run.sleep(5):
                pass
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: stopping the run (SIGINT) and waiting for its teardown")
    finally:
        code = run.stop()
    summary = run.summary()
    limits = Limits(args.rss_growth, args.slack)
    procs = sorted(
        (
            process_figures(p, args.duration, args.window, limits)
            for p in by_process(points).values()
        ),
        key=lambda f: display_order(f.role, f.name),
    )
    requests = request_figures(summary) if summary is not None else None
    problems = soak_problems(requests, [p for p in procs if p.judged], code)
    out = {
        "started": started,
        "command": args.cmd,
        "duration_s": args.duration,
        "interval_s": args.interval,
        "window_s": args.window,
        "limits": asdict(limits),
        "exit_code": code,
        "interrupted": interrupted,
        "results": str(summary.dir) if summary is not None else None,
        "requests": asdict(requests) if requests is not None else None,
        "passed": not problems and not interrupted,
        "problems": problems,
        "processes": [asdict(p) for p in procs],
        "samples": [{"t": t, **asdict(s)} for t, s in points],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    report(out, procs)
    log(f"wrote {args.out}")
    return 130 if interrupted else (0 if out["passed"] else 1)


def report(out: dict[str, Any], procs: Sequence[ProcessFigures]) -> None:
    """The table and the verdict lines on stdout."""
    console = Console()
    console.print(table(procs))
    r = out["requests"]
    if r is not None:
        verdict = "yes" if r["trustworthy"] else "NO: " + "; ".join(r["reasons"])
        console.print(
            f"requests: {r['requests']} ({r['completed']} completed, {r['failed']} failed, "
            f"{r['not_sent']} never sent); trustworthy: {verdict}"
        )
    console.print(f"run folder: {out['results']}")
    if out["passed"]:
        console.print("[green]PASS[/green]")
    else:
        console.print("[red]FAIL[/red]" if not out["interrupted"] else "INTERRUPTED")
        for why in out["problems"]:
            console.print(f"  - {why}")


if __name__ == "__main__":
    raise SystemExit(main())
