"""`zcube-lab bmwg run 9.4`: Jain's fairness index over the decode workers on each fabric, as
live serving runs (`zcube_lab.core.bmwg.fairness` says what a case, a trial and a worker's
share are). Each trial is one `zcube-lab run` in its own process, as §6.1's
(`zcube_lab.emulator.bmwg.live`); after it, the decode engines' own counters are read from the
run's Prometheus database (`promtool tsdb dump`, the lab's Prometheus tools) and the engines'
KV logs are kept beside them as a check. `bmwg.json` is written after every trial."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from zcube_lab.core.bmwg import fairness as f94
from zcube_lab.core.bmwg import report
from zcube_lab.core.bmwg.catalogue import DRAFT
from zcube_lab.emulator.bmwg.live import RESULTS_FILE, RUN_OVERHEAD_S, _trial, run_argv

PROMTOOL = "promtool"
# The run drains its requests after the load: at 0.9 of the knee up to a few seconds more.
DRAIN_S = 5.0


def knee(gpus: int) -> float:
    """§9.4's knee on a fabric of `gpus` GPU hosts (req/s): the prefill pool over GLM-5.1's
    prefill of one `PROMPT_TOKENS` prompt."""
    from zcube_lab.serving.models import get_profile, prefill_step_seconds

    step = prefill_step_seconds(get_profile(f94.MODEL), f94.PROMPT_TOKENS)
    return f94.knee_rate(gpus, step)


def estimate_wall_s(cases: int, fabrics: int, trials: int, trial_seconds: float) -> float:
    """Wall seconds of a §9.4 run: one live run per load level, fabric and trial."""
    return cases * fabrics * trials * (trial_seconds + RUN_OVERHEAD_S + DRAIN_S)


def decode_engines(run_dir: Path) -> list[str]:
    """The decode engines of a run by their metrics' `engine` label (the GPU host's number),
    from the placement its config.json records."""
    cfg = json.loads((run_dir / "config.json").read_text())
    ids = [e["engine_id"] for e in cfg["placement"] if e["role"] == "decode"]
    return [i.rsplit("-", 1)[-1] for i in ids]


def read_series(run_dir: Path) -> dict[tuple[str, str, str], list[tuple[int, float]]]:
    """The decode engines' samples of `METRICS` from the run's Prometheus database."""
    names = "|".join(metric for metric, _ in f94.METRICS.values())
    match = f'{{job="{f94.DECODE_JOB}",__name__=~"{names}"}}'
    done = subprocess.run(
        [PROMTOOL, "tsdb", "dump", f"--match={match}", str(run_dir / "prometheus" / "tsdb")],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"§9.4 {run_dir.name}: promtool tsdb dump: {done.stderr[-500:]}")
    return f94.parse_dump(done.stdout)


def kv_log_shares(run_dir: Path, engines: Sequence[str]) -> dict[str, dict[str, float]]:
    """The check beside the counters, from each decode engine's KV log (one line per pull
    attempt): requests it pulled KV for, and the bytes of its completed pulls (lab bytes)."""
    out: dict[str, dict[str, float]] = {"requests": {}, "kv_bytes": {}}
    for e in engines:
        path = run_dir / "logs" / f"kv-decode-{e}.jsonl"
        rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if (
            path.exists()) else []  # fmt: skip
        ok = [r for r in rows if r.get("ok")]
        out["requests"][e] = float(len({r["request_id"] for r in ok}))
        out["kv_bytes"][e] = float(sum(int(r.get("bytes") or 0) for r in ok))
    return out


def run_fairness(
    fabrics: Sequence[str],
    gpus: int,
    levels: Sequence[float],
    trials: int,
    trial_seconds: float,
    seed: int,
    results: Path,
    progress: Callable[[str], None] = print,
    retries: int = 2,
) -> Path:
    """Every load level's trials on every fabric; the path of bmwg.json."""
    out = results / f"bmwg-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    est = estimate_wall_s(len(levels), len(fabrics), trials, trial_seconds)
    for line in parameter_lines(gpus, levels, trials, trial_seconds):
        progress(line)
    progress(f"{DRAFT} §9.4 on {', '.join(fabrics)}: estimated wall time {est / 60:.1f} min")
    rows: list[dict[str, Any]] = []
    total = len(levels) * len(fabrics) * trials
    t0 = time.monotonic()
    path = out / RESULTS_FILE

    def document(done: bool) -> dict[str, Any]:
        return _document(fabrics, gpus, levels, trials, trial_seconds, rows, t0, est, done)

    for fabric in fabrics:
        for load in levels:
            workload = out / f"workload-{load:g}.json"
            workload.write_text(json.dumps(f94.profile(load, knee(gpus)), indent=1) + "\n")
            for trial in range(trials):
                run_dir = out / f"{fabric}-{load:g}-t{trial}"
                argv = run_argv(fabric, gpus, workload, trial_seconds, seed + trial, run_dir)
                w0 = time.monotonic()
                summary_path, spoiled = _trial(argv, run_dir, retries, progress)
                rows.append(trial_row(summary_path, fabric, load, gpus, trial, out, spoiled))
                rows[-1]["wall_s"] = round(time.monotonic() - w0, 1)
                el = time.monotonic() - t0
                left = el / len(rows) * (total - len(rows))
                progress(
                    f"[{len(rows)}/{total}] §9.4 {fabric} load {load:g} trial {trial + 1}: "
                    f"{headline(rows[-1]['figures'])} ({el / 60:.1f} min in, "
                    f"~{left / 60:.1f} min left)"
                )
                path.write_text(json.dumps(document(False), indent=1))
    doc = document(True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for c in doc["comparison"]:
        progress(f"§9.4 {c['case']}: {c['figure']} zcube vs {c['versus']}: {c['verdict']}")
    progress(f"written: {path}")
    return path


def trial_row(summary_path: Path, fabric: str, load: float, gpus: int, trial: int, out: Path,
              spoiled: Sequence[Path]) -> dict[str, Any]:  # fmt: skip
    """One trial's row: the figures, each worker's shares and the KV logs' check."""
    run_dir = summary_path.parent
    summary = json.loads(summary_path.read_text())
    engines = decode_engines(run_dir)
    shares = f94.totals(read_series(run_dir), engines)
    return {
        "section": f94.SECTION,
        "case": f94.case_label(load),
        "params": {"load": load, "rate": f94.rate_of(load, knee(gpus))},
        "fabric": fabric,
        "trial": trial,
        "run": str(run_dir.relative_to(out)),
        "spoiled_by_machine": [str(p.relative_to(out)) for p in spoiled],
        "figures": f94.trial_figures(summary, shares, len(engines)),
        "workers": {"engines": engines, **shares, "kv_log": kv_log_shares(run_dir, engines)},
        "reasons": list((summary.get("health") or {}).get("reasons") or []),
    }


def headline(f: Mapping[str, Any]) -> str:
    def num(name: str, fmt: str) -> str:
        v = f.get(name)
        return "-" if v is None else format(v, fmt)

    trusted = "not trusted" if f.get("untrusted") else "trusted"
    return (
        f"JFI over {f.get('decode_workers')} decode workers: tokens {num('JFI_decode', '.3f')}, "
        f"KV bytes {num('JFI_kv', '.3f')}, decode time {num('JFI_busy', '.3f')}; TTFT p99 "
        f"{num('TTFT_p99_ms', ',.0f')} ms, {trusted}"
    )


def parameter_lines(gpus: int, levels: Sequence[float], trials: int,
                    trial_seconds: float) -> list[str]:  # fmt: skip
    """The draft's parameters beside the run's, printed before it starts."""
    from zcube_lab.core.bmwg.catalogue import test_of

    t = test_of(f94.SECTION)
    at = knee(gpus)
    rates = ", ".join(f"{v:g} ({f94.rate_of(v, at):g} req/s)" for v in levels)
    return [
        "§9.4 parameters, draft -> this run:",
        f"  decode workers N_D: {', '.join(map(str, f94.DRAFT_WORKERS))} -> "
        f"{f94.decode_workers(gpus)} (half of {gpus} GPU hosts; the other half prefill)",
        f"  load: a sustained request stream (no rate named) -> {rates} of the knee, "
        f"{at:.2f} req/s (prefill of {f94.PROMPT_TOKENS:,} tokens on "
        f"{f94.prefill_gpus(gpus)} GPUs)",
        f"  requests: -> {f94.PROMPT_TOKENS:,} prompt + {f94.OUTPUT_TOKENS} output tokens "
        f"({f94.MODEL}, CFG-E), no prefix cache",
        "  metrics: KV receive rate, GPU utilization, output TPS -> "
        + "; ".join(f"{name}: {metric}" for metric, name in f94.METRICS.values()),
        f"  trials: {t.trials} x {t.trial_s:g} s -> {trials} x {trial_seconds:g} s",
    ]


def _document(fabrics: Sequence[str], gpus: int, levels: Sequence[float], trials: int,
              trial_seconds: float, rows: list[dict[str, Any]], t0: float, est: float,
              done: bool) -> dict[str, Any]:  # fmt: skip
    from zcube_lab.core.bmwg.catalogue import test_of
    from zcube_lab.core.bmwg.scaling import scale_for
    from zcube_lab.emulator.bmwg.runner import software

    summary = report.summarize(rows)
    test = test_of(f94.SECTION)
    return {
        "draft": DRAFT,
        "sections": [f94.SECTION],
        "fabrics": list(fabrics),
        "gpus": gpus,
        "trials": trials,
        "trial_seconds": trial_seconds,
        "draft_trials": {test.section: [test.trials, test.trial_s]},
        "resolution": scale_for(test).describe(),  # the live lab's default scale
        "levels": list(levels),
        "knee_rate": round(knee(gpus), 3),
        "decode_workers": f94.decode_workers(gpus),
        "prompt_tokens": f94.PROMPT_TOKENS,
        "output_tokens": f94.OUTPUT_TOKENS,
        "estimate_wall_s": round(est, 1),
        "wall_s": round(time.monotonic() - t0, 1),
        "complete": done,
        "software": {**software(), "transport": "kernel TCP (live serving runs)"},
        "notes": [
            "9.4: live serving runs at the default time scale; each decode worker's share is "
            "its own counters' total (tokens generated, KV bytes pulled, request-seconds in "
            "decode), Jain's index over the workers; the gateway's routing policy (least "
            "outstanding requests) decides the balance, the fabric only through the KV pulls"
        ],
        "refused": [],
        "rows": rows,
        "summary": summary,
        "comparison": report.compare(summary),
    }
