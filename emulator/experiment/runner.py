"""One experiment run: a fabric, a serving cluster on its GPU hosts, a real Prometheus, Locust
load, then collection and teardown. Needs root.

Order (`Experiment.run`): lab up with a management network; EP workers, prefill and decode
engines started inside their Mininet hosts (API and metrics on the management address, KV and
all-to-all on the fabric addresses); the gateway in the root namespace on 127.0.0.1; the health
sampler and Prometheus; Locust headless for the run; then queries, a TSDB snapshot and
`summary.json`. Every process is stopped in `finally`, whatever failed.

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
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from prometheus_client import CollectorRegistry, start_http_server

from emulator.lab.health import HealthSampler
from emulator.lab.injector import FaultInjector
from emulator.lab.network import Lab, LabError, LabOptions
from emulator.prometheus.queries import EXPORTED_SERIES, port_counters, server_figures
from emulator.prometheus.server import PrometheusServer, scrape_config
from emulator.results.faults import analyze
from emulator.results.figures import (
    client_summary,
    fabric_stats,
    link_utilization,
    read_jsonl,
    throughput_series,
)
from emulator.results.summary import FaultReport, InjectedFault, RunSummary
from serving.models import PROFILES
from workloads import LOCUSTFILE
from zcube_lab.errors import ConfigError
from zcube_lab.fabric.builders import build_fabric
from zcube_lab.fabric.description import Fabric, FabricSpec
from zcube_lab.fabric.hostplan import Scale, kv_source_map
from zcube_lab.fabric.placement import LayoutSpec, Placement, place
from zcube_lab.faults import Fault, parse_faults
from zcube_lab.policies import SPRAY_CHUNK_BYTES, SPRAY_STALL_S, SPRAY_STREAMS, get_policy
from zcube_lab.ports import free_port
from zcube_lab.procs import signals_ignored, stop_groups, wait_http

PREFILL_PORT, DECODE_PORT, KV_PORT, EP_PORT = 8100, 8200, 7100, 7300
# What crossed the fabric is compared with what the servers say they sent; the fabric also
# carries TCP/IP headers, ACKs and the KV protocol's own framing.
OVERHEAD_TOLERANCE = 0.15


@dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; written to config.json."""

    fabric: FabricSpec
    workload: str = "coding-agent"
    duration_s: float = 60.0
    rate: float | None = None
    arrival: str | None = None
    burstiness: float | None = None
    seed: int = 1
    model: str = "glm-5.1"
    length_scale: float | None = None
    nic_mbps: float = 100.0
    policy: str = "ecmp"
    faults: tuple[str, ...] = ()  # --fail specifications (zcube_lab.faults)
    layout: LayoutSpec = field(default_factory=LayoutSpec)
    kv_streams: int = 2
    prefix_cache_hit_rate: float = 0.0
    kv_paths: str = "disjoint"  # ZCube: "disjoint" binds each KV lane to its own port
    scrape_interval_s: float = 1.0
    drain_s: float = 60.0
    results_root: Path = Path("results")
    tag: str = ""

    def __post_init__(self) -> None:
        if not 5 <= self.duration_s <= 3600:
            raise ConfigError("duration", self.duration_s, "between 5 and 3600 seconds")
        if self.model not in PROFILES:
            raise ConfigError("model", self.model, f"one of {list(PROFILES)}")
        if self.rate is not None and not 0 < self.rate <= 1000:
            raise ConfigError("rate", self.rate, "between 0 and 1000 requests/s")
        if not 0 < self.nic_mbps <= 1000:
            raise ConfigError("nic_mbps", self.nic_mbps, "between 0 and 1000 Mb/s")
        if not 0 <= self.drain_s <= 3600:
            raise ConfigError("drain", self.drain_s, "between 0 and 3600 seconds")
        get_policy(self.policy)
        if not 1 <= self.kv_streams <= 16:
            raise ConfigError("kv_streams", self.kv_streams, "between 1 and 16")
        if self.kv_paths not in ("disjoint", "shortest"):
            raise ConfigError("kv_paths", self.kv_paths, "disjoint or shortest")
        if not 0 <= self.prefix_cache_hit_rate < 1:
            raise ConfigError("prefix_cache_hit_rate", self.prefix_cache_hit_rate, "0 <= rate < 1")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fabric"] = json.loads(self.fabric.to_json())
        d["results_root"] = str(self.results_root)
        return d


@dataclass
class RunResult:
    """Where a run's results are and what it measured."""

    path: Path
    summary: RunSummary


class Experiment:
    """One run. `run()` returns the results; it always tears everything down."""

    def __init__(self, config: RunConfig, progress: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.progress = progress or (lambda _m: None)
        self.fabric: Fabric = build_fabric(config.fabric)
        self.scale = Scale(nic_mbps=config.nic_mbps)
        self.placement: Placement = place(self.fabric, config.layout)
        self.policy = get_policy(config.policy)
        self.faults: list[Fault] = parse_faults(
            config.faults, self.fabric, config.duration_s, config.seed
        )
        self.injector: FaultInjector | None = None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = f"{stamp}-{self.fabric.kind}-{Path(config.workload).stem}"
        if config.tag:
            name += f"-{config.tag}"
        self.dir = config.results_root.resolve() / name
        self.lab: Lab | None = None
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.logs: list[IO[bytes]] = []
        self.prometheus: PrometheusServer | None = None
        self.health: HealthSampler | None = None
        self._health_http = None
        self.gateway_port = 0
        self.loadgen_port = 0
        self.health_port = 0
        self.label = self.fabric.kind
        planes = dict(self.fabric.spec.params).get("planes", 1)
        if planes != 1:
            self.label += f"-{planes}planes"
        if self.policy.name != "ecmp" or self.faults:
            self.label += f"/{self.policy.name}"

    # -- lifecycle ---------------------------------------------------------------------
    def run(self) -> RunResult:
        """Bring everything up, drive the load, collect, tear down."""
        self.dir.mkdir(parents=True, exist_ok=False)
        (self.dir / "logs").mkdir()
        self._write_config()
        try:
            self._start_lab()
            self._start_serving()
            self._start_monitoring()
            t0, t1 = self._drive_load()
            return RunResult(self.dir, self._collect(t0, t1))
        finally:
            self._teardown()

    def _write_config(self) -> None:
        cfg = self.config.to_dict()
        cfg["fabric_summary"] = dict(self.fabric.summary())
        cfg["bandwidth_scale"] = self.scale.bandwidth_scale(self.fabric)
        cfg["placement"] = [asdict(e) for e in self.placement.engines]
        (self.dir / "config.json").write_text(json.dumps(cfg, indent=2, default=str) + "\n")

    def _start_lab(self) -> None:
        opts = LabOptions(
            scale=self.scale,
            policy=self.policy.routing,
            recompute=self.policy.recompute,
            management=True,
            log_dir=self.dir / "logs",
            of_port=free_port(),
            metrics_port=free_port(),
        )
        self.progress(
            f"fabric {self.fabric.kind}: {len(self.fabric.hosts)} GPU hosts, "
            f"{len(self.fabric.switches)} switches (bandwidth scale "
            f"{self.scale.bandwidth_scale(self.fabric):g})"
        )
        self.lab = Lab(self.fabric, opts, progress=self.progress)
        self.lab.start()
        failures = self.lab.check_reachability()
        bad = {h: v for h, v in failures.items() if v}
        if bad:
            raise LabError(f"fabric not fully reachable: {bad}")

    # -- serving -----------------------------------------------------------------------
    def _peer_address(self, src: str, dst: str) -> str:
        """The fabric address of `dst` that `src` reaches on a shortest path (ZCube: of the two
        2-hop options, alternate by host pair so both ports carry all-to-all)."""
        paths = self.fabric.shortest_paths(src, dst)
        choice = paths[(self.fabric.host(src).gid + self.fabric.host(dst).gid) % len(paths)]
        return self.fabric.host(dst).interfaces[choice.dst_interface].ip

    def _popen_in(self, host: str, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        assert self.lab is not None and self.lab.net is not None
        log = (self.dir / "logs" / f"{name}.log").open("wb")
        self.logs.append(log)
        proc = self.lab.net.get(host).popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append((name, proc))
        self.lab.track_pid(proc.pid)
        return proc

    def _popen_root(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = (self.dir / "logs" / f"{name}.log").open("wb")
        self.logs.append(log)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, proc))
        if self.lab is not None:
            self.lab.track_pid(proc.pid)
        return proc

    def _start_serving(self) -> None:
        from serving.config import (
            Address,
            DecodeConfig,
            EpWorkerConfig,
            GatewayConfig,
            PrefillConfig,
        )
        from serving.launch import decode_argv, ep_worker_argv, gateway_argv, prefill_argv

        assert self.lab is not None
        c = self.config
        bw = self.scale.bandwidth_scale(self.fabric)
        self.progress(
            f"starting {len(self.placement.role('prefill'))} prefill and "
            f"{len(self.placement.role('decode'))} decode engines ({c.model}), "
            f"{len(self.placement.ep_hosts)} EP workers"
        )
        for host in self.placement.ep_hosts:
            binds = tuple(Address(i.ip, EP_PORT) for i in self.fabric.host(host).interfaces)
            self._popen_in(host, f"ep-{host}", ep_worker_argv(EpWorkerConfig(bind=binds)))
        api: dict[str, str] = {}
        for e in self.placement.engines:
            h = self.fabric.host(e.host)
            mgmt = self.lab.management_ip(e.host)
            peers = tuple(Address(self._peer_address(e.host, p), EP_PORT) for p in e.ep_peers)
            common: dict[str, Any] = {
                "model": c.model,
                "host": mgmt,
                "bandwidth_scale": bw,
                "seed": c.seed,
                "engine_index": str(h.gid),
                "ep_peers": peers,
            }
            if self.policy.spray and peers:
                # An all-to-all exchange is sprayed like a KV pull: subflows per peer, stalled
                # ones retired and their part sent again.
                common.update(ep_subflows=SPRAY_STREAMS, ep_stall_timeout_s=SPRAY_STALL_S)
            if e.role == "prefill":
                cfg = PrefillConfig(
                    **common,
                    port=PREFILL_PORT,
                    kv_bind=tuple(Address(i.ip, KV_PORT) for i in h.interfaces),
                    engine_id=e.engine_id,
                    prefix_cache_hit_rate=c.prefix_cache_hit_rate,
                )
                self._popen_in(e.host, e.engine_id, prefill_argv(cfg))
                api[e.engine_id] = f"http://{mgmt}:{PREFILL_PORT}"
            else:
                sources = kv_source_map(self.fabric, h) if c.kv_paths == "disjoint" else ()
                spray = self.policy.spray
                cfg = DecodeConfig(
                    **common,
                    port=DECODE_PORT,
                    kv_streams=SPRAY_STREAMS if spray else c.kv_streams,
                    kv_source_map=sources,
                    kv_stall_timeout_s=SPRAY_STALL_S if spray else None,
                    **({"kv_chunk_bytes": SPRAY_CHUNK_BYTES} if spray else {}),
                    kv_log=str(self.dir / "logs" / f"kv-{e.engine_id}.jsonl"),
                )
                self._popen_in(e.host, e.engine_id, decode_argv(cfg))
                api[e.engine_id] = f"http://{mgmt}:{DECODE_PORT}"
        rail_groups = self.config.layout.layout == "rail-aligned"

        def url(e: Any) -> str:
            return api[e.engine_id] + (f"#group=rail{e.rail}" if rail_groups else "")

        self.gateway_port = free_port()
        gw = GatewayConfig(
            model=c.model,
            host="127.0.0.1",
            port=self.gateway_port,
            prefill_urls=tuple(url(e) for e in self.placement.role("prefill")),
            decode_urls=tuple(url(e) for e in self.placement.role("decode")),
        )
        self._popen_root("gateway", gateway_argv(gw))
        targets = [*api.values(), f"http://127.0.0.1:{self.gateway_port}"]
        self._wait_healthy(targets, timeout=90)

    def _wait_healthy(self, urls: list[str], timeout: float) -> None:
        failing = wait_http([u + "/health" for u in urls], timeout, alive=self._check_alive)
        if failing:
            raise LabError(f"not healthy after {timeout:.0f}s: {failing}")

    def _check_alive(self) -> None:
        """Raise LabError with the log tail of the first started process that has exited."""
        for name, proc in self.procs:
            if proc.poll() is not None:
                log = (self.dir / "logs" / f"{name}.log").read_text(errors="replace")
                raise LabError(f"{name} exited with {proc.returncode}:\n{log[-1500:]}")

    # -- monitoring ----------------------------------------------------------------------
    def _start_monitoring(self) -> None:
        assert self.lab is not None
        registry = CollectorRegistry()
        self.health = HealthSampler(interval_s=1.0, registry=registry)
        for name, proc in self.procs:
            self.health.register(name, proc.pid)
        if self.lab.controller is not None:
            self.health.register("controller", self.lab.controller.pid)
        self.health.start()
        self.health_port = free_port()
        self._health_http = start_http_server(self.health_port, "127.0.0.1", registry)
        if self.faults:
            self.injector = FaultInjector(
                self.fabric,
                self.faults,
                self.dir / "faults.jsonl",
                registry=registry,
                progress=self.progress,
            )
        self.loadgen_port = free_port()
        mgmt = {e.engine_id: self.lab.management_ip(e.host) for e in self.placement.engines}
        jobs = {
            "gateway": [f"127.0.0.1:{self.gateway_port}"],
            "prefill": [
                f"{mgmt[e.engine_id]}:{PREFILL_PORT}" for e in self.placement.role("prefill")
            ],
            "decode": [f"{mgmt[e.engine_id]}:{DECODE_PORT}" for e in self.placement.role("decode")],
            "controller": [f"127.0.0.1:{self.lab.options.metrics_port}"],
            "loadgen": [f"127.0.0.1:{self.loadgen_port}"],
            "emulator": [f"127.0.0.1:{self.health_port}"],
        }
        labels = {"run": self.dir.name, "fabric": self.fabric.kind}
        text = scrape_config(jobs, self.config.scrape_interval_s, labels)
        self.prometheus = self._new_prometheus(text)
        self.progress(f"starting Prometheus (scrape every {self.config.scrape_interval_s:g}s)")
        self.prometheus.start()
        if self.prometheus.pid is not None:
            self.lab.track_pid(self.prometheus.pid)  # removed by the next run if this one dies

    def _new_prometheus(self, config_text: str) -> PrometheusServer:
        """The run's Prometheus (on a free port; `up --serve` puts it on a fixed one)."""
        return PrometheusServer(config_text, self.dir / "prometheus")

    # -- load ----------------------------------------------------------------------------
    def _drive_load(self) -> tuple[float, float]:
        c = self.config
        run_time = c.duration_s + c.drain_s
        argv = [
            sys.executable, "-m", "locust",
            "-f", str(LOCUSTFILE),
            "--headless", "--host", f"http://127.0.0.1:{self.gateway_port}",
            "-u", "1", "-r", "1", "--run-time", f"{run_time:.0f}s",
            "--workload", c.workload, "--seed", str(c.seed), "--model", c.model,
            "--duration", f"{c.duration_s:g}",
            "--metrics-port", str(self.loadgen_port), "--metrics-linger", "3",
            "--requests-out", str(self.dir / "requests.jsonl"),
            "--summary-out", str(self.dir / "loadgen-summary.json"),
            "--csv", str(self.dir / "locust"), "--json-file", str(self.dir / "locust"),
            "--only-summary", "--loglevel", "WARNING",
        ]  # fmt: skip
        for flag, value in (
            ("--rate", c.rate),
            ("--arrival", c.arrival),
            ("--burstiness", c.burstiness),
            ("--length-scale", c.length_scale),
        ):
            if value is not None:
                argv += [flag, str(value)]
        self.progress(
            f"load: {c.workload} for {c.duration_s:g}s (seed {c.seed}), policy {self.policy.name}"
            + "".join(f"; {f.label} at {f.at_s:g}s" for f in self.faults)
        )
        t0 = time.time()
        proc = self._popen_root("locust", argv)
        if self.injector is not None:
            self.injector.start(t0)
        if self.health is not None:  # a saturated load generator would inflate TTFT
            self.health.register("locust", proc.pid)
        self._wait_loadgen(proc, run_time + 30)
        # One more scrape so the counters include the end of the run; queries run at t1.
        time.sleep(2 * c.scrape_interval_s + 0.5)
        t1 = time.time()
        if proc.returncode not in (0, 1):  # 1: Locust saw failed requests, still a result
            log = (self.dir / "logs" / "locust.log").read_text(errors="replace")
            raise LabError(f"load generator exited with {proc.returncode}:\n{log[-2000:]}")
        return t0, t1

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
                self.progress(
                    f"  {elapsed:5.0f}s / {self.config.duration_s:g}s  {done} requests finished"
                )
            time.sleep(0.5)

    # -- collection ----------------------------------------------------------------------
    def _collect(self, t0: float, t1: float) -> RunSummary:
        assert self.prometheus is not None and self.health is not None
        self.progress("collecting")
        window = max(t1 - t0, 1.0)
        prom = self.prometheus
        records = read_jsonl(self.dir / "requests.jsonl")
        server = server_figures(prom, t1, window)
        ports = port_counters(prom, t1, window)
        util = link_utilization(self.fabric, self.scale, ports.tx_bytes, window)
        verdict = self.health.verdict()
        (self.dir / "health.json").write_text(json.dumps(verdict.to_dict(), indent=2) + "\n")
        with contextlib.suppress(Exception):
            prom.snapshot()
        with contextlib.suppress(Exception):
            prom.export_series(EXPORTED_SERIES, t0, t1, 2.0, self.dir / "series.json")
        summary = RunSummary(
            run=self.dir.name,
            label=self.label,
            policy=self.policy.name,
            fabric=self.fabric.kind,
            fabric_params=dict(self.fabric.spec.params),
            workload=self.config.workload,
            model=self.config.model,
            seed=self.config.seed,
            window_s=window,
            client=client_summary(records, window_s=self.config.duration_s),
            loadgen=_read_json(self.dir / "loadgen-summary.json"),
            server=server,
            fabric_stats=fabric_stats(
                self.fabric, util, ports.rx_bytes, ports.drops, server.reported_bytes
            ),
            port_util={f"{k[0]}:{k[1]}": v for k, v in sorted(util.items())},
            throughput_series=tuple(throughput_series(records)),
            faults=self._fault_report(records, t1),
            health=verdict,
            trustworthy=verdict.trustworthy,
        )
        summary.write(self.dir)
        return summary

    def _fault_report(self, records: list[dict[str, Any]], t1: float) -> FaultReport:
        """The fault report from the injector's events and every decode engine's KV log."""
        kv_attempts = [
            row for p in sorted((self.dir / "logs").glob("kv-*.jsonl")) for row in read_jsonl(p)
        ]
        events = read_jsonl(self.dir / "faults.jsonl")
        injected = [InjectedFault.from_dict(f.to_dict()) for f in self.faults]
        return analyze(events, records, kv_attempts, end_wall=t1, injected=injected)

    # -- teardown ------------------------------------------------------------------------
    def _teardown(self) -> None:
        # A second Ctrl-C must not cut teardown short: that is what leaves labs behind.
        with signals_ignored():
            try:
                if self.injector is not None:
                    self.injector.stop()  # links back up before anything else stops
                self._stop_processes()
            finally:
                if self.lab is not None:
                    self.lab.stop()

    def _stop_processes(self) -> None:
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
