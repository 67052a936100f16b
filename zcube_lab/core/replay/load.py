"""The datapath load of a replay, and the dilation that keeps it within the datapath's ceiling
(pure; issue 45, the fine time scale's follow-up).

The lab's switches share one userspace datapath (ovs-vswitchd) whose cost is per packet and per
switch: a datagram crossing h switches is read, looked up and sent h times. The per-port wall
budget (`timescale.DEFAULT_WALL_NIC_MBPS`) bounds what one port carries, not what all of them
ask of the datapath together, nor how many switches each packet crosses: a leaf-spine-leaf
path costs 3 packet-hops where ZCube's costs 2, so at the same k a Clos or ROFT replay asks
~1.5 times as much of the datapath.

What a replay asks (`demand`): every transfer at its NICs' line rate, alone, the lower of the
two NICs (real rates; a NIC is the sum of its host's ports), its chain kept, and one transfer
at a time in and out of each NIC (list scheduling: a transfer starts when it is released, its
chain allows it and both its NICs are free). That is the offered load, before PFC pauses it:
its peak is what the datapath must carry when nothing holds the senders back. A transfer's
packet-hops are its datagrams (lab bytes over the datagram payload) times the mean switch
count of its lanes (`lane_hops`: each lane's source port's switch to its destination port's,
on a shortest path, as the controller routes).

The peak is taken over windows of `WINDOW_WALL_S` of wall time (`Demand.peak`: the most
byte-hops in any window of that length), since what the datapath's receive sockets absorb is
set on the wall clock: one port's socket buffer (rmem_default 8 MB, each 1,500-byte datagram
taking ~2.3 KB of it) holds ~0.4 s of its port's 100 Mb/s wall rate when nothing reads it, so
a shorter overload is absorbed and a longer one drops; 0.3 s stays a little under that.
Wall packet-hops per second at dilation k are the modelled rate over k, the window covering
1/k as much modelled time, so the peak only falls as k grows and the smallest k that keeps it
within a share of the ceiling is found by bisection (`fit_dilation`).

`LOAD_SHARE`, the share of the measured ceiling (packets per second through one bridge,
`bench/datapath.py`, which had both cores to itself) a replay may plan for, is chosen from the
§7.4 mix replays at k = 120 (bench/results/replay/mix.json, 27 replays): by this count those
that lost datagrams at the datapath's sockets asked 103-105% of the ceiling (ROFT and Clos
mixed, ROFT's KV alone), those that lost none 58-80% (every EP alone, ZCube's mixed and KV),
and Clos's KV alone 105% without a loss (so the peak does not say all). 70% leaves the agents'
and the lossless agent's CPU room and is what ZCube's mix (lossless) asked. Paced to it
(k = 185, mix-load.json) Clos's mix lost nothing and ROFT's lost far fewer, at its uplink
queues and where no counter saw them rather than at the sockets (docs/results/fine-scale.md).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from zcube_lab.core.clock import MAX_FINE_DILATION
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.replay.recording import Recording, Transfer, order
from zcube_lab.core.replay.timescale import TimeScale

LOAD_SHARE = 0.7
WINDOW_WALL_S = 0.3

Lane = Sequence[str]  # [source address ("" for the host's own choice), destination address]


def lane_hops(fabric: Fabric, src: str, lanes: Iterable[Lane]) -> float:
    """The mean number of switches a datagram of `src`'s lanes crosses: each lane from its
    source port's switch to its destination port's on a shortest path (a lane with no source
    address leaves by the port nearest its destination)."""
    by_ip = fabric.interfaces_by_ip
    counts = []
    for source, dest in lanes:
        far = by_ip[dest]
        b = fabric.attachments[(far.host, far.index)].switch
        near = [by_ip[source]] if source else list(fabric.host(src).interfaces)
        dist = min(
            fabric.switch_distances[fabric.attachments[(i.host, i.index)].switch].get(b, math.inf)
            for i in near
        )
        if dist == math.inf:
            raise ConfigError("lane", (source, dest), f"addresses {src} reaches on {fabric.kind}")
        counts.append(dist + 1)
    if not counts:
        raise ConfigError("lanes", src, "at least one lane")
    return sum(counts) / len(counts)


def nic_gbps(fabric: Fabric, host: str) -> float:
    """A host's NIC rate: the sum of its ports' full-scale rates."""
    return sum(lk.gbps for lk in fabric.links if host in (lk.node1, lk.node2))


@dataclass(frozen=True)
class Span:
    """One transfer in the offered timetable: modelled seconds and real byte-hops."""

    start_s: float
    end_s: float
    byte_hops: float
    transfer: int = -1  # its id in the recording


@dataclass(frozen=True)
class Demand:
    """What a recording asks of the switches over modelled time (see the module docstring)."""

    spans: tuple[Span, ...]

    def byte_hops(self) -> float:
        return sum(s.byte_hops for s in self.spans)

    def mean_hops(self, real_bytes: float) -> float:
        """Switches a byte crosses on average, given the recording's `real_bytes`."""
        return self.byte_hops() / real_bytes if real_bytes else 0.0

    def peak(self, window_s: float) -> float:
        """The most byte-hops per modelled second in any window of `window_s` modelled seconds
        (the rate is piecewise constant, so a window with an edge at a breakpoint holds it)."""
        if not window_s > 0:
            raise ConfigError("window", window_s, "a positive duration")
        steps: dict[float, float] = {}
        for s in self.spans:
            if s.end_s > s.start_s:
                rate = s.byte_hops / (s.end_s - s.start_s)
                steps[s.start_s] = steps.get(s.start_s, 0.0) + rate
                steps[s.end_s] = steps.get(s.end_s, 0.0) - rate
        if not steps:
            return 0.0
        times = sorted(steps)
        # integral F(t) at each breakpoint, and the rate just after it
        cum, rates, total, rate = [], [], 0.0, 0.0
        for i, t in enumerate(times):
            if i:
                total += rate * (t - times[i - 1])
            cum.append(total)
            rate += steps[t]
            rates.append(rate)

        def integral(t: float) -> float:
            i = bisect.bisect_right(times, t) - 1
            if i < 0:
                return 0.0
            return cum[i] + rates[i] * (t - times[i])

        best = 0.0
        for t in times:
            best = max(
                best,
                integral(t + window_s) - integral(t),
                integral(t) - integral(t - window_s),
            )
        return best / window_s


def demand(
    rec: Recording,
    hops: Callable[[str, str], float],
    nic: Callable[[str], float],
) -> Demand:
    """The offered timetable of `rec` (module docstring): `hops(src, dst)` switches a datagram
    crosses, `nic(host)` a host's NIC rate in Gb/s."""
    ts = order(rec.transfers)
    by_id = {t.id: t for t in ts}
    waiting = {t.id: len(t.after) for t in ts}
    after_of: dict[int, list[int]] = {}
    for t in ts:
        for a in t.after:
            after_of.setdefault(a, []).append(t.id)
    ready_at: dict[int, float] = {}
    heap: list[tuple[float, int]] = [(t.start_s, t.id) for t in ts if not t.after]
    heapq.heapify(heap)
    send_free: dict[str, float] = {}
    recv_free: dict[str, float] = {}
    spans: list[Span] = []
    pair_hops: dict[tuple[str, str], float] = {}
    while heap:
        ready, tid = heapq.heappop(heap)
        t: Transfer = by_id[tid]
        begin = max(ready, send_free.get(t.src, 0.0), recv_free.get(t.dst, 0.0))
        end = begin + t.bytes * 8 / (min(nic(t.src), nic(t.dst)) * 1e9)
        send_free[t.src] = recv_free[t.dst] = end
        key = (t.src, t.dst)
        if key not in pair_hops:
            pair_hops[key] = hops(t.src, t.dst)
        spans.append(Span(begin, end, t.bytes * pair_hops[key], tid))
        for nxt in after_of.get(tid, ()):
            ready_at[nxt] = max(ready_at.get(nxt, 0.0), end)
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                n = by_id[nxt]
                heapq.heappush(heap, (max(n.start_s, ready_at[nxt] + n.gap_s), nxt))
    return Demand(tuple(spans))


def fabric_demand(
    rec: Recording, fabric: Fabric, lanes: Callable[[str, str], Iterable[Lane]]
) -> Demand:
    """`demand` on `fabric`, each pair's switch count from its lanes (`lanes(src, dst)`)."""
    return demand(
        rec,
        lambda s, d: lane_hops(fabric, s, lanes(s, d)),
        lambda h: nic_gbps(fabric, h),
    )


@dataclass(frozen=True)
class Load:
    """A replay's datapath load at one dilation: what every result records."""

    peak_pps: float  # packet-hops per wall second, the busiest window
    ceiling_pps: float  # the datapath's measured packets per second through one bridge
    share: float  # the share of the ceiling a replay may plan for
    window_wall_s: float
    mean_hops: float  # switches a datagram crosses on average
    dilation: float

    @property
    def of_ceiling(self) -> float:
        """The peak as a share of the ceiling."""
        return self.peak_pps / self.ceiling_pps

    @property
    def within(self) -> bool:
        return self.peak_pps <= self.share * self.ceiling_pps * (1 + 1e-9)

    def describe(self) -> dict[str, float | bool]:
        return {
            "peak_packet_hops_per_s": round(self.peak_pps),
            "ceiling_pps": round(self.ceiling_pps),
            "share": self.share,
            "of_ceiling": round(self.of_ceiling, 4),
            "within_share": self.within,
            "window_wall_s": self.window_wall_s,
            "mean_hops": round(self.mean_hops, 3),
            "dilation": self.dilation,
        }


def load_at(
    d: Demand,
    ts: TimeScale,
    payload_bytes: int,
    ceiling_pps: float,
    real_bytes: float,
    share: float = LOAD_SHARE,
    window_wall_s: float = WINDOW_WALL_S,
) -> Load:
    """The load of `d` at `ts`'s dilation: the busiest wall window's packet-hops per wall
    second, datagrams of `payload_bytes` lab bytes."""
    clock = ts.clock
    per_modelled_s = d.peak(clock.modelled(window_wall_s)) / ts.bandwidth_scale / payload_bytes
    return Load(
        peak_pps=clock.wall_rate(per_modelled_s),
        ceiling_pps=ceiling_pps,
        share=share,
        window_wall_s=window_wall_s,
        mean_hops=d.mean_hops(real_bytes),
        dilation=ts.dilation,
    )


def fit_dilation(
    d: Demand,
    ts: TimeScale,
    payload_bytes: int,
    ceiling_pps: float,
    real_bytes: float,
    share: float = LOAD_SHARE,
    window_wall_s: float = WINDOW_WALL_S,
    max_dilation: float = MAX_FINE_DILATION,
) -> Load:
    """The load at the smallest whole k, at least `ts`'s own (the per-port budget's), that
    keeps the peak within `share` of the ceiling. Refused (ConfigError) when no k up to
    `max_dilation` does, with the share the largest k would leave."""
    if not 0 < share <= 1:
        raise ConfigError("load share", share, "a share of the ceiling above 0, at most 1")
    if not ceiling_pps > 0:
        raise ConfigError("ceiling", ceiling_pps, "a positive number of packets per second")

    def paced_at(k: float) -> Load:
        return load_at(
            d, ts.at_dilation(k), payload_bytes, ceiling_pps, real_bytes, share, window_wall_s
        )

    low = paced_at(ts.dilation)
    if low.within:
        return low
    top = paced_at(max_dilation)
    if not top.within:
        raise ConfigError(
            "dilation",
            f"{max_dilation:g}",
            f"a replay the datapath carries: even at k={max_dilation:g} its busiest "
            f"{window_wall_s * 1e3:g} ms asks {top.peak_pps:,.0f} packet-hops/s, "
            f"{top.of_ceiling:.0%} of the datapath's {ceiling_pps:,.0f} pps (at most "
            f"{share:.0%}); a coarser --resolution or a shorter window fits",
        )
    lo, hi = int(ts.dilation), int(max_dilation)  # paced_at(lo) is over, paced_at(hi) within
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if paced_at(mid).within:
            hi = mid
        else:
            lo = mid
    return paced_at(float(hi))


@dataclass(frozen=True)
class Pace:
    """The k a replay runs at, why, and each case's load there (`choose`)."""

    dilation: float
    reason: str
    loads: Mapping[str, Load]  # per case (a fabric, or fabric/recording) at `dilation`
    needed: Mapping[str, float]  # the smallest k each case needs (0: none within range)
    port_dilation: float  # the per-port budget's k
    warning: str = ""

    def describe(self) -> dict[str, object]:
        return {
            "dilation": self.dilation,
            "reason": self.reason,
            "port_budget_dilation": self.port_dilation,
            "needed": dict(self.needed),
            "loads": {k: v.describe() for k, v in self.loads.items()},
            **({"warning": self.warning} if self.warning else {}),
        }


def choose(
    demands: Mapping[str, tuple[Demand, float]],
    ts: TimeScale,
    payload_bytes: int,
    ceiling_pps: float,
    explicit: float | None = None,
    share: float = LOAD_SHARE,
    window_wall_s: float = WINDOW_WALL_S,
) -> Pace:
    """One k for every case of `demands` (case -> (demand, its real bytes)), so that compared
    fabrics run at one wall pace: the largest any needs to keep its peak within `share` of the
    ceiling (refused when one needs more than the clock allows), or `explicit` when given,
    with a warning naming each case whose peak it leaves above the share (the replay runs)."""

    def paced_at(d: Demand, rb: float, k: float) -> Load:
        return load_at(d, ts.at_dilation(k), payload_bytes, ceiling_pps, rb, share, window_wall_s)

    needed: dict[str, float] = {}
    for case, (d, rb) in demands.items():
        try:
            fit = fit_dilation(d, ts, payload_bytes, ceiling_pps, rb, share, window_wall_s)
            needed[case] = fit.dilation
        except ConfigError:
            if explicit is None:
                raise
            needed[case] = 0.0
    if explicit is not None:
        k = float(explicit)
        ts.at_dilation(k)  # refused below the per-port k or outside the clock's range
        loads = {c: paced_at(d, rb, k) for c, (d, rb) in demands.items()}
        over = [c for c, ld in loads.items() if not ld.within]
        reason = f"given (--dilation {k:g})"
        warning = ""
        if over:
            worst = max(over, key=lambda c: loads[c].of_ceiling)
            need = max(needed[c] for c in over)
            warning = (
                f"k={k:g} leaves {', '.join(over)} above {share:.0%} of the datapath's "
                f"{ceiling_pps:,.0f} pps ({worst}: {loads[worst].of_ceiling:.0%}); "
                + (f"k={need:g} keeps them within" if need else "no k within range does")
                + ": the datapath may drop datagrams the fabric would not"
            )
        return Pace(k, reason, loads, needed, ts.dilation, warning)
    case = max(needed, key=lambda c: (needed[c], c))
    k = needed[case]
    loads = {c: paced_at(d, rb, k) for c, (d, rb) in demands.items()}
    if k == ts.dilation:
        reason = (
            f"the per-port budget's: every case's busiest {window_wall_s:g} s within "
            f"{share:.0%} of the datapath's {ceiling_pps:,.0f} pps at it"
        )
    else:
        reason = (
            f"the datapath load: {case} needs k={k:g} to keep its busiest {window_wall_s:g} s "
            f"within {share:.0%} of the datapath's {ceiling_pps:,.0f} pps "
            f"({loads[case].mean_hops:.2f} switches a datagram); the per-port budget alone "
            f"gives {ts.dilation:g}; one k for every fabric compared"
        )
    return Pace(k, reason, loads, needed, ts.dilation)
