"""The lab's state file: what a run created, so that what a killed run left behind can go.

One file per run, `<state dir>/lab-<pid>.json` (default folder `/tmp/zcube-lab`, or
`$ZCUBE_LAB_STATE`), rewritten as the run starts things: `owner` (the run's pid), `fabric` (its
spec as JSON), `bridges`, root-side `interfaces`, `pids` of its processes with their `starts`
(start times, which tell a recorded process from a later one that reused its pid), `run_dir`.
Each bridge also carries `external_ids:zcube-lab=<owner pid>` (`OWNER_KEY`), so bridges of a
run that crashed before writing its file are found too.

`sweep` removes what one file lists (processes, bridges, interfaces) and the file: `Lab.stop()`
sweeps its own, `remove_stale_state()` (at every start, and `zcube-lab clean`) those of runs
that are gone, then the bridges marked by a dead pid and the named network namespaces a killed
`doctor` (`zcl-doctor-<pid>`) or tunnel check (`zcl-tun-<pid>`) left.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from zcube_lab.adapters.procs import kill_group, pid_alive
from zcube_lab.emulator.lab import ovs, ovsbridges
from zcube_lab.emulator.lab.system import LabError, run

STATE_DIR = Path(os.environ.get("ZCUBE_LAB_STATE", "/tmp/zcube-lab"))
OWNER_KEY = "zcube-lab"
# Network namespaces named after the process that made them (doctor's qdisc probe, the
# cluster's tunnel check): theirs to delete, or a later sweep's once that process is gone.
OWNED_NAMESPACE = re.compile(r"zcl-(?:doctor|tun)-(\d+)")


@dataclass(frozen=True)
class LabState:
    """What one run created, as its state file records it."""

    owner: int
    fabric: str = ""  # the FabricSpec as JSON
    bridges: tuple[str, ...] = ()
    interfaces: tuple[str, ...] = ()  # root-namespace interfaces to delete
    pids: tuple[int, ...] = ()
    starts: Mapping[str, int] = field(default_factory=dict)  # pid -> start time (clock ticks)
    run_dir: str = ""

    def to_json(self) -> str:
        """The state file's text (keys in the order earlier versions wrote them)."""
        return json.dumps(
            {
                "owner": self.owner,
                "fabric": self.fabric,
                "bridges": list(self.bridges),
                "interfaces": list(self.interfaces),
                "pids": list(self.pids),
                "starts": dict(self.starts),
                "run_dir": self.run_dir,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> LabState:
        """Parse a state file; missing keys mean nothing recorded (ValueError if not JSON)."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a state file holds one JSON object")
        return cls(
            owner=int(data.get("owner", 0)),
            fabric=data.get("fabric", ""),
            bridges=tuple(data.get("bridges", [])),
            interfaces=tuple(data.get("interfaces", [])),
            pids=tuple(data.get("pids", [])),
            starts=dict(data.get("starts", {})),
            run_dir=data.get("run_dir", ""),
        )


def state_path(state_dir: Path, owner: int) -> Path:
    """The state file of the run with pid `owner`."""
    return state_dir / f"lab-{owner}.json"


def read_state(path: Path) -> LabState | None:
    """The state a file records, or None when it is missing or unreadable."""
    try:
        return LabState.from_json(path.read_text())
    except (OSError, ValueError):
        return None


def write_state(path: Path, state: LabState) -> None:
    """Write a run's state file, recording the start time of each pid when it is first seen
    (a process recorded earlier keeps its first start time, even if it is gone now)."""
    check_state_dir(path.parent)
    starts = dict(state.starts)
    earlier = read_state(path) if path.exists() else None
    if earlier is not None:
        starts = {**earlier.starts, **starts}
    for p in state.pids:
        if str(p) not in starts and (t := process_start_time(p)) is not None:
            starts[str(p)] = t
    path.write_text(replace(state, starts=starts).to_json())


def process_start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22), which
    tells a recorded process from a later one that reused its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def same_process(pid: int, starts: Mapping[str, int]) -> bool:
    """Alive, and (when its start time was recorded) the very process that was recorded."""
    if not pid_alive(pid):
        return False
    recorded = starts.get(str(pid))
    return recorded is None or recorded == process_start_time(pid)


def check_state_dir(path: Path) -> None:
    """Create the state folder (mode 0700) or refuse one that root must not trust: a symlink,
    or a folder another user owns (it lists processes and interfaces root will remove)."""
    if path.is_symlink():
        raise LabError(f"state folder {path} is a symlink; remove it")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_uid != os.geteuid():
        raise LabError(f"state folder {path} belongs to another user; remove it")


def sweep(state: LabState, grace: float = 1.0) -> list[str]:
    """Remove what a state records: its processes (their groups get `grace` seconds after
    SIGTERM), bridges and root-side interfaces. Returns what was removed."""
    removed: list[str] = []
    for pid in state.pids:
        if same_process(pid, state.starts):
            kill_group(pid, grace=grace)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            removed.append(f"process {pid}")
    removed += delete_bridges(list(state.bridges))
    for intf in state.interfaces:
        if Path(f"/sys/class/net/{intf}").exists():
            run(["ip", "link", "del", intf], check=False)
            removed.append(f"interface {intf}")
    return removed


def delete_bridges(names: list[str]) -> list[str]:
    """Delete these bridges and the tap devices userspace bridges leave behind."""
    gone = ovsbridges.delete_bridges(names)
    for b in names:
        # A userspace bridge leaves its tap device behind.
        if Path(f"/sys/class/net/{b}").exists():
            run(["ip", "link", "del", b], check=False)
    return [f"bridge {b}" for b in gone]


def remove_stale_state(state_dir: Path = STATE_DIR) -> list[str]:
    """Remove what crashed runs left: their processes, bridges and root-side interfaces.

    Refuses (LabError), removing nothing, when the run that owns a state file is still alive.
    """
    removed: list[str] = []
    me = os.getpid()
    if state_dir.exists() or state_dir.is_symlink():
        check_state_dir(state_dir)
        states = [(path, read_state(path)) for path in sorted(state_dir.glob("lab-*.json"))]
        for path, state in states:  # all checked before anything is removed
            if state and state.owner and state.owner != me and pid_alive(state.owner):
                raise LabError(
                    f"another zcube-lab run (pid {state.owner}) is up; stop it first "
                    f"(state file {path})"
                )
        for path, state in states:
            if state is not None:
                removed += sweep(state)
            path.unlink(missing_ok=True)
    # Private Open vSwitch instances (`LabOptions.ovs_instances`) whose lab is gone: their
    # bridges go with their database; their ports' interfaces were swept above.
    for inst in ovs.stale_instances(pid_alive, me):
        ovs.stop_instance(inst)
        removed.append(f"ovs instance {inst.rundir.name}")
    # Bridges marked as ours whose state file is gone (a crash before it was written).
    if ovs.installed():
        orphans = [
            name
            for name, owner in ovsbridges.marked_bridges(OWNER_KEY).items()
            if owner != me and not pid_alive(owner)
        ]
        removed += delete_bridges(orphans)
    removed += remove_stale_namespaces()
    return removed


def netns_names(text: str) -> list[str]:
    """The names `ip netns list` prints, one a line (`name` or `name (id: N)`)."""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def stale_namespaces(names: Iterable[str], alive: Callable[[int], bool] = pid_alive) -> list[str]:
    """The named namespaces of ours (`OWNED_NAMESPACE`) whose process is gone."""
    out = []
    for name in names:
        m = OWNED_NAMESPACE.fullmatch(name)
        if m and int(m.group(1)) != os.getpid() and not alive(int(m.group(1))):
            out.append(name)
    return out


def remove_stale_namespaces() -> list[str]:
    """Delete the stale namespaces of ours, killing what still runs in them."""
    try:
        names = stale_namespaces(netns_names(run(["ip", "netns", "list"], check=False)))
    except (OSError, subprocess.SubprocessError):  # no `ip`: nothing of ours to find
        return []
    removed = []
    for ns in names:
        for pid in run(["ip", "netns", "pids", ns], check=False).split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        run(["ip", "netns", "del", ns], check=False)
        removed.append(f"namespace {ns}")
    return removed
