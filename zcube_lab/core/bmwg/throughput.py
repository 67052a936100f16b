"""§11.1 of the draft (aggregate tokens per second), worked out before any lab (pure): a
live-serving test, like §6.2 and §9.4. A case is one offered rate of a fixed ladder; a trial is
one `zcube-lab run` of single-turn requests of `PROMPT_TOKENS` prompt and `OUTPUT_TOKENS`
output tokens (GLM-5.1, CFG-E), Poisson arrivals, no prefix cache. The draft raises the rate
until TTFT p99 passes 500 ms or ITL p99 passes 50 ms and reports the throughput, goodput,
latencies and fabric utilization at the last rate within that SLO.

Why this workload, and why the draft's SLO holds unchanged: TTFT and ITL are in modelled ms
(the engines' compute is GLM-5.1's profile; the fabric's times are real at the scale-down), so
the draft's thresholds mean what they say as long as one request alone fits them. A decode
step is 30 ms plus 0.2 ms per running sequence (50 ms at about 100 sequences an engine), so ITL
fits. One prefill of 16,384 tokens (§6.2's and §9.4's prompt) takes 0.92 s: TTFT would miss
500 ms at any rate, so the prompt here is 4,096 tokens (0.238 s a prefill; alone a request's
TTFT is about 0.28 s with its KV pull and first decode step), the longest power of two that
leaves room for queueing under 500 ms. Outputs of 64 tokens give ITL samples enough (63 gaps a
request) at a streaming cost the 2-core machine carries.

The knee is prefill compute, as in §6.2 and §9.4: the prefill pool serves at most its engines
over one prefill step a modelled second (`knee_rate`). The cell is the lab's default split, a
quarter of the servers prefilling (`PREFILL_SHARE`: 4 of 16 GPU hosts, the other 12 decode), so
the knee is 16.8 req/s on 16 GPUs. The decode pool's knee (12 engines of 256 sequences, 64
steps a request) is far above, and so is what the KV pulls ask of the NICs (a few percent), so
ITL stays near one decode step (about 31 ms) at every rate the machine carries and the SLO is
lost on TTFT, where the prefill queue's tail passes the room a prefill leaves under 500 ms.
That tail grows long before the pool saturates: with 4 engines and about 0.2 s of room (under
one prefill step) an M/D/4 estimate puts the boundary near 0.4 of the knee.

The ladder: the draft starts at 1 req/s and steps up; an absolute start does not scale with
the cell (1 req/s is 0.06 of this cell's knee and far less of a large one's), so the
lab runs a fixed ladder of shares of the knee (`RATES`, the same rates on every fabric so that
fabrics are compared rate by rate), from well below it to above it. The machine carries about
12 req/s undilated (docs/BENCHMARKS.md): the rungs above that are run and judged by the lab's
verdict like any other, so a run it does not trust says so.

Figures per trial (`trial_figures`): the run's TPS_output and TPS_input (its summary's, over
the load window); Inference_Goodput, the output tokens a second of the requests that met the
SLO each (TTFT at most 500 ms and TPOT, a request's mean ITL, at most 50 ms:
`zcube_lab.emulator.results.run.goodput`; a request has no single ITL to hold to a
threshold); TTFT, ITL and E2E p50/p99 (modelled ms); Request_Rate, the completed requests of
the load window over it; `slo_met`, 1 when the run's TTFT p99 and ITL p99 are within the
draft's thresholds; the link utilization (`link_figures`); and `untrusted`.

The SLO boundary per fabric (`boundary`): the first rate of the ladder at which any trial
missed the SLO, and the highest rate below it (every trial there and below met it), with that
rate's figures; censored when no rate missed (the boundary is at or above the ladder's top).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zcube_lab.core.bmwg import workload
from zcube_lab.core.bmwg.workload import single_turn
from zcube_lab.core.errors import ConfigError

SECTION = "11.1"
MODEL = workload.MODEL
PROMPT_TOKENS = 4096
OUTPUT_TOKENS = 64
PREFILL_SHARE = 0.25  # of the servers prefill (`zcube-lab run --prefill-servers`): the default
# The draft's SLO: the run's TTFT p99 and ITL p99 (modelled ms).
TTFT_P99_MS = 500.0
ITL_P99_MS = 50.0
# Per request, for goodput: TTFT and TPOT (a request's mean inter-token gap), every request
# held to it (attainment 1: goodput counts the requests that met it, not a share).
SLO_TEXT = "ttft=500ms,tpot=50ms"
DRAFT_START_RATE = 1.0  # req/s, the draft's first rate
# Offered rates as shares of `knee_rate`: below it, at it and above it.
RATES = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2)
RATE_MIN, RATE_MAX = 0.05, 2.0
# The figures a boundary carries (the draft's list at the SLO-bounded throughput).
AT_BOUNDARY = (
    "TPS_output", "TPS_input", "Inference_Goodput", "TTFT_p99_ms", "ITL_p99_ms",
    "Request_Rate", "Link_utilization_mean", "Link_utilization_max", "Trunk_utilization_mean",
    "Trunk_utilization_max", "Link_utilization_peak",
)  # fmt: skip


def rates(text: str) -> tuple[float, ...]:
    """The ladder's shares of the knee from "0.25,0.5,1" (empty: `RATES`), ascending, each
    once; a ConfigError naming `tps_rates` and the range otherwise."""
    if not text.strip():
        return RATES
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError("tps_rates", text, "comma-separated shares of the knee") from None
    bad = [v for v in values if not RATE_MIN <= v <= RATE_MAX]
    if bad or not values:
        raise ConfigError(
            "tps_rates", text, f"shares of the prefill knee from {RATE_MIN:g} to {RATE_MAX:g}"
        )
    return tuple(sorted(set(values)))


def prefill_servers(servers: int) -> int:
    """Whole servers that prefill on a fabric of `servers`: `PREFILL_SHARE` of them, at least
    one, leaving one to decode."""
    if servers < 2:
        raise ConfigError("servers", servers, "at least two servers (a prefill and a decode)")
    return min(max(1, round(servers * PREFILL_SHARE)), servers - 1)


def knee_rate(prefill_gpus: int, prefill_step_s: float) -> float:
    """Requests per modelled second the prefill pool computes at most: its engines (one per GPU
    host) over one prompt's prefill step (the caller's
    `zcube_lab.serving.models.prefill_step_seconds` for `PROMPT_TOKENS`)."""
    if prefill_gpus < 1:
        raise ConfigError("prefill_gpus", prefill_gpus, "at least one prefill GPU host")
    if not prefill_step_s > 0:
        raise ConfigError("prefill_step_s", prefill_step_s, "a positive step time")
    return prefill_gpus / prefill_step_s


def rate_of(share: float, knee: float) -> float:
    """The offered rate (req/s, 3 decimals) of a share of the `knee` (req/s)."""
    return round(share * knee, 3)


def draft_share(knee: float) -> float:
    """The draft's first rate, 1 req/s, as a share of this cell's `knee`."""
    return DRAFT_START_RATE / knee


def profile(share: float, knee: float) -> dict[str, Any]:
    """The workload profile of one rung: `PROMPT_TOKENS` prompt and `OUTPUT_TOKENS` output
    tokens, no prefix cache, Poisson arrivals at `share` of the `knee` (the run's
    --prefill-servers sets the split)."""
    if not share > 0:
        raise ConfigError("tps_rates", share, "a positive share of the knee")
    rate = rate_of(share, knee)
    return single_turn(
        f"bmwg-11.1-{share:g}",
        f"BMWG §11.1: single-turn requests of {PROMPT_TOKENS} prompt and {OUTPUT_TOKENS} "
        f"output tokens at {share:g} of the prefill pool's knee ({rate:g} req/s), no prefix "
        "cache.",
        PROMPT_TOKENS, OUTPUT_TOKENS, rate, field="tps_rates",
    )  # fmt: skip


def case_label(share: float) -> str:
    return f"load={share:g}"


def _is_trunk(name: str) -> bool:
    """A link direction named `a:p->b:q` joins two switches; a host end has no port."""
    a, _, b = name.partition("->")
    return ":" in a and ":" in b


def link_figures(link_util: Mapping[str, Mapping[str, Any]], scale: float = 1.0) -> dict[str, Any]:
    """The fabric's utilization in % from a run summary's `link_util` (per link direction, its
    `mean` over the run's window and its `peak` over one scrape interval, shares of the link's
    rate): the mean and the highest mean over every direction (host links both ways and
    switch-to-switch links), the same over the switch-to-switch directions alone (`Trunk_`),
    and the highest peak. `scale` turns the window's means into the load's: the run's window
    over its load window (the drain after the load carries the same requests' bytes)."""
    means = {n: float(v["mean"]) * scale * 100 for n, v in link_util.items() if v.get("mean")
             is not None}  # fmt: skip
    trunk = [v for n, v in means.items() if _is_trunk(n)]
    peaks = [float(v["peak"]) * 100 for v in link_util.values() if v.get("peak") is not None]
    return {
        "Link_utilization_mean": sum(means.values()) / len(means) if means else None,
        "Link_utilization_max": max(means.values(), default=None),
        "Trunk_utilization_mean": sum(trunk) / len(trunk) if trunk else None,
        "Trunk_utilization_max": max(trunk, default=None),
        "Link_utilization_peak": max(peaks, default=None),
        "links": len(means),
        "trunk_links": len(trunk),
    }


def met_slo(ttft_p99_ms: float | None, itl_p99_ms: float | None) -> bool:
    """Whether a run's TTFT p99 and ITL p99 are within the draft's thresholds (a missing one,
    a run without completed requests, is not)."""
    if ttft_p99_ms is None or itl_p99_ms is None:
        return False
    return ttft_p99_ms <= TTFT_P99_MS and itl_p99_ms <= ITL_P99_MS


def trial_figures(summary: Mapping[str, Any], good: Mapping[str, Any], window_s: float,
                  load_wall_s: float | None = None) -> dict[str, Any]:  # fmt: skip
    """A trial's figures from its run's summary.json and `good`, its requests against the
    per-request SLO over the load window `window_s` (modelled s): the caller's
    `good_output_tokens` and `completed` (requests that arrived in the window and completed).
    `load_wall_s` is the load window in wall seconds (the run's clock's; `window_s` when None),
    which the link means are taken over (the summary's `window_s` is wall seconds too)."""
    if not window_s > 0:
        raise ConfigError("window_s", window_s, "a positive load window")
    load_wall_s = window_s if load_wall_s is None else load_wall_s
    kpis = summary.get("bmwg") or {}
    figs: dict[str, Any] = {
        "TPS_output": kpis.get("TPS_output"),
        "TPS_input": kpis.get("TPS_input"),
    }
    tokens = good.get("good_output_tokens")
    figs["Inference_Goodput"] = None if tokens is None else tokens / window_s
    for name, key in (("TTFT", "TTFT"), ("ITL", "ITL"), ("E2E", "E2E_latency")):
        q = kpis.get(key) or {}
        figs[f"{name}_p50_ms"] = q.get("p50")
        figs[f"{name}_p99_ms"] = q.get("p99")
    done = good.get("completed")
    figs["Request_Rate"] = None if done is None else done / window_s
    figs["slo_met"] = 1 if met_slo(figs["TTFT_p99_ms"], figs["ITL_p99_ms"]) else 0
    wall = float(summary.get("window_s") or 0)  # the run's window, wall seconds
    scale = wall / load_wall_s if wall > 0 and load_wall_s else 1.0
    figs.update(link_figures(summary.get("link_util") or {}, scale))
    figs["requests"] = good.get("requests")
    figs["untrusted"] = 0 if summary.get("trustworthy") else 1
    return figs


def _mean(s: Mapping[str, Any], name: str) -> float | None:
    f = s["figures"].get(name)
    return None if not f else f.get("mean")


def boundary(summary: Sequence[Mapping[str, Any]], fabric: str) -> dict[str, Any] | None:
    """One fabric's SLO boundary from `report.summarize`'s rows of §11.1 (params `load` and
    `rate`): `first_failed`, the lowest rate at which any trial missed the SLO (None when none
    did: `censored`), and `rate`, the highest rate below it (None when the lowest missed), with
    its load, its figures' means (`AT_BOUNDARY`) and how many trials up to the first failure the
    lab's verdict did not trust. None when the fabric has no rows."""
    rungs = sorted(
        (s for s in summary if s["section"] == SECTION and s["fabric"] == fabric),
        key=lambda s: s["params"]["rate"],
    )
    if not rungs:
        return None
    failed = next((s for s in rungs if (_mean(s, "slo_met") or 0) < 1), None)
    below = rungs if failed is None else rungs[: rungs.index(failed)]
    at = below[-1] if below else None
    considered = rungs if failed is None else rungs[: rungs.index(failed) + 1]
    untrusted = sum(round((_mean(s, "untrusted") or 0) * s["trials"]) for s in considered)
    return {
        "fabric": fabric,
        "rate": None if at is None else at["params"]["rate"],
        "load": None if at is None else at["params"]["load"],
        "case": None if at is None else at["case"],
        "first_failed_rate": None if failed is None else failed["params"]["rate"],
        "first_failed_load": None if failed is None else failed["params"]["load"],
        "censored": failed is None,
        "untrusted_trials": untrusted,
        "figures": {} if at is None else {n: _mean(at, n) for n in AT_BOUNDARY},
    }


def boundary_words(b: Mapping[str, Any] | None) -> str:
    """A fabric's boundary in a sentence (without the fabric's name)."""
    if b is None:
        return "no trials"
    if b["rate"] is None:
        return (
            f"missed the SLO already at the ladder's lowest rate, {b['first_failed_rate']:g} req/s"
        )
    f = b["figures"]

    def num(name: str, fmt: str) -> str:
        v = f.get(name)
        return "-" if v is None else format(v, fmt)

    where = (
        f"at or above the ladder's top, {b['rate']:g} req/s (no rate missed it)"
        if b["censored"]
        else f"{b['rate']:g} req/s (load {b['load']:g}; {b['first_failed_rate']:g} req/s missed it)"
    )
    trust = (
        f"; {b['untrusted_trials']} trial(s) up to the first missed rate not trusted by the "
        "lab's verdict"
        if b["untrusted_trials"]
        else ""
    )
    return (
        f"{where}: TPS_output {num('TPS_output', ',.0f')}, TPS_input {num('TPS_input', ',.0f')}"
        f", goodput {num('Inference_Goodput', ',.0f')} tokens/s, TTFT p99 "
        f"{num('TTFT_p99_ms', ',.0f')} ms, ITL p99 {num('ITL_p99_ms', '.1f')} ms, links "
        f"{num('Link_utilization_mean', '.2f')}% mean, busiest {num('Link_utilization_max', '.2f')}"
        f"%{trust}"
    )
