"""One experiment run: a fabric, a serving cluster on its GPU hosts, a real Prometheus, Locust
load, then collection and teardown. Needs root.

What runs where is the pure `RunPlan` (`emulator.experiment.plan`); this module executes it.
`Launcher` holds the processes: `start()` brings up the lab with a management network, the EP
workers, prefill and decode engines inside their Mininet hosts (API and metrics on the
management address, KV and all-to-all on the fabric addresses), the gateway in the root
namespace on 127.0.0.1, the health sampler and Prometheus; `stop()` undoes all of it, whatever
failed. `Experiment.run` adds Locust headless for the run, then queries, a TSDB snapshot and
`summary.json`; the live lab (`live.py`) adds Locust's web UI instead. Around the load it reads
the fidelity evidence: each engine's step overruns from its /metrics before and after, and the
network sampler (`emulator.lab.netsampler`: hosts' TCP counters, shaped queues) from just
before Locust starts until it exits; `health.json` holds the verdict on CPU and network.

Results go to `<results_root>/<YYYYmmdd-HHMMSS>-<fabric>-<workload>/`:
`config.json`, `locust_*.csv`, `locust.json`, `requests.jsonl`, `series.json`,
`prometheus/` (config, TSDB and its snapshot), `health.json`, `logs/` (every process, the
controller, and one `kv-<engine>.jsonl` per decode engine: every KV pull attempt),
`faults.jsonl` (injected failures, when `--fail` is given), `summary.json`.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any

from prometheus_client import CollectorRegistry, start_http_server

from emulator.experiment.plan import (
    DECODE_PORT,
    LOOPBACK,
    PREFILL_PORT,
    Ports,
    RunConfig,
    RunPlan,
    plan_run,
)
from emulator.lab import ovs
from emulator.lab.fidelity import (
    DATAPATH_RECEIVE_DROPS,
    DATAPATH_SEND_ERRORS,
    FaultWindow,
    NetworkEvidence,
    step_overruns,
)
from emulator.lab.health import HealthSampler
from emulator.lab.injector import FaultInjector
from emulator.lab.netsampler import NetSampler, engine_overrun_buckets
from emulator.lab.netstats import shaped_rates
from emulator.lab.network import Lab, LabOptions
from emulator.lab.system import LabError
from emulator.lab.verdict import Thresholds
from emulator.prometheus.queries import EXPORTED_SERIES, port_counters, server_figures
from emulator.prometheus.server import PrometheusServer
from emulator.results.dilation import undilate
from emulator.results.faults import analyze
from emulator.results.figures import (
    client_summary,
    fabric_stats,
    link_loads,
    link_utilization,
    read_jsonl,
    throughput_series,
)
from emulator.results.summary import FaultReport, InjectedFault, RunSummary
from emulator.results.transfers import transfer_figures
from zcube_lab.fabric.queues import queue_summary
from zcube_lab.ports import free_port
from zcube_lab.procs import signals_ignored, stop_groups, wait_http


@dataclass
class RunResult:
    """Where a run's results are and what it measured."""

    path: Path
    summary: RunSummary


class Launcher:
    """A plan's processes in a Mininet lab: `prepare()` makes the run folder, `start()` brings
    up the lab, the serving roles and monitoring, `stop()` tears everything down (in `finally`).

    Root-namespace ports are free ones picked just before their process starts; Prometheus
    takes a free port on loopback unless `prometheus_port` (and `prometheus_host`) fix it.
    """

    def __init__(
        self,
        plan: RunPlan,
        progress: Callable[[str], None] | None = None,
        *,
        prometheus_port: int | None = None,
        prometheus_host: str = LOOPBACK,
    ) -> None:
        self.plan = plan
        self.progress = progress or (lambda _m: None)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.dir = plan.config.results_root.resolve() / plan.run_name(stamp)
        self.prometheus_port = prometheus_port
        self.prometheus_host = prometheus_host
        self.lab: Lab | None = None
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.logs: list[IO[bytes]] = []
        self.prometheus: PrometheusServer | None = None
        self.health: HealthSampler | None = None
        self.injector: FaultInjector | None = None
        self.net_sampler: NetSampler | None = None
        self._datapath_mark: tuple[int, int] | None = None  # (log size, receive drops)
        self._health_http = None
        self.gateway_port = 0
        self.loadgen_port = 0
        self.health_port = 0

    # -- lifecycle ---------------------------------------------------------------------
    def prepare(self) -> None:
        """Create the run folder and its `logs/`, and write `config.json`."""
        self.dir.mkdir(parents=True, exist_ok=False)
        (self.dir / "logs").mkdir()
        plan = self.plan
        cfg = plan.config.to_dict()
        cfg["fabric_summary"] = dict(plan.fabric.summary())
        cfg["bandwidth_scale"] = plan.scale.bandwidth_scale(plan.fabric)
        mtu = plan.config.link_mtu(plan.fabric, plan.scale)
        cfg["link_mtu"] = mtu
        cfg["queues"] = queue_summary(plan.fabric, plan.scale, mtu, plan.config.queue_model())
        cfg["placement"] = [asdict(e) for e in plan.placement.engines]
        (self.dir / "config.json").write_text(json.dumps(cfg, indent=2, default=str) + "\n")

    def start(self) -> None:
        """The lab, then the serving roles (healthy), then the health sampler and Prometheus."""
        self.start_lab()
        self.start_serving()
        self.start_monitoring()

    def stop(self) -> None:
        """Undo `start()`: faults healed first, then every process, then the lab."""
        # A second Ctrl-C must not cut teardown short: that is what leaves labs behind.
        with signals_ignored():
            try:
                if self.injector is not None:
                    self.injector.stop()  # links back up before anything else stops
                self._stop_processes()
            finally:
                if self.lab is not None:
                    self.lab.stop()

    def start_lab(self) -> None:
        """The fabric in Mininet with its controller and management network, all-pairs checked."""
        plan = self.plan
        opts = LabOptions(
            scale=plan.scale,
            mtu=plan.config.link_mtu(plan.fabric, plan.scale),
            queue=plan.config.queue_model(),
            policy=plan.policy.routing,
            recompute=plan.policy.recompute,
            management=True,
            log_dir=self.dir / "logs",
            of_port=free_port(),
            metrics_port=free_port(),
        )
        self.progress(
            f"fabric {plan.fabric.kind}: {len(plan.fabric.hosts)} GPU hosts, "
            f"{len(plan.fabric.switches)} switches (bandwidth scale "
            f"{plan.scale.bandwidth_scale(plan.fabric):g})"
        )
        self.lab = Lab(plan.fabric, opts, progress=self.progress)
        self.lab.start()
        failures = self.lab.check_reachability()
        bad = {h: v for h, v in failures.items() if v}
        if bad:
            raise LabError(f"fabric not fully reachable: {bad}")

    # -- processes -----------------------------------------------------------------------
    def popen_in(self, host: str, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Start `argv` in a GPU host's namespace, logging to `logs/<name>.log`."""
        assert self.lab is not None and self.lab.net is not None
        log = (self.dir / "logs" / f"{name}.log").open("wb")
        self.logs.append(log)
        proc = self.lab.net.get(host).popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((name, proc))
        self.lab.track_pid(proc.pid)
        return proc

    def popen_root(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Start `argv` in the root namespace (its own session), logging to `logs/<name>.log`."""
        log = (self.dir / "logs" / f"{name}.log").open("wb")
        self.logs.append(log)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, proc))
        if self.lab is not None:
            self.lab.track_pid(proc.pid)
        return proc

    def check_alive(self) -> None:
        """Raise LabError with the log tail of the first started process that has exited (or
        when Prometheus, once started, has)."""
        for name, proc in self.procs:
            if proc.poll() is not None:
                log = (self.dir / "logs" / f"{name}.log").read_text(errors="replace")
                raise LabError(f"{name} exited with {proc.returncode}:\n{log[-1500:]}")
        if self.prometheus is not None and not self.prometheus.running():
            raise LabError(f"Prometheus exited: see {self.prometheus.log_path}")

    # -- serving -----------------------------------------------------------------------
    def start_serving(self) -> None:
        """Every role of the plan in order, then wait until each answers its health URL."""
        plan = self.plan
        self.progress(
            f"starting {len(plan.placement.role('prefill'))} prefill and "
            f"{len(plan.placement.role('decode'))} decode engines ({plan.config.model}), "
            f"{len(plan.placement.ep_hosts)} EP workers"
        )
        self.gateway_port = free_port()
        launches = plan.role_launches(self.gateway_port, self.dir / "logs")
        for launch in launches:
            if launch.host is None:
                self.popen_root(launch.name, list(launch.argv))
            else:
                self.popen_in(launch.host, launch.name, list(launch.argv))
        timeout = 90
        failing = wait_http(
            [r.health_url for r in launches if r.health_url], timeout, alive=self.check_alive
        )
        if failing:
            raise LabError(f"not healthy after {timeout:.0f}s: {failing}")

    # -- monitoring ----------------------------------------------------------------------
    def start_monitoring(self) -> None:
        """The health sampler (and its metrics), the fault injector (armed, not started) and
        Prometheus scraping every component."""
        assert self.lab is not None
        registry = CollectorRegistry()
        self.health = HealthSampler(interval_s=1.0, registry=registry)
        for name, proc in self.procs:
            self.health.register(name, proc.pid)
        if self.lab.controller is not None:
            self.health.register("controller", self.lab.controller.pid)
        self.health.start()
        self.health_port = free_port()
        self._health_http = start_http_server(self.health_port, LOOPBACK, registry)
        if self.plan.faults:
            self.injector = FaultInjector(
                self.plan.fabric,
                list(self.plan.faults),
                self.dir / "faults.jsonl",
                registry=registry,
                progress=self.progress,
            )
        self.loadgen_port = free_port()
        ports = Ports(
            gateway=self.gateway_port,
            controller=self.lab.options.metrics_port,
            loadgen=self.loadgen_port,
            emulator=self.health_port,
        )
        text = self.plan.scrape(ports, self.dir.name).render()
        if self.prometheus_port is not None:
            self.progress(f"Prometheus on {self.prometheus_host}:{self.prometheus_port}")
        self.prometheus = PrometheusServer(
            text,
            self.dir / "prometheus",
            port=self.prometheus_port,
            listen_host=self.prometheus_host,
        )
        interval = self.plan.config.scrape_interval_s
        self.progress(f"starting Prometheus (scrape every {interval:g}s)")
        self.prometheus.start()
        if self.prometheus.pid is not None:
            self.lab.track_pid(self.prometheus.pid)  # removed by the next run if this one dies
        # Prometheus discovers its targets a few seconds after it is ready: until it has
        # scraped each once, a load would go uncounted (`increase()` misses what happened
        # before a series' first sample). The load generator's target starts with the load.
        self.prometheus.wait_for_targets_up(timeout=30.0, ignore_jobs=("loadgen",))

    # -- fidelity evidence ---------------------------------------------------------------
    def start_net_sampling(self) -> None:
        """Read every host's TCP counters and every shaped queue now, then every second
        (`emulator.lab.netsampler`): call just before the load starts."""
        assert self.lab is not None and self.lab.net is not None
        plan = self.plan
        hosts = {h.name: self.lab.net.get(h.name).pid for h in plan.fabric.hosts}
        self.net_sampler = NetSampler(hosts, shaped_rates(plan.fabric, plan.scale)).start()
        self._datapath_mark = _datapath_losses() if self.lab.datapath == "user" else None

    def datapath_drops(self) -> dict[str, int]:
        """ovs-vswitchd's own packet losses since `start_net_sampling` (userspace datapath)."""
        if self._datapath_mark is None:
            return {}
        (log_at, dropped_before), (_log_now, dropped_now) = self._datapath_mark, _datapath_losses()
        return {
            DATAPATH_SEND_ERRORS: len(ovs.send_errors_since(log_at)),
            DATAPATH_RECEIVE_DROPS: max(0, dropped_now - dropped_before),
        }

    def engine_metrics_urls(self) -> dict[str, str]:
        """Each prefill and decode engine's /metrics, by engine id."""
        port = {"prefill": PREFILL_PORT, "decode": DECODE_PORT}
        return {
            e.engine_id: f"http://{self.plan.management_ip(e.host)}:{port[e.role]}/metrics"
            for e in self.plan.placement.engines
            if e.role in port
        }

    def _stop_processes(self) -> None:
        if self.net_sampler is not None:
            with contextlib.suppress(Exception):
                self.net_sampler.stop()
        stop_groups([proc for _name, proc in self.procs])
        self.procs.clear()
        for log in self.logs:
            log.close()
        if self.prometheus is not None:
            with contextlib.suppress(Exception):
                self.prometheus.stop()
        if self.health is not None:
            with contextlib.suppress(Exception):
                self.health.stop()
        if self._health_http is not None:
            server, thread = self._health_http
            with contextlib.suppress(Exception):
                server.shutdown()
                server.server_close()
            thread.join(timeout=2)


class Experiment:
    """One run. `run()` returns the results; it always tears everything down."""

    def __init__(self, config: RunConfig, progress: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.progress = progress or (lambda _m: None)
        self.plan = plan_run(config)  # checks fabric, placement, policy and faults at once
        self.launcher = Launcher(self.plan, self.progress)
        self.dir = self.launcher.dir
        self.thresholds = Thresholds()
        self._load_start = 0.0  # time.monotonic() when the load started (the samplers' clock)
        self._overruns_before: dict[str, dict[float, float]] = {}
        self._evidence: NetworkEvidence | None = None

    @property
    def prometheus(self) -> PrometheusServer | None:
        return self.launcher.prometheus

    @property
    def health(self) -> HealthSampler | None:
        return self.launcher.health

    # -- lifecycle ---------------------------------------------------------------------
    def run(self) -> RunResult:
        """Bring everything up, drive the load, collect, tear down."""
        self.launcher.prepare()
        try:
            self.launcher.start()
            t0, t1 = self._drive_load()
            return RunResult(self.dir, self._collect(t0, t1))
        finally:
            self.launcher.stop()

    # -- load ----------------------------------------------------------------------------
    def _drive_load(self) -> tuple[float, float]:
        c, plan = self.config, self.plan
        launcher = self.launcher
        argv = plan.locust_argv(launcher.gateway_port, launcher.loadgen_port, out_dir=self.dir)
        self.progress(
            f"load: {c.workload} for {c.duration_s:g}s (seed {c.seed}), policy {plan.policy.name}"
            + "".join(f"; {f.label} at {f.at_s:g}s" for f in plan.faults)
        )
        self._overruns_before = engine_overrun_buckets(launcher.engine_metrics_urls())
        launcher.start_net_sampling()
        t0 = time.time()
        self._load_start = time.monotonic()
        proc = launcher.popen_root("locust", argv)
        if launcher.injector is not None:
            launcher.injector.start(t0)
        if launcher.health is not None:  # a saturated load generator would inflate TTFT
            launcher.health.register("locust", proc.pid)
        self._wait_loadgen(proc, c.wall_s + 30)
        self._evidence = self._network_evidence()
        # One more scrape so the counters include the end of the run; queries run at t1.
        time.sleep(2 * c.scrape_interval_s + 0.5)
        t1 = time.time()
        if proc.returncode not in (0, 1):  # 1: Locust saw failed requests, still a result
            log = (self.dir / "logs" / "locust.log").read_text(errors="replace")
            raise LabError(f"load generator exited with {proc.returncode}:\n{log[-2000:]}")
        return t0, t1

    def _network_evidence(self) -> NetworkEvidence | None:
        """Stop the network sampler and read the engines' step overruns: the load is over."""
        sampler = self.launcher.net_sampler
        if sampler is None:
            return None
        sampler.stop()
        after = engine_overrun_buckets(self.launcher.engine_metrics_urls())
        threshold = self.thresholds.network.overrun_s
        overruns = step_overruns(self._overruns_before, after, threshold)
        if sampler.failures:
            self.progress(f"network sampling: {sampler.failures} reads failed")
        origin = self._load_start
        faults = [
            FaultWindow(f.label, origin + f.at_s, None if f.end_s is None else origin + f.end_s)
            for f in self.plan.faults
        ]
        evidence = sampler.evidence(overruns, faults)
        return replace(
            evidence,
            datapath_drops=self.launcher.datapath_drops(),
            switch_ports=frozenset(self.plan.fabric.switch_interfaces()),
        )

    def _wait_loadgen(self, proc: subprocess.Popen[bytes], limit: float) -> None:
        start = time.monotonic()
        last = -1
        while proc.poll() is None:
            elapsed = time.monotonic() - start
            if elapsed > limit:
                raise LabError(f"load generator still running after {limit:.0f}s")
            tick = int(elapsed // 10)
            if tick != last:
                last = tick
                done = _count_lines(self.dir / "requests.jsonl")
                wall = self.config.duration_s * self.config.dilation
                self.progress(f"  {elapsed:5.0f}s / {wall:g}s  {done} requests finished")
            time.sleep(0.5)

    # -- collection ----------------------------------------------------------------------
    def _collect(self, t0: float, t1: float) -> RunSummary:
        assert self.prometheus is not None and self.health is not None
        self.progress("collecting")
        window = max(t1 - t0, 1.0)
        prom = self.prometheus
        records = read_jsonl(self.dir / "requests.jsonl")
        hosts = {e.engine_id: e.host for e in self.plan.placement.engines}
        transfers = transfer_figures(self.dir / "logs", self.plan.fabric, self.plan.scale, hosts)
        server = server_figures(prom, t1, window, transfers)
        ports = port_counters(prom, t1, window)
        util = link_utilization(self.plan.fabric, self.plan.scale, ports.tx_bytes, window)
        links = link_loads(self.plan.fabric, self.plan.scale, ports, window)
        verdict = self.health.verdict(self.thresholds, self._evidence)
        (self.dir / "health.json").write_text(json.dumps(verdict.to_dict(), indent=2) + "\n")
        with contextlib.suppress(Exception):
            prom.snapshot()
        with contextlib.suppress(Exception):
            prom.export_series(EXPORTED_SERIES, t0, t1, 2.0, self.dir / "series.json")
        summary = RunSummary(
            run=self.dir.name,
            label=self.plan.label,
            policy=self.plan.policy.name,
            fabric=self.plan.fabric.kind,
            fabric_params=dict(self.plan.fabric.spec.params),
            workload=self.config.workload,
            model=self.config.model,
            seed=self.config.seed,
            window_s=window,
            client=client_summary(records, window_s=self.config.duration_s),
            loadgen=_read_json(self.dir / "loadgen-summary.json"),
            server=server,
            fabric_stats=fabric_stats(
                self.plan.fabric,
                util,
                ports.rx_bytes,
                ports.drops,
                server.reported_bytes,
                links,
                ports.peak_window_s,
            ),
            port_util={f"{k[0]}:{k[1]}": v for k, v in sorted(util.items())},
            throughput_series=tuple(throughput_series(records)),
            faults=self._fault_report(records, t1),
            health=verdict,
            trustworthy=verdict.trustworthy,
            link_util=links,
            transfers=transfers,
            dir=self.dir,
        )
        summary = undilate(summary, self.config.dilation)  # modelled seconds (docs/DOMAIN.md §4)
        summary.write(self.dir)
        return summary

    def _fault_report(self, records: list[dict[str, Any]], t1: float) -> FaultReport:
        """The fault report from the injector's events and every decode engine's KV log."""
        kv_attempts = [
            row for p in sorted((self.dir / "logs").glob("kv-*.jsonl")) for row in read_jsonl(p)
        ]
        events = read_jsonl(self.dir / "faults.jsonl")
        injected = [InjectedFault.from_dict(f.to_dict()) for f in self.plan.faults]
        return analyze(events, records, kv_attempts, end_wall=t1, injected=injected)


def _count_lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _datapath_losses() -> tuple[int, int]:
    """Where ovs-vswitchd's log ends, and the drops its packet sockets counted so far."""
    return ovs.log_size(), sum(s.drops for s in ovs.packet_sockets())
