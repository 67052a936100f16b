"""compute_rules: the per-switch flows and groups, checked as data (no switch)."""

from __future__ import annotations

import pytest

from zcube_lab.controller.ofctl import (
    dump_lines,
    flow_line,
    flow_lines,
    group_line,
    group_lines,
    line_differences,
)
from zcube_lab.controller.rules import (
    COOKIE,
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    ETH_TYPE_IPV6,
    PRIORITY_TABLE_MISS,
    ROUTING_POLICIES,
    Bucket,
    DecTtl,
    FlowSpec,
    GroupSpec,
    Output,
    ToGroup,
    check_policy,
    compute_rules,
    match,
    rule_counts,
)
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import Fabric, FabricSpec

SPECS = {
    "zcube4": FabricSpec.of("zcube", n=4),
    "zcube4m2": FabricSpec.of("zcube", n=4, m=2),
    "roft": FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2),
    "clos": FabricSpec.of("clos"),
}


@pytest.fixture(scope="module", params=sorted(SPECS))
def fabric(request: pytest.FixtureRequest) -> Fabric:
    return build_fabric(SPECS[request.param])


def ipv4_flows(flows: tuple[FlowSpec, ...]) -> dict[str, FlowSpec]:
    out = {}
    for f in flows:
        fields = f.match_fields
        if fields.get("eth_type") == ETH_TYPE_IPV4:
            assert fields["ipv4_dst"] not in out, "two flows for one destination"
            out[str(fields["ipv4_dst"])] = f
    return out


def test_unknown_policy_names_the_allowed_ones(fabric: Fabric) -> None:
    with pytest.raises(ConfigError) as err:
        compute_rules(fabric, "spray")
    assert err.value.field == "policy"
    assert err.value.value == "spray"
    for policy in ROUTING_POLICIES:
        assert policy in str(err.value)


@pytest.mark.parametrize("policy", ROUTING_POLICIES)
def test_every_switch_has_drops_and_one_flow_per_address(fabric: Fabric, policy: str) -> None:
    rules = compute_rules(fabric, policy)
    assert set(rules) == {s.dpid for s in fabric.switches}
    addresses = set(fabric.interfaces_by_ip)
    for dpid, sw in rules.items():
        assert fabric.switch(sw.name).dpid == dpid
        by_match = {f.match: f for f in sw.flows}
        assert by_match[match(eth_type=ETH_TYPE_ARP)].actions == ()
        assert by_match[match(eth_type=ETH_TYPE_IPV6)].actions == ()
        assert by_match[()] == FlowSpec(PRIORITY_TABLE_MISS, (), ())
        assert set(ipv4_flows(sw.flows)) == addresses
        assert len(sw.flows) == len(addresses) + 3


@pytest.mark.parametrize("policy", ROUTING_POLICIES)
def test_attachment_switch_delivers_to_the_host_port(fabric: Fabric, policy: str) -> None:
    rules = {r.name: r for r in compute_rules(fabric, policy).values()}
    for (host, index), att in fabric.attachments.items():
        ip = fabric.host(host).interfaces[index].ip
        actions = ipv4_flows(rules[att.switch].flows)[ip].actions
        # ff flows first decrement the TTL (a bound on loops under several failures).
        assert actions == ((DecTtl(), Output(att.port)) if policy == "ff" else (Output(att.port),))


def test_ecmp_groups_are_shared_select_groups_with_live_buckets(fabric: Fabric) -> None:
    for sw in compute_rules(fabric, "ecmp").values():
        port_sets = [tuple(b.port for b in g.buckets) for g in sw.groups]
        assert len(port_sets) == len(set(port_sets)), "a port set got two groups"
        assert sorted(g.group_id for g in sw.groups) == list(range(1, len(sw.groups) + 1))
        used = set()
        for g in sw.groups:
            assert g.type == "select"
            assert len(g.buckets) >= 2
            assert all(b.watch_port == b.port and b.weight == 1 for b in g.buckets)
        for f in sw.flows:
            for a in f.actions:
                if isinstance(a, ToGroup):
                    assert a.group_id in sw.group_ids
                    used.add(a.group_id)
        assert used == sw.group_ids, "a group no flow uses"


def test_policies_include_the_static_reference_and_fast_failover() -> None:
    assert set(ROUTING_POLICIES) == {"ecmp", "static", "ff"}


def test_single_is_the_earlier_name_of_static(fabric: Fabric) -> None:
    assert check_policy("single") == "static"
    assert compute_rules(fabric, "single") == compute_rules(fabric, "static")


def test_single_has_no_groups_and_one_output_per_flow(fabric: Fabric) -> None:
    for sw in compute_rules(fabric, "static").values():
        assert sw.groups == ()
        for f in sw.flows:
            assert len(f.actions) <= 1
            assert all(isinstance(a, Output) for a in f.actions)


def test_roft_leaf_spreads_cross_rail_traffic_over_every_uplink() -> None:
    fabric = build_fabric(SPECS["roft"])
    leaf0 = compute_rules(fabric, "ecmp")[fabric.switch("leaf0").dpid]
    uplinks = tuple(
        p for nbr in ("spine0", "spine1") for p, _ in fabric.switch_adjacency["leaf0"][nbr]
    )
    assert len(uplinks) == 4  # 4 servers per leaf at 1:1 over 2 spines: 2 parallel links each
    (group,) = leaf0.groups
    assert group == GroupSpec(1, "select", tuple(Bucket(p, 1, p) for p in sorted(uplinks)))
    other_rail = fabric.host("h1").interfaces[0].ip  # server 0, rank 1: on leaf1
    assert ipv4_flows(leaf0.flows)[other_rail].actions == (ToGroup(1),)


def test_single_spreads_destinations_of_one_leaf_over_both_spines() -> None:
    fabric = build_fabric(SPECS["roft"])
    leaf0 = compute_rules(fabric, "static")[fabric.switch("leaf0").dpid]
    port_to_spine = {
        p: nbr for nbr, links in fabric.switch_adjacency["leaf0"].items() for p, _ in links
    }
    flows = ipv4_flows(leaf0.flows)
    on_leaf1 = [h.interfaces[0].ip for h in fabric.hosts if h.rank == 1]
    spines = {port_to_spine[flows[ip].actions[0].port] for ip in on_leaf1}
    assert spines == {"spine0", "spine1"}


@pytest.mark.parametrize("policy", ROUTING_POLICIES)
def test_rules_are_deterministic(fabric: Fabric, policy: str) -> None:
    assert compute_rules(fabric, policy) == compute_rules(fabric, policy)


def test_rule_counts_per_switch() -> None:
    fabric = build_fabric(SPECS["zcube4"])
    counts = rule_counts(compute_rules(fabric, "ecmp"))
    # 32 addresses + ARP, IPv6, table miss; one select group over the four far-side switches.
    assert counts == {s.name: (35, 1) for s in fabric.switches}


def test_ofctl_text_matches_what_ovs_prints() -> None:
    # Strings as Open vSwitch 3.1 `ovs-ofctl -O OpenFlow13 --no-stats dump-flows` printed them.
    ip_flow = FlowSpec(1000, match(eth_type=ETH_TYPE_IPV4, ipv4_dst="10.0.0.1"), (ToGroup(1),))
    assert flow_line(ip_flow) == "cookie=0x2c0be, priority=1000,ip,nw_dst=10.0.0.1 actions=group:1"
    assert flow_line(FlowSpec(0, (), ())) == "cookie=0x2c0be, priority=0 actions=drop"
    arp = FlowSpec(2000, match(eth_type=ETH_TYPE_ARP), ())
    assert flow_line(arp) == "cookie=0x2c0be, priority=2000,arp actions=drop"
    group = GroupSpec(1, "select", (Bucket(5, 1, 5), Bucket(6, 1, 6)))
    assert group_line(group) == (
        "group_id=1,type=select,bucket=watch_port:5,actions=output:5,"
        "bucket=watch_port:6,actions=output:6"
    )
    ff = GroupSpec(2, "ff", (Bucket(6, 1, 6), Bucket(5, 1, 5)))
    assert group_line(ff) == (
        "group_id=2,type=fast_failover,bucket=watch_port:6,actions=output:6,"
        "bucket=watch_port:5,actions=output:5"
    )
    assert COOKIE == 0x2C0BE


def test_dump_lines_drops_headers_and_sorts() -> None:
    dump = (
        "OFPST_GROUP_DESC reply (OF1.3) (xid=0x2):\n"
        " group_id=2,type=select,bucket=watch_port:1,actions=output:1\n"
        " group_id=1,type=select,bucket=watch_port:5,actions=output:5\n"
    )
    assert dump_lines(dump) == [
        "group_id=1,type=select,bucket=watch_port:5,actions=output:5",
        "group_id=2,type=select,bucket=watch_port:1,actions=output:1",
    ]


def test_rendered_lines_count_matches_specs(fabric: Fabric) -> None:
    for sw in compute_rules(fabric, "ecmp").values():
        assert len(flow_lines(sw)) == len(sw.flows)
        assert len(group_lines(sw)) == len(sw.groups)


def test_line_differences_name_missing_and_unexpected_lines(fabric: Fabric) -> None:
    sw = next(iter(compute_rules(fabric, "ecmp").values()))
    flows, groups = flow_lines(sw), group_lines(sw)
    assert line_differences(flows, groups, sw) == []
    extra = "cookie=0x1, priority=1 actions=drop"
    diff = line_differences([*flows[1:], extra], groups, sw)
    assert diff == [f"-{flows[0]}", f"+{extra}"]
