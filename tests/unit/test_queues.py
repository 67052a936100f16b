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


# Switch buffer models: a ZCube and a ROFT of 16 GPUs (400G NICs; ZCube ports 200G), the same
# 51.2T chip (165 MB) for both. Hand arithmetic in the comments.
ZCUBE16 = FabricSpec.of("zcube", n=4)
ROFT16 = FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2)


def _switch_limits(spec: FabricSpec, scale: Scale, mtu: int, model: QueueModel) -> set[int]:
    fabric = build_fabric(spec)
    limits = port_queue_limits(fabric, scale, mtu, model)
    hosts = {h.name for h in fabric.hosts}
    assert {v for k, v in limits.items() if k.split("-")[0] in hosts} == {model.host_packets}
    return {v for k, v in limits.items() if k.split("-")[0] not in hosts}


@pytest.mark.parametrize(
    ("model", "zcube", "roft"),
    [
        # Default scale (S = 4000, MTU 9000): the 165 MB chip is 41,250 bytes in the lab, under
        # 5 jumbo frames, so every model raises the chip until a NIC-rate port holds 64.
        ("port-floor", 64, 64),  # max(64, min(72 or 144, 6 or 13)): the floor
        ("shared", 64, 64),  # chip raised to 64 x 9000 x 2; a port holds 1/2 of it: 64
        ("bytes", 64, 64),  # chip raised to 64 x 9000 x 128; a port holds 1/128: 64
        ("time", 32, 64),  # the same chip; a 200G port holds 200/51200 of it: 32
    ],
)
def test_buffer_models_at_the_default_scale(model: str, zcube: int, roft: int) -> None:
    queue = QueueModel(buffer_model=model)
    assert _switch_limits(ZCUBE16, Scale(), 9000, queue) == {zcube}
    assert _switch_limits(ROFT16, Scale(), 9000, queue) == {roft}


@pytest.mark.parametrize(
    ("model", "zcube", "roft"),
    [
        # NIC 1000 Mb/s (S = 400), MTU 1500: the chip is 412,500 bytes in the lab.
        ("port-floor", 416, 833),  # 10 ms at 500 / 1000 Mb/s: 416 and 833 packets
        # 412,500 > the floor's 64 x 1500 x 2 = 192,000: not raised; 1/2 of it is 206,250
        # bytes, 137 packets, on every port whatever its rate.
        ("shared", 137, 137),
        ("bytes", 64, 64),  # 412,500 / 128 = 3,223 bytes < 64 packets: raised, 64 everywhere
        ("time", 32, 64),  # raised as bytes; 200G gets half a 400G port's bytes
    ],
)
def test_buffer_models_where_the_chip_outgrows_the_floor(model: str, zcube: int, roft: int) -> None:
    queue = QueueModel(buffer_model=model)
    assert _switch_limits(ZCUBE16, Scale(nic_mbps=1000), 1500, queue) == {zcube}
    assert _switch_limits(ROFT16, Scale(nic_mbps=1000), 1500, queue) == {roft}


def test_shared_model_follows_the_dynamic_threshold() -> None:
    # S = 400, MTU 1500, floor 2 packets: 412,500 bytes x alpha / (1 + alpha k).
    def shared(**kw: object) -> int:
        return QueueModel(buffer_model="shared", floor_packets=2, **kw).limit(1000, 400, 1500)

    assert shared() == 137  # 1 / 2: 206,250 bytes
    assert shared(congested_ports=3) == 68  # 1 / 4: 103,125 bytes
    assert shared(alpha=2.0, congested_ports=3) == 78  # 2 / 7: 117,857 bytes
    # A port holds the same bytes at any rate of the same scale (200G at 500 Mb/s).
    assert QueueModel(buffer_model="shared").limit(500, 200, 1500, 400) == 137


def test_the_chip_generation_changes_the_unraised_share() -> None:
    # 25.6T chip, 113 MB: 282,500 bytes at S = 400; shared 1/2: 141,250 bytes, 94 packets.
    queue = QueueModel(buffer_model="shared", chip="25.6t")
    assert queue.limit(1000, 400, 1500) == 94
    # time: 113 MB x 400 / 25,600 per 400G port = 1.77 MB real, 4,414 bytes at S = 400:
    # under 64 x 1500, raised alike: 64; a 200G port 32.
    assert QueueModel(buffer_model="time", chip="25.6t").limit(500, 200, 1500, 400) == 32


def test_override_beats_every_model_and_bad_models_are_named() -> None:
    for model in ("shared", "bytes", "time"):
        assert QueueModel(packets=40, buffer_model=model).limit(50, 200, 9000, 400) == 40
    with pytest.raises(ConfigError, match="buffer model"):
        QueueModel(buffer_model="deep")
    with pytest.raises(ConfigError, match="switch chip"):
        QueueModel(chip="tomahawk9")
    with pytest.raises(ConfigError, match="congested ports"):
        QueueModel(congested_ports=0)
    assert "time: equal queueing time" in QueueModel(buffer_model="time").describe()
    assert "port-floor" in QueueModel().describe()


def test_run_options_record_the_buffer_model_in_the_run_config() -> None:
    from zcube_lab.cli import build_parser
    from zcube_lab.cli.commands.run import config_from_args

    args = build_parser().parse_args(
        ["run", "--fabric", "zcube", "--buffer-model", "time", "--switch-chip", "25.6t"]
    )
    config = config_from_args(args)
    recorded = config.to_dict()
    assert (recorded["buffer_model"], recorded["switch_chip"]) == ("time", "25.6t")
    assert config.queue_model() == QueueModel(buffer_model="time", chip="25.6t")
    default = config_from_args(build_parser().parse_args(["run"])).queue_model()
    assert default == QueueModel()  # today's port-floor rule stays the default
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--buffer-model", "deep"])
