"""`zcube-lab bmwg run 12.3`: the draft's link failure during serving on each fabric, as live
serving runs (`zcube_lab.core.bmwg.linkfail` says what a trial is, which link each fabric loses
and how the figures are defined). Each trial is one `zcube-lab run --policy ff --fail 'link ...'`
in its own process (as §6.1's, `zcube_lab.emulator.bmwg.live`), its folder kept under the
results folder; `bmwg.json` is written after every trial in the shape of the other tests'."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from zcube_lab.core.bmwg import linkfail as lf
from zcube_lab.core.bmwg import report
from zcube_lab.core.bmwg.catalogue import DRAFT
from zcube_lab.emulator.bmwg.live import RESULTS_FILE, RUN_OVERHEAD_S, _trial, run_argv


def estimate_wall_s(fabrics: int, trials: int, trial_seconds: float) -> float:
    """Wall seconds of a §12.3 run: one live run per fabric and trial."""
    return fabrics * trials * (trial_seconds + RUN_OVERHEAD_S)


def links_of(fabrics: Sequence[str], gpus: int) -> dict[str, lf.FailedLink]:
    """The link each fabric's trials fail (`linkfail.failed_link` on the run's fabric)."""
    from zcube_lab.core.fabric.scaledown import scaled_fabric

    out = {}
    for kind in fabrics:
        fabric = scaled_fabric(kind, gpus)
        out[kind] = lf.failed_link(fabric, lf.decode_hosts(fabric))
    return out


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def _figures(run: Path, link: str) -> dict[str, Any]:
    """A trial's figures from its run folder (`linkfail.trial_figures`)."""
    summary = json.loads((run / "summary.json").read_text())
    return lf.trial_figures(
        summary, _jsonl(run / "requests.jsonl"), _jsonl(run / "faults.jsonl"), link
    )


def refigure(path: Path) -> dict[str, Any]:
    """A §12.3 bmwg.json with every trial's figures computed again from its run folder (kept
    beside it) by today's `linkfail.trial_figures`, and its summary and comparison with them:
    for a figure added or defined anew after the runs. The runs' own records are not
    touched."""
    doc = json.loads(path.read_text())
    for r in doc["rows"]:
        r["figures"] = _figures(path.parent / r["run"], r["failed_link"]["link"])
    doc["summary"] = report.summarize(doc["rows"])
    doc["comparison"] = report.compare(doc["summary"])
    return doc


def run_link_failure(
    fabrics: Sequence[str],
    gpus: int,
    trials: int,
    trial_seconds: float,
    seed: int,
    results: Path,
    progress: Callable[[str], None] = print,
    retries: int = 2,
) -> Path:
    """Every fabric's trials; the path of bmwg.json."""
    from zcube_lab.core.bmwg.catalogue import test_of
    from zcube_lab.core.fabric.scaledown import scaled_fabric

    lf.check_trial_seconds(trial_seconds)
    links = links_of(fabrics, gpus)
    out = results / f"bmwg-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    test = test_of(lf.SECTION)
    est = estimate_wall_s(len(fabrics), trials, trial_seconds)
    progress(f"{DRAFT} §12.3 on {', '.join(fabrics)}: {trials} trials of {trial_seconds:g} s "
             f"each; estimated wall time {est / 60:.1f} min")  # fmt: skip
    progress("parameters (the draft's | this run's):")
    for line in lf.parameter_lines(trials, trial_seconds, test.trials, test.trial_s):
        progress(line)
    for kind, link in links.items():
        progress(f"  {kind} loses {link.describe()}")
    workload = out / "workload-12.3.json"
    workload.write_text(json.dumps(lf.profile(), indent=1) + "\n")
    rows: list[dict[str, Any]] = []
    total = len(fabrics) * trials
    t0 = time.monotonic()
    path = out / RESULTS_FILE
    for fabric in fabrics:
        spec = lf.fail_spec(links[fabric], trial_seconds)
        prefill = lf.prefill_servers(scaled_fabric(fabric, gpus))
        for trial in range(trials):
            run_dir = out / f"{fabric}-t{trial}"
            argv = run_argv(fabric, gpus, workload, trial_seconds, seed + trial, run_dir)
            argv += ["--policy", lf.POLICY, "--prefill-servers", str(prefill), "--fail", spec]
            w0 = time.monotonic()
            summary_path, spoiled = _trial(argv, run_dir, retries, progress)
            run = summary_path.parent
            summary = json.loads(summary_path.read_text())
            figs = _figures(run, links[fabric].to_dict()["link"])
            rows.append(
                {
                    "section": lf.SECTION,
                    "case": lf.case_label(),
                    "params": {"prompt_tokens": lf.PROMPT_TOKENS, "rate": lf.RATE},
                    "fabric": fabric,
                    "trial": trial,
                    "failed_link": links[fabric].to_dict(),
                    "fail": spec,
                    "policy": summary.get("policy"),
                    "run": str(run.relative_to(out)),
                    "spoiled_by_machine": [str(p.relative_to(out)) for p in spoiled],
                    "figures": figs,
                    "reasons": list((summary.get("health") or {}).get("reasons") or []),
                    "wall_s": round(time.monotonic() - w0, 1),
                }
            )
            el = time.monotonic() - t0
            left = el / len(rows) * (total - len(rows))
            progress(f"[{len(rows)}/{total}] §12.3 {fabric} trial {trial + 1}: {_headline(figs)} "
                     f"({el / 60:.1f} min in, ~{left / 60:.1f} min left)")  # fmt: skip
            doc = _document(fabrics, gpus, trials, trial_seconds, links, rows, t0, est, False)
            path.write_text(json.dumps(doc, indent=1))
    doc = _document(fabrics, gpus, trials, trial_seconds, links, rows, t0, est, True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for c in doc["comparison"]:
        progress(f"§12.3: {c['figure']} zcube vs {c['versus']}: {c['verdict']}")
    progress(f"written: {path}")
    return path


def _headline(f: dict[str, Any]) -> str:
    def num(name: str, unit: str = "") -> str:
        v = f.get(name)
        return "-" if v is None else f"{v:,.1f}{unit}"

    trusted = "not trusted" if f.get("untrusted") else "trusted"
    return (
        f"link down {num('fault_held_s', ' s')}, failed {f.get('failed_requests')} of "
        f"{f.get('requests')}, TTFT p99 before/during/after {num('TTFT_p99_before_ms')}/"
        f"{num('TTFT_p99_during_ms')}/{num('TTFT_p99_after_ms')} ms, recovered in "
        f"{num('recovery_time_s', ' s')}, KV pulls retried {f.get('KV_pulls_retried')}, {trusted}"
    )


def _document(fabrics: Sequence[str], gpus: int, trials: int, trial_seconds: float,
              links: dict[str, lf.FailedLink], rows: list[dict[str, Any]], t0: float,
              est: float, done: bool) -> dict[str, Any]:  # fmt: skip
    from zcube_lab.core.bmwg.catalogue import test_of
    from zcube_lab.core.bmwg.scaling import scale_for
    from zcube_lab.emulator.bmwg.runner import software

    summary = report.summarize(rows)
    test = test_of(lf.SECTION)
    at, span = lf.fault_timing(trial_seconds)
    return {
        "draft": DRAFT,
        "sections": [lf.SECTION],
        "fabrics": list(fabrics),
        "gpus": gpus,
        "trials": trials,
        "trial_seconds": trial_seconds,
        "draft_trials": {test.section: [test.trials, test.trial_s]},
        "resolution": scale_for(test).describe(),  # the live lab's default scale
        "rate": lf.RATE,
        "prompt_tokens": lf.PROMPT_TOKENS,
        "policy": lf.POLICY,
        "fail_at_s": at,
        "fail_for_s": span,
        "failed_links": {k: v.to_dict() for k, v in links.items()},
        "estimate_wall_s": round(est, 1),
        "wall_s": round(time.monotonic() - t0, 1),
        "complete": done,
        "software": {**software(), "transport": "kernel TCP (live serving runs)"},
        "notes": [
            f"12.3: live serving runs at the default time scale, routing policy {lf.POLICY}; "
            f"each fabric loses one switch-to-switch link at {at:g} s for {span:g} s, the first "
            "fabric-facing link of the switch with the most decode host ports (the KV pulls "
            "into those decode hosts cross that switch's fabric-facing links); a "
            f"{lf.BIN_S:g} s bin (by send time, from the onset) is disrupted when a request "
            f"sent in it failed or its TTFT p99 is more than {lf.TOLERANCE:.0%} above the "
            "highest TTFT sent before the onset; recovery_time_s: the onset to the end of the "
            "last disrupted bin (0: none), disruption_time_s: the disrupted bins' seconds; a "
            "run the lab's verdict did not trust is kept, its comparison out of reach"
        ],
        "refused": [],
        "rows": rows,
        "summary": summary,
        "comparison": report.compare(summary),
    }
