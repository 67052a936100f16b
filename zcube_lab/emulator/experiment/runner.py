"""One experiment run: a fabric, a serving cluster on its GPU hosts, a real Prometheus, Locust
load, then collection and teardown. Needs root.

What runs where is the pure `RunPlan` (`zcube_lab.emulator.experiment.plan`); `Launcher`
(`zcube_lab.emulator.experiment.launcher`) holds the processes: the lab with a management network
(on one machine, or several: `RunConfig.machines`), the EP workers, prefill and decode engines
inside their Mininet hosts (API and metrics on the management address, KV and all-to-all on
the fabric addresses), the gateway in the root namespace, the health sampler and Prometheus.
`Experiment.run` adds Locust headless for the run (one process, or a master and a worker per
machine), then queries, a TSDB snapshot and `summary.json`. Around the load it reads the
fidelity evidence: each engine's step overruns and lateness and the gateway's loop lag from
their /metrics before and after, and the network sampler (`zcube_lab.emulator.lab.netsampler`:
hosts' TCP counters, shaped queues) from just before Locust starts until it exits, with a health
agent on every other machine (`zcube_lab.emulator.experiment.clusterrun`); at collection, the KV
pulls against their ideal with their links' load, and the load generator's send lag. CPU is judged
over the load window (Locust's start to its exit); `health.json` holds the verdict on CPU and
network and the limits it was judged by (`limits`).

Results go to `<results_root>/<YYYYmmdd-HHMMSS>-<fabric>-<workload>/`:
`config.json`, `structure.txt` (the fabric beside its full size for this run's pairs:
`zcube_lab.emulator.results.structure.structuresection`), `locust_*.csv`, `locust.json`,
`requests.jsonl`, `series.json`, `prometheus/` (config, TSDB and its snapshot), `health.json`,
`health-samples.jsonl` (every CPU sample, one a line, written as taken: the run keeps none in
memory), `logs/` (every process, the controller, and one `kv-<engine>.jsonl` per decode engine:
every KV pull attempt),
`faults.jsonl` (injected failures, when `--fail` is given), `summary.json`.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from zcube_lab.core.clock import Clock
from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.cluster.remote import Machine
from zcube_lab.emulator.experiment.clusterrun import (
    finish_agents,
    gather_load,
    merge_verdicts,
    start_distributed_load,
    verdicts_json,
)
from zcube_lab.emulator.experiment.launcher import Launcher, RunResult
from zcube_lab.emulator.experiment.plan import (
    RunConfig,
    plan_run,
)
from zcube_lab.emulator.lab.health import HealthSampler
from zcube_lab.emulator.lab.lossless import AgentReport
from zcube_lab.emulator.lab.netsampler import buckets_of, metrics_texts
from zcube_lab.emulator.lab.system import LabError
from zcube_lab.emulator.prometheus.queries import EXPORTED_SERIES, port_counters, server_figures
from zcube_lab.emulator.prometheus.server import PrometheusServer
from zcube_lab.emulator.results.fabric.linkstats import (
    link_loads,
    link_utilization,
    port_capacity_bps,
    verdict_busiest_link,
)
from zcube_lab.emulator.results.fabric.transfers import (
    KV_LOG_PREFIX,
    engine_rates,
    kv_path_busy,
    kv_ratio_p50,
    kv_seen_busy,
    pull_links,
    read_logs,
    transfer_figures,
)
from zcube_lab.emulator.results.ietf.bmwg import with_kpis
from zcube_lab.emulator.results.lossless.victimlogs import run_victims
from zcube_lab.emulator.results.run.dilation import undilate
from zcube_lab.emulator.results.run.fault_report import analyze
from zcube_lab.emulator.results.run.figures import (
    client_summary,
    fabric_stats,
    read_jsonl,
    throughput_series,
)
from zcube_lab.emulator.results.run.summary import (
    FaultReport,
    InjectedFault,
    LosslessFigures,
    PortPauses,
    RunSummary,
)
from zcube_lab.emulator.verdict.judge import HealthVerdict
from zcube_lab.emulator.verdict.limits import Limits
from zcube_lab.emulator.verdict.network import (
    GATEWAY,
    LOADGEN,
    FaultWindow,
    KvPulls,
    LosslessEvidence,
    NetworkEvidence,
    loop_lag,
    send_lag,
    step_overruns,
)
from zcube_lab.serving.vllm_metrics import GATEWAY_LOOP_LAG, STEP_LATENESS, STEP_OVERRUN


class Experiment:
    """One run. `run()` returns the results; it always tears everything down."""

    def __init__(self, config: RunConfig, progress: Callable[[str], None] | None = None) -> None:
        self.config = config
        self.progress = progress or (lambda _m: None)
        self.plan = plan_run(config)  # checks fabric, placement, policy and faults at once
        self.launcher = Launcher(self.plan, self.progress)
        self.dir = self.launcher.dir
        self.limits = Limits()
        self._load_start = 0.0  # time.monotonic() when the load started (the samplers' clock)
        self._load_end = 0.0  # ... and when the load generator exited
        self._metrics_before: dict[str, str] = {}  # /metrics of each engine and the gateway
        self._evidence: NetworkEvidence | None = None
        self._remote_verdicts: list[tuple[Machine, HealthVerdict]] = []
        # The lossless agent's report at the load's end, in modelled seconds (`lossless_figures`)
        self._lossless: LosslessFigures | None = None
        # EP and KV bytes into each switch port's queue at the load's end (`--lossless` only)
        self._class_bytes: dict[str, dict[str, int]] | None = None

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
        self._metrics_before = metrics_texts(self._metrics_urls())
        launcher.start_net_sampling(self.limits.rates)
        t0 = time.time()
        self._load_start = time.monotonic()
        if c.machines:  # a master here, a worker on every machine
            proc = start_distributed_load(launcher, self.dir)
        else:
            proc = launcher.popen_root("locust", argv)
        if launcher.injector is not None:
            launcher.injector.start(t0)
        if launcher.health is not None:  # a saturated load generator would inflate TTFT
            launcher.health.register("locust", proc.pid)
        self._wait_loadgen(proc, c.wall_s + 30)
        self._load_end = time.monotonic()
        if c.machines:
            gather_load(launcher, self.dir)
        self._evidence = self._network_evidence()
        # One more scrape so the counters include the end of the run; queries run at t1.
        time.sleep(2 * self.plan.clock.wall(c.scrape_interval_s) + 0.5)
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
        if self.launcher.agents:  # the other machines' own verdicts
            self._remote_verdicts = finish_agents(self.launcher.agents)
        after = metrics_texts(self._metrics_urls())
        before, limits = self._metrics_before, self.limits
        engines = list(self.launcher.engine_metrics_urls())
        overruns = step_overruns(
            buckets_of({n: before[n] for n in engines if n in before}, STEP_OVERRUN),
            buckets_of({n: after[n] for n in engines if n in after}, STEP_OVERRUN),
            limits.overrun_s,
            expected=engines,
            lateness=(buckets_of(before, STEP_LATENESS), buckets_of(after, STEP_LATENESS)),
            late_share=limits.late_share,
        )
        if sampler.failures:
            self.progress(f"network sampling: {sampler.failures} reads failed")
        origin = self._load_start
        faults = [
            FaultWindow(f.label, origin + f.at_s, None if f.end_s is None else origin + f.end_s)
            for f in self.plan.faults
        ]
        evidence = sampler.evidence(overruns, faults, limits.rates)
        missing, loops = dict(evidence.missing), {}
        if GATEWAY in before and GATEWAY in after:
            lag = (buckets_of(before, GATEWAY_LOOP_LAG), buckets_of(after, GATEWAY_LOOP_LAG))
            loops[GATEWAY] = loop_lag(lag[0][GATEWAY], lag[1][GATEWAY], limits.loop_lag_s)
        else:
            missing[GATEWAY] = "its metrics did not answer, so its loop lag is unchecked"
        lossless = None
        lab = self.launcher.lab
        if lab is not None and self.config.lossless:
            alive = lab.lossless_alive()
            report = lab.lossless_report(fresh=True)
            self._class_bytes = lab.class_counters() or None
            if report is None:
                missing["lossless agent"] = "it wrote no report, so its pauses are unchecked"
            else:
                self._lossless = lossless_figures(report, self.plan.clock)
                lossless = LosslessEvidence(
                    reactions=report.reactions,
                    reaction_p99_s=self._lossless.reaction_p99_s,  # modelled, as the limit
                    errors=report.errors,
                    alive=alive,
                    paused_ports=frozenset(report.ports),
                    last_error=report.last_error,
                )
        return replace(
            evidence,
            lossless=lossless,
            datapath_drops=self.launcher.datapath_drops(),
            switch_ports=frozenset(self.plan.fabric.switch_interfaces()),
            loops=loops,
            missing=missing,
        )

    def _metrics_urls(self) -> dict[str, str]:
        """Each engine's /metrics, and the gateway's (its loop lag)."""
        gateway = f"http://{self.plan.gateway_host}:{self.launcher.gateway_port}/metrics"
        return {**self.launcher.engine_metrics_urls(), GATEWAY: gateway}

    def _load_evidence(self, records: list[dict[str, Any]], kv: KvPulls) -> NetworkEvidence | None:
        """The network evidence with the KV pulls (marked off when the run's config turned KV
        transfer off, so the verdict does not judge them) and the load generator's send lag."""
        if self._evidence is None:
            return None
        lags = [float(r["lag_s"]) for r in records if r.get("outcome") != "overload"]
        loops, missing = dict(self._evidence.loops), dict(self._evidence.missing)
        if lags:
            loops[LOADGEN] = send_lag(lags, self.limits.send_lag_s)
        else:
            missing[LOADGEN] = "no request was recorded, so its send lag is unchecked"
        kv = replace(kv, kv_off=self.config.kv_off)
        return replace(self._evidence, kv=kv, loops=loops, missing=missing)

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
                done = sum(_count_lines(p) for p in self.dir.glob("requests*.jsonl"))
                wall = self.plan.clock.wall(self.config.duration_s)
                self.progress(f"  {elapsed:5.0f}s / {wall:g}s  {done} requests finished")
            time.sleep(0.5)

    # -- collection ----------------------------------------------------------------------
    def _record_transfers(self) -> None:
        """Write the run's recording (`transfers.jsonl`, for `zcube-lab replay`); a run whose
        engines logged no transfer has none, and says so."""
        from zcube_lab.core.replay.recording import RECORDING
        from zcube_lab.emulator.replay.record import record_run

        try:
            record_run(self.dir).write(self.dir / RECORDING)
        except ConfigError as e:
            self.progress(f"  no recording of transfers: {e}")

    def _collect(self, t0: float, t1: float) -> RunSummary:
        assert self.prometheus is not None and self.health is not None
        self.progress("collecting")
        window = max(t1 - t0, 1.0)
        prom = self.prometheus
        records = read_jsonl(self.dir / "requests.jsonl")
        hosts = {e.engine_id: e.host for e in self.plan.placement.engines}
        transfers = transfer_figures(self.dir / "logs", self.plan.fabric, self.plan.scale, hosts)
        self._record_transfers()
        server = server_figures(prom, t1, window, transfers)
        ports = port_counters(prom, t1, window)
        util = link_utilization(self.plan.fabric, self.plan.scale, ports.tx_bytes, window)
        links = link_loads(self.plan.fabric, self.plan.scale, ports, window)
        received = link_utilization(self.plan.fabric, self.plan.scale, ports.rx_bytes, window)
        kv_hosts = {e.host for e in self.plan.placement.engines if e.role in ("prefill", "decode")}
        busy = kv_path_busy(self.plan.fabric, util, received, kv_hosts)
        rates = engine_rates(self.plan.fabric, self.plan.scale, hosts)
        pulls = read_logs(self.dir / "logs", KV_LOG_PREFIX)
        rated, ratio = kv_ratio_p50(pulls, rates, self.limits.kv_fixed_s)
        seen = kv_seen_busy(  # widened by a scrape interval each side: see its docstring
            pulls,
            pull_links(self.plan.fabric, hosts),
            ports.samples,
            port_capacity_bps(self.plan.fabric, self.plan.scale),
            margin_s=ports.peak_window_s or 0.0,
        )
        kv = KvPulls(rated, ratio, busy, self.limits.kv_fixed_s, seen_busy=seen)
        verdict = replace(  # the verdict names the summary's busiest link
            self.health.verdict(
                self.limits,
                self._load_evidence(records, kv),
                window=(self._load_start, self._load_end),
            ),
            busiest_link=verdict_busiest_link(self.plan.fabric, self.plan.scale, links),
        )
        health = {**verdict.to_dict(), "limits": self.limits.to_dict()}
        if self.config.machines:
            verdict = merge_verdicts(verdict, self._remote_verdicts)
            health = {
                **verdict.to_dict(),
                "limits": self.limits.to_dict(),
                "machines": verdicts_json(self._remote_verdicts),
            }
        (self.dir / "health.json").write_text(json.dumps(health, indent=2) + "\n")
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
            lossless=self._lossless,
            class_bytes=self._class_bytes,
            dir=self.dir,
        )
        summary = undilate(summary, self.plan.clock)  # modelled seconds (docs/DOMAIN.md §4)
        summary = with_kpis(summary, records, self.config.duration_s, self.plan.placement)
        if self.config.lossless:  # EP and KV behind pauses, when the agent recorded episodes
            victims = run_victims(self.dir, self.plan.fabric, self.plan.placement, self.plan.clock)
            summary = replace(summary, victims=victims)
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


def lossless_figures(report: AgentReport, clock: Clock | None = None) -> LosslessFigures:
    """The summary's lossless section from the agent's report, every time in modelled seconds
    (the agent's wall seconds through the run's `clock`), as every time a run reports; its CPU
    in cores of wall time."""
    clock = clock or Clock()

    def modelled(wall: float | None) -> float | None:
        return None if wall is None else clock.modelled(wall)

    return LosslessFigures(
        ports={
            port: PortPauses(int(p["pauses"]), clock.modelled(float(p["paused_s"])))
            for port, p in sorted(report.ports.items())
        },
        reactions=report.reactions,
        reaction_p50_s=modelled(report.reaction_p50_s),
        reaction_p99_s=modelled(report.reaction_p99_s),
        reaction_max_s=modelled(report.reaction_max_s),
        poll_p99_s=modelled(report.poll_p99_s),
        agent_cores=round(report.cores, 4),
        errors=report.errors,
    )


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
