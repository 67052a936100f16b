"""The lab's control plane: our OpenFlow controller's command line, the wait for it to listen,
and the wait for its rules in every bridge.

The controller (`python -m zcube_lab.controller`) gets the fabric as `FabricSpec` JSON and the lab's
routing options, runs in its own session (so its process group can be killed), and logs to the
run folder's `controller.log`; the lab starts it (`Lab._start_controller`) before any switch
exists, waits for its "controller listening" line, and once the switches are up waits until
every bridge holds exactly the flow entries the controller computes (`Lab.expected_rules`).
Names: `controller_argv` is its command line, `wait_<what>` a wait that raises a `LabError`
naming what was missing when its time is up.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from zcube_lab.core.fabric.description import Fabric
from zcube_lab.emulator.lab.options import LabOptions
from zcube_lab.emulator.lab.system import LabError


def controller_argv(fabric: Fabric, options: LabOptions) -> list[str]:
    """The controller's command line for `fabric` realized with `options`."""
    o = options
    argv = [
        sys.executable,
        "-m",
        "zcube_lab.controller",
        "--fabric-spec",
        fabric.spec.to_json(),
        "--policy",
        o.policy,
        "--listen-host",
        o.of_host,
        "--of-port",
        str(o.of_port),
        "--metrics-port",
        str(o.metrics_port),
        "--poll-interval",
        str(o.poll_interval),
    ]
    if o.idle_poll_interval > o.poll_interval:
        argv += ["--idle-poll-interval", str(o.idle_poll_interval)]
    if o.recompute:
        argv.append("--recompute")
    if o.ev_rules:
        argv.append("--ev-rules")
    return argv


def wait_listening(
    proc: subprocess.Popen[bytes], timeout: float, log: Path, offset: int = 0
) -> None:
    """Wait for the controller's "listening" line (connecting to probe would look like a
    switch to it), after byte `offset` of its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_bytes()[offset:].decode(errors="replace") if log.exists() else ""
        if "controller listening" in text:
            return
        if proc.poll() is not None:
            raise LabError(f"controller exited with {proc.returncode}:\n{text[-2000:]}")
        time.sleep(0.05)
    raise LabError(f"controller did not start listening within {timeout:.0f}s; see {log}")


def wait_resynced(
    proc: subprocess.Popen[bytes], switches: list[str], timeout: float, log: Path, offset: int
) -> list[str]:
    """Wait until every switch in `switches` has reconnected and had its rules installed
    again, after byte `offset` of the controller's log; returns the ones that have not."""
    deadline = time.monotonic() + timeout
    missing = list(switches)
    while True:
        text = log.read_bytes()[offset:].decode(errors="replace") if log.exists() else ""
        missing = [s for s in switches if f"{s}: rules installed" not in text]
        if not missing or time.monotonic() > deadline or proc.poll() is not None:
            return missing
        time.sleep(0.05)


def wait_routed(
    expected: dict[str, int], installed: Callable[[], dict[str, int]], timeout: float, log: Path
) -> dict[str, int]:
    """Block until `installed()` (flow entries per bridge) equals `expected`; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        found = installed()
        if found == expected:
            return found
        if time.monotonic() > deadline:
            missing = {k: (found.get(k), v) for k, v in expected.items() if found.get(k) != v}
            raise LabError(
                f"routes not installed within {timeout:.0f}s "
                f"(switch: (installed, expected)) {missing}; see {log}"
            )
        time.sleep(0.25)
