"""`zcube-lab up --serve`: a small lab stays up serving traffic, with Prometheus on the port
asked for (what Grafana's datasource points at), the Locust web UI, and data for the dashboards
flowing; SIGTERM (what Ctrl-C does too) tears everything down."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from zcube_lab.adapters.ports import free_port
from zcube_lab.core.fabric.hostplan import MGMT_BRIDGE

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str) -> bytes:
    with OPENER.open(url, timeout=3) as resp:
        return resp.read()


def _query(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    return json.loads(_get(url))["data"]["result"]


def _wait(what: str, check, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, f"up --serve exited with {proc.returncode} waiting for {what}"
        try:
            if check():
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"no {what} after {timeout:.0f}s"
        time.sleep(1)


def test_up_serve_stays_up_with_traffic_then_tears_down(tmp_path: Path) -> None:
    prom_port, locust_port = free_port(), free_port()
    log = (tmp_path / "up.log").open("w")
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "zcube_lab.cli", "up", "--fabric", "zcube",
            "--n", "2", "--gpus-per-server", "2", "--serve", "--rate", "2",
            "--prometheus-port", str(prom_port), "--locust-port", str(locust_port),
            "--results", str(tmp_path / "results"),
        ],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        _wait("Locust UI", lambda: b"locust" in _get(f"http://127.0.0.1:{locust_port}/").lower(),
              proc, 180)  # fmt: skip
        _wait(
            "answered requests in Prometheus",
            lambda: any(
                float(s["value"][1]) > 0
                for s in _query(prom_port, "sum(zcube:gateway_requests_total)")
            ),
            proc,
            90,
        )
        series = _query(prom_port, "vllm:num_requests_running")
        assert {s["metric"]["fabric"] for s in series} == {"zcube"}
        assert all(s["metric"]["run"].endswith("-live") for s in series)
        _wait(
            "link counters",
            lambda: any(
                float(s["value"][1]) > 0
                for s in _query(prom_port, "sum(rate(zcube_port_tx_bytes_total[15s]))")
            ),
            proc,
            60,
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        log.close()
    out = (tmp_path / "up.log").read_text()
    assert code == 0, out[-3000:]
    assert f":{prom_port}" in out and f":{locust_port}" in out, out[-2000:]
    assert not Path(f"/sys/class/net/{MGMT_BRIDGE}").exists()
    bridges = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout
    assert not {"a0", "b0"} & set(bridges.split())
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in ps
