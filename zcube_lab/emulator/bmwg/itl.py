"""`zcube-lab bmwg run 10.2`: the draft's ITL characterization and tail latency on each fabric,
as live serving runs (`zcube_lab.core.bmwg.itl` says what a case, a trial and a gap are). Each
trial is one `zcube-lab run` in its own process, as §6.1's (`zcube_lab.emulator.bmwg.live`),
retried when the machine alone spoiled it; after it, the gaps are read from the run's
requests.jsonl (the client's per-token stamps). `bmwg.json` is written after every trial."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from zcube_lab.core.bmwg import itl as i102
from zcube_lab.core.bmwg import report
from zcube_lab.core.bmwg.catalogue import DRAFT
from zcube_lab.emulator.bmwg.live import RESULTS_FILE, RUN_OVERHEAD_S, _trial, run_argv

# The run waits for its last requests to decode their `OUTPUT_TOKENS` (~30 ms a step).
DRAIN_S = i102.OUTPUT_TOKENS * 0.032


def estimate_wall_s(cases: int, fabrics: int, trials: int, trial_seconds: float) -> float:
    """Wall seconds of a §10.2 run: one live run per case, fabric and trial."""
    return cases * fabrics * trials * (trial_seconds + RUN_OVERHEAD_S + DRAIN_S)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def trial_row(summary_path: Path, fabric: str, rate: float, trial: int, out: Path,
              spoiled: Sequence[Path]) -> dict[str, Any]:  # fmt: skip
    """One trial's row: its figures and the compact CDF of its gaps (for the graph)."""
    run_dir = summary_path.parent
    summary = json.loads(summary_path.read_text())
    records = _jsonl(run_dir / "requests.jsonl")
    return {
        "section": i102.SECTION,
        "case": i102.case_label(rate),
        "params": {
            "rate": rate,
            "prompt_tokens": i102.PROMPT_TOKENS,
            "output_tokens": i102.OUTPUT_TOKENS,
        },
        "fabric": fabric,
        "trial": trial,
        "run": str(run_dir.relative_to(out)),
        "spoiled_by_machine": [str(p.relative_to(out)) for p in spoiled],
        "figures": i102.trial_figures(summary, records),
        "itl_cdf_ms": i102.cdf_points(i102.pooled_gaps(records)),
        "reasons": list((summary.get("health") or {}).get("reasons") or []),
    }


def run_itl(
    fabrics: Sequence[str],
    gpus: int,
    rates: Sequence[float],
    trials: int,
    trial_seconds: float,
    seed: int,
    results: Path,
    progress: Callable[[str], None] = print,
    retries: int = 2,
) -> Path:
    """Every case's trials on every fabric; the path of bmwg.json."""
    from zcube_lab.core.bmwg.catalogue import test_of

    i102.check_trial_seconds(trial_seconds)
    test = test_of(i102.SECTION)
    out = results / f"bmwg-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    est = estimate_wall_s(len(rates), len(fabrics), trials, trial_seconds)
    progress("§10.2 parameters, draft -> this run:")
    for name, draft, here in i102.parameter_rows(trials, trial_seconds, test.trials,
                                                 test.trial_s, rates[0]):  # fmt: skip
        progress(f"  {name}: {draft} -> {here}")
    progress(f"{DRAFT} §10.2 on {', '.join(fabrics)}: estimated wall time {est / 60:.1f} min")
    rows: list[dict[str, Any]] = []
    total = len(rates) * len(fabrics) * trials
    t0 = time.monotonic()
    path = out / RESULTS_FILE

    def document(done: bool) -> dict[str, Any]:
        return _document(fabrics, gpus, rates, trials, trial_seconds, rows, t0, est, done)

    for fabric in fabrics:
        for rate in rates:
            workload = out / f"workload-{rate:g}.json"
            workload.write_text(json.dumps(i102.profile(rate), indent=1) + "\n")
            for trial in range(trials):
                run_dir = out / f"{fabric}-{rate:g}-t{trial}"
                argv = run_argv(fabric, gpus, workload, trial_seconds, seed + trial, run_dir)
                w0 = time.monotonic()
                summary_path, spoiled = _trial(argv, run_dir, retries, progress)
                rows.append(trial_row(summary_path, fabric, rate, trial, out, spoiled))
                rows[-1]["wall_s"] = round(time.monotonic() - w0, 1)
                el = time.monotonic() - t0
                left = el / len(rows) * (total - len(rows))
                progress(
                    f"[{len(rows)}/{total}] §10.2 {fabric} {rate:g} req/s trial {trial + 1}: "
                    f"{headline(rows[-1]['figures'])} ({el / 60:.1f} min in, "
                    f"~{left / 60:.1f} min left)"
                )
                path.write_text(json.dumps(document(False), indent=1))
    doc = document(True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for c in doc["comparison"]:
        progress(f"§10.2 {c['case']}: {c['figure']} zcube vs {c['versus']}: {c['verdict']}")
    progress(f"written: {path}")
    return path


def headline(f: Mapping[str, Any]) -> str:
    def num(name: str, fmt: str = ",.1f") -> str:
        v = f.get(name)
        return "-" if v is None else format(v, fmt)

    trusted = "not trusted" if f.get("untrusted") else "trusted"
    return (
        f"ITL p50 {num('ITL_p50_ms')} / p99 {num('ITL_p99_ms')} / p99.9 {num('ITL_p999_ms')} "
        f"ms over {f.get('itl_samples')} gaps, stalls > 2x p50 {num('stall_share', '.2%')}, "
        f"TPOT {num('TPOT_p50_ms')} ms, {trusted}"
    )


def _document(fabrics: Sequence[str], gpus: int, rates: Sequence[float], trials: int,
              trial_seconds: float, rows: list[dict[str, Any]], t0: float, est: float,
              done: bool) -> dict[str, Any]:  # fmt: skip
    from zcube_lab.core.bmwg.catalogue import test_of
    from zcube_lab.core.bmwg.scaling import scale_for
    from zcube_lab.emulator.bmwg.runner import software

    summary = report.summarize(rows)
    test = test_of(i102.SECTION)
    return {
        "draft": DRAFT,
        "sections": [i102.SECTION],
        "fabrics": list(fabrics),
        "gpus": gpus,
        "trials": trials,
        "trial_seconds": trial_seconds,
        "draft_trials": {test.section: [test.trials, test.trial_s]},
        "resolution": scale_for(test).describe(),  # the live lab's default scale
        "rates": list(rates),
        "prompt_tokens": i102.PROMPT_TOKENS,
        "output_tokens": i102.OUTPUT_TOKENS,
        "stall_factor": i102.STALL_FACTOR,
        "estimate_wall_s": round(est, 1),
        "wall_s": round(time.monotonic() - t0, 1),
        "complete": done,
        "software": {**software(), "transport": "kernel TCP (live serving runs)"},
        "notes": [
            "10.2: live serving runs at the default time scale; a trial's ITL is the pool of "
            "every gap between consecutive token chunks of every completed request, as the "
            "client stamped them (requests.jsonl); at this scale a gap is one decode step of "
            "the engine, not the fabric, unless a KV pull or an EP exchange delays a step, so "
            "a tie between fabrics is a measured tie"
        ],
        "refused": [],
        "rows": rows,
        "summary": summary,
        "comparison": report.compare(summary),
    }
