"""`zcube-lab bmwg`: the IETF draft draft-calabria-bmwg-ai-fabric-inference-bench-05's tests
by name. `bmwg list`: every test of §5-§13, what the lab can do with it and why; `bmwg run
SECTION...`: the tests built so far (5.1-5.3, 7.1, 7.3, 7.4, 8.2, 8.4, 10.4 at the fine time scale
as replays; 6.1, 6.2, 9.4, 10.2 and 12.3 as live serving runs) on several fabrics, the draft's
trials, a results folder with bmwg.json (docs/BMWG.md; issue 46). `run` needs root."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from zcube_lab.core.options import option


@dataclass(frozen=True)
class ListConfig:
    """What `bmwg list` takes."""

    json: bool = option(False, switch=True, help="the catalogue as JSON")
    params: bool = option(
        False, switch=True, help="also each test's parameters: the draft's and the lab's"
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    from zcube_lab.core.bmwg.config import BmwgConfig
    from zcube_lab.core.options import add_flags

    sub = p.add_subparsers(dest="bmwg_command", metavar="ACTION", required=True)
    ls = sub.add_parser(
        "list",
        help="every test of the draft's §5-§13: status and reason",
        formatter_class=p.formatter_class,
    )
    add_flags(ls, ListConfig)
    run_p = sub.add_parser(
        "run",
        help="run tests by section on fabrics (needs root)",
        description="Run the draft's tests by section number on each fabric, the draft's "
        "trials unless lowered; prints the estimated wall time first and the results folder "
        "at the end.",
        formatter_class=p.formatter_class,
    )
    run_p.add_argument("sections", nargs="+", metavar="SECTION", help="e.g. 8.2 7.4")
    add_flags(run_p, BmwgConfig)


def run(args: argparse.Namespace) -> int:
    if args.bmwg_command == "list":
        from zcube_lab.core.options import from_args

        return list_tests(from_args(ListConfig, args))
    return run_tests(args)


def catalogue_rows() -> list[dict[str, Any]]:
    """One dict per test: section, name, status, reason, KPIs, whether `bmwg run` runs it."""
    from zcube_lab.core.bmwg.catalogue import TESTS

    return [
        {
            "section": t.section,
            "name": t.name,
            "status": t.status,
            "reason": t.reason,
            "kpis": list(t.kpis),
            "bmwg_run": t.runner,
            "trials": t.trials,
            "trial_s": t.trial_s,
        }
        for t in TESTS
    ]


def list_tests(cfg: ListConfig) -> int:
    from zcube_lab.core.bmwg.catalogue import DRAFT, TESTS
    from zcube_lab.core.bmwg.scaling import parameter_rows

    rows = catalogue_rows()
    if cfg.json:
        out: dict[str, Any] = {"draft": DRAFT, "tests": rows}
        if cfg.params:
            out["parameters"] = parameter_rows(TESTS)
        print(json.dumps(out, indent=2))
        return 0
    print(f"{DRAFT}: {len(rows)} tests of §5-§13 ('run' = `zcube-lab bmwg run` carries it)")
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        mark = "run" if r["bmwg_run"] else "   "
        print(f"{r['section']:>5}  {r['name']:<{width}}  {mark}  {r['status']:<18}  {r['reason']}")
    if cfg.params:
        print("\nparameters (section, name, draft, lab, scale):")
        for row in parameter_rows(TESTS):
            print("  " + " | ".join(row))
    return 0


def run_tests(args: argparse.Namespace) -> int:
    from zcube_lab.adapters.procs import interrupt_on_stop_signals
    from zcube_lab.core.bmwg.catalogue import runnable_sections
    from zcube_lab.core.bmwg.config import BmwgConfig
    from zcube_lab.core.bmwg.ttft import check_trial_seconds
    from zcube_lab.core.options import from_args
    from zcube_lab.emulator.bmwg.live import SECTIONS as LIVE_SECTIONS
    from zcube_lab.emulator.bmwg.live import build, run_section
    from zcube_lab.emulator.bmwg.runner import plan_run, run_plan
    from zcube_lab.emulator.lab.system import LabError

    cfg = from_args(BmwgConfig, args)
    tests = runnable_sections(args.sections)  # an unknown or unbuilt section: exit 2
    live = [t for t in tests if t.section in LIVE_SECTIONS]  # live serving runs; others replay
    replayed = [t for t in tests if t.section not in LIVE_SECTIONS]
    if live:
        check_trial_seconds(cfg.trial_seconds)  # a section may ask more: its own build
    sections = [build(t.section, cfg) for t in live]  # every check before any lab
    plan = plan_run(cfg, replayed) if replayed else None
    if os.geteuid() != 0:
        print(
            "zcube-lab bmwg run: needs root (it builds Mininet labs): run it with sudo",
            file=sys.stderr,
        )
        return 1
    interrupt_on_stop_signals()
    try:
        for sec in sections:
            out = run_section(sec, cfg.fabric_kinds, cfg.gpus, cfg.trials, cfg.trial_seconds,
                              cfg.seed, cfg.results, retries=cfg.retries)  # fmt: skip
            print(f"results folder: {out.parent}")
        if plan is not None:
            out = run_plan(plan, cfg)
            print(f"results folder: {out.parent}")
    except (LabError, RuntimeError) as exc:
        print(f"zcube-lab bmwg run: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("zcube-lab bmwg run: interrupted; the lab is torn down", file=sys.stderr)
        return 130
    return 0
