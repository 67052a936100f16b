"""Client-side Prometheus metrics of the load generator (`zcube_client_*`), registry passed in.

Bucket boundaries are vLLM's (`vllm/v1/metrics/loggers.py`, also in
`zcube_lab/serving/vllm_metrics.py`) so a `histogram_quantile` over the client's TTFT and over the
server's `vllm:time_to_first_token_seconds` interpolate within the same buckets and can be compared.

Names: `zcube_client_ttft_seconds`, `zcube_client_itl_seconds`, `zcube_client_tpot_seconds`,
`zcube_client_e2e_seconds` (histograms, labels `model`, `workload`);
`zcube_client_requests_total{outcome}`, `zcube_client_output_tokens_total`,
`zcube_client_prompt_tokens_total` (counters); `zcube_client_requests_in_flight` (gauge);
`zcube_client_send_lag_seconds` (histogram of actual minus planned send time: the driver's own
health, so a run whose load generator fell behind can be told apart from a slow fabric).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# vLLM's boundaries, kept in one place (the serving package that mimics vLLM).
from zcube_lab.serving.vllm_metrics import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS
from zcube_lab.workloads.client import OUTCOMES, RequestResult

SEND_LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0, 5.0)

TTFT = "zcube_client_ttft_seconds"
ITL = "zcube_client_itl_seconds"
TPOT = "zcube_client_tpot_seconds"
E2E = "zcube_client_e2e_seconds"
REQUESTS = "zcube_client_requests"  # exposed as zcube_client_requests_total
OUTPUT_TOKENS = "zcube_client_output_tokens"
PROMPT_TOKENS = "zcube_client_prompt_tokens"
IN_FLIGHT = "zcube_client_requests_in_flight"
SEND_LAG = "zcube_client_send_lag_seconds"


class ClientMetrics:
    """The load generator's metrics for one (model, workload), registered in `registry`."""

    def __init__(self, registry: CollectorRegistry, model: str, workload: str) -> None:
        labels = ("model", "workload")
        values = (model, workload)

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            h = Histogram(name, doc, labels, registry=registry, buckets=buckets)
            return h.labels(*values)

        self.ttft = hist(TTFT, "Client-measured time to first token.", TTFT_BUCKETS)
        self.itl = hist(ITL, "Client-measured gaps between token chunks.", ITL_BUCKETS)
        self.tpot = hist(TPOT, "Client-measured time per output token.", ITL_BUCKETS)
        self.e2e = hist(E2E, "Client-measured request latency.", REQUEST_LATENCY_BUCKETS)
        self.send_lag = hist(SEND_LAG, "Actual minus planned send time.", SEND_LAG_BUCKETS)
        self._requests = Counter(
            REQUESTS, "Finished requests by outcome.", (*labels, "outcome"), registry=registry
        )
        # Every outcome appears from the start, so rate() works from the first scrape.
        self.requests = {o: self._requests.labels(*values, o) for o in OUTCOMES}
        self.output_tokens = Counter(
            OUTPUT_TOKENS, "Output tokens received.", labels, registry=registry
        ).labels(*values)
        self.prompt_tokens = Counter(
            PROMPT_TOKENS, "Prompt tokens sent.", labels, registry=registry
        ).labels(*values)
        self.in_flight = Gauge(
            IN_FLIGHT, "Requests sent and not yet finished.", labels, registry=registry
        ).labels(*values)

    def observe(self, result: RequestResult, prompt_tokens: int) -> None:
        """Record one finished request."""
        self.requests[result.outcome].inc()
        self.prompt_tokens.inc(prompt_tokens)
        self.output_tokens.inc(result.output_tokens)
        if not result.ok:
            return
        # Latency histograms hold successful requests only, as vLLM's do.
        if result.ttft is not None:
            self.ttft.observe(result.ttft)
        for gap in result.itl:
            self.itl.observe(gap)
        if result.tpot is not None:
            self.tpot.observe(result.tpot)
        self.e2e.observe(result.e2e)
