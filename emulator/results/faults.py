"""The fault report: what a run lost because of its injected faults (pure).

`analyze(...)` turns a run's records into failed requests, retried KV transfers, TTFT p99
before, during and after the faults, recovery times and KV integrity; `fault_windows` gives the
intervals the report and the plots shade.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from zcube_lab.errors import ConfigError
from zcube_lab.fabric.description import Fabric, Link
from zcube_lab.stats import quantile
from zcube_lab.faults import Fault

def fault_windows(
    events: Sequence[Mapping[str, Any]], end_wall: float
) -> list[tuple[float, float]]:
    """Merged [start, end) wall-time windows during which any fault held, from the recorded
    transitions (`faults.jsonl`: action, fault, wall)."""
    opened: dict[str, float] = {}
    spans = []
    for e in sorted(events, key=lambda e: e["wall"]):
        if e["action"] == "down":
            opened.setdefault(e["fault"], e["wall"])
        elif e["fault"] in opened:
            spans.append((opened.pop(e["fault"]), e["wall"]))
    spans += [(s, end_wall) for s in opened.values()]
    spans.sort()
    merged: list[tuple[float, float]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def analyze(
    events: Sequence[Mapping[str, Any]],
    requests: Sequence[Mapping[str, Any]],
    kv_attempts: Sequence[Mapping[str, Any]],
    end_wall: float,
    bin_s: float = 5.0,
) -> dict[str, Any]:
    """The fault report of one run.

    - requests: the client's records (`wall_time` = when sent, `outcome`, `ttft_s`, `e2e_s`);
      phases are by send time: before the first fault, during any fault, after the last one.
    - kv_attempts: decode's KV log (`request_id`, `start`, `end`, `ok`, `bytes`,
      `expected_bytes`, `checksum_ok`, `attempt`, `retired_lanes`).
    - A KV transfer is hit by a fault if an attempt of it was in flight at a fault's onset or
      started during a fault and took longer than the pre-fault p99 (+ 0.2 s), or needed a retry or
      retired a lane. Its recovery time runs from when it met the fault (the onset, or its own
      start if later) to its completion. `recovery_kv_first_s` is the shortest (the first
      transfer through: over another path, or when the link came back, `..._after_restore`
      says which) and `recovery_kv_all_s` the longest.
    - `recovery_throughput_s`: onset to the first 5 s window (by completion time) whose completed
      requests reach 90% of the pre-fault rate, counted from the first dip below it (0 when the
      rate never dipped).
    """
    windows = fault_windows(events, end_wall)
    out: dict[str, Any] = {"faults": len({e["fault"] for e in events}), "windows": windows}
    ok = [r for r in requests if r.get("outcome") == "ok"]
    out["failed_requests"] = sum(1 for r in requests if r.get("outcome") != "ok")
    errors: dict[str, int] = {}
    for r in requests:
        if r.get("outcome") != "ok":
            key = str(r.get("error") or r.get("outcome"))[:160]
            errors[key] = errors.get(key, 0) + 1
    out["errors"] = dict(sorted(errors.items(), key=lambda kv: -kv[1])[:5])
    # KV: integrity and retries.
    by_request: dict[str, list[Mapping[str, Any]]] = {}
    for a in kv_attempts:
        by_request.setdefault(str(a["request_id"]), []).append(a)
    done = [a for a in kv_attempts if a.get("ok")]
    out["kv_transfers"] = len(by_request)
    out["kv_completed"] = len(done)
    out["kv_failed_attempts"] = sum(1 for a in kv_attempts if not a.get("ok"))
    out["kv_retried"] = sum(1 for v in by_request.values() if len(v) > 1)
    out["kv_lanes_retired"] = sum(int(a.get("retired_lanes") or 0) for a in kv_attempts)
    # A pull completes only with every byte and its checksum verified (kvwire), so integrity
    # is read from all attempts: corruption caught (and refused), completed transfers that do
    # not say they verified (must be 0), and the KV of transfers that never completed.
    out["kv_checksum_failures"] = sum(1 for a in kv_attempts if a.get("checksum_ok") is False)
    out["kv_completed_unverified"] = sum(
        1
        for a in done
        if a.get("checksum_ok") is not True
        or int(a.get("bytes") or 0) != int(a.get("expected_bytes") or 0)
    )
    unfinished = [v for v in by_request.values() if not any(a.get("ok") for a in v)]
    out["kv_unfinished_transfers"] = len(unfinished)
    out["kv_bytes_lost"] = sum(
        max(int(a.get("expected_bytes") or 0) for a in v) for v in unfinished
    )

    if not windows:
        return out
    first, last_end = windows[0][0], windows[-1][1]

    def phase(r: Mapping[str, Any]) -> str:
        t = float(r["wall_time"])
        if t < first:
            return "before"
        if any(s <= t < e for s, e in windows):
            return "during"
        return "after" if t >= last_end else "between"

    for name in ("before", "during", "after"):
        ttft = [float(r["ttft_s"]) for r in ok if phase(r) == name and r.get("ttft_s") is not None]
        out[f"ttft_p99_{name}_s"] = quantile(ttft, 0.99)
        out[f"requests_{name}"] = sum(1 for r in requests if phase(r) == name)
        out[f"failed_{name}"] = sum(
            1 for r in requests if phase(r) == name and r.get("outcome") != "ok"
        )

    # Recovery of KV transfers, per fault onset.
    base = [
        float(a["end"]) - float(a["start"]) for a in done if float(a["end"]) < first
    ]  # completed before any fault
    slow = (quantile(base, 0.99) or 0.0) + 0.2
    hit_done: list[tuple[float, float, float]] = []  # (met the fault, completed, restore)
    for v in by_request.values():
        v = sorted(v, key=lambda a: float(a["start"]))
        start = float(v[0]["start"])
        finished = [a for a in v if a.get("ok")]
        end = float(finished[-1]["end"]) if finished else None
        for s, e in windows:
            in_flight = start <= s and (end is None or end > s)
            started_during = s < start < e
            if not (in_flight or started_during):
                continue
            took = (end if end is not None else end_wall) - start
            troubled = len(v) > 1 or any(int(a.get("retired_lanes") or 0) for a in v)
            if troubled or took > slow:
                if end is not None:
                    hit_done.append((max(s, start), end, e))
                break
    out["kv_hit_transfers"] = len(hit_done)
    if hit_done:
        firsts = [end - s for s, end, _ in hit_done]
        out["recovery_kv_first_s"] = min(firsts)
        out["recovery_kv_all_s"] = max(firsts)
        earliest = min(hit_done, key=lambda h: h[1] - h[0])
        out["recovery_kv_first_after_restore"] = earliest[1] >= earliest[2]
    else:
        out["recovery_kv_first_s"] = out["recovery_kv_all_s"] = None
        out["recovery_kv_first_after_restore"] = None

    # Throughput recovery: completions per bin_s window.
    completions = sorted(
        float(r["wall_time"]) + float(r["e2e_s"]) for r in ok if r.get("e2e_s") is not None
    )
    starts = [float(r["wall_time"]) for r in requests]
    t_start = min(starts) if starts else first
    pre = [c for c in completions if c < first]
    pre_span = first - t_start
    out["recovery_throughput_s"] = None
    if pre and pre_span >= bin_s:
        target = 0.9 * len(pre) / pre_span * bin_s
        t = first
        dipped = False
        while t < end_wall:
            n = sum(1 for c in completions if t <= c < t + bin_s)
            if n < target:
                dipped = True
            elif dipped:
                out["recovery_throughput_s"] = t + bin_s - first
                break
            elif t - first > bin_s:  # never dipped below the target
                out["recovery_throughput_s"] = 0.0
                break
            t += 1.0
    return out
