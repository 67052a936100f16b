"""The summary's newer sections (links by direction, exact transfer times) round-trip, and a
summary without them is written back without them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from zcube_lab.emulator.results.run.summary import (
    DirectedUtilization,
    LinkLoad,
    RunSummary,
    TransferFigures,
)

OLD = Path(__file__).parent / "data" / "summary-zcube.json"


def _transfers() -> TransferFigures:
    return TransferFigures(
        kv_pulls=100, kv_attempts_failed=1, kv_xfer_p50_s=0.05, kv_xfer_p90_s=0.08,
        kv_xfer_p99_s=1.05, kv_xfer_max_s=1.07, kv_xfer_bytes_p50=480e3, kv_xfer_bytes_p90=9e5,
        kv_xfer_bytes_p99=2e6, kv_xfer_bytes_max=2.1e6, kv_xfer_ratio_p50=1.1,
        kv_xfer_ratio_p90=1.3, kv_xfer_ratio_p99=20.0, kv_xfer_ratio_max=22.0, kv_pulls_rated=100,
        kv_pulls_stalled=2, kv_stalled_max_s=1.07, alltoall_exchanges=0, alltoall_p50_s=None,
        alltoall_p90_s=None, alltoall_p99_s=None, alltoall_max_s=None,
        alltoall_bytes_sent_p50=None, alltoall_bytes_received_p50=None,
        alltoall_exchange_failures=None,
    )  # fmt: skip


def test_new_sections_round_trip_and_old_keys_stay_first(tmp_path: Path) -> None:
    old = RunSummary.from_dict(json.loads(OLD.read_text()))
    directed = DirectedUtilization(
        busiest_link="h5->a1:2", busiest_link_util_mean=0.4, busiest_link_util_peak=0.9,
        peak_link="a0:5->b0:5", peak_link_util=1.0, host_uplink_util_max=0.4,
        host_downlink_util_max=0.1, directed_links=64, util_peak_window_s=1.0,
    )  # fmt: skip
    new = replace(
        old,
        fabric_stats=replace(old.fabric_stats, directed=directed),
        link_util={"h5->a1:2": LinkLoad(0.4, 0.9), "a1:2->h5": LinkLoad(0.1, None)},
        transfers=_transfers(),
    )
    new.write(tmp_path)
    back = RunSummary.read(tmp_path)
    assert back == new
    data = json.loads((tmp_path / "summary.json").read_text())
    stats_keys = list(data["fabric_stats"])
    old_keys = list(json.loads(OLD.read_text())["fabric_stats"])
    assert stats_keys[: len(old_keys)] == old_keys  # new keys only after the old ones
    assert data["fabric_stats"]["busiest_link"] == "h5->a1:2"
    assert data["link_util"]["a1:2->h5"] == {"mean": 0.1, "peak": None}
    assert data["transfers"]["kv_pulls_stalled"] == 2


def test_an_old_summary_has_none_of_the_new_sections() -> None:
    old = RunSummary.from_dict(json.loads(OLD.read_text()))
    assert old.fabric_stats.directed is None
    assert old.link_util is None and old.transfers is None
    assert "transfers" not in old.to_dict() and "busiest_link" not in old.to_json()
