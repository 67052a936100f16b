"""Benchmark: CPU-seconds per request of each lab component (issue 12). One `zcube-lab run` per
rate; which component's CPU grows fastest with load is what limits this machine. Needs root.

    sudo .venv/bin/python -m bench.cpu_per_request                  # 4 and 8 req/s, 45 s each
    sudo .venv/bin/python -m bench.cpu_per_request --rates 2,4,8,12 --fabric roft
    sudo .venv/bin/python -m bench.cpu_per_request --drain 30       # unknown flags go to the run

The window is the load: from the moment the run's Locust appears until it is gone (arrivals
plus the drain of what is in flight). Every second each lab process (`bench/procwatch.py`) is
read; a process's CPU is utime + stime at its last reading minus at the window's start (all of
it for Locust, whose start is the window's, and for a process born later). Components:
gateway, prefill, decode, ep (each the sum of its engines), locust, prometheus, controller,
ovs-vswitchd (the datapath), run (the `zcube-lab run` process: its CPU and network samplers),
and run helpers (the short-lived commands the run reaped in the window, `nsenter tc` each
second: its children's CPU minus Locust's, so Locust's last second before exit lands here).
*other* is the machine's busy CPU (/proc/stat) minus all of those: the kernel forwarding
packets between veths (softirq) and every process not listed, this script included (its own
CPU is printed). With several rates, the marginal CPU-ms per request between the lowest and
the highest is printed too: fixed costs cancel in it.

CPU per request divides by the completed requests of summary.json; ovs-vswitchd's is also given
per Mb of fabric traffic (bytes entering the fabric from GPU hosts), which is the same number as
cores per Mb/s. Writes bench/results/cpu_per_request.json; Ctrl-C stops the current run with
SIGINT (the lab is torn down) and writes the rates finished.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.labrun import ZCUBE, LabRun, run_argv, run_options
from bench.procwatch import CLK_TCK, LOCUST, RUN, ProcSample, scan
from zcube_lab.adapters.procs import raise_interrupt
from zcube_lab.emulator.results.run.summary import RunSummary
from zcube_lab.emulator.verdict.cpustats import CpuTimes, cpu_share, parse_proc_stat
from zcube_lab.emulator.verdict.judge import DATAPATH

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "bench" / "results" / "cpu_per_request.json"
HELPERS = "run helpers"
OTHER = "other"
Key = tuple[int, int]  # (pid, start time)


# --- pure: CPU by component ------------------------------------------------------------------


def component_ticks(
    first: Mapping[Key, ProcSample], last: Mapping[Key, ProcSample]
) -> dict[str, tuple[int, int]]:
    """Role -> (processes, clock ticks) over the window, from the window's first scan and each
    process's last reading in it. Locust, whose start is the window's, and processes born
    later count from birth; `run helpers` is the run's reaped children minus Locust."""
    out: dict[str, tuple[int, int]] = {}
    for key, s in last.items():
        counted = key in first and s.role != LOCUST
        ticks = s.ticks - (first[key].ticks if counted else 0)
        n, total = out.get(s.role, (0, 0))
        out[s.role] = (n + 1, total + max(0, ticks))
    runs = [(first[k], s) for k, s in last.items() if s.role == RUN and k in first]
    if runs:
        reaped = sum(s.child_ticks - f.child_ticks for f, s in runs)
        out[HELPERS] = (0, max(0, reaped - out.get(LOCUST, (0, 0))[1]))
    return out


@dataclass(frozen=True)
class Component:
    """One component's CPU over the window."""

    name: str
    processes: int
    cpu_s: float
    cores: float  # mean over the window
    ms_per_request: float | None
    busy_share: float | None  # of the machine's busy CPU


def components(
    ticks: Mapping[str, tuple[int, int]],
    window_s: float,
    completed: int,
    busy_cpu_s: float,
    clk_tck: int = CLK_TCK,
) -> list[Component]:
    """Components from `component_ticks`, plus `other` (busy CPU not in any of them), sorted
    by CPU per request, largest first."""
    rows = [(name, n, t / clk_tck) for name, (n, t) in ticks.items()]
    rows.append((OTHER, 0, busy_cpu_s - sum(cpu for _n, _p, cpu in rows)))
    out = [
        Component(
            name=name,
            processes=n,
            cpu_s=cpu,
            cores=cpu / window_s if window_s > 0 else 0.0,
            ms_per_request=1000 * cpu / completed if completed else None,
            busy_share=cpu / busy_cpu_s if busy_cpu_s > 0 else None,
        )
        for name, n, cpu in rows
    ]
    return sorted(out, key=lambda c: -c.cpu_s)


@dataclass(frozen=True)
class RateResult:
    """One rate's run: the window, the machine, the components, what summary.json says."""

    rate: float
    results: str | None
    window_s: float
    completed: int | None
    machine_cores: int
    machine_busy_share: float
    machine_busy_cpu_s: float
    fabric_mbps: float | None  # mean rate of bytes entering the fabric from GPU hosts
    datapath_cpu_s_per_mbit: float | None  # = ovs-vswitchd cores per Mb/s
    self_cpu_s: float  # this script's own CPU in the window
    trustworthy: bool | None
    reasons: tuple[str, ...]
    components: tuple[Component, ...]


def rate_result(
    rate: float,
    window_s: float,
    cpu: tuple[Mapping[str, CpuTimes], Mapping[str, CpuTimes]],
    ticks: Mapping[str, tuple[int, int]],
    summary: RunSummary | None,
    self_cpu_s: float,
    clk_tck: int = CLK_TCK,
) -> RateResult:
    """A rate's figures from the /proc/stat readings at the window's ends, the components'
    ticks and the run's summary (None: the run did not finish; no per-request figures)."""
    before, after = cpu
    busy_s = (after["cpu"].busy - before["cpu"].busy) / clk_tck
    completed = summary.client.completed if summary is not None else None
    comps = components(ticks, window_s, completed or 0, busy_s, clk_tck)
    mbit = None
    if summary is not None and summary.fabric_stats.host_ingress_bytes:
        mbit = summary.fabric_stats.host_ingress_bytes * 8 / 1e6
    datapath = next((c.cpu_s for c in comps if c.name == DATAPATH), None)
    return RateResult(
        rate=rate,
        results=str(summary.dir) if summary is not None else None,
        window_s=window_s,
        completed=completed,
        machine_cores=sum(1 for name in after if name != "cpu"),
        machine_busy_share=cpu_share(before["cpu"], after["cpu"]).busy,
        machine_busy_cpu_s=busy_s,
        fabric_mbps=mbit / summary.window_s if mbit and summary and summary.window_s else None,
        datapath_cpu_s_per_mbit=datapath / mbit if mbit and datapath is not None else None,
        self_cpu_s=self_cpu_s,
        trustworthy=summary.trustworthy if summary is not None else None,
        reasons=tuple(summary.health.reasons) if summary is not None else (),
        components=tuple(comps),
    )


def marginal_ms_per_request(low: RateResult, high: RateResult) -> dict[str, float]:
    """Per component (and `machine`, its busy CPU), the CPU-ms each extra request costs between
    two runs: the slope of mean cores against completed requests/s, in which fixed costs
    (Prometheus' scrapes, the samplers, Locust's start-up) cancel. Empty if the rates did not
    differ in completed requests/s."""
    if not low.completed or not high.completed:
        return {}
    d_rps = high.completed / high.window_s - low.completed / low.window_s
    if d_rps <= 0:
        return {}
    cores_low = {c.name: c.cores for c in low.components}
    cores_low["machine"] = low.machine_busy_cpu_s / low.window_s
    cores_high = {c.name: c.cores for c in high.components}
    cores_high["machine"] = high.machine_busy_cpu_s / high.window_s
    return {
        name: 1000 * (cores - cores_low.get(name, 0.0)) / d_rps
        for name, cores in cores_high.items()
    }


# --- adapter: one run per rate ---------------------------------------------------------------


def log(message: str) -> None:
    print(f"[cpu] {message}", file=sys.stderr, flush=True)


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _proc_stat() -> dict[str, CpuTimes]:
    return parse_proc_stat(Path("/proc/stat").read_text())


def measure(run: LabRun, rate: float, poll_s: float) -> RateResult | None:
    """Watch one started run from its load start to its end; None if the load never ran."""
    start = run.wait_for_load(progress=lambda s: log(f"waiting for the load ({s:.0f} s)"))
    if start is None:
        log(f"rate {rate:g}: the run exited before its load started")
        return None
    t0, cpu0, self0 = time.monotonic(), _proc_stat(), _self_cpu()
    log(f"rate {rate:g}: load started ({len(start)} lab processes)")
    first = {s.key: s for s in start}
    last = dict(first)
    told = 0.0
    while run.sleep(poll_s):
        samples = scan(run.pid, resources=False)
        last.update((s.key, s) for s in samples)
        if not any(s.role == LOCUST for s in samples):
            break  # the load generator has exited: the load is over
        if (elapsed := time.monotonic() - t0) >= told + 15:
            told = elapsed
            share = cpu_share(cpu0["cpu"], _proc_stat()["cpu"]).busy
            log(f"rate {rate:g}: {elapsed:4.0f} s of load, machine {100 * share:.0f}% busy")
    t1, cpu1, self1 = time.monotonic(), _proc_stat(), _self_cpu()
    log(f"rate {rate:g}: load over after {t1 - t0:.0f} s; waiting for the run to finish")
    while run.sleep(5):
        pass
    summary = run.summary()
    if summary is None:
        log(f"rate {rate:g}: no summary.json (exit code {run.exit_code}): no per-request figures")
    ticks = component_ticks(first, last)
    return rate_result(rate, t1 - t0, (cpu0, cpu1), ticks, summary, self1 - self0)


def table(r: RateResult) -> Table:
    """One rate's components, largest CPU per request first."""
    t = Table(title=f"{r.rate:g} req/s: CPU per component over {r.window_s:.0f} s of load")
    for col in ("component", "procs", "CPU-s", "cores", "CPU-ms/request", "of busy CPU"):
        t.add_column(col, justify="left" if col == "component" else "right")
    for c in r.components:
        t.add_row(
            c.name,
            str(c.processes or "-"),
            f"{c.cpu_s:.1f}",
            f"{c.cores:.2f}",
            "-" if c.ms_per_request is None else f"{c.ms_per_request:.1f}",
            "-" if c.busy_share is None else f"{100 * c.busy_share:.0f}%",
        )
    return t


def report(r: RateResult, console: Console) -> None:
    """The table and the machine, datapath and verdict lines for one rate."""
    console.print(table(r))
    per_req = (
        f", {1000 * r.machine_busy_cpu_s / r.completed:.0f} CPU-ms per request"
        if r.completed
        else ""
    )
    console.print(
        f"machine: {r.machine_cores} cores {100 * r.machine_busy_share:.0f}% busy "
        f"({r.machine_busy_cpu_s:.1f} CPU-s{per_req}); {r.completed} requests completed; "
        f"this script used {r.self_cpu_s:.1f} CPU-s"
    )
    if r.datapath_cpu_s_per_mbit is not None and r.fabric_mbps is not None:
        console.print(
            f"datapath: {r.datapath_cpu_s_per_mbit:.4f} CPU-s per Mb (cores per Mb/s) at "
            f"{r.fabric_mbps:.1f} Mb/s into the fabric"
        )
    if r.trustworthy is not None:
        console.print(f"trustworthy: {'yes' if r.trustworthy else 'NO: ' + '; '.join(r.reasons)}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The options; `extra` holds the flags passed on to every `zcube-lab run`."""
    p = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--rates", default="4,8", help="comma-separated requests/s, one run each")
    p.add_argument("--duration", type=float, default=45.0, help="seconds of arrivals per run")
    p.add_argument("--fabric", default="zcube")
    p.add_argument("--workload", default="kv-heavy")
    p.add_argument("--poll", type=float, default=1.0, help="seconds between readings")
    p.add_argument("--zcube", type=Path, default=ZCUBE, help="the zcube-lab command")
    p.add_argument("--out", type=Path, default=RESULTS, help="JSON file to write")
    args, args.extra = p.parse_known_args(argv)
    try:
        args.rates = [float(r) for r in args.rates.split(",")]
        if not all(r > 0 for r in args.rates):
            raise ValueError("--rates must be positive")
        run_argv(
            args.zcube,
            run_options(args.fabric, args.workload, args.rates[0], args.duration),
            args.extra,
        )
    except ValueError as exc:
        p.error(str(exc))
    if os.geteuid() != 0:
        p.error("needs root, as zcube-lab run does")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """One run per rate, a table each, the JSON; 130 if interrupted."""
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, raise_interrupt)
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    console, results, interrupted = Console(), [], False
    for rate in args.rates:
        cmd = run_argv(
            args.zcube, run_options(args.fabric, args.workload, rate, args.duration), args.extra
        )
        log(f"starting: {' '.join(cmd)}")
        run = LabRun(cmd).start()
        try:
            result = measure(run, rate, args.poll)
        except KeyboardInterrupt:
            interrupted = True
            log("interrupted: stopping the run (SIGINT) and waiting for its teardown")
            break
        finally:
            run.stop()
        if result is not None:
            results.append(result)
            report(result, console)
    out = {"started": started, "interrupted": interrupted, "rates": [asdict(r) for r in results]}
    if len(results) >= 2:
        low, high = min(results, key=lambda r: r.rate), max(results, key=lambda r: r.rate)
        slope = marginal_ms_per_request(low, high)
        out["marginal"] = {"from_rate": low.rate, "to_rate": high.rate, "ms_per_request": slope}
        t = Table(title=f"CPU-ms per extra request, {low.rate:g} -> {high.rate:g} req/s")
        t.add_column("component")
        t.add_column("CPU-ms", justify="right")
        for name, ms in sorted(slope.items(), key=lambda kv: -kv[1]):
            t.add_row(name, f"{ms:.1f}")
        console.print(t)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    log(f"wrote {args.out}")
    return 130 if interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
