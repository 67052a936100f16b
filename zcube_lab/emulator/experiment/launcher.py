"""The processes of one run: `Launcher` brings up the lab (on one machine or several), the
serving roles in their hosts, the health sampler and Prometheus, and tears all of it down.
`Experiment` (`zcube_lab.emulator.experiment.runner`) drives the load and collects; the live lab
(`live.py`) keeps it up with Locust's web UI. Needs root.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

from prometheus_client import CollectorRegistry, start_http_server

from zcube_lab.adapters.ports import free_port
from zcube_lab.adapters.procs import signals_ignored, stop_groups, wait_http
from zcube_lab.core.fabric.queues import queue_summary
from zcube_lab.emulator.cluster.lab import ClusterLab
from zcube_lab.emulator.cluster.remote import Machine, argv_on, check_on, run_on
from zcube_lab.emulator.experiment.clusterrun import (
    Agent,
    machine_hosts,
    machine_rates,
    start_agents,
    stop_agents,
)
from zcube_lab.emulator.experiment.plan import (
    DECODE_PORT,
    LOOPBACK,
    PREFILL_PORT,
    Ports,
    RunPlan,
)
from zcube_lab.emulator.lab import ovs
from zcube_lab.emulator.lab.health import HealthSampler
from zcube_lab.emulator.lab.injector import FaultInjector
from zcube_lab.emulator.lab.netsampler import NetSampler
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.nodes import unreachable_text
from zcube_lab.emulator.lab.options import LabOptions
from zcube_lab.emulator.lab.procfaults import LabProcessFaults
from zcube_lab.emulator.lab.system import LabError
from zcube_lab.emulator.prometheus.config import ScrapePlan
from zcube_lab.emulator.prometheus.server import PrometheusServer
from zcube_lab.emulator.results.run.summary import RunSummary
from zcube_lab.emulator.results.structure.structuresection import write_run_structure
from zcube_lab.emulator.verdict.netstats import RateLimits, shaped_rates
from zcube_lab.emulator.verdict.network import (
    DATAPATH_RECEIVE_DROPS,
    DATAPATH_SEND_ERRORS,
)

# The controller's port statistics and the health and network samplers read every modelled
# second: at k, every k wall seconds (their cost per second / k, the same samples per run).
SAMPLE_INTERVAL_S = 1.0


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
        idle_poll_interval: float = 0.0,
    ) -> None:
        self.plan = plan
        self.progress = progress or (lambda _m: None)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.dir = plan.config.results_root.resolve() / plan.run_name(stamp)
        self.prometheus_port = prometheus_port
        self.prometheus_host = prometheus_host
        # > the poll interval: the controller's statistics poll while no counter moves (the
        # live lab's; a run polls at its interval throughout)
        self.idle_poll_interval = idle_poll_interval
        self.scrape_plan: ScrapePlan | None = None
        self.lab: Lab | None = None
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.logs: list[IO[bytes]] = []
        self.prometheus: PrometheusServer | None = None
        self.health: HealthSampler | None = None
        self.injector: FaultInjector | None = None
        self.net_sampler: NetSampler | None = None
        self._datapath_mark: tuple[int, int] | None = None  # (log size, receive drops)
        self._health_http = None
        self.remote_procs: set[str] = set()  # names of processes started on other machines
        self.agents: list[Agent] = []  # health agents on the other machines, during the load
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
        if plan.config.lossless:  # how its agent runs (priority, poll), as a replay records it
            cfg["lab"] = self.lab_options().lossless_agent()
        (self.dir / "config.json").write_text(json.dumps(cfg, indent=2, default=str) + "\n")
        write_run_structure(self.dir, cfg)  # scaled vs full size, for this run's pairs

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

    def lab_options(self, of_port: int = 0, metrics_port: int = 0) -> LabOptions:
        """The live lab's options for this run's plan (the controller's and metrics' ports
        given); the lossless agent at `LabOptions`' real-time priority, as a replay's."""
        plan = self.plan
        return LabOptions(
            scale=plan.scale,
            # The controller's port statistics, like every sampler, every modelled second.
            poll_interval=plan.clock.wall(SAMPLE_INTERVAL_S),
            idle_poll_interval=self.idle_poll_interval,
            mtu=plan.config.link_mtu(plan.fabric, plan.scale),
            queue=plan.config.queue_model(),
            congestion_control=plan.config.congestion_control,
            ovs_instances=plan.config.ovs_instances,
            lossless=plan.config.lossless,
            ev_rules=plan.config.kv_transport == "mrc",  # EVs name their paths (evpaths)
            policy=plan.policy.routing,
            recompute=plan.policy.recompute,
            management=True,
            log_dir=self.dir / "logs",
            of_port=of_port,
            metrics_port=metrics_port,
        )

    def start_lab(self) -> None:
        """The fabric in Mininet with its controller and management network, all-pairs checked."""
        plan = self.plan
        opts = self.lab_options(of_port=free_port(), metrics_port=free_port())
        self.progress(
            f"fabric {plan.fabric.kind}: {len(plan.fabric.hosts)} GPU hosts, "
            f"{len(plan.fabric.switches)} switches (bandwidth scale "
            f"{plan.scale.bandwidth_scale(plan.fabric):g})"
        )
        if plan.config.machines:
            from zcube_lab.emulator.cluster.lab import ClusterLab
            from zcube_lab.emulator.cluster.remote import parse_machines

            machines = parse_machines(",".join(plan.config.machines))
            self.lab = ClusterLab(plan.fabric, machines, opts, progress=self.progress)
        else:
            self.lab = Lab(plan.fabric, opts, progress=self.progress)
        self.lab.start()
        failures = self.lab.check_reachability()
        bad = {h: v for h, v in failures.items() if v}
        if bad:
            (self.dir / "logs" / "unreachable.json").write_text(json.dumps(bad, indent=1))
            raise LabError(unreachable_text(bad, self.dir / "logs" / "unreachable.json"))

    # -- processes -----------------------------------------------------------------------
    def popen_in(self, host: str, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Start `argv` in a GPU host's namespace, logging to `logs/<name>.log`."""
        assert self.lab is not None and self.lab.net is not None
        log = (self.dir / "logs" / f"{name}.log").open("wb")
        self.logs.append(log)
        node = self.lab.net.get(host)
        proc = node.popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((name, proc))
        if getattr(node, "isRemote", False):
            self.remote_procs.add(name)  # `proc` is its ssh client here; the agent watches it
        self.lab.track_pid(proc.pid)
        return proc

    def remote_machines(self) -> list[Machine]:
        """The other lab machines of a run over several (none on one machine)."""
        return self.lab.machines[1:] if isinstance(self.lab, ClusterLab) else []

    def popen_remote(self, machine: Machine, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Start `argv` in another machine's root namespace over ssh, its output (through ssh)
        in `logs/<name>.log` here."""
        log = (self.dir / "logs" / f"{name}.log").open("wb")
        self.logs.append(log)
        proc = subprocess.Popen(
            argv_on(machine, argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs.append((name, proc))
        self.remote_procs.add(name)
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
        for m in self.remote_machines():  # the log folder's path exists there too
            check_on(m, ["mkdir", "-p", str(self.dir / "logs")], "making the run folder")
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
        wall = self.plan.clock.wall(SAMPLE_INTERVAL_S)
        self.health = HealthSampler(
            interval_s=wall, registry=registry, path=self.dir / "health-samples.jsonl"
        )
        for name, proc in self.procs:
            if name not in self.remote_procs:
                self.health.register(name, proc.pid)
        if self.lab.controller is not None:
            self.health.register("controller", self.lab.controller.pid)
        self.health.start()
        self.health_port = free_port()
        self._health_http = start_http_server(self.health_port, LOOPBACK, registry)
        if self.plan.faults:
            engines = {e.engine_id for e in self.plan.placement.engines}
            self.injector = FaultInjector(
                self.plan.fabric,
                list(self.plan.faults),
                self.dir / "faults.jsonl",
                registry=registry,
                progress=self.progress,
                processes=LabProcessFaults(
                    {name: proc for name, proc in self.procs if name in engines},
                    self.lab.stop_controller,
                    self.lab.restart_controller,
                    self.lab.kill_vswitchd,
                    self.lab.start_vswitchd,
                    follow=self.health.register,  # the restarted controller's new pid
                ),
            )
        self.loadgen_port = free_port()
        ports = Ports(
            gateway=self.gateway_port,
            controller=self.lab.options.metrics_port,
            loadgen=self.loadgen_port,
            emulator=self.health_port,
        )
        self.scrape_plan = self.plan.scrape(ports, self.dir.name)
        text = self.scrape_plan.render()
        if self.prometheus_port is not None:
            self.progress(f"Prometheus on {self.prometheus_host}:{self.prometheus_port}")
        self.prometheus = PrometheusServer(
            text,
            self.dir / "prometheus",
            port=self.prometheus_port,
            listen_host=self.prometheus_host,
        )
        interval = self.plan.clock.wall(self.plan.config.scrape_interval_s)
        self.progress(f"starting Prometheus (scrape every {interval:g}s)")
        self.prometheus.start()
        if self.prometheus.pid is not None:
            self.lab.track_pid(self.prometheus.pid)  # removed by the next run if this one dies
        # Prometheus discovers its targets a few seconds after it is ready: until it has
        # scraped each once, a load would go uncounted (`increase()` misses what happened
        # before a series' first sample). The load generator's target starts with the load.
        self.prometheus.wait_for_targets_up(timeout=30.0, ignore_jobs=("loadgen",))

    # -- fidelity evidence ---------------------------------------------------------------
    def start_net_sampling(self, limits: RateLimits | None = None) -> None:
        """Read every host's TCP counters and every shaped queue now, then every second
        (`zcube_lab.emulator.lab.netsampler`, its rate events judged by `limits`): call just before
        the
        load starts."""
        assert self.lab is not None and self.lab.net is not None
        plan = self.plan
        if isinstance(self.lab, ClusterLab):  # this machine's part; agents watch the others
            hosts, rates = machine_hosts(self.lab, 0), machine_rates(self.lab, 0)
        else:
            hosts = {h.name: self.lab.net.get(h.name).pid for h in plan.fabric.hosts}
            rates = shaped_rates(plan.fabric, plan.scale)
        wall = plan.clock.wall(SAMPLE_INTERVAL_S)
        self.net_sampler = NetSampler(hosts, rates, interval_s=wall, limits=limits).start()
        self._datapath_mark = _datapath_losses() if self.lab.datapath == "user" else None
        if isinstance(self.lab, ClusterLab):
            self.agents = start_agents(self.lab, self.dir / "logs")

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
        stop_agents(self.agents)
        for m in self.remote_machines():
            # What this run started there outside the hosts (Locust workers) names its folder;
            # processes inside the hosts go with the lab (ClusterLab.stop).
            run_on(m, ["pkill", "-9", "-f", str(self.dir)])
        stop_groups([proc for _name, proc in self.procs])
        self.procs.clear()
        for log in self.logs:
            log.close()
        if self.prometheus is not None:
            with contextlib.suppress(Exception):
                self.prometheus.stop()
        if self.health is not None:
            with contextlib.suppress(Exception):
                self.health.close()
        if self._health_http is not None:
            server, thread = self._health_http
            with contextlib.suppress(Exception):
                server.shutdown()
                server.server_close()
            thread.join(timeout=2)


def _datapath_losses() -> tuple[int, int]:
    """Where ovs-vswitchd's log ends, and the drops its packet sockets counted so far."""
    return ovs.log_size(), sum(s.drops for s in ovs.packet_sockets())
