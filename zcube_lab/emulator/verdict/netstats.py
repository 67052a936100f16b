"""Network counters of the lab, read as text and turned into per-window events (pure).

Where a packet can be lost or delayed inside the emulator, and the counter that sees it:
- a host's TCP stack (its own network namespace): `Tcp:` RetransSegs and OutSegs of
  `/proc/<pid>/net/snmp`, `TcpExt:` TCPTimeouts, TCPSynRetrans, TCPLostRetransmit and
  TCPFastRetrans of `/proc/<pid>/net/netstat` (`parse_tcp_counters`). Read from the root
  namespace through any process of the namespace (a Mininet host's shell): no process spawn.
  Since Linux 5.1 TCPTimeouts counts every retransmission-timer expiry, SYN and SYN-ACK ones
  included, so one lost SYN reads as 1 timeout and 1 SYN retransmit.
- a shaped interface's queueing discipline: `tc -s -j qdisc show` (`parse_qdiscs`); per
  interface the root qdisc counts (the kernel adds its children's drops and backlog to it).
- an interface itself: tx/rx dropped of `/proc/<pid>/net/dev` (`parse_net_dev`); a veth counts a
  packet its peer's per-CPU input queue refused as a tx drop.
- the per-CPU input queue: the `dropped` column of `/proc/net/softnet_stat` (`parse_softnet`,
  hex columns, one line per CPU).

`NetReading` is everything read at one instant; `window_events` compares consecutive readings
and returns `NetEvent`s (something counted in a window: timeouts on a host, drops on an
interface, a link sending above its shaping rate, or holding a backlog while sending well
under it); `totals` gives the run's figures from the first and last reading. Nothing here reads
/proc, spawns tc or reads the clock: `zcube_lab.emulator.lab.netsampler` does, and
`zcube_lab.emulator.verdict.network` judges the events.

Names: a host by its fabric name (`h3`), an interface by its device name (`s1-eth2`, `h3-eth0`),
a CPU as `cpu<N>`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.linkplan import port_rates
from zcube_lab.core.fabric.scale import Scale

# Our name -> (section, counter) in /proc/net/snmp (Tcp:) or /proc/net/netstat (TcpExt:).
TCP_COUNTERS: Mapping[str, tuple[str, str]] = {
    "out_segs": ("Tcp", "OutSegs"),
    "retrans_segs": ("Tcp", "RetransSegs"),
    "timeouts": ("TcpExt", "TCPTimeouts"),
    "syn_retrans": ("TcpExt", "TCPSynRetrans"),
    "lost_retrans": ("TcpExt", "TCPLostRetransmit"),
    "fast_retrans": ("TcpExt", "TCPFastRetrans"),
}
# Event quantities, as `NetEvent.quantity` names them.
TIMEOUTS = "timeouts"
SYN_RETRANS = "syn_retrans"
QDISC_DROPS = "qdisc_drops"
DEV_DROPS = "dev_drops"
SOFTNET_DROPS = "softnet_drops"
OVER_RATE = "over_rate"
STALLED = "stalled_backlog"


@dataclass(frozen=True)
class TcpCounters:
    """Cumulative TCP counters of one network namespace (or a difference of two readings)."""

    out_segs: int = 0
    retrans_segs: int = 0
    timeouts: int = 0
    syn_retrans: int = 0
    lost_retrans: int = 0
    fast_retrans: int = 0

    def minus(self, earlier: TcpCounters) -> TcpCounters:
        """What was counted since `earlier` (never negative)."""
        return TcpCounters(
            **{
                f.name: max(0, getattr(self, f.name) - getattr(earlier, f.name))
                for f in fields(self)
            }
        )


def parse_proc_table(text: str) -> dict[str, dict[str, int]]:
    """/proc/net/snmp or /proc/net/netstat: pairs of lines `Section: names...` and
    `Section: values...`, as {section: {name: value}}."""
    out: dict[str, dict[str, int]] = {}
    lines = [line.split() for line in text.splitlines() if line.strip()]
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if not names or names[0] != values[0] or len(names) != len(values):
            raise ValueError(f"/proc table lines do not pair up: {names[:1]} / {values[:1]}")
        out[names[0].rstrip(":")] = {n: int(v) for n, v in zip(names[1:], values[1:], strict=True)}
    return out


def parse_tcp_counters(netstat: str, snmp: str) -> TcpCounters:
    """The TCP counters we judge from a namespace's /proc/net/netstat and /proc/net/snmp text
    (a counter this kernel lacks reads as 0)."""
    tables = {**parse_proc_table(snmp), **parse_proc_table(netstat)}
    return TcpCounters(
        **{name: tables.get(sec, {}).get(key, 0) for name, (sec, key) in TCP_COUNTERS.items()}
    )


@dataclass(frozen=True)
class QdiscStats:
    """One qdisc of `tc -s -j qdisc show`: where it sits and its counters."""

    dev: str
    kind: str
    handle: str
    parent: str  # "root" for a root qdisc
    bytes: int = 0
    packets: int = 0
    drops: int = 0
    overlimits: int = 0
    requeues: int = 0
    backlog_bytes: int = 0
    backlog_packets: int = 0

    @property
    def key(self) -> str:
        """`dev/handle`: unique per qdisc."""
        return f"{self.dev}/{self.handle}"


def parse_qdiscs(text: str) -> tuple[QdiscStats, ...]:
    """Every qdisc in the JSON that `tc -s -j qdisc show` prints."""
    data = json.loads(text or "[]")
    if not isinstance(data, list):
        raise ValueError("tc -j qdisc show prints a JSON list")
    return tuple(
        QdiscStats(
            dev=str(q["dev"]),
            kind=str(q.get("kind", "")),
            handle=str(q.get("handle", "")),
            parent="root" if q.get("root") else str(q.get("parent", "")),
            bytes=int(q.get("bytes", 0)),
            packets=int(q.get("packets", 0)),
            drops=int(q.get("drops", 0)),
            overlimits=int(q.get("overlimits", 0)),
            requeues=int(q.get("requeues", 0)),
            backlog_bytes=int(q.get("backlog", 0)),
            backlog_packets=int(q.get("qlen", 0)),
        )
        for q in data
    )


def root_qdiscs(qdiscs: Iterable[QdiscStats]) -> dict[str, QdiscStats]:
    """The root qdisc of each interface that has a queue (not `noqueue`), by device: it counts
    its children's drops and backlog too, so it stands for the whole interface."""
    return {q.dev: q for q in qdiscs if q.parent == "root" and q.kind != "noqueue"}


@dataclass(frozen=True)
class DevCounters:
    """An interface's counters from /proc/net/dev."""

    rx_bytes: int = 0
    rx_packets: int = 0
    rx_dropped: int = 0
    tx_bytes: int = 0
    tx_packets: int = 0
    tx_dropped: int = 0


def parse_net_dev(text: str) -> dict[str, DevCounters]:
    """/proc/net/dev (two header lines, then `name: 8 receive and 8 transmit columns`)."""
    out: dict[str, DevCounters] = {}
    for line in text.splitlines()[2:]:
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        v = [int(x) for x in rest.split()]
        if len(v) < 16:
            raise ValueError(f"/proc/net/dev line has {len(v)} columns, not 16: {line!r}")
        out[name.strip()] = DevCounters(v[0], v[1], v[3], v[8], v[9], v[11])
    return out


def parse_softnet(text: str) -> dict[str, int]:
    """Packets each CPU's input queue dropped (column 2 of /proc/net/softnet_stat, hex), by
    `cpu<N>`; the CPU is column 13 on kernels that print it, else the line number."""
    out: dict[str, int] = {}
    for i, line in enumerate(text.splitlines()):
        cols = line.split()
        if len(cols) < 2:
            continue
        cpu = int(cols[12], 16) if len(cols) >= 13 else i
        out[f"cpu{cpu}"] = int(cols[1], 16)
    return out


def shaped_rates(fabric: Fabric, scale: Scale) -> dict[str, float]:
    """Every shaped interface (both ends of every link: `<node>-eth<port>`) and its rate in
    Mb/s, as the lab configures it (`linkplan.port_rates`)."""
    return port_rates(fabric, scale)


@dataclass(frozen=True)
class NetReading:
    """Counters read at one instant, bracketed by the clock before (`t0`) and after (`t1`)
    the reads. A part not read this time is empty (hosts' qdiscs are read less often)."""

    t0: float
    t1: float
    tcp: Mapping[str, TcpCounters] = field(default_factory=dict)  # host -> counters
    qdiscs: Mapping[str, QdiscStats] = field(default_factory=dict)  # device -> root qdisc
    devs: Mapping[str, DevCounters] = field(default_factory=dict)  # device -> counters
    softnet: Mapping[str, int] = field(default_factory=dict)  # cpu -> dropped


@dataclass(frozen=True)
class NetEvent:
    """Something counted between two readings (`t0`..`t1`, the sampler's clock): `count` of
    `quantity` at `where` (a host, an interface or a CPU); `detail` holds figures for the
    rate events (achieved and configured Mb/s, backlog bytes)."""

    t0: float
    t1: float
    where: str
    quantity: str
    count: int
    detail: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RateLimits:
    """When a shaped link's achieved rate is suspect: above `over` x its rate in a window, or
    below `under` x its rate in a window it was provably backlogged throughout."""

    over: float = 1.05
    under: float = 0.5


PARTS = ("tcp", "qdiscs", "devs", "softnet")


@dataclass
class _QueueRun:
    """One shaped interface's running figures (what `queue_figures` reports)."""

    first: QdiscStats | None = None
    last: tuple[NetReading, QdiscStats] | None = None
    peak_bytes: int = 0
    peak_packets: int = 0
    peak_mbps: float | None = None
    first_dev: DevCounters | None = None
    last_dev: DevCounters | None = None


class NetTally:
    """The run's network figures from readings given one at a time (`add`, in time order):
    the events of `window_events`, the totals of `tcp_totals` and `softnet_totals`, the
    figures of `queue_figures`. It holds the first value and the last reading of each key,
    one running record per shaped interface and the events, never the readings, so a sampler
    that feeds it keeps the same memory for a run of any length (the events aside: one per
    window in which something was counted)."""

    def __init__(self, rates_mbps: Mapping[str, float], limits: RateLimits | None = None) -> None:
        self.rates_mbps = dict(rates_mbps)
        self.limits = limits or RateLimits()
        self.events: list[NetEvent] = []
        self.readings = 0
        self._first: dict[tuple[str, str], Any] = {}
        self._last: dict[tuple[str, str], tuple[NetReading, Any]] = {}
        self._queues: dict[str, _QueueRun] = {}

    def add(self, cur: NetReading) -> None:
        """One more reading: each key is compared with the last reading that had it."""
        self.readings += 1
        for part in PARTS:
            for key, now in getattr(cur, part).items():
                was = self._last.get((part, key))
                if was is None:
                    self._first[(part, key)] = now
                else:
                    self.events += _events(part, key, was, (cur, now), self.rates_mbps, self.limits)
                self._last[(part, key)] = (cur, now)
                if part in ("qdiscs", "devs") and key in self.rates_mbps:
                    self._queue(part, key, cur, now)

    def _queue(self, part: str, dev: str, cur: NetReading, now: Any) -> None:
        run = self._queues.setdefault(dev, _QueueRun())
        if part == "devs":
            if run.first_dev is None:
                run.first_dev = now
            run.last_dev = now
            return
        if run.last is None:
            run.first = now
        else:
            ra, a = run.last
            if cur.t1 > ra.t0:
                mbps = (now.bytes - a.bytes) * 8 / (cur.t1 - ra.t0) / 1e6
                if run.peak_mbps is None or mbps > run.peak_mbps:
                    run.peak_mbps = mbps
        run.last = (cur, now)
        run.peak_bytes = max(run.peak_bytes, now.backlog_bytes)
        run.peak_packets = max(run.peak_packets, now.backlog_packets)

    def totals(self, part: str) -> dict[str, tuple[Any, Any]]:
        """Each key of `part` ("tcp", "softnet", ...): its first and last value, by key."""
        keys = sorted(k for p, k in self._last if p == part)
        return {k: (self._first[(part, k)], self._last[(part, k)][1]) for k in keys}

    def tcp(self) -> dict[str, TcpCounters]:
        """Per host: its counters at its last reading minus its first."""
        return {h: last.minus(first) for h, (first, last) in self.totals("tcp").items()}

    def softnet(self) -> dict[str, int]:
        """Per CPU: input-queue drops between its first and last reading."""
        return {c: max(0, last - first) for c, (first, last) in self.totals("softnet").items()}

    def queues(self) -> dict[str, QueueFigures]:
        """Per shaped interface (those with a rate) that was read."""
        out: dict[str, QueueFigures] = {}
        for dev in sorted(self._queues):
            run, rate = self._queues[dev], self.rates_mbps[dev]
            out[dev] = QueueFigures(
                rate_mbps=rate,
                drops=run.last[1].drops - run.first.drops
                if run.last is not None and run.first is not None
                else 0,
                peak_backlog_bytes=run.peak_bytes,
                peak_backlog_packets=run.peak_packets,
                peak_delay_ms=run.peak_bytes * 8 / (rate * 1e3) if rate > 0 else None,
                peak_mbps=run.peak_mbps,
                dev_drops=_drops(run.last_dev) - _drops(run.first_dev)
                if run.last_dev is not None and run.first_dev is not None
                else 0,
            )
        return out


def tally(
    readings: Iterable[NetReading],
    rates_mbps: Mapping[str, float],
    limits: RateLimits | None = None,
) -> NetTally:
    """A `NetTally` of all `readings`."""
    t = NetTally(rates_mbps, limits)
    for r in readings:
        t.add(r)
    return t


def window_events(
    readings: Iterable[NetReading],
    rates_mbps: Mapping[str, float],
    limits: RateLimits | None = None,
) -> list[NetEvent]:
    """Every event between consecutive readings of each host, interface and CPU. Readings come
    in time order; each may hold any parts and keys (the root namespace and each host are
    read separately), and a key is compared with the last reading that had it."""
    return tally(readings, rates_mbps, limits).events


def _events(
    part: str,
    key: str,
    before: tuple[NetReading, Any],
    after: tuple[NetReading, Any],
    rates_mbps: Mapping[str, float],
    limits: RateLimits,
) -> list[NetEvent]:
    (prev, was), (cur, now) = before, after
    t0, t1 = prev.t1, cur.t0

    def counted(quantity: str, n: int) -> list[NetEvent]:
        return [NetEvent(t0, t1, key, quantity, n)] if n > 0 else []

    if part == "tcp":
        d = now.minus(was)
        return counted(TIMEOUTS, d.timeouts) + counted(SYN_RETRANS, d.syn_retrans)
    if part == "softnet":
        return counted(SOFTNET_DROPS, now - was)
    if key not in rates_mbps:  # an interface the lab does not shape (eth0, lo, management)
        return []
    if part == "devs":
        return counted(DEV_DROPS, _drops(now) - _drops(was))
    return counted(QDISC_DROPS, now.drops - was.drops) + _rate_events(
        before, after, rates_mbps[key], limits
    )


def _rate_events(
    before: tuple[NetReading, QdiscStats],
    after: tuple[NetReading, QdiscStats],
    rate: float,
    limits: RateLimits,
) -> list[NetEvent]:
    (prev, was), (cur, now) = before, after
    sent = now.bytes - was.bytes
    # The dump happened somewhere inside [t0, t1] of each reading: the widest possible
    # window gives the lowest possible rate, the narrowest the highest.
    widest, narrowest = cur.t1 - prev.t0, cur.t0 - prev.t1
    if rate <= 0 or sent < 0 or widest <= 0:
        return []
    out = []
    low = sent * 8 / widest / 1e6
    detail = {"rate_mbps": rate, "window_s": widest, "backlog_bytes": was.backlog_bytes}
    if low > limits.over * rate:
        out.append(NetEvent(prev.t1, cur.t0, now.dev, OVER_RATE, 1, {**detail, "mbps": low}))
    # FIFO: if it sent fewer bytes than it held at the start, it never ran empty, so it
    # should have sent at its full rate all along.
    high = sent * 8 / narrowest / 1e6 if narrowest > 0 else math.inf
    if sent < was.backlog_bytes and now.backlog_packets > 0 and high < limits.under * rate:
        out.append(NetEvent(prev.t1, cur.t0, now.dev, STALLED, 1, {**detail, "mbps": high}))
    return out


@dataclass(frozen=True)
class QueueFigures:
    """One shaped interface over a run: configured rate, qdisc drops, the deepest backlog seen,
    its queueing delay at the configured rate, the highest achieved rate in a sampled window,
    and the interface's own drops."""

    rate_mbps: float | None = None
    drops: int = 0
    peak_backlog_bytes: int = 0
    peak_backlog_packets: int = 0
    peak_delay_ms: float | None = None
    peak_mbps: float | None = None
    dev_drops: int = 0


def queue_figures(
    readings: Iterable[NetReading], rates_mbps: Mapping[str, float]
) -> dict[str, QueueFigures]:
    """Per shaped interface (those with a rate) over all readings."""
    return tally(readings, rates_mbps).queues()


def _drops(c: DevCounters) -> int:
    return c.tx_dropped + c.rx_dropped


def tcp_totals(readings: Iterable[NetReading]) -> dict[str, TcpCounters]:
    """Per host: its counters at its last reading minus its first."""
    return tally(readings, {}).tcp()


def softnet_totals(readings: Iterable[NetReading]) -> dict[str, int]:
    """Per CPU: input-queue drops between its first and last reading."""
    return tally(readings, {}).softnet()
