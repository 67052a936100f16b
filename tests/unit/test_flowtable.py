"""Forwarding through the in-memory flow table: every host pair, every fabric, both policies."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from zcube_lab.controller.flowtable import FabricTable, Trace, egress_interface, ipv4_packet
from zcube_lab.controller.rules import ETH_TYPE_ARP, ROUTING_POLICIES, Output, compute_rules
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import Fabric, FabricSpec, Host, Link

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


@pytest.mark.parametrize("policy", ROUTING_POLICIES)
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
        if policy in ("static", "ff"):
            assert len(trace.paths) == 1, (src.name, ip, trace.paths)


@pytest.mark.parametrize("policy", ROUTING_POLICIES)
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
    t = table(ROFT, "static")
    spines = set()
    for src, dst, _index, ip in sends(t.fabric):
        (path,) = clean(t.send(src.name, ip)).paths
        if src.rail != dst.rail:
            spines.add(path[1])
    assert spines == {"spine0", "spine1"}


def test_egress_interface_is_longest_prefix_match() -> None:
    fabric = build_fabric(ZCUBE4)
    h0 = fabric.host("h0")  # segment 0, rail 0
    assert egress_interface(h0, "198.18.0.2") == 0  # same segment: A[0]
    assert egress_interface(h0, "198.18.128.3") == 1  # same rail: B[0]
    assert egress_interface(h0, "198.18.2.1") == 1  # other segment's port 1: via B
    assert egress_interface(h0, "198.18.131.1") == 0  # other rail's port 2: via A
    with pytest.raises(LookupError):
        egress_interface(h0, "192.168.0.1")


def test_arp_is_dropped_at_the_first_switch() -> None:
    t = table(ROFT, "ecmp")
    trace = t.trace("leaf0", 1, {"eth_type": ETH_TYPE_ARP, "ipv4_dst": "198.18.1.1"})
    assert trace.delivered == frozenset()
    assert trace.dropped == {("leaf0",)}


def test_unknown_destination_hits_the_table_miss() -> None:
    t = table(ROFT, "ecmp")
    trace = t.trace("leaf0", 1, ipv4_packet("198.18.99.9"))
    assert trace.dropped == {("leaf0",)} and not trace.delivered


def test_the_model_reports_a_forwarding_loop() -> None:
    # Hand-broken rules: leaf0 > spine0 > leaf1 > spine1 > leaf0 for one address.
    fabric = build_fabric(ROFT)
    rules = compute_rules(fabric, "static")
    target = "198.18.3.3"  # h14, rank 2: on leaf2, so none of the loop's switches delivers it
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


# -- failed links ------------------------------------------------------------------------------
def link_between(fabric: Fabric, a: str, b: str) -> list[Link]:
    return [lk for lk in fabric.links if {lk.node1, lk.node2} == {a, b}]


def test_output_to_a_down_port_drops() -> None:
    t = table(ZCUBE4, "static")
    ip = t.fabric.host("h5").interfaces[1].ip  # on b1
    assert clean(t.send("h0", ip)).paths == {("a0", "b1")}
    failed = t.with_failed(link_between(t.fabric, "a0", "b1"))
    trace = failed.send("h0", ip)
    assert trace.dropped == {("a0",)} and not trace.delivered
    assert failed.output_ports("a0", ipv4_packet(ip)) == ()
    # Either end listed takes the whole link down.
    (link,) = link_between(t.fabric, "a0", "b1")
    one_end = FabricTable(t.fabric, t.rules, [(link.node2, link.port2)])
    assert one_end.send("h0", ip).dropped == {("a0",)}
    assert not one_end.is_up(link.node1, link.port1)


def test_select_groups_branch_over_live_buckets_only() -> None:
    t = table(ROFT, "ecmp")
    fabric = t.fabric
    packet = ipv4_packet(fabric.host("h1").interfaces[0].ip)  # on leaf1
    uplinks = t.output_ports("leaf0", packet)
    assert len(uplinks) == 4
    spine0 = link_between(fabric, "leaf0", "spine0")
    assert t.with_failed(spine0[:1]).output_ports("leaf0", packet) == uplinks[1:]
    assert t.with_failed(spine0).output_ports("leaf0", packet) == uplinks[2:]
    everything = t.with_failed([*spine0, *link_between(fabric, "leaf0", "spine1")])
    assert everything.output_ports("leaf0", packet) == ()
    assert everything.send("h0", packet["ipv4_dst"]).dropped == {("leaf0",)}


def test_fast_failover_groups_take_the_first_live_bucket() -> None:
    t = table(ZCUBE4, "ff")
    fabric = t.fabric
    packet = ipv4_packet(fabric.host("h5").interfaces[1].ip)  # port 2 of h5, on b1
    assert t.output_ports("a0", packet) == (6,)  # buckets 6 (b1), 5 (b0), 8 (b3)
    down = t.with_failed(link_between(fabric, "a0", "b1"))
    assert down.output_ports("a0", packet) == (5,)
    assert clean(down.send("h0", packet["ipv4_dst"])).paths == {("a0", "b0", "a2", "b1")}
    down = down.with_failed(link_between(fabric, "a0", "b0"))
    assert down.output_ports("a0", packet) == (8,)
    down = down.with_failed(link_between(fabric, "a0", "b3"))
    assert down.output_ports("a0", packet) == ()
    assert down.send("h0", packet["ipv4_dst"]).dropped == {("a0",)}


def test_a_host_link_down_stops_delivery_and_sending() -> None:
    t = table(ZCUBE4, "ecmp")
    fabric = t.fabric
    h5 = fabric.host("h5")
    down = t.with_failed([fabric.link_at("h5", 1)])
    assert down.send("h0", h5.interfaces[1].ip).dropped == {("a0", "b1")}
    assert clean(down.send("h0", h5.interfaces[0].ip)).receivers == {("h5", 0)}
    # h5 (rail 1) sends to h9's port-2 address (rail 1, on b1) through its own, dead, port 2.
    assert egress_interface(h5, fabric.host("h9").interfaces[1].ip) == 1
    trace = down.send("h5", fabric.host("h9").interfaces[1].ip)
    assert trace.dropped == {()} and not trace.delivered
