"""SRv6 entropy values: an EV's path written as micro-segments in one IPv6 destination address.

MRC's SRv6 EV format (OCP MRC `mrc_ctl.h`, `MRC_CTL_EV_FMT_MODE_SRV6`; its example profile is a
32-bit locator block then four 16-bit micro-SIDs, an SRH optional) puts the path in the
destination address itself: the block, then one micro-SID (uSID) per hop, zeros after. The
first uSID is the *active segment*; the node it names forwards and shifts the uSIDs left by
16 bits, zeros coming in from the right (the NEXT-CSID flavour of End), so the next node finds
its own uSID first.

Naming here: every switch port that has a link gets one *adjacency SID* ("leave this switch by
this port"), `(switch's place in the fabric + 1) << 8 | port`; every host interface gets a
*host SID* ("deliver here"), `HOST_SID_BASE` + its place among all host interfaces. An EV's
address is `BLOCK:adj1:adj2:...:host::`; after the last switch's shift it is `BLOCK:host::`,
the host's own SRv6 address (`host_address`). So a switch needs one rule per SID of its own
(`sid_rules`: destination prefix `BLOCK:sid::/48` -> shift, out of that port), whatever the
number of hosts, destinations and EVs; today's UDP-port EVs need rules per destination and
per source-port field value (`zcube_lab.controller.rules`, `evpaths`).

The paths are those of the UDP-port EVs (`evpaths.ev_path`): `srv6_ev(fabric, plan, src,
dst_ip, port)` writes the path UDP source port `port` takes, so both formats spray over the same
paths and fail over the same way (a SID names one port; a dead port loses its EVs until the
sender's EV state machine moves off them). Pure: no switch, no socket.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from ipaddress import IPv6Address

from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.evpaths import ev_path

BLOCK = 0xFC00C0BE  # fc00:c0be::/32, a unique-local locator block
BLOCK_BITS = 32
USID_BITS = 16
MAX_USIDS = (128 - BLOCK_BITS) // USID_BITS  # 6 uSIDs fit one address after a 32-bit block
MRC_PROFILE_USIDS = 4  # the spec's example SRv6 format profile: 32-bit block + 4 x 16-bit uSIDs
HOST_SID_BASE = 0xE000
_USID_MASK = (1 << USID_BITS) - 1
_TAIL_BITS = 128 - BLOCK_BITS  # the bits that carry uSIDs


@dataclass(frozen=True)
class SidPlan:
    """The SIDs of a fabric: (switch, port) -> adjacency SID, (host, interface) -> host SID."""

    adjacency: Mapping[tuple[str, int], int]
    hosts: Mapping[tuple[str, int], int]

    def owner(self, sid: int) -> tuple[str, int]:
        """The (switch, port) or (host, interface) that `sid` names."""
        for table in (self.adjacency, self.hosts):
            for where, value in table.items():
                if value == sid:
                    return where
        raise KeyError(f"no node holds SID {sid:#06x}")


def sid_plan(fabric: Fabric) -> SidPlan:
    """Every linked switch port's adjacency SID and every host interface's host SID."""
    adjacency: dict[tuple[str, int], int] = {}
    for place, sw in enumerate(fabric.switches):
        ports = sorted(
            port
            for lk in fabric.links
            for node, port in ((lk.node1, lk.port1), (lk.node2, lk.port2))
            if node == sw.name
        )
        if place + 1 >= HOST_SID_BASE >> 8 or (ports and ports[-1] > 0xFF):
            raise ValueError(f"{sw.name}: more switches or ports than 16-bit adjacency SIDs hold")
        adjacency |= {(sw.name, p): (place + 1) << 8 | p for p in ports}
    interfaces = [(h.name, i.index) for h in fabric.hosts for i in h.interfaces]
    if len(interfaces) > _USID_MASK - HOST_SID_BASE:
        raise ValueError(f"{len(interfaces)} host interfaces: more than host SIDs hold")
    hosts = {where: HOST_SID_BASE + n for n, where in enumerate(interfaces)}
    return SidPlan(adjacency, hosts)


def container(sids: Sequence[int], block: int = BLOCK, max_usids: int = MAX_USIDS) -> IPv6Address:
    """The destination address carrying `sids` in order after `block`: an SRv6 uSID EV."""
    if not 1 <= len(sids) <= min(max_usids, MAX_USIDS):
        raise ValueError(f"{len(sids)} uSIDs: 1..{min(max_usids, MAX_USIDS)} fit")
    bad = [s for s in sids if not 0 < s <= _USID_MASK]
    if bad:
        raise ValueError(f"uSIDs must be 1..{_USID_MASK:#x}, not {bad}")
    tail = 0
    for n, sid in enumerate(sids):
        tail |= sid << (_TAIL_BITS - USID_BITS * (n + 1))
    return IPv6Address(block << _TAIL_BITS | tail)


def usids(address: IPv6Address) -> tuple[int, ...]:
    """The uSIDs an address carries, active first, up to the first zero."""
    out = []
    for n in range(MAX_USIDS):
        sid = int(address) >> (_TAIL_BITS - USID_BITS * (n + 1)) & _USID_MASK
        if sid == 0:
            break
        out.append(sid)
    return tuple(out)


def active_sid(address: IPv6Address) -> int:
    """The active segment: the first uSID after the block (0 if none)."""
    return int(address) >> (_TAIL_BITS - USID_BITS) & _USID_MASK


def shift(address: IPv6Address) -> IPv6Address:
    """What the node of the active uSID does to the address: drop it, the rest move up, zeros
    in (the block stays)."""
    value = int(address)
    block = value >> _TAIL_BITS
    tail = (value << USID_BITS) & ((1 << _TAIL_BITS) - 1)
    return IPv6Address(block << _TAIL_BITS | tail)


def host_address(plan: SidPlan, host: str, index: int, block: int = BLOCK) -> IPv6Address:
    """The SRv6 address host interface (`host`, `index`) owns: where its EVs end."""
    return container([plan.hosts[(host, index)]], block)


def segment_list(
    fabric: Fabric, plan: SidPlan, src: str, dst_ip: str, port: int
) -> tuple[int, ...]:
    """The SIDs of the path UDP source port `port` takes from `src` to `dst_ip` (`ev_path`):
    one adjacency SID per switch crossed, then the destination interface's host SID; () if
    it cannot get there."""
    hops = ev_path(fabric, src, dst_ip, port)
    dst = fabric.interfaces_by_ip.get(dst_ip)
    if not hops or dst is None:
        return ()
    sids = []
    for hop in hops:
        switch, out = hop.rsplit(":", 1)
        sids.append(plan.adjacency[(switch, int(out))])
    return (*sids, plan.hosts[(dst.host, dst.index)])


def srv6_ev(
    fabric: Fabric,
    plan: SidPlan,
    src: str,
    dst_ip: str,
    port: int,
    max_usids: int = MAX_USIDS,
) -> IPv6Address | None:
    """The SRv6 EV (destination address) for the path UDP-port EV `port` names; None if no
    path."""
    sids = segment_list(fabric, plan, src, dst_ip, port)
    return container(sids, max_usids=max_usids) if sids else None


@dataclass(frozen=True)
class SidRule:
    """One switch rule: destination prefix `BLOCK:sid::/48` -> shift the uSIDs, out of `port`."""

    switch: str
    sid: int
    port: int

    def prefix(self, block: int = BLOCK) -> str:
        """The IPv6 prefix this rule matches."""
        return f"{container([self.sid], block)}/{BLOCK_BITS + USID_BITS}"


def sid_rules(fabric: Fabric, plan: SidPlan) -> tuple[SidRule, ...]:
    """Every switch's SID rules: one per adjacency SID it owns (its linked ports)."""
    return tuple(SidRule(sw, sid, port) for (sw, port), sid in plan.adjacency.items())


def forward(
    fabric: Fabric, rules: Iterable[SidRule], src: str, index: int, address: IPv6Address
) -> tuple[tuple[str, ...], str | None, IPv6Address]:
    """Where a packet leaving host interface (`src`, `index`) for `address` goes under `rules`
    alone: the `switch:port` hops, the host it reaches (None if a switch holds no rule for the
    active uSID, or a loop), and the address it arrives with."""
    table = {(r.switch, r.sid): r.port for r in rules}
    first = fabric.attachments.get((src, index))
    if first is None:
        return (), None, address
    node = first.switch
    hops: list[str] = []
    for _ in range(MAX_USIDS + 1):
        out = table.get((node, active_sid(address)))
        if out is None:
            return tuple(hops), None, address
        hops.append(f"{node}:{out}")
        address = shift(address)
        link = fabric.link_at(node, out)
        if link is None:
            return tuple(hops), None, address
        node, _port = link.other(node)
        if not fabric.is_switch(node):
            return tuple(hops), node, address
    return tuple(hops), None, address


def exact_ev_rules(fabric: Fabric, ports: Sequence[int]) -> int:
    """Rules a fabric would need with one exact rule per EV at each switch it crosses (every
    source host, every destination interface address, each of `ports`): what naming a path per
    EV costs when the switch cannot read it from the packet."""
    total = 0
    for h in fabric.hosts:
        for dst in fabric.interfaces_by_ip.values():
            if dst.host == h.name:
                continue
            for port in ports:
                total += len(ev_path(fabric, h.name, dst.ip, port))
    return total
