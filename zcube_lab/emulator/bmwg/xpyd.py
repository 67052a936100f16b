"""`zcube-lab bmwg run 6.2`: the draft's xPyD ratio optimization on each fabric, as live serving
runs (`zcube_lab.core.bmwg.xpyd` says what a split, its load and a trial are), run by the live
sections' runner (`zcube_lab.emulator.bmwg.live`) with `--prefill-servers` setting the split.
After each trial the client's request records are held to the SLO
(`zcube_lab.emulator.results.run.goodput`)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zcube_lab.core.bmwg import xpyd as x62
from zcube_lab.emulator.bmwg.live import LiveCase, LiveSection, figure_text, trusted_text

if TYPE_CHECKING:
    from zcube_lab.core.bmwg.config import BmwgConfig

DRAIN_S = 5.0  # the run drains its requests after the load


def per_server(fabrics: Sequence[str], gpus: int) -> int:
    """GPU hosts to a server, the same on every fabric compared (a ConfigError otherwise)."""
    from zcube_lab.core.errors import ConfigError
    from zcube_lab.core.fabric.scaledown import scaled_fabric

    counts = set()
    for kind in fabrics:
        f = scaled_fabric(kind, gpus)
        counts.add(len(f.hosts) // len({h.server for h in f.hosts}))
    if len(counts) != 1:
        raise ConfigError("fabrics", list(fabrics), "fabrics with as many GPUs to a server")
    return counts.pop()


def steps() -> dict[str, float]:
    """GLM-5.1's modelled compute: one `PROMPT_TOKENS` prefill, one full decode batch's step."""
    from zcube_lab.serving.models import decode_step_seconds, get_profile, prefill_step_seconds

    p = get_profile(x62.MODEL)
    seqs = p.max_num_seqs
    return {
        "prefill_step_s": prefill_step_seconds(p, x62.PROMPT_TOKENS),
        "decode_step_s": decode_step_seconds(
            p, seqs, seqs * (x62.PROMPT_TOKENS + x62.OUTPUT_TOKENS)
        ),
        "max_num_seqs": seqs,
    }


def plan(split: x62.Split, load: float = x62.LOAD) -> dict[str, float]:
    """A split's knees and offered rate."""
    s = steps()
    k = x62.knees(split, s["prefill_step_s"], s["decode_step_s"], int(s["max_num_seqs"]))
    return {
        "knee_prefill": round(k["prefill"], 3),
        "knee_decode": round(k["decode"], 3),
        "knee": round(k["knee"], 3),
        "rate": x62.rate_of(k["knee"], load),
    }


def slo_check(run_dir: Path, window_s: float) -> dict[str, Any]:
    """The run's requests against `SLO_TEXT`: the output tokens of those meeting it, the
    requests, the attainment per target and whether the run met it."""
    from zcube_lab.emulator.results.run.goodput import (
        arrived_in_window,
        goodput,
        parse_slo,
        request_meets_slo,
    )

    path = run_dir / "requests.jsonl"
    recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if (
        path.exists()) else []  # fmt: skip
    slo = parse_slo(x62.SLO_TEXT, x62.SLO_ATTAINMENT)
    g = goodput(recs, slo, window_s)
    good = [r for r in arrived_in_window(recs, window_s) if request_meets_slo(r, slo)]
    return {
        "slo": slo.shown,
        "window_s": window_s,
        "requests": g.requests,
        "good": g.good,
        "good_output_tokens": sum(int(r.get("output_tokens") or 0) for r in good),
        "attainment": dict(g.attainment),
        "met": g.met,
    }


def section(cfg: BmwgConfig) -> LiveSection:
    """§6.2 over the run's splits, each at `LOAD` of its own knee (a split the fabrics cannot
    carry: a ConfigError, before any lab)."""
    splits = x62.splits(cfg.xpyd, cfg.gpus, per_server(cfg.fabric_kinds, cfg.gpus))
    plans = {s.label: plan(s) for s in splits}
    pre_step = steps()["prefill_step_s"]
    by_label = {s.label: s for s in splits}
    window_s = cfg.trial_seconds  # the load window

    def row(run: Path, _fabric: str, case: LiveCase) -> dict[str, Any]:
        split = by_label[case.key]
        summary = json.loads((run / "summary.json").read_text())
        good = slo_check(run, window_s)
        rate = plans[split.label]["rate"]
        return {"figures": x62.trial_figures(summary, split, good, rate, pre_step), "slo": good}

    def best(doc: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "best_split": [
                {"fabric": f, "best": (b := x62.best_split(doc["summary"], f)) and b["case"],
                 "detail": b}
                for f in doc["fabrics"]
            ]
        }  # fmt: skip

    return LiveSection(
        section=x62.SECTION,
        cases=tuple(
            LiveCase(
                s.label,
                x62.case_label(s),
                {"prefill": s.prefill, "decode": s.decode, **plans[s.label]},
                x62.profile(s, plans[s.label]["rate"]),
                argv=("--prefill-servers", str(s.prefill_servers)),
                shown=s.label,
            )
            for s in splits
        ),
        row=row,
        headline=headline,
        head={
            "splits": [s.label for s in splits],
            "plans": plans,
            "load": x62.LOAD,
            "slo": x62.SLO_TEXT,
            "slo_attainment": x62.SLO_ATTAINMENT,
            "steps": steps(),
            "prompt_tokens": x62.PROMPT_TOKENS,
            "output_tokens": x62.OUTPUT_TOKENS,
        },
        notes=tuple(NOTES),
        parameter_lines=tuple(
            parameter_lines(cfg.gpus, splits, plans, cfg.trials, cfg.trial_seconds)
        ),
        drain_s=DRAIN_S,
        finish=best,
        closing=lambda doc: [
            f"§6.2 best split on {b['fabric']}: {b['best'] or 'none met the SLO'}"
            for b in doc["best_split"]
        ],
    )


def headline(f: Mapping[str, Any]) -> str:
    num = functools.partial(figure_text, f)
    trusted = trusted_text(f)
    met = "SLO met" if f.get("slo_met") else "SLO missed"
    return (
        f"TTFT p50/p99 {num('TTFT_p50_ms', ',.0f')}/{num('TTFT_p99_ms', ',.0f')} ms, TPOT p99 "
        f"{num('TPOT_p99_ms', '.1f')} ms, T_transfer p99 {num('T_transfer_p99_ms', '.1f')} ms, "
        f"{num('TPS_per_GPU', '.2f')} tokens/s per GPU ({num('goodput_per_GPU', '.2f')} at the "
        f"SLO), {met}, {trusted}"
    )


def parameter_lines(gpus: int, splits: Sequence[x62.Split], plans: Mapping[str, Any],
                    trials: int, trial_seconds: float) -> list[str]:  # fmt: skip
    """The draft's parameters beside the run's, printed before it starts."""
    from zcube_lab.core.bmwg.catalogue import test_of

    t = test_of(x62.SECTION)
    draft = ", ".join(f"{n}P{x62.DRAFT_NODES - n}D" for n in x62.DRAFT_PREFILL)
    rates = "; ".join(
        f"{s.label} {plans[s.label]['rate']:g} req/s (prefill knee "
        f"{plans[s.label]['knee_prefill']:g}, decode knee {plans[s.label]['knee_decode']:g})"
        for s in splits
    )
    return [
        "§6.2 parameters, draft -> this run:",
        f"  splits xPyD of {x62.DRAFT_NODES} nodes: {draft} -> "
        f"{', '.join(s.label for s in splits)} of {gpus} GPU hosts (whole servers)",
        f"  load: -> {x62.LOAD:g} of each split's own knee: {rates}",
        f"  requests: -> {x62.PROMPT_TOKENS:,} prompt + {x62.OUTPUT_TOKENS} output tokens "
        f"({x62.MODEL}, CFG-E), no prefix cache, Poisson arrivals",
        f"  SLO for goodput: -> {x62.SLO_TEXT} per request, {x62.SLO_ATTAINMENT:g} of requests",
        f"  trials: {t.trials} x {t.trial_s:g} s -> {trials} x {trial_seconds:g} s",
    ]


NOTES = [
    "6.2: live serving runs at the default time scale; each split at the same share of its "
    "own knee. Prefill compute sets the knee at the lab's default scale (every split's prefill "
    "knee is far below its decode knee), so a split's throughput is set by its prefill GPUs "
    "and the fabric moves only T_transfer (the KV pulls, a few percent of TTFT); a fabric "
    "comparison within the trials' spread is a measured tie, not a missing measurement",
]
