"""Process faults on a running lab (needs root): what `FaultInjector` hands a transition of an
engine, controller or vswitchd fault to (`zcube_lab.core.fault_schedule.PROCESS_KINDS`).

- engine NAME: SIGKILL to the engine's process group (it leads one, like every role the
  launcher starts); it stays dead. Its sockets close with it, so the gateway sees the in-flight
  requests fail at once and refused connections for new ones (`zcube_lab.serving.gateway` then
  routes them to another engine).
- controller: SIGKILL, then (at the fault's end, or on `restore`) the same controller started
  again; the switches keep their rules meanwhile (fail mode secure) and reconnect by themselves.
  The new pid is handed to `follow` ("controller", pid), so the health sampler watches the new
  process rather than the dead one.
- vswitchd: SIGKILL to ovs-vswitchd, then started again at once (the lab's `kill_vswitchd` and
  `start_vswitchd`: its private instances when it runs some, else the system daemon, by its pid
  file and `ovs-ctl start`): the bridges come back from ovsdb without their flows until the
  controller reinstalls them, and the lab shapes their ports again. A run with it is not
  trustworthy (the health verdict says so).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from zcube_lab.core.fault_schedule import Transition
from zcube_lab.emulator.lab import ovs
from zcube_lab.emulator.lab.system import LabError, run

VSWITCHD_PID = Path("/var/run/openvswitch/ovs-vswitchd.pid")


def kill_vswitchd(pid_file: Path = VSWITCHD_PID) -> int:
    """SIGKILL the running ovs-vswitchd; returns its pid."""
    pid = int(pid_file.read_text().strip())
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)
    return pid


def start_vswitchd(pid_file: Path = VSWITCHD_PID) -> int:
    """Start ovs-vswitchd again (ovsdb-server still runs) and wait until it answers; returns
    its pid."""
    run([ovs.OVS_CTL, "--no-ovsdb-server", "start", "--system-id=random"], timeout=120)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if ovs.vswitchd_status()[0] == 0:
            return int(pid_file.read_text().strip())
        time.sleep(0.2)
    raise LabError("ovs-vswitchd did not answer within 30s of its restart")


class LabProcessFaults:
    """Process faults on the processes of one run.

    - engines: engine name -> its process (the launcher's);
    - stop_controller / restart_controller: the lab's;
    - follow: told (name, pid) of a process a fault restarted (`HealthSampler.register`);
    - vswitchd_kill / vswitchd_start: replaceable (tests).
    """

    def __init__(
        self,
        engines: Mapping[str, subprocess.Popen[bytes]],
        stop_controller: Callable[[], None],
        restart_controller: Callable[[], int],
        vswitchd_kill: Callable[[], int] = kill_vswitchd,
        vswitchd_start: Callable[[], int] = start_vswitchd,
        follow: Callable[[str, int], None] | None = None,
    ) -> None:
        self.engines = dict(engines)
        self._stop_controller = stop_controller
        self._restart_controller = restart_controller
        self._vswitchd_kill = vswitchd_kill
        self._vswitchd_start = vswitchd_start
        self._follow = follow
        self.controller_down = False
        self.killed: list[str] = []

    def apply(self, transition: Transition) -> str:
        """Kill or restart what the transition names; returns what was done."""
        kind, action = transition.kind, transition.action
        if kind == "engine":
            if action != "down":
                return ""
            proc = self.engines[transition.target]
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            self.killed.append(transition.target)
            return f"killed {transition.target} (pid {proc.pid})"
        if kind == "controller":
            if action == "down":
                self._stop_controller()
                self.controller_down = True
                return "controller killed"
            pid = self._controller_back()
            return f"controller restarted (pid {pid})"
        if kind == "vswitchd":
            if action != "down":
                return ""
            pid = self._vswitchd_kill()
            new = self._vswitchd_start()
            return f"ovs-vswitchd killed (pid {pid}) and started again (pid {new})"
        raise ValueError(f"not a process fault: {kind}")

    def restore(self) -> None:
        """Start the controller again if a fault still holds it stopped (engines stay dead:
        teardown stops them anyway)."""
        if self.controller_down:
            self._controller_back()

    def _controller_back(self) -> int:
        pid = self._restart_controller()
        self.controller_down = False
        if self._follow is not None:
            self._follow("controller", pid)
        return pid
