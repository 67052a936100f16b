"""Victim accounting (pure): which traffic class raised each pause, what each class spent behind
pauses, and how many expert-parallel exchanges waited behind a pause they did not cause
(docs/LOSSLESS.md, "Victim accounting"; issue 33 item 2).

EP exchanges and KV pulls carry distinct DSCP marks (`zcube_lab.serving.trafficclass`) but share one
pause class, as both ride one lossless priority in production. A *pause episode* is one congestion
of a switch egress port: from its queue passing XOFF to its return to XON, with the feeder ports
it paused and the class that *raised* it: the class with the most bytes into that port over the
counter interval before the onset (`raiser`, from per-class byte counters at the port). A
*transfer* (an EP exchange or a KV pull) is *behind* an episode when one of the ports its routes
may cross (`route_ports`: every shortest path, as ECMP may pick any; the lossless agent's
over-approximation too) is among the episode's paused ports while the transfer is in flight.
Its time behind pauses is the union of those overlaps; its bytes behind pauses are its bytes
times that share of its duration (a transfer taken to move at an even rate). An EP exchange is
a *victim* when it is behind an episode raised by another class.

`PauseEpisode`, `raiser` and `counter_deltas` are the core's
(`zcube_lab.core.fabric.pauseepisodes`: what the lossless agent records), named here too.

Names: a class is `ep` or `kv` (`zcube_lab.serving.trafficclass`); ports are interface names
`<node>-eth<port>`; times are seconds on one clock, passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.hostplan import egress_interface
from zcube_lab.core.fabric.pauseepisodes import PauseEpisode, counter_deltas, raiser
from zcube_lab.core.stats import quantile
from zcube_lab.serving.trafficclass import EP

__all__ = [
    "ClassTally", "PauseEpisode", "Transfer", "VictimReport", "account", "counter_deltas",
    "exchange_ports", "raiser", "route_ports", "union_seconds",
]  # fmt: skip


@dataclass(frozen=True)
class Transfer:
    """One EP exchange or KV pull: its class, when it was in flight, its bytes (both ways) and
    the ports its routes may cross."""

    traffic_class: str
    start: float
    end: float
    nbytes: int
    ports: frozenset[str]


@dataclass(frozen=True)
class ClassTally:
    """One class over a run: transfers and bytes, those behind a pause, the seconds and bytes
    behind pauses, and the pauses its bytes raised."""

    transfers: int = 0
    nbytes: int = 0
    delayed: int = 0
    seconds_behind: float = 0.0
    bytes_behind: float = 0.0
    pauses_raised: int = 0


@dataclass(frozen=True)
class VictimReport:
    """Per class tallies, the EP exchanges' times and the victims among them."""

    classes: Mapping[str, ClassTally]
    ep_exchanges: int
    ep_victims: int  # EP exchanges behind an episode another class raised
    ep_p50_s: float | None
    ep_p99_s: float | None
    pauses: int
    pauses_unattributed: int  # episodes no counter could attribute

    @property
    def victim_share(self) -> float | None:
        """The share of EP exchanges delayed by a pause they did not cause."""
        return self.ep_victims / self.ep_exchanges if self.ep_exchanges else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["classes"] = {k: asdict(v) for k, v in self.classes.items()}
        d["victim_share"] = self.victim_share
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VictimReport:
        d = {k: v for k, v in data.items() if k != "victim_share"}
        d["classes"] = {k: ClassTally(**v) for k, v in d["classes"].items()}
        return cls(**d)


def union_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """The length of the union of [start, end) intervals."""
    total, reach = 0.0, None
    for a, b in sorted((a, b) for a, b in intervals if b > a):
        if reach is None or a >= reach:
            total += b - a
            reach = b
        elif b > reach:
            total += b - reach
            reach = b
    return total


def _overlaps(t: Transfer, episodes: Sequence[PauseEpisode]) -> list[PauseEpisode]:
    return [e for e in episodes if e.start < t.end and t.start < e.end and (e.paused & t.ports)]


def account(
    transfers: Sequence[Transfer], episodes: Sequence[PauseEpisode], victim_class: str = EP
) -> VictimReport:
    """The run's victim accounting from its transfers and pause episodes."""
    tallies: dict[str, dict[str, float]] = {}
    victims = 0
    ep_times: list[float] = []
    for t in transfers:
        row = tallies.setdefault(t.traffic_class, _zero())
        row["transfers"] += 1
        row["nbytes"] += t.nbytes
        hits = _overlaps(t, episodes)
        duration = t.end - t.start
        if t.traffic_class == victim_class:
            ep_times.append(duration)
            if any(e.raised_by is not None and e.raised_by != victim_class for e in hits):
                victims += 1
        if not hits:
            continue
        behind = union_seconds((max(t.start, e.start), min(t.end, e.end)) for e in hits)
        row["delayed"] += 1
        row["seconds_behind"] += behind
        row["bytes_behind"] += t.nbytes * behind / duration if duration > 0 else 0.0
    for e in episodes:
        if e.raised_by is not None:
            tallies.setdefault(e.raised_by, _zero())["pauses_raised"] += 1
    ep_times.sort()
    classes = {
        c: ClassTally(
            transfers=int(r["transfers"]),
            nbytes=int(r["nbytes"]),
            delayed=int(r["delayed"]),
            seconds_behind=round(r["seconds_behind"], 6),
            bytes_behind=round(r["bytes_behind"], 1),
            pauses_raised=int(r["pauses_raised"]),
        )
        for c, r in sorted(tallies.items())
    }
    return VictimReport(
        classes=classes,
        ep_exchanges=len(ep_times),
        ep_victims=victims,
        ep_p50_s=quantile(ep_times, 0.5) if ep_times else None,
        ep_p99_s=quantile(ep_times, 0.99) if ep_times else None,
        pauses=len(episodes),
        pauses_unattributed=sum(1 for e in episodes if e.raised_by is None),
    )


def _zero() -> dict[str, float]:
    return dict.fromkeys(
        ("transfers", "nbytes", "delayed", "seconds_behind", "bytes_behind", "pauses_raised"), 0.0
    )


def _port(node: str, port: int) -> str:
    return f"{node}-eth{port}"


def route_ports(fabric: Fabric, src: str, dst: str) -> frozenset[str]:
    """Every egress port a route from host `src` to any address of host `dst` may cross: the
    source's NIC port its routes pick, each switch port on every shortest switch path (ECMP may
    pick any), and the last switch's port to `dst`. Both directions of an exchange are
    `route_ports(a, b) | route_ports(b, a)`."""
    between: dict[tuple[str, str], list[int]] = {}
    for lk in fabric.links:
        between.setdefault((lk.node1, lk.node2), []).append(lk.port1)
        between.setdefault((lk.node2, lk.node1), []).append(lk.port2)
    out: set[str] = set()
    host = fabric.host(src)
    for iface in fabric.host(dst).interfaces:
        last = fabric.attachments[(dst, iface.index)]
        index = egress_interface(host, iface.ip)
        if index is None:
            continue
        first = fabric.attachments[(src, index)]
        to_dest = fabric.switch_distances[last.switch]
        if first.switch not in to_dest:
            continue
        out.add(_port(src, index))
        out.add(_port(last.switch, last.port))
        frontier = {first.switch}
        while frontier:
            nxt_frontier = set()
            for sw in frontier:
                for nxt in set(fabric.switch_adjacency[sw]):
                    if to_dest.get(nxt) == to_dest[sw] - 1:
                        out.update(_port(sw, p) for p in between[(sw, nxt)])
                        nxt_frontier.add(nxt)
            frontier = nxt_frontier
    return frozenset(out)


def exchange_ports(fabric: Fabric, host: str, peers: Iterable[str]) -> frozenset[str]:
    """The ports an exchange between `host` and its peers may cross, both ways."""
    out: set[str] = set()
    for p in peers:
        out |= route_ports(fabric, host, p) | route_ports(fabric, p, host)
    return frozenset(out)
