"""Benchmark report: one cell of the map (issue 22 item 6) from the sweeps that measured it.

    .venv/bin/python -m bench.map_cell --name coding-agent results/sweep-A [results/sweep-B ...] \\
        --out bench/results/map/coding-agent.json

Reads each sweep folder's `sweep.json` and its runs' `summary.json` (a cell may merge sweeps
that ran different fabrics with the same workload, seeds, rates and options: capacities are
per fabric, so they merge; the ratio is taken against `--baseline`). Prints, and writes to
`--out`, per fabric:

- its capacity by the sweep's rule (`zcube_lab.emulator.results.sweep.capacity`: per repeat the
  highest rate with every rate up to it met, the median with its spread, `>=` when censored) and the
  ratio to the baseline's (a bound unless both are exact);
- at the *common rate* (`--rate`, else the highest rate at which every fabric ran every repeat
  and every such run was trustworthy), from its trustworthy runs only (`repeats` says how
  many; a run the verdict rejected gives no figure): TTFT p99 and p50 (client, modelled
  seconds), KV pull p50 and its share of TTFT p50, the busiest link's 1 s peak and which link
  it was most often, switch queue drops and lossless pauses per run, TCP retransmission
  timeouts per run, with medians and [min-max] over the repeats;
- every run's verdict: how many runs were trustworthy, and the reasons of those that were not.

It runs nothing; a cell's figures come only from runs already judged.
`bench/map_tables.py` turns the cells' JSON (with their sweeps' JSON) into docs/RESULTS.md's
tables.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.sensitivity import figures
from zcube_lab.emulator.results.sweep.capacity import fabric_capacities
from zcube_lab.emulator.results.sweep.sweeppoints import SWEEP_FILE, RunPoint


def check_seeds(seeds: dict[int, dict[str, int]]) -> None:
    """Refuse a cell whose fabrics ran a repeat with different seeds (their requests differ, so
    their capacities are not comparable): `seeds` maps a repeat to {run: seed}."""
    for repeat, runs in sorted(seeds.items()):
        used: dict[int, list[str]] = {}
        for run, seed in runs.items():
            used.setdefault(seed, []).append(run)
        if len(used) > 1:
            which = "; ".join(f"seed {s}: {', '.join(sorted(r))}" for s, r in sorted(used.items()))
            raise SystemExit(f"repeat {repeat} ran with different seeds across runs ({which}): "
                             "a cell compares fabrics on the same requests")  # fmt: skip


def load(folders: Sequence[Path]) -> tuple[list[RunPoint], dict[str, dict[str, Any]], dict]:
    """The run points of every sweep, each run's summary by run name, and the first sweep's
    settings (workload, SLO, rates); runs of one repeat with different seeds are refused."""
    runs: list[RunPoint] = []
    summaries: dict[str, dict[str, Any]] = {}
    first: dict[str, Any] = {}
    seeds: dict[int, dict[str, int]] = {}
    for folder in folders:
        data = json.loads((folder / SWEEP_FILE).read_text())
        first = first or data
        for r in data["runs"]:
            point = RunPoint.from_dict(r)
            runs.append(point)
            run = folder / point.run
            config = json.loads((run / "config.json").read_text())
            summary = json.loads((run / "summary.json").read_text())
            summaries[point.run] = summary | {"dilation": config.get("dilation") or 1.0}
            if config.get("seed") is not None:
                seeds.setdefault(point.repeat, {})[point.run] = config["seed"]
    check_seeds(seeds)
    return runs, summaries, first


def common_rate(runs: Sequence[RunPoint]) -> float | None:
    """The highest rate at which every variant ran every repeat it ran at the lowest rate, all
    trustworthy."""
    variants = {r.variant for r in runs}
    repeats = {v: {r.repeat for r in runs if r.variant == v} for v in variants}
    best = None
    for rate in sorted({r.rate for r in runs}):
        at = [r for r in runs if r.rate == rate]
        full = all({r.repeat for r in at if r.variant == v} == repeats[v] for v in variants)
        if full and all(r.trustworthy for r in at):
            best = rate
    return best


def spread(values: Sequence[float]) -> dict[str, float] | None:
    """Median, min and max, or None without values."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def text(s: dict[str, float] | None, fmt: str, scale: float = 1.0) -> str:
    """`1.70 [1.66-1.73]`, `-`."""
    if s is None:
        return "-"
    m, lo, hi = (s[k] * scale for k in ("median", "min", "max"))
    body = format(m, fmt)
    return body if lo == hi else f"{body} [{format(lo, fmt)}-{format(hi, fmt)}]"


def cell(runs: Sequence[RunPoint], summaries: dict[str, dict[str, Any]], rate: float | None,
         baseline: str) -> dict[str, Any]:  # fmt: skip
    """The cell's figures per variant (the module docstring)."""
    caps = {c.variant: c for c in fabric_capacities(runs, baseline)}
    out: dict[str, Any] = {"common_rate": rate, "fabrics": {}}
    for v in dict.fromkeys(r.variant for r in runs):
        mine = [r for r in runs if r.variant == v]
        at = [summaries[r.run] for r in mine if r.rate == rate and r.trustworthy]
        figs = [figures(s) for s in at]
        rto = [
            float(sum(h.get("timeouts", 0) for h in (s["health"].get("tcp") or {}).values()))
            for s in at
        ]
        links = collections.Counter(s["fabric_stats"].get("peak_link") for s in at)
        share = [f["kv_p50_ms"] / 1e3 / f["ttft_p50_s"] for f in figs if f["ttft_p50_s"]]
        c = caps[v]
        out["fabrics"][v] = {
            "capacity": c.capacity.to_dict() | {"text": c.capacity.text()},
            "ratio": c.ratio.text() if c.ratio is not None else "baseline",
            "runs": len(mine),
            "trusted": sum(r.trustworthy for r in mine),
            "untrusted": [f"{r.rate:g} r{r.repeat}: {r.reason}" for r in mine if not r.trustworthy],
            "at_common_rate": {
                "repeats": len(at),
                "ttft_p99_s": spread([f["ttft_p99_s"] for f in figs]),
                "ttft_p50_s": spread([f["ttft_p50_s"] for f in figs]),
                "kv_p50_ms": spread([f["kv_p50_ms"] for f in figs]),
                "kv_share_of_ttft_p50": spread(share),
                "peak_link_util": spread([f["peak_link"] for f in figs]),
                "peak_link": links.most_common(1)[0][0] if links else None,
                "switch_drops": spread([f["drops"] for f in figs]),
                "pauses": spread([f["pauses"] for f in figs]),
                "rto": spread(rto),
                **production_figures(at),
            },
        }
    return out


def _get(d: Any, *keys: str) -> float | None:
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return float(d) if isinstance(d, int | float) else None


def production_figures(at: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The production cell's figures where the runs have them (spreads, None without): decode
    and prefill tokens per GPU-second (the BMWG TPS_per_GPU), the EP exchange's p50 and p99 in
    ms (modelled), and the share of EP exchanges delayed by a pause another class raised."""

    def each(*keys: str, scale: float = 1.0) -> dict[str, float] | None:
        vals = [v * scale for s in at if (v := _get(s, *keys)) is not None]
        return spread(vals)

    return {
        "decode_tps_per_gpu": each("bmwg", "TPS_per_GPU", "output"),
        "prefill_tps_per_gpu": each("bmwg", "TPS_per_GPU", "input"),
        "ep_p50_ms": each("transfers", "alltoall_p50_s", scale=1e3),
        "ep_p99_ms": each("transfers", "alltoall_p99_s", scale=1e3),
        "ep_victim_share": each("victims", "victim_share"),
    }


HEAD = ["fabric", "capacity req/s", "vs baseline", "trusted", "runs at the rate",
        "TTFT p99 s", "TTFT p50 s", "KV p50 ms", "KV share", "busiest link peak", "drops",
        "pauses", "RTO"]  # fmt: skip


def rows(result: dict[str, Any]) -> list[list[str]]:
    """One markdown row per fabric."""
    out = []
    for v, f in result["fabrics"].items():
        a = f["at_common_rate"]
        out.append([
            v, f["capacity"]["text"], f["ratio"], f"{f['trusted']}/{f['runs']}",
            str(a["repeats"]), text(a["ttft_p99_s"], ".2f"), text(a["ttft_p50_s"], ".2f"),
            text(a["kv_p50_ms"], ".0f"), text(a["kv_share_of_ttft_p50"], ".0%"),
            f"{text(a['peak_link_util'], '.0%')} ({a['peak_link']})",
            text(a["switch_drops"], ".0f"), text(a["pauses"], ".0f"), text(a["rto"], ".0f"),
        ])  # fmt: skip
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweeps", type=Path, nargs="+", help="sweep folders (sweep.json inside)")
    parser.add_argument("--name", required=True, help="the cell's name in the output")
    parser.add_argument("--rate", type=float, help="the common rate (default: see --help)")
    parser.add_argument("--baseline", default="roft", help="fabric the ratio is taken against")
    parser.add_argument("--out", type=Path, help="write the cell as JSON here")
    args = parser.parse_args(argv)
    runs, summaries, first = load(args.sweeps)
    rate = args.rate if args.rate is not None else common_rate(runs)
    result = {
        "name": args.name,
        "workload": first.get("workload"),
        "slo": first.get("slo"),
        "rates": sorted({r.rate for r in runs}),
        "sweeps": [str(p) for p in args.sweeps],
        **cell(runs, summaries, rate, args.baseline),
    }
    print(f"{args.name}: {result['workload']}, SLO {result['slo']}, rates {result['rates']}, "
          f"common rate {rate:g} req/s" if rate is not None else "no common rate")  # fmt: skip
    print("| " + " | ".join(HEAD) + " |")
    print("|" + "---|" * len(HEAD))
    for row in rows(result):
        print("| " + " | ".join(row) + " |")
    for v, f in result["fabrics"].items():
        for why in f["untrusted"]:
            print(f"  {v} not trustworthy at {why}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
