"""Link utilization in both directions, with peaks over scrape-interval windows
(zcube_lab.emulator.results.fabric.linkstats), from synthetic port counters."""

from __future__ import annotations

import pytest

from zcube_lab.core.fabric.builders import build_zcube
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.results.fabric.linkstats import (
    SwitchPortTraffic,
    busiest,
    link_directions,
    link_loads,
    peak_rate,
    verdict_busiest_link,
    window_rates,
)
from zcube_lab.emulator.results.run.figures import fabric_stats
from zcube_lab.emulator.results.run.summary import LinkLoad
from zcube_lab.emulator.verdict.judge import BusiestLink


def test_every_link_is_named_both_ways_with_its_counter() -> None:
    fabric = build_zcube(n=4)
    dirs = {name: (kind, counter, port) for name, kind, counter, port, _ in
            link_directions(fabric, Scale(nic_mbps=100))}  # fmt: skip
    assert len(dirs) == 2 * len(fabric.links)
    # h5 = server 1, rank 1: eth0 on a1 port 2, eth1 on b1 port 2
    assert dirs["a1:2->h5"] == ("down", "tx", ("a1", 2))
    assert dirs["h5->a1:2"] == ("up", "rx", ("a1", 2))
    assert dirs["a0:5->b0:5"] == ("trunk", "tx", ("a0", 5))
    assert dirs["b0:5->a0:5"] == ("trunk", "tx", ("b0", 5))


def test_window_rates_merge_a_stale_scrape_but_not_an_idle_stretch() -> None:
    # steady 100/s, one scrape saw the counter before the controller polled again
    stale = [(0, 0), (1, 100), (2, 100), (3, 300), (4, 400)]
    assert window_rates(stale) == [100.0, 100.0, 100.0]
    # idle, then one busy second: the busy second is the peak
    idle = [(0, 0), (1, 0), (2, 0), (3, 500)]
    assert peak_rate(idle) == 500.0
    # uneven scrape times: each interval by its own length; a reset gives no rate
    assert window_rates([(0, 0), (0.5, 100), (2.5, 300), (3.5, 50)]) == [200.0, 100.0]
    assert peak_rate([(0, 10)]) is None


def test_link_loads_count_the_host_direction_and_name_the_busiest_link() -> None:
    fabric, scale = build_zcube(n=4), Scale(nic_mbps=100)  # every link 50 Mb/s
    window = 10.0
    ports = SwitchPortTraffic(
        # a1:2 sent 6.25 MB to h5 (10%); h5 sent 25 MB into a1:2 (40%); a0:5 sent 12.5 MB (20%)
        tx_bytes={("a1", 2): 6.25e6, ("a0", 5): 12.5e6},
        rx_bytes={("a1", 2): 25e6},
        drops=0.0,
        tx_peak_bytes_per_s={("a1", 2): 6.25e6 / 2, ("a0", 5): 6.25e6},  # 50%, 100%
        rx_peak_bytes_per_s={("a1", 2): 5e6},  # 80%
        peak_window_s=1.0,
    )
    loads = link_loads(fabric, scale, ports, window)
    assert loads["h5->a1:2"].mean == pytest.approx(0.4)
    assert loads["h5->a1:2"].peak == pytest.approx(0.8)
    assert loads["a1:2->h5"].mean == pytest.approx(0.1)
    assert loads["a0:5->b0:5"].peak == pytest.approx(1.0)
    assert loads["b0:5->a0:5"].mean == 0.0 and loads["b0:5->a0:5"].peak is None
    util = {("a1", 2): 0.1, ("a0", 5): 0.2}
    stats = fabric_stats(fabric, util, ports.rx_bytes, 0.0, 25e6, loads, ports.peak_window_s)
    d = stats.directed
    assert d is not None
    # the transmit-only figure misses the busiest direction; the directed one names it
    assert stats.utilization.link_util_max == pytest.approx(0.2)
    assert (d.busiest_link, d.busiest_link_util_mean) == ("h5->a1:2", pytest.approx(0.4))
    assert d.busiest_link_util_peak == pytest.approx(0.8)
    assert (d.peak_link, d.peak_link_util) == ("a0:5->b0:5", pytest.approx(1.0))
    assert d.host_uplink_util_max == pytest.approx(0.4)
    assert d.host_downlink_util_max == pytest.approx(0.1)
    assert d.directed_links == 2 * len(fabric.links) and d.util_peak_window_s == 1.0
    assert fabric_stats(fabric, util, {}, 0.0, 1.0).directed is None
    # the verdict refers to the same link, with its rate and figures
    named = verdict_busiest_link(fabric, scale, loads)
    assert named == BusiestLink("h5->a1:2", 50.0, pytest.approx(40.0), pytest.approx(0.8), 0.4)
    assert named is not None and named.iface == d.busiest_link
    assert verdict_busiest_link(fabric, scale, {}) is None


def test_the_busiest_link_is_the_highest_mean_share_then_the_highest_peak() -> None:
    """Shares of each link's own rate: a link with the higher mean wins over one with a higher
    peak; between equal means the higher peak wins, and a link without a peak counts as 0."""
    loads = {
        "a": LinkLoad(mean=0.3, peak=0.5),
        "b": LinkLoad(mean=0.3, peak=0.9),
        "c": LinkLoad(mean=0.1, peak=1.0),
        "d": LinkLoad(mean=0.3, peak=None),
    }
    assert busiest(loads) == ("b", loads["b"])
    assert busiest({"d": loads["d"], "a": loads["a"]}) == ("a", loads["a"])
    assert busiest({}) is None
