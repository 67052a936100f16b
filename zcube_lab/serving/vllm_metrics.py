"""Prometheus metrics with vLLM's names, labels (`model_name`, `engine`) and bucket boundaries.

Names and buckets are copied from vLLM's `vllm/v1/metrics/loggers.py` and the NIXL connector's
`NixlPromMetrics`. prometheus_client appends `_total` to counters on the wire, exactly as vLLM's
own `vllm:prompt_tokens` is scraped as `vllm:prompt_tokens_total`; the constants below are the
names passed to prometheus_client. Our own metrics use the `zcube:` prefix.
One class per component; each takes the `CollectorRegistry` to register into. An engine's
metrics count their changes in a `VersionedRegistry` (`zcube_lab.serving.exposition`), so an
idle engine's /metrics answers from the text it rendered last.

Time dilation (docs/DOMAIN.md §4): a component of a run dilated by k gets `Clock(k)`, and every
time histogram observes modelled seconds (the wall duration / k), so its buckets, its quantiles
and Grafana's panels are the modelled world's at every k. That includes the step overrun and the
gateway's loop lag (a step woken 20 ms late on the wall clock distorts the modelled step by
20/k ms); not the step lateness, a ratio.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from zcube_lab.core.clock import Clock
from zcube_lab.serving.exposition import tracked

# vLLM engine metrics
NUM_REQUESTS_RUNNING = "vllm:num_requests_running"
NUM_REQUESTS_WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE_PERC = "vllm:kv_cache_usage_perc"
PROMPT_TOKENS = "vllm:prompt_tokens"  # scraped as vllm:prompt_tokens_total
GENERATION_TOKENS = "vllm:generation_tokens"  # scraped as vllm:generation_tokens_total
REQUEST_SUCCESS = "vllm:request_success"  # scraped as vllm:request_success_total
TIME_TO_FIRST_TOKEN = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
REQUEST_TIME_PER_OUTPUT_TOKEN = "vllm:request_time_per_output_token_seconds"
E2E_REQUEST_LATENCY = "vllm:e2e_request_latency_seconds"
REQUEST_QUEUE_TIME = "vllm:request_queue_time_seconds"
REQUEST_PREFILL_TIME = "vllm:request_prefill_time_seconds"
REQUEST_DECODE_TIME = "vllm:request_decode_time_seconds"
# vLLM NIXL connector metrics
REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"
REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"
REQUEST_MAX_NUM_GENERATION_TOKENS = "vllm:request_max_num_generation_tokens"
# Names vLLM has since renamed, still read by its example Grafana dashboard: exported as
# duplicates so that dashboard works unchanged.
LEGACY_GPU_CACHE_USAGE_PERC = "vllm:gpu_cache_usage_perc"
LEGACY_TIME_PER_OUTPUT_TOKEN = "vllm:time_per_output_token_seconds"
NIXL_XFER_TIME = "vllm:nixl_xfer_time_seconds"
NIXL_BYTES_TRANSFERRED = "vllm:nixl_bytes_transferred"
NIXL_NUM_FAILED_TRANSFERS = "vllm:nixl_num_failed_transfers"
NIXL_NUM_KV_EXPIRED_REQS = "vllm:nixl_num_kv_expired_reqs"
# ours
ALLTOALL_TIME = "zcube:ep_alltoall_seconds"  # the exchange alone: dispatch to last combine
EP_STEP_TIME = "zcube:ep_step_seconds"  # a whole engine step that ran an exchange
ALLTOALL_BYTES = "zcube:ep_alltoall_bytes"  # scraped as zcube:ep_alltoall_bytes_total
ALLTOALL_FAILURES = "zcube:ep_alltoall_failures"  # scraped as zcube:ep_alltoall_failures_total
EP_SUBFLOWS_RETIRED = "zcube:ep_subflows_retired"  # scraped as zcube:ep_subflows_retired_total
STEP_OVERRUN = "zcube:engine_step_overrun_seconds"
STEP_LATENESS = "zcube:engine_step_lateness_ratio"  # the overrun / the modelled step
REJECTED_REQUESTS = "zcube:rejected_requests"  # scraped as zcube:rejected_requests_total
GATEWAY_REQUESTS = "zcube:gateway_requests"  # scraped as zcube:gateway_requests_total
GATEWAY_OUTSTANDING = "zcube:gateway_outstanding_requests"
GATEWAY_TTFT = "zcube:gateway_time_to_first_token_seconds"
GATEWAY_UPSTREAM_ERRORS = "zcube:gateway_upstream_errors"
GATEWAY_LOOP_LAG = "zcube:gateway_loop_lag_seconds"
KV_LANES_RETIRED = "zcube:kv_lanes_retired"  # scraped as zcube:kv_lanes_retired_total
KV_PULL_RETRIES = "zcube:kv_pull_retries"  # scraped as zcube:kv_pull_retries_total
KV_PATHS_SUSPECT = "zcube:kv_paths_suspect"

LABELS = ("model_name", "engine")

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
# NIXL: vLLM builds [0.001, 0.005, ...] and passes buckets[1:] for the transfer time.
NIXL_XFER_TIME_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0,
)  # fmt: skip
# "uniform 2kb to 16gb range": 2 ** (10 + i) for i in range(1, 25, 2)
NIXL_BYTES_BUCKETS = tuple(float(2 ** (10 + i)) for i in range(1, 25, 2))
STEP_OVERRUN_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0)
# Shares of the modelled step (zcube_lab.emulator.verdict.limits judges 0.25).
STEP_LATENESS_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
# Geometric, 4 per doubling (ratio 2**0.25, about 19%): 100 us to about 13 s, so a quantile
# interpolated inside a bucket is off by a few percent at most, from sub-ms exchanges to stalls.
ALLTOALL_BUCKETS = tuple(round(1e-4 * 2 ** (i / 4), 7) for i in range(69))

FINISH_REASONS = ("stop", "length", "abort")


def build_1_2_5_buckets(max_value: int) -> tuple[float, ...]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50, ... up to `max_value`."""
    out: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(out)
            out.append(float(value))
        exponent += 1


class _Both:
    """Forwards observe/set to a metric and its legacy-named twin."""

    def __init__(self, *metrics: Any) -> None:
        self._metrics = metrics

    def observe(self, value: float) -> None:
        for m in self._metrics:
            m.observe(value)

    def set(self, value: float) -> None:
        for m in self._metrics:
            m.set(value)


class Modelled:
    """A time histogram fed wall-clock durations that observes them in modelled seconds."""

    def __init__(self, histogram: Any, clock: Clock) -> None:
        self._histogram = histogram
        self._clock = clock

    def observe(self, wall_s: float) -> None:
        self._histogram.observe(self._clock.modelled(wall_s))


def modelled(histogram: Any, clock: Clock) -> Any:
    """`histogram` itself when `clock` is undilated, else wrapped in `Modelled`."""
    return Modelled(histogram, clock) if clock.dilated else histogram


class _Labelled:
    """Makes one component's metrics, registered in its registry and bound to its labels."""

    def __init__(
        self, registry: CollectorRegistry, values: tuple[str, ...], clock: Clock | None = None
    ) -> None:
        self.registry = registry
        self.values = values
        self.clock = clock or Clock()

    def hist(self, name: str, doc: str, buckets: tuple[float, ...]) -> Any:
        """A histogram child with these buckets (`tracked`: its changes counted)."""
        metric = Histogram(name, doc, LABELS, registry=self.registry, buckets=buckets)
        return tracked(metric.labels(*self.values), self.registry)

    def times(self, name: str, doc: str, buckets: tuple[float, ...]) -> Any:
        """A histogram child of durations: observed in wall seconds, kept in modelled ones."""
        return modelled(self.hist(name, doc, buckets), self.clock)

    def counter(self, name: str, doc: str) -> Any:
        """A counter child (`tracked`)."""
        metric = Counter(name, doc, LABELS, registry=self.registry)
        return tracked(metric.labels(*self.values), self.registry)

    def gauge(self, name: str, doc: str) -> Any:
        """A gauge child (`tracked`)."""
        metric = Gauge(name, doc, LABELS, registry=self.registry)
        return tracked(metric.labels(*self.values), self.registry)

    def by(self, name: str, doc: str, label: str) -> Any:
        """A counter with one more label, to be bound per value by the caller (`tracked`)."""
        return tracked(Counter(name, doc, (*LABELS, label), registry=self.registry), self.registry)


class EngineMetrics:
    """Metrics a prefill or decode engine exports (bound to one model name and engine index).

    Registered per concern, in this order: scheduler state, token counts, token latencies,
    per-request token counts, request phase times, KV transfer, expert parallelism, engine
    steps and refusals."""

    def __init__(
        self,
        registry: CollectorRegistry,
        model_name: str,
        engine: str,
        max_model_len: int = 131_072,
        clock: Clock | None = None,
    ) -> None:
        make = _Labelled(registry, (model_name, engine), clock)
        self._scheduler(make)
        self._tokens(make)
        self._token_latency(make)
        self._request_tokens(make, build_1_2_5_buckets(max_model_len))
        self._phases(make)
        self._kv_transfer(make)
        self._expert_parallel(make)
        self.step_overrun = make.times(
            STEP_OVERRUN,
            "How late each step's compute sleep ended (event-loop lag: the host is saturated).",
            STEP_OVERRUN_BUCKETS,
        )
        self.step_lateness = make.hist(
            STEP_LATENESS,
            "How late each step's compute sleep ended, as a share of its modelled compute time.",
            STEP_LATENESS_BUCKETS,
        )
        rejected = make.by(
            REJECTED_REQUESTS, "Requests refused with 429/503 because queues were full.", "reason"
        )
        self.rejected = rejected.labels(*make.values, "queue_full")

    def _scheduler(self, make: _Labelled) -> None:
        self.running = make.gauge(
            NUM_REQUESTS_RUNNING, "Number of requests in model execution batches."
        )
        self.waiting = make.gauge(
            NUM_REQUESTS_WAITING, "Number of requests waiting to be processed."
        )
        self.kv_usage = _Both(
            make.gauge(KV_CACHE_USAGE_PERC, "KV-cache usage. 1 means 100 percent usage."),
            make.gauge(LEGACY_GPU_CACHE_USAGE_PERC, "GPU KV-cache usage (vLLM's former name)."),
        )

    def _tokens(self, make: _Labelled) -> None:
        self.prompt_tokens = make.counter(PROMPT_TOKENS, "Number of prefill tokens processed.")
        self.generation_tokens = make.counter(
            GENERATION_TOKENS, "Number of generation tokens processed."
        )
        success = make.by(
            REQUEST_SUCCESS, "Count of successfully processed requests.", "finished_reason"
        )
        self.request_success = {r: success.labels(*make.values, r) for r in FINISH_REASONS}

    def _token_latency(self, make: _Labelled) -> None:
        self.ttft = make.times(
            TIME_TO_FIRST_TOKEN, "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.itl = make.times(
            INTER_TOKEN_LATENCY, "Histogram of inter-token latency in seconds.", ITL_BUCKETS
        )
        self.tpot = _Both(
            make.times(
                REQUEST_TIME_PER_OUTPUT_TOKEN,
                "Histogram of time_per_output_token_seconds per request.",
                ITL_BUCKETS,
            ),
            make.times(
                LEGACY_TIME_PER_OUTPUT_TOKEN,
                "Histogram of time per output token in seconds (vLLM's former name).",
                ITL_BUCKETS,
            ),
        )

    def _request_tokens(self, make: _Labelled, tokens: tuple[float, ...]) -> None:
        self.request_prompt_tokens = make.hist(
            REQUEST_PROMPT_TOKENS, "Number of prefill tokens processed.", tokens
        )
        self.request_generation_tokens = make.hist(
            REQUEST_GENERATION_TOKENS, "Number of generation tokens processed.", tokens
        )
        self.request_max_generation_tokens = make.hist(
            REQUEST_MAX_NUM_GENERATION_TOKENS,
            "Histogram of maximum number of requested generation tokens.",
            tokens,
        )

    def _phases(self, make: _Labelled) -> None:
        def phase(name: str, doc: str) -> Any:
            return make.times(name, doc, REQUEST_LATENCY_BUCKETS)

        self.e2e = phase(E2E_REQUEST_LATENCY, "Histogram of e2e request latency in seconds.")
        self.queue_time = phase(
            REQUEST_QUEUE_TIME, "Histogram of time spent in WAITING phase for request."
        )
        self.prefill_time = phase(
            REQUEST_PREFILL_TIME, "Histogram of time spent in PREFILL phase for request."
        )
        self.decode_time = phase(
            REQUEST_DECODE_TIME, "Histogram of time spent in DECODE phase for request."
        )

    def _kv_transfer(self, make: _Labelled) -> None:
        self.xfer_time = make.times(
            NIXL_XFER_TIME,
            "Histogram of transfer duration for NIXL KV Cache transfers.",
            NIXL_XFER_TIME_BUCKETS,
        )
        self.bytes_transferred = make.hist(
            NIXL_BYTES_TRANSFERRED,
            "Histogram of bytes transferred per NIXL KV Cache transfers.",
            NIXL_BYTES_BUCKETS,
        )
        self.failed_transfers = make.counter(
            NIXL_NUM_FAILED_TRANSFERS, "Number of failed NIXL KV Cache transfers."
        )
        self.kv_lanes_retired = make.counter(
            KV_LANES_RETIRED,
            "KV pull lanes (TCP connections, i.e. path ids) retired because they stalled.",
        )
        self.kv_pull_retries = make.counter(
            KV_PULL_RETRIES, "KV pull attempts after the first one of a request."
        )
        self.kv_paths_suspect = make.gauge(
            KV_PATHS_SUSPECT,
            "KV addresses new pulls avoid: a lane there stalled and nothing arrived since.",
        )
        self.kv_expired = make.counter(
            NIXL_NUM_KV_EXPIRED_REQS,
            "Number of requests that had their KV expire. "
            "NOTE: This metric is tracked on the P instance.",
        )

    def _expert_parallel(self, make: _Labelled) -> None:
        self.a2a_time = make.times(
            ALLTOALL_TIME,
            "Expert-parallel all-to-all exchange time: dispatch sent to the last peer's combine "
            "received (not the step).",
            ALLTOALL_BUCKETS,
        )
        self.ep_step_time = make.times(
            EP_STEP_TIME,
            "Engine steps that ran an all-to-all: compute and the exchange's exposed part.",
            ALLTOALL_BUCKETS,
        )
        self.a2a_bytes = make.counter(
            ALLTOALL_BYTES, "Expert-parallel all-to-all bytes sent and received (scaled)."
        )
        self.a2a_failures = make.counter(
            ALLTOALL_FAILURES,
            "Expert-parallel exchanges with one peer that failed (error or timeout); "
            "the step went on without that peer.",
        )
        self.ep_subflows_retired = make.counter(
            EP_SUBFLOWS_RETIRED,
            "Expert-parallel all-to-all subflows (TCP connections, i.e. path ids) retired "
            "because they stalled.",
        )

    def finished(self, prompt_tokens: int, generation_tokens: int, max_tokens: int) -> None:
        """Record a finished request's token counts (vLLM's per-request histograms)."""
        self.request_prompt_tokens.observe(prompt_tokens)
        self.request_generation_tokens.observe(generation_tokens)
        self.request_max_generation_tokens.observe(max_tokens)


class GatewayMetrics:
    """Metrics the gateway exports: requests by route and status, outstanding, gateway TTFT."""

    def __init__(
        self, registry: CollectorRegistry, model_name: str, clock: Clock | None = None
    ) -> None:
        clock = clock or Clock()
        self._model = model_name
        self._requests = Counter(
            GATEWAY_REQUESTS,
            "Requests answered by the gateway, by route and HTTP status.",
            ("model_name", "route", "status"),
            registry=registry,
        )
        self.outstanding = Gauge(
            GATEWAY_OUTSTANDING,
            "Requests in flight through the gateway.",
            ("model_name",),
            registry=registry,
        ).labels(model_name)
        self.ttft = modelled(
            Histogram(
                GATEWAY_TTFT,
                "Time to first token measured at the gateway (vLLM's TTFT buckets).",
                ("model_name",),
                registry=registry,
                buckets=TTFT_BUCKETS,
            ).labels(model_name),
            clock,
        )
        self.loop_lag = modelled(
            Histogram(
                GATEWAY_LOOP_LAG,
                "How late a timer the gateway sets every 0.1 s fired (its event loop's lag).",
                ("model_name",),
                registry=registry,
                buckets=STEP_OVERRUN_BUCKETS,
            ).labels(model_name),
            clock,
        )
        self._rejected = Counter(
            REJECTED_REQUESTS,
            "Requests refused with 429/503 because the gateway was full.",
            ("model_name", "engine", "reason"),
            registry=registry,
        )
        self._upstream_errors = Counter(
            GATEWAY_UPSTREAM_ERRORS,
            "Failures talking to prefill or decode, by role.",
            ("model_name", "role"),
            registry=registry,
        )

    def request(self, route: str, status: int) -> None:
        """Count one answered request."""
        self._requests.labels(self._model, route, str(status)).inc()

    def rejected(self, reason: str) -> None:
        """Count one overload refusal."""
        self._rejected.labels(self._model, "gateway", reason).inc()

    def upstream_error(self, role: str) -> None:
        """Count one failure reaching a backend."""
        self._upstream_errors.labels(self._model, role).inc()
