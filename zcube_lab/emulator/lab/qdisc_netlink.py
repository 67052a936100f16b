"""Qdisc backlogs read, and a TBF's rate changed, over rtnetlink without a `tc` process.

`tc -s qdisc show` costs a process (about 3 ms of CPU) per reading; the lossless agent
(`zcube_lab.emulator.lab.lossless`) reads every switch port's queue each millisecond and changes a
port's rate within a frame time, so it speaks rtnetlink itself: `QdiscSocket.backlogs()` dumps every
qdisc of the socket's network namespace (RTM_GETQDISC) and returns the backlog of each
`(ifindex, handle)`; `QdiscSocket.set_tbf(...)` replaces a TBF's parameters (RTM_NEWQDISC) and
waits for the kernel's acknowledgement. A socket belongs to the namespace it was opened in
(`open_in_namespace`), so one process serves the root namespace and every host's.

The message layouts are the kernel's uapi (`linux/rtnetlink.h`, `linux/pkt_sched.h`,
`linux/gen_stats.h`); the encoders and decoders here are pure and tested without a kernel.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

NETLINK_ROUTE = 0
RTM_NEWQDISC = 36
RTM_GETQDISC = 38
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLA_F_NESTED = 0x8000
TCA_KIND = 1
TCA_OPTIONS = 2
TCA_STATS = 3
TCA_STATS2 = 7
TCA_STATS_QUEUE = 3
TCA_TBF_PARMS = 1
TCA_TBF_BURST = 6
TC_LINKLAYER_ETHERNET = 1
CLONE_NEWNET = 0x40000000

NLMSG_HDR = struct.Struct("=IHHII")  # length, type, flags, seq, pid
TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info
NLA_HDR = struct.Struct("=HH")  # length, type
GNET_QUEUE = struct.Struct("=IIIII")  # qlen, backlog, drops, requeues, overlimits
# struct tc_stats (the compat copy every qdisc dump carries): bytes, packets, drops,
# overlimits, bps, pps, qlen, backlog
TC_STATS = struct.Struct("=QIIIIIII")
RATESPEC = struct.Struct("=BBHhHI")  # cell_log, linklayer, overhead, cell_align, mpu, rate
MAX_RATE_BYTES = 2**32 - 1  # a u32 rate; faster needs TCA_TBF_RATE64 (never needed here)


class NetlinkError(OSError):
    """The kernel refused a request (its errno) or answered something unreadable."""


@dataclass(frozen=True)
class QdiscBacklog:
    """One qdisc's queue as a dump reports it."""

    ifindex: int
    handle: int
    parent: int
    kind: str
    backlog_bytes: int
    backlog_packets: int
    drops: int


def tc_handle(text: str) -> int:
    """A `major:minor` handle in tc's hex notation as the kernel's u32 (`10:` is 0x00100000)."""
    major, _, minor = text.partition(":")
    return (int(major or "0", 16) << 16) | int(minor or "0", 16)


def _align(n: int) -> int:
    return (n + 3) & ~3


def attr(kind: int, payload: bytes) -> bytes:
    """One netlink attribute, padded to 4 bytes."""
    raw = NLA_HDR.pack(NLA_HDR.size + len(payload), kind) + payload
    return raw + b"\0" * (_align(len(raw)) - len(raw))


def attrs(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(type, payload) of each attribute in `data` (nested flag stripped)."""
    offset = 0
    while offset + NLA_HDR.size <= len(data):
        length, kind = NLA_HDR.unpack_from(data, offset)
        if length < NLA_HDR.size:
            raise NetlinkError(f"netlink attribute of length {length}")
        yield kind & ~NLA_F_NESTED, data[offset + NLA_HDR.size : offset + length]
        offset += _align(length)


def message(kind: int, flags: int, seq: int, body: bytes) -> bytes:
    """A netlink message: header, then `body`."""
    return NLMSG_HDR.pack(NLMSG_HDR.size + len(body), kind, flags, seq, 0) + body


def messages(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(type, seq, body) of each netlink message in one datagram."""
    offset = 0
    while offset + NLMSG_HDR.size <= len(data):
        length, kind, _flags, seq, _pid = NLMSG_HDR.unpack_from(data, offset)
        if length < NLMSG_HDR.size:
            raise NetlinkError(f"netlink message of length {length}")
        yield kind, seq, data[offset + NLMSG_HDR.size : offset + length]
        offset += _align(length)


def dump_request(seq: int) -> bytes:
    """RTM_GETQDISC for every qdisc of the namespace."""
    return message(RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, seq, TCMSG.pack(0, 0, 0, 0, 0))


def tbf_request(
    seq: int, ifindex: int, handle: int, parent: int, rate_bytes: int, burst: int, limit: int
) -> bytes:
    """RTM_NEWQDISC changing the TBF `handle` under `parent` of `ifindex` to `rate_bytes` per
    second, `burst` bytes of tokens and a FIFO of `limit` bytes (tokens refilled to `burst`:
    the kernel's tbf_change does so)."""
    if not 1 <= rate_bytes <= MAX_RATE_BYTES:
        raise ValueError(f"TBF rate {rate_bytes} bytes/s is outside 1 .. {MAX_RATE_BYTES}")
    rate = RATESPEC.pack(0, TC_LINKLAYER_ETHERNET, 0, 0, 0, rate_bytes)
    peak = RATESPEC.pack(0, TC_LINKLAYER_ETHERNET, 0, 0, 0, 0)
    parms = rate + peak + struct.pack("=III", limit, 0, 0)
    options = attr(TCA_TBF_PARMS, parms) + attr(TCA_TBF_BURST, struct.pack("=I", burst))
    body = (
        TCMSG.pack(0, ifindex, handle, parent, 0)
        + attr(TCA_KIND, b"tbf\0")
        + attr(TCA_OPTIONS | NLA_F_NESTED, options)
    )
    return message(RTM_NEWQDISC, NLM_F_REQUEST | NLM_F_ACK, seq, body)


def parse_qdisc(body: bytes) -> QdiscBacklog:
    """One RTM_NEWQDISC message of a dump."""
    _family, ifindex, handle, parent, _info = TCMSG.unpack_from(body)
    kind = ""
    queue = (0, 0, 0, 0, 0)
    for kind_id, payload in attrs(body[TCMSG.size :]):
        if kind_id == TCA_KIND:
            kind = payload.rstrip(b"\0").decode()
        elif kind_id == TCA_STATS2:
            for stat, value in attrs(payload):
                if stat == TCA_STATS_QUEUE and len(value) >= GNET_QUEUE.size:
                    queue = GNET_QUEUE.unpack_from(value)
    qlen, backlog, drops, _requeues, _overlimits = queue
    return QdiscBacklog(ifindex, handle, parent, kind, backlog, qlen, drops)


def scan_backlogs(
    data: bytes,
    seq: int,
    wanted: Mapping[int, str],
    handle: int,
    out: dict[str, int],
    sent: dict[str, int] | None = None,
) -> bool:
    """The fast path of a dump: into `out`, the backlog in bytes of the qdisc `handle` on each
    interface of `wanted` (ifindex -> name) in one datagram, and into `sent` (when given) the
    packets it has sent, read from the compat TCA_STATS struct; every other qdisc is skipped at
    its header. True once the dump is done."""
    offset, size = 0, len(data)
    while offset + NLMSG_HDR.size <= size:
        length, kind, _flags, got, _pid = NLMSG_HDR.unpack_from(data, offset)
        if length < NLMSG_HDR.size:
            raise NetlinkError(f"netlink message of length {length}")
        if got == seq:
            if kind == NLMSG_DONE:
                return True
            if kind == NLMSG_ERROR:
                raise NetlinkError(error_code(data[offset + NLMSG_HDR.size :]), "dump refused")
            if kind == RTM_NEWQDISC:
                body = offset + NLMSG_HDR.size
                _fam, ifindex, qhandle, _parent, _info = TCMSG.unpack_from(data, body)
                name = wanted.get(ifindex)
                if name is not None and qhandle == handle:
                    stats = _compat_stats(data, body + TCMSG.size, offset + length)
                    if stats is not None:
                        out[name] = stats[1]
                        if sent is not None:
                            sent[name] = stats[0]
        offset += _align(length)
    return False


def _compat_stats(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    """(packets sent, backlog bytes) of the compat TCA_STATS struct among the attributes."""
    while start + NLA_HDR.size <= end:
        length, kind = NLA_HDR.unpack_from(data, start)
        if length < NLA_HDR.size:
            raise NetlinkError(f"netlink attribute of length {length}")
        if kind == TCA_STATS and length >= NLA_HDR.size + TC_STATS.size:
            stats = TC_STATS.unpack_from(data, start + NLA_HDR.size)
            return stats[1], stats[-1]
        start += _align(length)
    return None


def error_code(body: bytes) -> int:
    """The errno of an NLMSG_ERROR (0: an acknowledgement)."""
    (code,) = struct.unpack_from("=i", body)
    return -code


class QdiscSocket:
    """An rtnetlink socket in one network namespace."""

    def __init__(self, sock: socket.socket | None = None) -> None:
        self.sock = sock or socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def backlogs(self) -> list[QdiscBacklog]:
        """Every qdisc of the namespace with its queue, now."""
        seq = self._next()
        self.sock.send(dump_request(seq))
        out: list[QdiscBacklog] = []
        while True:
            data = self.sock.recv(1 << 16)
            for kind, got, body in messages(data):
                if got != seq:
                    continue
                if kind == NLMSG_DONE:
                    return out
                if kind == NLMSG_ERROR:
                    raise NetlinkError(error_code(body), "qdisc dump refused")
                if kind == RTM_NEWQDISC:
                    out.append(parse_qdisc(body))

    def leaf_backlogs(
        self, wanted: Mapping[int, str], handle: int, sent: dict[str, int] | None = None
    ) -> dict[str, int]:
        """The backlog in bytes of qdisc `handle` on each interface of `wanted` (ifindex ->
        name), and into `sent` its packets sent, from one dump (`scan_backlogs`)."""
        seq = self._next()
        self.sock.send(dump_request(seq))
        out: dict[str, int] = {}
        while not scan_backlogs(self.sock.recv(1 << 16), seq, wanted, handle, out, sent):
            pass
        return out

    def set_tbf(
        self, ifindex: int, handle: int, parent: int, rate_bytes: int, burst: int, limit: int
    ) -> None:
        """Change a TBF's rate, burst and limit; returns once the kernel has applied it."""
        seq = self._next()
        self.sock.send(tbf_request(seq, ifindex, handle, parent, rate_bytes, burst, limit))
        while True:
            for kind, got, body in messages(self.sock.recv(1 << 16)):
                if got == seq and kind == NLMSG_ERROR:
                    code = error_code(body)
                    if code:
                        raise NetlinkError(code, f"TBF change on ifindex {ifindex} refused")
                    return


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)  # os.setns is Python 3.12+
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def in_namespace(ns_path: str | None) -> Iterator[None]:
    """Run the body with the calling thread in the network namespace at `ns_path` (None: stay);
    sockets made there stay bound to it after the thread returns."""
    if ns_path is None:
        yield
        return
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(ns_path, os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


def open_in_namespace(ns_path: str | None) -> tuple[QdiscSocket, dict[str, int]]:
    """A QdiscSocket in the network namespace at `ns_path` (None: this one) and that
    namespace's interface indexes by name."""
    with in_namespace(ns_path):
        return QdiscSocket(), {name: index for index, name in socket.if_nameindex()}
