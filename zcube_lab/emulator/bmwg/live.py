"""`zcube-lab bmwg run 6.1`: the draft's end-to-end disaggregated TTFT on each fabric, as live
serving runs (`zcube_lab.core.bmwg.ttft` says what a case and a trial are). Each trial is one
`zcube-lab run` in its own process (it builds its lab and tears it down, Ctrl-C included), its
folder kept under the results folder; `bmwg.json` is written after every trial, in the shape
of the replay tests' (rows, summary, comparison), so docs/BMWG.md reads both alike."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from zcube_lab.core.bmwg import report
from zcube_lab.core.bmwg import ttft as t61
from zcube_lab.core.bmwg.catalogue import DRAFT

RESULTS_FILE = "bmwg.json"
# Wall seconds a run costs besides its load (lab, servers, Prometheus, collection, teardown),
# measured on this machine's quick §6.1: 36.5-39.7 wall s for a 15 s run (docs/BENCHMARKS.md, bmwg).
RUN_OVERHEAD_S = 23.0


def estimate_wall_s(cases: int, fabrics: int, trials: int, trial_seconds: float) -> float:
    """Wall seconds of a §6.1 run: one live run per case, fabric and trial."""
    return cases * fabrics * trials * (trial_seconds + RUN_OVERHEAD_S)


def run_argv(fabric: str, gpus: int, workload: Path, seconds: float, seed: int,
             results: Path) -> list[str]:  # fmt: skip
    """The `zcube-lab run` of one trial."""
    return [
        sys.executable, "-m", "zcube_lab.cli", "run", "--fabric", fabric, "--gpus", str(gpus),
        "--workload", str(workload), "--duration", f"{seconds:g}", "--seed", str(seed),
        "--results", str(results),
    ]  # fmt: skip


def run_ttft(
    fabrics: Sequence[str],
    gpus: int,
    prompts: Sequence[int],
    trials: int,
    trial_seconds: float,
    seed: int,
    results: Path,
    rate: float = t61.RATE,
    progress: Callable[[str], None] = print,
    retries: int = 2,
) -> Path:
    """Every case's trials on every fabric; the path of bmwg.json. A run the machine alone
    spoiled runs again, up to `retries` times (`_trial`)."""
    out = results / f"bmwg-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    est = estimate_wall_s(len(prompts), len(fabrics), trials, trial_seconds)
    progress(
        f"{DRAFT} §6.1 on {', '.join(fabrics)}: prompts {', '.join(map(str, prompts))} tokens "
        f"x {trials} trials of {trial_seconds:g} s at {rate:g} req/s (the draft asks 20 of "
        f">= 60 s); estimated wall time {est / 60:.1f} min"
    )
    rows: list[dict[str, Any]] = []
    total = len(prompts) * len(fabrics) * trials
    t0 = time.monotonic()
    path = out / RESULTS_FILE
    for fabric in fabrics:
        for n in prompts:
            workload = out / f"workload-{n}.json"
            workload.write_text(json.dumps(t61.profile(n, rate), indent=1) + "\n")
            for trial in range(trials):
                run_dir = out / f"{fabric}-{n}-t{trial}"
                argv = run_argv(fabric, gpus, workload, trial_seconds, seed + trial, run_dir)
                w0 = time.monotonic()
                summary_path, spoiled = _trial(argv, run_dir, retries, progress)
                summary = json.loads(summary_path.read_text())
                rows.append(
                    {
                        "section": t61.SECTION,
                        "case": t61.case_label(n),
                        "params": {"prompt_tokens": n},
                        "fabric": fabric,
                        "trial": trial,
                        "run": str(summary_path.parent.relative_to(out)),
                        "spoiled_by_machine": [str(p.relative_to(out)) for p in spoiled],
                        "figures": t61.trial_figures(summary),
                        "reasons": list((summary.get("health") or {}).get("reasons") or []),
                        "wall_s": round(time.monotonic() - w0, 1),
                    }
                )
                f = rows[-1]["figures"]
                el = time.monotonic() - t0
                left = el / len(rows) * (total - len(rows))
                progress(
                    f"[{len(rows)}/{total}] §6.1 {fabric} {n} tokens trial {trial + 1}: "
                    f"{_headline(f)} ({el / 60:.1f} min in, ~{left / 60:.1f} min left)"
                )
                path.write_text(json.dumps(_document(fabrics, gpus, prompts, trials,
                                                     trial_seconds, rate, rows, t0, est, False),
                                           indent=1))  # fmt: skip
    doc = _document(fabrics, gpus, prompts, trials, trial_seconds, rate, rows, t0, est, True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for c in doc["comparison"]:
        progress(f"§6.1 {c['case']}: {c['figure']} zcube vs {c['versus']}: {c['verdict']}")
    progress(f"written: {path}")
    return path


def _trial(argv: list[str], run_dir: Path, retries: int,
           progress: Callable[[str], None]) -> tuple[Path, list[Path]]:  # fmt: skip
    """One trial's run: run again (same seed) while the lab's verdict rejected it for the
    machine's reasons alone (`zcube_lab.emulator.verdict.retry`, as `compare` does), at most
    `retries` times; the summary kept and the spoiled runs' folders."""
    from zcube_lab.emulator.verdict.judge import HealthVerdict
    from zcube_lab.emulator.verdict.retry import retry_decision

    seen: set[Path] = set()
    spoiled: list[Path] = []
    for attempt in range(retries + 1):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"{run_dir.name}: `zcube-lab run` exited {done.returncode}:\n{done.stderr[-2000:]}"
            )
        (path,) = set(run_dir.glob("*/summary.json")) - seen
        seen.add(path)
        summary = json.loads(path.read_text())
        if summary.get("trustworthy") or attempt == retries:
            return path, spoiled
        decision = retry_decision(HealthVerdict.from_dict(summary["health"]))
        if not decision.retry:
            return path, spoiled
        spoiled.append(path.parent)
        progress(f"  {run_dir.name}: spoiled by the machine ({decision.why}): run again")
    raise AssertionError("unreachable")


def _headline(f: dict[str, Any]) -> str:
    def ms(name: str) -> str:
        v = f.get(name)
        return "-" if v is None else f"{v:,.1f}"

    trusted = "not trusted" if f.get("untrusted") else "trusted"
    return (
        f"TTFT p50 {ms('TTFT_p50_ms')} ms = prefill {ms('T_prefill_p50_ms')} + transfer "
        f"{ms('T_transfer_p50_ms')} + decode init {ms('T_decode_init_p50_ms')} ms (medians), "
        f"{trusted}"
    )


def _document(fabrics: Sequence[str], gpus: int, prompts: Sequence[int], trials: int,
              trial_seconds: float, rate: float, rows: list[dict[str, Any]], t0: float,
              est: float, done: bool) -> dict[str, Any]:  # fmt: skip
    from zcube_lab.core.bmwg.catalogue import test_of
    from zcube_lab.core.bmwg.scaling import scale_for
    from zcube_lab.emulator.bmwg.runner import software

    summary = report.summarize(rows)
    test = test_of(t61.SECTION)
    return {
        "draft": DRAFT,
        "sections": [t61.SECTION],
        "fabrics": list(fabrics),
        "gpus": gpus,
        "trials": trials,
        "trial_seconds": trial_seconds,
        "draft_trials": {test.section: [test.trials, test.trial_s]},
        "resolution": scale_for(test).describe(),  # the live lab's default scale
        "rate": rate,
        "prompts": list(prompts),
        "estimate_wall_s": round(est, 1),
        "wall_s": round(time.monotonic() - t0, 1),
        "complete": done,
        "software": {**software(), "transport": "kernel TCP (live serving runs)"},
        "notes": [
            "6.1: live serving runs at the default time scale (one lab frame of 1,500 B is "
            f"{scale_for(test).describe()['frame_us']:g} µs of modelled time on the slowest "
            "host port); T_prefill, T_transfer and T_decode_init are per request from the "
            "gateway's and the KV logs and sum to its TTFT at the gateway; a run the lab's "
            "verdict did not trust is kept, its comparison out of reach"
        ],
        "refused": [],
        "rows": rows,
        "summary": summary,
        "comparison": report.compare(summary),
    }
