"""The os-ken side without a switch: spec-to-message conversion, thin handlers, metrics export."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from os_ken.ofproto import ofproto_parser, ofproto_protocol, ofproto_v1_3
from prometheus_client import CollectorRegistry, generate_latest

from controller import metrics
from controller.app import ControllerConfig, ZCubeController
from controller.metrics import PortCounters
from controller.ofmsg import flow_mod, group_mod, install_messages, stats_requests
from controller.rules import COOKIE, Output, ToGroup, compute_rules
from emulator.builders import build_fabric
from emulator.fabric import FabricSpec
from zcube_lab.errors import ConfigError

ROFT = FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2)


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


def test_install_order_is_clear_then_groups_then_flows() -> None:
    _fabric, rules = leaf0()
    dp = FakeDatapath(rules.dpid)
    msgs = install_messages(dp, rules)
    kinds = [type(m).__name__ for m in msgs]
    n_groups, n_flows = len(rules.groups), len(rules.flows)
    assert (
        kinds
        == ["OFPFlowMod", "OFPGroupMod"] + ["OFPGroupMod"] * n_groups + ["OFPFlowMod"] * n_flows
    )
    assert msgs[0].command == ofproto_v1_3.OFPFC_DELETE and msgs[0].table_id == 0xFF
    assert msgs[1].command == ofproto_v1_3.OFPGC_DELETE
    assert msgs[1].group_id == ofproto_v1_3.OFPG_ALL


def test_stats_requests_ask_for_groups_only_when_there_are_some() -> None:
    dp = FakeDatapath(1)
    assert len(stats_requests(dp, with_groups=True)) == 3
    assert len(stats_requests(dp, with_groups=False)) == 2


def make_app(registry: CollectorRegistry) -> ZCubeController:
    config = ControllerConfig(build_fabric(ROFT), "ecmp", 1.0, registry)
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


def test_features_installs_rules_and_barrier_confirms_them() -> None:
    registry = CollectorRegistry()
    app = make_app(registry)
    _fabric, rules = leaf0()
    dp = FakeDatapath(rules.dpid)
    app._on_features(event(dp))
    sent = [type(m).__name__ for m in dp.sent]
    assert sent[-1] == "OFPBarrierRequest"
    assert sent.count("OFPFlowMod") == len(rules.flows) + 1  # plus the delete
    assert sent.count("OFPGroupMod") == len(rules.groups) + 1
    assert registry.get_sample_value(metrics.SWITCH_RULES_INSTALLED, {"switch": "leaf0"}) == 0
    app._on_barrier(event(dp, xid=dp.sent[-1].xid - 1))  # someone else's barrier
    assert registry.get_sample_value(metrics.SWITCH_RULES_INSTALLED, {"switch": "leaf0"}) == 0
    app._on_barrier(event(dp, xid=dp.sent[-1].xid))
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
    app.stats.ports("leaf0", {1: PortCounters(rx_bytes=5)})
    app._on_dead(SimpleNamespace(datapath=dp))
    assert registry.get_sample_value(metrics.SWITCH_UP, {"switch": "leaf0"}) == 0
    assert (
        registry.get_sample_value(
            metrics.PORT_RX_BYTES, {"switch": "leaf0", "port": "1", "peer": "h0"}
        )
        is None
    )
