"""The load generator's summary, planned against achieved (pure): what `loadgen-summary.json`
holds, written by one process (`locust_ext`) or merged from a sharded run's workers
(`shards.merge_shards`, recomputed from the union of their records)."""

from __future__ import annotations

from collections.abc import Sized
from typing import Any

from zcube_lab.core.stats import quantile


def summarize(plan: Sized, rows: list[dict[str, Any]], duration: float) -> dict[str, Any]:
    """Planned vs achieved: counts by outcome, send rate over the plan window, lag and TTFT
    (of the plan only its size counts)."""
    sent = [r for r in rows if r["outcome"] not in ("overload",)]
    in_window = [r for r in sent if r["sent_s"] < duration]
    ok = [r for r in rows if r["outcome"] == "ok"]
    lags = sorted(r["lag_s"] for r in sent)
    ttfts = sorted(r["ttft_s"] for r in ok if r["ttft_s"] is not None)
    outcomes: dict[str, int] = {}
    for r in rows:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    return {
        "duration_s": duration,
        "planned": len(plan),
        "planned_rate": round(len(plan) / duration, 4) if duration else 0.0,
        "sent": len(sent),
        "achieved_rate": round(len(in_window) / duration, 4) if duration else 0.0,
        "completed_ok": len(ok),
        "outcomes": outcomes,
        "output_tokens": sum(r["output_tokens"] for r in ok),
        "lag_p50_s": _quantile(lags, 0.5),
        "lag_p99_s": _quantile(lags, 0.99),
        "lag_max_s": lags[-1] if lags else None,
        "ttft_p50_s": _quantile(ttfts, 0.5),
        "ttft_p99_s": _quantile(ttfts, 0.99),
    }


def _quantile(values: list[float], q: float) -> float | None:
    value = quantile(values, q)
    return None if value is None else round(value, 6)
