"""Turning a run's raw records into the figures users compare (pure).

Inputs are plain data: the client's per-request records (`requests.jsonl` written by the load
generator), per-port byte counts over the run window, and the fabric description. Outputs are
the sections of `RunSummary` (`emulator.results.summary`) that `compare` compares.

Links by direction: a switch port's transmit counter is the direction away from the switch
(`a0:3->h5`, `a0:6->b1:5`), and the receive counter of a host's switch port is the host's
transmit direction (`h5->a0:3`); switch-to-switch links are counted by both ends' transmit
counters. Utilization is against the link's emulated rate (`Scale.link_mbps`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emulator.results.goodput import arrived_in_window
from emulator.results.summary import (
    QUANTILES,
    ClientFigures,
    DirectedUtilization,
    FabricStats,
    HotPort,
    LinkLoad,
    Utilization,
)
from zcube_lab.fabric.description import Fabric
from zcube_lab.fabric.scale import Scale
from zcube_lab.stats import mean, quantile

if TYPE_CHECKING:
    from emulator.prometheus.queries import PortCounters


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file; none if it is missing, and a line that does not parse
    (one being written at that moment) is skipped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _ok(record: Mapping[str, Any]) -> bool:
    return record.get("outcome") == "ok"


def client_summary(records: Iterable[Mapping[str, Any]], window_s: float) -> ClientFigures:
    """Throughput and latency quantiles from the client's per-request records; the throughput
    counts the completed requests that arrived in the window (`goodput.arrived_in_window`)."""
    recs = list(records)
    ok = [r for r in recs if _ok(r)]
    counted = arrived_in_window(ok, window_s)
    ttft = [float(r["ttft_s"]) for r in ok if r.get("ttft_s") is not None]
    tpot = [float(r["tpot_s"]) for r in ok if r.get("tpot_s") is not None]
    e2e = [float(r["e2e_s"]) for r in ok if r.get("e2e_s") is not None]
    itl = [float(g) for r in ok for g in r.get("itl_s") or ()]
    tokens = sum(int(r.get("output_tokens") or 0) for r in ok)
    counted_tokens = sum(int(r.get("output_tokens") or 0) for r in counted)
    out: dict[str, Any] = {
        "requests": len(recs),
        "completed": len(ok),
        "failed": len(recs) - len(ok),
        "requests_per_s": len(counted) / window_s if window_s > 0 else None,
        "output_tokens_per_s": counted_tokens / window_s if window_s > 0 else None,
        "output_tokens": tokens,
    }
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2e", e2e)):
        for q in QUANTILES:
            out[f"{name}_p{q}_s"] = quantile(values, q / 100)
        out[f"{name}_mean_s"] = mean(values)
    return ClientFigures(**out)


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


def host_ingress_bytes(fabric: Fabric, rx_bytes: Mapping[tuple[str, int], float]) -> float:
    """Bytes that entered the fabric from GPU hosts: the switch rx counters of host ports."""
    total = 0.0
    for att in fabric.attachments.values():
        total += rx_bytes.get((att.switch, att.port), 0.0)
    return total


def fabric_stats(
    fabric: Fabric,
    util: Mapping[tuple[str, int], float],
    rx_bytes: Mapping[tuple[str, int], float],
    drops: float,
    server_reported_bytes: float,
    links: Mapping[str, LinkLoad] | None = None,
    peak_window_s: float | None = None,
) -> FabricStats:
    """Utilization, drops, and the bytes that entered the fabric from GPU hosts against what
    the servers say they sent (the fabric also carries headers, ACKs and KV framing); with
    `links` (`link_loads`), the busiest link in either direction too, its peak over windows of
    `peak_window_s`."""
    ingress = host_ingress_bytes(fabric, rx_bytes)
    sent = server_reported_bytes
    return FabricStats(
        utilization=utilization_summary(util, fabric),
        drops=drops,
        host_ingress_bytes=ingress,
        server_reported_bytes=sent,
        overhead_ratio=ingress / sent if sent else None,
        switches=len(fabric.switches),
        switching_capacity_gbps=fabric.switching_capacity_gbps(),
        directed=(
            directed_utilization(fabric, links, peak_window_s) if links is not None else None
        ),
    )


def throughput_series(
    records: Iterable[Mapping[str, Any]], bin_s: float = 5.0
) -> list[tuple[float, float]]:
    """Completed requests/s in bins of `bin_s` seconds, by completion time since the load
    generator's start."""
    done: dict[int, int] = {}
    for r in records:
        if _ok(r) and r.get("e2e_s") is not None:
            b = int((float(r["sent_s"]) + float(r["e2e_s"])) // bin_s)
            done[b] = done.get(b, 0) + 1
    if not done:
        return []
    return [(b * bin_s, done.get(b, 0) / bin_s) for b in range(max(done) + 1)]


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
    fabric: Fabric, scale: Scale, ports: PortCounters, window_s: float
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


def directed_utilization(
    fabric: Fabric, links: Mapping[str, LinkLoad], peak_window_s: float | None = None
) -> DirectedUtilization:
    """The busiest link (by mean, then peak), the link with the highest peak, and the busiest
    host -> switch and switch -> host directions."""
    kinds = {name: kind for name, kind, *_ in link_directions(fabric, Scale())}  # rate unused
    busiest = max(links.items(), key=lambda kv: (kv[1].mean, kv[1].peak or 0.0), default=None)
    peaked = [(n, v.peak) for n, v in links.items() if v.peak is not None]
    top = max(peaked, key=lambda kv: kv[1], default=None)

    def most(kind: str) -> float | None:
        return max((v.mean for n, v in links.items() if kinds.get(n) == kind), default=None)

    return DirectedUtilization(
        busiest_link=busiest[0] if busiest else None,
        busiest_link_util_mean=busiest[1].mean if busiest else None,
        busiest_link_util_peak=busiest[1].peak if busiest else None,
        peak_link=top[0] if top else None,
        peak_link_util=top[1] if top else None,
        host_uplink_util_max=most("up"),
        host_downlink_util_max=most("down"),
        directed_links=len(links),
        util_peak_window_s=peak_window_s,
    )
