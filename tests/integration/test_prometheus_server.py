"""The real Prometheus server scraping a real exporter: start, scrape, query, snapshot, stop."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from zcube_lab.adapters.ports import free_port
from zcube_lab.emulator.prometheus.config import scrape_config, scrape_plan
from zcube_lab.emulator.prometheus.server import (
    PROMETHEUS_BINARY,
    PrometheusError,
    PrometheusServer,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not os.access(PROMETHEUS_BINARY, os.X_OK),
        reason=f"needs {PROMETHEUS_BINARY}: run scripts/setup.sh",
    ),
]

# Every observation lands in (0.1, 0.25]; the median estimate must fall inside that bucket.
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0)
OBSERVED = 0.2


@pytest.fixture
def exporter() -> Iterator[str]:
    """A prometheus_client exporter on 127.0.0.1 whose counter and histogram keep advancing."""
    registry = CollectorRegistry()
    counter = Counter("x", "requests", registry=registry)
    histogram = Histogram("h", "latency", buckets=BUCKETS, registry=registry)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    done = threading.Event()

    def advance() -> None:
        while not done.wait(0.05):
            counter.inc()
            histogram.observe(OBSERVED)

    ticker = threading.Thread(target=advance, daemon=True)
    ticker.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        done.set()
        ticker.join()
        server.shutdown()
        thread.join()


def _processes_mentioning(path: Path) -> list[int]:
    """Pids of live processes whose command line names `path` (our Prometheus does)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(path).encode() in cmdline and _our_prometheus_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _our_prometheus_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_generated_config_passes_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("needs promtool: run scripts/setup.sh")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        scrape_config(
            {"gateway": ["10.0.0.1:8000"], "decode": ["10.0.0.2:8002", "[::1]:9000"]},
            interval_s=0.5,
            labels={"run": "r1", "fabric": "zcube"},
        )
    )
    check = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_real_prometheus_scrapes_queries_snapshots_and_stops(exporter: str, tmp_path: Path) -> None:
    config = scrape_config(
        {"loadgen": [exporter]}, interval_s=0.5, labels={"run": "it", "fabric": "test"}
    )
    server = PrometheusServer(config, tmp_path / "prom")
    with server:
        pid = server.pid
        assert pid is not None and _our_prometheus_alive(pid)
        assert server.port != 9090
        assert _processes_mentioning(tmp_path) == [pid]  # the check below can see it

        (target,) = server.wait_for_targets_up(timeout=30)
        assert (target.job, target.instance, target.health) == ("loadgen", exporter, "up")

        # rate() needs two samples in the window; at 0.5 s scrapes that takes about a second.
        deadline = time.monotonic() + 30
        rate = None
        while time.monotonic() < deadline:
            rate = server.query("rate(x_total[5s])")
            if rate:
                break
            time.sleep(0.5)
        assert rate, "no rate(x_total[5s]) data within 30 s"
        (series,) = rate
        assert series["metric"]["run"] == "it" and series["metric"]["fabric"] == "test"
        assert float(series["value"][1]) > 0  # the ticker adds about 20 per second

        median = None
        while time.monotonic() < deadline:
            median = server.query_value(
                "histogram_quantile(0.5, sum by (le) (rate(h_bucket[10s])))"
            )
            if median is not None:
                break
            time.sleep(0.5)
        assert median is not None
        assert 0.1 < median <= 0.25

        with pytest.raises(PrometheusError, match="parse error"):
            server.query("rate(x_total[5s]")

        now = time.time()
        exported = server.export_series(
            ["x_total", "h_bucket"], now - 5, now, 0.5, tmp_path / "series.json"
        )
        doc = json.loads(exported.read_text())
        assert {s["metric"]["__name__"] for s in doc["series"]} == {"x_total", "h_bucket"}
        assert all(s["values"] for s in doc["series"])

        snapshot = server.snapshot()
        assert snapshot.is_dir() and snapshot.is_relative_to(tmp_path)
        assert any(snapshot.iterdir()), "snapshot is empty"

    assert not server.running()
    assert not _our_prometheus_alive(pid)
    assert _processes_mentioning(tmp_path) == []
    server.stop()  # idempotent


def test_stop_kills_a_prometheus_that_ignores_sigterm(tmp_path: Path) -> None:
    """A stand-in binary that ignores SIGTERM: stop() must fall back to SIGKILL."""
    fake = tmp_path / "stubborn"
    fake.write_text(
        "#!/usr/bin/env python3\n"
        "import signal, sys, http.server\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "addr = [a for a in sys.argv if a.startswith('--web.listen-address=')][0]\n"
        "host, port = addr.split('=', 1)[1].rsplit(':', 1)\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'ready')\n"
        "http.server.HTTPServer((host, int(port)), H).serve_forever()\n"
    )
    fake.chmod(0o755)
    server = PrometheusServer("{}", tmp_path / "prom", binary=str(fake), grace_s=0.5)
    server.start()
    pid = server.pid
    assert pid is not None
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 5
    assert not _our_prometheus_alive(pid)
    assert _processes_mentioning(tmp_path) == []


def test_a_bad_config_fails_start_with_prometheus_own_message(tmp_path: Path) -> None:
    server = PrometheusServer("scrape_configs: [{job_name: 3", tmp_path / "prom")
    with pytest.raises(PrometheusError, match="exited with code"):
        server.start()
    assert not server.running()


def _loaded_config(server: PrometheusServer) -> str:
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
        f"{server.url}/api/v1/status/config", timeout=5
    ) as answer:
        return json.loads(answer.read())["data"]["yaml"]


def _samples_over(server: PrometheusServer, seconds: int) -> float:
    return server.query_value(f"count_over_time(x_total[{seconds}s])") or 0.0


def test_a_reload_changes_the_scrape_interval_and_back_without_a_gap(
    exporter: str, tmp_path: Path
) -> None:
    """The live lab's idle pace: the same plan rendered at a slower interval, then at its own.
    Prometheus applies a reloaded interval within a few seconds (measured: 2.3 s to relax,
    0.8 s back); the series goes on throughout."""
    plan = scrape_plan({"loadgen": [exporter]}, interval_s=0.5)
    with PrometheusServer(plan.render(), tmp_path / "prom") as server:
        server.wait_for_targets_up(timeout=30)
        _until(lambda: _samples_over(server, 3) >= 5, "0.5 s scrapes")
        server.reload(plan.render(3.0))
        _until(lambda: "scrape_interval: 3s" in _loaded_config(server), "the 3 s config")
        # one sample every 3 s (at 0.5 s there would be 12 in 6 s)
        _until(lambda: _samples_over(server, 6) <= 3, "3 s scrapes", timeout=20.0)
        server.reload(plan.render())
        _until(lambda: _samples_over(server, 2) >= 3, "0.5 s scrapes again", timeout=10.0)
        (series,) = server.query("x_total[60s]")  # one series, never marked stale
        times = [float(t) for t, _value in series["values"]]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert max(gaps) <= 3.5
        assert sum(g > 2 for g in gaps) >= 1  # the relaxed stretch is in it


def _until(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"no {what} after {timeout:.0f}s"
        time.sleep(0.2)
