"""Open vSwitch's daemons as the lab runs them: the system ovsdb-server and ovs-vswitchd, the
lab's private instances, the userspace datapath's packet sockets and the send errors its daemon
logs.

Thin adapters over `system.run` (argument lists, timeouts): ask whether ovsdb and ovs-vswitchd
answer; start, stop, kill and find private instances; size and read ovs-vswitchd's packet
sockets. Parsing the tools' text is kept in small pure functions beside them. The bridges and
what they hold (flows, groups, counters) are `zcube_lab.emulator.lab.ovsbridges`; nothing but these
two modules runs an `ovs-*` program. Names: the tools' and daemons' names are constants in capitals
(`VSCTL`, `APPCTL`, `VSWITCHD`, ...), a private instance is an `Instance`, and a function that
acts on one takes it as `inst` (None: the system instance).

Private instances (`LabOptions.ovs_instances`): besides the system Open vSwitch, a lab may run
several ovs-vswitchd daemons of its own, each with its own ovsdb-server, database, run folder
and unix sockets under `INSTANCE_ROOT/<owner pid>-<k>/`, so each main loop polls only its own
switches' ports and the daemons spread over the cores (issue 20). Their bridges use the `dummy`
datapath type (ovs-vswitchd `--enable-dummy`): the same userspace datapath (dpif-netdev, system
ports through AF_PACKET), but its internal ports are not kernel taps, so several instances do
not fight over the one `ovs-netdev` tap of the root namespace (a second netdev datapath fails
with EBUSY) and leave no tap behind. The instance holding a bridge is found by the bridge's
OpenFlow management socket (`<run folder>/<bridge>.mgmt`, `instance_of`). Their logs go to the
system daemon's log file (opened O_APPEND by each), so `send_errors_since` sees them all.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from zcube_lab.emulator.lab.system import LabError, attempt, run

VSCTL = "ovs-vsctl"
OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"
VSWITCHD_LOG = Path("/var/log/openvswitch/ovs-vswitchd.log")
# What ovs-vswitchd logs (rate-limited) when the userspace datapath could not hand a packet to a
# port: the packet is gone, and no port, qdisc or OpenFlow counter records it.
SEND_ERROR = "error sending Ethernet packet"
SYSCTL = Path("/proc/sys/net/core")
APPCTL = "ovs-appctl"
OVSDB_TOOL = "ovsdb-tool"
OVSDB_SERVER = "ovsdb-server"
VSWITCHD = "ovs-vswitchd"
VSWITCH_SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
INSTANCE_ROOT = Path(os.environ.get("ZCUBE_LAB_OVS_DIR", "/run/zcube-lab/ovs"))
PRIVATE_DATAPATH_TYPE = "dummy"  # dpif-netdev without kernel taps (see the module doc)
# A fresh ovs-vswitchd's main thread mallocs a batch of 32 MTU-sized packet buffers per port
# per pass and frees most of them at once; glibc then trims the top of the heap (its default
# threshold, 128 KiB, is only raised once a large mmapped chunk was freed, which a young daemon
# with few ports may never do), and the next pass faults the pages in again: 225,000-350,000
# minor faults/s and twice the CPU per Mb on the levers bench. Fixed thresholds stop that (the
# system daemon, long-lived, showed 0 faults/s).
MALLOC_TUNABLES = "glibc.malloc.trim_threshold=67108864:glibc.malloc.mmap_threshold=4194304"


def installed() -> bool:
    """Whether Open vSwitch's command-line tools are on PATH."""
    return shutil.which(VSCTL) is not None


# ---- instances ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instance:
    """A private Open vSwitch: ovsdb-server and ovs-vswitchd with their own run folder."""

    rundir: Path

    @property
    def db(self) -> str:
        """The ovsdb remote (`ovs-vsctl --db=`)."""
        return f"unix:{self.rundir / 'db.sock'}"

    @property
    def vswitchd_ctl(self) -> Path:
        return self.rundir / "ovs-vswitchd.ctl"

    @property
    def owner(self) -> int | None:
        """The pid of the lab that made it (the folder is `<owner>-<k>`), None if unnamed so."""
        head = self.rundir.name.split("-")[0]
        return int(head) if head.isdigit() else None

    def pids(self) -> dict[str, int]:
        """Its daemons' pids from their pidfiles ({name: pid}, those with a readable file)."""
        found = {}
        for name in (OVSDB_SERVER, VSWITCHD):
            with contextlib.suppress(OSError, ValueError):
                found[name] = int((self.rundir / f"{name}.pid").read_text().strip())
        return found


def vsctl_argv(instance: Instance | None = None) -> list[str]:
    """`ovs-vsctl`, addressed to `instance` (None: the system one)."""
    return [VSCTL] if instance is None else [VSCTL, f"--db={instance.db}"]


def running_instances(root: Path | None = None) -> list[Instance]:
    """The private instances whose database socket exists under `root` (default
    `INSTANCE_ROOT`), in name order."""
    root = INSTANCE_ROOT if root is None else root
    if not root.is_dir():
        return []
    return [Instance(d) for d in sorted(root.iterdir()) if (d / "db.sock").exists()]


def instance_of(bridge: str, root: Path | None = None) -> Instance | None:
    """The private instance holding `bridge` (its management socket is in that run folder);
    None: the system instance."""
    root = INSTANCE_ROOT if root is None else root
    if root.is_dir():
        for d in sorted(root.iterdir()):
            if (d / f"{bridge}.mgmt").exists():
                return Instance(d)
    return None


def start_instance(
    rundir: Path, timeout_s: float = 20.0, other_config: dict[str, str] | None = None
) -> Instance:
    """Create a database in `rundir` and start ovsdb-server and ovs-vswitchd on it (detached,
    logging to the system daemon's log); returns once ovs-vswitchd answers. `other_config`:
    Open_vSwitch other_config keys set before ovs-vswitchd starts (some, such as
    `userspace-tso-enable`, are read only at start). Needs root."""
    rundir.mkdir(parents=True, exist_ok=True)
    inst = Instance(rundir)
    db = rundir / "conf.db"
    db.unlink(missing_ok=True)
    run([OVSDB_TOOL, "create", str(db), str(VSWITCH_SCHEMA)])
    common = ["--detach", "--no-chdir", "-vconsole:off", "-vsyslog:off"]
    run(
        [
            OVSDB_SERVER,
            str(db),
            f"--remote=punix:{rundir / 'db.sock'}",
            f"--pidfile={rundir / 'ovsdb-server.pid'}",
            f"--unixctl={rundir / 'ovsdb-server.ctl'}",
            f"--log-file={rundir / 'ovsdb-server.log'}",
            *common,
        ]
    )
    run([*vsctl_argv(inst), "--no-wait", "init"])
    for key, value in (other_config or {}).items():
        run(
            [
                *vsctl_argv(inst),
                "--no-wait",
                "set",
                "Open_vSwitch",
                ".",
                f"other_config:{key}={value}",
            ]
        )
    start_vswitchd(inst, timeout_s)
    return inst


def start_vswitchd(
    inst: Instance,
    timeout_s: float = 20.0,
    binary: str = VSWITCHD,
    env: dict[str, str] | None = None,
) -> None:
    """Start a private instance's ovs-vswitchd on its database (its bridges come back from it)
    and wait until it answers. `binary` and `env`: another build of it (the DPDK one of
    bench/datapath_levers.py) and what it needs in its environment."""
    rundir = inst.rundir
    run(
        [
            "env",
            f"OVS_RUNDIR={rundir}",  # where its bridges' .mgmt sockets go
            f"GLIBC_TUNABLES={MALLOC_TUNABLES}",
            *(f"{k}={v}" for k, v in (env or {}).items()),
            binary,
            inst.db,
            "--enable-dummy",
            "--mlockall",  # as ovs-ctl starts the system daemon
            f"--pidfile={rundir / 'ovs-vswitchd.pid'}",
            f"--unixctl={inst.vswitchd_ctl}",
            f"--log-file={VSWITCHD_LOG}",
            "--detach",
            "--no-chdir",
            "-vconsole:off",
            "-vsyslog:off",
        ],
        timeout=60,
    )
    deadline = time.monotonic() + timeout_s
    while instance_status(inst)[0] != 0:
        if time.monotonic() > deadline:
            raise LabError(f"ovs-vswitchd in {rundir} did not answer within {timeout_s:g}s")
        time.sleep(0.05)


RECONFIGURED_KEY = "zcube-reconfigured"  # a bridge external id `wait_reconfigured` writes


def wait_reconfigured(bridge: str, inst: Instance | None = None, timeout_s: float = 30.0) -> None:
    """Block until the ovs-vswitchd of `inst` (None: the system one) has applied its whole
    database: every bridge and port in it added, and each port's qdisc already reset by Open
    vSwitch (see `Lab.start_vswitchd`). A read-only ovs-vsctl command does not wait for the
    daemon, so this writes a mark on `bridge` (one of the caller's) and waits, as every
    ovs-vsctl write does without `--no-wait`, until the daemon has reconfigured after it."""
    run(
        [
            *vsctl_argv(inst),
            f"--timeout={timeout_s:g}",
            "br-set-external-id",
            bridge,
            RECONFIGURED_KEY,
            f"{time.time():.6f}",
        ],
        timeout=timeout_s + 5,
    )


def kill_vswitchd(inst: Instance) -> int:
    """SIGKILL a private instance's ovs-vswitchd (a vswitchd fault); returns its pid."""
    pid = inst.pids()[VSWITCHD]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.05)
    return pid


def stop_instance(inst: Instance, grace_s: float = 5.0) -> None:
    """Stop a private instance's daemons (ovs-vswitchd first, asked, then killed) and remove
    its run folder. Its bridges go with its database."""
    pids = inst.pids()
    attempt([APPCTL, "-t", str(inst.vswitchd_ctl), "exit"], timeout=grace_s)
    attempt([APPCTL, "-t", str(inst.rundir / "ovsdb-server.ctl"), "exit"], timeout=grace_s)
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace_s
    while any(not exited(pid) for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.05)
    shutil.rmtree(inst.rundir, ignore_errors=True)


def exited(pid: int) -> bool:
    """The process has exited (a zombie waiting for its reaper counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2 :].startswith(("Z", "X"))


def stale_instances(
    alive: Callable[[int], bool], me: int, root: Path | None = None
) -> list[Instance]:
    """Private instance folders under `root` whose owning lab is gone (not `me`, not alive)."""
    root = INSTANCE_ROOT if root is None else root
    if not root.is_dir():
        return []
    found = []
    for d in sorted(root.iterdir()):
        owner = Instance(d).owner
        if d.is_dir() and (owner is None or (owner != me and not alive(owner))):
            found.append(Instance(d))
    return found


def instance_status(inst: Instance, timeout_s: float = 3) -> tuple[int | None, str]:
    """Whether a private ovs-vswitchd answers (`ovs-appctl -t CTL version`)."""
    return attempt([APPCTL, "-t", str(inst.vswitchd_ctl), f"--timeout={timeout_s:g}", "version"])


def vswitchd_pids() -> list[int]:
    """The pids of every private instance's ovs-vswitchd (from their pidfiles)."""
    return [p for inst in running_instances() if (p := inst.pids().get(VSWITCHD))]


def appctl(inst: Instance | None, *args: str, timeout: float = 10) -> str:
    """`ovs-appctl ARGS` to an instance's ovs-vswitchd (None: the system one); its stdout."""
    target = [] if inst is None else ["-t", str(inst.vswitchd_ctl)]
    return run([APPCTL, *target, *args], check=False, timeout=timeout)


def instance_groups(switches: list[str], instances: int) -> list[list[str]]:
    """`switches` dealt to `instances` daemons in contiguous runs of their order, as even as
    can be (ZCube n=4 and 2 instances: the A group and the B group); never an empty run.
    Pure."""
    n = max(1, min(instances, len(switches)))
    base, extra = divmod(len(switches), n)
    groups, at = [], 0
    for k in range(n):
        size = base + (1 if k < extra else 0)
        groups.append(switches[at : at + size])
        at += size
    return groups


# ---- daemons --------------------------------------------------------------------------------


def db_status(timeout_s: float = 3) -> tuple[int | None, str]:
    """Whether ovsdb-server answers (`ovs-vsctl show`): (return code or None, output)."""
    return attempt([VSCTL, f"--timeout={timeout_s:g}", "show"])


def vswitchd_status(timeout_s: float = 3) -> tuple[int | None, str]:
    """Whether ovs-vswitchd answers (`ovs-appctl version`): (return code or None, output)."""
    return attempt([APPCTL, f"--timeout={timeout_s:g}", "version"])


# ---- the userspace datapath's packet sockets ------------------------------------------------
#
# The userspace datapath reads each system port through its own AF_PACKET socket and sends to
# every port through ONE shared AF_PACKET socket, created at the first send and kept for the
# daemon's life. A sent packet stays charged to that socket's send buffer until the port's qdisc
# transmits it, so the buffer caps the bytes queued in every shaped switch port of every bridge
# together. At the kernel default (net.core.wmem_default, 208 KiB: about 12 jumbo frames) a few
# busy ports exhaust it, and ovs-vswitchd then drops packets silently apart from a rate-limited
# log line ("Resource temporarily unavailable"): lost SYNs and tail segments, i.e. the 1 s KV
# stalls of issue 11. The lab raises the default before the socket exists (restarting
# ovs-vswitchd when it already holds a smaller one), so the per-port queue limit, not this shared
# cap, decides when a switch drops.


@dataclass(frozen=True)
class PacketSocket:
    """One of ovs-vswitchd's AF_PACKET sockets as `ss -0 -m -p -n` shows it."""

    local: str  # `[0]:*` for the unbound send socket, `*:<ifname>` for a port's receive socket
    rcvbuf: int
    sndbuf: int
    queued_send: int  # bytes charged to the send buffer now
    drops: int  # packets the kernel dropped because the receive buffer was full

    @property
    def is_send_socket(self) -> bool:
        return self.local.startswith("[0]")


_SKMEM = re.compile(r"skmem:\(r\d+,rb(\d+),t(\d+),tb(\d+),.*?d(\d+)\)")


def parse_packet_sockets(text: str, process: str = "ovs-vswitchd") -> list[PacketSocket]:
    """The packet sockets of `process` in `ss -0 -m -p -n` output (pure)."""
    found = []
    for line in text.splitlines():
        if f'"{process}"' not in line:
            continue
        m = _SKMEM.search(line)
        parts = line.split()
        if m is None or len(parts) < 4:
            continue
        rcvbuf, queued, sndbuf, drops = (int(g) for g in m.groups())
        found.append(PacketSocket(parts[3], rcvbuf, sndbuf, queued, drops))
    return found


def packet_sockets() -> list[PacketSocket]:
    """ovs-vswitchd's packet sockets now (empty when `ss` or the daemon is missing)."""
    _code, out = attempt(["ss", "-0", "-m", "-p", "-n"], timeout=10)
    return parse_packet_sockets(out)


def _sysctl(name: str) -> int:
    return int((SYSCTL / name).read_text().split()[0])


def ensure_socket_buffers(send_bytes: int, recv_bytes: int) -> list[str]:
    """Make the datapath's send socket hold at least `send_bytes` and every port's receive
    socket `recv_bytes` (system-wide defaults: net.core.wmem_default/rmem_default; receive sockets
    are made when the lab adds its ports). Restarts ovs-vswitchd when its send socket already
    exists with a smaller buffer. Returns what it changed, for the progress line; needs root."""
    done = []
    for name, need in (("wmem_default", send_bytes), ("rmem_default", recv_bytes)):
        if _sysctl(name) < need:
            (SYSCTL / name).write_text(f"{need}\n")
            done.append(f"net.core.{name}={need}")
    small = [s for s in packet_sockets() if s.is_send_socket and s.sndbuf < send_bytes]
    if small:
        run([OVS_CTL, "restart", "--system-id=random"], timeout=120)
        done.append(f"restarted ovs-vswitchd (its send buffer was {small[0].sndbuf} bytes)")
    return done


def log_size() -> int:
    """Where ovs-vswitchd's log ends now (0 when absent); pass to `send_errors_since`."""
    try:
        return VSWITCHD_LOG.stat().st_size
    except OSError:
        return 0


def send_errors_since(offset: int) -> list[str]:
    """ovs-vswitchd's "error sending" lines logged after `offset` (rate-limited by the daemon:
    one line means at least one packet lost, not exactly one)."""
    try:
        with VSWITCHD_LOG.open("rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if SEND_ERROR in line]
