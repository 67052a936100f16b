"""Benchmark report: the verdict's KV-pull rule on finished runs, with the load their pulls met
as they ran (`zcube_lab.emulator.results.fabric.transfers.kv_seen_busy`) beside the busiest link's
mean over the load that the rule judged before 2026-12-06.

    .venv/bin/python -m bench.kv_seen RUN_DIR [RUN_DIR ...] [--out bench/results/kv-seen.json]

Rebuilds each run's fabric, scale and placement from its `config.json`, reads its decode
engines' KV logs and the switch ports' byte counters that `series.json` kept (every 2 s of the
run; the live rule reads Prometheus's samples, one per scrape), widens each pull by the run's
scrape interval in wall seconds each side, as the runner does, and prints per run: the pulls'
p50 against their ideal (from `health.json`), the old busiest mean, the load the median pull met,
and what the rule says with each. It runs nothing.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.victims_of import placement_of
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.results.fabric.linkstats import port_capacity_bps
from zcube_lab.emulator.results.fabric.transfers import (
    KV_LOG_PREFIX,
    Samples,
    kv_seen_busy,
    pull_links,
    read_logs,
)
from zcube_lab.emulator.verdict.limits import Limits

DIRECTIONS = {"zcube_port_tx_bytes_total": "tx", "zcube_port_rx_bytes_total": "rx"}


def counter_samples(series: dict[str, Any]) -> dict[str, dict[tuple[str, int], Samples]]:
    """The switch ports' byte counters in `series.json`, by direction and (switch, port)."""
    out: dict[str, dict[tuple[str, int], Samples]] = {"tx": {}, "rx": {}}
    for s in series.get("series") or ():
        direction, m = DIRECTIONS.get(s.get("matcher", "")), s.get("metric") or {}
        if direction and "switch" in m and "port" in m:
            values = sorted((float(t), float(v)) for t, v in s.get("values") or ())
            out[direction][(m["switch"], int(m["port"]))] = values
    return out


def seen_of(run: Path) -> dict[str, Any]:
    """One run's figures: the rule's inputs, old and new, and its reading with each."""
    config = json.loads((run / "config.json").read_text())
    fabric = build_fabric(FabricSpec.from_json(json.dumps(config["fabric"])))
    scale = Scale(float(config["nic_mbps"]), float(config.get("dilation") or 1.0))
    hosts = {e.engine_id: e.host for e in placement_of(config).engines}
    margin = scale.clock.wall(float(config.get("scrape_interval_s") or 0.0))
    seen = kv_seen_busy(
        read_logs(run / "logs", KV_LOG_PREFIX),
        pull_links(fabric, hosts),
        counter_samples(json.loads((run / "series.json").read_text())),
        port_capacity_bps(fabric, scale),
        margin_s=margin,
    )
    kv = json.loads((run / "health.json").read_text()).get("kv_pulls") or {}
    limits = Limits()
    ratio, mean = kv.get("ratio_p50"), kv.get("path_busy")

    def reading(busy: float | None) -> str:
        if ratio is None or busy is None:
            return "-"
        fails = ratio > limits.kv_ratio_p50 and busy < limits.kv_path_busy
        return "artifact" if fails else "passes"

    return {
        "run": run.name,
        "ratio_p50": ratio,
        "mean_busy": mean,
        "seen_busy": seen,
        "before": reading(mean),
        "now": reading(seen),
    }


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def table_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The rows as docs/RESULTS.md shows them."""
    out = [
        "| run | KV p50 / ideal | busiest mean | median pull met | rule before | rule now |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = "-" if r["ratio_p50"] is None else f"{r['ratio_p50']:.2f}x"
        out.append(
            f"| {r['run']} | {ratio} | {_pct(r['mean_busy'])} | {_pct(r['seen_busy'])} | "
            f"{r['before']} | {r['now']} |"
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("runs", type=Path, nargs="+", help="run folders")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    rows = [seen_of(run) for run in args.runs]
    print("\n".join(table_lines(rows)))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
