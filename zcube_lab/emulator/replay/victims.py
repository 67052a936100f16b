"""A replay's victims, counted as a live run counts them (`zcube_lab.emulator.results.lossless.
victims`; docs/LOSSLESS.md, "Victim accounting"): the replay's KV transfers and EP exchanges as
`victims.Transfer`s, set against the pause episodes the lab's lossless agent recorded while the
replay ran, each raised by the class with the most bytes into the congested port (the replay's
datagrams carry their class's DSCP mark, as the live lab's connections do, so the per-class
counters see them). An EP exchange (its transfers' tag) is in flight from its first start to its
last arrival, over the ports of every route between its transfers' ends; a KV transfer from its
start to its arrival. Incomplete ones are left out, as a live run leaves out failed pulls.

Times: the agents report modelled seconds from the replay's origin T0; the episodes carry wall
clock seconds (`time.time()`); `wall0` is T0 on the wall clock, and `clock` turns a modelled
span into wall seconds and the report back into modelled ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from zcube_lab.core.clock import Clock
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.pauseepisodes import PauseEpisode
from zcube_lab.core.replay.recording import Transfer as Sent
from zcube_lab.emulator.results.lossless.victimlogs import modelled
from zcube_lab.emulator.results.lossless.victims import (
    Transfer,
    VictimReport,
    account,
    exchange_ports,
)
from zcube_lab.serving.trafficclass import EP, KV


def replay_transfers(
    transfers: Iterable[Sent],
    sent: Mapping[int, float],
    got: Mapping[int, Mapping[str, Any]],
    fabric: Fabric,
    wall0: float,
    clock: Clock,
) -> list[Transfer]:
    """The completed KV transfers and EP exchanges of a replay, on the wall clock."""
    ports: dict[tuple[str, str], frozenset[str]] = {}

    def ports_of(a: str, b: str) -> frozenset[str]:
        if (a, b) not in ports:
            ports[(a, b)] = exchange_ports(fabric, a, [b])
        return ports[(a, b)]

    def wall(s: float) -> float:
        return wall0 + clock.wall(s)

    out: list[Transfer] = []
    exchanges: dict[str, list[Sent]] = {}
    for t in transfers:
        if t.cls == EP and t.exchange:
            exchanges.setdefault(t.exchange, []).append(t)
            continue
        if t.cls != KV:
            continue
        arrived = (got.get(t.id) or {}).get("arrived_s")
        if t.id not in sent or arrived is None:
            continue
        out.append(
            Transfer(KV, wall(sent[t.id]), wall(float(arrived)), round(t.bytes),
                     ports_of(t.dst, t.src))
        )  # fmt: skip
    for group in exchanges.values():
        arrivals = [(got.get(t.id) or {}).get("arrived_s") for t in group]
        if any(a is None for a in arrivals) or any(t.id not in sent for t in group):
            continue
        start = min(sent[t.id] for t in group)
        end = max(float(a) for a in arrivals)  # type: ignore[arg-type]
        reach: frozenset[str] = frozenset().union(*(ports_of(t.src, t.dst) for t in group))
        out.append(Transfer(EP, wall(start), wall(end), round(sum(t.bytes for t in group)), reach))
    return out


def during(episodes: Sequence[PauseEpisode], start: float, end: float) -> list[PauseEpisode]:
    """The episodes that overlap [start, end] (wall clock): a lab kept for several replays
    records all of theirs in one file."""
    return [e for e in episodes if e.end >= start and e.start <= end]


def replay_victims(
    transfers: Iterable[Sent],
    sent: Mapping[int, float],
    got: Mapping[int, Mapping[str, Any]],
    fabric: Fabric,
    wall0: float,
    clock: Clock,
    episodes: Sequence[PauseEpisode],
    wall_end: float,
) -> VictimReport:
    """The replay's victim accounting, its times in modelled seconds."""
    moved = replay_transfers(transfers, sent, got, fabric, wall0, clock)
    return modelled(account(moved, during(episodes, wall0, wall_end)), clock)
