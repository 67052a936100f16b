"""The fabric's traffic classes, marked by the sending socket: expert-parallel exchanges and KV
pulls carry distinct DSCP values in their IP headers (`IP_TOS`), set on every TCP connection
that carries them, at both ends (the leader's dispatch and the EP worker's combine; decode's
requests and prefill's KV bytes).

In production both ride one lossless priority (one PFC class), so the lab keeps them in one
pause class: the marks change no queueing, they only let the lab count the two apart
(docs/LOSSLESS.md, "Victim accounting"). The values are AF41 for EP (latency-critical,
lockstep) and AF21 for KV (bulk); `CLASS_OF_DSCP` reads a mark back.

Names: a class is `ep` or `kv`; `dscp` is the 6-bit code point, `tos` the byte it sits in.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping
from typing import Protocol

EP, KV = "ep", "kv"
DSCP: Mapping[str, int] = {EP: 34, KV: 18}  # AF41, AF21
CLASS_OF_DSCP: Mapping[int, str] = {v: k for k, v in DSCP.items()}


def tos_byte(traffic_class: str) -> int:
    """The IP TOS byte (DSCP in its upper six bits, ECN bits clear) of a class."""
    if traffic_class not in DSCP:
        raise ValueError(f"traffic class {traffic_class!r} is not one of {sorted(DSCP)}")
    return DSCP[traffic_class] << 2


def class_of_tos(tos: int) -> str | None:
    """The class whose mark a TOS byte carries (ECN bits ignored), or None."""
    return CLASS_OF_DSCP.get((tos & 0xFF) >> 2)


class _HasExtraInfo(Protocol):
    def get_extra_info(self, name: str, default: object = None) -> object: ...


class SocketLike(Protocol):
    """What marking needs of a socket: a plain one or asyncio's `TransportSocket`."""

    @property
    def family(self) -> int: ...

    def setsockopt(self, level: int, option: int, value: int, /) -> None: ...


def mark_socket(sock: SocketLike, traffic_class: str) -> bool:
    """Set the class's DSCP on an IP socket (IPv4 TOS or IPv6 traffic class); False when the
    socket is not an IP one or refuses it (a Unix socket in a test)."""
    tos = tos_byte(traffic_class)
    with contextlib.suppress(OSError):
        if sock.family == socket.AF_INET:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
            return True
        if sock.family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tos)
            return True
    return False


def mark_stream(writer: _HasExtraInfo, traffic_class: str) -> bool:
    """`mark_socket` on the socket under an asyncio stream writer (or transport); False when
    it has none."""
    sock = writer.get_extra_info("socket")
    if sock is None or not hasattr(sock, "setsockopt"):
        return False
    return mark_socket(sock, traffic_class)  # type: ignore[arg-type]
