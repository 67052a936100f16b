"""Free TCP ports on this machine's own addresses, for servers the lab and its tests start."""

from __future__ import annotations

import socket
import threading
from collections import deque

# Ports handed out lately by this process. The kernel's bind(0) can return a port it returned a
# moment ago when nothing has bound it yet (a server picked for it is still starting): measured
# here, 11 of 20,000 calls repeated one of the 6 before. Two servers of one cluster then race
# for one port, and the loser's /health is answered by the winner.
_RECENT: deque[int] = deque(maxlen=4096)
_LOCK = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now and that this process has not handed out among
    its last 4,096 (the kernel picks it; never 9090, which a Prometheus of the system or of
    `up --serve` may want)."""
    with _LOCK:
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((host, 0))
                port = int(sock.getsockname()[1])
            if port != 9090 and port not in _RECENT:
                _RECENT.append(port)
                return port


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether nothing listens on `host:port` now. Like a server's own listener (SO_REUSEADDR),
    connections lingering in TIME_WAIT do not count as "in use"; a listening socket does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
