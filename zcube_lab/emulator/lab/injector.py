"""The fault injector: carries out a fault schedule on a running lab (needs root).

`FaultInjector` runs a schedule (`zcube_lab.core.fault_schedule.schedule`) in a thread
(`ip link set dev X down|up`), writes every transition to `faults.jsonl` with its wall time, exports
`zcube_fault_active{fault=...}` (1 while a fault holds) for Prometheus and Grafana annotations,
and restores every link it broke on stop. A `down` is stamped when the injector begins it, an
`up` once it is done (`took_s`: how long the action took), so the recorded window covers all
of a fault: a vswitchd kill and restart takes seconds, during which nothing forwards.

A process fault (engine, controller, vswitchd: `PROCESS_KINDS`) is handed to a `ProcessFaults`
(the launcher's, which knows the processes): `apply(transition)` kills or restarts, `restore()`
on stop starts again what a fault still holds stopped (the controller).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fault_schedule import (
    ACTIVE_METRIC,
    PROCESS_KINDS,
    Fault,
    Transition,
    schedule,
)
from zcube_lab.emulator.lab.system import run

Runner = Callable[[list[str]], None]


class ProcessFaults(Protocol):
    """Carries out process faults on a running lab."""

    def apply(self, transition: Transition) -> str:
        """Kill or restart what `transition` names; returns what was done (for the record)."""
        ...

    def restore(self) -> None:
        """Start again what a fault still holds stopped."""
        ...


def _ip_link(lines: list[str]) -> None:
    run(["ip", "-force", "-batch", "-"], timeout=10, input="\n".join(lines) + "\n")


class FaultInjector:
    """Runs a schedule in a background thread, from `t0` (wall time of the load start)."""

    def __init__(
        self,
        fabric: Fabric,
        faults: Sequence[Fault],
        log_path: Path,
        registry: Any = None,
        runner: Runner = _ip_link,
        progress: Callable[[str], None] | None = None,
        processes: ProcessFaults | None = None,
    ) -> None:
        self.fabric = fabric
        self.faults = list(faults)
        self.transitions = schedule(fabric, faults)
        self.log_path = log_path
        self._runner = runner
        self._processes = processes
        self._progress = progress or (lambda _m: None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._down: set[str] = set()
        self._lock = threading.Lock()
        self._log: IO[str] | None = None
        self._gauge = None
        if registry is not None:
            from prometheus_client import Gauge

            self._gauge = Gauge(
                ACTIVE_METRIC, "1 while an injected fault holds.", ["fault"], registry=registry
            )
            for f in self.faults:
                self._gauge.labels(f.label).set(0)

    def start(self, t0: float) -> None:
        self._log = self.log_path.open("a")
        self._thread = threading.Thread(target=self._run, args=(t0,), daemon=True)
        self._thread.start()

    def _apply(self, tr: Transition, t0: float) -> None:
        lines = [f"link set dev {name} {tr.action}" for name in tr.interfaces]
        with self._lock:  # recorded first: stop() restores it even if the command half-ran
            if tr.action == "down":
                self._down.update(tr.interfaces)
        error = done = ""
        started = time.time()
        if tr.kind in PROCESS_KINDS:
            try:
                if self._processes is None:
                    raise RuntimeError(f"no process control for a {tr.kind} fault")
                done = self._processes.apply(tr)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
        elif lines:
            try:
                self._runner(lines)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
        if tr.action == "up" and not error:
            with self._lock:
                self._down.difference_update(tr.interfaces)
        now = time.time()
        # A fault holds from when breaking began (a vswitchd kill and restart takes seconds, and
        # the fabric is down from its first moment) until what it broke is back.
        at = started if tr.action == "down" else now
        if self._gauge is not None:
            self._gauge.labels(tr.fault).set(1 if tr.action == "down" else 0)
        record = {
            "t_s": round(at - t0, 3),
            "planned_s": tr.t_s,
            "wall": at,
            "took_s": round(now - started, 3),
            "action": tr.action,
            "fault": tr.fault,
            "interfaces": list(tr.interfaces),
            "kind": tr.kind,
            "done": done,
            "error": error,
        }
        if self._log is not None:
            self._log.write(json.dumps(record) + "\n")
            self._log.flush()
        if error:
            self._progress(f"fault: {tr.fault} {tr.action} FAILED at {at - t0:.1f}s: {error}")
        else:
            self._progress(f"fault: {tr.fault} {tr.action} at {at - t0:.1f}s")

    def _run(self, t0: float) -> None:
        for tr in self.transitions:
            if self._stop.wait(max(0.0, t0 + tr.t_s - time.time())):
                return
            self._apply(tr, t0)

    def stop(self) -> None:
        """Stop the schedule and bring back every interface this injector set down."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        with self._lock:
            down = sorted(self._down)
            self._down.clear()
        if down:
            try:
                self._runner([f"link set dev {name} up" for name in down])
            except Exception as exc:
                self._progress(f"fault: restoring {down} failed: {exc}")
        if self._processes is not None:
            try:
                self._processes.restore()
            except Exception as exc:
                self._progress(f"fault: restoring processes failed: {exc}")
        if self._log is not None:
            self._log.close()
            self._log = None
