"""Benchmark report: the default comparison (what `scripts/main.sh` runs) kept as data, so
docs/RESULTS.md's table of it regenerates (`python -m bench.map_tables --table default`).

    .venv/bin/python -m bench.default_cell results/compare-YYYYMMDD-HHMMSS \\
        --out bench/results/default/default.json

Reads the comparison's `comparison.json` (its runs and baseline) and every run's `summary.json`
and `config.json`, and writes, per run: its name, fabric, repeat, whether the verdict trusted it
(and why not), the requests sent and completed, and every compared figure it has
(`zcube_lab.emulator.results.compare.compare_metrics.METRICS`, the labels `compare` prints; with the
victim accounting, a lossless run's pauses and EP exchanges behind KV-raised pauses). Beside them:
the scenario (workload, seed, duration, each fabric's size). It runs nothing.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zcube_lab.emulator.results.compare.compare_metrics import figure, shown_metrics
from zcube_lab.emulator.results.run.summary import RunSummary

VICTIM_LABELS = ("lossless pauses", "EP exchanges behind KV pauses")  # from `victims`


def _victim_figures(summary: RunSummary) -> dict[str, float | None]:
    """A lossless run's pauses and EP victims of KV-raised pauses
    (`zcube_lab.emulator.results.lossless.victims`); None in runs without the accounting."""
    v = summary.victims
    return dict(zip(VICTIM_LABELS, (v.pauses, v.ep_victims) if v else (None, None), strict=True))


def run_entry(summary: RunSummary, labels: Sequence[str]) -> dict[str, Any]:
    """One run's verdict, request counts and compared figures (None where it has none)."""
    by_label = {m.label: m for m in shown_metrics([summary])}
    figures = {
        label: figure(summary, by_label[label].get) if label in by_label else None
        for label in labels
    }
    figures.update((k, v) for k, v in _victim_figures(summary).items() if k in figures)
    return {
        "run": summary.dir.name if summary.dir is not None else summary.run,
        "fabric": summary.variant,
        "trustworthy": summary.trustworthy,
        "reasons": list(summary.health.reasons) if not summary.trustworthy else [],
        "requests": summary.client.requests,
        "completed": summary.client.completed,
        "figures": figures,
    }


def cell(compare_dir: Path) -> dict[str, Any]:
    """The comparison in `compare_dir` as the committed JSON."""
    comparison = json.loads((compare_dir / "comparison.json").read_text())
    dirs = [Path(p) for p in comparison["runs"]]
    summaries = [RunSummary.read(d) for d in dirs]
    labels = [m.label for m in shown_metrics(summaries)]
    if any(s.victims is not None for s in summaries):
        labels += VICTIM_LABELS
    configs = [json.loads((d / "config.json").read_text()) for d in dirs]
    sizes = {s.variant: {"fabric": s.fabric, **s.fabric_params} for s in summaries}
    first = configs[0]
    return {
        "compare": compare_dir.name,
        "baseline": comparison["baseline"],
        "scenario": {
            "workload": first.get("workload"),
            "seed": first.get("seed"),
            "duration_s": first.get("duration_s"),
            "fabrics": sizes,
        },
        "labels": labels,
        "runs": [run_entry(s, labels) for s in summaries],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("compare_dir", type=Path, help="a `zcube-lab compare` results folder")
    parser.add_argument("--out", type=Path, help="write the JSON here (default: print it)")
    args = parser.parse_args(argv)
    data = json.dumps(cell(args.compare_dir), indent=1, sort_keys=True) + "\n"
    if args.out is None:
        print(data, end="")
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(data)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
