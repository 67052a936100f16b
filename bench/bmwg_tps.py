"""docs/BMWG.md's §11.1 part (aggregate tokens per second), from a committed `bmwg run 11.1`
(`zcube_lab.core.bmwg.throughput`): its parameters beside the draft's, one row per offered rate
and fabric (achieved request rate, TPS_output, TPS_input, goodput at the SLO, TTFT and ITL
p50/p99, link utilization, trials that met the SLO, trusted), the SLO boundary per fabric with
its figures and link utilization, and the fabric comparison in words; `draw` is its graph
(TPS_output and goodput against the offered rate, one line per fabric, the boundary marked).
`bench.bmwg_tables` puts it under §11.1's results."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench.bmwg_common import LABEL, comparison_words, trials_of, trusted
from zcube_lab.core.bmwg import throughput as t111

FIGURES = (
    "Request_Rate", "TPS_output", "TPS_input", "Inference_Goodput", "TTFT_p50_ms", "TTFT_p99_ms",
    "ITL_p50_ms", "ITL_p99_ms", "Link_utilization_mean", "Link_utilization_max",
    "Trunk_utilization_max", "Link_utilization_peak",
)  # fmt: skip


def parameter_table(d: Mapping[str, Any], table: Callable[..., list[str]]) -> list[str]:
    """The draft's §11.1 parameters beside the run's."""
    t = d["draft_trials"]["11.1"]
    knee = d["knee_rate"]
    ladder = ", ".join(f"{s:g} ({r:g})" for s, r in zip(d["ladder"], d["rates"], strict=True))
    slo = d["slo_run"]
    rows = [
        ["offered rate", f"from {t111.DRAFT_START_RATE:g} req/s up until the SLO breaks",
         f"a fixed ladder, shares of the knee (req/s): {ladder}, the same on every fabric "
         f"(the draft's 1 req/s is {t111.draft_share(knee):.2f} of this cell's knee)"],
        ["knee", "-", f"{knee:.2f} req/s, prefill compute: {d['prefill_gpus']} prefill GPU "
         f"hosts over one {d['prompt_tokens']:,}-token prefill ({d['prefill_step_s'] * 1e3:.0f} "
         f"modelled ms); the other {d['gpus'] - d['prefill_gpus']} GPU hosts decode"],
        ["SLO", f"TTFT p99 {t111.TTFT_P99_MS:g} ms, ITL p99 {t111.ITL_P99_MS:g} ms",
         f"TTFT p99 {slo['TTFT_p99_ms']:g} ms, ITL p99 {slo['ITL_p99_ms']:g} ms per run, "
         "modelled ms; goodput counts requests meeting "
         f"{d['slo_request'].replace(',', ', ')} each"],
        ["requests", "-", f"{d['prompt_tokens']:,} prompt + {d['output_tokens']} output tokens, "
         f"{t111.MODEL} (CFG-E), no prefix cache, Poisson arrivals"],
        ["fabric utilization", "at the SLO-bounded throughput",
         "every link direction's bytes over its rate during the load: the mean, the busiest "
         "(max), switch-to-switch links alone, and the highest 1 s peak"],
        ["trials", f"{t[0]} x {t[1]:g} s", f"{d['trials']} x {d['trial_seconds']:g} s"],
    ]  # fmt: skip
    return [*table(["parameter", "draft", "this run"], rows), ""]


def _rungs(d: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    order = {f: i for i, f in enumerate(d["fabrics"])}
    summary = [s for s in d["summary"] if s["section"] == t111.SECTION]
    return sorted(summary, key=lambda s: (s["params"]["rate"], order.get(s["fabric"], 9)))


def rate_rows(d: Mapping[str, Any], cell: Callable[[Any], str]) -> list[list[str]]:
    """One row per offered rate and fabric."""
    out = []
    for s in _rungs(d):
        f = s["figures"]
        trials = trials_of(d, t111.SECTION, s["case"], s["fabric"])
        met = sum(1 for r in trials if r["figures"].get("slo_met"))
        out.append([f"{s['params']['rate']:g} ({s['params']['load']:g})",
                    LABEL.get(s["fabric"], s["fabric"]), *(cell(f.get(k)) for k in FIGURES),
                    f"{met} of {len(trials)}", trusted(trials)])  # fmt: skip
    return out


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def boundary_rows(d: Mapping[str, Any]) -> list[list[str]]:
    """One row per fabric: its SLO boundary and the figures there (means over trials)."""
    out = []
    for b in d.get("boundary") or []:
        if b is None:
            continue
        f = b["figures"]
        at = "none (the lowest rate missed)" if b["rate"] is None else f"{b['rate']:g}"
        if b["censored"] and b["rate"] is not None:
            at = f">= {b['rate']:g} (no rate missed)"
        failed = "-" if b["first_failed_rate"] is None else f"{b['first_failed_rate']:g}"
        out.append([LABEL.get(b["fabric"], b["fabric"]), at, failed,
                    _num(f.get("TPS_output"), ",.0f"), _num(f.get("TPS_input"), ",.0f"),
                    _num(f.get("Inference_Goodput"), ",.0f"), _num(f.get("TTFT_p99_ms"), ",.0f"),
                    _num(f.get("ITL_p99_ms"), ".1f"), _num(f.get("Link_utilization_mean"), ".2f"),
                    _num(f.get("Link_utilization_max"), ".2f"),
                    _num(f.get("Trunk_utilization_max"), ".2f"),
                    str(b["untrusted_trials"])])  # fmt: skip
    return out


def verdict_words(d: Mapping[str, Any]) -> str:
    return comparison_words(
        d, t111.SECTION,
        "All {n} comparisons (TPS_output, goodput, TTFT p99, ITL p99 and the busiest link, per "
        "rate, ZCube against each other fabric) are within the trials' spread: a measured tie.",
        no_spread="The {n} comparisons have one trial each: no spread to judge by, so this "
        "run shows neither a difference nor a tie; more trials decide it.",
    )  # fmt: skip


def boundary_words(d: Mapping[str, Any]) -> str:
    """Whether the fabrics' boundaries fell on the same rung, in a sentence."""
    bs = [b for b in d.get("boundary") or [] if b is not None]
    if not bs:
        return ""
    rates = {b["rate"] for b in bs}
    if len(rates) == 1:
        (r,) = rates
        where = "below the ladder's lowest rate" if r is None else f"at {r:g} req/s"
        return f"Every fabric's SLO boundary is the same rung, {where}." + _links_at(bs)
    parts = [
        f"{LABEL.get(b['fabric'], b['fabric'])} "
        + ("none" if b["rate"] is None else f"{b['rate']:g} req/s")
        for b in bs
    ]
    return "The fabrics' SLO boundaries differ: " + "; ".join(parts) + "." + _links_at(bs)


def _links_at(bs: list[Mapping[str, Any]]) -> str:
    """The fabrics' link utilization at their boundaries (the draft's efficiency metric)."""
    parts = [
        f"{LABEL.get(b['fabric'], b['fabric'])} {b['figures']['Link_utilization_mean']:.2f}% "
        f"mean, busiest {b['figures']['Link_utilization_max']:.2f}%"
        for b in bs
        if b["figures"].get("Link_utilization_mean") is not None
        and b["figures"].get("Link_utilization_max") is not None
    ]
    if not parts:
        return ""
    return " Link utilization there, over the load: " + "; ".join(parts) + "."


def miss_words(d: Mapping[str, Any]) -> str:
    """What the trials that missed the SLO missed, over every rung and fabric: how many passed
    the TTFT p99 threshold and how many the ITL p99 one (from the rows)."""
    missed = [r["figures"] for r in d["rows"]
              if r["section"] == t111.SECTION and not r["figures"].get("slo_met")]  # fmt: skip
    if not missed:
        return "No trial missed the SLO."

    def over(name: str, limit: float) -> int:
        return sum(1 for f in missed if f.get(name) is None or f[name] > limit)

    return (
        f"Of the {len(missed)} trials that missed the SLO, {over('TTFT_p99_ms', t111.TTFT_P99_MS)}"
        f" passed TTFT p99 {t111.TTFT_P99_MS:g} ms and {over('ITL_p99_ms', t111.ITL_P99_MS)} "
        f"ITL p99 {t111.ITL_P99_MS:g} ms."
    )


def tps_section(d: Mapping[str, Any], table: Callable[..., list[str]],
                cell: Callable[[Any], str]) -> list[str]:  # fmt: skip
    """The §11.1 part of a committed run's results."""
    head = ["offered req/s (load)", "fabric", "achieved req/s", "TPS_output", "TPS_input",
            "goodput at SLO", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "links mean %",
            "busiest link %", "busiest switch-switch %", "peak 1 s %", "SLO met",
            "runs trusted"]  # fmt: skip
    bhead = ["fabric", "SLO boundary req/s", "first missed req/s", "TPS_output", "TPS_input",
             "goodput", "TTFT p99 ms", "ITL p99 ms", "links mean %", "busiest link %",
             "busiest switch-switch %", "trials not trusted to first missed"]  # fmt: skip
    return [
        "§11.1 parameters, the draft's and this run's:",
        "",
        *parameter_table(d, table),
        "§11.1 per offered rate and fabric: tokens a second over the load window, times in "
        "modelled ms, utilization in % of each link's rate over the load, each the mean over "
        "trials ± half its 95% interval; a run meets the SLO when its TTFT p99 and ITL p99 "
        "are within the draft's thresholds:",
        "",
        *table(head, rate_rows(d, cell)),
        "",
        "§11.1 SLO boundary per fabric (the highest rate below the first at which a trial "
        "missed the SLO) and the figures there, means over its trials:",
        "",
        *table(bhead, boundary_rows(d)),
        "",
        "Prefill compute sets the knee (the decode pool's is far above it, and the KV pulls use "
        "a few percent of the links), so the fabric moves only the KV pulls inside TTFT. "
        + miss_words(d)
        + " "
        + boundary_words(d)
        + " "
        + verdict_words(d),
        "",
    ]


def draw(axes: Any, d: Mapping[str, Any]) -> None:
    """TPS_output (solid) and goodput at the SLO (dashed) against the offered rate on
    `axes[0]`, TTFT p99 on `axes[1]` with the draft's 500 ms, one colour a fabric; each fabric's
    SLO boundary a dotted vertical line."""
    series: dict[str, list[tuple[float, float, float, float]]] = {}
    for s in _rungs(d):
        f = s["figures"]
        vals = [(f.get(k) or {}).get("mean") for k in ("TPS_output", "Inference_Goodput",
                                                       "TTFT_p99_ms")]  # fmt: skip
        if any(v is None for v in vals):
            continue
        series.setdefault(s["fabric"], []).append((float(s["params"]["rate"]), *vals))
    bounds = {b["fabric"]: b for b in d.get("boundary") or [] if b is not None}
    tps_ax, ttft_ax = axes
    for fab, pts in series.items():
        xs = [p[0] for p in pts]
        name = LABEL.get(fab, fab)
        (line,) = tps_ax.plot(xs, [p[1] for p in pts], marker="o", label=f"{name} TPS_output")
        colour = line.get_color()
        tps_ax.plot(xs, [p[2] for p in pts], marker="x", linestyle="--", color=colour,
                    label=f"{name} goodput at SLO")  # fmt: skip
        ttft_ax.plot(xs, [p[3] for p in pts], marker="o", color=colour, label=name)
        b = bounds.get(fab)
        if b is not None and b["rate"] is not None:
            for ax in axes:
                ax.axvline(b["rate"], linestyle=":", color=colour, alpha=0.7)
    ttft_ax.axhline(t111.TTFT_P99_MS, color="grey", linewidth=1)
    tps_ax.set(xlabel="offered rate (req/s); dotted: SLO boundary", ylabel="output tokens/s")
    ttft_ax.set(xlabel="offered rate (req/s)", ylabel="TTFT p99 (modelled ms); line: 500 ms",
                yscale="log")  # fmt: skip
