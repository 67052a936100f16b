"""The default comparison's table in RESULTS (bench/default_table.py): counts of runs trusted
and requests, medians over trustworthy runs only, differences against the baseline; a map cell
whose fabrics ran a repeat on different seeds is refused (bench/map_cell.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.default_table import default_table, spread


def _run(fabric: str, ttft: float, trusted: bool = True) -> dict:
    return {"run": f"x-{fabric}", "fabric": fabric, "trustworthy": trusted, "reasons": [],
            "requests": 90, "completed": 90,
            "figures": {"TTFT p99 client (s)": ttft, "switch queue drops": 0.0}}  # fmt: skip


def test_medians_of_trusted_runs_against_the_baseline(tmp_path: Path) -> None:
    data = {
        "baseline": "roft",
        "labels": ["TTFT p99 client (s)", "switch queue drops", "KV pulls stalled"],
        "runs": [_run("zcube", 1.1), _run("roft", 1.0), _run("zcube", 1.3), _run("roft", 1.0),
                 _run("zcube", 9.0, trusted=False)],
    }  # fmt: skip
    path = tmp_path / "default.json"
    path.write_text(json.dumps(data))
    lines = default_table(path)
    assert lines[0] == "| metric | ZCube | ROFT | ZCube vs ROFT |"
    assert "| trustworthy runs | 2 of 3 | 2 of 2 | |" in lines
    assert "| requests in each run | 90 sent, 90 completed | 90 sent, 90 completed | |" in lines
    # the untrusted 9.0 is left out: median of 1.1 and 1.3
    assert "| TTFT p99 client (s) | 1.2 [1.1-1.3] | 1 | +20.0% |" in lines
    assert "| switch queue drops | 0 | 0 |  |" in lines
    assert not any(line.startswith("| KV pulls stalled") for line in lines)  # no run has it


def test_spread_folds_equal_values() -> None:
    assert spread([2.0, 2.0]) == "2"
    assert spread([14520.0, 14600.0, 14500.0]) == "14,520 [14,500-14,600]"
    assert spread([]) == "-"


def test_a_cell_whose_fabrics_ran_a_repeat_on_different_seeds_is_refused() -> None:
    from bench.map_cell import check_seeds

    check_seeds({1: {"a-zcube-r1": 1, "a-roft-r1": 1}, 2: {"a-zcube-r2": 2, "a-roft-r2": 2}})
    with pytest.raises(SystemExit) as e:
        check_seeds({1: {"a-zcube-r1": 1, "b-roft-r1": 7}})
    assert "repeat 1" in str(e.value) and "seed 7: b-roft-r1" in str(e.value)


def test_a_kept_comparison_carries_its_runs_pauses_and_ep_victims() -> None:
    from types import SimpleNamespace

    from bench.default_cell import VICTIM_LABELS, _victim_figures

    lossless = SimpleNamespace(victims=SimpleNamespace(pauses=12, ep_victims=3))
    assert _victim_figures(lossless) == dict(zip(VICTIM_LABELS, (12, 3), strict=True))
    assert set(_victim_figures(SimpleNamespace(victims=None)).values()) == {None}


def test_the_victim_flow_table_keeps_the_victims_share_of_its_solo_rate() -> None:
    from bench.victim_flow import HEADS, table_lines

    def pull(seconds: float) -> dict:
        return {"ok": True, "bytes": 1_000_000, "seconds": seconds}

    lab = {"solo": pull(0.1), "victim": pull(0.4), "incast": [pull(2.0), pull(3.0)], "pauses": 7}
    lines = table_lines([{"key": ["zcube", "tcp-ecmp", "lossless"], "labs": [lab]}])
    assert lines[0] == "| " + " | ".join(HEADS) + " |"
    # 80 Mb/s alone, 20 during the incast: kept 0.25; the incast ends with its slowest pull
    assert (
        lines[2] == "| zcube | tcp-ecmp | lossless | 80.0 | 20.0 | 0.25 | 1/1 | 3.00 | 7 | - | - |"
    )
