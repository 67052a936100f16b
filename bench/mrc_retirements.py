"""EVs the mrc transport marked ASSUMED_BAD (retired) in serving runs, beside their drops.

Reads each run folder's KV logs (`logs/kv-*.jsonl`: `retired_lanes` is the distinct EVs a pull's
sender marked ASSUMED_BAD) and its `summary.json` (every shaped queue's drops, from the run's
health evidence). The issue-36 check: a lossless run should mark 0 EVs bad with 0 drops.

    python -m bench.mrc_retirements results/20261205-132259-roft-hotspot [MORE_RUNS...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def figures(run: Path) -> dict[str, Any]:
    """Pulls, EVs marked bad, pulls that marked any, failed pulls and queue drops of a run."""
    pulls = [
        json.loads(line)
        for log in sorted((run / "logs").glob("kv-*.jsonl"))
        for line in log.read_text().splitlines()
        if line.strip()
    ]
    summary = json.loads((run / "summary.json").read_text())
    config = json.loads((run / "config.json").read_text())
    qdiscs = (summary.get("health") or {}).get("qdisc") or {}
    return {
        "run": run.name,
        "pulls": len(pulls),
        "evs_assumed_bad": sum(int(p.get("retired_lanes") or 0) for p in pulls),
        "pulls_marking_any": sum(1 for p in pulls if p.get("retired_lanes")),
        "failed": sum(1 for p in pulls if not p.get("ok")),
        "queue_drops": sum(int(q.get("drops") or 0) for q in qdiscs.values()),
        "lossless": bool(config.get("lossless")),
    }


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    for run in argv:
        print(json.dumps(figures(Path(run))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
