"""Benchmark report: a finished lossless run's victim accounting, recomputed from its files
(for runs whose summary lacks the `victims` section because the runner looked for the agent's
episodes in the wrong folder before commit "Victim accounting reads the episodes where the agent
writes them").

    .venv/bin/python -m bench.victims_of RUN_DIR [RUN_DIR ...] [--write]

Rebuilds the run's fabric and placement from its `config.json`, reads its engines' exact logs
and `logs/lossless-episodes.jsonl` with the runner's own code
(`zcube_lab.emulator.results.lossless.victimlogs.run_victims`, times / the run's dilation), prints
the section and, with `--write`, puts it into the run's `summary.json` (a section already there is
left alone). It runs nothing.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.placement import Engine, LayoutSpec, Placement
from zcube_lab.emulator.results.lossless.victimlogs import run_victims
from zcube_lab.emulator.results.lossless.victims import VictimReport
from zcube_lab.emulator.results.run.summary import RunSummary


def placement_of(config: dict[str, Any]) -> Placement:
    """The run's placement as its config.json wrote it."""
    engines = tuple(
        Engine(**{**e, "ep_peers": tuple(e.get("ep_peers") or ())}) for e in config["placement"]
    )
    layout = config.get("layout") or {}
    return Placement(engines, LayoutSpec(**layout))


def victims_of(run_dir: Path) -> VictimReport | None:
    """The run's victim accounting from its files; None without an episode log."""
    config = json.loads((run_dir / "config.json").read_text())
    fabric = build_fabric(FabricSpec.from_json(json.dumps(config["fabric"])))
    clock = RunSummary.read(run_dir).clock  # the run's, as its summary recorded it
    return run_victims(run_dir, fabric, placement_of(config), clock)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="run folders")
    parser.add_argument("--write", action="store_true", help="add the section to summary.json")
    args = parser.parse_args(argv)
    for run in args.runs:
        report = victims_of(run)
        if report is None:
            print(f"{run.name}: no episode log")
            continue
        d = report.to_dict()
        print(
            f"{run.name}: {d['pauses']} pauses, EP {d['ep_exchanges']} exchanges, "
            f"{d['ep_victims']} behind another class's pause (share {d['victim_share']})"
        )
        summary_file = run / "summary.json"
        if args.write and summary_file.is_file():
            summary = json.loads(summary_file.read_text())
            if summary.get("victims") is None:
                summary["victims"] = d
                summary_file.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
