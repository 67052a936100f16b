"""The lossless agent as a process of the lab: started on the shaped ports, asked for a report,
stopped.

The agent itself (`python -m zcube_lab.emulator.lab.lossless PLAN OUT`) is
`zcube_lab.emulator.lab.lossless`; here the lab writes its plan to the run folder
(`lossless-plan.json`), starts it in its own session (its log `lossless.log`), waits until it
watches the ports (its first report written), asks a running one for a fresh report (SIGUSR1), and
stops it (SIGTERM: it resumes every port and writes its last report; then its process group). Names:
`<verb>_agent` acts on the agent's process, `report_path` is where it writes `AgentReport`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from zcube_lab.adapters.procs import kill_group
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.emulator.lab.lossless import FORCED_FILE, REPORT_FILE, agent_plan, read_report
from zcube_lab.emulator.lab.options import LabOptions
from zcube_lab.emulator.lab.system import LabError


def report_path(run_dir: Path) -> Path:
    """Where the agent of the lab whose run folder is `run_dir` writes its report."""
    return run_dir / REPORT_FILE


def start_agent(
    fabric: Fabric,
    options: LabOptions,
    host_pids: dict[str, int],
    run_dir: Path,
    progress: Callable[[str], None],
) -> tuple[subprocess.Popen[bytes], Path]:
    """Write the agent's plan and start it on the shaped ports of `fabric` (hosts' shells by
    name in `host_pids`); returns the process and its log, at once (`wait_watching` waits)."""
    o = options
    plan = agent_plan(
        fabric, o.port_shapes(fabric), host_pids, o.mtu, o.lossless_poll_s, o.lossless_ingress
    )
    plan_file = run_dir / "lossless-plan.json"
    plan_file.write_text(plan.to_json())
    report = report_path(run_dir)
    report.unlink(missing_ok=True)
    log = run_dir / "lossless.log"
    progress(f"starting the lossless agent ({len(plan.thresholds)} ports, log {log})")
    with log.open("wb") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "zcube_lab.emulator.lab.lossless", str(plan_file), str(report)],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=realtime(o.lossless_priority) if o.lossless_priority else None,
        )  # fmt: skip
    return agent, log


def realtime(priority: int) -> Callable[[], None]:
    """A pre-exec hook putting the child at SCHED_FIFO `priority` (its threads inherit it);
    where the kernel refuses, the child runs as any process and says so in its log."""

    def hook() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
        except OSError as e:
            os.write(2, f"lossless agent: real-time priority refused ({e})\n".encode())

    return hook


def wait_watching(agent: subprocess.Popen[bytes], report: Path, log: Path) -> None:
    """Block until the agent has written its first report (it watches the ports then), or
    raise a LabError with its log's tail if it exits or 20 s pass."""
    deadline = time.monotonic() + 20
    while not report.exists():
        if agent.poll() is not None or time.monotonic() > deadline:
            text = log.read_text(errors="replace")[-2000:]
            raise LabError(f"the lossless agent did not start (see {log}):\n{text}")
        time.sleep(0.05)


def refresh_report(agent: subprocess.Popen[bytes], report: Path) -> None:
    """Ask a running agent to write its report now (SIGUSR1) and wait up to a second for it."""
    before = report.stat().st_mtime_ns if report.exists() else 0
    agent.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        if report.exists() and report.stat().st_mtime_ns != before:
            break
        time.sleep(0.01)


def force_pauses(
    agent: subprocess.Popen[bytes], report: Path, pauses: list[tuple[str, float, float]]
) -> bool:
    """Give a running agent forced pauses (`[port, start, end]`, monotonic seconds; empty:
    none) through FORCED_FILE beside its report and SIGUSR2; True once its report holds them
    (within two seconds)."""
    path = report.parent / FORCED_FILE
    rows = [[p, float(a), float(b)] for p, a, b in pauses]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pauses": rows}))
    tmp.replace(path)
    agent.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        got = read_report(report)
        if got is not None and got.forced == rows:
            return True
        time.sleep(0.01)
    return False


def stop_agent(agent: subprocess.Popen[bytes]) -> None:
    """SIGTERM the agent (it resumes every port and writes its report), then its group."""
    with contextlib.suppress(ProcessLookupError):
        agent.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        agent.wait(timeout=3)
    kill_group(agent.pid, grace=1.0)
    with contextlib.suppress(Exception):
        agent.wait(timeout=1)
