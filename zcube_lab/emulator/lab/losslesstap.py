"""The lossless agent's wake-up: a packet tap on the switch ports that tells it when the first
packet enters a silent fabric (adapter; the filter and the timestamp are built and read by pure
functions here; docs/LOSSLESS.md, "Idle: asleep on a tap").

While the fabric carries traffic the agent reads every watched queue at its poll interval.
Once it has carried none for a while (`zcube_lab.core.fabric.lossless.Stillness`) the agent
*arms* the tap and sleeps on it: one AF_PACKET socket in the root namespace (where every switch
port lives) that receives what arrives at a watched port (a classic BPF filter on the receiving
interface's index; what a port sends, `PACKET_IGNORE_OUTGOING`, and every other interface, the
management network's included, are left out). Every packet of the fabric enters it through a
switch port, so the first one wakes the agent; the kernel stamps it (`SO_TIMESTAMPNS`) and the
agent times its reaction from that stamp. Once woken it *disarms* the tap: bound to protocol 0,
an AF_PACKET socket is off the kernel's receive path, so under load the tap costs nothing.
Names: `arm`/`disarm` hook and unhook it, `wait` sleeps on it (and on the signal pipe).
"""

from __future__ import annotations

import ctypes
import os
import select
import socket
import struct
import time
from collections.abc import Iterable

SOL_PACKET = 263
PACKET_IGNORE_OUTGOING = 23  # linux/if_packet.h (kernel 4.20+)
SO_ATTACH_FILTER = 26
SO_TIMESTAMPNS = 35  # SO_TIMESTAMPNS_OLD on x86-64 and arm64: a struct timespec of two longs
ETH_P_ALL = 0x0003
TIMESPEC = struct.Struct("=qq")
SOCKADDR_LL = struct.Struct("=HHiHBB8s")  # family, protocol (big-endian), ifindex, ...
SOCK_FILTER = struct.Struct("=HBBI")  # code, jt, jf, k
# classic BPF opcodes (linux/filter.h, linux/bpf_common.h)
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JA = 0x05
BPF_RET_K = 0x06
SKF_AD_IFINDEX = (-0x1000 + 8) & 0xFFFFFFFF  # ancillary load: the receiving interface's index
KEEP_BYTES = 1  # the tap needs a packet's arrival and time, not its bytes
CHUNK = 200  # compares per block: a conditional jump reaches at most 255 instructions ahead


def ifindex_filter(ifindexes: Iterable[int], keep: int = KEEP_BYTES) -> bytes:
    """A classic BPF program (`struct sock_filter` array) that keeps `keep` bytes of a packet
    whose interface index is one of `ifindexes` and drops every other packet."""
    wanted = sorted(set(ifindexes))
    prog = [SOCK_FILTER.pack(BPF_LD_W_ABS, 0, 0, SKF_AD_IFINDEX)]
    for start in range(0, len(wanted), CHUNK):
        block = wanted[start : start + CHUNK]
        for i, index in enumerate(block):
            # jump to this block's accept: past the rest of the block and its `ja`
            prog.append(SOCK_FILTER.pack(BPF_JEQ_K, len(block) - i, 0, index))
        prog.append(SOCK_FILTER.pack(BPF_JA, 0, 0, 1))  # no match: skip the accept
        prog.append(SOCK_FILTER.pack(BPF_RET_K, 0, 0, keep))
    prog.append(SOCK_FILTER.pack(BPF_RET_K, 0, 0, 0))
    return b"".join(prog)


def run_filter(program: bytes, ifindex: int) -> int:
    """What `program` (as `ifindex_filter` builds them: loads, compares, jumps, returns)
    returns for a packet received on `ifindex`: a tiny interpreter for the tests."""
    ops = [SOCK_FILTER.unpack_from(program, o) for o in range(0, len(program), SOCK_FILTER.size)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        if code == BPF_LD_W_ABS and k == SKF_AD_IFINDEX:
            acc, pc = ifindex, pc + 1
        elif code == BPF_JEQ_K:
            pc += 1 + (jt if acc == k else jf)
        elif code == BPF_JA:
            pc += 1 + k
        elif code == BPF_RET_K:
            return k
        else:
            raise ValueError(f"opcode {code:#x} is not one the tap's filter uses")


def stamp_s(ancillary: Iterable[tuple[int, int, bytes]]) -> float | None:
    """The kernel's receive time (CLOCK_REALTIME seconds) in a packet's ancillary data, or
    None when it carries none."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            sec, nsec = TIMESPEC.unpack_from(data)
            return sec + nsec * 1e-9
    return None


class FabricTap:
    """The tap: `arm()` opens it hooked on every interface of this namespace (the filter keeps
    the watched ports' arrivals), `disarm()` closes it. An AF_PACKET socket cannot be unhooked
    and kept (binding it to protocol 0 keeps its protocol), so each arming opens one."""

    def __init__(self, ifindexes: Iterable[int]) -> None:
        self.program = ifindex_filter(ifindexes)
        self.sock: socket.socket | None = None
        self.armed_at = 0.0
        self._open().close()  # what the kernel refuses is refused at start

    @property
    def armed(self) -> bool:
        return self.sock is not None

    def close(self) -> None:
        self.disarm()

    def _open(self) -> socket.socket:
        """A packet socket with the tap's options and filter, not yet hooked (protocol 0)."""
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            buf = ctypes.create_string_buffer(self.program)
            count = len(self.program) // SOCK_FILTER.size
            fprog = struct.pack("=HxxxxxxQ", count, ctypes.addressof(buf))  # struct sock_fprog
            sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        return sock

    def arm(self) -> None:
        """Hook the tap: from now on an arrival at a watched port is queued on it."""
        if self.sock is not None:
            return
        sock = self._open()
        self.armed_at = time.monotonic()
        # Interface index 0 (every interface), which Python's AF_PACKET address (a name)
        # cannot say.
        address = SOCKADDR_LL.pack(socket.AF_PACKET, socket.htons(ETH_P_ALL), 0, 0, 0, 0, b"")
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.bind(sock.fileno(), address, len(address)) != 0:
            err = ctypes.get_errno()
            sock.close()
            raise OSError(err, f"binding the packet tap: {os.strerror(err)}")
        self.sock = sock

    def disarm(self) -> None:
        """Unhook the tap: closed, it is off the kernel's receive path."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def wait(self, timeout_s: float, wakeup_fd: int | None) -> float | None:
        """Sleep on the armed tap until a packet arrives (its kernel time, as
        `time.monotonic()` reads it; the arming time when it carries none, an earlier bound),
        `timeout_s` passes or `wakeup_fd` is readable (a signal: None both)."""
        if self.sock is None:
            raise RuntimeError("the tap is not armed")
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        if wakeup_fd is not None:
            poller.register(wakeup_fd, select.POLLIN)
        ready = {fd for fd, _ev in poller.poll(max(0.0, timeout_s) * 1000)}
        if self.sock.fileno() not in ready:
            return None
        try:
            _data, ancillary, _flags, _addr = self.sock.recvmsg(KEEP_BYTES, 64)
        except BlockingIOError:
            return None
        wall, mono = time.time(), time.monotonic()
        stamp = stamp_s(ancillary)
        if stamp is None:
            return self.armed_at
        return min(mono, mono - (wall - stamp))
