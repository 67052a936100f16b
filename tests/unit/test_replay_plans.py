"""A replay's per-host plans: lanes, lab bytes and chains, checked against the fabric by hand
(issue 45 items 2-3); a synthetic incast; bad input refused before any lab is built."""

from __future__ import annotations

import pytest

from emulator.replay.driver import check_hosts, host_plans, ideal_s, slowest_port_gbps
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.scaledown import scaled_sizes
from zcube_lab.core.replay.recording import Recording, Transfer
from zcube_lab.core.replay.synthetic import incast
from zcube_lab.core.replay.timescale import derive


def fabric(kind: str, gpus: int = 16):
    return build_fabric(FabricSpec.of(kind, **scaled_sizes(kind, gpus)))


def test_a_zcube_transfer_has_one_lane_per_port_each_leaving_its_own_port():
    f = fabric("zcube")
    ts = derive(2.0, f.nic_gbps, slowest_port_gbps([f]))
    rec = Recording((Transfer(0, "kv", 0.0, "h0", "h5", 1e6),), tuple(h.name for h in f.hosts))
    plans = host_plans(rec, f, ts)
    assert set(plans) == {"h0", "h5"}
    (out,) = plans["h0"]["out"]
    src_ips = {i.ip for i in f.host("h0").interfaces}
    dst_ips = {i.ip for i in f.host("h5").interfaces}
    assert len(out["lanes"]) == 2
    assert {d for _, d in out["lanes"]} == dst_ips  # every port of the destination
    assert {s for s, _ in out["lanes"]} == src_ips  # each lane leaves its own port
    assert out["bytes"] == round(1e6 / ts.bandwidth_scale) == plans["h5"]["expect"]["0"]
    assert set(plans["h5"]["listen"]) == dst_ips
    assert plans["h0"]["dilation"] == ts.dilation == 120


def test_ideal_time_is_bytes_over_the_slower_nic():
    f = fabric("zcube")
    t = Transfer(0, "kv", 0.0, "h0", "h5", 16e6)
    assert ideal_s(f)(t) == pytest.approx(16e6 * 8 / 400e9)  # two 200G ports per NIC
    assert slowest_port_gbps([f, fabric("roft")]) == 200


def test_hosts_the_fabric_lacks_are_refused_naming_the_size():
    rec = Recording((Transfer(0, "kv", 0.0, "h0", "h40", 1e6),))
    with pytest.raises(ConfigError, match="h40 missing"):
        check_hosts(rec, fabric("zcube"))


def test_an_incast_spreads_its_senders_starts_within_the_window():
    hosts = [f"h{i}" for i in range(16)]
    rec = incast(hosts, "h5", 8, 16e6, within_s=100e-6, seed=3)
    assert [t.dst for t in rec.transfers] == ["h5"] * 8
    assert [t.src for t in rec.transfers] == [f"h{i}" for i in range(6, 14)]
    assert all(0 <= t.start_s < 100e-6 for t in rec.transfers)
    assert incast(hosts, "h5", 8, 16e6, 100e-6, seed=3) == rec  # seeded
    assert {t.start_s for t in incast(hosts, "h5", 4, 1e6).transfers} == {0.0}
    with pytest.raises(ConfigError, match="senders"):
        incast(hosts, "h5", 16, 1e6)
    with pytest.raises(ConfigError, match="receiver"):
        incast(hosts, "h99", 2, 1e6)
