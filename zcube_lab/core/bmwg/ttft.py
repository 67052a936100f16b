"""§6.1 of the draft (end-to-end disaggregated TTFT), worked out before any lab (pure): a
live-serving test, not a replay. A case is one prompt length; a trial is one `zcube-lab run` of
single-turn requests of exactly that many prompt tokens (the run's model, CFG-E: GLM-5.1),
arriving as a Poisson stream at a rate low enough that requests seldom queue, so TTFT is one
request's own prefill, KV pull and first decode step. Its figures are the run's own KPIs by the
draft's names (`zcube_lab.emulator.results.ietf`): TTFT at the client, and per request T_prefill,
T_transfer and T_decode_init (`...results.fabric.transfers.ttft_parts`), fabric_fraction, all in
modelled ms; a run the lab's verdict did not trust is kept and marked, its figures unresolved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zcube_lab.core.bmwg import workload
from zcube_lab.core.bmwg.workload import single_turn
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.stats import quantile

SECTION = "6.1"
DRAFT_PROMPTS = (128, 512, 1024, 2048, 4096, 8192, 16384)
PROMPT_MIN, PROMPT_MAX = 16, 131072
OUTPUT_TOKENS = 16
MIN_RUN_S = 5.0  # the shortest live run a trial may be (modelled seconds of arrivals)
# Requests per modelled second: one GLM-5.1 prefill of 16k tokens on the lab's compute model
# takes about a second on one prefill server, and the kv-heavy placement has three.
RATE = 1.0
MODEL = workload.MODEL
# The figures a trial keeps (p50 and p99 each, modelled ms) and the draft's KPI they come from.
PARTS = ("TTFT", "T_prefill", "T_transfer", "T_decode_init")
# Kept beside them: one KV pull's time (the draft's TTFT_fabric; T_transfer is a request's
# pulls, retries included).
KEPT = ("TTFT_fabric",)


def check_trial_seconds(seconds: float) -> None:
    """A live run shorter than `MIN_RUN_S` holds too few requests for a p99: refused, naming
    the field (the replay tests' trials are milliseconds: run §6.1 in a command of its own)."""
    if seconds < MIN_RUN_S:
        raise ConfigError(
            "trial_seconds", seconds, f"at least {MIN_RUN_S:g} s for the live serving runs "
            "(§6.1, §6.2, §9.4, §10.2, §12.3: run them in a command of their own when the "
            "replay tests' trials are shorter)"
        )  # fmt: skip


def prompt_lengths(text: str) -> tuple[int, ...]:
    """Prompt lengths from "128,2048" (empty: the draft's); ConfigError naming the field and the
    allowed range for anything else."""
    if not text.strip():
        return DRAFT_PROMPTS
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError("prompts", text, "comma-separated whole token counts") from None
    bad = [v for v in values if not PROMPT_MIN <= v <= PROMPT_MAX]
    if bad or not values:
        raise ConfigError("prompts", text, f"token counts from {PROMPT_MIN} to {PROMPT_MAX}")
    return values


def profile(prompt_tokens: int, rate: float = RATE) -> dict[str, Any]:
    """The workload profile of one case: single-turn completions of exactly `prompt_tokens`
    prompt tokens and `OUTPUT_TOKENS` output tokens, no prefix cache (the whole prompt is
    prefilled and its whole KV moves), three prefill servers to one decode server."""
    return single_turn(
        f"bmwg-6.1-{prompt_tokens}",
        f"BMWG §6.1: single-turn requests of exactly {prompt_tokens} prompt "
        f"tokens and {OUTPUT_TOKENS} output tokens, no prefix cache.",
        prompt_tokens, OUTPUT_TOKENS, rate, prefill_servers=3,
    )  # fmt: skip


def case_label(prompt_tokens: int) -> str:
    return f"prompt_tokens={prompt_tokens}"


def trial_figures(
    summary: Mapping[str, Any],
    samples: Mapping[str, Sequence[float]] | None = None,
    quantiles: Sequence[int] = (50, 99),
) -> dict[str, Any]:
    """A trial's figures from its run's summary.json: each part's p50 and p99 in modelled ms,
    TTFT_fabric's, fabric_fraction's, the requests the parts are over, and `untrusted` (1 when
    the lab's verdict did not trust the run: its figures are then unresolved). With `samples`
    (per part name, every request's value in modelled seconds, e.g. §10.1's), a part's figures
    are its `quantiles` (percent) over them instead of the summary's p50 and p99 (the same
    requests and quantile: the summary has no p95)."""
    kpis = summary.get("bmwg") or {}
    figs: dict[str, Any] = {}
    for name in (*PARTS, *KEPT):
        values = None if samples is None else samples.get(name)
        if values is not None:
            for q in quantiles:
                v = quantile(values, q / 100)
                figs[f"{name}_p{q}_ms"] = None if v is None else v * 1e3
            continue
        q = kpis.get(name) or {}
        figs[f"{name}_p50_ms"] = q.get("p50")
        figs[f"{name}_p99_ms"] = q.get("p99")
    ff = kpis.get("fabric_fraction") or {}
    figs["fabric_fraction_p50"] = ff.get("p50")
    t = summary.get("transfers") or {}
    figs["requests"] = t.get("ttft_parts_requests")
    figs["untrusted"] = 0 if summary.get("trustworthy") else 1
    return figs


def shares(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """The median request's TTFT split: each part's p50 over the sum of the three parts' p50s
    (the sum, not TTFT, so the shares add up to 1), over every trial of one case and fabric."""
    sums = {p: 0.0 for p in PARTS[1:]}
    n = 0
    for r in rows:
        f = r["figures"]
        vals = [f.get(f"{p}_p50_ms") for p in PARTS[1:]]
        if any(v is None for v in vals):
            continue
        n += 1
        for p, v in zip(PARTS[1:], vals, strict=True):
            sums[p] += float(v)
    total = sum(sums.values())
    return {p: (sums[p] / total if n and total > 0 else None) for p in PARTS[1:]}
