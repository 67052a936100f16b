"""Free TCP ports on this machine's own addresses, for servers the lab and its tests start."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the kernel picks it; never 9090, which a
    Prometheus of the system or of `up --serve` may want)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if port != 9090:
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
