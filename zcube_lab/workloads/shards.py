"""Open-loop replay under Locust's distributed mode: the plan split into shards, and put back.

Every worker draws the whole plan from the same options and seed, and with `--plan-shard K/W`
keeps the requests whose index is K modulo W, at their planned times; the W shards together are
exactly the one-process plan. Locust's `fixed_count` is a total over all workers, so the
master learns the number of workers from `ZCUBE_LOCUST_WORKERS` (`locust_workers()`, read when
the locustfile is imported) and gives each worker one `OpenLoopUser`.

Each worker writes its own records and summary (the summary carries `shard: "K/W"`);
`merge_shards(summaries, rows)` turns them into the records and the summary one process would
have written. The merged summary is recomputed from the union of the rows with
`loadsummary.summarize`, the plan's size being the sum of the shards' `planned`; nothing is
redrawn. `merge_shard_files(folder, workers)` does the same with the files in a run's folder
(`shard_files`); the rest is pure: no Locust, no files, no clock.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.workloads.loadsummary import summarize
from zcube_lab.workloads.requests import PlannedRequest

WORKERS_ENV = "ZCUBE_LOCUST_WORKERS"  # the number of Locust workers, read by the master
# Taken from the shards' summaries as they are: every shard must agree on them.
COMMON_FIELDS = ("workload", "model", "seed", "mode", "arrival", "dilation")


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """`--plan-shard K/W` as (K, W); None (the whole plan) for None or ""; ConfigError unless
    K and W are integers with 0 <= K < W."""
    if text is None or str(text).strip() == "":
        return None
    k, sep, w = str(text).strip().partition("/")
    try:
        shard = (int(k), int(w))
    except ValueError:
        shard = None
    if not sep or shard is None or not 0 <= shard[0] < shard[1]:
        raise ConfigError("plan_shard", text, "K/W with integers 0 <= K < W (--plan-shard)")
    return shard


def shard_label(shard: tuple[int, int]) -> str:
    """The `K/W` form of a shard, as `--plan-shard` takes it and the summary reports it."""
    return f"{shard[0]}/{shard[1]}"


def shard_plan(
    plan: Sequence[PlannedRequest], shard: tuple[int, int] | None
) -> list[PlannedRequest]:
    """The requests of `plan` that shard (K, W) sends: index % W == K, in plan order and
    unchanged (same planned times); the whole plan for None."""
    if shard is None:
        return list(plan)
    k, w = shard
    return [r for r in plan if r.index % w == k]


def locust_workers(environ: Mapping[str, str] = os.environ) -> int:
    """The number of Locust workers from `ZCUBE_LOCUST_WORKERS` (1 when unset): the total
    `fixed_count` of `OpenLoopUser`, one user per worker. ConfigError if not an integer >= 1."""
    text = environ.get(WORKERS_ENV, "").strip()
    if not text:
        return 1
    try:
        workers = int(text)
    except ValueError:
        workers = 0
    if workers < 1:
        raise ConfigError(WORKERS_ENV, text, "the number of Locust workers, an integer >= 1")
    return workers


def merge_shards(
    summaries: Sequence[Mapping[str, Any]], rows: Sequence[Sequence[Mapping[str, Any]]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """W workers' summaries and record rows (`rows[i]` from the worker of `summaries[i]`, in any
    order) as one process's: every row sorted by send time (then index), and the summary
    recomputed over them. ValueError when the shards are not exactly 0..W-1 of one plan, or a
    row is outside its shard or in two."""
    if len(summaries) != len(rows) or not summaries:
        raise ValueError(f"{len(summaries)} summaries for {len(rows)} record sets")
    shards = [_summary_shard(s) for s in summaries]
    width = shards[0][1]
    if sorted(shards) != [(k, width) for k in range(width)]:
        got = ", ".join(shard_label(s) for s in shards)
        raise ValueError(f"shards {got}: expected each of 0/{width} .. {width - 1}/{width} once")
    first = summaries[0]
    # Open loop: one plan window for all. Closed loop: each shard's ends with its last answer.
    same = COMMON_FIELDS if first.get("mode") == "closed-loop" else (*COMMON_FIELDS, "duration_s")
    for s in summaries[1:]:
        for key in same:
            if s.get(key) != first.get(key):
                raise ValueError(f"shards disagree on {key}: {first.get(key)} vs {s.get(key)}")
    merged: list[dict[str, Any]] = []
    seen: set[int] = set()
    for (k, w), shard_rows in zip(shards, rows, strict=True):
        for row in shard_rows:
            index = int(row["index"])
            if index % w != k or index in seen:
                raise ValueError(f"request {index} in shard {k}/{w}: not its shard or seen twice")
            seen.add(index)
            merged.append(dict(row))
    merged.sort(key=lambda r: (r["sent_s"], r["index"]))
    duration = max(float(s["duration_s"]) for s in summaries)
    planned = sum(int(s["planned"]) for s in summaries)
    summary = summarize(range(planned), merged, duration)
    summary.update({key: first[key] for key in COMMON_FIELDS if key in first})
    return merged, summary


def shard_files(folder: Path, k: int | None) -> tuple[Path, Path]:
    """Where shard `k` writes its records and summary in a run's folder (`requests-K.jsonl`,
    `loadgen-summary-K.json`); for None, the whole run's (`requests.jsonl`,
    `loadgen-summary.json`, as one process writes them)."""
    tail = "" if k is None else f"-{k}"
    return folder / f"requests{tail}.jsonl", folder / f"loadgen-summary{tail}.json"


def merge_shard_files(folder: Path, workers: int) -> dict[str, Any]:
    """Merge the files of shards 0..workers-1 in `folder` into the whole run's (`shard_files`
    with None) and return the merged summary; a shard's missing file raises FileNotFoundError."""
    summaries: list[dict[str, Any]] = []
    rows: list[list[dict[str, Any]]] = []
    for k in range(workers):
        records, summary = shard_files(folder, k)
        summaries.append(json.loads(summary.read_text()))
        rows.append([json.loads(line) for line in records.read_text().splitlines() if line])
    merged, total = merge_shards(summaries, rows)
    records, summary = shard_files(folder, None)
    with records.open("w") as f:
        for row in merged:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
    summary.write_text(json.dumps(total, indent=2) + "\n")
    return total


def _summary_shard(summary: Mapping[str, Any]) -> tuple[int, int]:
    shard = parse_shard(summary.get("shard"))
    if shard is None:
        raise ValueError("a summary without a shard: not written with --plan-shard")
    return shard
