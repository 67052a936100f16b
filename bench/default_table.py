"""docs/RESULTS.md's table of the default comparison, from its committed JSON
(`bench/default_cell.py`'s output, `bench/results/default/default.json`); `bench/map_tables.py
--table default` prints it and `--write` puts it in RESULTS.

Per fabric, over its trustworthy runs only: the median and [min-max] of each figure, and the
difference of the medians against the baseline. The first rows are the counts: runs trusted of
held, and the requests every run sent and completed.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).resolve().parent / "results" / "default" / "default.json"
FABRIC_NAMES = {"zcube": "ZCube", "roft": "ROFT", "clos": "Clos"}
ROWS = (
    "completed requests/s",
    "output tokens/s",
    "decode tokens/s per GPU",
    "prefill tokens/s per GPU",
    "failed requests",
    "TTFT p50 client (s)",
    "TTFT p90 client (s)",
    "TTFT p99 client (s)",
    "TPOT p50 (s)",
    "TPOT p99 (s)",
    "ITL p99 (s)",
    "KV transfer p50 (s)",
    "KV transfer p99 (s)",
    "KV transfer / ideal p50",
    "KV pulls stalled",
    "all-to-all p50 (s)",
    "all-to-all p99 (s)",
    "busiest link util mean",
    "busiest link util peak",
    "switch queue drops",
    "lossless pauses",
    "EP exchanges behind KV pauses",
    "OpenFlow port drops",
    "emulated switches",
    "emulated switching Tb/s",
)  # the figures shown, in this order, where the runs have them


def _num(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def spread(values: Sequence[float]) -> str:
    """`median [min-max]`, or the one value when they are all equal."""
    if not values:
        return "-"
    med, lo, hi = statistics.median(values), min(values), max(values)
    if _num(lo) == _num(hi):
        return _num(med)
    return f"{_num(med)} [{_num(lo)}-{_num(hi)}]"


def difference(value: float | None, base: float | None) -> str:
    if value is None or base is None:
        return ""
    if base == 0:
        return "" if value == 0 else "n/a (baseline 0)"
    return f"{100 * (value - base) / base:+.1f}%"


def default_table(path: Path = DEFAULT) -> list[str]:
    """The default comparison's table in Markdown lines (or any comparison `bench/default_cell.py`
    kept, `path`)."""
    data: dict[str, Any] = json.loads(path.read_text())
    base = data["baseline"]
    fabrics = [f for f in dict.fromkeys(r["fabric"] for r in data["runs"]) if f != base] + [base]
    runs = {f: [r for r in data["runs"] if r["fabric"] == f] for f in fabrics}
    trusted = {f: [r for r in rs if r["trustworthy"]] for f, rs in runs.items()}
    names = [FABRIC_NAMES.get(f, f) for f in fabrics]
    versus = " / ".join(f"{n} vs {FABRIC_NAMES.get(base, base)}" for n in names[:-1])
    out = [f"| metric | {' | '.join(names)} | {versus} |", "|---" * (len(fabrics) + 2) + "|"]
    blank = " |" * (len(fabrics) - 1)
    counts = [f"{len(trusted[f])} of {len(runs[f])}" for f in fabrics]
    out.append(f"| trustworthy runs | {' | '.join(counts)} |{blank}")
    sent = [
        "/".join(sorted({f"{r['requests']} sent, {r['completed']} completed" for r in runs[f]}))
        for f in fabrics
    ]
    out.append(f"| requests in each run | {' | '.join(sent)} |{blank}")
    for label in ROWS:
        if label not in data["labels"]:
            continue
        values = {
            f: [r["figures"][label] for r in trusted[f] if r["figures"].get(label) is not None]
            for f in fabrics
        }
        if not any(values.values()):
            continue
        medians = {f: statistics.median(v) if v else None for f, v in values.items()}
        diffs = [difference(medians[f], medians[base]) for f in fabrics[:-1]]
        cells = " | ".join(spread(values[f]) for f in fabrics)
        out.append(f"| {label} | {cells} | {' / '.join(diffs)} |")
    return out
