"""`zcube-lab bmwg run 6.2`: the draft's xPyD ratio optimization on each fabric, as live serving
runs (`zcube_lab.core.bmwg.xpyd` says what a split, its load and a trial are). Each trial is one
`zcube-lab run` in its own process with `--prefill-servers` setting the split, as §6.1's
(`zcube_lab.emulator.bmwg.live`: retries of machine-spoiled runs); after it, the client's
request records are held to the SLO (`zcube_lab.emulator.results.run.goodput`). `bmwg.json` is
written after every trial."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from zcube_lab.core.bmwg import report
from zcube_lab.core.bmwg import xpyd as x62
from zcube_lab.core.bmwg.catalogue import DRAFT
from zcube_lab.emulator.bmwg.live import RESULTS_FILE, RUN_OVERHEAD_S, _trial, run_argv

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


def estimate_wall_s(cases: int, fabrics: int, trials: int, trial_seconds: float) -> float:
    """Wall seconds of a §6.2 run: one live run per split, fabric and trial."""
    return cases * fabrics * trials * (trial_seconds + RUN_OVERHEAD_S + DRAIN_S)


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


def run_xpyd(
    fabrics: Sequence[str],
    gpus: int,
    xpyd: str,
    trials: int,
    trial_seconds: float,
    seed: int,
    results: Path,
    progress: Callable[[str], None] = print,
    retries: int = 2,
) -> Path:
    """Every split's trials on every fabric; the path of bmwg.json."""
    splits = x62.splits(xpyd, gpus, per_server(fabrics, gpus))
    out = results / f"bmwg-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    est = estimate_wall_s(len(splits), len(fabrics), trials, trial_seconds)
    plans = {s.label: plan(s) for s in splits}
    for line in parameter_lines(gpus, splits, plans, trials, trial_seconds):
        progress(line)
    progress(f"{DRAFT} §6.2 on {', '.join(fabrics)}: estimated wall time {est / 60:.1f} min")
    rows: list[dict[str, Any]] = []
    total = len(splits) * len(fabrics) * trials
    t0 = time.monotonic()
    path = out / RESULTS_FILE
    pre_step = steps()["prefill_step_s"]

    def document(done: bool) -> dict[str, Any]:
        return _document(fabrics, gpus, splits, plans, trials, trial_seconds, rows, t0, est, done)

    for fabric in fabrics:
        for split in splits:
            rate = plans[split.label]["rate"]
            workload = out / f"workload-{split.label}.json"
            workload.write_text(json.dumps(x62.profile(split, rate), indent=1) + "\n")
            for trial in range(trials):
                run_dir = out / f"{fabric}-{split.label}-t{trial}"
                argv = run_argv(fabric, gpus, workload, trial_seconds, seed + trial, run_dir)
                argv += ["--prefill-servers", str(split.prefill_servers)]
                w0 = time.monotonic()
                summary_path, spoiled = _trial(argv, run_dir, retries, progress)
                summary = json.loads(summary_path.read_text())
                good = slo_check(summary_path.parent, trial_seconds)  # the load window
                rows.append(
                    {
                        "section": x62.SECTION,
                        "case": x62.case_label(split),
                        "params": {
                            "prefill": split.prefill,
                            "decode": split.decode,
                            **plans[split.label],
                        },
                        "fabric": fabric,
                        "trial": trial,
                        "run": str(summary_path.parent.relative_to(out)),
                        "spoiled_by_machine": [str(p.relative_to(out)) for p in spoiled],
                        "figures": x62.trial_figures(summary, split, good, rate, pre_step),
                        "slo": good,
                        "reasons": list((summary.get("health") or {}).get("reasons") or []),
                        "wall_s": round(time.monotonic() - w0, 1),
                    }
                )
                el = time.monotonic() - t0
                left = el / len(rows) * (total - len(rows))
                progress(
                    f"[{len(rows)}/{total}] §6.2 {fabric} {split.label} trial {trial + 1}: "
                    f"{headline(rows[-1]['figures'])} ({el / 60:.1f} min in, "
                    f"~{left / 60:.1f} min left)"
                )
                path.write_text(json.dumps(document(False), indent=1))
    doc = document(True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for b in doc["best_split"]:
        progress(f"§6.2 best split on {b['fabric']}: {b['best'] or 'none met the SLO'}")
    for c in doc["comparison"]:
        progress(f"§6.2 {c['case']}: {c['figure']} zcube vs {c['versus']}: {c['verdict']}")
    progress(f"written: {path}")
    return path


def headline(f: Mapping[str, Any]) -> str:
    def num(name: str, fmt: str) -> str:
        v = f.get(name)
        return "-" if v is None else format(v, fmt)

    trusted = "not trusted" if f.get("untrusted") else "trusted"
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


def _document(fabrics: Sequence[str], gpus: int, splits: Sequence[x62.Split],
              plans: Mapping[str, Any], trials: int, trial_seconds: float,
              rows: list[dict[str, Any]], t0: float, est: float,
              done: bool) -> dict[str, Any]:  # fmt: skip
    from zcube_lab.core.bmwg.catalogue import test_of
    from zcube_lab.core.bmwg.scaling import scale_for
    from zcube_lab.emulator.bmwg.runner import software

    summary = report.summarize(rows)
    test = test_of(x62.SECTION)
    return {
        "draft": DRAFT,
        "sections": [x62.SECTION],
        "fabrics": list(fabrics),
        "gpus": gpus,
        "trials": trials,
        "trial_seconds": trial_seconds,
        "draft_trials": {test.section: [test.trials, test.trial_s]},
        "resolution": scale_for(test).describe(),
        "splits": [s.label for s in splits],
        "plans": dict(plans),
        "load": x62.LOAD,
        "slo": x62.SLO_TEXT,
        "slo_attainment": x62.SLO_ATTAINMENT,
        "steps": steps(),
        "prompt_tokens": x62.PROMPT_TOKENS,
        "output_tokens": x62.OUTPUT_TOKENS,
        "estimate_wall_s": round(est, 1),
        "wall_s": round(time.monotonic() - t0, 1),
        "complete": done,
        "software": {**software(), "transport": "kernel TCP (live serving runs)"},
        "notes": NOTES,
        "refused": [],
        "rows": rows,
        "summary": summary,
        "best_split": [
            {"fabric": f, "best": (b := x62.best_split(summary, f)) and b["case"], "detail": b}
            for f in fabrics
        ],
        "comparison": report.compare(summary),
    }
