"""§9.4 of the draft (Jain fairness index for decode worker utilization), worked out before any
lab (pure): a live-serving test, like §6.1. A case is one offered load; a trial is one
`zcube-lab run` of single-turn requests of `PROMPT_TOKENS` prompt and `OUTPUT_TOKENS` output
tokens on a fabric whose GPU hosts are half prefill, half decode (8 decode workers on 16 GPU
hosts: the draft's smallest N_D), Poisson arrivals at the case's share of the workload's knee.

The knee is prefill compute: each prompt costs a prefill engine
`prefill_step_seconds(GLM-5.1, PROMPT_TOKENS)` (0.92 modelled s at 16,384 tokens), so the
prefill pool serves at most `knee_rate` requests a second (8.7 on 8 prefill GPUs); a decode
engine batches up to 256 sequences at ~31 ms a step and the KV pulls use a few percent of the
decode NICs, so neither comes first. The draft names no rate for §9.4 (a "sustained request
stream"); the lab runs `LOADS`: half the knee (requests seldom queue) and 0.9 of it (prefill
queues build, the balance is under pressure).

What a decode worker's share x is, per the draft's three metrics, each read after the run from
the decode engines' own vLLM-style counters (Prometheus, scraped every second; `totals`):
- output TPS: tokens it generated, `vllm:generation_tokens_total` (JFI_decode, the headline);
- KV cache receive rate: KV bytes it pulled, `vllm:nixl_bytes_transferred_sum`;
- GPU utilization: request-seconds it held in decode, `vllm:request_decode_time_seconds_sum`
  (its mean running requests times the run; the mock engine has no GPU busy counter, and a
  continuous-batching engine's load is its batch).
Jain's index J = (sum x)^2 / (n sum x^2) over the n decode workers, 1 when equal, 1/n when one
worker takes everything; the draft's max/min ratio beside it (None when a worker had none).

Who decides the balance is the gateway's routing policy (least outstanding requests, ties in
turn: `zcube_lab.serving.routing`), not the fabric, unless the fabric slows some decode workers'
KV pulls enough to keep their requests outstanding longer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from zcube_lab.core.bmwg import workload
from zcube_lab.core.bmwg.trials import jain
from zcube_lab.core.bmwg.workload import single_turn
from zcube_lab.core.errors import ConfigError

SECTION = "9.4"
MODEL = workload.MODEL
PROMPT_TOKENS = 16384
OUTPUT_TOKENS = 32
# Offered load as a share of `knee_rate`: below the knee and near it.
LOADS = (0.5, 0.9)
LOAD_MIN, LOAD_MAX = 0.05, 1.5
# The workload profile's prefill servers, written for 4 servers (the lab keeps the share:
# 4 of 8 servers, 8 of 16 GPU hosts prefill, the other 8 decode).
PROFILE_PREFILL_SERVERS = 2
DRAFT_WORKERS = (8, 16, 32, 64)

# The metrics a worker's share comes from: figure suffix -> (metric, the draft's name).
METRICS: Mapping[str, tuple[str, str]] = {
    "decode": ("vllm:generation_tokens_total", "output TPS"),
    "kv": ("vllm:nixl_bytes_transferred_sum", "KV cache receive rate"),
    "busy": ("vllm:request_decode_time_seconds_sum", "GPU utilization (request-seconds)"),
}
DECODE_JOB = "decode"


def loads(text: str) -> tuple[float, ...]:
    """Offered loads from "0.5,0.9" (empty: `LOADS`); ConfigError naming the field and range."""
    if not text.strip():
        return LOADS
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError("jfi_loads", text, "comma-separated shares of the knee") from None
    bad = [v for v in values if not LOAD_MIN <= v <= LOAD_MAX]
    if bad or not values:
        raise ConfigError("jfi_loads", text, f"shares of the knee from {LOAD_MIN} to {LOAD_MAX}")
    return values


def prefill_gpus(gpus: int) -> int:
    """GPU hosts that prefill on a fabric of `gpus` (the profile's share: half)."""
    return gpus // 2


def decode_workers(gpus: int) -> int:
    """Decode workers (one engine per GPU host) on a fabric of `gpus` GPU hosts."""
    return gpus - prefill_gpus(gpus)


def knee_rate(gpus: int, prefill_step_s: float) -> float:
    """Requests per modelled second the prefill pool computes at most: its engines over one
    prompt's prefill step (`prefill_step_s`, the model's compute for `PROMPT_TOKENS`: the
    caller's `zcube_lab.serving.models.prefill_step_seconds`)."""
    if not prefill_step_s > 0:
        raise ConfigError("prefill_step_s", prefill_step_s, "a positive step time")
    return prefill_gpus(gpus) / prefill_step_s


def rate_of(load: float, knee: float) -> float:
    """The offered rate (req/s, 3 decimals) of a load level, a share of the `knee` (req/s)."""
    return round(load * knee, 3)


def profile(load: float, knee: float) -> dict[str, Any]:
    """The workload profile of one case: single-turn completions of exactly `PROMPT_TOKENS`
    prompt and `OUTPUT_TOKENS` output tokens, no prefix cache, Poisson arrivals at `load` of the
    `knee` (req/s), half the servers prefilling."""
    if load <= 0:
        raise ConfigError("jfi_loads", load, "a positive share of the knee")
    rate = rate_of(load, knee)
    return single_turn(
        f"bmwg-9.4-{load:g}",
        f"BMWG §9.4: single-turn requests of {PROMPT_TOKENS} prompt and "
        f"{OUTPUT_TOKENS} output tokens at {load:g} of the prefill pool's knee ({rate:g} req/s), "
        "no prefix cache, half the servers prefill.",
        PROMPT_TOKENS, OUTPUT_TOKENS, rate, prefill_servers=PROFILE_PREFILL_SERVERS,
    )  # fmt: skip


def case_label(load: float) -> str:
    return f"load={load:g}"


_LINE = re.compile(r"^\{(?P<labels>.*)\} (?P<value>\S+) (?P<ts>-?\d+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_dump(text: str) -> dict[tuple[str, str, str], list[tuple[int, float]]]:
    """`promtool tsdb dump` output as {(metric, job, engine): [(ms, value), ...]} in time
    order; lines that are not samples are skipped."""
    out: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        labels = dict(_LABEL.findall(m["labels"]))
        key = (labels.get("__name__", ""), labels.get("job", ""), labels.get("engine", ""))
        out.setdefault(key, []).append((int(m["ts"]), float(m["value"])))
    return {k: sorted(v) for k, v in out.items()}


def counter_total(samples: Sequence[tuple[int, float]]) -> float:
    """What a counter that started at 0 counted over its samples: its last value, plus the
    value before each reset (a drop). NaN samples are skipped: Prometheus writes one (a
    staleness marker) when the run's teardown stops the engine."""
    total, prev = 0.0, 0.0
    for _, v in samples:
        if math.isnan(v):
            continue
        if v < prev:
            total += prev
        prev = v
    return total + prev


def totals(
    series: Mapping[tuple[str, str, str], Sequence[tuple[int, float]]], engines: Sequence[str]
) -> dict[str, dict[str, float | None]]:
    """Per metric suffix of `METRICS`: each decode engine's total (by its `engine` label, in
    `engines`' order; None when its series is missing)."""
    out: dict[str, dict[str, float | None]] = {}
    for suffix, (metric, _) in METRICS.items():
        row: dict[str, float | None] = {}
        for e in engines:
            s = series.get((metric, DECODE_JOB, e))
            row[e] = None if not s else counter_total(s)
        out[suffix] = row
    return out


def max_min(values: Iterable[float]) -> float | None:
    """The largest share over the smallest (None when the smallest is 0: one worker idle)."""
    xs = [float(v) for v in values]
    if not xs or min(xs) <= 0:
        return None
    return max(xs) / min(xs)


def trial_figures(
    summary: Mapping[str, Any], shares: Mapping[str, Mapping[str, float | None]], workers: int
) -> dict[str, Any]:
    """A trial's figures: per metric JFI_<suffix> and maxmin_<suffix> over the decode workers
    (None when a worker's series is missing or no worker had any), the TTFT p50 and p99
    (modelled ms) and TPS_output from the run's summary, the workers counted, and `untrusted`
    (1 when the lab's verdict did not trust the run)."""
    figs: dict[str, Any] = {}
    for suffix in METRICS:
        vals = list((shares.get(suffix) or {}).values())
        known = [v for v in vals if v is not None]
        ok = len(known) == workers and len(vals) == workers and sum(known) > 0
        figs[f"JFI_{suffix}"] = jain(known) if ok else None
        figs[f"maxmin_{suffix}"] = max_min(known) if ok else None
    kpis = summary.get("bmwg") or {}
    ttft = kpis.get("TTFT") or {}
    figs["TTFT_p50_ms"] = ttft.get("p50")
    figs["TTFT_p99_ms"] = ttft.get("p99")
    figs["TPS_output"] = kpis.get("TPS_output")
    figs["decode_workers"] = workers
    figs["requests"] = (summary.get("client") or {}).get("completed")
    figs["untrusted"] = 0 if summary.get("trustworthy") else 1
    return figs
