"""`up --serve`'s Prometheus listens where Grafana's datasource points (a fixed port), unlike a
run's, which takes a free one; and a taken port is detected before the lab starts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from zcube_lab.adapters.ports import free_port, port_free
from zcube_lab.emulator.prometheus.config import scrape_config
from zcube_lab.emulator.prometheus.server import PrometheusError, PrometheusServer

pytestmark = pytest.mark.integration


def test_fixed_port_prometheus_serves_on_the_port_asked_for(tmp_path: Path) -> None:
    port = free_port()
    text = scrape_config({"prefill": ["127.0.0.1:9"]}, 1.0, {"run": "r-live", "fabric": "zcube"})
    with PrometheusServer(text, tmp_path, port=port, listen_host="127.0.0.1") as prom:
        assert prom.port == port
        assert not port_free(port)
        assert prom.query_value("vector(1)") == 1.0


def test_a_taken_port_is_reported(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = int(sock.getsockname()[1])
        assert not port_free(port)
        prom = PrometheusServer("global: {}\n", tmp_path, port=port, listen_host="127.0.0.1")
        with pytest.raises(PrometheusError, match="address already in use"):
            prom.start()
        assert not prom.running()
