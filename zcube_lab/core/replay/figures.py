"""What a replay measured, per traffic class (pure; issue 45 item 3).

From the agents' lines (when each transfer left, when its last byte arrived) and the recording:
- completion times (FCT: last byte arrived - started), their p50/p99/max and their ratio to the
  transfer's ideal time alone on the fabric (`ideal_s`); where the recording has the live run's
  times (`live_s`), those and the replay's p50 and p99 over them (`fidelity`);
- the EP exchange latency (the draft's EP_alltoall_latency): an exchange from its first
  dispatch's start to its last combine's arrival;
- transfers that never completed (a lost datagram is not retransmitted);
- with an isolated replay of each class beside the mixed one, the head-of-line delay one class
  imposed on the other: the contended p99 over the isolated p99 (the draft's §7.4 ratio);
- a victim transfer's share of its rate beside other traffic: its time alone over its time
  beside (`victim_keeps`).
Times are modelled seconds throughout.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from zcube_lab.core.clock import Clock
from zcube_lab.core.replay.recording import Transfer
from zcube_lab.core.stats import quantile


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p99 and max of `values` (None when empty), and their count."""
    vs = sorted(values)
    return {
        "n": len(vs),
        "p50": quantile(vs, 0.5) if vs else None,
        "p99": quantile(vs, 0.99) if vs else None,
        "max": vs[-1] if vs else None,
    }


def outcomes(
    lines: Iterable[Mapping[str, Any]],
) -> tuple[dict[int, float], dict[int, Mapping[str, Any]]]:
    """The agents' lines as (started: id -> sent_s, received: id -> its arrival line)."""
    sent: dict[int, float] = {}
    got: dict[int, Mapping[str, Any]] = {}
    for row in lines:
        if "sent_s" in row:
            sent[int(row["id"])] = float(row["sent_s"])
        elif "want" in row:
            got[int(row["id"])] = row
    return sent, got


def receive_errors(lines: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """UDP datagrams the receiving hosts dropped during the replay, summed (the agents' lines):
    a socket's buffer full (the agent fell behind: the machine's, not the fabric's), or any."""
    out: dict[str, int] = {}
    for row in lines:
        for k, v in (row.get("udp_errors") or {}).items():
            out[k] = out.get(k, 0) + int(v)
    return out


def class_figures(
    transfers: Sequence[Transfer],
    sent: Mapping[int, float],
    got: Mapping[int, Mapping[str, Any]],
    ideal_s: Callable[[Transfer], float],
    live_fixed_s: float = 0.0,
) -> dict[str, Any]:
    """Per class: completion times, their ratio to ideal, incomplete transfers; for EP also the
    exchange latency. `live_fixed_s`: the fixed software cost a live KV pull pays beyond its
    bytes (request, connection, first byte: the verdict's `kv_fixed_s`), which a datagram write
    does not; the live KV times are set against the replay without it."""
    out: dict[str, Any] = {}
    for cls in sorted({t.cls for t in transfers}):
        ts = [t for t in transfers if t.cls == cls]
        fct, ratio, incomplete = [], [], 0
        for t in ts:
            arrived = (got.get(t.id) or {}).get("arrived_s")
            if t.id not in sent or arrived is None:
                incomplete += 1
                continue
            d = float(arrived) - sent[t.id]
            fct.append(d)
            ideal = ideal_s(t)
            if ideal > 0:
                ratio.append(d / ideal)
        row: dict[str, Any] = {
            "transfers": len(ts),
            "incomplete": incomplete,
            "fct_s": spread(fct),
            "fct_over_ideal": spread(ratio),
        }
        fixed = live_fixed_s if cls == "kv" else 0.0
        live = [max(0.0, t.live_s - fixed) for t in ts if t.live_s is not None]
        if live:
            row["live_fct_s"] = spread(live)
            row["live_fixed_s"] = fixed
            row["replay_over_live"] = fidelity(row["fct_s"], row["live_fct_s"])
        if cls == "ep":
            row["exchange_s"] = spread(exchange_latencies(ts, sent, got))
        out[cls] = row
    return out


# A replay at a live run's own resolution reproduces the run when its completion times' p50 is
# within 10% of the live run's and its p99 within 20% (issue 45 item 4a).
FIDELITY_P50, FIDELITY_P99 = 0.10, 0.20


def fidelity(replayed: Mapping[str, Any], live: Mapping[str, Any]) -> dict[str, Any]:
    """The replay's p50 and p99 over the live run's, and whether both are within the bounds."""
    out: dict[str, Any] = {}
    ok = True
    for q, bound in (("p50", FIDELITY_P50), ("p99", FIDELITY_P99)):
        a, b = replayed.get(q), live.get(q)
        if a is None or not b:
            out[q] = None
            ok = False
            continue
        out[q] = a / b
        ok = ok and abs(a / b - 1) <= bound
    out["within"] = ok
    return out


def exchange_latencies(
    transfers: Iterable[Transfer],
    sent: Mapping[int, float],
    got: Mapping[int, Mapping[str, Any]],
) -> list[float]:
    """Per EP exchange (its tag) whose transfers all completed: last arrival - first start."""
    groups: dict[str, list[Transfer]] = {}
    for t in transfers:
        if t.exchange:
            groups.setdefault(t.exchange, []).append(t)
    out = []
    for ts in groups.values():
        arrivals = [(got.get(t.id) or {}).get("arrived_s") for t in ts]
        starts = [sent.get(t.id) for t in ts]
        if any(a is None for a in arrivals) or any(s is None for s in starts):
            continue
        out.append(max(float(a) for a in arrivals) - min(float(s) for s in starts))  # type: ignore[arg-type]
    return out


def contention(isolated: Mapping[str, Any], mixed: Mapping[str, Any]) -> dict[str, Any]:
    """Per class, contended p99 over isolated p99 of its completion times (and, for EP, of the
    exchange latency): what the other class's traffic (pauses included) cost it."""
    out: dict[str, Any] = {}
    for cls, iso in isolated.items():
        mix = mixed.get(cls)
        if mix is None:
            continue
        row: dict[str, Any] = {}
        for key in ("fct_s", "exchange_s"):
            a, b = (iso.get(key) or {}).get("p99"), (mix.get(key) or {}).get("p99")
            if a and b is not None:
                row[key.replace("_s", "_p99_ratio")] = b / a
                row[key.replace("_s", "_p99_added_s")] = b - a
        out[cls] = row
    return out


def victim_keeps(alone: Sequence[float | None], beside: Sequence[float | None]) -> float | None:
    """The share of its rate a victim transfer keeps beside other traffic: the median of its
    completion times alone over the median of its times beside, one per trial; None when a trial
    has no time (the victim incomplete) or either list is empty."""
    a = [float(x) for x in alone if x]
    b = [float(x) for x in beside if x]
    if not a or not b or len(a) < len(alone) or len(b) < len(beside):
        return None
    return statistics.median(a) / statistics.median(b)


def pause_figures(ports: Mapping[str, Mapping[str, float]], clock: Clock) -> dict[str, Any]:
    """The lossless agent's pauses: frames (pause episodes) and total pause time, modelled."""
    count = sum(int(p.get("pauses", 0)) for p in ports.values())
    paused = clock.modelled(sum(float(p.get("paused_s", 0.0)) for p in ports.values()))
    busiest = max(ports.items(), key=lambda kv: kv[1].get("paused_s", 0.0), default=None)
    return {
        "pause_frames": count,
        "pause_total_us": round(paused * 1e6, 3),
        "ports_paused": sum(1 for p in ports.values() if p.get("pauses", 0)),
        "most_paused_port": busiest[0] if busiest and busiest[1].get("pauses") else None,
    }
