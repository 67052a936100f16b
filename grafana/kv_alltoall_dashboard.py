"""The `kv-alltoall` dashboard: the traffic that crosses the fabric, KV-cache pulls between
prefill and decode (vLLM's NIXL metric names) and expert-parallel all-to-all (ours), with the
end hosts' failover counters and the engines' step overrun."""

from __future__ import annotations

from zcube_lab.serving.vllm_metrics import (
    ALLTOALL_BYTES,
    ALLTOALL_FAILURES,
    ALLTOALL_TIME,
    EP_SUBFLOWS_RETIRED,
    KV_LANES_RETIRED,
    KV_PULL_RETRIES,
    NIXL_BYTES_TRANSFERRED,
    NIXL_NUM_FAILED_TRANSFERS,
    NIXL_NUM_KV_EXPIRED_REQS,
    NIXL_XFER_TIME,
    STEP_OVERRUN,
)

from .panels import (
    RATE,
    RUN,
    SRV,
    Dashboard,
    Panel,
    Query,
    Variable,
    hist_count,
    hist_sum,
    quantile_expr,
    quantiles,
    run_variables,
    total,
)


def _increase(counter: str, legend: str) -> Query:
    """Counts of a counter over the rate interval, summed over engines."""
    return Query(f"sum(increase({total(counter)}{{{SRV}}}{RATE}))", legend)


PANELS = (
    Panel(
        "KV bytes/s",
        f"KV-cache bytes pulled by decode engines ({NIXL_BYTES_TRANSFERRED}).",
        (
            Query(
                f"sum by (job) (rate({hist_sum(NIXL_BYTES_TRANSFERRED)}{{{SRV}}}{RATE})) * 8",
                "{{job}}",
            ),
        ),
        unit="bps",
    ),
    Panel(
        "KV transfer time",
        f"{NIXL_XFER_TIME} p50/p90/p99: one KV pull, all its streams.",
        quantiles(NIXL_XFER_TIME, SRV),
        unit="s",
    ),
    Panel(
        "KV transfers/s and size",
        "Transfers per second and the median transfer size.",
        (
            Query(f"sum(rate({hist_count(NIXL_XFER_TIME)}{{{SRV}}}{RATE}))", "transfers/s"),
            Query(quantile_expr(0.5, NIXL_BYTES_TRANSFERRED, SRV), "median bytes per transfer"),
        ),
    ),
    Panel(
        "KV failures",
        "Failed KV transfers and requests whose KV expired before decode pulled it.",
        (
            _increase(NIXL_NUM_FAILED_TRANSFERS, "failed transfers"),
            _increase(NIXL_NUM_KV_EXPIRED_REQS, "expired KV"),
        ),
    ),
    Panel(
        "All-to-all bytes/s",
        "Expert-parallel all-to-all bytes sent and received by engines (zero unless a "
        "run spans instances over servers: --ep-servers 2).",
        (Query(f"sum by (job) (rate({total(ALLTOALL_BYTES)}{{{SRV}}}{RATE})) * 8", "{{job}}"),),
        unit="bps",
    ),
    Panel(
        "All-to-all exchange time",
        f"{ALLTOALL_TIME} p50/p90/p99: one exchange, from its dispatch sent to the last "
        "peer's combine received (every MoE layer of a step in one round trip), not the "
        "engine step; the exact times are in logs/ep-<engine>.jsonl.",
        quantiles(ALLTOALL_TIME, SRV),
        unit="s",
    ),
    Panel(
        "Failover at the end hosts",
        "What the senders did about dead paths (docs/FAILURES.md): KV subflows retired "
        "and KV pulls retried by decode, all-to-all subflows retired and per-peer "
        "exchanges that failed (timed out or refused). All zero on a healthy fabric.",
        (
            _increase(KV_LANES_RETIRED, "KV subflows retired"),
            _increase(KV_PULL_RETRIES, "KV pulls retried"),
            _increase(EP_SUBFLOWS_RETIRED, "all-to-all subflows retired"),
            _increase(ALLTOALL_FAILURES, "all-to-all exchanges failed"),
        ),
        width=24,
        height=6,
    ),
    Panel(
        "Engine step overrun",
        "How late engine steps ended (event-loop lag), p99 per role: high values mean "
        "the emulator host, not the fabric, slowed the run.",
        (Query(quantile_expr(0.99, STEP_OVERRUN, SRV, by="job"), "{{job}} p99"),),
        unit="s",
        width=24,
        height=6,
    ),
)


def dashboard() -> Dashboard:
    """The KV transfer and all-to-all dashboard."""
    series = hist_count(NIXL_XFER_TIME)  # every engine that moved KV has it
    return Dashboard(
        uid="zcube-kv-alltoall",
        title="zcube-lab / KV transfer and all-to-all",
        description="The traffic that crosses the fabric: KV-cache pulls between prefill and "
        "decode (vLLM's NIXL metric names) and expert-parallel all-to-all (ours). Bytes are "
        "the lab's, i.e. full-scale bytes divided by bandwidth_scale.",
        variables=(*run_variables(series), Variable("model_name", "Model", series, RUN)),
        panels=PANELS,
    )
