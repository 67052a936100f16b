"""Forwarding through the in-memory flow table: every host pair, every fabric, both policies."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from controller.flowtable import FabricTable, Trace, egress_interface, ipv4_packet
from controller.rules import ETH_TYPE_ARP, POLICIES, Output, compute_rules
from emulator.builders import build_fabric
from emulator.fabric import Fabric, FabricSpec, Host

ZCUBE4 = FabricSpec.of("zcube", n=4)
ZCUBE8 = FabricSpec.of("zcube", n=8)
ROFT = FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2)
CLOS = FabricSpec.of("clos")


def table(spec: FabricSpec, policy: str) -> FabricTable:
    fabric = build_fabric(spec)
    return FabricTable(fabric, compute_rules(fabric, policy))


def sends(fabric: Fabric) -> Iterator[tuple[Host, Host, int, str]]:
    """(src, dst, dst interface, dst address) for every ordered host pair and dst address."""
    for src in fabric.hosts:
        for dst in fabric.hosts:
            if src is not dst:
                for iface in dst.interfaces:
                    yield src, dst, iface.index, iface.ip


def clean(trace: Trace) -> Trace:
    assert not trace.dropped, f"dropped on {sorted(trace.dropped)}"
    assert not trace.looped, f"looped on {sorted(trace.looped)}"
    return trace


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("spec", [ZCUBE4, ZCUBE8, ROFT, CLOS], ids=lambda s: s.to_json())
def test_every_pair_is_delivered_to_the_addressed_interface_on_a_shortest_path(
    spec: FabricSpec, policy: str
) -> None:
    t = table(spec, policy)
    fabric = t.fabric
    for src, dst, index, ip in sends(fabric):
        trace = clean(t.send(src.name, ip))
        assert trace.receivers == {(dst.name, index)}, (src.name, ip)
        first = fabric.attachments[(src.name, egress_interface(src, ip))].switch
        last = fabric.attachments[(dst.name, index)].switch
        for path in trace.paths:
            assert path[0] == first and path[-1] == last
            assert len(path) == fabric.switch_distances[first][last] + 1
        if policy == "single":
            assert len(trace.paths) == 1, (src.name, ip, trace.paths)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("spec", [ZCUBE4, ZCUBE8], ids=["n4", "n8"])
def test_zcube_addresses_choose_the_shortest_paths(spec: FabricSpec, policy: str) -> None:
    t = table(spec, policy)
    fabric = t.fabric
    n = dict(spec.params)["n"]
    for src in fabric.hosts:
        s1, r1 = divmod(src.gid, n)
        for dst in fabric.hosts:
            if src is dst:
                continue
            s2, r2 = divmod(dst.gid, n)
            routed = {}
            for iface in dst.interfaces:
                (path,) = clean(t.send(src.name, iface.ip)).paths
                routed[iface.index] = path
            best = min(len(p) for p in routed.values())
            assert best == fabric.host_hops(src.name, dst.name)
            shortest = {
                (p.dst_interface, p.switches) for p in fabric.shortest_paths(src.name, dst.name)
            }
            assert {(i, p) for i, p in routed.items() if len(p) == best} == shortest
            if s1 != s2 and r1 != r2:
                # The two link-disjoint 2-hop paths, one per destination address.
                assert routed == {0: (f"b{r1}", f"a{s2}"), 1: (f"a{s1}", f"b{r2}")}
            elif s1 == s2:
                assert routed[0] == (f"a{s1}",)
            else:
                assert routed[1] == (f"b{r1}",)


def test_roft_ecmp_offers_both_spines_across_rails_and_one_hop_within() -> None:
    t = table(ROFT, "ecmp")
    for src, dst, _index, ip in sends(t.fabric):
        paths = clean(t.send(src.name, ip)).paths
        if src.rail == dst.rail:
            assert paths == {(f"leaf{src.rail}",)}
        else:
            assert {p[1] for p in paths} == {"spine0", "spine1"}
            assert all(len(p) == 3 for p in paths)


def test_roft_single_uses_one_spine_per_destination_but_both_overall() -> None:
    t = table(ROFT, "single")
    spines = set()
    for src, dst, _index, ip in sends(t.fabric):
        (path,) = clean(t.send(src.name, ip)).paths
        if src.rail != dst.rail:
            spines.add(path[1])
    assert spines == {"spine0", "spine1"}


def test_egress_interface_is_longest_prefix_match() -> None:
    fabric = build_fabric(ZCUBE4)
    h0 = fabric.host("h0")  # segment 0, rail 0
    assert egress_interface(h0, "10.1.0.2") == 0  # same segment: A[0]
    assert egress_interface(h0, "10.2.0.3") == 1  # same rail: B[0]
    assert egress_interface(h0, "10.1.2.1") == 1  # other segment's port 1: via B
    assert egress_interface(h0, "10.2.3.1") == 0  # other rail's port 2: via A
    with pytest.raises(LookupError):
        egress_interface(h0, "192.168.0.1")


def test_arp_is_dropped_at_the_first_switch() -> None:
    t = table(ROFT, "ecmp")
    trace = t.trace("leaf0", 1, {"eth_type": ETH_TYPE_ARP, "ipv4_dst": "10.0.1.1"})
    assert trace.delivered == frozenset()
    assert trace.dropped == {("leaf0",)}


def test_unknown_destination_hits_the_table_miss() -> None:
    t = table(ROFT, "ecmp")
    trace = t.trace("leaf0", 1, ipv4_packet("10.9.9.9"))
    assert trace.dropped == {("leaf0",)} and not trace.delivered


def test_the_model_reports_a_forwarding_loop() -> None:
    # Hand-broken rules: leaf0 > spine0 > leaf1 > spine1 > leaf0 for one address.
    fabric = build_fabric(ROFT)
    rules = compute_rules(fabric, "single")
    target = "10.0.3.3"  # h14, rank 2: on leaf2, so none of the loop's switches delivers it
    adj = fabric.switch_adjacency
    hops = {
        "leaf0": adj["leaf0"]["spine0"][0][0],
        "spine0": adj["spine0"]["leaf1"][0][0],
        "leaf1": adj["leaf1"]["spine1"][0][0],
        "spine1": adj["spine1"]["leaf0"][0][0],
    }
    for dpid, sw in rules.items():
        if sw.name in hops:
            flows = tuple(
                dataclasses.replace(f, actions=(Output(hops[sw.name]),))
                if f.match_fields.get("ipv4_dst") == target
                else f
                for f in sw.flows
            )
            rules[dpid] = dataclasses.replace(sw, flows=flows)
    trace = FabricTable(fabric, rules).trace("leaf0", 1, ipv4_packet(target))
    assert trace.delivered == frozenset()
    assert trace.looped == {("leaf0", "spine0", "leaf1", "spine1", "leaf0")}
