"""Entropy values that name their paths: which bits of a UDP source port pick which next hop.

The lab's stand-in for MRC's SRv6 micro-segments (static lookups, no hashing): with EV rules
installed (`zcube_lab.controller.rules.compute_rules(..., ev_rules=True)`), a switch forwarding a
UDP packet towards a destination over `k` > 1 equal-cost next hops (the ports of
`shortest_next_hops`, in port order) takes port number `ev_choice(source port, distance, k)`,
where `distance` is the switch's hop distance to the destination's attachment switch. Each
distance reads its own `EV_BITS`-bit field of the source port (distance 1: bits 0-2, distance
2: bits 3-5, ...), so one source port fixes the whole path, and the sender, knowing the fabric,
knows it (`ev_path`). A switch with one next hop (or the destination's own switch) needs no EV
rule; more than `2**EV_BITS` next hops use the first `2**EV_BITS`.

`ev_ports(count)` gives source ports whose fields cycle fast at every distance, so the first
few EVs already cover every next hop at each level (distance 1 and 2 together: `(a, a + b)`).
Pure: no switch, no socket.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.scale import Scale

EV_BITS = 3
EV_LEVELS = 4  # distances 1..4 have their own field; farther ones reuse them cyclically
EV_BASE = 0xE000  # 57344: the first EV source port (its low 13 bits are zero)
MAX_EVS = 128
EV_SPAN = 1 << (EV_BITS * EV_LEVELS + 1)  # ev_ports(MAX_EVS) lies in [base, base + EV_SPAN)


def field_shift(distance: int) -> int:
    """Bit position of the field a switch at `distance` (>= 1) reads."""
    if distance < 1:
        raise ValueError(f"distance must be >= 1, not {distance}")
    return EV_BITS * ((distance - 1) % EV_LEVELS)


def choice_bits(k: int) -> int:
    """Bits of the field a choice among `k` next hops matches: the fewest that tell them apart
    (a power of two uses each value once; others repeat values, as `value % k`)."""
    return min(EV_BITS, max(1, (k - 1).bit_length()))


def ev_choice(port: int, distance: int, k: int) -> int:
    """Index of the next hop, among `k`, a switch at `distance` sends source port `port` to."""
    bits = choice_bits(k)
    return ((port >> field_shift(distance)) & ((1 << bits) - 1)) % k


def ev_ports(count: int, base: int = EV_BASE) -> list[int]:
    """`count` (1..MAX_EVS) EV source ports from `base`: EV i has field (a + L*b) mod 8 at
    level L, with a = i mod 8 and b = (i div 8) mod 8, and i div 64 in bit 12."""
    if not 1 <= count <= MAX_EVS:
        raise ValueError(f"count must be 1..{MAX_EVS}, not {count}")
    out = []
    for i in range(count):
        a, b, c = i % 8, (i // 8) % 8, i // 64
        port = base + (c << (EV_BITS * EV_LEVELS))
        for level in range(EV_LEVELS):
            port += ((a + level * b) % 8) << (EV_BITS * level)
        out.append(port)
    return out


def shortest_next_hops(fabric: Fabric, switch: str, target: str) -> tuple[int, ...]:
    """Local ports of `switch` on a shortest switch path to `target` (all parallel links, in
    port order): the equal-cost set that ECMP hashes over and EV rules choose from."""
    to_target = fabric.switch_distances[target]
    here = to_target.get(switch)
    if here is None or here == 0:
        return ()
    ports: list[int] = []
    for neighbour, links in fabric.switch_adjacency[switch].items():
        if to_target.get(neighbour) == here - 1:
            ports.extend(local for local, _far in links)
    return tuple(sorted(ports))


def ev_path(fabric: Fabric, src: str, dst_ip: str, port: int) -> tuple[str, ...]:
    """The hops a UDP packet from host `src` to `dst_ip` with source port `port` takes under
    EV rules (leaving `src` by its own route to `dst_ip`), each `switch:out port`, so parallel
    links count as different paths; () if it cannot get there."""
    from zcube_lab.core.fabric.hostplan import egress_interface

    iface = egress_interface(fabric.host(src), dst_ip)
    dst = fabric.interfaces_by_ip.get(dst_ip)
    if iface is None or dst is None:
        return ()
    here = fabric.attachments.get((src, iface))
    target = fabric.attachments.get((dst.host, dst.index))
    if here is None or target is None:
        return ()
    peers = {(lk.node1, lk.port1): lk.node2 for lk in fabric.links}
    peers |= {(lk.node2, lk.port2): lk.node1 for lk in fabric.links}
    hops: list[str] = []
    node = here.switch
    while node != target.switch:
        ports = shortest_next_hops(fabric, node, target.switch)
        if not ports:
            return ()
        distance = fabric.switch_distances[target.switch][node]
        out = ports[ev_choice(port, distance, len(ports))]
        hops.append(f"{node}:{out}")
        node = peers[(node, out)]
    hops.append(f"{node}:{target.port}")
    return tuple(hops)


def ev_paths(
    fabric: Fabric, src: str, dst_ip: str, ports: Iterable[int]
) -> dict[int, tuple[str, ...]]:
    """EV source port -> the switches it takes from `src` to `dst_ip`."""
    return {p: ev_path(fabric, src, dst_ip, p) for p in ports}


def distinct_paths(paths: Sequence[tuple[str, ...]]) -> int:
    """How many different paths (non-empty) a set of EVs takes."""
    return len({p for p in paths if p})


# An mrc leg is paced a little under its NIC port's shaped rate, so the sender's own port queue
# stays short and the fabric's queues, not the sender's, are what a leg meets.
MRC_PACE_SHARE = 0.95


def mrc_leg_mbps(fabric: Fabric, scale: Scale, hosts: Iterable[str]) -> float:
    """The pacing rate of one mrc leg between `hosts`, Mb/s: `MRC_PACE_SHARE` of the slowest
    shaped NIC port of any of them (every leg uses one port at each end)."""
    rates = [
        scale.link_mbps(fabric, link.gbps)
        for h in hosts
        for iface in fabric.host(h).interfaces
        if (link := fabric.link_at(h, iface.index)) is not None
    ]
    if not rates:
        raise ValueError(f"no linked NIC port on {list(hosts)}")
    return MRC_PACE_SHARE * min(rates)


def mrc_delay_bound_s(
    fabric: Fabric,
    scale: Scale,
    mtu: int,
    queue_packets: Mapping[str, int],
    host: str,
    *,
    lossless: bool = False,
) -> float:
    """Modelled seconds a datagram into `host` may wait in its path's switch queues without
    being dropped (the mrc sender's delay bound: past it, a datagram nothing overtook is lost):
    the switch egress ports of the longest shortest path from any host, each counted as the
    fullest port of the fabric drained at its rate. Lossy, a full port holds its queue limit
    (`queue_packets`, by interface name); under the lossless model a paused port holds its
    whole FIFO (XOFF plus headroom, `lossless.port_thresholds`), all of which drains before
    a datagram behind it moves."""
    from zcube_lab.core.fabric.lossless import port_thresholds

    shaped = {}
    modelled = {}
    for lk in fabric.links:
        for node, port in ((lk.node1, lk.port1), (lk.node2, lk.port2)):
            shaped[f"{node}-eth{port}"] = scale.link_mbps(fabric, lk.gbps)
            modelled[f"{node}-eth{port}"] = scale.modelled_mbps(fabric, lk.gbps)
    if lossless:
        held = {p: t.limit for p, t in port_thresholds(fabric, queue_packets, shaped, mtu).items()}
    else:
        held = {p: n * mtu for p, n in queue_packets.items() if fabric.is_switch(p.split("-")[0])}
    if not held:
        return 0.0
    drain = max(held[p] * 8 / (modelled[p] * 1e6) for p in held)
    targets = {fabric.attachments[(host, i.index)].switch for i in fabric.host(host).interfaces}
    hops = 0
    for t in targets:
        reach = fabric.switch_distances[t]
        for h in fabric.hosts:
            for i in h.interfaces:
                first = fabric.attachments.get((h.name, i.index))
                if first is not None and first.switch in reach:
                    hops = max(hops, reach[first.switch] + 1)
    return hops * drain
