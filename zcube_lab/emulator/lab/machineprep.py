"""What this machine must be set to before a lab starts on it: the datapath chosen, the
userspace datapath's packet socket sizes, and the TCP congestion control the hosts use allowed.

Machine-wide settings a lab checks or changes at its start (`Lab._prepare_datapath`, and the
same on every machine of a cluster lab); each function returns what it changed, for the
progress line. Needs root to change anything. Names: `DATAPATH_*_BUFFER` are the socket sizes
the lab asks for, `*_SYSCTL` the folders of the kernel settings it reads and writes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from zcube_lab.core.fabric.hostplan import CONGESTION_CONTROLS
from zcube_lab.emulator.lab import ovs
from zcube_lab.emulator.lab.system import LabError, attempt

# The userspace datapath's shared send socket must hold every packet queued in every shaped
# switch port at once (see zcube_lab.emulator.lab.ovs); 64 MiB is about 3,800 jumbo frames at their
# kernel size (~17 KiB each). Each port's receive socket gets 8 MiB, ~480 frames of slack while
# ovs-vswitchd is descheduled on a busy 2-core machine.
DATAPATH_SEND_BUFFER = 64 * 2**20
DATAPATH_RECV_BUFFER = 8 * 2**20


CC_SYSCTL = Path("/proc/sys/net/ipv4")


def ensure_congestion_control(name: str, sysctl_dir: Path = CC_SYSCTL) -> list[str]:
    """Make TCP congestion control `name` settable as a host namespace's default, or raise a
    LabError naming what this kernel has. Loads `tcp_<name>` when the kernel lacks it, and adds
    it to `tcp_allowed_congestion_control` (a machine-wide list; the kernel lets a namespace
    other than the first default only to an algorithm on it: EPERM otherwise). Returns what
    it changed."""
    changed: list[str] = []
    available_file = sysctl_dir / "tcp_available_congestion_control"
    available = available_file.read_text().split()
    if name not in available:
        code, output = attempt(["modprobe", "-q", f"tcp_{name}"], timeout=20)
        available = available_file.read_text().split()
        if name not in available:
            raise LabError(
                f"TCP congestion control {name!r} is not in this kernel (available: "
                f"{', '.join(available)}; modprobe tcp_{name}: {output or code}); choose one of "
                f"{', '.join(c for c in CONGESTION_CONTROLS if c in available)}"
            )
        changed.append(f"loaded tcp_{name}")
    allowed_file = sysctl_dir / "tcp_allowed_congestion_control"
    allowed = allowed_file.read_text().split()
    if name not in allowed:
        allowed_file.write_text(" ".join([*allowed, name]) + "\n")
        changed.append(f"added {name} to net.ipv4.tcp_allowed_congestion_control")
    return changed


def pick_datapath(requested: str, ovs_instances: int, kernel_available: Callable[[], bool]) -> str:
    """The datapath a lab uses: `user` or `kernel` as asked; `auto` takes the kernel's when its
    module loads, except with private ovs-vswitchd instances, which are userspace only."""
    if requested != "auto":
        return requested
    if ovs_instances:
        return "user"
    return "kernel" if kernel_available() else "user"


def kernel_datapath_available() -> bool:
    """True when the openvswitch kernel module is loaded or loadable."""
    if Path("/sys/module/openvswitch").exists():
        return True
    code, _output = attempt(["modprobe", "-q", "openvswitch"], timeout=20)
    return code == 0 and Path("/sys/module/openvswitch").exists()


def prepare_datapath(requested: str, ovs_instances: int, progress: Callable[[str], None]) -> str:
    """Open vSwitch answers, the datapath is chosen (returned), and the userspace datapath's
    packet sockets are big enough that no packet is lost between a switch and its ports
    (`ovs.ensure_socket_buffers` says why)."""
    for name, (code, output) in (
        ("ovsdb-server", ovs.db_status()),
        ("ovs-vswitchd", ovs.vswitchd_status()),
    ):
        if code != 0:
            raise LabError(
                f"Open vSwitch is not running ({name}: {output.strip() or 'no answer'}); "
                "start it with scripts/setup.sh or /usr/share/openvswitch/scripts/ovs-ctl start"
            )
    datapath = pick_datapath(requested, ovs_instances, kernel_datapath_available)
    if datapath == "user":
        changed = ovs.ensure_socket_buffers(DATAPATH_SEND_BUFFER, DATAPATH_RECV_BUFFER)
        if changed:
            progress(f"datapath socket buffers: {'; '.join(changed)}")
    return datapath
