"""Remove what a killed run left on this machine and print what went: the sweep every `up`
and `run` does before it starts (zcube_lab.emulator.lab.state). Needs root; a second clean finds
nothing.

For each state file in $ZCUBE_LAB_STATE (default /tmp/zcube-lab) whose run is gone: that run's
processes (controller, Mininet's host shells and with them the hosts' namespaces, serving
processes, Prometheus, Locust), its switches' bridges and its root-side interfaces (the
management bridge zcl-mgmt with its address, the hosts' management links), then the file.
Then Open vSwitch bridges marked as a run's (external_ids:zcube-lab=<pid>) whose run is gone,
and the namespaces zcl-doctor-<pid> and zcl-tun-<pid> whose process is gone. With --peer, also
the peer machine scripts/peer.sh started; without it a running peer is only named, since it
may be in use.

While a run is up (its state file's pid alive) nothing is removed and the exit code is 1.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

PEER_SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "peer.sh"
PEER_PIDFILE = Path("/run/zcube-lab-peer/pid")  # scripts/peer.sh's RUNDIR/pid


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Whether to stop the peer machine too."""
    parser.add_argument(
        "--peer",
        action="store_true",
        help="also stop the peer machine that scripts/peer.sh started, if it runs",
    )


def peer_running(pidfile: Path = PEER_PIDFILE) -> int | None:
    """The peer machine's pid when it runs, else None."""
    from zcube_lab.adapters.procs import pid_alive

    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def stop_peer(script: Path = PEER_SCRIPT) -> str:
    """`scripts/peer.sh stop`; what it said."""
    if not script.exists():
        raise FileNotFoundError(f"{script} is not there (an installed copy has no scripts/)")
    done = subprocess.run(
        [str(script), "stop"], capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script} stop failed: {(done.stderr or done.stdout).strip()}")
    return done.stdout.strip()


def run(args: argparse.Namespace) -> int:
    """Sweep; print each thing removed (or that there was nothing); 0, or 1 when refused."""
    from zcube_lab.emulator.lab.state import STATE_DIR, remove_stale_state
    from zcube_lab.emulator.lab.system import LabError

    if os.geteuid() != 0:
        print("zcube-lab clean: needs root (it deletes bridges, interfaces and namespaces)")
        return 1
    try:
        removed = remove_stale_state(STATE_DIR)
    except LabError as exc:
        print(f"zcube-lab clean: nothing removed: {exc}")
        return 1
    peer = peer_running()
    if peer is not None and args.peer:
        try:
            stop_peer()
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            print(f"zcube-lab clean: the peer machine (pid {peer}) was not stopped: {exc}")
            return 1
        removed.append(f"peer machine (pid {peer})")
    for thing in removed:
        print(f"removed {thing}")
    if not removed:
        print(
            f"nothing to remove: no state of a killed run in {STATE_DIR}, no stale bridge or "
            "namespace"
        )
    if peer is not None and not args.peer:
        print(f"the peer machine is running (pid {peer}); `zcube-lab clean --peer` stops it")
    return 0
