"""A live lab for exploration (`zcube-lab up --serve`): the fabric, the serving cluster in its
hosts, the health sampler and Prometheus exactly as a run starts them (the same `RunPlan` and
`Launcher`), then Locust with its web UI instead of a timed headless run; everything stays up
until Ctrl-C or SIGTERM, then it is torn down as a run is. Needs root.

Fixed addresses, so Grafana and a browser find them: Prometheus on `bind:prometheus_port`
(default 127.0.0.1:9090, the VM's forwarded port), the Locust UI on `bind:locust_port` (8089).
In the VM use `bind="0.0.0.0"`: a forwarded port reaches the guest's NAT address, not its
loopback. Files go to `<results>/<time>-<fabric>-<workload>-live/` as a run's do (config,
logs, the Prometheus TSDB), without the collection step.

Quiet while idle (docs/BENCHMARKS.md, the idle floor of `up --serve`): once a second the live lab
reads the gateway's `/activity`; after `pace.QUIET_S` without a request Prometheus scrapes every
`pace.IDLE_SCRAPE_S` instead of every modelled second (its config reloaded), and the first
request brings the run's interval back within about a second (`ScrapeWatch`). The controller polls
its statistics every `IDLE_POLL_S` while no port counter moves (`zcube_lab.controller.pace`).
A run has neither: it scrapes and polls at its interval throughout.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from zcube_lab.adapters.procs import wait_http
from zcube_lab.emulator.experiment.launcher import Launcher
from zcube_lab.emulator.experiment.plan import LOOPBACK, LocustWeb, RunConfig, plan_run
from zcube_lab.emulator.lab.system import LabError
from zcube_lab.emulator.prometheus.config import ScrapePlan
from zcube_lab.emulator.prometheus.pace import IDLE_SCRAPE_S, Activity, ScrapePace
from zcube_lab.emulator.prometheus.server import PrometheusServer
from zcube_lab.serving.gateway import ACTIVITY_PATH

LOCUST_UI_TIMEOUT_S = 120.0  # how long `up --serve` waits for Locust's web UI to answer
IDLE_POLL_S = 5.0  # wall seconds between the controller's statistics polls while nothing moves
ACTIVITY_TIMEOUT_S = 0.5


class ScrapeWatch:
    """Prometheus' scrape interval kept to `ScrapePace`'s: `tick(now)` reads the gateway's
    activity and reloads Prometheus when the interval changes."""

    def __init__(
        self,
        prometheus: PrometheusServer,
        plan: ScrapePlan,
        activity_url: str,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.prometheus = prometheus
        self.plan = plan
        self.activity_url = activity_url
        self.progress = progress or (lambda _m: None)
        self.pace = ScrapePace(plan.wall_interval_s, max(IDLE_SCRAPE_S, plan.wall_interval_s))
        self.interval_s = plan.wall_interval_s  # what Prometheus runs with now
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def read(self) -> Activity | None:
        """The gateway's activity now, or None when it does not answer."""
        try:
            with self._opener.open(self.activity_url, timeout=ACTIVITY_TIMEOUT_S) as answer:
                got = json.loads(answer.read())
            return Activity(int(got["received"]), int(got["outstanding"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def tick(self, now: float) -> None:
        """Look at the activity and set the interval it calls for."""
        interval = self.pace.seen(now, self.read())
        if interval != self.interval_s:
            self.prometheus.reload(self.plan.render(interval))
            self.interval_s = interval
            self.progress(f"Prometheus scrapes every {interval:g}s")


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
            self.plan,
            self.progress,
            prometheus_port=prometheus_port,
            prometheus_host=bind,
            idle_poll_interval=IDLE_POLL_S,
        )
        self.watch: ScrapeWatch | None = None

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
                self.tick()
                time.sleep(poll_s)
        finally:
            self.stop()

    def start(self) -> None:
        """Everything up: the run's processes, then Locust's web UI (its load started)."""
        launcher = self.launcher
        launcher.prepare()
        launcher.start()
        self._start_locust_ui()
        assert launcher.prometheus is not None and launcher.scrape_plan is not None
        self.watch = ScrapeWatch(
            launcher.prometheus,
            launcher.scrape_plan,
            f"http://{LOOPBACK}:{launcher.gateway_port}{ACTIVITY_PATH}",
            self.progress,
        )

    def tick(self) -> None:
        """Once a second while serving: LabError if a process died; the scrape pace kept."""
        self.launcher.check_alive()
        if self.watch is not None:
            self.watch.tick(time.monotonic())

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
