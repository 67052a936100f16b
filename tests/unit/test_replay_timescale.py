"""The fine time scale's arithmetic against hand answers (issue 45 item 1)."""

from __future__ import annotations

import math

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.replay.timescale import (
    chip_port_share_bytes,
    derive,
    drain_us,
    parse_frame_us,
)


def test_a_2us_frame_on_zcube_ports_gives_scale_33_and_k_120():
    # 1500 B = 12,000 bits in 2 µs on a 200 Gb/s port: S = 200e9 * 2e-6 / 12,000 = 33.33;
    # the 400 Gb/s NIC is then 12,000 Mb/s modelled, 120 x the 100 Mb/s wall budget.
    ts = derive(2.0, nic_gbps=400, slowest_port_gbps=200, mtu=1500)
    assert ts.bandwidth_scale == pytest.approx(100 / 3)
    assert ts.nic_mbps == pytest.approx(12_000)
    assert ts.dilation == 120
    assert ts.wall_nic_mbps == pytest.approx(100)
    assert ts.frame_us_at(400) == pytest.approx(1.0)  # a full-rate port's frame is half
    assert ts.wall_frames_per_s() == pytest.approx(1 / (2e-6 * 120))


def test_the_default_lab_is_the_720us_rung_at_k_1():
    # 9000 B on a 400 Gb/s NIC emulated at 100 Mb/s: S = 4000, a 720 µs frame, no dilation.
    ts = derive(720.0, nic_gbps=400, slowest_port_gbps=400, mtu=9000)
    assert ts.bandwidth_scale == pytest.approx(4000)
    assert ts.nic_mbps == pytest.approx(100)
    assert ts.dilation == 1


def test_k_is_the_smallest_whole_factor_within_the_wall_budget_and_the_ceiling():
    ts = derive(7.0, 400, 200, wall_nic_mbps=100)
    assert ts.nic_mbps == pytest.approx(400e3 / (200e9 * 7e-6 / 12_000))
    assert ts.dilation == math.ceil(ts.nic_mbps / 100)
    lower = derive(7.0, 400, 200, wall_nic_mbps=100, ceiling_mbps=50)
    assert lower.dilation == math.ceil(ts.nic_mbps / 50)


def test_a_frame_finer_than_the_machine_carries_is_refused_with_the_finest_it_can():
    # 0.5 µs needs S = 8.33, a 48,000 Mb/s NIC, k = 480 > 100. With k = 100 the finest scale is
    # 400e3 / (100 * 100) = 40, a frame of 12,000 * 40 / 200e9 = 2.4 µs.
    with pytest.raises(ConfigError) as err:
        derive(0.5, 400, 200, max_dilation=100)
    assert "at least 2.4 µs" in str(err.value)
    assert "480" in str(err.value)


def test_a_frame_finer_than_the_real_ports_own_is_refused():
    # 1500 B at 200 Gb/s lasts 0.06 µs: the lab cannot be finer than the fabric.
    with pytest.raises(ConfigError, match=r"0\.06 µs"):
        derive(0.01, 400, 200)


def test_chip_share_of_a_200g_port_drains_in_26_us():
    share = chip_port_share_bytes("51.2t", 200)
    assert share == pytest.approx(165e6 * 200 / 51_200)
    assert drain_us(share, 200) == pytest.approx(25.78, abs=0.01)
    with pytest.raises(ConfigError, match="chip"):
        chip_port_share_bytes("12.8t", 200)


def test_thresholds_become_whole_frames_and_below_two_frames_are_refused_naming_the_scale():
    ts = derive(2.0, 400, 200)
    # 644,531 real bytes / 33.33 = 19,336 lab bytes = 12 frames of 1500 (rounded down).
    assert ts.threshold_frames(chip_port_share_bytes("51.2t", 200)) == 12
    assert ts.threshold_frames(1_000_000) == 20  # the draft's 1 MB: 30,000 lab bytes
    with pytest.raises(ConfigError) as err:
        ts.threshold_frames(10_000)  # the draft's 10 KB: 300 lab bytes
    # a scale of at most 10,000 / (2 * 1500) = 3.333 represents it
    assert "at most 3.333" in str(err.value)


def test_resolution_text_takes_presets_and_units():
    assert parse_frame_us("finest") == 2.0
    assert parse_frame_us("70us") == 70.0
    assert parse_frame_us("0.5ms") == 500.0
    assert parse_frame_us("7") == 7.0
    for bad in ("fast", "-3us", "0"):
        with pytest.raises(ConfigError, match="resolution"):
            parse_frame_us(bad)
