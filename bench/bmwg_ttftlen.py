"""docs/BMWG.md's §10.1 part (TTFT under varying prompt lengths), from a committed `bmwg run
10.1` (`zcube_lab.core.bmwg.ttftlen`): its parameters beside the draft's, one row per prompt
length and fabric (each figure's mean ± half its 95% interval over the trials), the comparison
in words; the page's sentence on §10.1; the draft's graph (TTFT p50 and p99 against prompt
length, T_transfer shaded, one panel a fabric); and the reference configurations CFG-A..E with
their KV bytes in the lab (`zcube_lab.core.bmwg.configs`). `bench.bmwg_tables` puts them in
place."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bench.bmwg_common import LABEL, comparison_words, trials_of, trusted
from zcube_lab.core.bmwg import configs
from zcube_lab.core.bmwg import ttftlen as t101
from zcube_lab.core.bmwg.trials import OUT_OF_REACH, WITHIN

S = t101.SECTION
COLUMNS = (
    ("TTFT_p50_ms", "TTFT p50"), ("TTFT_p95_ms", "p95"), ("TTFT_p99_ms", "p99"),
    ("T_transfer_p50_ms", "T_transfer p50"), ("T_transfer_p95_ms", "p95"),
    ("T_transfer_p99_ms", "p99"),
    ("T_transfer_over_TTFT_p50", "T_transfer/TTFT p50"), ("T_transfer_over_TTFT_p95", "p95"),
    ("T_transfer_over_TTFT_p99", "p99"),
    ("T_prefill_p50_ms", "T_prefill p50"), ("T_decode_init_p50_ms", "T_decode_init p50"),
)  # fmt: skip


def parameter_table(d: Mapping[str, Any], table: Callable[..., list[str]]) -> list[str]:
    """The draft's §10.1 parameters beside the run's."""
    lengths = [int(n) for n in d["prompts"]]
    gaps = {int(n): float(g) for n, g in d["gaps_s"].items()}
    rows = [list(r) for r in t101.parameter_rows(lengths, gaps, d["trials"], d["trial_seconds"])]
    return [*table(["parameter", "draft", "this run"], rows), ""]


def _pct(fig: Mapping[str, Any] | None) -> str:
    if fig is None:
        return "-"
    half = "" if fig["ci95_high"] is None else f" ± {100 * (fig['ci95_high'] - fig['mean']):.1f}"
    return f"{100 * fig['mean']:.1f}{half}%"


def fabric_rows(d: Mapping[str, Any], cell: Callable[[Any], str]) -> list[list[str]]:
    """One row per prompt length and fabric."""
    order = {f: i for i, f in enumerate(d["fabrics"])}
    summary = [s for s in d["summary"] if s["section"] == S]
    out = []
    for s in sorted(summary, key=lambda s: (s["params"]["prompt_tokens"],
                                            order.get(s["fabric"], 9))):  # fmt: skip
        trials = trials_of(d, S, s["case"], s["fabric"])
        f = s["figures"]
        cells = [_pct(f.get(k)) if k.startswith("T_transfer_over") else cell(f.get(k))
                 for k, _ in COLUMNS]  # fmt: skip
        reps = sum(int(r["figures"].get("repetitions") or 0) for r in trials)
        most = max((int(r["figures"].get("in_flight_max") or 0) for r in trials), default=0)
        out.append([f"{s['params']['prompt_tokens']:,}", LABEL.get(s["fabric"], s["fabric"]),
                    *cells, str(reps), str(most), trusted(trials)])  # fmt: skip
    return out


def untrusted(d: Mapping[str, Any]) -> list[str]:
    """The untrusted §10.1 trials: "fabric, N tokens, trial i: the verdict's reasons by kind
    (each reason's text before its first ":" or " in <number>", a core's number dropped)"."""
    out = []
    for r in d["rows"]:
        if r["section"] != S or not r["figures"].get("untrusted"):
            continue
        kinds = dict.fromkeys(re.sub(r"^cpu\d+", "a core", re.split(r":| in \d", x)[0])
                              for x in r.get("reasons") or [])  # fmt: skip
        reasons = "; ".join(kinds) or "no reason given"
        out.append(f"{LABEL.get(r['fabric'], r['fabric'])} {r['params']['prompt_tokens']:,} "
                   f"tokens trial {r['trial'] + 1}: {reasons}")  # fmt: skip
    return out


def verdict_words(d: Mapping[str, Any]) -> str:
    text = comparison_words(
        d, S,
        "All {n} comparisons (TTFT p50 and p99, T_transfer p50 and T_transfer/TTFT p50 at "
        "each prompt length, ZCube against each other fabric) are within the trials' spread.",
    )  # fmt: skip
    why = untrusted(d)
    if why:
        text += " Runs the lab's verdict did not trust: " + "; ".join(why) + "."
    return text


def ttftlen_section(d: Mapping[str, Any], table: Callable[..., list[str]],
                    cell: Callable[[Any], str]) -> list[str]:  # fmt: skip
    """The §10.1 part of a committed run's results."""
    head = ["prompt tokens", "fabric", *(name for _, name in COLUMNS), "requests",
            "most in flight", "runs trusted"]  # fmt: skip
    return [
        "§10.1 parameters, the draft's and this run's:",
        "",
        *parameter_table(d, table),
        "§10.1 per prompt length and fabric: quantiles over every request of a trial (modelled "
        "ms), TTFT at the client and its parts from the gateway's and the KV logs, T_transfer/"
        "TTFT per request (over its TTFT at the gateway), each the mean over the trials ± half "
        "its 95% interval; the requests over all trials and the most in flight at once in any "
        f"trial; configuration {d.get('configuration_terms', 'CFG-E')}:",
        "",
        *table(head, fabric_rows(d, cell)),
        "",
        verdict_words(d),
        "",
    ]


def ttftlen_sentences(docs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The page's §10.1 sentence: TTFT p50 at the shortest and longest prompt, T_transfer's
    share of TTFT (p50) over every length and fabric, and the comparison's count."""
    ds = [d for d in docs if S in d.get("sections", ())]
    sums = [s for d in ds for s in d["summary"] if s["section"] == S]
    if not sums:
        return []
    lengths = sorted({int(s["params"]["prompt_tokens"]) for s in sums})

    def span(n: int, fig: str, scale: float = 1.0, digits: int = 0) -> str:
        vals = [scale * s["figures"][fig]["mean"] for s in sums
                if s["params"]["prompt_tokens"] == n and s["figures"].get(fig)]  # fmt: skip
        if not vals:
            return "-"
        lo, hi = f"{min(vals):,.{digits}f}", f"{max(vals):,.{digits}f}"
        return lo if lo == hi else f"{lo}-{hi}"

    ratio = "T_transfer_over_TTFT_p50"
    cs = [c for d in ds for c in d["comparison"] if c["section"] == S]
    within = sum(1 for c in cs if c["verdict"] == WITHIN)
    reach = sum(1 for c in cs if c["verdict"] == OUT_OF_REACH)
    most = max((int(r["figures"].get("in_flight_max") or 0) for d in ds for r in d["rows"]
                if r["section"] == S), default=0)  # fmt: skip
    lo, hi = lengths[0], lengths[-1]

    def mean(n: int, fig: str) -> float | None:
        vals = [s["figures"][fig]["mean"] for s in sums
                if s["params"]["prompt_tokens"] == n and s["figures"].get(fig)]  # fmt: skip
        return sum(vals) / len(vals) if vals else None

    a, b = mean(lo, ratio), mean(hi, ratio)
    trend = ""
    if a is not None and b is not None and lo != hi:
        trend = (": the share falls as the prompt grows (prefill grows faster than the KV pull)"
                 if b < a else ": the share grows with the prompt")  # fmt: skip
    text = (
        f"In §10.1 (single requests, at most {most} in flight; CFG-E) the fabrics' mean TTFT "
        f"p50 is {span(lo, 'TTFT_p50_ms')} ms at {lo:,} prompt tokens and "
        f"{span(hi, 'TTFT_p50_ms')} ms at {hi:,}, T_transfer's share of it (p50) "
        f"{span(lo, ratio, 100, 1)}% and {span(hi, ratio, 100, 1)}%{trend}; {within} of "
        f"{len(cs)} comparisons are within the trials' spread"
    )
    if reach:
        text += f", {reach} out of reach (a run the lab's verdict did not trust)"
    return [text + "."]


def draw(fig: Any, d: Mapping[str, Any]) -> None:
    """The draft's graph, one panel a fabric: TTFT p50 and p99 (modelled ms, the trials'
    mean) against prompt length, and T_transfer shaded: up to its p50, lighter to its p99."""
    fabrics = [f for f in d["fabrics"] if t101.series(d["summary"], f)]
    axes = fig.subplots(1, max(1, len(fabrics)), squeeze=False)[0]
    for ax, fab in zip(axes, fabrics, strict=False):
        pts = t101.series(d["summary"], fab)
        xs = [p["prompt_tokens"] for p in pts]
        ax.plot(xs, [p["TTFT_p50_ms"] for p in pts], "o-", label="TTFT p50")
        ax.plot(xs, [p["TTFT_p99_ms"] for p in pts], "s--", label="TTFT p99")
        floor = min(p["T_transfer_p50_ms"] for p in pts) / 2
        ax.fill_between(xs, floor, [p["T_transfer_p50_ms"] for p in pts], alpha=0.35,
                        color="tab:red", label="T_transfer to its p50")  # fmt: skip
        ax.fill_between(xs, [p["T_transfer_p50_ms"] for p in pts],
                        [p["T_transfer_p99_ms"] for p in pts], alpha=0.15, color="tab:red",
                        label="T_transfer p50 to p99")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{x:,.0f}" for x in xs])
        ax.set(yscale="log", title=LABEL.get(fab, fab), xlabel="prompt tokens",
               ylabel="ms (modelled)")  # fmt: skip


def config_lines(table: Callable[..., list[str]]) -> list[str]:
    """The reference configurations CFG-A..E: the formula's terms, S_KV at 4K, 32K and 128K
    context (the draft's figure beside it), its bytes in the lab and whether the lab carries
    one pull of it."""
    from zcube_lab.core.bmwg.scaling import default_scale

    scale = default_scale().bandwidth_scale
    head = ["config", "model", "terms", *(f"S_KV @ {c}; lab bytes; one pull?"
                                          for c in configs.CONTEXTS)]  # fmt: skip
    return [
        "The draft's reference configurations (§10.1's table; S_KV = 2 x L x H_kv x D x C x "
        f"P_bytes). Lab bytes at the live lab's scale (one lab byte stands for {scale:,.0f} "
        'real ones); "one pull?": whether one transfer of it at the 400 Gb/s NIC\'s modelled '
        f"rate fits the decode engine's {configs.KV_TIMEOUT_S:g} s pull timeout, the lab's "
        "limit on one transfer (the live runs serve CFG-E only).",
        "",
        *table(head, configs.table_rows(scale)),
        "",
        f"- {configs.describe(configs.LAB)}.",
        f"- {configs.DRAFT_CHECK}",
        "",
    ]
