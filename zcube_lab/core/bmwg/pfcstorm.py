"""§8.4, PFC storm and deadlock resilience, at the fine time scale (pure; issue 46).

The storm source: one receiver whose NIC keeps sending PAUSE (a "stuck receiver", the form the
storm is commonly benchmarked in): every switch port toward the stuck host is held paused by
the lossless agent for a window (`zcube_lab.core.fabric.lossless.ForcedPause`), and the agent's
own rules pause the ports feeding each queue that fills, hop by hop. The draft's other form, a
circular buffer dependency across switches, is a property of the routes: `dependency_cycle`
over the lab's feeders finds none on ZCube, ROFT or Clos with the routes the replay lab installs
(shortest paths: ZCube's two-switch paths and the leaf-spine-leaf paths only ever carry a
host's traffic through switch-to-switch ports fed by hosts or by one tier), so a storm there
can spread but cannot close on itself; the row says so per fabric (`routing_cycle`).

A trial (`storm_trial`, modelled seconds): KV messages of MSG_BYTES on every path the storm can
reach: every other host sends into the stuck host (together IN_LOAD of its NIC), and every host
pair i -> i + half not touching it sends at VICTIM_LOAD of a NIC (the victims: flows not destined
to the stuck host). The stuck window opens after WARM_SHARE of the trial and lasts STUCK_SHARE
of it; the rest is the recovery's tail.

Figures (`storm_figures`, from the agent's pause log: each pause's port, start and end):
- PFC_storm: 1 when a port other than the stuck ones paused between the window's opening and
  the deadlock bound (the pause spread beyond the stuck receiver), else 0;
- PAUSE_propagation_depth_hops: the largest hop distance (links, hosts counted as nodes) from a
  stuck port's switch to the node of a port paused then (the stuck ports are 0 hops; the ports
  feeding them 1);
- zero_throughput_max_ms: the longest interval a victim flow had bytes due (a message started,
  by its schedule, and not yet arrived) but received none (no message between its first and
  last datagram), over every victim flow, modelled ms;
- recovery_time_ms: from the release to the first instant no port is paused (the end of the
  run of overlapping pauses holding at the release); 0 when none held then;
- PFC_deadlock: 1 when pauses were still held DEADLOCK_FACTOR x the window after the release
  (or the log ends with them held), else 0; recovery_time_ms is then None;
- drain_time_ms: from the release until every victim message due before it has arrived (the
  traffic the storm held delivered); None when one never arrived. Pauses can clear at once
  and then recur while that backlog drains, so recovery_time_ms alone can flatter a fabric;
- pause_rate_before_per_ms and pause_rate_after_per_ms: pauses begun per modelled ms before
  the window and over the deadlock bound after the release (the traffic's own congestion
  against the storm's aftermath).
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.lossless import dependency_cycle, feeders
from zcube_lab.core.replay.recording import Recording, Transfer

MSG_BYTES = 256e3  # a message at line rate is 5 µs: the zero-throughput resolution
IN_LOAD = 0.3  # into the stuck host, every sender together, of its NIC
VICTIM_LOAD = 0.1  # each victim flow, of its sender's NIC
WARM_SHARE = 0.1
STUCK_SHARE = 0.15
DEADLOCK_FACTOR = 4.0  # pauses still held this many windows after the release: a deadlock
MIN_TRIAL_S = 0.002
NIC_GBPS = 400.0


def line_s(nbytes: float) -> float:
    """Modelled seconds of `nbytes` real bytes at one NIC's line rate."""
    return nbytes * 8 / (NIC_GBPS * 1e9)


def stuck_host(hosts: Sequence[str]) -> str:
    """The stuck receiver: a third into the host list (as §8.2's incast receiver)."""
    return hosts[len(hosts) // 3]


def victim_pairs(hosts: Sequence[str]) -> list[tuple[str, str]]:
    """The victim flows: host i to host i + half, those not touching the stuck host."""
    n, stuck = len(hosts), stuck_host(hosts)
    pairs = [(hosts[i], hosts[(i + n // 2) % n]) for i in range(n)]
    return [(a, b) for a, b in pairs if stuck not in (a, b)]


def window_s(trial_s: float) -> tuple[float, float]:
    """The stuck window (opening, release) in modelled seconds from the trial's start."""
    start = WARM_SHARE * trial_s
    return start, start + STUCK_SHARE * trial_s


def bound_s(trial_s: float) -> float:
    """Modelled seconds after the release past which held pauses are a deadlock."""
    a, b = window_s(trial_s)
    return DEADLOCK_FACTOR * (b - a)


def check_trial(trial_s: float) -> None:
    """A ConfigError when a trial is too short for a window and its recovery."""
    if trial_s < MIN_TRIAL_S:
        raise ConfigError(
            "trial_seconds", trial_s, f"at least {MIN_TRIAL_S:g} modelled s for section 8.4"
        )


def _train(
    out: list[Transfer], src: str, dst: str, load: float, trial_s: float, tag: str,
    rng: random.Random,
) -> None:  # fmt: skip
    period = line_s(MSG_BYTES) / load
    t = rng.uniform(0, period)
    while t < trial_s:
        out.append(Transfer(len(out), "kv", t, src, dst, MSG_BYTES, exchange=tag))
        t += period


def storm_trial(hosts: Sequence[str], trial_s: float, seed: int) -> Recording:
    """§8.4's trial (module docstring)."""
    check_trial(trial_s)
    rng = random.Random(seed)
    stuck = stuck_host(hosts)
    senders = [h for h in hosts if h != stuck]
    out: list[Transfer] = []
    for h in senders:
        _train(out, h, stuck, IN_LOAD / len(senders), trial_s, f"in:{h}", rng)
    for a, b in victim_pairs(hosts):
        _train(out, a, b, VICTIM_LOAD, trial_s, f"victim:{a}>{b}", rng)
    out.sort(key=lambda t: t.start_s)
    out = [Transfer(i, t.cls, t.start_s, t.src, t.dst, t.bytes, exchange=t.exchange)
           for i, t in enumerate(out)]  # fmt: skip
    a, b = window_s(trial_s)
    meta = {"synthetic": "bmwg 8.4 storm", "stuck_host": stuck, "window_s": [a, b],
            "bound_s": bound_s(trial_s), "in_load": IN_LOAD, "victim_load": VICTIM_LOAD,
            "victims": len(victim_pairs(hosts))}  # fmt: skip
    return Recording(tuple(out), tuple(hosts), meta)


def trial_size(hosts: Sequence[str], trial_s: float) -> int:
    """Transfers in one trial, about (without building it)."""
    per = trial_s / line_s(MSG_BYTES)
    return math.ceil(per * IN_LOAD) + len(victim_pairs(hosts)) * math.ceil(per * VICTIM_LOAD)


def stuck_ports(fabric: Fabric, host: str) -> list[str]:
    """Every switch port toward `host` (its NIC's ports all send PAUSE)."""
    at = [fabric.attachments[(host, i.index)] for i in fabric.host(host).interfaces]
    return sorted(f"{a.switch}-eth{a.port}" for a in at)


def node_of(port: str) -> str:
    return port.rsplit("-eth", 1)[0]


def hop_distances(fabric: Fabric, sources: Iterable[str]) -> dict[str, int]:
    """Links from the nearest of `sources` to every node (switches and hosts)."""
    adj: dict[str, set[str]] = {}
    for lk in fabric.links:
        adj.setdefault(lk.node1, set()).add(lk.node2)
        adj.setdefault(lk.node2, set()).add(lk.node1)
    dist = {s: 0 for s in sources}
    todo = deque(dist)
    while todo:
        n = todo.popleft()
        for m in sorted(adj.get(n, ())):
            if m not in dist:
                dist[m] = dist[n] + 1
                todo.append(m)
    return dist


def reach(feeds: Mapping[str, Iterable[str]], stuck: Iterable[str]) -> set[str]:
    """Every port a storm from the `stuck` ports can pause: their feeders, theirs, and on."""
    seen = set(stuck)
    todo = sorted(seen)
    while todo:
        for up in feeds.get(todo.pop(), ()):
            if up not in seen:
                seen.add(up)
                todo.append(up)
    return seen


def possible_depth(fabric: Fabric, stuck: Sequence[str]) -> int:
    """The most hops a storm from the `stuck` ports can spread on `fabric`'s routes."""
    dist = hop_distances(fabric, {node_of(p) for p in stuck})
    return max(dist.get(node_of(p), 0) for p in reach(feeders(fabric), stuck))


def routing_cycle(fabric: Fabric) -> list[str] | None:
    """A cyclic buffer dependency the lab's routes make on `fabric` (None: none)."""
    return dependency_cycle(feeders(fabric))


def _union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _minus_longest(want: list[tuple[float, float]], have: list[tuple[float, float]]) -> float:
    """The longest part of the union `want` not covered by the union `have`."""
    best = 0.0
    for s, e in want:
        t = s
        for hs, he in have:
            if he <= t or hs >= e:
                continue
            best = max(best, hs - t)
            t = max(t, he)
        best = max(best, e - t)
    return best


def zero_throughput_s(
    transfers: Sequence[Transfer], got: Mapping[int, Mapping[str, Any]], end_s: float
) -> float:
    """The longest interval the flow of `transfers` had bytes due but received none (module
    docstring); a message that never arrived is due until `end_s`."""
    due, receiving = [], []
    for t in transfers:
        row = got.get(t.id) or {}
        arrived, first = row.get("arrived_s"), row.get("first_s")
        due.append((t.start_s, end_s if arrived is None else float(arrived)))
        if first is not None:
            receiving.append((float(first), end_s if arrived is None else float(arrived)))
    return _minus_longest(_union(due), _union(receiving))


def storm_figures(
    log: Sequence[Sequence[Any]],
    stuck: Sequence[str],
    window: tuple[float, float],
    bound: float,
    seen_s: float,
    fabric: Fabric,
    transfers: Sequence[Transfer],
    got: Mapping[int, Mapping[str, Any]],
) -> dict[str, Any]:
    """The trial's figures (module docstring) from the pause log (`[port, start, end]`,
    modelled seconds, end None: still paused when the log was read at `seen_s`), the stuck
    ports, the window, the deadlock bound, and the replay's transfers and arrivals."""
    a, b = window
    spans = [(str(p), float(s), seen_s if e is None else float(e)) for p, s, e in log]
    storm = [x for x in spans if x[2] >= a and x[1] <= b + bound]
    dist = hop_distances(fabric, {node_of(p) for p in stuck})
    depth = max((dist.get(node_of(p), 0) for p, _s, _e in storm), default=None)
    spread = sorted({p for p, _s, _e in storm} - set(stuck))
    merged = _union((s, e) for _p, s, e in spans)
    held = next(((s, e) for s, e in merged if s <= b < e), None)
    recovery = 0.0 if held is None else held[1] - b
    open_at_end = held is not None and held[1] >= seen_s and any(e is None for *_x, e in log)
    deadlock = open_at_end or recovery > bound
    flows: dict[str, list[Transfer]] = {}
    for t in transfers:
        if t.exchange and t.exchange.startswith("victim:"):
            flows.setdefault(t.exchange, []).append(t)
    zero = max((zero_throughput_s(ts, got, seen_s) for ts in flows.values()), default=None)
    incomplete = sum(1 for t in transfers if (got.get(t.id) or {}).get("arrived_s") is None)
    held_back = [(got.get(t.id) or {}).get("arrived_s") for ts in flows.values() for t in ts
                 if t.start_s < b]  # fmt: skip
    drain = None
    if held_back and all(x is not None for x in held_back):
        drain = max(0.0, max(float(x) for x in held_back) - b)
    return {
        "PFC_storm": int(bool(spread)),
        "PFC_deadlock": int(deadlock),
        "PAUSE_propagation_depth_hops": depth,
        "zero_throughput_max_ms": None if zero is None else zero * 1e3,
        "recovery_time_ms": None if deadlock else recovery * 1e3,
        "ports_paused_storm": len({p for p, _s, _e in storm}),
        "pauses_before_window": sum(1 for _p, s, _e in spans if s < a),
        "deadlock_bound_ms": bound * 1e3,
        "drain_time_ms": None if drain is None else drain * 1e3,
        "pause_rate_before_per_ms": sum(1 for _p, s, _e in spans if s < a) / (a * 1e3)
        if a > 0
        else None,
        "pause_rate_after_per_ms": sum(1 for _p, s, _e in spans if b <= s < b + bound)
        / (bound * 1e3)
        if bound > 0
        else None,
        "incomplete": incomplete,
    }
