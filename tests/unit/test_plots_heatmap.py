"""The report's link heatmap rows (zcube_lab.emulator.results.compare.plots.heatmap_rows) from a
synthetic
series.json: switch transmit and host transmit rows, nothing else."""

from __future__ import annotations

import pytest

from zcube_lab.emulator.results.compare.plots import heatmap_rows


def _series(name: str, switch: str, port: str, peer: str, values: list[float]) -> dict:
    metric = {"__name__": name, "switch": switch, "port": port, "peer": peer}
    return {"metric": metric, "values": [[2.0 * i, str(v)] for i, v in enumerate(values)]}


def test_rows_are_both_directions_of_host_links_and_switch_transmit_of_trunks() -> None:
    data = {
        "series": [
            _series("zcube_port_tx_bytes_total", "a1", "2", "h5", [0, 2.5e6, 5e6]),
            _series("zcube_port_rx_bytes_total", "a1", "2", "h5", [0, 10e6, 10e6]),
            _series("zcube_port_rx_bytes_total", "a0", "5", "b0", [0, 1e6, 2e6]),  # trunk rx
            _series("zcube_client_ttft_seconds_bucket", "a0", "5", "b0", [0, 1]),
        ]
    }
    rows = dict(heatmap_rows(data, {"a1:2": 50e6}))
    assert set(rows) == {"a1:2>h5", "h5>a1:2"}
    assert rows["a1:2>h5"] == [pytest.approx(0.2), pytest.approx(0.2)]  # 10 Mb/s of 50
    assert rows["h5>a1:2"] == [pytest.approx(0.8), 0.0]


def test_the_colour_scale_tops_at_the_observed_peak() -> None:
    from zcube_lab.emulator.results.compare.plots import heatmap_scale

    assert heatmap_scale([[0.01, 0.03], [0.02]]) == pytest.approx(0.03)
    assert heatmap_scale([[0.0]]) == 0.01  # an idle run: the floor, not a division by zero
    assert heatmap_scale([[0.5, 1.7]]) == 1.0  # a burst above the rate caps at full
    assert heatmap_scale([]) == 0.01
