"""Routing around failed links, checked in the in-memory flow table: fast-failover groups that
repair locally, a controller that recomputes, and the static reference that does neither."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from zcube_lab.controller.flowtable import FabricTable, Trace, egress_interface
from zcube_lab.controller.rules import (
    ETH_TYPE_IPV4,
    Bucket,
    DecTtl,
    FlowSpec,
    GroupSpec,
    Output,
    SwitchRules,
    ToGroup,
    align_groups,
    compute_rules,
    diff_rules,
    failed_links,
    flow_key,
    link_states,
    rules_without,
)
from zcube_lab.core.fabric.builders import build_clos, build_fabric, build_roft, build_zcube
from zcube_lab.core.fabric.description import Fabric, FabricSpec, Link
from zcube_lab.core.fabric.evpaths import shortest_next_hops

SPECS = {
    "zcube4": FabricSpec.of("zcube", n=4),
    "zcube3m2": FabricSpec.of("zcube", n=3, m=2),
    "roft": FabricSpec.of("roft"),
    "roft-1link": FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=4),
    "clos": FabricSpec.of("clos"),
}


@pytest.fixture(scope="module", params=sorted(SPECS))
def fabric(request: pytest.FixtureRequest) -> Fabric:
    return build_fabric(SPECS[request.param])


def switch_links(fabric: Fabric) -> list[Link]:
    return [lk for lk in fabric.links if fabric.is_switch(lk.node1) and fabric.is_switch(lk.node2)]


def by_name(rules: dict[int, SwitchRules]) -> dict[str, SwitchRules]:
    return {r.name: r for r in rules.values()}


def ip_action(rules: SwitchRules, ip: str) -> tuple[DecTtl | Output | ToGroup, ...]:
    (flow,) = (f for f in rules.flows if f.match_fields.get("ipv4_dst") == ip)
    return flow.actions


def bucket_ports(rules: SwitchRules, ip: str) -> tuple[int, ...]:
    """The ports a switch may use for `ip`, in bucket order (one for a plain output)."""
    (action,) = (a for a in ip_action(rules, ip) if not isinstance(a, DecTtl))
    if isinstance(action, Output):
        return (action.port,)
    (group,) = (g for g in rules.groups if g.group_id == action.group_id)
    return tuple(b.port for b in group.buckets)


def reachable_sends(table: FabricTable) -> Iterator[tuple[str, str, str, int]]:
    """(src, dst address, dst host, dst interface) for every address still reachable over the
    links that are up from the interface src's routes send it through."""
    fabric = table.fabric
    remaining = fabric.without_links(table.down_links)
    for src in fabric.hosts:
        for dst in fabric.hosts:
            if src is dst:
                continue
            for iface in dst.interfaces:
                first = remaining.attachments.get((src.name, egress_interface(src, iface.ip)))
                last = remaining.attachments.get((dst.name, iface.index))
                if first and last and last.switch in remaining.switch_distances[first.switch]:
                    yield src.name, iface.ip, dst.name, iface.index


def undelivered(table: FabricTable) -> list[tuple[str, str, Trace]]:
    """Every reachable send that is dropped, loops or reaches anything but its interface."""
    bad = []
    for src, ip, dst, index in reachable_sends(table):
        trace = table.send(src, ip)
        if trace.dropped or trace.looped or trace.receivers != {(dst, index)}:
            bad.append((src, ip, trace))
    return bad


# -- fast-failover groups, as data ---------------------------------------------------------
def test_ff_buckets_are_primary_then_other_shortest_then_loop_free_detours() -> None:
    fabric = build_zcube(n=4)
    rules = by_name(compute_rules(fabric, "ff"))
    ip = fabric.host("h5").interfaces[1].ip  # h5: segment 1, rail 1: port 2 on b1, port s+1 = 2
    assert fabric.attachments[("h5", 1)].port == 2
    # a0 (index 0) reaches b1 only directly (port 5 + 1). Detours via b0 (5), b2 (7), b3 (8):
    # b_k's primary towards b1 is a[(2 + k) % 4], so b2 would come back through a0.
    assert bucket_ports(rules["a0"], ip) == (6, 5, 8)
    # b0 (index 0) reaches b1 through any A (ports 5..8 to a0..a3): primary a[(2 + 0) % 4].
    assert bucket_ports(rules["b0"], ip) == (7, 5, 6, 8)
    # b3: primary a[(2 + 3) % 4] = a1.
    assert bucket_ports(rules["b3"], ip) == (6, 5, 7, 8)
    # The attachment switch delivers to the host port.
    assert ip_action(rules["b1"], ip) == (DecTtl(), Output(2))


def test_ff_groups_watch_their_own_ports_and_are_shared(fabric: Fabric) -> None:
    for sw in compute_rules(fabric, "ff").values():
        contents = [g.buckets for g in sw.groups]
        assert len(contents) == len(set(contents)), "one bucket list got two groups"
        assert sorted(g.group_id for g in sw.groups) == list(range(1, len(sw.groups) + 1))
        users: dict[int, int] = {}
        for g in sw.groups:
            assert g.type == "ff"
            assert len(g.buckets) >= 2
            assert all(b.watch_port == b.port for b in g.buckets)
            assert len({b.port for b in g.buckets}) == len(g.buckets)
        for f in sw.flows:
            for a in f.actions:
                if isinstance(a, ToGroup):
                    users[a.group_id] = users.get(a.group_id, 0) + 1
        assert set(users) == sw.group_ids, "a group no flow uses"
    # On ZCube the same bucket list serves several destinations on every switch.
    for sw in compute_rules(build_zcube(n=4), "ff").values():
        targets = [a.group_id for f in sw.flows for a in f.actions if isinstance(a, ToGroup)]
        assert len(set(targets)) < len(targets), sw.name


def test_ff_first_bucket_is_the_primary_and_shortest_ports_come_before_detours(
    fabric: Fabric,
) -> None:
    rules = by_name(compute_rules(fabric, "ff"))
    for (host, index), att in fabric.attachments.items():
        ip = fabric.host(host).interfaces[index].ip
        for sw in fabric.switches:
            if sw.name == att.switch:
                continue
            shortest = shortest_next_hops(fabric, sw.name, att.switch)
            ports = bucket_ports(rules[sw.name], ip)
            assert ports[0] == shortest[(att.port + sw.index) % len(shortest)]
            assert set(ports[: len(shortest)]) == set(shortest)
            dist = fabric.switch_distances[att.switch]
            peers = {
                p: n for n, links in fabric.switch_adjacency[sw.name].items() for p, _ in links
            }
            for port in ports[len(shortest) :]:
                assert dist[peers[port]] >= dist[sw.name], "a detour that is a shortest hop"


def test_a_destination_with_one_possible_bucket_gets_a_plain_output() -> None:
    # ZCube n=2: from a0 to h3's port 2 (on b1, port 2) the only detour, b0, would send it back
    # through a0 (b0's primary is a[(2 + 0) % 2] = a0): one bucket, so a plain output.
    fabric = build_zcube(n=2)
    rules = by_name(compute_rules(fabric, "ff"))
    a0_to_b1 = fabric.switch_adjacency["a0"]["b1"][0][0]
    assert ip_action(rules["a0"], fabric.host("h3").interfaces[1].ip) == (
        DecTtl(),
        Output(a0_to_b1),
    )
    # h1's port 2 (b1, port 1): b0's primary is a1, so b0 is a detour.
    assert ip_action(rules["a0"], fabric.host("h1").interfaces[1].ip) == (DecTtl(), ToGroup(1))


def test_ff_without_failures_takes_one_shortest_path_per_destination(fabric: Fabric) -> None:
    table = FabricTable(fabric, compute_rules(fabric, "ff"))
    for src, ip, dst, index in reachable_sends(table):
        trace = table.send(src, ip)
        assert trace.receivers == {(dst, index)} and not trace.dropped and not trace.looped
        (path,) = trace.paths
        first, last = path[0], path[-1]
        assert len(path) == fabric.switch_distances[first][last] + 1


# -- every single switch-to-switch link failure --------------------------------------------
def test_ff_repairs_every_single_link_failure_locally(fabric: Fabric) -> None:
    table = FabricTable(fabric, compute_rules(fabric, "ff"))
    for link in switch_links(fabric):
        assert undelivered(table.with_failed([link])) == [], link


@pytest.mark.parametrize("policy", ["ecmp", "ff", "static"])
def test_recomputing_repairs_every_single_link_failure(fabric: Fabric, policy: str) -> None:
    for link in switch_links(fabric):
        table = FabricTable(fabric, rules_without(fabric, [link], policy)).with_failed([link])
        assert undelivered(table) == [], (policy, link)


def zcube_a0_b1() -> tuple[Fabric, Link]:
    fabric = build_zcube(n=4)
    (link,) = (lk for lk in fabric.links if {lk.node1, lk.node2} == {"a0", "b1"})
    return fabric, link


@pytest.mark.parametrize("policy", ["ecmp", "static"])
def test_without_recompute_a_zcube_a_b_failure_drops_pairs(policy: str) -> None:
    # ECMP's select group only spreads over shortest next hops: from a0 the only one towards
    # b1 is the failed link, so what a0 sends to b1's addresses is dropped there.
    fabric, link = zcube_a0_b1()
    table = FabricTable(fabric, compute_rules(fabric, policy)).with_failed([link])
    bad = undelivered(table)
    assert bad
    for _src, _ip, trace in bad:
        assert not trace.looped
        assert all(path[-1] in ("a0", "b1") for path in trace.dropped)
    # ... while fast failover and recomputation deliver all of them.
    assert undelivered(FabricTable(fabric, compute_rules(fabric, "ff")).with_failed([link])) == []
    recomputed = FabricTable(fabric, rules_without(fabric, [link], policy)).with_failed([link])
    assert undelivered(recomputed) == []


def test_ecmp_fails_over_locally_among_parallel_equal_cost_links() -> None:
    # ROFT with two links from each leaf to each spine: a select group skips the dead bucket.
    fabric = build_roft()
    assert all(len(links) == 2 for links in fabric.switch_adjacency["spine0"].values())
    table = FabricTable(fabric, compute_rules(fabric, "ecmp"))
    for link in switch_links(fabric):
        assert undelivered(table.with_failed([link])) == [], link


def test_ff_cannot_repair_without_a_loop_free_detour_but_recompute_can() -> None:
    # Two leaves, one link to each spine: if spine0-leaf1 fails, leaf0's primary may still be
    # spine0, and spine0's only other neighbour (leaf0) would send it straight back.
    fabric = build_clos(spines=4, oversubscription=2)
    (link,) = (lk for lk in fabric.links if {lk.node1, lk.node2} == {"spine0", "leaf1"})
    ff = FabricTable(fabric, compute_rules(fabric, "ff")).with_failed([link])
    bad = undelivered(ff)
    assert bad and all(path[-1] == "spine0" for _s, _ip, t in bad for path in t.dropped)
    recomputed = FabricTable(fabric, rules_without(fabric, [link], "ecmp")).with_failed([link])
    assert undelivered(recomputed) == []


# -- link state helpers ---------------------------------------------------------------------
def test_a_link_is_down_when_either_end_is() -> None:
    fabric, link = zcube_a0_b1()
    assert failed_links(fabric, [(link.node1, link.port1)]) == (link,)
    assert failed_links(fabric, [("a0", 999)]) == ()
    states = link_states(fabric, [(link.node2, link.port2)])
    assert states[(link.node1, link.port1)] is False and states[(link.node2, link.port2)] is False
    assert sum(1 for up in states.values() if not up) == 2
    # Every switch port that is a link end, host-facing ones included.
    assert len(states) == sum(
        fabric.is_switch(n) for lk in fabric.links for n in (lk.node1, lk.node2)
    )


def test_fabric_without_links_and_link_at() -> None:
    fabric, link = zcube_a0_b1()
    assert fabric.link_at(link.node1, link.port1) == link
    assert fabric.link_at(link.node2, link.port2) == link
    assert fabric.link_at("h0", 0) == next(lk for lk in fabric.links if lk.node1 == "h0")
    assert fabric.link_at("a0", 999) is None
    less = fabric.without_links([link])
    assert len(less.links) == len(fabric.links) - 1 and link not in less.links
    assert less.hosts == fabric.hosts and less.switches == fabric.switches
    assert less.spec == fabric.spec
    assert "b1" not in less.switch_adjacency["a0"]
    assert less.switch_distances["a0"]["b1"] == 3
    assert fabric.switch_distances["a0"]["b1"] == 1  # the original is untouched
    with pytest.raises(ValueError):
        less.without_links([link])


# -- diffs between rule sets -----------------------------------------------------------------
def ip_flow(ip: str, action: Output | ToGroup) -> FlowSpec:
    return FlowSpec(1000, (("eth_type", ETH_TYPE_IPV4), ("ipv4_dst", ip)), (action,))


def test_diff_of_equal_rules_is_empty() -> None:
    fabric, _link = zcube_a0_b1()
    for sw in compute_rules(fabric, "ecmp").values():
        assert diff_rules(sw, sw).empty


def test_diff_rules_by_flow_key_and_group_id() -> None:
    g1 = GroupSpec(1, "select", (Bucket(5, 1, 5), Bucket(6, 1, 6)))
    g2 = GroupSpec(2, "select", (Bucket(7, 1, 7), Bucket(8, 1, 8)))
    g3 = GroupSpec(3, "ff", (Bucket(7, 1, 7), Bucket(5, 1, 5)))
    old = SwitchRules(
        "s",
        1,
        (
            ip_flow("10.0.0.1", ToGroup(1)),
            ip_flow("10.0.0.2", ToGroup(2)),
            ip_flow("10.0.0.3", Output(3)),
        ),
        (g1, g2),
    )
    g1_changed = GroupSpec(1, "select", (Bucket(6, 1, 6),))
    new = SwitchRules(
        "s",
        1,
        (
            ip_flow("10.0.0.1", ToGroup(1)),
            ip_flow("10.0.0.2", ToGroup(3)),
            ip_flow("10.0.0.4", Output(4)),
        ),
        (g1_changed, g3),
    )
    diff = diff_rules(old, new)
    assert diff.groups_added == (g3,)
    assert diff.groups_modified == (g1_changed,)
    assert diff.flows_added == (ip_flow("10.0.0.2", ToGroup(3)), ip_flow("10.0.0.4", Output(4)))
    assert diff.flows_deleted == (ip_flow("10.0.0.3", Output(3)),)
    assert diff.groups_deleted == (g2,)
    assert (diff.flows_changed, diff.groups_changed) == (3, 3)
    assert not diff.empty


def test_align_groups_modifies_in_place_when_every_old_user_follows() -> None:
    fabric, link = zcube_a0_b1()
    old = by_name(compute_rules(fabric, "ecmp"))
    new = by_name(rules_without(fabric, [link], "ecmp"))
    # a0: the group over b0..b3 becomes b0, b2, b3, and b1's addresses join it.
    a0 = align_groups(old["a0"], new["a0"])
    diff = diff_rules(old["a0"], a0)
    assert diff.groups_modified == (
        GroupSpec(1, "select", tuple(Bucket(p, 1, p) for p in (5, 7, 8))),
    )
    assert diff.groups_added == diff.groups_deleted == diff.flows_deleted == ()
    on_b1 = {
        i.ip
        for h in fabric.hosts
        for i in h.interfaces
        if fabric.attachments[(h.name, i.index)].switch == "b1"
    }
    assert {f.match_fields["ipv4_dst"] for f in diff.flows_added} == on_b1
    assert all(f.actions == (ToGroup(1),) for f in diff.flows_added)
    # b0: the old group is still right for b2 and b3, so b1's addresses get a new one.
    b0 = align_groups(old["b0"], new["b0"])
    diff = diff_rules(old["b0"], b0)
    assert diff.groups_modified == diff.groups_deleted == ()
    assert [g.group_id for g in diff.groups_added] == [2]
    assert {f.actions for f in diff.flows_added} == {(ToGroup(2),)}


def test_align_groups_never_reuses_an_old_id_for_other_buckets() -> None:
    g_old = GroupSpec(1, "select", (Bucket(5, 1, 5), Bucket(6, 1, 6)))
    old = SwitchRules(
        "s", 1, (ip_flow("10.0.0.1", ToGroup(1)), ip_flow("10.0.0.2", ToGroup(1))), (g_old,)
    )
    # The new group serves only one of the old group's users: modifying group 1 would show
    # 10.0.0.2 the wrong buckets until its flow changed.
    g_new = GroupSpec(1, "select", (Bucket(7, 1, 7), Bucket(8, 1, 8)))
    new = SwitchRules(
        "s", 1, (ip_flow("10.0.0.1", ToGroup(1)), ip_flow("10.0.0.2", Output(5))), (g_new,)
    )
    aligned = align_groups(old, new)
    assert aligned.groups == (GroupSpec(2, "select", g_new.buckets),)
    assert aligned.flows[0].actions == (ToGroup(2),)
    diff = diff_rules(old, aligned)
    assert diff.groups_added == aligned.groups and diff.groups_deleted == (g_old,)


def test_aligned_rules_forward_like_the_recomputed_ones() -> None:
    fabric, link = zcube_a0_b1()
    for policy in ("ecmp", "ff"):
        old = compute_rules(fabric, policy)
        new = rules_without(fabric, [link], policy)
        aligned = {dpid: align_groups(old[dpid], new[dpid]) for dpid in new}
        table = FabricTable(fabric, aligned).with_failed([link])
        assert undelivered(table) == []
        # Back up: the diff returns each switch to rules equivalent to the intact ones.
        back = {dpid: align_groups(aligned[dpid], old[dpid]) for dpid in old}
        for dpid, sw in back.items():
            assert {flow_key(f) for f in sw.flows} == {flow_key(f) for f in old[dpid].flows}
        assert undelivered(FabricTable(fabric, back)) == []


def test_ff_flows_decrement_the_ttl_so_multiple_failures_cannot_loop_forever() -> None:
    # Detours are loop-free for one failed link; a switch failure (every link of a0 at once)
    # can send packets for the switch's own hosts around detours. The TTL ends such a loop.
    fabric = build_fabric(FabricSpec.of("zcube", n=4))
    rules = compute_rules(fabric, "ff")
    for r in rules.values():
        for f in r.flows:
            if f.match_fields.get("eth_type") == ETH_TYPE_IPV4:
                assert isinstance(f.actions[0], DecTtl), f
    table = FabricTable(fabric, rules).with_failed(
        [lk for lk in fabric.links if "a0" in (lk.node1, lk.node2)]
    )
    looped = [
        (src.name, ip)
        for src in fabric.hosts
        for ip in ("198.18.0.1", "198.18.128.1")
        if src.name != "h0" and table.send(src.name, ip).looped
    ]
    assert looped  # what the TTL is there for: h0's port 1 is gone with a0
    for policy in ("ecmp", "static"):
        for r in compute_rules(fabric, policy).values():
            assert not any(isinstance(a, DecTtl) for f in r.flows for a in f.actions)
