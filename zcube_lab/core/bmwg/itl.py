"""§10.2 of the draft (ITL characterization and tail latency), worked out before any lab (pure):
a live-serving test, like §6.1. The draft submits one long-output request (2,048 output tokens),
stamps every token it emits and repeats that under an unloaded fabric, 50% and 90% of capacity
(the last with EP dispatches beside it), asking ITL at p50, p95, p99, p99.9 and its maximum and
the tokens whose ITL exceeds 100 ms (stall events), from at least 10,000 gaps a condition.

Here a case is one offered load; a trial is one `zcube-lab run` of single-turn requests of
`PROMPT_TOKENS` prompt and exactly `OUTPUT_TOKENS` output tokens (GLM-5.1, CFG-E), Poisson
arrivals at the case's rate. `OUTPUT_TOKENS` is 512, not the draft's 2,048: a decode step of
GLM-5.1 is ~30 modelled ms, so one request decodes for ~15 s and a trial's drain waits for the
last one; 512 keeps a trial under a minute of wall time while `RATE` (1 req/s) over 15 s still
gives ~7,700 gaps a trial (the draft's 10,000 over two trials). At `RATE` about 15 sequences
decode at once over the decode engines, far below an engine's 256-sequence batch and the
prefill pool's compute for 1,024-token prompts: the load is below the knee.

What a gap is: the client (`zcube_lab.workloads.client.StreamMeter`) stamps the arrival of each
token chunk of a request's stream (one token a chunk) and writes the request's gaps between
consecutive stamps, in modelled seconds to the µs, as `itl_s` in the run's requests.jsonl (the
lab stamps to 1 ms and better). A trial's ITL distribution is the pool of every gap of every
completed request (a request of n tokens gives n - 1 gaps); its quantiles are linear
interpolation between order statistics (`zcube_lab.core.stats.quantile`). Per trial:
- ITL p50, p90, p95, p99, p99.9 and max (modelled ms);
- jitter: the gaps' standard deviation (ms) and the tail ratio p99/p50;
- TPOT: each request's (E2E - TTFT) / (tokens - 1), its median over requests (ms);
- stall share: the share of gaps above `STALL_FACTOR` x the trial's own p50 (the lab's
  threshold, relative to its decode step), and the draft's stall events: gaps above 100 ms.

What sets the gaps: at the lab's default time scale a gap is one decode step of the engine
(base + per-sequence compute, `zcube_lab.serving.models.decode_step_seconds`), not the fabric,
unless a KV pull or an EP exchange delays a step; so the fabrics are expected to tie, and a tie
here is a measured tie, not an absence of measurement.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from zcube_lab.core.bmwg import workload
from zcube_lab.core.bmwg.workload import single_turn
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.stats import quantile

SECTION = "10.2"
MODEL = workload.MODEL
PROMPT_TOKENS = 1024
OUTPUT_TOKENS = 512
RATE = 1.0  # requests per modelled second
DRAFT_OUTPUT_TOKENS = 2048
DRAFT_LOADS = ("unloaded", "50% of capacity", "90% of capacity + EP dispatches")
DRAFT_STALL_MS = 100.0
DRAFT_SAMPLES = 10_000
STALL_FACTOR = 2.0
# Quantiles a trial reports (percent) and the figure name of each.
QUANTILES: Mapping[str, float] = {
    "p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9,
}  # fmt: skip
MIN_RUN_S = 5.0


def profile(rate: float = RATE) -> dict[str, Any]:
    """The workload profile of one case: single-turn completions of exactly `PROMPT_TOKENS`
    prompt and `OUTPUT_TOKENS` output tokens, no prefix cache, Poisson arrivals at `rate`."""
    return single_turn(
        f"bmwg-10.2-{rate:g}",
        f"BMWG §10.2: single-turn requests of {PROMPT_TOKENS} prompt and "
        f"{OUTPUT_TOKENS} output tokens at {rate:g} req/s, no prefix cache.",
        PROMPT_TOKENS, OUTPUT_TOKENS, rate,
    )  # fmt: skip


def case_label(rate: float) -> str:
    return f"rate={rate:g}"


def gaps_of(stamps: Sequence[float]) -> list[float]:
    """A request's inter-token gaps from its token stamps (seconds, in arrival order)."""
    return [b - a for a, b in itertools.pairwise(stamps)]


def pooled_gaps(records: Iterable[Mapping[str, Any]]) -> list[float]:
    """Every gap (modelled seconds) of every completed request of a run's requests.jsonl."""
    return [float(g) for r in records if r.get("outcome") == "ok" for g in (r.get("itl_s") or ())]


def stall_share(gaps: Sequence[float], threshold: float) -> float | None:
    """The share of `gaps` strictly above `threshold` (None for no gaps)."""
    if not gaps:
        return None
    return sum(1 for g in gaps if g > threshold) / len(gaps)


def tpot_of(record: Mapping[str, Any]) -> float | None:
    """A request's TPOT (seconds): (E2E - TTFT) / (tokens - 1); None below two tokens."""
    e2e, ttft, n = record.get("e2e_s"), record.get("ttft_s"), record.get("output_tokens")
    if e2e is None or ttft is None or not n or int(n) < 2:
        return None
    return (float(e2e) - float(ttft)) / (int(n) - 1)


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1e3, 4)


def itl_figures(gaps_s: Sequence[float]) -> dict[str, Any]:
    """The ITL figures of a pool of gaps (seconds in, ms out; None for every figure when
    there are no gaps)."""
    figs: dict[str, Any] = {}
    for name, q in QUANTILES.items():
        figs[f"ITL_{name}_ms"] = _ms(quantile(gaps_s, q / 100))
    figs["ITL_max_ms"] = _ms(max(gaps_s)) if gaps_s else None
    figs["ITL_mean_ms"] = _ms(statistics.fmean(gaps_s)) if gaps_s else None
    figs["ITL_stdev_ms"] = _ms(statistics.stdev(gaps_s)) if len(gaps_s) > 1 else None
    p50, p99 = figs["ITL_p50_ms"], figs["ITL_p99_ms"]
    figs["ITL_p99_over_p50"] = None if not p50 or p99 is None else round(p99 / p50, 4)
    figs["stall_threshold_ms"] = None if p50 is None else round(STALL_FACTOR * p50, 4)
    share = stall_share(gaps_s, STALL_FACTOR * p50 / 1e3) if p50 is not None else None
    figs["stall_share"] = share
    figs["stall_events"] = sum(1 for g in gaps_s if g * 1e3 > DRAFT_STALL_MS)
    figs["itl_samples"] = len(gaps_s)
    return figs


def trial_figures(summary: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> dict:
    """A trial's figures from its run's summary.json and requests.jsonl rows: `itl_figures`
    over the pooled gaps, TPOT's median and p99 over requests (ms), the requests completed,
    the share of them that carried the full `OUTPUT_TOKENS`, and `untrusted` (1 when the
    lab's verdict did not trust the run: its comparison is then out of reach)."""
    gaps = pooled_gaps(records)
    figs = itl_figures(gaps)
    ok = [r for r in records if r.get("outcome") == "ok"]
    tpots = [t for t in (tpot_of(r) for r in ok) if t is not None]
    figs["TPOT_p50_ms"] = _ms(quantile(tpots, 0.5))
    figs["TPOT_p99_ms"] = _ms(quantile(tpots, 0.99))
    figs["requests"] = len(ok)
    full = sum(1 for r in ok if int(r.get("output_tokens") or 0) >= OUTPUT_TOKENS)
    figs["full_output_share"] = None if not ok else full / len(ok)
    figs["untrusted"] = 0 if summary.get("trustworthy") else 1
    return figs


def cdf_points(gaps_s: Sequence[float], points: int = 200, tail: bool = True) -> list[list[float]]:
    """A compact empirical CDF of the gaps: [ms, share at or below] at `points` evenly spaced
    shares and, with `tail`, at 0.991-0.999 and 0.9991-0.9999 too (the tail a CCDF draws),
    ending at the maximum (for a graph without keeping every gap)."""
    data = sorted(gaps_s)
    if not data:
        return []
    shares = {i / points for i in range(1, points + 1)}
    if tail:
        shares |= {round(1 - k / 1000, 6) for k in range(1, 10)}
        shares |= {round(1 - k / 10000, 6) for k in range(1, 10)}
    out = []
    for share in sorted(shares):
        k = max(0, math.ceil(share * len(data)) - 1)
        out.append([round(data[k] * 1e3, 4), round(share, 6)])
    return out


def check_trial_seconds(seconds: float) -> None:
    """A trial shorter than `MIN_RUN_S` holds too few requests: refused, naming the field."""
    if seconds < MIN_RUN_S:
        raise ConfigError("trial_seconds", seconds, f"at least {MIN_RUN_S:g} s for §10.2")


def parameter_rows(trials: int, trial_seconds: float, draft_trials: int, draft_s: float,
                   rate: float) -> list[tuple[str, str, str]]:  # fmt: skip
    """(parameter, the draft's, this run's), printed before the run and on the page."""
    return [
        ("requests", f"one long-output request ({DRAFT_OUTPUT_TOKENS:,} output tokens)",
         f"Poisson stream of {PROMPT_TOKENS:,} prompt + {OUTPUT_TOKENS} output tokens "
         f"({MODEL}, CFG-E), no prefix cache"),
        ("load", "; ".join(DRAFT_LOADS),
         f"{rate:g} req/s (~{rate * OUTPUT_TOKENS * 0.03:.0f} sequences decoding at once: "
         "below the knee, no background, no EP)"),
        ("ITL quantiles", "P50, P95, P99, P99.9, max", "p50, p90, p95, p99, p99.9, max"),
        ("stall", f"ITL > {DRAFT_STALL_MS:g} ms (count)",
         f"count > {DRAFT_STALL_MS:g} ms, and share > {STALL_FACTOR:g} x the trial's p50"),
        ("samples", f">= {DRAFT_SAMPLES:,} gaps a condition",
         f"~{rate * trial_seconds * (OUTPUT_TOKENS - 1):,.0f} a trial, "
         f"~{trials * rate * trial_seconds * (OUTPUT_TOKENS - 1):,.0f} over the trials"),
        ("trials", f"{draft_trials} x {draft_s:g} s", f"{trials} x {trial_seconds:g} s"),
    ]  # fmt: skip
