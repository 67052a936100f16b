"""The datapath load of a replay and the k that keeps it within the ceiling
(`zcube_lab.core.replay.load`), against hand answers: switch hops of real fabrics' lanes, the
offered timetable (NICs one transfer at a time, chains kept), the busiest window, and a 3-hop
fabric needing 1.5 times the k of a 2-hop one on the same recording."""

from __future__ import annotations

import math

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.scaledown import scaled_sizes
from zcube_lab.core.replay import load
from zcube_lab.core.replay.load import Demand, Span, choose, demand, fit_dilation, load_at
from zcube_lab.core.replay.recording import Recording, Transfer
from zcube_lab.core.replay.timescale import derive

# A 2 µs frame on a 200 Gb/s port: S = 200e9 * 2e-6 / (1500 * 8) = 33 1/3, k = 120 from the
# per-port budget. A 400 Gb/s NIC moves 5e10 real B/s = 1.5e9 lab B/s: with 1,500-byte
# payloads, 1e6 datagrams per modelled second.
TS = derive(2.0, 400.0, 200.0)
PAYLOAD = 1500
DATAGRAMS_PER_S = 1e6
HOSTS = ("h0", "h1", "h2", "h3")


def fabric(kind: str, gpus: int = 16):
    return build_fabric(FabricSpec.of(kind, **scaled_sizes(kind, gpus)))


def rec(*transfers: Transfer) -> Recording:
    return Recording(tuple(transfers), HOSTS)


def nic400(_host: str) -> float:
    return 400.0


def test_the_scale_is_the_one_the_hand_answers_assume():
    assert TS.bandwidth_scale == pytest.approx(100 / 3)
    assert TS.dilation == 120
    assert 400e9 / 8 / TS.bandwidth_scale / PAYLOAD == pytest.approx(DATAGRAMS_PER_S)


def test_lanes_cross_two_switches_on_zcube_and_one_or_three_on_clos():
    from zcube_lab.emulator.replay.driver import lanes

    z = fabric("zcube")
    for dst in ("h1", "h5", "h15"):  # every ZCube lane: source port's switch, then the other group
        assert load.lane_hops(z, "h0", lanes(z, "h0", dst)) == 2
    c = fabric("clos")
    leaf = {h.name: c.attachments[(h.name, h.interfaces[0].index)].switch for h in c.hosts}
    same = next(h for h in leaf if h != "h0" and leaf[h] == leaf["h0"])
    other = next(h for h in leaf if leaf[h] != leaf["h0"])
    assert load.lane_hops(c, "h0", lanes(c, "h0", same)) == 1
    assert load.lane_hops(c, "h0", lanes(c, "h0", other)) == 3
    # no source address: the port nearest the destination
    assert load.lane_hops(c, "h0", [["", c.host(other).interfaces[0].ip]]) == 3


def test_a_nic_sends_and_receives_one_transfer_at_a_time_and_chains_are_kept():
    b = 5e8  # 10 ms at 400 Gb/s
    d = demand(
        rec(
            Transfer(0, "kv", 0.0, "h0", "h1", b),
            Transfer(1, "kv", 0.0, "h0", "h2", b),  # same sender: after the first
            Transfer(2, "kv", 0.001, "h3", "h1", b),  # same receiver as the first: after it
            Transfer(3, "ep", 0.0, "h1", "h3", b / 2, after=(0,), gap_s=0.002),
        ),
        lambda s, d: 2.0,
        nic400,
    )
    at = {s.transfer: (s.start_s, s.end_s) for s in d.spans}
    want = {0: (0.0, 0.01), 1: (0.01, 0.02), 2: (0.01, 0.02), 3: (0.012, 0.017)}
    assert set(at) == set(want)
    for tid, (a, b_) in want.items():
        assert at[tid] == (pytest.approx(a), pytest.approx(b_)), tid
    assert d.byte_hops() == pytest.approx(2 * 3.5 * b)
    assert d.mean_hops(3.5 * b) == 2.0


def test_the_busiest_window_of_a_piecewise_rate():
    # 2 units/s over [0, 1), 6 units/s over [1, 1.5), nothing after
    d = Demand((Span(0.0, 1.0, 2.0), Span(1.0, 1.5, 3.0)))
    assert d.peak(0.5) == pytest.approx(6.0)  # [1, 1.5)
    assert d.peak(1.0) == pytest.approx((1.0 + 3.0) / 1.0)  # [0.5, 1.5)
    assert d.peak(3.0) == pytest.approx(5.0 / 3.0)  # everything
    assert Demand(()).peak(1.0) == 0.0
    with pytest.raises(ConfigError, match="window"):
        d.peak(0.0)


def steady(hops: float) -> Demand:
    """One transfer of 100 ms at line rate (longer than any window here) over `hops`."""
    return demand(rec(Transfer(0, "kv", 0.0, "h0", "h1", 5e9)), lambda s, d: hops, nic400)


def test_the_load_of_a_steady_stream_is_datagrams_times_hops_over_k():
    ld = load_at(steady(2.0), TS, PAYLOAD, 20_000, 5e9, share=0.5)
    assert ld.peak_pps == pytest.approx(2 * DATAGRAMS_PER_S / 120)
    assert ld.of_ceiling == pytest.approx(2e6 / 120 / 20_000)
    assert not ld.within and ld.mean_hops == 2.0


def test_three_hops_need_one_and_a_half_times_the_k_of_two():
    # allowed: half of 20,000 pps = 10,000; 2 hops: 2e6/k <= 1e4 -> k = 200; 3 hops: 300
    two = fit_dilation(steady(2.0), TS, PAYLOAD, 20_000, 5e9, share=0.5)
    three = fit_dilation(steady(3.0), TS, PAYLOAD, 20_000, 5e9, share=0.5)
    assert (two.dilation, three.dilation) == (200, 300)
    assert three.dilation / two.dilation == 1.5
    assert two.within and three.within
    assert two.peak_pps == pytest.approx(10_000)
    # a load already within at the per-port k keeps it
    assert fit_dilation(steady(2.0), TS, PAYLOAD, 1e6, 5e9).dilation == TS.dilation


def test_on_real_fabrics_clos_needs_about_one_and_a_half_zcubes_k():
    from zcube_lab.emulator.replay.driver import demand_on

    z, c = fabric("zcube"), fabric("clos")
    leaf = {h.name: c.attachments[(h.name, h.interfaces[0].index)].switch for h in c.hosts}
    names = tuple(h.name for h in c.hosts)
    # 8 transfers of 100 ms at once, no two sharing a NIC, every one across Clos's leaves
    pairs: list[tuple[str, str]] = []
    for s in names:
        used = {h for p in pairs for h in p}
        d = next((d for d in names if d not in used | {s} and leaf[d] != leaf[s]), None)
        if s not in used and d is not None:
            pairs.append((s, d))
    assert len(pairs) == 8
    r = Recording(tuple(Transfer(i, "kv", 0.0, s, d, 5e9) for i, (s, d) in enumerate(pairs)), names)
    dz, bz = demand_on(r, z)
    dc, bc = demand_on(r, c)
    assert dz.mean_hops(bz) == 2.0 and dc.mean_hops(bc) == 3.0
    # allowed 1e5 pps; ZCube 8 x 1e6 x 2 / k -> k = 160; Clos 8 x 1e6 x 3 / k -> 240
    kz = fit_dilation(dz, TS, PAYLOAD, 200_000, bz, share=0.5).dilation
    kc = fit_dilation(dc, TS, PAYLOAD, 200_000, bc, share=0.5).dilation
    assert (kz, kc) == (160, 240)


def test_one_k_for_every_fabric_the_largest_any_needs():
    demands = {"zcube": (steady(2.0), 5e9), "clos": (steady(3.0), 5e9)}
    p = choose(demands, TS, PAYLOAD, 20_000, share=0.5)
    assert p.dilation == 300 and p.needed == {"zcube": 200, "clos": 300}
    assert "clos needs k=300" in p.reason and p.warning == ""
    assert all(ld.dilation == 300 and ld.within for ld in p.loads.values())
    assert p.describe()["loads"]["zcube"]["of_ceiling"] == pytest.approx(1 / 3, abs=1e-4)


def test_an_explicit_k_runs_with_a_warning_naming_who_it_leaves_above_the_share():
    demands = {"zcube": (steady(2.0), 5e9), "clos": (steady(3.0), 5e9)}
    p = choose(demands, TS, PAYLOAD, 20_000, explicit=250, share=0.5)
    assert p.dilation == 250 and p.reason.startswith("given")
    assert "clos" in p.warning and "zcube" not in p.warning and "k=300 keeps" in p.warning
    assert choose(demands, TS, PAYLOAD, 20_000, explicit=400, share=0.5).warning == ""
    with pytest.raises(ConfigError, match="at least 120"):  # below the per-port budget's k
        choose(demands, TS, PAYLOAD, 20_000, explicit=60, share=0.5)


def test_a_load_no_k_in_range_carries_is_refused_naming_the_share():
    with pytest.raises(ConfigError, match="even at k=1000"):
        fit_dilation(steady(3.0), TS, PAYLOAD, 100, 5e9, share=0.5)
    # given explicitly it runs, warned
    p = choose({"clos": (steady(3.0), 5e9)}, TS, PAYLOAD, 100, explicit=1000, share=0.5)
    assert "no k within range" in p.warning
    with pytest.raises(ConfigError, match="share"):
        fit_dilation(steady(2.0), TS, PAYLOAD, 100, 5e9, share=0.0)


def test_a_timescale_at_another_k_keeps_its_bytes_and_refuses_a_faster_pace():
    slow = TS.at_dilation(185)
    assert (slow.bandwidth_scale, slow.frame_s, slow.dilation) == (
        TS.bandwidth_scale, TS.frame_s, 185.0,
    )  # fmt: skip
    assert slow.wall_nic_mbps == pytest.approx(12_000 / 185)
    for bad in (100, 1001, math.inf):
        with pytest.raises(ConfigError, match="dilation"):
            TS.at_dilation(bad)


def test_the_ceiling_in_packets_per_second_is_the_measured_one_or_the_default_in_frames():
    from zcube_lab.emulator.lab.datapath_ceiling import (
        DatapathCeiling,
        DatapathResults,
        Measurement,
        ceiling_from,
    )

    res = DatapathResults(
        "m", 2, "2026-12-01T00:00:00+00:00", 30.0, 1,
        (Measurement(1500, 1, 1.0, 90_000), Measurement(1500, 8, 0.9, 75_000),
         Measurement(9000, 1, 2.9, 40_000)),
    )  # fmt: skip
    assert res.total_pps(1500) == 90_000 and res.total_pps(9000) == 40_000
    assert ceiling_from(res, 1500, "m").packets_per_s(1500) == 90_000
    unmeasured = ceiling_from(res, 1500, "another machine")
    assert unmeasured.packets_per_s(1500) == pytest.approx(500e6 / 12_000)
    assert DatapathCeiling(120.0, "x").packets_per_s(1500) == pytest.approx(10_000)


def test_the_replay_config_refuses_a_dilation_outside_the_fine_clock():
    from zcube_lab.core.replay.config import ReplayConfig

    assert ReplayConfig(dilation=185).dilation == 185
    for bad in (0.5, 5000.0):
        with pytest.raises(ConfigError, match="dilation"):
            ReplayConfig(dilation=bad)


def test_zcube_lab_replay_plans_every_fabric_at_one_k_from_the_measured_pps(monkeypatch, tmp_path):
    import argparse

    from zcube_lab.cli.commands import replay as cmd
    from zcube_lab.emulator.lab import datapath_ceiling as dc
    from zcube_lab.emulator.replay.driver import payload_bytes

    path = tmp_path / "datapath.json"
    dc.DatapathResults(
        "m", 2, "2026-12-01T00:00:00+00:00", 30.0, 1, (dc.Measurement(1500, 1, 0.1, 10_000),)
    ).write(path)
    monkeypatch.setattr(dc, "RESULTS_PATH", path)
    monkeypatch.setattr(dc, "machine_id", lambda: "m")
    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)

    def planned(*flags: str):
        args = parser.parse_args(
            [*flags, "--incast", "4", "--fabrics", "zcube,clos", "--bytes", "1e9"]
        )
        return cmd.plan(cmd.config_of(args), None)

    _rec, fabrics, ts, p = planned()
    # an incast goes through its receiver's NIC one transfer at a time: 1.5e9 lab B/s in
    # datagrams of 1,464 B, 2 switches each on ZCube; allowed 0.7 x 10,000 pps
    assert p.needed["zcube"] == math.ceil(2 * 1.5e9 / payload_bytes(1500) / 7_000) == 293
    assert p.needed["clos"] > p.needed["zcube"]  # some of its senders cross 3 switches
    assert ts.dilation == p.dilation == max(p.needed.values())
    assert set(p.loads) == {f.kind for f in fabrics} and all(x.within for x in p.loads.values())
    _rec, _f, ts, p = planned("--dilation", "200")
    assert ts.dilation == 200 and "zcube" in p.warning and "clos" in p.warning
