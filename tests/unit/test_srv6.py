"""SRv6 uSID EVs: the address format, the SIDs of a fabric, forwarding by one rule per SID, and
the rule counts of each EV format."""

from __future__ import annotations

from ipaddress import IPv6Address

import pytest

from zcube_lab.controller.evformats import ev_rule_counts
from zcube_lab.controller.rules import PRIORITY_EV, compute_rules
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.evpaths import ev_path, ev_ports
from zcube_lab.core.fabric.hostplan import egress_interface
from zcube_lab.core.fabric.srv6 import (
    HOST_SID_BASE,
    MAX_USIDS,
    MRC_PROFILE_USIDS,
    SidRule,
    active_sid,
    container,
    exact_ev_rules,
    forward,
    host_address,
    segment_list,
    shift,
    sid_plan,
    sid_rules,
    srv6_ev,
    usids,
)

ROFT2 = build_fabric(FabricSpec.of("roft", planes=2))
CLOS = build_fabric(FabricSpec.of("clos"))
ZCUBE = build_fabric(FabricSpec.of("zcube"))
FABRICS = {"roft2": ROFT2, "clos": CLOS, "zcube": ZCUBE}


def test_a_container_carries_its_usids_after_the_block_and_a_shift_drops_the_first() -> None:
    address = container([0x0201, 0x0102, 0xE001])
    assert address == IPv6Address("fc00:c0be:201:102:e001::")
    assert usids(address) == (0x0201, 0x0102, 0xE001) and active_sid(address) == 0x0201
    once = shift(address)
    assert once == IPv6Address("fc00:c0be:102:e001::") and active_sid(once) == 0x0102
    assert shift(shift(once)) == IPv6Address("fc00:c0be::") and usids(shift(shift(once))) == ()
    full = container(list(range(1, MAX_USIDS + 1)))
    assert usids(full) == tuple(range(1, MAX_USIDS + 1))
    assert usids(shift(full)) == tuple(range(2, MAX_USIDS + 1))


@pytest.mark.parametrize(
    "sids, limit",
    [([], MAX_USIDS), ([1] * (MAX_USIDS + 1), MAX_USIDS), ([0, 1], MAX_USIDS), ([0x10000], 6),
     ([1, 2, 3, 4, 5], MRC_PROFILE_USIDS)],
)  # fmt: skip
def test_a_container_refuses_what_does_not_fit(sids: list[int], limit: int) -> None:
    with pytest.raises(ValueError):
        container(sids, max_usids=limit)


@pytest.mark.parametrize("name", FABRICS)
def test_every_sid_is_distinct_and_names_one_port_or_host_interface(name: str) -> None:
    fabric = FABRICS[name]
    plan = sid_plan(fabric)
    every = [*plan.adjacency.values(), *plan.hosts.values()]
    assert len(every) == len(set(every)) and all(0 < s < 2**16 for s in every)
    assert all(s < HOST_SID_BASE for s in plan.adjacency.values())
    linked = {
        (node, port)
        for lk in fabric.links
        for node, port in ((lk.node1, lk.port1), (lk.node2, lk.port2))
        if fabric.is_switch(node)
    }
    assert set(plan.adjacency) == linked
    assert len(plan.hosts) == sum(len(h.interfaces) for h in fabric.hosts)
    some = next(iter(plan.adjacency.items()))
    assert plan.owner(some[1]) == some[0]
    with pytest.raises(KeyError):
        plan.owner(0)


@pytest.mark.parametrize("name", FABRICS)
def test_one_rule_per_sid_delivers_every_ev_of_every_pair_down_its_udp_port_path(name: str) -> None:
    fabric = FABRICS[name]
    plan = sid_plan(fabric)
    rules = sid_rules(fabric, plan)
    assert len(rules) == len(plan.adjacency)
    for src in fabric.hosts:
        for dst in fabric.interfaces_by_ip.values():
            if dst.host == src.name:
                continue
            index = egress_interface(src, dst.ip)
            assert index is not None
            for port in ev_ports(16):
                address = srv6_ev(fabric, plan, src.name, dst.ip, port, MRC_PROFILE_USIDS)
                assert address is not None
                hops, reached, arrived = forward(fabric, rules, src.name, index, address)
                assert hops == ev_path(fabric, src.name, dst.ip, port)
                assert reached == dst.host
                assert arrived == host_address(plan, dst.host, dst.index)


def test_a_sid_no_switch_holds_goes_nowhere_and_an_unreachable_path_has_no_segments() -> None:
    plan = sid_plan(ROFT2)
    rules = sid_rules(ROFT2, plan)
    hops, reached, _ = forward(ROFT2, rules, "h0", 0, container([0xDEAD, 0xE001]))
    assert hops == () and reached is None
    assert segment_list(ROFT2, plan, "h0", "203.0.113.9", ev_ports(1)[0]) == ()
    assert srv6_ev(ROFT2, plan, "h0", "203.0.113.9", ev_ports(1)[0]) is None
    rule = SidRule("p0leaf0", 0x0103, 3)
    assert rule.prefix() == "fc00:c0be:103::/48"


def test_the_sid_rules_do_not_grow_with_evs_where_the_others_do() -> None:
    few, many = ev_rule_counts(ROFT2, evs=4), ev_rule_counts(ROFT2, evs=64)
    assert few.sid == many.sid == len(sid_plan(ROFT2).adjacency)
    assert many.exact_per_ev == 16 * few.exact_per_ev
    assert exact_ev_rules(ROFT2, ev_ports(4)) == few.exact_per_ev
    installed = compute_rules(ROFT2, "ecmp", ev_rules=True)
    assert few.udp_port == sum(
        f.priority == PRIORITY_EV for r in installed.values() for f in r.flows
    )


@pytest.mark.parametrize(
    "spec, udp_port, sid, exact, longest",
    [
        (FabricSpec.of("zcube"), 384, 64, 13824, 3),
        (FabricSpec.of("roft", planes=2), 512, 96, 19968, 4),
        (FabricSpec.of("roft"), 256, 48, 9984, 4),
        (FabricSpec.of("clos"), 256, 48, 7936, 4),
    ],
)
def test_the_default_fabrics_rule_counts_per_ev_format(
    spec: FabricSpec, udp_port: int, sid: int, exact: int, longest: int
) -> None:
    counts = ev_rule_counts(build_fabric(spec), evs=16)
    assert (counts.udp_port, counts.sid, counts.exact_per_ev) == (udp_port, sid, exact)
    assert counts.longest_segment_list == longest <= MRC_PROFILE_USIDS
