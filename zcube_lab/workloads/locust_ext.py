"""The Locust extension: options, the run's state, and how results reach Locust and Prometheus.

`add_arguments(parser)` adds our options (`zcube_lab.workloads.loadconfig.LoadConfig`, each also
settable through a `ZCUBE_*` environment variable) to Locust's parser; `register(environment)` hooks
the run into Locust's events:

- `init`: load the profile, draw the plan (bad options fail here, before any user spawns) and
  start the Prometheus exporter on `--metrics-port` with its own registry;
- a user (`OpenLoopUser` in `zcube_lab/workloads/locustfile.py`) calls `WorkloadRun.drive()`, which
  replays the plan open-loop (`zcube_lab.workloads.openloop`);
- every finished request fires Locust's standard `request` event three ways, so the stats,
  CSV and JSON output carry them unchanged: type `POST` with the E2E latency (failures here),
  type `TTFT` and type `TPOT`, all named after the endpoint (`completion-stream`,
  `chat-stream`); it is also observed in the `zcube_client_*` metrics and written as one JSONL
  row to `--requests-out`;
- `test_stop`: abandon what is still in flight (`cancelled`), flush files, write the summary;
- `quitting`: keep the exporter up for `--metrics-linger` seconds so a last scrape sees the end.

With `--plan-shard K/W` (Locust's distributed mode, `zcube_lab.workloads.shards`) the plan is drawn
whole and only the requests with index % W == K are sent, at their planned times; records and
summary are the shard's (the summary says `shard: "K/W"`). The options are read into a `LoadConfig`
at `init`: a Locust master sends its own values of our options to every worker when it spawns
users, and a worker keeps its own command line (its shard, output files, seed) instead.

With `--dilation K` (docs/DOMAIN.md §4) the plan is drawn as without it (same seed, same
requests, `--duration` modelled seconds), sent K times slower (every gap x K, the per-request
timeout x K), and everything reported is in modelled seconds again: records, Locust's stats,
the `zcube_client_*` metrics and the summary (rates over the modelled duration). Every crossing
goes through the run's `Clock` (`LoadConfig.clock`), given to the client and the driver.

Nothing here runs at import time.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from prometheus_client import CollectorRegistry, start_http_server

from zcube_lab.core.clock import Clock
from zcube_lab.core.errors import ConfigError
from zcube_lab.workloads.arrivals import parse_stages, staged_duration
from zcube_lab.workloads.client import OpenAIStreamClient
from zcube_lab.workloads.client_metrics import ClientMetrics
from zcube_lab.workloads.loadconfig import LoadConfig, add_load_flags, load_config
from zcube_lab.workloads.loadsummary import summarize
from zcube_lab.workloads.openloop import OpenLoopDriver, RequestRecord
from zcube_lab.workloads.profiles import load_profile
from zcube_lab.workloads.requests import PlannedRequest, generate_requests, resolve_arrival
from zcube_lab.workloads.shards import parse_shard, shard_label, shard_plan

log = logging.getLogger("zcube.workloads")

ENV_ATTR = "zcube_workload"  # the `WorkloadRun` hangs off the Locust environment under this name
DEFAULT_DURATION = 60.0
STREAM_NAMES = {"completions": "completion-stream", "chat": "chat-stream"}


def add_arguments(parser: Any) -> None:
    """Our options (`LoadConfig`'s) on Locust's (configargparse) parser."""
    add_load_flags(parser.add_argument_group("zcube-lab workload"))


@dataclass
class WorkloadRun:
    """Everything one Locust run of a workload holds: plan, client, metrics, output files."""

    environment: Any
    plan: list[PlannedRequest]
    name: str
    model: str
    stream_name: str
    metrics: ClientMetrics
    registry: CollectorRegistry
    host: str
    options: LoadConfig
    duration: float  # of the plan, modelled seconds
    # What was asked for (process, configured rate, burstiness): a Poisson plan's own rate
    # differs from the configured one by sampling, identically on every fabric.
    arrival: dict[str, Any] = field(default_factory=dict)
    requests_out: IO[str] | None = None
    driver: OpenLoopDriver | None = None
    client: OpenAIStreamClient | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    started: bool = False
    finished: bool = False
    quitting: bool = False
    # Closed-loop state (`send_next`): where in the plan, since when, how many open.
    next_index: int = 0
    closed_t0: float | None = None
    closed_in_flight: int = 0
    clock: Clock = field(default_factory=Clock)  # --dilation
    shard: tuple[int, int] | None = None  # --plan-shard (K, W); None: the whole plan
    rounds: int = 1  # replays of the plan (`again`: Stop, then Start in the web UI)

    def _client(self) -> OpenAIStreamClient:
        o = self.options
        return OpenAIStreamClient(
            self.host,
            timeout=o.request_timeout,
            max_connections=o.max_in_flight,
            api_key=os.environ.get("OPENAI_API_KEY"),
            clock=self.clock,
        )

    def claim(self) -> bool:
        """Whether a newly started user should drive the plan: the first one, or, under
        `--keep-running` once a stop ended the last round (Locust's web UI: Stop, then Start),
        the first of a new round (`again`). A second user while a round runs gets False."""
        if not self.started:
            return True
        if self.finished and self.options.keep_running:
            self.again()
            return True
        return False

    def again(self) -> None:
        """Start a new round of the same plan after a stop: a fresh driver, client and records;
        the request log is appended to, the summary rewritten at the round's stop."""
        if not self.finished:
            raise RuntimeError("a round is still running")
        self.started = self.finished = self.quitting = False
        self.driver = self.client = None
        self.records = []
        self.next_index, self.closed_t0, self.closed_in_flight = 0, None, 0
        self.rounds += 1
        if self.options.requests_out:
            self.requests_out = open(self.options.requests_out, "a", buffering=1)  # noqa: SIM115
        log.info("round %d of the plan (%d requests) starts", self.rounds, len(self.plan))

    def drive(self) -> None:
        """Replay the plan open-loop against the host; returns when every request finished."""
        if self.started:
            return
        self.started = True
        o = self.options
        self.client = self._client()
        self.driver = OpenLoopDriver(
            self.plan,
            send=self.client.stream,
            on_done=self.record,
            on_send=lambda req, lag: self.metrics.send_lag.observe(max(lag, 0.0)),
            max_in_flight=o.max_in_flight,
            clock=self.clock,
        )
        self.metrics.in_flight.set_function(lambda: self.driver.in_flight if self.driver else 0)
        log.info("open-loop replay of %d planned requests starts", len(self.plan))
        self.driver.run()

    def send_next(self) -> bool:
        """Closed loop: send the plan's next request now and wait for it; False when used up."""
        if self.closed_t0 is None:
            self.started = True
            self.client = self._client()
            self.closed_t0 = time.perf_counter()
            self.metrics.in_flight.set_function(lambda: self.closed_in_flight)
        assert self.client is not None
        if self.finished or self.next_index >= len(self.plan):
            return False
        req = self.plan[self.next_index]
        self.next_index += 1
        sent, wall = self.clock.modelled(time.perf_counter() - self.closed_t0), time.time()
        self.closed_in_flight += 1
        try:
            result = self.client.stream(req)
        finally:
            self.closed_in_flight -= 1
        self.record(RequestRecord(req, sent, result, wall))
        return True

    def record(self, rec: RequestRecord) -> None:
        """Report one finished request to Locust, Prometheus and the JSONL file."""
        r = rec.result
        self.metrics.observe(r, rec.req.prompt_tokens)
        fire = self.environment.events.request.fire
        start = rec.wall_time
        exc = None if r.ok else RuntimeError(f"{r.outcome}: {r.error or r.status}")
        fire(
            request_type="POST",
            name=self.stream_name,
            response_time=r.e2e * 1000.0,
            response_length=r.output_tokens,
            exception=exc,
            context={"index": rec.req.index},
            start_time=start,
            url=rec.req.path,
        )
        if r.ok and r.ttft is not None:
            fire(
                request_type="TTFT",
                name=self.stream_name,
                response_time=r.ttft * 1000.0,
                response_length=0,
                exception=None,
                context={},
                start_time=start,
            )
        if r.ok and r.tpot is not None:
            fire(
                request_type="TPOT",
                name=self.stream_name,
                response_time=r.tpot * 1000.0,
                response_length=0,
                exception=None,
                context={},
                start_time=start,
            )
        row = rec.to_json()
        self.records.append(_summary_fields(row))
        if self.requests_out is not None:
            self.requests_out.write(json.dumps(row, separators=(",", ":")) + "\n")

    def stop(self) -> None:
        """Cancel what is in flight, close files, write the summary (idempotent)."""
        if self.finished:
            return
        self.finished = True
        if self.driver is not None:
            n = self.driver.cancel()
            if n:
                log.warning("%d requests still in flight at the end were cancelled", n)
        if self.client is not None:
            self.client.close()
        if self.requests_out is not None:
            self.requests_out.close()
        duration = self.duration
        if self.closed_t0 is not None:
            # Closed loop: planned times mean nothing; rates are over the time actually run,
            # from the first send to the last answer.
            ends = [r["sent_s"] + (r["e2e_s"] or 0.0) for r in self.records]
            duration = max(ends) if ends else self._closed_elapsed()
        summary = summarize(self.plan, self.records, duration)
        summary.update(workload=self.name, model=self.model, seed=self.options.seed)
        summary["mode"] = "closed-loop" if self.closed_t0 is not None else "open-loop"
        summary["arrival"] = self.arrival
        if self.clock.dilated:
            summary["time_dilation"] = self.clock.dilation
        if self.shard is not None:
            summary["shard"] = shard_label(self.shard)
        if self.rounds > 1:
            summary["round"] = self.rounds
        log.info("workload summary: %s", json.dumps(summary))
        if self.options.summary_out:
            Path(self.options.summary_out).write_text(json.dumps(summary, indent=2) + "\n")

    def _closed_elapsed(self) -> float:
        assert self.closed_t0 is not None
        return self.clock.modelled(time.perf_counter() - self.closed_t0)


def _summary_fields(row: dict[str, Any]) -> dict[str, Any]:
    # Only what the summary needs is kept in memory (ITL lists go to the file only).
    return {k: row[k] for k in ("sent_s", "lag_s", "outcome", "ttft_s", "e2e_s", "output_tokens")}


def plan_duration(load: LoadConfig, run_time: float | None) -> float | None:
    """`--duration`, else Locust's `--run-time` (wall seconds, in modelled ones), else None."""
    if load.duration:
        return float(load.duration)
    if run_time:
        return load.clock.modelled(float(run_time))
    return None


def build_run(environment: Any) -> WorkloadRun:
    """Load the profile and draw the plan (the shard's, with `--plan-shard`) from the parsed
    options, read into a `LoadConfig` (raises ConfigError)."""
    o = load_config(environment.parsed_options)
    shard = parse_shard(getattr(o, "plan_shard", None))
    if not environment.host:
        raise ConfigError("host", environment.host, "the gateway base URL (--host http://H:P)")
    trace = Path(o.trace) if o.trace else None
    profile = load_profile(o.workload, length_scale=o.length_scale, model=o.model, trace=trace)
    stages = parse_stages(o.stages) if o.stages else ()
    duration = plan_duration(o, getattr(environment.parsed_options, "run_time", None))
    if profile.trace is not None:
        plan = generate_requests(profile, o.arrival, duration or math.inf, o.rate, o.seed)
        arrival: dict[str, Any] = {"process": "trace", "rate": o.rate, "trace": str(profile.trace)}
        if duration is None:
            # The window closes just after the last request: planned rate = n / span.
            duration = (plan[-1].t if plan else 0.0) + 1e-6
    else:
        process = o.arrival or ("staged" if stages else None)
        if stages and process != "staged":
            raise ConfigError("stages", o.stages, "only with --arrival staged")
        spec = resolve_arrival(profile, process, o.rate, o.burstiness, stages)
        if duration is None:
            duration = staged_duration(spec) if spec.process == "staged" else DEFAULT_DURATION
        plan = generate_requests(profile, spec, duration, seed=o.seed)
        arrival = {"process": spec.process, "rate": spec.rate, "burstiness": spec.burstiness}
        if spec.process == "staged":
            arrival["stages"] = [[st.duration, st.rate] for st in spec.stages]
    registry = CollectorRegistry()
    run = WorkloadRun(
        environment=environment,
        plan=shard_plan(plan, shard),  # the window above is the whole plan's, on every shard
        name=profile.name,
        model=profile.model,
        stream_name=STREAM_NAMES[profile.endpoint],
        metrics=ClientMetrics(registry, profile.model, profile.name),
        registry=registry,
        host=environment.host,
        options=o,
        duration=duration,
        arrival=arrival,
        clock=o.clock,
        shard=shard,
    )
    if o.requests_out:
        Path(o.requests_out).parent.mkdir(parents=True, exist_ok=True)
        # Line-buffered: rows are on disk as requests finish, even if the run is killed.
        run.requests_out = open(o.requests_out, "w", buffering=1)  # noqa: SIM115
    return run


def over_context(plan: list[PlannedRequest], model: str) -> int:
    """How many planned requests exceed the context of `model`, if the lab's servers know it."""
    try:
        from zcube_lab.serving.models import PROFILES
    except ImportError:  # the load generator also drives servers that are not ours
        return 0
    profile = PROFILES.get(model)
    if profile is None:
        return 0
    return sum(r.prompt_tokens + r.max_tokens > profile.context_length for r in plan)


def get_run(environment: Any) -> WorkloadRun:
    """The run registered on this Locust environment."""
    run = getattr(environment, ENV_ATTR, None)
    if run is None:
        raise RuntimeError("zcube_lab.workloads.locust_ext.register(environment) was not called")
    return run


def register(environment: Any) -> None:
    """Hook a workload run into this Locust environment's events (call from the `init` event)."""
    from locust.runners import MasterRunner, WorkerRunner

    if isinstance(environment.runner, MasterRunner):
        # A master only aggregates; the workers replay the plan's shards (docs/WORKLOADS.md).
        return
    try:
        shard = getattr(environment.parsed_options, "plan_shard", None)
        if isinstance(environment.runner, WorkerRunner) and parse_shard(shard) is None:
            # Every worker would send the whole plan (as with Locust's --processes).
            raise ConfigError("plan_shard", shard, "K/W on a Locust worker (its share of the plan)")
        run = build_run(environment)
    except ConfigError as exc:
        log.error("zcube workload: %s", exc)
        raise SystemExit(2) from None
    setattr(environment, ENV_ATTR, run)
    o = run.options
    if o.metrics_port:
        start_http_server(o.metrics_port, addr=o.metrics_addr, registry=run.registry)
        log.info("client metrics on http://%s:%d/metrics", o.metrics_addr, o.metrics_port)
    too_long = over_context(run.plan, run.model)
    if too_long:
        log.warning(
            "%d of %d planned requests exceed %s's context window and will be refused; "
            "shrink them with --length-scale",
            too_long,
            len(run.plan),
            run.model,
        )
    log.info(
        "workload %s: %d requests planned%s, model %s, seed %d",
        run.name,
        len(run.plan),
        f" (shard {shard_label(run.shard)})" if run.shard else "",
        run.model,
        o.seed,
    )

    def on_test_stop(**_: Any) -> None:
        run.stop()

    def on_quitting(**_: Any) -> None:
        run.stop()
        if o.metrics_linger > 0:
            import gevent

            gevent.sleep(o.metrics_linger)

    environment.events.test_stop.add_listener(on_test_stop)
    environment.events.quitting.add_listener(on_quitting)
