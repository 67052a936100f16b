"""The time-resolution arithmetic against hand-computed values (issue 33 item 6)."""

import pytest

from zcube_lab.core.fabric.resolution import chip_share_s, real_shares_s, resolution, table


def test_jumbo_frame_at_a_half_rate_port() -> None:
    r = resolution(50.0, 9000)
    assert r.frame_s == pytest.approx(1.44e-3)  # 72,000 bits / 50e6 b/s
    assert r.queue_s == pytest.approx(92.16e-3)  # 64 x 1.44 ms


def test_standard_frame_at_the_nic() -> None:
    r = resolution(100.0, 1500)
    assert r.frame_s == pytest.approx(0.12e-3)  # 12,000 bits / 100e6 b/s
    assert r.queue_s == pytest.approx(7.68e-3)


def test_dilation_stretches_wall_time_only() -> None:
    one, sixteen = resolution(100.0, 9000), resolution(100.0, 9000, dilation=16)
    assert sixteen.frame_s == one.frame_s == pytest.approx(0.72e-3)
    assert sixteen.queue_wall_s == pytest.approx(16 * 46.08e-3)


def test_real_share_is_tens_of_microseconds() -> None:
    assert chip_share_s(42e6, 6400.0) == pytest.approx(52.5e-6)  # 336 Mbit / 6.4 Tb/s
    assert chip_share_s(165e6, 51_200.0) == pytest.approx(25.78e-6, rel=1e-3)
    assert all(10e-6 < s < 100e-6 for s in real_shares_s().values())


def test_one_lab_frame_spans_many_real_shares() -> None:
    assert resolution(50.0, 9000).times_real(52.5e-6) == pytest.approx(1.44e-3 / 52.5e-6)


def test_table_covers_every_combination() -> None:
    assert len(table(rates=(100.0, 50.0), mtus=(1500, 9000), dilations=(1.0, 2.0))) == 8


@pytest.mark.parametrize("args", [(0.0, 1500), (100.0, 0), (100.0, 1500, 0.5)])
def test_refuses_nonsense(args: tuple) -> None:
    with pytest.raises(ValueError):
        resolution(*args)


def test_the_bench_table_prints_the_hand_computed_rows() -> None:
    from bench.time_resolution import lines

    rows = "\n".join(lines())
    assert "| 50 Mb/s | 9000 | 1 | 1.44 | 92.16 |" in rows
    assert "Tomahawk 2 (42 MB, 6.4 Tb/s): 52.5 µs" in rows
