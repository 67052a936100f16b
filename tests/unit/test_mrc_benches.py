"""The MRC benches' tables (bench/mrc_failover.py, bench/victim_flow.py) from made-up pulls:
no lab, only the arithmetic that turns pulls into rows."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import mrc_failover, victim_flow
from zcube_lab.emulator.probes.cutprobe import CutResult


def _cut(seconds: float, cut_wall: float | None, **pull: object) -> CutResult:
    return CutResult({"ok": True, "checksum_ok": True, "seconds": seconds, "retired": 4, **pull},
                     "a0-b1", 1, 0, cut_wall=cut_wall)  # fmt: skip


def test_failover_is_measured_from_the_cut_to_the_last_retransmission() -> None:
    clean = [_cut(2.0, None), _cut(2.2, None)]
    cut = [_cut(2.5, 100.0, first_bad_wall=100.06, last_retx_wall=100.09)]
    row = mrc_failover.row("roft-2planes", "mrc", clean, cut)
    assert row[2:5] == ["1/1", "60", "90"]
    assert row[7] == "0.40"  # 2.5 s against the clean median 2.1 s
    tcp = mrc_failover.row("zcube", "tcp-ff", clean, [_cut(2.3, 100.0)])
    assert tcp[3:5] == ["-", "-"] and mrc_failover.since_cut_ms(cut[0], "nothing") is None


def test_the_victim_row_sets_its_throughput_in_the_incast_against_its_solo_figure() -> None:
    mib = 2**20
    lab = {
        "solo": {"ok": True, "bytes": 4 * mib, "seconds": 0.4},
        "victim": {"ok": True, "bytes": 4 * mib, "seconds": 0.8, "skipped": 2, "retired": 0},
        "incast": [{"ok": True, "seconds": s, "retired": 1, "skipped": 3} for s in (1.0, 2.5)],
        "pauses": 12,
    }
    row = victim_flow.row("zcube", "mrc", "lossless", [lab])
    assert row[3:6] == ["83.9", "41.9", "0.50"]
    assert row[6:] == ["1/1", "2.50", "12", "2", "6"]
    assert victim_flow.mbps({"ok": False}) is None
