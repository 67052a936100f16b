"""A live lab for exploration (`zcube-lab up --serve`): the fabric, the serving cluster in its
hosts, the health sampler and Prometheus exactly as a run starts them (the same `RunPlan` and
`Launcher`), then Locust with its web UI instead of a timed headless run; everything stays up
until Ctrl-C or SIGTERM, then it is torn down as a run is. Needs root.

Fixed addresses, so Grafana and a browser find them: Prometheus on `bind:prometheus_port`
(default 127.0.0.1:9090, the VM's forwarded port), the Locust UI on `bind:locust_port` (8089).
In the VM use `bind="0.0.0.0"`: a forwarded port reaches the guest's NAT address, not its
loopback. Files go to `<results>/<time>-<fabric>-<workload>-live/` as a run's do (config,
logs, the Prometheus TSDB), without the collection step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from zcube_lab.adapters.procs import wait_http
from zcube_lab.emulator.experiment.launcher import Launcher
from zcube_lab.emulator.experiment.plan import LOOPBACK, LocustWeb, RunConfig, plan_run
from zcube_lab.emulator.lab.system import LabError

LOCUST_UI_TIMEOUT_S = 120.0  # how long `up --serve` waits for Locust's web UI to answer


class LiveLab:
    """A run's processes serving until interrupted, with Locust's web UI and a fixed
    Prometheus."""

    def __init__(
        self,
        config: RunConfig,
        *,
        prometheus_port: int = 9090,
        locust_port: int = 8089,
        bind: str = "127.0.0.1",
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.progress = progress or (lambda _m: None)
        self.plan = plan_run(config)
        self.prometheus_port = prometheus_port
        self.locust_port = locust_port
        self.bind = bind
        self.launcher = Launcher(
            self.plan, self.progress, prometheus_port=prometheus_port, prometheus_host=bind
        )

    @property
    def dir(self) -> Path:
        """The live lab's files (config, logs, Prometheus TSDB)."""
        return self.launcher.dir

    def urls(self) -> dict[str, str]:
        """Where to look: Prometheus, the Locust UI and the gateway's OpenAI API."""
        host = "localhost" if self.bind in ("127.0.0.1", "0.0.0.0") else self.bind
        return {
            "prometheus": f"http://{host}:{self.prometheus_port}",
            "locust": f"http://{host}:{self.locust_port}",
            "gateway": f"http://{LOOPBACK}:{self.launcher.gateway_port}/v1",
        }

    def serve(self, ready: Callable[[dict[str, str]], None], poll_s: float = 1.0) -> None:
        """Bring everything up, call `ready(urls)`, serve until KeyboardInterrupt (or a process
        of the lab dies: LabError), then tear everything down."""
        try:
            self.start()
            ready(self.urls())
            while True:
                self.launcher.check_alive()
                time.sleep(poll_s)
        finally:
            self.stop()

    def start(self) -> None:
        """Everything up: the run's processes, then Locust's web UI (its load started)."""
        self.launcher.prepare()
        self.launcher.start()
        self._start_locust_ui()

    def stop(self) -> None:
        """Tear everything down (as a run does)."""
        self.launcher.stop()

    def _start_locust_ui(self) -> None:
        launcher = self.launcher
        web = LocustWeb(self.bind, self.locust_port)
        argv = self.plan.locust_argv(launcher.gateway_port, launcher.loadgen_port, web=web)
        c = self.config
        self.progress(f"load: {c.workload} open loop, Locust UI on {self.bind}:{self.locust_port}")
        launcher.popen_root("locust", argv)
        # Locust's imports take seconds here and over a minute in the lab VM under TCG
        # (docs/SCALE.md); the wait ends as soon as it answers.
        url, timeout = f"http://{LOOPBACK}:{self.locust_port}/", LOCUST_UI_TIMEOUT_S
        if wait_http([url], timeout, alive=launcher.check_alive):
            raise LabError(f"locust not answering at {url} after {timeout:.0f}s")
