"""When each transfer of a replay starts: its release time or its chain (pure; issue 45 item 3).

`HostChains` is one host's view, the state the replay agent keeps: the transfers it sends, and
when each of their predecessors arrived here. A transfer is due at
`max(start_s, max(arrival of its predecessors) + gap_s)`; one with a predecessor still on its
way is not due yet. `schedule` runs every host's chains against a duration per transfer (each
transfer alone on the fabric, no contention): the uncontended timetable, which a replay's
measured one is set against, and the hand answers the tests check.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from zcube_lab.core.replay.recording import Transfer, order


class HostChains:
    """The transfers one host sends and what it has received of their predecessors."""

    def __init__(self, outbound: Iterable[Transfer]) -> None:
        self.pending: dict[int, Transfer] = {t.id: t for t in outbound}
        self.watch: set[int] = {a for t in self.pending.values() for a in t.after}
        self.arrived: dict[int, float] = {}

    def arrival(self, tid: int, at_s: float) -> None:
        """A transfer addressed to this host arrived whole at `at_s` (modelled seconds)."""
        if tid in self.watch and tid not in self.arrived:
            self.arrived[tid] = at_s

    def start_time(self, t: Transfer) -> float | None:
        """When `t` may start, or None while a predecessor has not arrived."""
        if not t.after:
            return t.start_s
        try:
            last = max(self.arrived[a] for a in t.after)
        except KeyError:
            return None
        return max(t.start_s, last + t.gap_s)

    def due(self, now_s: float) -> list[Transfer]:
        """The transfers due by `now_s`, removed from those pending, earliest first."""
        out = []
        for t in list(self.pending.values()):
            at = self.start_time(t)
            if at is not None and at <= now_s:
                out.append((at, t.id, t))
                del self.pending[t.id]
        return [t for _, _, t in sorted(out)]

    def next_time(self) -> float | None:
        """The earliest start among the pending transfers whose start is known."""
        times = [s for t in self.pending.values() if (s := self.start_time(t)) is not None]
        return min(times, default=None)


@dataclass(frozen=True)
class Timed:
    """A transfer's start and finish in a timetable, modelled seconds."""

    start_s: float
    end_s: float


def schedule(
    transfers: Sequence[Transfer], duration: Callable[[Transfer], float]
) -> dict[int, Timed]:
    """The timetable when every transfer takes `duration(t)` whatever else runs (no contention),
    chains kept: each transfer starts when its host's chain lets it."""
    ordered = order(transfers)
    hosts: dict[str, HostChains] = {}
    for t in ordered:
        hosts.setdefault(t.src, HostChains([]))
    for t in ordered:
        hosts[t.src].pending[t.id] = t
        hosts[t.src].watch.update(t.after)
    timed: dict[int, Timed] = {}
    events: list[tuple[float, int]] = []  # (arrival time, transfer id)
    by_id = {t.id: t for t in ordered}

    def release(chains: HostChains) -> None:
        for t in list(chains.pending.values()):
            at = chains.start_time(t)
            if at is not None:
                del chains.pending[t.id]
                end = at + duration(t)
                timed[t.id] = Timed(at, end)
                heapq.heappush(events, (end, t.id))

    for chains in hosts.values():
        release(chains)
    while events:
        at, tid = heapq.heappop(events)
        dst = by_id[tid].dst
        if dst in hosts:
            hosts[dst].arrival(tid, at)
            release(hosts[dst])
    return timed
