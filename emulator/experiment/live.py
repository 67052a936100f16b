"""A live lab for exploration (`zcube-lab up --serve`): the fabric, the serving cluster in its
hosts, the health sampler and Prometheus exactly as a run starts them (`Experiment`'s steps),
then Locust with its web UI instead of a timed headless run; everything stays up until Ctrl-C
or SIGTERM, then it is torn down as a run is. Needs root.

Fixed addresses, so Grafana and a browser find them: Prometheus on `bind:prometheus_port`
(default 127.0.0.1:9090, the VM's forwarded port), the Locust UI on `bind:locust_port` (8089).
In the VM use `bind="0.0.0.0"`: a forwarded port reaches the guest's NAT address, not its
loopback. Files go to `<results>/<time>-<fabric>-<workload>-live/` as a run's do (config,
logs, the Prometheus TSDB), without the collection step.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from emulator.experiment.runner import Experiment, RunConfig
from emulator.lab.network import LabError
from emulator.prometheus.server import PrometheusServer
from workloads import LOCUSTFILE
from zcube_lab.procs import wait_http


class FixedPortPrometheus(PrometheusServer):
    """The run's Prometheus on a port and address chosen by the caller, not a free one."""

    def __init__(self, config_text: str, workdir: Path, *, port: int, host: str) -> None:
        super().__init__(config_text, workdir, port=port, listen_host=host)


class LiveLab(Experiment):
    """A run that serves until interrupted, with Locust's web UI and a fixed Prometheus."""

    def __init__(
        self,
        config: RunConfig,
        *,
        prometheus_port: int = 9090,
        locust_port: int = 8089,
        bind: str = "127.0.0.1",
        progress: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(config, progress)
        self.prometheus_port = prometheus_port
        self.locust_port = locust_port
        self.bind = bind

    def urls(self) -> dict[str, str]:
        """Where to look: Prometheus, the Locust UI and the gateway's OpenAI API."""
        host = "localhost" if self.bind in ("127.0.0.1", "0.0.0.0") else self.bind
        return {
            "prometheus": f"http://{host}:{self.prometheus_port}",
            "locust": f"http://{host}:{self.locust_port}",
            "gateway": f"http://127.0.0.1:{self.gateway_port}/v1",
        }

    def serve(self, ready: Callable[[dict[str, str]], None], poll_s: float = 1.0) -> None:
        """Bring everything up, call `ready(urls)`, serve until KeyboardInterrupt (or a process
        of the lab dies: LabError), then tear everything down."""
        self.dir.mkdir(parents=True, exist_ok=False)
        (self.dir / "logs").mkdir()
        self._write_config()
        try:
            self._start_lab()
            self._start_serving()
            self._start_monitoring()
            self._start_locust_ui()
            ready(self.urls())
            while True:
                self._check_alive()
                time.sleep(poll_s)
        finally:
            self._teardown()

    def _new_prometheus(self, config_text: str) -> PrometheusServer:
        # The run's Prometheus (same config, same TSDB folder), on the fixed address.
        self.progress(f"Prometheus on {self.bind}:{self.prometheus_port}")
        return FixedPortPrometheus(
            config_text, self.dir / "prometheus", port=self.prometheus_port, host=self.bind
        )

    def _start_locust_ui(self) -> None:
        c = self.config
        argv = [
            sys.executable, "-m", "locust", "-f", str(LOCUSTFILE),
            "--host", f"http://127.0.0.1:{self.gateway_port}",
            "--web-host", self.bind, "--web-port", str(self.locust_port),
            "--autostart", "-u", "1", "-r", "1",
            "--workload", c.workload, "--seed", str(c.seed), "--model", c.model,
            "--duration", f"{c.duration_s:g}", "--keep-running",
            "--metrics-port", str(self.loadgen_port), "--loglevel", "WARNING",
        ]  # fmt: skip
        for flag, value in (("--rate", c.rate), ("--length-scale", c.length_scale)):
            if value is not None:
                argv += [flag, str(value)]
        self.progress(f"load: {c.workload} open loop, Locust UI on {self.bind}:{self.locust_port}")
        self._popen_root("locust", argv)
        self._wait_up(f"http://127.0.0.1:{self.locust_port}/", "locust", timeout=30)

    def _wait_up(self, url: str, name: str, timeout: float) -> None:
        if wait_http([url], timeout, alive=self._check_alive):
            raise LabError(f"{name} not answering at {url} after {timeout:.0f}s")

    def _check_alive(self) -> None:
        super()._check_alive()
        if self.prometheus is not None and not self.prometheus.running():
            raise LabError(f"Prometheus exited: see {self.prometheus.log_path}")
