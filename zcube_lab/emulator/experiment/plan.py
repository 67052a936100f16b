"""The serving plan of a run, as plain data (pure): which role runs on which GPU host with which
command line, where its API answers, what Prometheus scrapes, and how Locust is started.

`plan_run(config)` builds the fabric, places the engines and parses the faults; the `RunPlan`
it returns answers, given the ports the caller chose (`Ports`: free ones in a run, the adapter
picks them), with `RoleLaunch`es, a validated `ScrapePlan` and Locust's argv. Nothing here
starts a process, opens a socket or reads the clock, so the unit tests check it without root;
`zcube_lab.emulator.experiment.runner` realizes it in a Mininet lab.

Naming: a launch is named after what it runs (`ep-<host>`, the engine id `prefill-<gid>` /
`decode-<gid>`, `gateway`; the runner starts Locust as `locust`); that name is its log file
(`logs/<name>.log`) and its entry in the health sampler. Engines listen on their host's
management address (API and metrics never cross the fabric under test); KV and all-to-all use
the fabric addresses.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zcube_lab.core.clock import Clock
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.addressing import MGMT_ROOT_IP, management_address
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.clusterplan import mgmt_root_address
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.evpaths import mrc_delay_bound_s, mrc_leg_mbps
from zcube_lab.core.fabric.hostplan import kv_source_map
from zcube_lab.core.fabric.placement import Engine, Placement, place
from zcube_lab.core.fabric.queues import port_queue_limits
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.core.fault_schedule import Fault, parse_faults
from zcube_lab.core.policies import (
    SPRAY_CHUNK_BYTES,
    SPRAY_STALL_S,
    SPRAY_STREAMS,
    RunPolicy,
    get_policy,
)
from zcube_lab.emulator.experiment.runconfig import RunConfig
from zcube_lab.emulator.prometheus.config import ScrapePlan, scrape_plan
from zcube_lab.serving.config import (
    Address,
    DecodeConfig,
    EpWorkerConfig,
    GatewayConfig,
    PrefillConfig,
)
from zcube_lab.serving.launch import decode_argv, ep_worker_argv, gateway_argv, prefill_argv
from zcube_lab.workloads import LOCUSTFILE
from zcube_lab.workloads.loadconfig import LoadConfig, load_argv
from zcube_lab.workloads.shards import WORKERS_ENV, parse_shard, shard_files, shard_label

# Fixed ports inside the GPU hosts' namespaces (each host has its own, so they never clash).
PREFILL_PORT, DECODE_PORT, KV_PORT, EP_PORT = 8100, 8200, 7100, 7300
# Gateway, controller, load generator and health gauges share the root namespace: `Ports`.
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Ports:
    """The root-namespace ports the adapter chose: the gateway's API, the controller's metrics,
    the load generator's metrics and the health sampler's gauges."""

    gateway: int
    controller: int
    loadgen: int
    emulator: int


@dataclass(frozen=True)
class RoleLaunch:
    """One serving process: its name, the GPU host whose namespace runs it (None: the root
    namespace), its argv, and the URL that answers 2xx once it serves ("" : none to wait for)."""

    name: str
    host: str | None
    argv: tuple[str, ...]
    health_url: str = ""


@dataclass(frozen=True)
class LocustWeb:
    """Locust's web UI on `host:port` instead of a timed headless run (the live lab)."""

    host: str
    port: int


@dataclass(frozen=True)
class RunPlan:
    """A run's fabric, engine placement, policy and faults; the rest of the plan derives."""

    config: RunConfig
    fabric: Fabric
    placement: Placement
    policy: RunPolicy
    faults: tuple[Fault, ...]

    @property
    def scale(self) -> Scale:
        return Scale(nic_mbps=self.config.nic_mbps, dilation=self.config.dilation)

    @property
    def clock(self) -> Clock:
        """Modelled and wall seconds of this run (its time dilation)."""
        return self.config.clock

    @property
    def fabric_name(self) -> str:
        """The fabric's kind, or for a fabric file `file-<its name>` (two files in one
        comparison are two variants)."""
        if self.fabric.kind == "file":
            return f"file-{Path(str(dict(self.fabric.spec.params)['path'])).stem}"
        return self.fabric.kind

    @property
    def label(self) -> str:
        """How reports name the run's variant: `zcube`, `roft-2planes`, `zcube/ff`,
        `file-hpn-pod`."""
        label = self.fabric_name
        planes = dict(self.fabric.spec.params).get("planes", 1)
        if planes != 1:
            label += f"-{planes}planes"
        if self.policy.name != "ecmp" or self.faults:
            label += f"/{self.policy.name}"
        return label

    def run_name(self, stamp: str) -> str:
        """The results folder's name for a run started at `stamp` (`YYYYmmdd-HHMMSS`)."""
        name = f"{stamp}-{self.fabric_name}-{Path(self.config.workload).stem}"
        return f"{name}-{self.config.tag}" if self.config.tag else name

    def management_ip(self, host: str) -> str:
        """Where a host's engine API and metrics answer (the management network)."""
        return management_address(self.fabric.host(host).gid)

    def role_launches(self, gateway_port: int, log_dir: Path) -> tuple[RoleLaunch, ...]:
        """Every serving process in start order: EP workers, the engines in placement order,
        then the gateway (in the root namespace on `gateway_port`)."""
        launches = [
            RoleLaunch(f"ep-{host}", host, tuple(ep_worker_argv(self._ep_config(host))))
            for host in self.placement.ep_hosts
        ]
        launches += [self._engine_launch(e, log_dir) for e in self.placement.engines]
        launches.append(self._gateway_launch(gateway_port, log_dir))
        return tuple(launches)

    def scrape(self, ports: Ports, run: str) -> ScrapePlan:
        """Prometheus' plan: one job per component, labelled with the run and the fabric."""

        def engines(role: str, port: int) -> list[str]:
            return [f"{self.management_ip(e.host)}:{port}" for e in self.placement.role(role)]

        jobs = {
            "gateway": [f"{self.gateway_host}:{ports.gateway}"],
            "prefill": engines("prefill", PREFILL_PORT),
            "decode": engines("decode", DECODE_PORT),
            "controller": [f"{LOOPBACK}:{ports.controller}"],
            "loadgen": self.loadgen_targets(ports.loadgen),
            "emulator": [f"{LOOPBACK}:{ports.emulator}"],
        }
        labels = {"run": run, "fabric": self.fabric.kind}
        # Every modelled second (docs/DOMAIN.md §4): so a peak's window is the same at every k.
        return scrape_plan(jobs, self.config.scrape_interval_s, labels, clock=self.clock)

    def locust_argv(
        self,
        gateway_port: int,
        loadgen_port: int,
        *,
        out_dir: Path | None = None,
        web: LocustWeb | None = None,
        python: str = sys.executable,
    ) -> list[str]:
        """Locust driving the gateway: headless for `duration + drain` seconds (x the dilation:
        `--duration` stays the modelled plan length, `--dilation` stretches it), writing its
        records, summary, CSV and JSON into `out_dir`; or, with `web`, its web UI, started at
        once and kept running after the planned arrivals."""
        if web is None and out_dir is None:
            raise ValueError("a headless Locust run needs out_dir for its results")
        c = self.config
        argv = [python, "-m", "locust", "-f", str(LOCUSTFILE)]
        gateway = f"http://{LOOPBACK}:{gateway_port}"
        if web is None:
            run_time = c.wall_s
            argv += ["--headless", "--host", gateway]
            argv += ["-u", "1", "-r", "1", "--run-time", f"{run_time:.0f}s"]
        else:
            argv += ["--host", gateway, "--web-host", web.host, "--web-port", str(web.port)]
            argv += ["--autostart", "-u", "1", "-r", "1"]
        argv += self._plan_flags()
        if web is not None:
            argv.append("--keep-running")
        argv += ["--metrics-port", str(loadgen_port)]
        if out_dir is not None and web is None:
            argv += [
                "--metrics-linger", "3",
                "--requests-out", str(out_dir / "requests.jsonl"),
                "--summary-out", str(out_dir / "loadgen-summary.json"),
                "--csv", str(out_dir / "locust"), "--json-file", str(out_dir / "locust"),
                "--only-summary",
            ]  # fmt: skip
        argv += ["--loglevel", "WARNING"]
        return argv

    def locust_master_argv(
        self,
        workers: int,
        *,
        bind_host: str,
        bind_port: int,
        out_dir: Path,
        python: str = sys.executable,
    ) -> list[str]:
        """The Locust master of `workers` workers (`locust_worker_argv`), headless for the run's
        wall time: it waits for them all (60 s at most), gives each one `OpenLoopUser` (their
        number reaches the locustfile as `ZCUBE_LOCUST_WORKERS`, set through env(1) so the argv
        runs as it is, here or over ssh), aggregates their stats and writes Locust's CSV and
        JSON into `out_dir`. It draws no plan; the workers do."""
        if workers < 1:
            raise ConfigError("workers", workers, "at least one Locust worker")
        w = str(workers)
        argv = ["env", f"{WORKERS_ENV}={w}", python, "-m", "locust", "-f", str(LOCUSTFILE)]
        argv += ["--master", "--master-bind-host", bind_host, "--master-bind-port", str(bind_port)]
        argv += ["--headless", "--expect-workers", w, "--expect-workers-max-wait", "60"]
        argv += ["-u", w, "-r", w, "--run-time", f"{self.config.wall_s:.0f}s"]
        argv += ["--csv", str(out_dir / "locust"), "--json-file", str(out_dir / "locust")]
        argv += ["--only-summary", "--loglevel", "WARNING"]
        return argv

    def locust_worker_argv(
        self,
        shard: tuple[int, int],
        *,
        master_host: str,
        master_port: int,
        gateway_url: str,
        metrics_addr: str,
        metrics_port: int,
        out_dir: Path,
        python: str = sys.executable,
    ) -> list[str]:
        """Locust worker K of W (`shard` = (K, W)) of the master at `master_host:master_port`:
        it draws the run's whole plan from its own command line (a master's values of our
        options are not used) and sends the requests with index % W == K to `gateway_url`,
        exports its client metrics on `metrics_addr:metrics_port`, and writes
        `requests-K.jsonl` and `loadgen-summary-K.json` into `out_dir`
        (`zcube_lab.workloads.shards.merge_shard_files` merges them)."""
        label = shard_label(shard)
        parse_shard(label)  # 0 <= K < W, or a ConfigError naming plan_shard
        requests, summary = shard_files(out_dir, shard[0])
        argv = [python, "-m", "locust", "-f", str(LOCUSTFILE), "--worker"]
        argv += ["--master-host", master_host, "--master-port", str(master_port)]
        argv += ["--host", gateway_url, *self._plan_flags(), "--plan-shard", label]
        argv += ["--metrics-addr", metrics_addr, "--metrics-port", str(metrics_port)]
        argv += ["--metrics-linger", "3", "--requests-out", str(requests)]
        argv += ["--summary-out", str(summary), "--loglevel", "WARNING"]
        return argv

    def _plan_flags(self) -> list[str]:
        """The options that define the plan's requests, window and dilation (every load
        generator's), from its `LoadConfig`."""
        return load_argv(self.load_config())

    def load_config(self, **outputs: object) -> LoadConfig:
        """The load generator's options of this run: its requests, window and dilation (the
        options it leaves unset are the profile's), plus `outputs` (files, metrics)."""
        c = self.config
        return LoadConfig(
            workload=c.workload, seed=c.seed, model=c.model, duration=c.duration_s,
            rate=c.rate, arrival=c.arrival, burstiness=c.burstiness,
            length_scale=c.length_scale, dilation=c.dilation,
            **outputs,  # type: ignore[arg-type]
        )  # fmt: skip

    # -- the parts of role_launches --------------------------------------------------------
    def _ep_config(self, host: str) -> EpWorkerConfig:
        return EpWorkerConfig(
            bind=tuple(Address(i.ip, EP_PORT) for i in self.fabric.host(host).interfaces)
        )

    def _engine_launch(self, e: Engine, log_dir: Path) -> RoleLaunch:
        c = self.config
        h = self.fabric.host(e.host)
        mgmt = self.management_ip(e.host)
        peers = tuple(
            tuple(Address(ip, EP_PORT) for ip in peer_addresses(self.fabric, e.host, p))
            for p in e.ep_peers
        )
        common: dict[str, Any] = {
            "model": c.model,
            "host": mgmt,
            "bandwidth_scale": self.scale.bandwidth_scale(self.fabric),
            "seed": c.seed,
            "engine_index": str(h.gid),
            "ep_peers": peers,
            # each path of an EP peer leaves its own port, as KV lanes do
            # (zcube_lab.serving.alltoall)
            "ep_source_map": kv_source_map(self.fabric, h),
            # one JSON line per all-to-all exchange (zcube_lab.serving.alltoall)
            "ep_log": str(log_dir / f"ep-{e.engine_id}.jsonl") if peers else "",
            "dilation": c.dilation,
            **(c.ep_options() if peers else {}),
        }
        spray = self.policy.spray
        mrc = c.kv_transport == "mrc"
        if spray and peers:
            # An all-to-all exchange is sprayed like a KV pull: subflows per peer, stalled ones
            # retired and their part sent again.
            common.update(ep_subflows=SPRAY_STREAMS, ep_stall_timeout_s=SPRAY_STALL_S)
        if e.role == "prefill":
            prefill = PrefillConfig(
                **common,
                port=PREFILL_PORT,
                kv_bind=self._kv_addresses(e.host),
                engine_id=e.engine_id,
                prefix_cache_hit_rate=c.prefix_cache_hit_rate,
                **({"kv_share": 0.0} if c.kv_off else {}),
                **(
                    {"kv_transport": "mrc", "kv_mrc_mtu": c.link_mtu(self.fabric, self.scale)}
                    if mrc
                    else {}
                ),
            )
            url = f"http://{mgmt}:{PREFILL_PORT}"
            return RoleLaunch(e.engine_id, e.host, tuple(prefill_argv(prefill)), f"{url}/health")
        decode = DecodeConfig(
            **common,
            port=DECODE_PORT,
            kv_streams=SPRAY_STREAMS if spray else c.kv_streams,
            kv_warm=c.kv_warm,
            # The same addresses prefill advertises, known at start so the warm-up can use them.
            prefill_kv=self._prefill_kv() if c.kv_warm else (),
            kv_source_map=kv_source_map(self.fabric, h) if c.kv_paths == "disjoint" else (),
            kv_stall_timeout_s=SPRAY_STALL_S if spray else None,
            **({"kv_chunk_bytes": SPRAY_CHUNK_BYTES} if spray else {}),
            kv_log=str(log_dir / f"kv-{e.engine_id}.jsonl"),
            **(
                {
                    "kv_transport": "mrc",
                    "kv_mrc_rate_mbps": round(mrc_leg_mbps(self.fabric, self.scale, [e.host]), 3),
                    "kv_mrc_delay_bound_ms": self._mrc_delay_bound_ms(e.host),
                }
                if mrc
                else {}
            ),
        )
        url = f"http://{mgmt}:{DECODE_PORT}"
        return RoleLaunch(e.engine_id, e.host, tuple(decode_argv(decode)), f"{url}/health")

    def _mrc_delay_bound_ms(self, host: str) -> float:
        """The mrc sender's delay bound into decode host `host`, modelled ms: under the
        lossless model the full paused queues of its paths (a pause is not a loss); lossy, 0
        (the retransmission timeout alone, which finds a cut path sooner)."""
        c = self.config
        if not c.lossless:
            return 0.0
        mtu = c.link_mtu(self.fabric, self.scale)
        queues = port_queue_limits(self.fabric, self.scale, mtu, c.queue_model())
        bound = mrc_delay_bound_s(self.fabric, self.scale, mtu, queues, host, lossless=True)
        return round(bound * 1000, 3)

    def _kv_addresses(self, host: str) -> tuple[Address, ...]:
        """A prefill host's KV addresses, one per NIC port: its `kv_bind`, as it advertises."""
        return tuple(Address(i.ip, KV_PORT) for i in self.fabric.host(host).interfaces)

    def _prefill_kv(self) -> tuple[tuple[str, tuple[Address, ...]], ...]:
        """Every prefill engine's KV addresses (decode's `prefill_kv`)."""
        return tuple(
            (p.engine_id, self._kv_addresses(p.host)) for p in self.placement.role("prefill")
        )

    def _gateway_launch(self, gateway_port: int, log_dir: Path) -> RoleLaunch:
        rail_groups = self.config.layout.layout == "rail-aligned"

        def url(e: Engine) -> str:
            port = PREFILL_PORT if e.role == "prefill" else DECODE_PORT
            api = f"http://{self.management_ip(e.host)}:{port}"
            # Rail-aligned: the gateway pairs a prefill with a decode of the same group.
            return api + (f"#group=rail{e.rail}" if rail_groups else "")

        gateway = GatewayConfig(
            model=self.config.model,
            host=self.gateway_host,
            port=gateway_port,
            prefill_urls=tuple(url(e) for e in self.placement.role("prefill")),
            decode_urls=tuple(url(e) for e in self.placement.role("decode")),
            # one JSON line per request with its exact timings (zcube_lab.serving.requestlog)
            request_log=str(log_dir / "requests-gateway.jsonl"),
            decode_hotspot=self.config.decode_hotspot,
            hotspot_period_s=self.config.hotspot_period_s,
            dilation=self.config.dilation,
        )
        health = f"http://{self.gateway_host}:{gateway_port}/health"
        return RoleLaunch("gateway", None, tuple(gateway_argv(gateway)), health)

    @property
    def gateway_host(self) -> str:
        """Where the gateway listens: loopback, or on several machines the management address
        of machine 0, which the Locust workers on every machine reach."""
        return MGMT_ROOT_IP if self.config.machines else LOOPBACK

    def loadgen_targets(self, port: int) -> list[str]:
        """The load generator's metrics: one process on loopback, or a Locust worker on each
        machine at that machine's management address."""
        if not self.config.machines:
            return [f"{LOOPBACK}:{port}"]
        return [f"{mgmt_root_address(k)}:{port}" for k in range(len(self.config.machines))]


def plan_run(config: RunConfig) -> RunPlan:
    """The run's plan: its fabric built, engines placed, policy and faults checked (a
    ConfigError names what is wrong before anything starts)."""
    fabric = build_fabric(config.fabric)
    placement = place(fabric, config.layout)
    decodes = len(placement.role("decode"))
    if config.decode_hotspot > decodes:
        raise ConfigError(
            "decode_hotspot", config.decode_hotspot, f"0 (off) to {decodes}, the decode engines"
        )
    return RunPlan(
        config=config,
        fabric=fabric,
        placement=placement,
        policy=get_policy(config.policy),
        faults=tuple(
            parse_faults(
                config.faults,
                fabric,
                config.duration_s,
                config.seed,
                [e.engine_id for e in placement.engines],
            )
        ),
    )


def peer_addresses(fabric: Fabric, src: str, dst: str) -> tuple[str, ...]:
    """The fabric addresses of `dst` for `src`'s all-to-all, one per NIC port of `dst`: first
    the one `src` reaches on a shortest path (ZCube: of the two 2-hop options, alternate by host
    pair; what `--ep-ports one` uses), then the others. With the KV source map each is a path
    of its own (ZCube's two link-disjoint paths, a multi-plane ROFT's planes); a one-port host
    has one."""
    paths = fabric.shortest_paths(src, dst)
    choice = paths[(fabric.host(src).gid + fabric.host(dst).gid) % len(paths)]
    ports = fabric.host(dst).interfaces
    first = ports[choice.dst_interface].ip
    return (first, *(i.ip for i in ports if i.ip != first))
