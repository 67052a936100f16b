"""§10.1 of the draft (TTFT under varying prompt lengths), worked out before any lab (pure): a
live-serving test, like §6.1. The draft submits single requests with no concurrent load at
prompt lengths of 128 to 16,384 tokens, splits each TTFT into T_prefill, T_transfer and
T_decode_init, and asks TTFT, T_transfer and T_transfer/TTFT at P50, P95 and P99 per length
over at least 100 repetitions, drawn as TTFT p50 and p99 lines against prompt length with
T_transfer shaded, the results naming the configuration (`zcube_lab.core.bmwg.configs`).

Here a case is one prompt length; a trial is one `zcube-lab run` of single-turn requests of
exactly that many prompt tokens and `OUTPUT_TOKENS` output tokens (GLM-5.1: CFG-E), no prefix
cache, three prefill servers to one decode server as in §6.1. No concurrent load: the lab's load
generator is open-loop only (`zcube-lab run` drives `zcube_lab/workloads/locustfile.py`; the
closed-loop locustfile is a separate tool), so requests arrive evenly spaced (`fixed`
arrivals), one every `gap_s`: `GAP_FACTOR` times the request's expected end-to-end time, so a
request has finished before the next is sent. Each trial checks it from the client's
requests.jsonl: `in_flight_max`, the most requests between their send and their last token at
once, must be 1 (`overlapped` 1 otherwise: the comparison is then out of reach).

Per trial, over every request (modelled ms): TTFT at the client (requests.jsonl), and T_prefill,
T_transfer and T_decode_init from the gateway's and the KV logs (the same per-request split as
§6.1, `zcube_lab.emulator.results.fabric.transfers.request_parts`), each at p50, p95 and p99;
T_transfer/TTFT per request (its transfer over its TTFT at the gateway, the three parts' sum)
at the same quantiles; the repetitions (completed requests). The draft's 100 repetitions a
length are the trials' sum here (`repetitions` in the parameter lines).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from zcube_lab.core.bmwg import ttft as t61
from zcube_lab.core.bmwg import workload
from zcube_lab.core.bmwg.configs import LAB, describe
from zcube_lab.core.bmwg.workload import single_turn
from zcube_lab.core.clock import Clock
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.stats import quantile

SECTION = "10.1"
DRAFT_PROMPTS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
DRAFT_REPETITIONS = 100
QUANTILES = (50, 95, 99)
OUTPUT_TOKENS = 2  # TTFT is the figure: the fewest tokens a stream with a second step has
MODEL = workload.MODEL
PREFILL_SERVERS = 3
# A request is sent every gap: GAP_FACTOR x its expected end-to-end time (rounded up to
# GAP_STEP_S), at least MIN_GAP_S. The estimate adds OVERHEAD_S to the compute model's time
# (routing, the hand-overs and the stream: §6.1's 128-token TTFT is ~60 ms against ~45 ms
# of modelled prefill and decode).
GAP_FACTOR = 1.5
MIN_GAP_S = 0.25
GAP_STEP_S = 0.05
OVERHEAD_S = 0.05
RATIO = "T_transfer_over_TTFT"
UNDILATED = Clock()  # the live lab's default scale (k = 1)


def prompt_lengths(text: str) -> tuple[int, ...]:
    """§10.1's prompt lengths from "128,2048" (empty: the draft's eight, 128-16,384); a
    ConfigError naming the field and the allowed range for anything else."""
    return DRAFT_PROMPTS if not text.strip() else t61.prompt_lengths(text)


def e2e_estimate_s(prefill_s: float, transfer_s: float, decode_step_s: float,
                   output_tokens: int = OUTPUT_TOKENS) -> float:  # fmt: skip
    """A lone request's expected end-to-end time (modelled s): its prefill, its KV pull, one
    decode step a token and `OVERHEAD_S`."""
    return OVERHEAD_S + prefill_s + transfer_s + output_tokens * decode_step_s


def gap_s(e2e_s: float) -> float:
    """The time between two requests' sends for an expected end-to-end time `e2e_s`."""
    if not e2e_s > 0:
        raise ConfigError("e2e_s", e2e_s, "a positive expected end-to-end time")
    steps = math.ceil(round(GAP_FACTOR * e2e_s / GAP_STEP_S, 9))
    return round(max(MIN_GAP_S, steps * GAP_STEP_S), 6)


def repetitions(trial_seconds: float, gap: float) -> int:
    """Requests a trial sends (`fixed` arrivals at 1/gap: one at 0, then every gap)."""
    return math.ceil(trial_seconds / gap - 1e-9)


def profile(prompt_tokens: int, gap: float) -> dict[str, Any]:
    """The workload profile of one case: §6.1's single-turn requests of exactly
    `prompt_tokens` prompt and `OUTPUT_TOKENS` output tokens, one every `gap` seconds."""
    out = single_turn(
        f"bmwg-10.1-{prompt_tokens}",
        f"BMWG §10.1: single requests of exactly {prompt_tokens} prompt tokens and "
        f"{OUTPUT_TOKENS} output tokens, one every {gap:g} s (no concurrent load), no prefix "
        "cache.",
        prompt_tokens, OUTPUT_TOKENS, 1 / gap, prefill_servers=PREFILL_SERVERS,
    )  # fmt: skip
    out["arrival"] = {"process": "fixed", "rate": round(1 / gap, 9)}
    return out


def case_label(prompt_tokens: int) -> str:
    return f"prompt_tokens={prompt_tokens}"


def in_flight_max(records: Iterable[Mapping[str, Any]]) -> int:
    """The most requests in flight at once: each from its send (`sent_s`) to its end
    (`sent_s + e2e_s`), in the client's requests.jsonl (one driver's clock); a request that
    ends as the next is sent does not overlap it."""
    events = []
    for r in records:
        if r.get("sent_s") is None or r.get("e2e_s") is None:
            continue
        start = float(r["sent_s"])
        events += [(start, 1), (start + float(r["e2e_s"]), -1)]
    most = now = 0
    for _, step in sorted(events):  # at equal times an end (-1) sorts before a send
        now += step
        most = max(most, now)
    return most


def samples(records: Sequence[Mapping[str, Any]],
            parts: Sequence[tuple[float, float, float]],
            clock: Clock = UNDILATED) -> dict[str, list[float]]:  # fmt: skip
    """Per figure, every request's value in modelled seconds: TTFT of each completed request
    at the client; T_prefill, T_transfer and T_decode_init of each request the logs split
    (`parts`: wall seconds, made modelled by the run's `clock`); and the ratio T_transfer/TTFT,
    its transfer over the three parts' sum (its TTFT at the gateway)."""
    ok = [r for r in records if r.get("outcome") == "ok" and r.get("ttft_s") is not None]
    out: dict[str, list[float]] = {"TTFT": [float(r["ttft_s"]) for r in ok]}
    for i, name in enumerate(t61.PARTS[1:]):
        out[name] = [clock.modelled(p[i]) for p in parts]
    out[RATIO] = [p[1] / sum(p) for p in parts if sum(p) > 0]
    return out


def trial_figures(summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]],
                  parts: Sequence[tuple[float, float, float]],
                  clock: Clock = UNDILATED) -> dict[str, Any]:  # fmt: skip
    """A trial's figures: §6.1's (`ttft.trial_figures`) at p50, p95 and p99 over every
    request, T_transfer/TTFT at the same quantiles, the repetitions (completed requests), the
    requests the logs split, `in_flight_max` and `overlapped` (1 when requests overlapped:
    not §10.1's single requests), and `untrusted` from the lab's verdict. `clock`: the run's
    (`RunSummary.clock`), which turns the logs' wall seconds into modelled ones."""
    got = samples(records, parts, clock)
    figs = t61.trial_figures(summary, got, QUANTILES)
    for q in QUANTILES:
        figs[f"{RATIO}_p{q}"] = quantile(got[RATIO], q / 100)
    figs["repetitions"] = len(got["TTFT"])
    figs["requests"] = len(parts)
    figs["in_flight_max"] = in_flight_max(records)
    figs["overlapped"] = int(figs["in_flight_max"] > 1)
    return figs


def parameter_rows(lengths: Sequence[int], gaps: Mapping[int, float], trials: int,
                   trial_seconds: float) -> list[tuple[str, str, str]]:  # fmt: skip
    """(parameter, the draft's, this run's), printed before the run and on the page."""
    reps = ", ".join(f"{n:,}: {repetitions(trial_seconds, gaps[n]) * trials}" for n in lengths)
    return [
        ("prompt lengths", ", ".join(f"{n:,}" for n in DRAFT_PROMPTS) + " tokens",
         ", ".join(f"{n:,}" for n in lengths) + f" tokens ({OUTPUT_TOKENS} output tokens)"),
        ("load", "single requests, no concurrent load",
         "one request every " + ", ".join(f"{gaps[n]:g}" for n in lengths) + " s "
         f"(by length: {GAP_FACTOR:g} x its expected end-to-end time), open loop; at most "
         "1 in flight, checked per trial"),
        ("repetitions", f">= {DRAFT_REPETITIONS} per prompt length",
         f"{trials} trial(s) x {trial_seconds:g} s, per length {reps}"),
        ("quantiles", "TTFT, T_transfer, T_transfer/TTFT at P50, P95, P99",
         "the same, and T_prefill, T_decode_init"),
        ("configuration", "CFG-A..D, or CFG-E with L, H_kv, D, C, P_bytes", describe(LAB)),
    ]  # fmt: skip


def series(summary: Sequence[Mapping[str, Any]], fabric: str) -> list[dict[str, float]]:
    """The graph's points of one fabric: per prompt length (ascending), the trials' mean of
    TTFT p50 and p99 and of T_transfer p50 and p99 (ms), from bmwg.json's summary."""
    out = []
    names = ("TTFT_p50_ms", "TTFT_p99_ms", "T_transfer_p50_ms", "T_transfer_p99_ms")
    for s in summary:
        if s["section"] != SECTION or s["fabric"] != fabric:
            continue
        figs = [s["figures"].get(n) for n in names]
        if any(f is None for f in figs):
            continue
        pt = {"prompt_tokens": float(s["params"]["prompt_tokens"])}
        pt.update({n: float(f["mean"]) for n, f in zip(names, figs, strict=True)})
        out.append(pt)
    return sorted(out, key=lambda p: p["prompt_tokens"])
