"""The os-ken side without a switch: spec-to-message conversion, thin handlers, metrics export."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from os_ken.ofproto import ofproto_parser, ofproto_protocol, ofproto_v1_3
from prometheus_client import CollectorRegistry, generate_latest

from zcube_lab.controller import port_metrics as metrics
from zcube_lab.controller.__main__ import parse_args
from zcube_lab.controller.app import (
    RECOMPUTE_DEBOUNCE_S,
    ControllerConfig,
    ZCubeController,
    port_is_down,
)
from zcube_lab.controller.flowtable import FabricTable
from zcube_lab.controller.ofmsg import (
    diff_messages,
    flow_mod,
    group_mod,
    install_messages,
    stats_requests,
)
from zcube_lab.controller.port_metrics import OpenFlowPortStats
from zcube_lab.controller.rules import (
    COOKIE,
    Bucket,
    GroupSpec,
    Output,
    RuleDiff,
    SwitchRules,
    ToGroup,
    compute_rules,
    diff_rules,
)
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import Fabric, FabricSpec

ROFT = FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2)
ZCUBE4 = FabricSpec.of("zcube", n=4)


class FakeDatapath(ofproto_protocol.ProtocolDesc):
    """A datapath that records what it is sent instead of writing to a socket."""

    def __init__(self, dpid: int) -> None:
        super().__init__(ofproto_v1_3.OFP_VERSION)
        self.id = dpid
        self.sent: list[Any] = []
        self._xid = 0

    def set_xid(self, msg: Any) -> int:
        self._xid += 1
        msg.set_xid(self._xid)
        return self._xid

    def send_msg(self, msg: Any) -> None:
        if msg.xid is None:
            self.set_xid(msg)
        msg.serialize()  # fails loudly on a malformed message
        self.sent.append(msg)


def roundtrip(dp: FakeDatapath, msg: Any) -> Any:
    msg.set_xid(7)
    msg.serialize()
    return ofproto_parser.msg(dp, msg.version, msg.msg_type, msg.msg_len, msg.xid, bytes(msg.buf))


def serialized(msg: Any) -> Any:
    msg.set_xid(7)
    msg.serialize()
    return msg


def leaf0() -> tuple[Any, Any]:
    fabric = build_fabric(ROFT)
    return fabric, compute_rules(fabric, "ecmp")[fabric.switch("leaf0").dpid]


def test_flow_mods_carry_the_spec_through_the_wire_format() -> None:
    _fabric, rules = leaf0()
    dp = FakeDatapath(rules.dpid)
    for flow in rules.flows:
        parsed = roundtrip(dp, flow_mod(dp, flow))
        assert parsed.cookie == COOKIE and parsed.priority == flow.priority
        assert parsed.table_id == 0 and parsed.command == ofproto_v1_3.OFPFC_ADD
        assert dict(parsed.match.items()) == flow.match_fields
        actions = [a for i in parsed.instructions for a in i.actions]
        as_specs = [Output(a.port) if hasattr(a, "port") else ToGroup(a.group_id) for a in actions]
        assert tuple(as_specs) == flow.actions


def test_group_mods_are_select_groups_with_watched_buckets() -> None:
    _fabric, rules = leaf0()
    dp = FakeDatapath(rules.dpid)
    (group,) = rules.groups
    msg = group_mod(dp, group)
    msg.set_xid(1)
    msg.serialize()
    assert msg.type == ofproto_v1_3.OFPGT_SELECT and msg.group_id == group.group_id
    assert [(b.weight, b.watch_port, b.actions[0].port) for b in msg.buckets] == [
        (1, b.port, b.port) for b in group.buckets
    ]


def test_install_adds_or_replaces_groups_then_flows_without_clearing() -> None:
    _fabric, rules = leaf0()
    dp = FakeDatapath(rules.dpid)
    msgs = install_messages(dp, rules)
    kinds = [type(m).__name__ for m in msgs]
    n_groups, n_flows = len(rules.groups), len(rules.flows)
    assert kinds == ["OFPGroupMod"] * n_groups + ["OFPFlowMod"] * n_flows
    # Nothing deletes: a switch reconnecting to a restarted controller keeps its routes.
    assert all(m.command == 0x8000 for m in msgs[:n_groups])  # OVS's add-or-modify
    assert all(m.command == ofproto_v1_3.OFPFC_ADD for m in msgs[n_groups:])
    for m in msgs[:n_groups]:
        serialized(m)


def test_stats_requests_ask_for_groups_only_when_there_are_some() -> None:
    dp = FakeDatapath(1)
    assert len(stats_requests(dp, with_groups=True)) == 3
    assert len(stats_requests(dp, with_groups=False)) == 2


def make_app(
    registry: CollectorRegistry,
    spec: FabricSpec = ROFT,
    policy: str = "ecmp",
    recompute: bool = False,
) -> ZCubeController:
    config = ControllerConfig(build_fabric(spec), policy, 1.0, registry, recompute=recompute)
    return ZCubeController(zcube_config=config)


def event(dp: FakeDatapath, **fields: Any) -> Any:
    return SimpleNamespace(msg=SimpleNamespace(datapath=dp, **fields))


def test_app_refuses_to_start_without_its_config() -> None:
    with pytest.raises(ConfigError) as err:
        ZCubeController()
    assert err.value.field == "zcube_config"


def test_config_rejects_bad_policy_and_interval() -> None:
    fabric = build_fabric(ROFT)
    with pytest.raises(ConfigError):
        ControllerConfig(fabric, "spray", 1.0, CollectorRegistry())
    with pytest.raises(ConfigError):
        ControllerConfig(fabric, "ecmp", 0, CollectorRegistry())
    with pytest.raises(ConfigError):
        ControllerConfig(fabric, "ecmp", 1.0, CollectorRegistry(), recompute="yes")  # type: ignore[arg-type]


def test_features_installs_rules_and_barrier_confirms_them() -> None:
    registry = CollectorRegistry()
    app = make_app(registry)
    _fabric, rules = leaf0()
    dp = FakeDatapath(rules.dpid)
    app._on_features(event(dp))
    sent = [type(m).__name__ for m in dp.sent]
    # then the flows are read back, to delete stale ones (tested below)
    assert sent[-2:] == ["OFPBarrierRequest", "OFPFlowStatsRequest"]
    assert sent.count("OFPFlowMod") == len(rules.flows)  # no delete: nothing is cleared
    assert sent.count("OFPGroupMod") == len(rules.groups)
    assert registry.get_sample_value(metrics.SWITCH_RULES_INSTALLED, {"switch": "leaf0"}) == 0
    app._on_barrier(event(dp, xid=dp.sent[-2].xid - 1))  # someone else's barrier
    assert registry.get_sample_value(metrics.SWITCH_RULES_INSTALLED, {"switch": "leaf0"}) == 0
    app._on_barrier(event(dp, xid=dp.sent[-2].xid))
    assert registry.get_sample_value(metrics.SWITCH_RULES_INSTALLED, {"switch": "leaf0"}) == len(
        rules.flows
    )
    assert registry.get_sample_value(metrics.SWITCHES_CONNECTED) == 1


def test_unknown_dpid_is_ignored() -> None:
    app = make_app(CollectorRegistry())
    dp = FakeDatapath(0xDEAD)
    app._on_features(event(dp))
    assert dp.sent == []


def test_port_and_group_counters_are_exported_with_peers() -> None:
    registry = CollectorRegistry()
    app = make_app(registry)
    _fabric, rules = leaf0()
    dp = FakeDatapath(rules.dpid)
    app._on_features(event(dp))
    port = SimpleNamespace(
        port_no=5,
        rx_bytes=100,
        tx_bytes=200,
        rx_packets=1,
        tx_packets=2,
        rx_dropped=3,
        tx_dropped=4,
        rx_errors=5,
        tx_errors=6,
    )
    local = SimpleNamespace(**{**vars(port), "port_no": ofproto_v1_3.OFPP_LOCAL})
    app._on_port_stats(event(dp, body=[port, local]))
    bucket = SimpleNamespace(packet_count=9, byte_count=900)
    empty = SimpleNamespace(packet_count=0, byte_count=0)
    group = SimpleNamespace(group_id=1, bucket_stats=[bucket, empty, empty, empty])
    app._on_group_stats(event(dp, body=[group]))
    app._on_aggregate(event(dp, body=SimpleNamespace(flow_count=19)))

    labels = {"switch": "leaf0", "port": "5", "peer": "spine0"}
    assert registry.get_sample_value(metrics.PORT_RX_BYTES, labels) == 100
    assert registry.get_sample_value(metrics.PORT_TX_ERRORS, labels) == 6
    text = generate_latest(registry).decode()
    assert str(ofproto_v1_3.OFPP_LOCAL) not in text
    blabels = {"switch": "leaf0", "group": "1", "bucket": "0", "port": "5", "peer": "spine0"}
    assert registry.get_sample_value(metrics.GROUP_BUCKET_PACKETS, blabels) == 9
    assert registry.get_sample_value(metrics.SWITCH_FLOWS, {"switch": "leaf0"}) == 19
    for name in (v for k, v in vars(metrics).items() if k.isupper() and isinstance(v, str)):
        assert name.startswith("zcube_")


def test_disconnect_drops_stale_counters() -> None:
    registry = CollectorRegistry()
    app = make_app(registry)
    _fabric, rules = leaf0()
    dp = FakeDatapath(rules.dpid)
    app._on_features(event(dp))
    app.stats.ports("leaf0", {1: OpenFlowPortStats(rx_bytes=5)})
    app._on_dead(SimpleNamespace(datapath=dp))
    assert registry.get_sample_value(metrics.SWITCH_UP, {"switch": "leaf0"}) == 0
    assert (
        registry.get_sample_value(
            metrics.PORT_RX_BYTES, {"switch": "leaf0", "port": "1", "peer": "h0"}
        )
        is None
    )


# -- failures -----------------------------------------------------------------------------------
def test_ff_group_mods_are_fast_failover_groups_with_ordered_watched_buckets() -> None:
    fabric = build_fabric(ZCUBE4)
    a0 = compute_rules(fabric, "ff")[fabric.switch("a0").dpid]
    dp = FakeDatapath(a0.dpid)
    for group in a0.groups:
        parsed = serialized(group_mod(dp, group))
        assert parsed.type == ofproto_v1_3.OFPGT_FF and parsed.command == ofproto_v1_3.OFPGC_ADD
        assert [(b.weight, b.watch_port, b.actions[0].port) for b in parsed.buckets] == [
            (0, b.port, b.port) for b in group.buckets
        ]


def test_diff_messages_in_order_and_on_the_wire() -> None:
    _fabric, rules = leaf0()
    dp = FakeDatapath(rules.dpid)
    flows = [f for f in rules.flows if f.match_fields.get("ipv4_dst")]
    new_group = GroupSpec(2, "select", (Bucket(5, 1, 5), Bucket(6, 1, 6)))
    diff = RuleDiff(
        groups_added=(new_group,),
        groups_modified=(GroupSpec(1, "select", (Bucket(7, 1, 7),)),),
        flows_added=(flows[0],),
        flows_deleted=(flows[1],),
        groups_deleted=(GroupSpec(3, "ff", ()),),
    )
    # os-ken parses flow mods but not group mods (a switch never sends one).
    msgs = [
        roundtrip(dp, m) if type(m).__name__ == "OFPFlowMod" else serialized(m)
        for m in diff_messages(dp, diff)
    ]
    assert [(type(m).__name__, m.command) for m in msgs] == [
        ("OFPGroupMod", ofproto_v1_3.OFPGC_ADD),
        ("OFPGroupMod", ofproto_v1_3.OFPGC_MODIFY),
        ("OFPFlowMod", ofproto_v1_3.OFPFC_ADD),
        ("OFPFlowMod", ofproto_v1_3.OFPFC_DELETE_STRICT),
        ("OFPGroupMod", ofproto_v1_3.OFPGC_DELETE),
    ]
    assert msgs[0].group_id == 2 and msgs[1].group_id == 1 and msgs[4].group_id == 3
    delete = msgs[3]
    assert delete.priority == flows[1].priority and delete.table_id == 0
    assert dict(delete.match.items()) == flows[1].match_fields
    assert (delete.cookie, delete.cookie_mask) == (COOKIE, 0xFFFFFFFFFFFFFFFF)
    assert delete.out_port == ofproto_v1_3.OFPP_ANY and delete.out_group == ofproto_v1_3.OFPG_ANY


def port_desc(port_no: int, down: bool = False, config: int = 0) -> SimpleNamespace:
    state = ofproto_v1_3.OFPPS_LINK_DOWN if down else ofproto_v1_3.OFPPS_LIVE
    return SimpleNamespace(port_no=port_no, state=state, config=config)


def port_status(dp: FakeDatapath, port_no: int, down: bool) -> Any:
    return event(dp, reason=ofproto_v1_3.OFPPR_MODIFY, desc=port_desc(port_no, down))


def test_port_is_down_on_link_down_port_down_or_delete() -> None:
    ofp = ofproto_v1_3
    assert port_is_down(ofp, ofp.OFPPR_MODIFY, port_desc(1, down=True))
    assert port_is_down(ofp, ofp.OFPPR_MODIFY, port_desc(1, config=ofp.OFPPC_PORT_DOWN))
    assert port_is_down(ofp, ofp.OFPPR_DELETE, port_desc(1))
    assert not port_is_down(ofp, ofp.OFPPR_ADD, port_desc(1))
    assert not port_is_down(ofp, ofp.OFPPR_MODIFY, port_desc(1, config=ofp.OFPPC_NO_FWD))


class Deferred:
    """Stands in for the debounce timer: records what the app schedules."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, Any]] = []

    def __call__(self, delay: float, fn: Any) -> None:
        self.calls.append((delay, fn))

    def run(self) -> None:
        calls, self.calls = self.calls, []
        for _delay, fn in calls:
            fn()


def connected_zcube(
    recompute: bool, policy: str = "ecmp"
) -> tuple[CollectorRegistry, ZCubeController, dict[str, FakeDatapath], Deferred]:
    registry = CollectorRegistry()
    app = make_app(registry, ZCUBE4, policy, recompute=recompute)
    deferred = Deferred()
    app.defer = deferred
    dps = {}
    for sw in app.config.fabric.switches:
        dps[sw.name] = FakeDatapath(sw.dpid)
        app._on_features(event(dps[sw.name]))
        dps[sw.name].sent.clear()
    return registry, app, dps, deferred


def a0_b1(fabric: Fabric) -> Any:
    (link,) = (lk for lk in fabric.links if {lk.node1, lk.node2} == {"a0", "b1"})
    assert (link.node1, link.port1, link.node2, link.port2) == ("a0", 6, "b1", 5)
    return link


def link_up(registry: CollectorRegistry, switch: str, port: int, peer: str) -> float | None:
    labels = {"switch": switch, "port": str(port), "peer": peer}
    return registry.get_sample_value(metrics.LINK_UP, labels)


def test_port_down_with_recompute_sends_the_difference_once_both_ends_reported() -> None:
    registry, app, dps, deferred = connected_zcube(recompute=True)
    fabric = app.config.fabric
    link = a0_b1(fabric)
    before = dict(app.rules)
    app._on_port_status(port_status(dps["a0"], 6, down=True))
    assert [delay for delay, _fn in deferred.calls] == [RECOMPUTE_DEBOUNCE_S]
    app._on_port_status(port_status(dps["b1"], 5, down=True))
    assert len(deferred.calls) == 1, "the second end falls in the same debounce"
    assert all(dp.sent == [] for dp in dps.values()), "nothing before the debounce ends"
    deferred.run()

    # a0: the select group over b0..b3 is modified in place to b0, b2, b3, and b1's four
    # addresses now use it; then a barrier.
    sent = dps["a0"].sent
    assert [type(m).__name__ for m in sent] == ["OFPGroupMod"] + ["OFPFlowMod"] * 4 + [
        "OFPBarrierRequest"
    ]
    assert sent[0].command == ofproto_v1_3.OFPGC_MODIFY and sent[0].group_id == 1
    assert [b.watch_port for b in sent[0].buckets] == [5, 7, 8]
    assert {m.command for m in sent[1:5]} == {ofproto_v1_3.OFPFC_ADD}
    a0 = app.rules[fabric.switch("a0").dpid]
    for dpid, old in before.items():
        name = old.name
        diff = diff_rules(old, app.rules[dpid])
        assert len(dps[name].sent) == len(diff_messages(dps[name], diff)) + 1, name
        assert type(dps[name].sent[-1]).__name__ == "OFPBarrierRequest"
    assert a0.groups == (GroupSpec(1, "select", tuple(Bucket(p, 1, p) for p in (5, 7, 8))),)
    # The rules the app now holds route around the failure.
    table = FabricTable(fabric, app.rules).with_failed([link])
    for src in fabric.hosts:
        for dst in fabric.hosts:
            for iface in dst.interfaces if src is not dst else ():
                assert table.send(src.name, iface.ip).receivers == {(dst.name, iface.index)}

    assert link_up(registry, "a0", 6, "b1") == 0 and link_up(registry, "b1", 5, "a0") == 0
    assert link_up(registry, "a0", 5, "b0") == 1
    assert registry.get_sample_value(metrics.PORT_STATUS_EVENTS, {"switch": "a0"}) == 1
    assert registry.get_sample_value(metrics.ROUTE_RECOMPUTES) == 1
    assert registry.get_sample_value(metrics.ROUTE_RECOMPUTE_SECONDS) >= 0
    app._on_barrier(event(dps["a0"], xid=sent[-1].xid))
    assert registry.get_sample_value(metrics.SWITCH_RULES_INSTALLED, {"switch": "a0"}) == len(
        a0.flows
    )

    # A switch that reconnects gets the current rules.
    again = FakeDatapath(a0.dpid)
    app._on_features(event(again))
    groups = [m for m in again.sent if type(m).__name__ == "OFPGroupMod"]
    assert [[b.watch_port for b in g.buckets] for g in groups] == [[5, 7, 8]]

    # Both ends up again: back to the original routes. Group ids may differ: a group is only
    # modified in place when every flow using it keeps using it.
    app._on_port_status(port_status(dps["a0"], 6, down=False))
    app._on_port_status(port_status(dps["b1"], 5, down=False))
    deferred.run()
    assert registry.get_sample_value(metrics.ROUTE_RECOMPUTES) == 2
    assert link_up(registry, "a0", 6, "b1") == 1
    for dpid, old in before.items():
        assert routes(app.rules[dpid]) == routes(old), old.name


def routes(rules: SwitchRules) -> dict[Any, tuple[Any, ...]]:
    """Flow key -> its actions with groups replaced by their type and buckets."""
    groups = {g.group_id: (g.type, g.buckets) for g in rules.groups}
    return {
        (f.priority, f.match): tuple(
            groups[a.group_id] if isinstance(a, ToGroup) else a for a in f.actions
        )
        for f in rules.flows
    }


def test_port_down_without_recompute_only_records() -> None:
    registry, app, dps, deferred = connected_zcube(recompute=False)
    rules = dict(app.rules)
    app._on_port_status(port_status(dps["a0"], 6, down=True))
    assert deferred.calls == []
    assert all(dp.sent == [] for dp in dps.values())
    assert app.rules == rules
    # One end reported is enough to call the link down at both ends.
    assert link_up(registry, "a0", 6, "b1") == 0 and link_up(registry, "b1", 5, "a0") == 0
    assert registry.get_sample_value(metrics.PORT_STATUS_EVENTS, {"switch": "a0"}) == 1
    assert registry.get_sample_value(metrics.PORT_STATUS_EVENTS, {"switch": "b1"}) == 0
    assert registry.get_sample_value(metrics.ROUTE_RECOMPUTES) == 0
    assert registry.get_sample_value(metrics.ROUTE_RECOMPUTE_SECONDS) is None
    app._on_port_status(port_status(dps["a0"], 6, down=False))
    assert link_up(registry, "a0", 6, "b1") == 1
    assert registry.get_sample_value(metrics.PORT_STATUS_EVENTS, {"switch": "a0"}) == 2


def test_a_flap_within_the_debounce_changes_nothing() -> None:
    registry, app, dps, deferred = connected_zcube(recompute=True, policy="ff")
    rules = dict(app.rules)
    app._on_port_status(port_status(dps["a0"], 6, down=True))
    app._on_port_status(port_status(dps["a0"], 6, down=False))
    deferred.run()
    assert app.rules == rules
    assert all(dp.sent == [] for dp in dps.values())
    assert registry.get_sample_value(metrics.ROUTE_RECOMPUTES) == 0


def test_port_descriptions_at_connect_record_links_down_meanwhile() -> None:
    registry, app, dps, deferred = connected_zcube(recompute=True)
    local = port_desc(ofproto_v1_3.OFPP_LOCAL, down=True)
    app._on_port_desc(event(dps["b1"], body=[port_desc(5, down=True), port_desc(6), local]))
    assert link_up(registry, "b1", 5, "a0") == 0 and link_up(registry, "b1", 6, "a1") == 1
    assert registry.get_sample_value(metrics.PORT_STATUS_EVENTS, {"switch": "b1"}) == 0
    assert len(deferred.calls) == 1
    deferred.run()
    assert registry.get_sample_value(metrics.ROUTE_RECOMPUTES) == 1


def test_recompute_flag_on_the_command_line() -> None:
    base = ["--fabric-spec", ZCUBE4.to_json()]
    assert parse_args(base).recompute is False
    assert parse_args([*base, "--recompute", "--policy", "ff"]).recompute is True


def test_the_static_policy_keeps_its_earlier_name_single() -> None:
    base = ["--fabric-spec", ZCUBE4.to_json()]
    assert parse_args([*base, "--policy", "static"]).policy == "static"
    assert parse_args([*base, "--policy", "single"]).policy == "single"
    config = ControllerConfig(build_fabric(ROFT), "single", 1.0, CollectorRegistry())
    assert config.policy == "static"


def _entry(dp: FakeDatapath, flow: Any, cookie: int = COOKIE, table_id: int = 0) -> Any:
    parsed = roundtrip(dp, flow_mod(dp, flow))  # the match as a switch's reply carries it
    return SimpleNamespace(
        table_id=table_id, cookie=cookie, priority=flow.priority, match=parsed.match
    )


def test_stale_flows_are_ours_that_the_rules_no_longer_hold() -> None:
    from zcube_lab.controller.ofmsg import stale_flows
    from zcube_lab.controller.rules import FlowSpec, match

    _fabric, rules = leaf0()
    dp = FakeDatapath(rules.dpid)
    old = FlowSpec(1000, match(eth_type=0x0800, ipv4_dst="198.18.9.9"), (Output(1),))
    other = FlowSpec(1000, match(eth_type=0x0800, ipv4_dst="198.18.9.8"), (Output(1),))
    entries = [_entry(dp, f) for f in rules.flows]
    entries += [_entry(dp, old), _entry(dp, other, cookie=COOKIE + 1)]
    (stale,) = stale_flows(entries, rules)
    assert (stale.priority, stale.match_fields) == (1000, old.match_fields)
    assert stale_flows(entries[: len(rules.flows)], rules) == []


def test_a_reconnecting_switch_loses_only_the_flows_the_rules_do_not_hold() -> None:
    from zcube_lab.controller.rules import FlowSpec, match

    app = make_app(CollectorRegistry())
    _fabric, rules = leaf0()
    dp = FakeDatapath(rules.dpid)
    app._on_features(event(dp))
    installed = len(dp.sent)
    assert type(dp.sent[-1]).__name__ == "OFPFlowStatsRequest"
    old = FlowSpec(1000, match(eth_type=0x0800, ipv4_dst="198.18.9.9"), (Output(1),))
    body = [_entry(dp, f) for f in rules.flows]
    more = ofproto_v1_3.OFPMPF_REPLY_MORE
    app._on_flow_stats(event(dp, body=body[:3], flags=more))
    assert len(dp.sent) == installed  # waits for the last part
    app._on_flow_stats(event(dp, body=[*body[3:], _entry(dp, old)], flags=0))
    (delete,) = dp.sent[installed:]
    assert delete.command == ofproto_v1_3.OFPFC_DELETE_STRICT
    assert dict(delete.match.items()) == old.match_fields
    app._on_flow_stats(event(dp, body=[_entry(dp, old)], flags=0))  # no read pending
    assert len(dp.sent) == installed + 1
