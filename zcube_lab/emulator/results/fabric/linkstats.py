"""Link statistics, the one home for them (pure): per switch port and per link direction, the
mean utilization over the run window and the peak over one scrape interval, one naming of
links, and the ranking that names the run's busiest link.

Inputs are the switch ports' counters (`SwitchPortTraffic`, read from Prometheus by
`zcube_lab.emulator.prometheus.queries.port_counters`) and the fabric description; outputs are the
link sections of `RunSummary` (`zcube_lab.emulator.results.run.summary`): `Utilization` (switch
ports by transmit counter, the hottest ports), `LinkLoad` per direction, and `DirectedUtilization`
(the busiest link, the highest peak, host up- and downlinks).

Naming: a direction is named from the end it leaves to the end it enters, a switch end as
`switch:port` and a host end by the host's name: `a0:3->h5`, `h5->a0:3`, `a0:6->b1:5`. A switch
port's transmit counter is the direction away from the switch, and the receive counter of a
host's switch port is the host's transmit direction; switch-to-switch links are counted by both
ends' transmit counters. Utilization is against the link's emulated rate (`Scale.link_mbps`).

The busiest link (`busiest`) is the direction with the highest mean utilization over the run
window, ties broken by the higher peak. The summary names it (`DirectedUtilization.busiest_link`)
and the health verdict refers to the same link (`verdict_busiest_link`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.core.stats import mean
from zcube_lab.emulator.results.run.summary import (
    DirectedUtilization,
    HotPort,
    LinkLoad,
    Utilization,
)
from zcube_lab.emulator.verdict.judge import BusiestLink

PortKey = tuple[str, int]


@dataclass(frozen=True)
class SwitchPortTraffic:
    """Every switch port's traffic over the run window: bytes per port, the peak rates (bytes/s
    over one scrape interval, `peak_window_s`), the packets every port dropped, and the byte
    counters' samples (for the load KV pulls met as they ran, `transfers.kv_seen_busy`)."""

    tx_bytes: dict[PortKey, float]
    rx_bytes: dict[PortKey, float]
    drops: float
    tx_peak_bytes_per_s: dict[PortKey, float] = field(default_factory=dict)
    rx_peak_bytes_per_s: dict[PortKey, float] = field(default_factory=dict)
    peak_window_s: float | None = None
    # the byte counters' raw (time, value) samples, by direction ("tx", "rx") and port
    samples: dict[str, dict[PortKey, list[tuple[float, float]]]] = field(default_factory=dict)


def port_capacity_bps(fabric: Fabric, scale: Scale) -> dict[tuple[str, int], float]:
    """Emulated capacity in bit/s of every switch port, keyed by (switch, port)."""
    caps: dict[tuple[str, int], float] = {}
    for lk in fabric.links:
        bps = scale.link_mbps(fabric, lk.gbps) * 1e6
        for node, port in ((lk.node1, lk.port1), (lk.node2, lk.port2)):
            if fabric.is_switch(node):
                caps[(node, port)] = bps
    return caps


def link_utilization(
    fabric: Fabric,
    scale: Scale,
    tx_bytes: Mapping[tuple[str, int], float],
    window_s: float,
) -> dict[tuple[str, int], float]:
    """Fraction of capacity each switch port transmitted over the window."""
    caps = port_capacity_bps(fabric, scale)
    return {
        key: (tx_bytes.get(key, 0.0) * 8 / window_s) / cap
        for key, cap in caps.items()
        if window_s > 0
    }


def utilization_summary(util: Mapping[tuple[str, int], float], fabric: Fabric) -> Utilization:
    """Max and mean utilization, over all switch ports and over switch-to-switch ports, and the
    hottest ports."""
    trunk_ports = {
        (node, port)
        for lk in fabric.links
        if fabric.is_switch(lk.node1) and fabric.is_switch(lk.node2)
        for node, port in ((lk.node1, lk.port1), (lk.node2, lk.port2))
    }
    trunk = {k: v for k, v in util.items() if k in trunk_ports}
    hottest = sorted(util.items(), key=lambda kv: kv[1], reverse=True)[:5]
    return Utilization(
        link_util_max=max(util.values(), default=0.0),
        link_util_mean=mean(util.values()) or 0.0,
        trunk_util_max=max(trunk.values(), default=0.0),
        trunk_util_mean=mean(trunk.values()) or 0.0,
        hottest_ports=tuple(HotPort(switch=k[0], port=k[1], util=v) for k, v in hottest),
    )


# --- links by direction ----------------------------------------------------------------------
# Peaks are over windows of one scrape interval (1 s by default): the finest the counters allow.
Direction = tuple[str, str, str, tuple[str, int], float]  # name, kind, counter, port, bit/s


def _end(fabric: Fabric, node: str, port: int) -> str:
    return f"{node}:{port}" if fabric.is_switch(node) else node


def link_directions(fabric: Fabric, scale: Scale) -> list[Direction]:
    """Every link in both directions: (name, kind, counter, switch port, capacity in bit/s),
    where kind is `up` (host -> switch), `down` (switch -> host) or `trunk`, and counter is
    the switch port's `tx` or `rx` counter that carries it."""
    out: list[Direction] = []
    for lk in fabric.links:
        bps = scale.link_mbps(fabric, lk.gbps) * 1e6
        for a, pa, b, pb in ((lk.node1, lk.port1, lk.node2, lk.port2),
                             (lk.node2, lk.port2, lk.node1, lk.port1)):  # fmt: skip
            name = f"{_end(fabric, a, pa)}->{_end(fabric, b, pb)}"
            if fabric.is_switch(a):
                kind = "trunk" if fabric.is_switch(b) else "down"
                out.append((name, kind, "tx", (a, pa), bps))
            elif fabric.is_switch(b):
                out.append((name, "up", "rx", (b, pb), bps))
    return out


def window_rates(samples: Sequence[tuple[float, float]]) -> list[float]:
    """A counter's rate (per s) over each interval between consecutive (time, value) samples.

    The controller polls the switches on its own clock, so a scrape can see a counter that has
    not moved yet and the next one two polls' worth: an interval without change between two
    with change is merged with the next, which would otherwise show a doubled peak. A counter
    that went back (a reset) gives no rate for that interval."""
    pairs = [(t2 - t1, v2 - v1) for (t1, v1), (t2, v2) in pairwise(samples)]
    pairs = [(dt, dv) for dt, dv in pairs if dt > 0]
    rates: list[float] = []
    i = 0
    while i < len(pairs):
        dt, dv = pairs[i]
        stale = dv == 0 and 0 < i < len(pairs) - 1 and pairs[i - 1][1] > 0 and pairs[i + 1][1] > 0
        if stale:
            dt, dv = dt + pairs[i + 1][0], pairs[i + 1][1]
            i += 1
        if dv >= 0:
            rates.append(dv / dt)
        i += 1
    return rates


def peak_rate(samples: Sequence[tuple[float, float]]) -> float | None:
    """The highest of `window_rates`; None with fewer than two samples."""
    return max(window_rates(samples), default=None)


def link_loads(
    fabric: Fabric, scale: Scale, ports: SwitchPortTraffic, window_s: float
) -> dict[str, LinkLoad]:
    """Mean and peak utilization of every link in both directions, by link name."""
    out: dict[str, LinkLoad] = {}
    for name, _, counter, key, bps in link_directions(fabric, scale):
        total = (ports.tx_bytes if counter == "tx" else ports.rx_bytes).get(key, 0.0)
        peak = (ports.tx_peak_bytes_per_s if counter == "tx" else ports.rx_peak_bytes_per_s).get(
            key
        )
        out[name] = LinkLoad(
            mean=total * 8 / window_s / bps if window_s > 0 else 0.0,
            peak=peak * 8 / bps if peak is not None else None,
        )
    return out


def busiest(links: Mapping[str, LinkLoad]) -> tuple[str, LinkLoad] | None:
    """The busiest link and its load: the highest mean utilization, ties broken by the higher
    peak (the first such link in `links`' order); None without links."""
    return max(links.items(), key=lambda kv: (kv[1].mean, kv[1].peak or 0.0), default=None)


def verdict_busiest_link(
    fabric: Fabric, scale: Scale, links: Mapping[str, LinkLoad]
) -> BusiestLink | None:
    """The summary's busiest link (`busiest`) as the health verdict records it, with the link's
    emulated rate; None without links."""
    top = busiest(links)
    if top is None:
        return None
    name, load = top
    rates = {n: bps / 1e6 for n, _kind, _counter, _port, bps in link_directions(fabric, scale)}
    rate = rates[name]
    return BusiestLink(
        iface=name,
        rate_mbps=rate,
        peak_mbps=None if load.peak is None else load.peak * rate,
        peak_share=load.peak,
        mean_share=load.mean,
    )


def directed_utilization(
    fabric: Fabric, links: Mapping[str, LinkLoad], peak_window_s: float | None = None
) -> DirectedUtilization:
    """The busiest link (by mean, then peak), the link with the highest peak, and the busiest
    host -> switch and switch -> host directions."""
    kinds = {name: kind for name, kind, *_ in link_directions(fabric, Scale())}  # rate unused
    top_mean = busiest(links)
    peaked = [(n, v.peak) for n, v in links.items() if v.peak is not None]
    top = max(peaked, key=lambda kv: kv[1], default=None)

    def most(kind: str) -> float | None:
        return max((v.mean for n, v in links.items() if kinds.get(n) == kind), default=None)

    return DirectedUtilization(
        busiest_link=top_mean[0] if top_mean else None,
        busiest_link_util_mean=top_mean[1].mean if top_mean else None,
        busiest_link_util_peak=top_mean[1].peak if top_mean else None,
        peak_link=top[0] if top else None,
        peak_link_util=top[1] if top else None,
        host_uplink_util_max=most("up"),
        host_downlink_util_max=most("down"),
        directed_links=len(links),
        util_peak_window_s=peak_window_s,
    )
