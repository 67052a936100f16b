"""The `serving` dashboard: what users of the emulated cluster see (latency, throughput, queues,
KV cache), from the engines' vLLM-named metrics, the gateway's and the load generator's."""

from __future__ import annotations

from zcube_lab.serving.vllm_metrics import (
    E2E_REQUEST_LATENCY,
    GATEWAY_OUTSTANDING,
    GATEWAY_REQUESTS,
    GATEWAY_TTFT,
    GENERATION_TOKENS,
    INTER_TOKEN_LATENCY,
    KV_CACHE_USAGE_PERC,
    NUM_REQUESTS_RUNNING,
    NUM_REQUESTS_WAITING,
    PROMPT_TOKENS,
    REQUEST_SUCCESS,
    TIME_TO_FIRST_TOKEN,
)
from zcube_lab.workloads.client_metrics import REQUESTS as CLIENT_REQUESTS
from zcube_lab.workloads.client_metrics import TTFT as CLIENT_TTFT

from .panels import (
    CLIENT,
    RATE,
    RUN,
    SRV,
    Dashboard,
    Panel,
    Query,
    Variable,
    quantiles,
    run_variables,
    total,
)

DECODE = f'{SRV}, job="decode"'
PREFILL = f'{SRV}, job="prefill"'

PANELS = (
    Panel(
        "TTFT at the gateway",
        "Time to first token measured at the gateway (what an API user sees), p50/p90/p99 "
        "over the rate interval. vLLM's TTFT buckets, so quantiles are exact to a bucket.",
        quantiles(GATEWAY_TTFT, SRV),
        unit="s",
    ),
    Panel(
        f"TTFT per engine role ({TIME_TO_FIRST_TOKEN})",
        "vLLM's own TTFT histogram, as prefill and decode engines record it.",
        quantiles(TIME_TO_FIRST_TOKEN, SRV, by="job"),
        unit="s",
    ),
    Panel(
        "Inter-token latency (ITL)",
        "Gaps between output tokens at the decode engines, p50/p90/p99.",
        quantiles(INTER_TOKEN_LATENCY, DECODE),
        unit="s",
    ),
    Panel(
        "End-to-end request latency",
        "Request latency at the decode engines (prefill, KV transfer and decode), p50/p90/p99.",
        quantiles(E2E_REQUEST_LATENCY, DECODE),
        unit="s",
    ),
    Panel(
        "Requests/s",
        "Answered requests at the gateway by HTTP status, and finished requests at the "
        "decode engines by finish reason.",
        (
            Query(
                f"sum by (status) (rate({total(GATEWAY_REQUESTS)}{{{SRV}}}{RATE}))",
                "gateway {{status}}",
            ),
            Query(
                f"sum by (finished_reason) (rate({total(REQUEST_SUCCESS)}{{{DECODE}}}{RATE}))",
                "decode {{finished_reason}}",
            ),
        ),
        unit="reqps",
    ),
    Panel(
        "Tokens/s",
        "Prompt tokens prefilled (prefill engines) and tokens generated (decode engines).",
        (
            Query(f"sum(rate({total(PROMPT_TOKENS)}{{{PREFILL}}}{RATE}))", "prompt (prefill)"),
            Query(
                f"sum(rate({total(GENERATION_TOKENS)}{{{DECODE}}}{RATE}))", "generation (decode)"
            ),
        ),
    ),
    Panel(
        "Running and waiting requests",
        "Requests in engine batches and in their waiting queues, summed per role; "
        "requests in flight through the gateway.",
        (
            Query(f"sum by (job) ({NUM_REQUESTS_RUNNING}{{{SRV}}})", "running {{job}}"),
            Query(f"sum by (job) ({NUM_REQUESTS_WAITING}{{{SRV}}})", "waiting {{job}}"),
            Query(f"sum({GATEWAY_OUTSTANDING}{{{SRV}}})", "gateway in flight"),
        ),
    ),
    Panel(
        "KV-cache usage per engine",
        f"{KV_CACHE_USAGE_PERC} of every engine (1 = full).",
        (Query(f"{KV_CACHE_USAGE_PERC}{{{SRV}}}", "{{job}} {{engine}}"),),
        unit="percentunit",
    ),
    Panel(
        "TTFT at the client",
        "Time to first token as the load generator measured it, p50/p90/p99.",
        quantiles(CLIENT_TTFT, CLIENT),
        unit="s",
    ),
    Panel(
        "Client outcomes/s",
        "Finished requests at the load generator by outcome.",
        (
            Query(
                f"sum by (outcome) (rate({total(CLIENT_REQUESTS)}{{{CLIENT}}}{RATE}))",
                "{{outcome}}",
            ),
        ),
        unit="reqps",
    ),
)


def dashboard() -> Dashboard:
    """The serving dashboard."""
    return Dashboard(
        uid="zcube-serving",
        title="zcube-lab / Serving",
        description="What users of the emulated cluster see: latency, throughput, queues, KV "
        "cache. Engines export vLLM's metric names; the gateway and client add their own.",
        variables=(
            *run_variables(NUM_REQUESTS_RUNNING),
            Variable("model_name", "Model", NUM_REQUESTS_RUNNING, RUN),
        ),
        panels=PANELS,
    )
