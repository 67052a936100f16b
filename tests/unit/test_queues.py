"""The buffer model, the MTU rule and the tc lines of zcube_lab.core.fabric.queues."""

from __future__ import annotations

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.queues import (
    FLOOR_PACKETS,
    HOST_QUEUE_PACKETS,
    PORT_BUFFER_S,
    SERIALIZATION_BUDGET_S,
    QueueModel,
    delay_cap_packets,
    fabric_mtu,
    leaf_queue_lines,
    mtu_for_rate,
    port_queue_limits,
    queue_delay_s,
    queue_summary,
    real_share_packets,
    serialization_s,
)
from zcube_lab.core.fabric.scale import Scale


def test_serialization_and_queue_delay_figures() -> None:
    assert serialization_s(9000, 50) == pytest.approx(1.44e-3)
    assert serialization_s(9000, 400_000) == pytest.approx(0.18e-6)
    assert queue_delay_s(1000, 9000, 50) == pytest.approx(1.44)  # the interface default
    assert queue_delay_s(16, 9000, 50) == pytest.approx(0.02304)


def test_real_port_buffer_is_about_26_us_of_line_rate() -> None:
    assert 25.5e-6 < PORT_BUFFER_S < 26.1e-6
    assert real_share_packets(200, 9000) == 72  # 645 KB of jumbo frames
    assert real_share_packets(400, 9000) == 144
    assert real_share_packets(1, 9000) == 1  # never zero


def test_delay_cap() -> None:
    assert delay_cap_packets(50, 9000) == 6  # 10 ms at 50 Mb/s is under 7 jumbo frames
    assert delay_cap_packets(1000, 9000) == 138


def test_default_scale_binds_the_floor() -> None:
    model = QueueModel()
    assert model.limit(50, 200, 9000) == FLOOR_PACKETS == 64  # ZCube port
    assert model.limit(100, 400, 9000) == 64  # ROFT NIC


def test_fast_links_are_capped_by_time_and_by_the_real_port() -> None:
    model = QueueModel()
    assert model.limit(1000, 400, 9000) == 138  # 10 ms at 1 Gb/s, under the real 144
    assert model.limit(1000, 100, 9000) == FLOOR_PACKETS  # the real 100G port's 36: the floor
    assert QueueModel(floor_packets=16).limit(1000, 100, 9000) == 36  # the real port binds
    assert model.limit(1000, 10, 9000) == FLOOR_PACKETS  # never under the floor


def test_override_wins_and_is_validated() -> None:
    assert QueueModel(packets=1000).limit(50, 200, 9000) == 1000
    assert "1000" in QueueModel(packets=1000).describe()
    assert "25.8 us" in QueueModel().describe()
    assert "1000 packets per host NIC port" in QueueModel().describe()
    with pytest.raises(ConfigError, match="host_packets"):
        QueueModel(host_packets=1)
    for bad in (0, 1, 10_001, True, 2.5):
        with pytest.raises(ConfigError, match="queue packets"):
            QueueModel(packets=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="budget"):
        QueueModel(delay_budget_s=0)


def test_mtu_rule_keeps_serialization_within_budget() -> None:
    assert round(SERIALIZATION_BUDGET_S, 9) == 0.001
    assert mtu_for_rate(50) == 6000
    assert mtu_for_rate(100) == 9000
    assert mtu_for_rate(25) == 3000
    assert mtu_for_rate(5) == 1500  # floor: smaller packets cost the datapath more per byte
    for mbps in (12, 25, 37, 50, 70):
        mtu = mtu_for_rate(mbps)
        assert serialization_s(mtu, mbps) <= SERIALIZATION_BUDGET_S
        assert serialization_s(mtu + 500, mbps) > SERIALIZATION_BUDGET_S
    with pytest.raises(ConfigError):
        mtu_for_rate(0)


def test_fabric_mtu_follows_the_slowest_link() -> None:
    scale = Scale(nic_mbps=100)
    assert fabric_mtu(build_fabric(FabricSpec.of("zcube", n=4)), scale) == 6000  # 50 Mb/s ports
    assert fabric_mtu(build_fabric(FabricSpec.of("roft")), scale) == 9000


def test_tc_lines_replace_the_htb_leaf() -> None:
    assert leaf_queue_lines([("A0-eth1", 16), ("h0-eth0", 138)]) == [
        "qdisc replace dev A0-eth1 parent 5:1 handle 10: pfifo limit 16",
        "qdisc replace dev h0-eth0 parent 5:1 handle 10: pfifo limit 138",
    ]
    with pytest.raises(ConfigError, match="A0-eth1"):
        leaf_queue_lines([("A0-eth1", 1)])


@pytest.mark.parametrize(
    "spec", [FabricSpec.of("zcube", n=4), FabricSpec.of("roft"), FabricSpec.of("roft", planes=2)]
)
def test_every_interface_of_every_link_gets_a_limit(spec: FabricSpec) -> None:
    fabric = build_fabric(spec)
    limits = port_queue_limits(fabric, Scale(), 9000, QueueModel())
    host_intfs = {i.name for h in fabric.hosts for i in h.interfaces}
    switch_intfs = set(fabric.switch_interfaces())
    assert set(limits) == host_intfs | switch_intfs
    assert {limits[i] for i in switch_intfs} == {64}
    assert {limits[i] for i in host_intfs} == {HOST_QUEUE_PACKETS}
    fixed = port_queue_limits(fabric, Scale(), 9000, QueueModel(packets=40, host_packets=30))
    assert {fixed[i] for i in switch_intfs} == {40}
    assert {fixed[i] for i in host_intfs} == {30}


def test_summary_groups_links_by_rate() -> None:
    fabric = build_fabric(FabricSpec.of("zcube", n=4))
    [only] = queue_summary(fabric, Scale(), 9000, QueueModel())
    assert only == {
        "mbps": 50.0,
        "queue_packets": 64,
        "max_queue_ms": 92.16,
        "serialization_ms": 1.44,
        "links": len(fabric.links),
    }
    oversubscribed = build_fabric(FabricSpec.of("clos", servers=4, oversubscription=2))
    rows = queue_summary(oversubscribed, Scale(nic_mbps=1000), 9000, QueueModel(packets=50))
    assert sum(r["links"] for r in rows) == len(oversubscribed.links)
    assert all(r["queue_packets"] == 50 for r in rows)
