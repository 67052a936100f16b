"""The committed map's JSON, read: each cell's figures and every run point its sweep judged
(`bench/results/map/`), the kept comparisons and benches, and how a capacity is printed with
each seed's interval. What bench/map_tables.py and bench/answer_tables.py share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zcube_lab.emulator.results.sweep.capacity import Capacity, RepeatCapacity
from zcube_lab.emulator.results.sweep.sweeppoints import RunPoint

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "bench" / "results" / "map"
COMPARES = ROOT / "bench" / "results" / "compare"  # comparisons bench/default_cell.py kept
VICTIM_FLOW = ROOT / "bench" / "results" / "victim-flow" / "victim-flow.json"
KV_SEEN = ROOT / "bench" / "results" / "kv-seen.json"  # bench/kv_seen.py --out


def cell_names(folder: Path = MAP) -> list[str]:
    """Every committed cell (a NAME.json beside its NAME-sweep.json)."""
    return sorted(
        p.stem
        for p in folder.glob("*.json")
        if not p.stem.endswith("-sweep") and (folder / f"{p.stem}-sweep.json").exists()
    )


def load_cell(name: str, folder: Path = MAP) -> dict[str, Any]:
    """The cell's figures at its common rate (bench/map_cell.py's output)."""
    return json.loads((folder / f"{name}.json").read_text())


def load_runs(name: str, folder: Path = MAP) -> list[RunPoint]:
    """Every run point the cell's sweep judged."""
    data = json.loads((folder / f"{name}-sweep.json").read_text())
    return [RunPoint.from_dict(r) for r in data["runs"]]


def knee(r: RepeatCapacity) -> str:
    """One seed's interval: `32-40` (met 32, missed 40), `< 0.5`, `>= 20`."""
    if r.stopped_at is None:
        return f">= {r.rate:g}"
    if r.censored is not None:
        return f">= {r.rate:g}, {r.stopped_at:g} untrusted"
    if r.rate == 0:
        return f"< {r.stopped_at:g}"
    return f"{r.rate:g}-{r.stopped_at:g}"


def capacity_text(cap: Capacity) -> str:
    """`32 (seeds 32-40; 32-40)`: the rule's figure, then each seed's interval."""
    return f"{cap.text()} (seeds {'; '.join(knee(r) for r in cap.repeats)})"
