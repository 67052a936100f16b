"""The draft's tests that run as live serving runs, and the one runner they share.

A live section (`LiveSection`) is a list of cases, each a workload profile with its row
parameters, and a function that reads a finished run's folder into the row's figures. The
runner (`run_section`) runs every case's trials on every fabric: each trial is one `zcube-lab
run` in its own process (it builds its lab and tears it down, Ctrl-C included), its folder kept
under the results folder, run again when the lab's verdict rejected it for the machine's reasons
alone (`_trial`). `bmwg.json` is written after every trial in the shape of the replay tests'
(rows, summary, comparison), so docs/BMWG.md reads both alike.

Each section's module builds its `LiveSection` from the run's `BmwgConfig` (`SECTIONS` names
them), checking its parameters there, before any lab. §6.1 (end-to-end disaggregated TTFT,
`zcube_lab.core.bmwg.ttft`) is built here."""

from __future__ import annotations

import datetime as dt
import functools
import importlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zcube_lab.core.bmwg import report
from zcube_lab.core.bmwg import ttft as t61
from zcube_lab.core.bmwg.catalogue import DRAFT
from zcube_lab.emulator.lab.options import LabOptions

if TYPE_CHECKING:
    from zcube_lab.core.bmwg.config import BmwgConfig

RESULTS_FILE = "bmwg.json"
# Wall seconds a run costs besides its load (lab, servers, Prometheus, collection, teardown),
# measured on this machine's quick §6.1: 36.5-39.7 wall s for a 15 s run (docs/BENCHMARKS.md, bmwg).
RUN_OVERHEAD_S = 23.0
LIVE_TRANSPORT = "kernel TCP (live serving runs)"

# The live sections: section -> "module:function" building its LiveSection from a BmwgConfig.
SECTIONS: dict[str, str] = {
    "6.1": "zcube_lab.emulator.bmwg.live:ttft_section",
    "6.2": "zcube_lab.emulator.bmwg.xpyd:section",
    "9.3": "zcube_lab.emulator.bmwg.balance:section",
    "9.4": "zcube_lab.emulator.bmwg.fairness:section",
    "10.1": "zcube_lab.emulator.bmwg.ttftlen:section",
    "10.2": "zcube_lab.emulator.bmwg.itl:section",
    "12.3": "zcube_lab.emulator.bmwg.linkfail:section",
    "13.3": "zcube_lab.emulator.bmwg.soak:section",
    "11.1": "zcube_lab.emulator.bmwg.throughput:section",
}


@dataclass(frozen=True)
class LiveCase:
    """One case of a live section: its workload profile and what its rows carry."""

    key: str  # its part of the folder and file names, e.g. "1024", "0.5", "2P2D"
    label: str  # the rows' case, which the report groups trials by
    params: Mapping[str, Any]
    profile: Mapping[str, Any]  # the workload profile (zcube_lab.workloads JSON)
    argv: tuple[str, ...] = ()  # added to every fabric's `zcube-lab run`
    shown: str | None = None  # how the progress line names it (its label when None)


def _no_argv(_fabric: str, _case: LiveCase) -> Sequence[str]:
    return ()


@dataclass(frozen=True)
class LiveSection:
    """What the runner needs of a section. `row` reads a finished run's folder (its fabric and
    case given) into the row's "figures" and any further fields the section keeps per trial;
    `headline` says a trial's figures in one line; `head` holds the section's own fields of
    bmwg.json; `finish` adds fields computed from the document (e.g. a best split) and `closing`
    says lines of the finished one before its comparison."""

    section: str
    cases: tuple[LiveCase, ...]
    row: Callable[[Path, str, LiveCase], Mapping[str, Any]]
    headline: Callable[[Mapping[str, Any]], str]
    head: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    parameter_lines: tuple[str, ...] = ()  # printed before it starts: the draft's beside ours
    drain_s: float = 0.0  # wall seconds a run takes after its load (the estimate)
    fabric_argv: Callable[[str, LiveCase], Sequence[str]] = _no_argv
    finish: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    closing: Callable[[Mapping[str, Any]], Sequence[str]] | None = None  # lines said at the end
    transport: str = LIVE_TRANSPORT


def build(section: str, cfg: BmwgConfig) -> LiveSection:
    """The section's `LiveSection` for this run (its parameters checked: a ConfigError)."""
    module, func = SECTIONS[section].split(":")
    return getattr(importlib.import_module(module), func)(cfg)


def estimate_wall_s(cases: int, fabrics: int, trials: int, trial_seconds: float,
                    drain_s: float = 0.0) -> float:  # fmt: skip
    """Wall seconds of a live section: one run per case, fabric and trial."""
    return cases * fabrics * trials * (trial_seconds + RUN_OVERHEAD_S + drain_s)


def run_argv(fabric: str, gpus: int, workload: Path, seconds: float, seed: int,
             results: Path) -> list[str]:  # fmt: skip
    """The `zcube-lab run` of one trial."""
    return [
        sys.executable, "-m", "zcube_lab.cli", "run", "--fabric", fabric, "--gpus", str(gpus),
        "--workload", str(workload), "--duration", f"{seconds:g}", "--seed", str(seed),
        "--results", str(results),
    ]  # fmt: skip


def results_folder(results: Path) -> Path:
    """A new folder for one section's run, named by the second it starts (`-2`, `-3`... when
    another section started in the same second)."""
    stem = f"bmwg-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    results.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        out = results / (stem if n == 1 else f"{stem}-{n}")
        try:
            out.mkdir()
        except FileExistsError:
            continue
        return out
    raise RuntimeError(f"{results}: no free folder name for {stem}")


def run_section(
    sec: LiveSection,
    fabrics: Sequence[str],
    gpus: int,
    trials: int,
    trial_seconds: float,
    seed: int,
    results: Path,
    progress: Callable[[str], None] = print,
    retries: int = 2,
) -> Path:
    """Every case's trials on every fabric; the path of bmwg.json."""
    out = results_folder(results)
    s = f"§{sec.section}"
    est = estimate_wall_s(len(sec.cases), len(fabrics), trials, trial_seconds, sec.drain_s)
    for line in sec.parameter_lines:
        progress(line)
    progress(
        f"{DRAFT} {s} on {', '.join(fabrics)}: {len(sec.cases)} case(s) x {trials} trial(s) "
        f"of {trial_seconds:g} s; estimated wall time {est / 60:.1f} min"
    )
    rows: list[dict[str, Any]] = []
    total = len(sec.cases) * len(fabrics) * trials
    t0 = time.monotonic()
    path = out / RESULTS_FILE

    def document(done: bool) -> dict[str, Any]:
        return _document(sec, fabrics, gpus, trials, trial_seconds, rows, t0, est, done)

    workloads = {}
    for case in sec.cases:
        workloads[case.key] = out / f"workload-{case.key}.json"
        workloads[case.key].write_text(json.dumps(case.profile, indent=1) + "\n")
    for fabric in fabrics:
        for case in sec.cases:
            shown = f"{case.label if case.shown is None else case.shown} ".lstrip()
            for trial in range(trials):
                run_dir = out / f"{fabric}-{case.key}-t{trial}"
                argv = run_argv(fabric, gpus, workloads[case.key], trial_seconds, seed + trial,
                                run_dir)  # fmt: skip
                argv += [*case.argv, *sec.fabric_argv(fabric, case)]
                w0 = time.monotonic()
                summary_path, spoiled = _trial(argv, run_dir, retries, progress)
                summary = json.loads(summary_path.read_text())
                row: dict[str, Any] = {
                    "section": sec.section,
                    "case": case.label,
                    "params": dict(case.params),
                    "fabric": fabric,
                    "trial": trial,
                    "run": str(summary_path.parent.relative_to(out)),
                    "spoiled_by_machine": [str(p.relative_to(out)) for p in spoiled],
                }
                row.update(sec.row(summary_path.parent, fabric, case))
                row["reasons"] = list((summary.get("health") or {}).get("reasons") or [])
                row["wall_s"] = round(time.monotonic() - w0, 1)
                rows.append(row)
                el = time.monotonic() - t0
                left = el / len(rows) * (total - len(rows))
                progress(
                    f"[{len(rows)}/{total}] {s} {fabric} {shown}trial {trial + 1}: "
                    f"{sec.headline(row['figures'])} ({el / 60:.1f} min in, "
                    f"~{left / 60:.1f} min left)"
                )
                path.write_text(json.dumps(document(False), indent=1))
    doc = document(True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for line in sec.closing(doc) if sec.closing is not None else ():
        progress(line)
    for c in doc["comparison"]:
        progress(f"{s} {c['case']}: {c['figure']} zcube vs {c['versus']}: {c['verdict']}")
    progress(f"written: {path}")
    return path


def _document(sec: LiveSection, fabrics: Sequence[str], gpus: int, trials: int,
              trial_seconds: float, rows: list[dict[str, Any]], t0: float, est: float,
              done: bool) -> dict[str, Any]:  # fmt: skip
    """bmwg.json: what ran and how (the draft's §14 software configuration included), every
    trial's row, the summary over trials and the fabric comparison."""
    from zcube_lab.core.bmwg.catalogue import test_of
    from zcube_lab.core.bmwg.scaling import scale_for
    from zcube_lab.emulator.bmwg.runner import software

    summary = report.summarize(rows)
    test = test_of(sec.section)
    doc: dict[str, Any] = {
        "draft": DRAFT,
        "sections": [sec.section],
        "fabrics": list(fabrics),
        "gpus": gpus,
        "trials": trials,
        "trial_seconds": trial_seconds,
        "draft_trials": {test.section: [test.trials, test.trial_s]},
        "resolution": scale_for(test).describe(),  # the live lab's default scale
        **sec.head,
        "estimate_wall_s": round(est, 1),
        "wall_s": round(time.monotonic() - t0, 1),
        "complete": done,
        # live runs keep the lab's default: no ingress accounting (docs/LOSSLESS.md)
        "software": {**software(ingress=LabOptions().lossless_ingress), "transport": sec.transport},
        "notes": list(sec.notes),
        "refused": [],
        "rows": rows,
        "summary": summary,
        "comparison": report.compare(summary),
    }
    if sec.finish is not None:
        doc.update(sec.finish(doc))
    return doc


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


# §6.1: end-to-end disaggregated TTFT


def ttft_section(cfg: BmwgConfig) -> LiveSection:
    """§6.1 over the run's prompt lengths at its rate."""
    t61.check_trial_seconds(cfg.trial_seconds)
    cases = tuple(
        LiveCase(
            str(n),
            t61.case_label(n),
            {"prompt_tokens": n},
            t61.profile(n, cfg.rate),
            shown=f"{n} tokens",
        )
        for n in cfg.prompt_lengths
    )
    frame_us = _frame_us(t61.SECTION)
    return LiveSection(
        section=t61.SECTION,
        cases=cases,
        row=lambda run, _fabric, _case: {
            "figures": t61.trial_figures(json.loads((run / "summary.json").read_text()))
        },
        headline=ttft_headline,
        head={"rate": cfg.rate, "prompts": list(cfg.prompt_lengths)},
        notes=(
            "6.1: live serving runs at the default time scale (one lab frame of 1,500 B is "
            f"{frame_us:g} µs of modelled time on the slowest host port); T_prefill, "
            "T_transfer and T_decode_init are per request from the gateway's and the KV logs "
            "and sum to its TTFT at the gateway; a run the lab's verdict did not trust is "
            "kept, its comparison out of reach",
        ),
        parameter_lines=(
            f"§6.1 prompts {', '.join(map(str, cfg.prompt_lengths))} tokens at {cfg.rate:g} "
            "req/s (the draft asks 20 trials of >= 60 s)",
        ),
    )


def figure_text(f: Mapping[str, Any], name: str, fmt: str = ",.1f") -> str:
    """A trial's figure for a progress line: formatted, "-" without a value."""
    v = f.get(name)
    return "-" if v is None else format(v, fmt)


def trusted_text(f: Mapping[str, Any]) -> str:
    """Whether the lab's verdict trusted the trial, for a progress line."""
    return "not trusted" if f.get("untrusted") else "trusted"


def _frame_us(section: str) -> float:
    from zcube_lab.core.bmwg.catalogue import test_of
    from zcube_lab.core.bmwg.scaling import scale_for

    return float(scale_for(test_of(section)).describe()["frame_us"])


def ttft_headline(f: Mapping[str, Any]) -> str:
    ms = functools.partial(figure_text, f)
    trusted = trusted_text(f)
    return (
        f"TTFT p50 {ms('TTFT_p50_ms')} ms = prefill {ms('T_prefill_p50_ms')} + transfer "
        f"{ms('T_transfer_p50_ms')} + decode init {ms('T_decode_init_p50_ms')} ms (medians), "
        f"{trusted}"
    )
