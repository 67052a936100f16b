"""The fault report: what a run lost because of its injected faults (pure).

`analyze(...)` turns a run's records into a `FaultReport`
(`zcube_lab.emulator.results.run.summary`): failed requests, retried KV transfers, KV integrity,
and, when a fault held, TTFT p99 before, during and after the faults and the recovery times;
`fault_windows` gives the intervals the report and the plots shade, `load_time_spans` the same on
the load generator's clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from zcube_lab.core.stats import quantile
from zcube_lab.emulator.results.run.summary import FaultRecovery, FaultReport, InjectedFault, Span

Record = Mapping[str, Any]


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


def load_time_spans(windows: Sequence[Span], records: Sequence[Record]) -> tuple[Span, ...]:
    """Fault windows (wall time) in seconds since the load generator's start, the clock of
    `sent_s` and of the throughput series."""
    anchor = next((r for r in records if "wall_time" in r and "sent_s" in r), None)
    if anchor is None:
        return ()
    start = float(anchor["wall_time"]) - float(anchor["sent_s"])
    return tuple((round(s - start, 3), round(e - start, 3)) for s, e in windows)


def analyze(
    events: Sequence[Record],
    requests: Sequence[Record],
    kv_attempts: Sequence[Record],
    end_wall: float,
    bin_s: float = 5.0,
    injected: Sequence[InjectedFault] = (),
) -> FaultReport:
    """The fault report of one run.

    - events: the injector's transitions (`faults.jsonl`: action, fault, wall).
    - requests: the client's records (`wall_time` = when sent, `outcome`, `ttft_s`, `e2e_s`);
      phases are by send time: before the first fault, during any fault, after the last one.
    - kv_attempts: decode's KV log (`request_id`, `start`, `end`, `ok`, `bytes`,
      `expected_bytes`, `checksum_ok`, `attempt`, `retired_lanes`).
    - injected: the faults as scheduled, recorded as they are.
    """
    windows = tuple(fault_windows(events, end_wall))
    by_request: dict[str, list[Record]] = {}
    for a in kv_attempts:
        by_request.setdefault(str(a["request_id"]), []).append(a)
    failed = [r for r in requests if r.get("outcome") != "ok"]
    return FaultReport(
        faults=len({e["fault"] for e in events}),
        failed_requests=len(failed),
        errors=_top_errors(failed),
        **_kv_integrity(kv_attempts, by_request),
        recovery=_recovery(windows, requests, by_request, end_wall, bin_s) if windows else None,
        injected=tuple(injected),
        spans_s=load_time_spans(windows, requests),
        windows=windows,
    )


def _top_errors(failed: Sequence[Record]) -> dict[str, int]:
    """The five most frequent errors of the failed requests -> count."""
    errors: dict[str, int] = {}
    for r in failed:
        key = str(r.get("error") or r.get("outcome"))[:160]
        errors[key] = errors.get(key, 0) + 1
    return dict(sorted(errors.items(), key=lambda kv: -kv[1])[:5])


def _kv_integrity(
    kv_attempts: Sequence[Record], by_request: Mapping[str, list[Record]]
) -> dict[str, int]:
    """KV retries and integrity. A pull completes only with every byte and its checksum
    verified (kvwire), so integrity is read from all attempts: corruption caught (and refused),
    completed transfers that do not say they verified (must be 0), and the KV of transfers that
    never completed."""
    done = [a for a in kv_attempts if a.get("ok")]
    unfinished = [v for v in by_request.values() if not any(a.get("ok") for a in v)]
    return {
        "kv_transfers": len(by_request),
        "kv_completed": len(done),
        "kv_failed_attempts": sum(1 for a in kv_attempts if not a.get("ok")),
        "kv_retried": sum(1 for v in by_request.values() if len(v) > 1),
        "kv_lanes_retired": sum(int(a.get("retired_lanes") or 0) for a in kv_attempts),
        "kv_checksum_failures": sum(1 for a in kv_attempts if a.get("checksum_ok") is False),
        "kv_completed_unverified": sum(
            1
            for a in done
            if a.get("checksum_ok") is not True
            or int(a.get("bytes") or 0) != int(a.get("expected_bytes") or 0)
        ),
        "kv_unfinished_transfers": len(unfinished),
        "kv_bytes_lost": sum(max(int(a.get("expected_bytes") or 0) for a in v) for v in unfinished),
    }


def _recovery(
    windows: Sequence[Span],
    requests: Sequence[Record],
    by_request: Mapping[str, list[Record]],
    end_wall: float,
    bin_s: float,
) -> FaultRecovery:
    """Per-phase figures and recovery times of a run in which a fault held."""
    first, last_end = windows[0][0], windows[-1][1]

    def phase(r: Record) -> str:
        t = float(r["wall_time"])
        if t < first:
            return "before"
        if any(s <= t < e for s, e in windows):
            return "during"
        return "after" if t >= last_end else "between"

    phases: dict[str, Any] = {}
    for name in ("before", "during", "after"):
        mine = [r for r in requests if phase(r) == name]
        ttft = [
            float(r["ttft_s"])
            for r in mine
            if r.get("outcome") == "ok" and r.get("ttft_s") is not None
        ]
        phases[f"ttft_p99_{name}_s"] = quantile(ttft, 0.99)
        phases[f"requests_{name}"] = len(mine)
        phases[f"failed_{name}"] = sum(1 for r in mine if r.get("outcome") != "ok")
    hit = _kv_hits(windows, by_request, end_wall)
    firsts = [end - s for s, end, _ in hit]
    earliest = min(hit, key=lambda h: h[1] - h[0]) if hit else None
    return FaultRecovery(
        **phases,
        kv_hit_transfers=len(hit),
        recovery_kv_first_s=min(firsts) if hit else None,
        recovery_kv_all_s=max(firsts) if hit else None,
        recovery_kv_first_after_restore=earliest[1] >= earliest[2] if earliest else None,
        recovery_throughput_s=_throughput_recovery(first, requests, end_wall, bin_s),
    )


def _kv_hits(
    windows: Sequence[Span], by_request: Mapping[str, list[Record]], end_wall: float
) -> list[tuple[float, float, float]]:
    """The completed KV transfers hit by a fault: (met the fault, completed, fault restored).

    A transfer is hit if an attempt of it was in flight at a fault's onset or started during a
    fault and took longer than the pre-fault p99 (+ 0.2 s), or needed a retry or retired a
    lane. It meets the fault at the onset, or at its own start if later; the shortest recovery
    is the first transfer through (over another path, or when the link came back) and the
    longest the last.
    """
    first = windows[0][0]
    base = [
        float(a["end"]) - float(a["start"])
        for v in by_request.values()
        for a in v
        if a.get("ok") and float(a["end"]) < first
    ]  # completed before any fault
    slow = (quantile(base, 0.99) or 0.0) + 0.2
    hit: list[tuple[float, float, float]] = []
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
                    hit.append((max(s, start), end, e))
                break
    return hit


def _throughput_recovery(
    first: float, requests: Sequence[Record], end_wall: float, bin_s: float
) -> float | None:
    """Onset to the first `bin_s` window (by completion time) whose completed requests reach
    90% of the pre-fault rate, counted from the first dip below it (0 when the rate never
    dipped); None without a long enough pre-fault stretch."""
    completions = sorted(
        float(r["wall_time"]) + float(r["e2e_s"])
        for r in requests
        if r.get("outcome") == "ok" and r.get("e2e_s") is not None
    )
    starts = [float(r["wall_time"]) for r in requests]
    t_start = min(starts) if starts else first
    pre = [c for c in completions if c < first]
    pre_span = first - t_start
    if not pre or pre_span < bin_s:
        return None
    target = 0.9 * len(pre) / pre_span * bin_s
    t = first
    dipped = False
    while t < end_wall:
        n = sum(1 for c in completions if t <= c < t + bin_s)
        if n < target:
            dipped = True
        elif dipped:
            return t + bin_s - first
        elif t - first > bin_s:  # never dipped below the target
            return 0.0
        t += 1.0
    return None
