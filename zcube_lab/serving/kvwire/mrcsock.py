"""The MRC-style transport's UDP sockets on the event loop (`Endpoint`): cheap per datagram.

asyncio's datagram transport reads one datagram per wake of the loop, each into a fresh
256 KiB buffer, and a loopback pull of MRC spent most of its CPU on that and on the loop's
turns between datagrams. An `Endpoint` instead reads every datagram waiting (up to
`READS_PER_WAKE`) into one buffer it keeps, hands each to `on_datagram` as a view of that
buffer (valid only during the call: copy what you keep), then calls `on_batch` once, so a
receiver can acknowledge a whole batch at once. `sendto` sends at once on the non-blocking
socket; only when the socket buffer is full does it queue the datagram (a copy) and wait for
the socket to drain, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

SOCKET_BUFFER = 4 * 2**20
READS_PER_WAKE = 64  # then the loop's other callbacks (the sender's, timers) get a turn
MAX_DATAGRAM = 65535
QUEUE_LIMIT = 4096  # datagrams waiting for a full socket buffer; past it they are dropped

OnDatagram = Callable[[memoryview, tuple[str, int]], None]


class Endpoint:
    """One bound, non-blocking UDP socket on the running loop (see the module's docstring)."""

    def __init__(
        self, sock: socket.socket, on_datagram: OnDatagram, on_batch: Callable[[], None] | None
    ) -> None:
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self.on_datagram = on_datagram
        self.on_batch = on_batch
        self.dropped = 0  # datagrams dropped: queue full, or the socket refused them
        self._buf = bytearray(MAX_DATAGRAM)
        self._view = memoryview(self._buf)
        self._queue: deque[tuple[bytes, tuple[str, int]]] = deque()
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._loop.add_reader(sock.fileno(), self._read_ready)

    def _read_ready(self) -> None:
        recv, view, deliver = self.sock.recvfrom_into, self._view, self.on_datagram
        got = 0
        for _ in range(READS_PER_WAKE):
            try:
                n, addr = recv(self._buf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:  # ICMP unreachable and the like
                log.debug("mrc socket error: %s", e)
                break
            got += 1
            deliver(view[:n], addr)
            if self._closed:
                return
        if got and self.on_batch is not None:
            self.on_batch()

    def sendto(self, data: bytes, addr: tuple[str, int]) -> None:
        """Send one datagram to `addr` (queued, in order, while the socket buffer is full)."""
        if not self._queue:
            try:
                self.sock.sendto(data, addr)
                return
            except (BlockingIOError, InterruptedError):
                self._loop.add_writer(self.sock.fileno(), self._write_ready)
            except OSError as e:
                self.dropped += 1
                log.debug("mrc socket error: %s", e)
                return
        if len(self._queue) >= QUEUE_LIMIT:
            self.dropped += 1
            return
        self._queue.append((bytes(data), addr))

    def _write_ready(self) -> None:
        while self._queue:
            data, addr = self._queue[0]
            try:
                self.sock.sendto(data, addr)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self.dropped += 1
                log.debug("mrc socket error: %s", e)
            self._queue.popleft()
        self._loop.remove_writer(self.sock.fileno())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        fd = self.sock.fileno()
        self._loop.remove_reader(fd)
        if self._queue:
            self._loop.remove_writer(fd)
            self._queue.clear()
        self.sock.close()


def open_endpoint(
    on_datagram: OnDatagram, host: str, port: int, on_batch: Callable[[], None] | None = None
) -> Endpoint:
    """A UDP socket bound to (host, port) (port 0: any), read and written on the running loop."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return Endpoint(sock, on_datagram, on_batch)
