"""A replay's per-host plans: lanes, lab bytes and chains, checked against the fabric by hand
(issue 45 items 2-3); a synthetic incast; bad input refused before any lab is built."""

from __future__ import annotations

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.scaledown import scaled_sizes
from zcube_lab.core.replay.recording import Recording, Transfer
from zcube_lab.core.replay.synthetic import incast
from zcube_lab.core.replay.timescale import derive
from zcube_lab.emulator.replay.driver import check_hosts, host_plans, ideal_s, slowest_port_gbps


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


def test_the_ep_kv_mix_chains_each_members_layers_and_loads_kv_as_asked():
    from zcube_lab.core.replay.chains import schedule
    from zcube_lab.core.replay.synthetic import ep_kv_mix

    hosts = [f"h{i}" for i in range(16)]
    group = ["h0", "h1", "h2", "h3"]
    rec = ep_kv_mix(hosts, group, ["h8", "h9"], kv_load=0.0, layers=2, gap_s=1e-6)
    ep = [t for t in rec.transfers if t.cls == "ep"]
    assert len(ep) == 2 * 4 * 3 * 2  # layers x members x peers x (dispatch, combine)
    # per pair: 128 tokens x 8 experts / 4 members = 256 tokens; FP8 + a 4-byte scale per 128
    assert ep[0].bytes == pytest.approx(256 * (7168 + 224)) and ep[1].bytes == 256 * 7168 * 2
    # each transfer follows transfers into its own source: the agents keep chains locally
    ids = {t.id: t for t in rec.transfers}
    assert all(ids[a].dst == t.src for t in rec.transfers for a in t.after)
    # uncontended, a layer is one dispatch, one combine, then the gap (each 1 s here)
    timed = schedule(rec.transfers, lambda t: 1.0)
    second = [t for t in ep if t.exchange == "ep/l1" and t.after != () and t.src == "h0"]
    assert timed[second[0].id].start_s == pytest.approx(2.0 + 1e-6)
    mixed = ep_kv_mix(hosts, group, ["h8", "h9"], kv_load=0.5, layers=20, seed=2)
    kv = [t for t in mixed.transfers if t.cls == "kv"]
    span = 20 * mixed.meta["layer_s"]
    offered = sum(t.bytes for t in kv) * 8 / span / (4 * 400e9)
    assert 0.2 < offered < 0.9  # Poisson around the 0.5 asked for
    assert {t.dst for t in kv} <= set(group) and {t.src for t in kv} <= {"h8", "h9"}


def test_a_victim_shares_the_first_senders_nic_and_goes_elsewhere():
    from zcube_lab.core.replay.synthetic import victim

    hosts = [f"h{i}" for i in range(16)]
    rec = victim(hosts, "h5", ["h0", "h1", "h2"], ("h0", "h8"), 16e6, 64e6)
    assert [t.cls for t in rec.transfers] == ["kv", "kv", "kv", "other"]
    with pytest.raises(ConfigError, match="elsewhere"):
        victim(hosts, "h5", ["h0"], ("h0", "h5"), 1e6, 1e6)


def test_the_replay_config_refuses_bad_choices_by_name():
    from zcube_lab.core.replay.config import ReplayConfig

    assert ReplayConfig(fabrics="zcube,clos").fabric_kinds == ["zcube", "clos"]
    assert ReplayConfig(window="1:2.5").window_s == (1.0, 2.5)
    for kwargs, field in (
        ({"fabrics": "zcube,fat"}, "fabrics"),
        ({"classes": "kv,rdma"}, "classes"),
        ({"window": "1:2", "busiest": 0.1}, "window"),
        ({"window": "soon"}, "window"),
        ({"ep_split": 0}, "ep_split"),
        ({"incast": 0}, "incast"),
    ):
        with pytest.raises(ConfigError, match=field):
            ReplayConfig(**kwargs)


def test_shared_striping_keeps_the_live_pulls_lanes_chunks_and_window():
    # The live pull: 2 connections a prefill address, 4 chunks a lane (at most kv_chunk_bytes
    # of the recorded run), 2 chunk requests outstanding a lane.
    f = fabric("zcube")
    ts = derive(2.0, f.nic_gbps, slowest_port_gbps([f]))
    hosts = tuple(h.name for h in f.hosts)
    rec = Recording(
        (Transfer(0, "kv", 0.0, "h0", "h5", 4e6), Transfer(1, "ep", 0.0, "h0", "h6", 1e6)),
        hosts,
        {"bandwidth_scale": 4000.0},
    )
    even = host_plans(rec, f, ts)
    shared = host_plans(rec, f, ts, striping="shared")
    kv, ep = shared["h0"]["out"]
    pairs = even["h0"]["out"][0]["lanes"]
    assert kv["lanes"] == [pairs[0], pairs[0], pairs[1], pairs[1]]
    nbytes = round(4e6 / ts.bandwidth_scale)  # 120,000 lab bytes
    assert kv["bytes"] == nbytes and kv["window"] == 2
    assert kv["chunk"] == -(-nbytes // 16) == 7500  # 4 lanes x 4 chunks, far below the cap
    assert shared["h5"]["chunks"] == {"0": 7500}
    # EP and even striping: no chunks, one lane a pair, as before
    assert "chunk" not in ep and shared["h6"]["chunks"] == {}
    assert "chunk" not in even["h0"]["out"][0] and even["h5"]["chunks"] == {}
    with pytest.raises(ConfigError, match="striping"):
        host_plans(rec, f, ts, striping="spray")


def test_a_shared_chunk_is_capped_at_the_recorded_runs_chunk_carried_to_this_scale():
    from zcube_lab.core.replay.timescale import TimeScale
    from zcube_lab.emulator.replay.driver import shared_chunk

    f = fabric("zcube")
    ts = derive(2.0, f.nic_gbps, slowest_port_gbps([f]))
    run = Recording((Transfer(0, "kv", 0.0, "h0", "h5", 1e6),), meta={"bandwidth_scale": 4000.0})
    # 256 KiB lab bytes at byte scale 4,000 is 1.05 GB real: at this scale's 33.3 that is
    # 31.5 MB of lab bytes, so a 100 MB lab transfer over 4 lanes needs 4 chunks a lane of
    # 6.25 MB, under the cap.
    assert shared_chunk(run, ts, 100_000_000, 4) == 6_250_000
    # At the run's own scale the cap is the live 256 KiB: 16 MB over 4 lanes takes 16 a lane.
    own = TimeScale(
        frame_s=720e-6, mtu=9000, bandwidth_scale=4000.0, nic_gbps=400.0, slowest_port_gbps=200.0,
        nic_mbps=100.0, dilation=1.0,
    )  # fmt: skip
    assert shared_chunk(run, own, 16 * 2**20, 4) == 2**18


def test_auto_striping_is_the_live_pulls_rule_at_the_runs_own_scale_and_even_elsewhere():
    from zcube_lab.core.replay.config import ReplayConfig

    assert ReplayConfig(resolution="run").kv_striping == "shared"
    assert ReplayConfig().kv_striping == "even"  # finest
    assert ReplayConfig(resolution="run", striping="even").kv_striping == "even"
    assert ReplayConfig(striping="shared").kv_striping == "shared"
