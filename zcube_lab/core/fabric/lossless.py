"""The lossless (PFC-like) mode's pure logic: thresholds, which ports feed which, and the
pause state machine (docs/LOSSLESS.md says how the lab realizes it and what it measured).

A switch egress port whose queue reaches XOFF bytes is *congested* until it falls to XON
bytes; while it is, every port that feeds it is *paused*: the upstream end of each link into
its switch over which some route reaches it (the far end's egress, a host NIC port or another
switch's port). A paused port stops sending; its own queue grows, and when it is a switch port
that reaches its XOFF, its feeders pause in turn: backpressure spreads hop by hop, and every
flow on a paused link waits, the head-of-line blocking PFC has. A port stays paused while any
congested port it feeds is congested.

Which ports feed which (`feeders`): from the routes the lab installs (each host's route to
every destination address, then every shortest switch path to the address's switch), each
(ingress, egress) pair of ports a route crosses at a switch; parallel links all count. A real
PFC switch pauses an ingress port when the bytes that arrived on it and still wait in the
switch pass XOFF (ingress accounting), so an ingress whose traffic drains elsewhere is not
paused; the lab sees egress queues only and pauses every ingress a route can carry to the
congested egress, so it can pause a link PFC would leave running (stated in docs/LOSSLESS.md),
never fewer.

Thresholds (`thresholds`): XOFF is where the lossy port would drop, the buffer model's queue
limit in bytes (`queues.QueueModel`), so the models compare lossy and lossless at the same
buffer; XON is two frames lower (PFC's hysteresis: resume once room for a couple of frames is
back), and never below half of XOFF. The port's real FIFO is larger by the headroom
(`headroom_bytes`): what arrives while the pause takes effect, so a port never drops.

Forced pauses (`ForcedPause`, opt-in, none unless given): a port held paused from one time to
another whatever its queues, as a switch port toward a receiver whose NIC keeps sending PAUSE
(bmwg §8.4's storm source); the machine's own rules then pause its feeders as its queue fills.
With a forced pause given, the machine also keeps every pause's start and end (`history`).
`dependency_cycle` finds a cyclic buffer dependency in the feeders (the condition a PFC
deadlock needs).

Ingress accounting (`ingress_watch`, opt-in by the plan; on in replays, off by default in live
runs: docs/LOSSLESS.md): a switch port's *ingress* backlog, the bytes that arrived on it and
wait inside the switch before reaching any egress queue (in the lab: ovs-vswitchd's receive
socket on that port), has its own XOFF and XON; past XOFF the far end of that port's link (the
one sender into it: a host NIC or another switch's port) is paused until the backlog falls to
XON, as PFC's per-ingress accounting does. Egress congestion pauses as before; a port is paused
while either wants it. The egress rule alone misses a pile-up that has not reached an egress
queue yet and then arrives there faster than any link could bring it (docs/REPLAY.md, "a third
cause").

Names: ports are interface names `<node>-eth<port>`; times are seconds, passed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.hostplan import egress_interface
from zcube_lab.core.fabric.queues import HTB_CLASS, LEAF_HANDLE

# The leaf queue of every shaped port under `--lossless`: a TBF (this kernel has no plug
# qdisc) whose pass-through rate is far above any shaped rate, so the HTB class above it
# shapes, and which the agent pauses by setting its rate to 1 byte/s
# (zcube_lab.emulator.lab.lossless).
PASS_RATE_BYTES = 500_000_000  # 4 Gb/s
PASS_BURST = 65_536
XON_GAP_FRAMES = 2
# What arrives at a port after its queue passed XOFF and before its feeders stop: the agent's
# reaction (a poll interval plus one netlink change per feeder; docs/LOSSLESS.md measured it)
# at every feeder's full rate, plus one frame per feeder in flight (a pause lets the frame in
# transmission finish). 50 ms is far beyond the reaction time measured (the verdict judges
# that against `Limits.lossless_reaction_s`), so the headroom is never what decides a drop.
HEADROOM_S = 0.050
FRAME_OVERHEAD = 64  # Ethernet header and slack over the MTU, per frame in a queue
# Idle polling: while every watched queue is below half its XOFF, the agent may poll less
# often, as long as no queue can climb from there to XOFF between two readings: at most the
# time the fastest-filling port needs at its feeders' full rates, less their HTB bursts
# (`idle_interval_s`), and never more than IDLE_MAX_S.
WATCH_FRACTION = 0.5
HTB_BURST_BYTES = 15 * 1024  # linkplan's `burst 15k`: what a resumed feeder may send at once
IDLE_MAX_S = 0.010


def holding_leaf_line(interface: str, limit_bytes: int) -> str:
    """The `tc -batch` line making `interface`'s leaf queue a pausable byte FIFO."""
    return (
        f"qdisc replace dev {interface} parent {HTB_CLASS} handle {LEAF_HANDLE} tbf "
        f"rate {PASS_RATE_BYTES * 8}bit burst {PASS_BURST} limit {limit_bytes}"
    )


@dataclass(frozen=True)
class PortThresholds:
    """An egress port's XOFF and XON in bytes and its FIFO's limit in bytes."""

    xoff: int
    xon: int
    limit: int


def _port(node: str, port: int) -> str:
    return f"{node}-eth{port}"


def feeders(fabric: Fabric) -> dict[str, frozenset[str]]:
    """For every switch egress port a route crosses: the upstream ports (far ends of the links
    into its switch) whose traffic a route carries to it. Routes as the lab installs them: to
    each destination address, from every other host, out of the interface its routes pick for
    it (`hostplan.egress_interface`), then every shortest switch path to the address's switch."""
    between: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for lk in fabric.links:
        between.setdefault((lk.node1, lk.node2), []).append((lk.port1, lk.port2))
        between.setdefault((lk.node2, lk.node1), []).append((lk.port2, lk.port1))
    out: dict[str, set[str]] = {}

    def walk(switch: str, ins: frozenset[str], dest: str, last_port: int) -> None:
        # `ins`: the upstream ports that can bring this traffic into `switch`
        if switch == dest:
            out.setdefault(_port(switch, last_port), set()).update(ins)
            return
        to_dest = fabric.switch_distances[dest]
        for nxt in sorted(set(fabric.switch_adjacency[switch])):
            if to_dest.get(nxt) != to_dest[switch] - 1:
                continue
            pairs = between[(switch, nxt)]
            for mine, _far in pairs:
                out.setdefault(_port(switch, mine), set()).update(ins)
            walk(nxt, frozenset(_port(switch, mine) for mine, _far in pairs), dest, last_port)

    for dst in fabric.hosts:
        for iface in dst.interfaces:
            last = fabric.attachments[(dst.name, iface.index)]
            for src in fabric.hosts:
                if src.name == dst.name:
                    continue
                index = egress_interface(src, iface.ip)
                if index is None:
                    continue
                first = fabric.attachments[(src.name, index)]
                if last.switch not in fabric.switch_distances[first.switch]:
                    continue
                walk(first.switch, frozenset({_port(src.name, index)}), last.switch, last.port)
    return {port: frozenset(up) for port, up in sorted(out.items())}


def far_ends(fabric: Fabric) -> dict[str, str]:
    """Every switch port and the port at the other end of its link (a host's interface or
    another switch's port): the one sender into it."""
    out = {}
    for lk in fabric.links:
        for node, port, far, far_port in (
            (lk.node1, lk.port1, lk.node2, lk.port2),
            (lk.node2, lk.port2, lk.node1, lk.port1),
        ):
            if fabric.is_switch(node):
                out[_port(node, port)] = _port(far, far_port)
    return dict(sorted(out.items()))


def ingress_watch(
    fabric: Fabric,
    pausable: Iterable[str],
    queue_packets: Mapping[str, int],
    mtu: int,
) -> tuple[dict[str, str], dict[str, PortThresholds]]:
    """The switch ports whose ingress backlog the agent counts: every one whose link's far end
    is `pausable`, mapped to that far end, and each one's thresholds: the XOFF and XON its own
    queue has (the buffer model's packets for the port), so an ingress holds no more than its
    egress queue may before its sender stops. The limit is the XOFF (an ingress has no FIFO
    of its own to size)."""
    can = set(pausable)
    ends = {port: far for port, far in far_ends(fabric).items() if far in can}
    limits = {}
    for port in ends:
        xoff, xon = thresholds(queue_packets[port], mtu)
        limits[port] = PortThresholds(xoff, xon, xoff)
    return ends, limits


def thresholds(xoff_packets: int, mtu: int) -> tuple[int, int]:
    """XOFF and XON in bytes of a port the buffer model gives `xoff_packets` frames of `mtu`."""
    if xoff_packets < 1 or mtu < 1:
        raise ConfigError("lossless threshold", (xoff_packets, mtu), "positive packets and MTU")
    xoff = xoff_packets * mtu
    return xoff, max(xoff // 2, xoff - XON_GAP_FRAMES * mtu)


def headroom_bytes(feeder_mbps: Iterable[float], mtu: int, headroom_s: float = HEADROOM_S) -> int:
    """Bytes that may still arrive at a port after XOFF from feeders of these rates."""
    rates = list(feeder_mbps)
    return math.ceil(sum(rates) * 1e6 / 8 * headroom_s) + len(rates) * (mtu + FRAME_OVERHEAD)


def port_thresholds(
    fabric: Fabric,
    queue_packets: Mapping[str, int],
    rates_mbps: Mapping[str, float],
    mtu: int,
) -> dict[str, PortThresholds]:
    """XOFF, XON and FIFO limit of every switch egress port a route crosses, from the buffer
    model's per-port packets and the feeders' rates (both by interface name)."""
    out = {}
    for port, ups in feeders(fabric).items():
        xoff, xon = thresholds(queue_packets[port], mtu)
        room = headroom_bytes((rates_mbps[u] for u in sorted(ups)), mtu)
        out[port] = PortThresholds(xoff, xon, xoff + room)
    return out


def fifo_bytes(
    fabric: Fabric,
    queue_packets: Mapping[str, int],
    rates_mbps: Mapping[str, float],
    mtu: int,
) -> dict[str, int]:
    """The byte limit of every shaped port's FIFO under the lossless mode: a watched switch
    port's XOFF plus headroom; any other port (a host's NIC port, whose host only pauses)
    its packets in frames of `mtu` with their overhead, twice over."""
    limits = port_thresholds(fabric, queue_packets, rates_mbps, mtu)
    return {
        port: limits[port].limit if port in limits else 2 * packets * (mtu + FRAME_OVERHEAD)
        for port, packets in queue_packets.items()
    }


def idle_interval_s(
    limits: Mapping[str, PortThresholds],
    feeds: Mapping[str, Iterable[str]],
    rates_mbps: Mapping[str, float],
    poll_s: float,
    most_s: float = IDLE_MAX_S,
    ingress: Mapping[str, str] | None = None,
    ingress_limits: Mapping[str, PortThresholds] | None = None,
) -> float:
    """The longest poll interval (between `poll_s` and `most_s`) over which no watched queue
    below half its XOFF can reach XOFF: (XOFF / 2 - the feeders' bursts) over the rate the
    feeders can fill it at beyond its own drain. A watched ingress (`ingress`: port -> its
    far end) fills at its far end's full rate at most (the switch may forward none of it)."""
    best = most_s
    for port, far in (ingress or {}).items():
        lim = (ingress_limits or {})[port]
        margin = lim.xoff * (1 - WATCH_FRACTION) - HTB_BURST_BYTES
        best = min(best, max(0.0, margin) / (rates_mbps[far] * 1e6 / 8))
    for port, lim in limits.items():
        ups = list(feeds.get(port, ()))
        fill = (sum(rates_mbps[u] for u in ups) - rates_mbps[port]) * 1e6 / 8
        margin = lim.xoff * (1 - WATCH_FRACTION) - len(ups) * HTB_BURST_BYTES
        if fill <= 0:
            continue
        best = min(best, max(0.0, margin) / fill)
    return max(poll_s, best)


def reaction_origin(previous_start: float, previous_quiet: bool, idle_s: float) -> float:
    """Where the agent's reaction time to a congestion starts: the earliest instant the queue
    can have passed XOFF. After a busy reading that is the reading's start (the queue was below
    XOFF then). After a quiet one (every watched queue below half XOFF, nothing paused) no queue
    can reach XOFF within the idle interval `idle_s` (`idle_interval_s`), so it starts that much
    later: without it the bound would carry the idle interval as slack, and that interval is
    the fabric's (longer where ports fill slower), which would judge the agent on one fabric
    harder than on another for the same reaction."""
    return previous_start + idle_s if previous_quiet else previous_start


@dataclass
class Stillness:
    """Whether the fabric has been still long enough for the agent to sleep until a packet
    wakes it (zcube_lab.emulator.lab.losslesstap): a reading is *still* when it is quiet, every
    watched queue is empty and the watched ports sent nothing since the reading before; `observe`
    says
    yes once the readings have been still for `after_s`. Pure: times are passed in."""

    after_s: float = 0.05
    since: float | None = None  # the first of the current run of still readings
    sent: int | None = None  # packets the watched ports had sent at the last reading

    def observe(self, now: float, quiet: bool, backlogs: Mapping[str, int], sent: int) -> bool:
        """Take one reading (`sent`: the watched ports' packet counters summed); True when
        this reading is still and so were those of the last `after_s`."""
        still = quiet and self.sent == sent and not any(backlogs.values())
        self.sent = sent
        if not still:
            self.since = None
            return False
        if self.since is None:
            self.since = now
        return now - self.since >= self.after_s

    def woken(self) -> None:
        """A packet entered the fabric: stillness starts over (`after_s` of still readings
        again before the next sleep)."""
        self.since = None


@dataclass
class Histogram:
    """Durations counted in `width_s` buckets (the last bucket takes everything beyond), with
    the largest seen: quantiles of an agent's millions of polls in constant memory."""

    width_s: float = 1e-5
    size: int = 10_000  # 10 us buckets up to 100 ms
    counts: list[int] = field(default_factory=list)
    n: int = 0
    largest: float = 0.0

    def add(self, seconds: float) -> None:
        if not self.counts:
            self.counts = [0] * self.size
        index = min(self.size - 1, max(0, int(seconds / self.width_s)))
        self.counts[index] += 1
        self.n += 1
        self.largest = max(self.largest, seconds)

    def quantile(self, q: float) -> float | None:
        """The q-quantile (nearest rank) as its bucket's upper edge, never above the largest
        seen; None when empty."""
        if not self.n:
            return None
        rank = min(self.n, max(1, math.ceil(q * self.n)))
        seen = 0
        for index, count in enumerate(self.counts):
            seen += count
            if seen >= rank:
                if index == self.size - 1:  # the overflow bucket has no upper edge
                    return self.largest
                return min(self.largest, (index + 1) * self.width_s)
        return self.largest


@dataclass
class PortRecord:
    """How often and how long one port was paused."""

    pauses: int = 0
    paused_s: float = 0.0
    since: float | None = None  # when the current pause began


@dataclass(frozen=True)
class ForcedPause:
    """`port` held paused from `start` until `end` (seconds on the machine's clock)."""

    port: str
    start: float
    end: float

    def active(self, now: float) -> bool:
        return self.start <= now < self.end


def dependency_cycle(feeds: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A cycle of watched ports each feeding the next (a cyclic buffer dependency: every port
    of it can be congested and paused at once, a deadlock), as the ports in order with the
    first repeated at the end; None when the feeders have none. Only ports that are watched
    themselves (keys of `feeds`) can close a cycle."""
    # edges: u -> v when u feeds v (u's queue waits on v's)
    succ: dict[str, list[str]] = {}
    for v, ups in feeds.items():
        for u in ups:
            if u in feeds:
                succ.setdefault(u, []).append(v)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(succ):
        if state.get(root):
            continue
        path = [root]
        state[root] = 1
        stack = [iter(sorted(succ.get(root, ())))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
                continue
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(succ.get(nxt, ()))))
    return None


@dataclass(frozen=True)
class Decision:
    """What one observation changes: ports to pause and to resume, and the egress ports that
    became congested (their feeders' pause is the reaction the agent times)."""

    pause: tuple[str, ...] = ()
    resume: tuple[str, ...] = ()
    congested: tuple[str, ...] = ()
    ingress: tuple[str, ...] = ()  # ingress ports whose backlog passed XOFF at this reading


@dataclass
class PauseMachine:
    """The pause state of a fabric: fed backlogs, it says which ports to pause and resume, and
    keeps each paused port's count and paused time. Pure: times are passed in.

    `ingress` (optional): switch ports whose ingress backlog is counted, each mapped to the far
    end its congestion pauses, with their thresholds in `ingress_limits` (`ingress_watch`)."""

    limits: Mapping[str, PortThresholds]
    feeds: Mapping[str, frozenset[str]]
    ingress: Mapping[str, str] = field(default_factory=dict)
    ingress_limits: Mapping[str, PortThresholds] = field(default_factory=dict)
    congested: set[str] = field(default_factory=set)
    ingress_congested: set[str] = field(default_factory=set)
    paused: set[str] = field(default_factory=set)
    records: dict[str, PortRecord] = field(default_factory=dict)
    forced: tuple[ForcedPause, ...] = ()
    # (port, start, end) of every pause since `force`, end None while it lasts; None: not kept
    history: list[list[Any]] | None = None
    _open: dict[str, list[Any]] = field(default_factory=dict)

    def force(self, pauses: Iterable[ForcedPause]) -> None:
        """Hold these ports paused over their windows (replacing any given before) and keep
        every pause's times from now on (`history`, started afresh; an empty list of pauses
        stops keeping it). Takes effect at the next `observe`."""
        self.forced = tuple(pauses)
        self.history = [] if self.forced else None
        self._open = {}
        if self.history is not None:
            for port in sorted(self.paused):
                entry = [port, self.records[port].since, None]
                self.history.append(entry)
                self._open[port] = entry

    def quiet(self, backlogs: Mapping[str, int], ingress: Mapping[str, int] | None = None) -> bool:
        """True when nothing is paused and every watched queue (and counted ingress) is below
        half its XOFF (the agent may poll at its idle interval)."""
        if self.paused or self.congested or self.ingress_congested:
            return False
        return _below_half(backlogs, self.limits) and _below_half(
            ingress or {}, self.ingress_limits
        )

    def observe(
        self, now: float, backlogs: Mapping[str, int], ingress: Mapping[str, int] | None = None
    ) -> Decision:
        """Take every monitored port's backlog in bytes and every counted ingress port's (a
        port missing keeps its state)."""
        became = _crossings(backlogs, self.limits, self.congested)
        entered = _crossings(ingress or {}, self.ingress_limits, self.ingress_congested)
        want = set().union(*(self.feeds.get(p, frozenset()) for p in self.congested))
        want |= {self.ingress[p] for p in self.ingress_congested}
        want |= {f.port for f in self.forced if f.active(now)}
        pause = sorted(want - self.paused)
        resume = sorted(self.paused - want)
        for port in pause:
            record = self.records.setdefault(port, PortRecord())
            record.pauses += 1
            record.since = now
            if self.history is not None:
                entry = [port, now, None]
                self.history.append(entry)
                self._open[port] = entry
        for port in resume:
            self._close(port, now)
        self.paused = want
        return Decision(tuple(pause), tuple(resume), tuple(sorted(became)), tuple(sorted(entered)))

    def _close(self, port: str, now: float) -> None:
        record = self.records[port]
        if record.since is not None:
            record.paused_s += max(0.0, now - record.since)
            record.since = None
        entry = self._open.pop(port, None)
        if entry is not None:
            entry[2] = now

    def release_all(self, now: float) -> tuple[str, ...]:
        """End every pause (the agent stopping); returns the ports to resume."""
        ports = tuple(sorted(self.paused))
        for port in ports:
            self._close(port, now)
        self.paused = set()
        self.congested = set()
        self.ingress_congested = set()
        return ports

    def totals(self, now: float) -> dict[str, tuple[int, float]]:
        """(pauses, paused seconds) per port ever paused, an open pause counted up to `now`."""
        out = {}
        for port, r in sorted(self.records.items()):
            open_s = max(0.0, now - r.since) if r.since is not None else 0.0
            out[port] = (r.pauses, r.paused_s + open_s)
        return out


def _below_half(backlogs: Mapping[str, int], limits: Mapping[str, PortThresholds]) -> bool:
    return all(b < limits[p].xoff * WATCH_FRACTION for p, b in backlogs.items() if p in limits)


def _crossings(
    backlogs: Mapping[str, int], limits: Mapping[str, PortThresholds], congested: set[str]
) -> list[str]:
    """Update `congested` from the backlogs (XOFF enters, XON leaves); the ports that entered."""
    became = []
    for port, backlog in backlogs.items():
        lim = limits.get(port)
        if lim is None:
            continue
        if port not in congested and backlog >= lim.xoff:
            congested.add(port)
            became.append(port)
        elif port in congested and backlog <= lim.xon:
            congested.discard(port)
    return became
