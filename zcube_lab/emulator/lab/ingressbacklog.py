"""The switch ports' ingress backlogs for the lossless agent (adapter: /proc; the decision is
`zcube_lab.core.fabric.lossless.PauseMachine`'s; docs/LOSSLESS.md, "Ingress accounting").

ovs-vswitchd's userspace datapath receives each switch port's frames through an AF_PACKET
socket bound to that port's interface, in the root namespace where every switch port lives.
What it has not yet forwarded waits in that socket's receive queue; the kernel lists every
packet socket of the namespace in `/proc/net/packet`, one line each, with the interface it is
bound to (`Iface`, an ifindex; 0: every interface) and the receive memory it holds (`Rmem`,
bytes of socket memory: each frame's buffer, more than its bytes). That is the switch's
ingress occupancy for the port: one read of the file per poll gives every port's.

Names: `parse_packet_sockets` is the pure parse, `IngressReader` keeps the file open and reads
it again on each call.
"""

from __future__ import annotations

import os

PROC_PACKET = "/proc/self/net/packet"  # the namespace of the process that opens it
CHUNK = 1 << 16


def parse_packet_sockets(text: str) -> dict[int, int]:
    """Receive memory (bytes) per interface index from `/proc/net/packet`'s text: summed over
    the sockets bound to that interface (an interface served by several receive queues has a
    socket each); sockets bound to every interface (index 0) are left out, and so are
    interfaces with none. The columns are found by the header's names."""
    lines = text.splitlines()
    if not lines:
        return {}
    names = lines[0].split()
    try:
        at_iface, at_rmem = names.index("Iface"), names.index("Rmem")
    except ValueError as exc:
        raise ValueError(f"not /proc/net/packet's header: {lines[0]!r}") from exc
    out: dict[int, int] = {}
    for line in lines[1:]:
        cols = line.split()
        if len(cols) <= max(at_iface, at_rmem):
            continue
        ifindex, rmem = int(cols[at_iface]), int(cols[at_rmem])
        if ifindex:
            out[ifindex] = out.get(ifindex, 0) + rmem
    return out


class IngressReader:
    """`/proc/net/packet` of the namespace the reader was made in, open for repeated reads."""

    def __init__(self, path: str = PROC_PACKET) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def read(self) -> dict[int, int]:
        """Receive memory per interface index now (`parse_packet_sockets`)."""
        os.lseek(self.fd, 0, os.SEEK_SET)
        parts = []
        while chunk := os.read(self.fd, CHUNK):
            parts.append(chunk)
        return parse_packet_sockets(b"".join(parts).decode("ascii", "replace"))

    def close(self) -> None:
        os.close(self.fd)
