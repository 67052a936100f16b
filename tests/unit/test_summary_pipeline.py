"""The summary's new figures end to end, as the runner builds them: engine logs and a fake
Prometheus in, summary.json out and back, the report's busiest link read from it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from zcube_lab.core.fabric.builders import build_zcube
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.prometheus.queries import port_counters, server_figures
from zcube_lab.emulator.results.compare.report import busiest_link
from zcube_lab.emulator.results.fabric.linkstats import link_loads
from zcube_lab.emulator.results.fabric.transfers import transfer_figures
from zcube_lab.emulator.results.run.figures import fabric_stats
from zcube_lab.emulator.results.run.summary import RunSummary

OLD = Path(__file__).parent / "data" / "summary-zcube.json"


class Prometheus:
    """Port counters of one busy host uplink (h5 into a1:2): 2.5 MB/s for 2 s, then idle. Raw
    samples only: the totals are their steps."""

    def query(self, promql: str, time: float | None = None) -> list[dict[str, Any]]:
        port = {"switch": "a1", "port": "2", "peer": "h5"}
        if promql == "zcube_port_rx_bytes_total[15s]":
            values = [[990.0 + i, str(v)] for i, v in enumerate([0, 2.5e6, 5e6, 5e6, 5e6])]
            return [{"metric": port, "values": values}]
        return []

    def query_value(self, promql: str, time: float | None = None) -> float | None:
        return None


def test_logs_and_counters_become_summary_figures(tmp_path: Path) -> None:
    fabric, scale = build_zcube(n=4), Scale(nic_mbps=100)
    logs = tmp_path / "logs"
    logs.mkdir()
    pulls = [{"engine_id": "prefill-0", "start": 0.0, "end": t, "ok": True, "bytes": 1_250_000}
             for t in (0.1, 0.12, 1.1)]  # fmt: skip
    (logs / "kv-decode-5.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pulls))
    transfers = transfer_figures(logs, fabric, scale, {"prefill-0": "h0", "decode-5": "h5"})
    prom = Prometheus()
    server = server_figures(prom, 1000.0, 10.0, transfers)
    ports = port_counters(prom, 1000.0, 10.0)
    links = link_loads(fabric, scale, ports, 10.0)
    stats = fabric_stats(fabric, {}, ports.rx_bytes, ports.drops, 1.0, links, ports.peak_window_s)
    old = RunSummary.from_dict(json.loads(OLD.read_text()))
    new = replace(old, server=server, fabric_stats=stats, link_util=links, transfers=transfers)
    new.write(tmp_path)
    back = RunSummary.read(tmp_path)
    assert back.server.kv_xfer_p50_s == pytest.approx(0.12)
    assert back.transfers is not None and back.transfers.kv_pulls_stalled == 1
    # 5 MB in 10 s on a 50 Mb/s port is 8% on average; 2.5 MB/s for one second is 40%
    assert busiest_link(back) == "h5->a1:2 mean 8% peak 40%"
