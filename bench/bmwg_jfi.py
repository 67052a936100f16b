"""docs/BMWG.md's §9.4 part (Jain fairness index over the decode workers), from a committed
`bmwg run 9.4` (`zcube_lab.core.bmwg.fairness`): its parameters beside the draft's, one row
per load level and fabric (each index's mean ± half its 95% interval, the max/min ratio, TTFT
p50 and p99, the runs trusted), and what the comparison says, in words. `bench.bmwg_tables`
puts it under §9.4's results."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench.bmwg_common import LABEL, comparison_words, trials_of, trusted
from zcube_lab.core.bmwg import fairness as f94

INDEXES = ("JFI_decode", "JFI_kv", "JFI_busy")


def parameter_table(d: Mapping[str, Any], table: Callable[..., list[str]]) -> list[str]:
    """The draft's §9.4 parameters beside the run's."""
    t = d["draft_trials"]["9.4"]
    levels = ", ".join(f"{v:g} ({v * d['knee_rate']:.2f} req/s)" for v in d["levels"])
    rows = [
        ["decode workers N_D", ", ".join(map(str, f94.DRAFT_WORKERS)),
         f"{d['decode_workers']} (half of {d['gpus']} GPU hosts; the other half prefill)"],
        ["load", "a sustained request stream (no rate named)",
         f"{levels} of the knee, {d['knee_rate']:.2f} req/s: the prefill pool's compute for "
         f"{d['prompt_tokens']:,}-token prompts"],
        ["requests", "-", f"{d['prompt_tokens']:,} prompt + {d['output_tokens']} output tokens, "
         f"{f94.MODEL} (CFG-E), no prefix cache, Poisson arrivals"],
        ["metrics", "KV cache receive rate, GPU utilization, output TPS: JFI and max/min",
         "; ".join(f"{name}: {metric}" for metric, name in f94.METRICS.values())],
        ["trials", f"{t[0]} x {t[1]:g} s", f"{d['trials']} x {d['trial_seconds']:g} s"],
    ]  # fmt: skip
    return [*table(["parameter", "draft", "this run"], rows), ""]


def level_rows(d: Mapping[str, Any], cell: Callable[[Any], str]) -> list[list[str]]:
    """One row per load level and fabric."""
    out = []
    order = {f: i for i, f in enumerate(d["fabrics"])}
    summary = [s for s in d["summary"] if s["section"] == "9.4"]
    for s in sorted(summary, key=lambda s: (s["params"]["load"], order.get(s["fabric"], 9))):
        f = s["figures"]
        trials = trials_of(d, "9.4", s["case"], s["fabric"])
        workers = {r["figures"].get("decode_workers") for r in trials}
        out.append([f"{s['params']['load']:g} ({s['params']['rate']:g} req/s)",
                    LABEL.get(s["fabric"], s["fabric"]),
                    ", ".join(str(w) for w in sorted(workers, key=str)),
                    *(cell(f.get(k)) for k in INDEXES), cell(f.get("maxmin_decode")),
                    cell(f.get("TTFT_p50_ms")), cell(f.get("TTFT_p99_ms")),
                    cell(f.get("requests")), trusted(trials)])  # fmt: skip
    return out


def verdict_words(d: Mapping[str, Any]) -> str:
    """The fabric comparison of a §9.4 run in a sentence: a measured tie when every index and
    TTFT p99 is within the trials' spread against every other fabric at every level."""
    return comparison_words(
        d, "9.4",
        "All {n} comparisons (three indexes and TTFT p99, per level, ZCube against "
        "each other fabric) are within the trials' spread: a measured tie.",
    )  # fmt: skip


def fairness_section(d: Mapping[str, Any], table: Callable[..., list[str]],
                     cell: Callable[[Any], str]) -> list[str]:  # fmt: skip
    """The §9.4 part of a committed run's results."""
    head = ["load (rate)", "fabric", "decode workers", "JFI tokens", "JFI KV bytes",
            "JFI decode time", "max/min tokens", "TTFT p50 ms", "TTFT p99 ms", "requests",
            "runs trusted"]  # fmt: skip
    return [
        "§9.4 parameters, the draft's and this run's:",
        "",
        *parameter_table(d, table),
        "§9.4 Jain's index over the decode workers per load level (1: every worker the same "
        "share; 1/n: one worker took all), of tokens generated (output TPS), KV bytes pulled "
        "(KV receive rate) and request-seconds in decode (the GPU-utilization stand-in), each "
        "the mean over trials ± half its 95% interval; TTFT in modelled ms:",
        "",
        *table(head, level_rows(d, cell)),
        "",
        "The gateway's routing policy (least outstanding requests, ties taken in turn), not "
        "the fabric, decides how evenly the decode workers are loaded; a fabric could tilt it "
        "only by slowing some decode workers' KV pulls so that their requests stay outstanding "
        "longer. " + verdict_words(d),
        "",
    ]
