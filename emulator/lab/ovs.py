"""Every call the lab makes to Open vSwitch's tools: `ovs-vsctl`, `ovs-ofctl`, `ovs-appctl`.

Thin adapters over `system.run` (argument lists, timeouts): list, find and delete bridges, dump
a bridge's flows, groups, port and group counters, check a bridge against the controller's
computed rules, and ask whether ovsdb and ovs-vswitchd answer. Parsing the tools' text is kept
in small pure functions beside them. Nothing else in the lab runs an `ovs-*` program.

OpenFlow commands speak 1.3 (`-O OpenFlow13`), the only version our controller and bridges use.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from controller.ofctl import dump_lines, line_differences
from controller.rules import SwitchRules
from emulator.lab.system import attempt, run

VSCTL = "ovs-vsctl"
OVS_CTL = "/usr/share/openvswitch/scripts/ovs-ctl"
VSWITCHD_LOG = Path("/var/log/openvswitch/ovs-vswitchd.log")
# What ovs-vswitchd logs (rate-limited) when the userspace datapath could not hand a packet to a
# port: the packet is gone, and no port, qdisc or OpenFlow counter records it.
SEND_ERROR = "error sending Ethernet packet"
SYSCTL = Path("/proc/sys/net/core")
OFCTL = "ovs-ofctl"
APPCTL = "ovs-appctl"
OPENFLOW13 = ("-O", "OpenFlow13")


def installed() -> bool:
    """Whether Open vSwitch's command-line tools are on PATH."""
    return shutil.which(VSCTL) is not None


def ofctl(*args: str, check: bool = True, timeout: float = 30) -> str:
    """`ovs-ofctl -O OpenFlow13 ARGS...`; its stdout."""
    return run([OFCTL, *OPENFLOW13, *args], check=check, timeout=timeout)


# ---- bridges --------------------------------------------------------------------------------


def list_bridges() -> list[str]:
    """Names of the bridges that exist now (none when ovsdb does not answer)."""
    return run([VSCTL, "--timeout=10", "list-br"], check=False).split()


def marked_bridges(key: str) -> dict[str, int]:
    """Bridges carrying `external_ids:<key>=<number>`, with that number (an owner's pid)."""
    out = run(
        [VSCTL, "--timeout=10", "--bare", "--columns=name,external_ids", "list", "Bridge"],
        check=False,
    )
    return parse_marks(out, key)


def parse_marks(text: str, key: str) -> dict[str, int]:
    """`ovs-vsctl --bare --columns=name,external_ids list Bridge` output -> {bridge: number} for
    the bridges whose external_ids hold `key`. Pure."""
    marks: dict[str, int] = {}
    for block in text.strip().split("\n\n"):
        lines = block.strip().splitlines()
        if len(lines) >= 2 and f"{key}=" in lines[1]:
            marks[lines[0].strip()] = int(lines[1].split(f"{key}=")[1].split()[0].strip('",}'))
    return marks


def delete_bridges(names: list[str]) -> list[str]:
    """Delete those of `names` that exist, in one transaction; returns the ones deleted."""
    if not names:
        return []
    existing = set(list_bridges())
    gone = [b for b in names if b in existing]
    if gone:
        argv = [VSCTL, "--timeout=20"]
        for b in gone:
            argv += ["--", "--if-exists", "del-br", b]
        run(argv, check=False)
    return gone


# ---- dumps and counters ---------------------------------------------------------------------


def dump_flows(bridge: str, check: bool = True, timeout: float = 30) -> str:
    """`--no-stats dump-flows BRIDGE`, as the tool prints it."""
    return ofctl("--no-stats", "dump-flows", bridge, check=check, timeout=timeout)


def flow_count(bridge: str) -> int:
    """Flow entries the bridge holds now (0 when it cannot be read)."""
    text = dump_flows(bridge, check=False)
    return sum(1 for line in text.splitlines() if "actions=" in line)


def dump_bridge(bridge: str, timeout_s: float = 10.0) -> tuple[list[str], list[str]]:
    """The (flows, groups) a bridge holds, sorted, as `ovs-ofctl -O OpenFlow13` prints them."""
    flows = dump_flows(bridge, timeout=timeout_s)
    groups = ofctl("dump-groups", bridge, timeout=timeout_s)
    return dump_lines(flows), dump_lines(groups)


def rule_differences(bridge: str, rules: SwitchRules) -> list[str]:
    """What differs between the bridge and `rules`: `-line` missing, `+line` unexpected.
    Empty when the bridge holds exactly the computed flows and groups."""
    flows, groups = dump_bridge(bridge)
    return line_differences(flows, groups, rules)


def dump_ports(bridge: str, port: int) -> str:
    """`dump-ports BRIDGE PORT`: one port's counters, as the tool prints them."""
    return ofctl("dump-ports", bridge, str(port))


def dump_group_stats(bridge: str) -> str:
    """`dump-group-stats BRIDGE`: every group's and bucket's counters."""
    return ofctl("dump-group-stats", bridge, timeout=10)


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
