"""docs/BMWG.md's §6.2 part (xPyD ratio optimization), from a committed `bmwg run 6.2`
(`zcube_lab.core.bmwg.xpyd`): its parameters beside the draft's, one row per split and fabric
(TTFT, ITL, TPOT and T_transfer p50/p99, tokens per second per GPU and goodput at the SLO per
GPU, prefill utilization, trials that met the SLO), the best split per fabric, and the fabric
comparison in words. `bench.bmwg_tables` puts it under §6.2's results."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench.bmwg_common import LABEL, comparison_words, trials_of, trusted
from zcube_lab.core.bmwg import xpyd as x62

FIGURES = (
    "TTFT_p50_ms", "TTFT_p99_ms", "ITL_p50_ms", "ITL_p99_ms", "TPOT_p50_ms", "TPOT_p99_ms",
    "T_transfer_p50_ms", "T_transfer_p99_ms", "TPS_per_GPU", "goodput_per_GPU", "prefill_util",
)  # fmt: skip


def parameter_table(d: Mapping[str, Any], table: Callable[..., list[str]]) -> list[str]:
    """The draft's §6.2 parameters beside the run's."""
    t = d["draft_trials"]["6.2"]
    draft = ", ".join(f"{n}P{x62.DRAFT_NODES - n}D" for n in x62.DRAFT_PREFILL)
    loads = "; ".join(
        f"{s}: {p['rate']:g} req/s (prefill knee {p['knee_prefill']:g}, decode knee "
        f"{p['knee_decode']:,.0f})"
        for s, p in d["plans"].items()
    )
    st = d["steps"]
    rows = [
        ["splits xPyD", f"{draft} of {x62.DRAFT_NODES} nodes",
         f"{', '.join(d['splits'])} of {d['gpus']} GPU hosts (whole servers)"],
        ["load", "-", f"{d['load']:g} of each split's own knee: {loads}"],
        ["knee", "-", f"the lower of the prefill pool's (x / {st['prefill_step_s']:.3f} s, one "
         f"{d['prompt_tokens']:,}-token prefill) and the decode pool's (y x "
         f"{st['max_num_seqs']:g} sequences / ({d['output_tokens']} steps x "
         f"{st['decode_step_s'] * 1e3:.0f} ms)): prefill on every split"],
        ["requests", "-", f"{d['prompt_tokens']:,} prompt + {d['output_tokens']} output tokens, "
         f"{x62.MODEL} (CFG-E), no prefix cache, Poisson arrivals"],
        ["SLO", "TTFT and ITL targets", f"{d['slo']} per request, {d['slo_attainment']:g} of "
         "requests; goodput: the output tokens a second of the requests meeting it"],
        ["trials", f"{t[0]} x {t[1]:g} s", f"{d['trials']} x {d['trial_seconds']:g} s"],
    ]  # fmt: skip
    return [*table(["parameter", "draft", "this run"], rows), ""]


def split_rows(d: Mapping[str, Any], cell: Callable[[Any], str]) -> list[list[str]]:
    """One row per split and fabric."""
    order = {f: i for i, f in enumerate(d["fabrics"])}
    splits = {f"xPyD={s}": i for i, s in enumerate(d["splits"])}
    summary = [s for s in d["summary"] if s["section"] == "6.2"]
    out = []
    for s in sorted(summary, key=lambda s: (splits.get(s["case"], 99), order.get(s["fabric"], 9))):
        f = s["figures"]
        trials = trials_of(d, "6.2", s["case"], s["fabric"])
        met = sum(1 for r in trials if r["figures"].get("slo_met"))
        out.append([s["case"].split("=", 1)[-1], f"{s['params']['rate']:g}",
                    LABEL.get(s["fabric"], s["fabric"]), *(cell(f.get(k)) for k in FIGURES),
                    f"{met} of {len(trials)}", trusted(trials)])  # fmt: skip
    return out


def best_words(d: Mapping[str, Any]) -> str:
    parts = []
    for b in d["best_split"]:
        name = LABEL.get(b["fabric"], b["fabric"])
        det = b.get("detail")
        if not det:
            parts.append(f"{name}: no split met the SLO in every trial")
            continue
        tie = f", tied within the spread with {', '.join(det['ties'])}" if det["ties"] else ""
        parts.append(
            f"{name}: {det['case'].split('=', 1)[-1]} ({det['mean']:.3g} tokens/s per GPU at "
            f"the SLO{tie})"
        )
    return (
        "Best split per fabric (the highest goodput at the SLO per GPU among the splits whose "
        "every trial met it): " + "; ".join(parts) + "."
    )


def verdict_words(d: Mapping[str, Any]) -> str:
    return comparison_words(
        d, "6.2",
        "{n} of {n} comparisons within the trials' spread (measured ties).",
        no_spread="The {n} comparisons (TTFT p99, T_transfer p99 and goodput per GPU, per "
        "split, ZCube against each other fabric) have one trial each: no spread to judge "
        "by, so this run shows neither a difference nor a tie; more trials decide it.",
        within_note=" (measured ties)",
    )  # fmt: skip


def xpyd_section(d: Mapping[str, Any], table: Callable[..., list[str]],
                 cell: Callable[[Any], str]) -> list[str]:  # fmt: skip
    """The §6.2 part of a committed run's results."""
    head = ["split", "req/s", "fabric", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99",
            "TPOT p50", "TPOT p99", "T_transfer p50", "T_transfer p99", "tokens/s/GPU",
            "goodput/GPU at SLO", "prefill util", "SLO met", "runs trusted"]  # fmt: skip
    return [
        "§6.2 parameters, the draft's and this run's:",
        "",
        *parameter_table(d, table),
        "§6.2 per split and fabric: times in modelled ms, tokens a second per GPU over all "
        "16 GPUs (prefill and decode), each the mean over trials ± half its 95% interval; "
        "prefill utilization is the offered load's (rate x one prefill step / x: the mock "
        "engines keep no busy counter):",
        "",
        *table(head, split_rows(d, cell)),
        "",
        "Prefill compute sets the knee at the lab's default scale: every split's prefill "
        "pool saturates long before its decode pool, so a split's tokens per GPU follow its "
        "prefill GPUs, and the fabric moves only T_transfer (the KV pulls, a few percent of "
        "TTFT). " + best_words(d) + " " + verdict_words(d),
        "",
    ]
