"""Benchmark: does the open-loop driver achieve the configured request rate?

Runs real Locust headless (the locustfile the lab uses) against a fast local endpoint at each
rate, `--runs` times, and prints configured vs achieved rate (median of the runs), the send
lag and the CPU the load generator used. Acceptance (issue 4): achieved within 5% of
configured from 1 to at least 100 requests/s.

    .venv/bin/python -m bench.openloop_rate                   # stub endpoint, 1..150 req/s
    .venv/bin/python -m bench.openloop_rate --target serve    # `zcube-lab serve --local` (tiny)

The default endpoint is `zcube_lab.workloads.stubserver` in its own process (instant tokens), so
what is measured is the load generator, not a model. Requests are chat-shaped with tiny outputs
(`--length-scale 0.02`: a few tokens each). *Achieved* is the number of requests actually sent
inside the plan's window [0, D) divided by D: a driver that falls behind pushes requests past
the window and loses rate. With `--arrival fixed` (default) the plan holds exactly rate x D
requests; with `--arrival poisson` the plan's own count varies, and the table also shows the
plan's rate.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from zcube_lab.adapters.ports import free_port
from zcube_lab.adapters.procs import stop_groups

ROOT = Path(__file__).resolve().parents[1]
LOCUST = Path(sys.executable).with_name("locust")
ZCUBE = Path(sys.executable).with_name("zcube-lab")


def wait_ready(url: str, timeout: float = 20.0) -> None:
    """Poll `url` until it answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up in {timeout} s")


def start_target(kind: str, port: int, logdir: Path) -> subprocess.Popen[bytes]:
    """Start the endpoint in its own process group."""
    if kind == "stub":
        cmd = [sys.executable, "-m", "zcube_lab.workloads.stubserver", "--port", str(port)]
    else:
        cmd = [str(ZCUBE), "serve", "--local", "--model", "tiny", "--port", str(port)]
    log = (logdir / f"{kind}.log").open("w")
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    wait_ready(f"http://127.0.0.1:{port}/v1/models")
    return proc


def one_run(
    host: str, rate: float, seconds: float, arrival: str, model: str, seed: int, workdir: Path
) -> dict[str, float]:
    """One headless Locust run; the summary plus the CPU seconds Locust used."""
    summary = workdir / f"summary-{rate:g}-{seed}.json"
    cmd = [
        str(LOCUST),
        "-f",
        str(ROOT / "zcube_lab" / "workloads" / "locustfile.py"),
        "--headless",
        "--host",
        host,
        "-u",
        "1",
        "-r",
        "1",
        "--run-time",
        f"{int(seconds) + 60}s",
        "--only-summary",
        "--skip-log-setup",
        "--workload",
        "chat",
        "--model",
        model,
        "--length-scale",
        "0.02",
        "--arrival",
        arrival,
        "--rate",
        str(rate),
        "--duration",
        str(seconds),
        "--seed",
        str(seed),
        "--summary-out",
        str(summary),
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 120, check=False
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or not summary.exists():
        raise RuntimeError(f"locust failed ({proc.returncode}): {proc.stderr[-2000:]}")
    s = json.loads(summary.read_text())
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "planned_rate": s["planned_rate"],
        "achieved_rate": s["achieved_rate"],
        "ok_rate": s["completed_ok"] / seconds,
        "lag_p99_ms": (s["lag_p99_s"] or 0.0) * 1000,
        "failed": s["sent"] - s["completed_ok"],
        "cpu_pct": 100.0 * cpu / seconds,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the rate sweep and print the table; exit 1 if a rate up to 100/s misses 5%."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--target", choices=("stub", "serve"), default="stub")
    p.add_argument("--rates", default="1,10,50,100,150", help="comma-separated requests/s")
    p.add_argument("--seconds", type=float, default=20.0, help="plan length per run")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--arrival", choices=("fixed", "poisson", "gamma"), default="fixed")
    p.add_argument("--json-out", type=Path, default=None, help="write all runs as JSON")
    args = p.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    model = "tiny" if args.target == "serve" else "stub"

    print(f"open-loop rate benchmark: target={args.target} arrival={args.arrival} ", end="")
    print(f"{args.seconds:g} s x {args.runs} runs per rate, {os.cpu_count()} cores", flush=True)
    header = (
        f"{'configured':>10} {'plan':>8} {'achieved':>9} {'error':>7} {'ok/s':>8} "
        f"{'lag p99':>9} {'failed':>6} {'locust cpu':>10}  verdict"
    )
    print(header)
    all_runs: dict[str, list[dict[str, float]]] = {}
    missed = False
    with tempfile.TemporaryDirectory(prefix="openloop-bench-") as tmp:
        work = Path(tmp)
        port = free_port()
        target = start_target(args.target, port, work)
        try:
            for rate in rates:
                runs = [
                    one_run(
                        f"http://127.0.0.1:{port}",
                        rate,
                        args.seconds,
                        args.arrival,
                        model,
                        seed,
                        work,
                    )
                    for seed in range(args.runs)
                ]
                all_runs[f"{rate:g}"] = runs

                def med(key: str, runs: list[dict[str, float]] = runs) -> float:
                    return statistics.median(r[key] for r in runs)

                achieved, plan = med("achieved_rate"), med("planned_rate")
                # Against the plan: a Poisson plan's own count varies around the rate.
                err = (achieved - plan) / plan * 100 if plan else 0.0
                ok = abs(err) <= 5.0
                missed |= not ok and rate <= 100
                print(
                    f"{rate:10g} {plan:8.2f} {achieved:9.2f} {err:+6.1f}% {med('ok_rate'):8.2f} "
                    f"{med('lag_p99_ms'):7.1f}ms {med('failed'):6g} {med('cpu_pct'):9.0f}%  "
                    f"{'within 5%' if ok else 'MISSED'}",
                    flush=True,
                )
        finally:
            stop_groups([target])
    if args.json_out:
        args.json_out.write_text(json.dumps(all_runs, indent=2) + "\n")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
