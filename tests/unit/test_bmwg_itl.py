"""§10.2 (ITL characterization and tail latency) worked out before any lab: gaps from token
stamps, their quantiles, jitter and stall share against hand answers, a trial's figures from a
run's requests.jsonl rows, the workload, the comparison and `bmwg list`
(zcube_lab.core.bmwg.itl, zcube_lab.emulator.bmwg.itl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bmwg_itl
from bench.bmwg_tables import _cell, _table
from zcube_lab.cli import main
from zcube_lab.core.bmwg import catalogue as cat
from zcube_lab.core.bmwg import itl, report
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.bmwg.trials import HIGHER, OUT_OF_REACH, WITHIN
from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.bmwg import itl as live102
from zcube_lab.emulator.bmwg.live import estimate_wall_s
from zcube_lab.workloads.profiles import load_profile


def test_gaps_are_the_differences_of_consecutive_token_stamps() -> None:
    assert itl.gaps_of([1.000, 1.030, 1.061, 1.150]) == pytest.approx([0.030, 0.031, 0.089])
    assert itl.gaps_of([2.0]) == [] and itl.gaps_of([]) == []


def test_quantiles_of_a_hundred_gaps_by_hand() -> None:
    # gaps of 1..100 ms: linear interpolation between order statistics at (n - 1) q
    gaps = [k / 1000 for k in range(1, 101)]
    f = itl.itl_figures(gaps)
    assert f["ITL_p50_ms"] == pytest.approx(50.5)  # between the 50th and 51st
    assert f["ITL_p90_ms"] == pytest.approx(90.1)  # 99 x 0.9 = 89.1: 90 + 0.1
    assert f["ITL_p99_ms"] == pytest.approx(99.01)
    assert f["ITL_p999_ms"] == pytest.approx(99.901)
    assert f["ITL_max_ms"] == pytest.approx(100.0)
    assert f["ITL_mean_ms"] == pytest.approx(50.5)
    # the sample stdev of 1..100 is sqrt(100 x 101 / 12) = 29.011
    assert f["ITL_stdev_ms"] == pytest.approx(29.0115, abs=1e-3)
    assert f["ITL_p99_over_p50"] == pytest.approx(99.01 / 50.5, abs=1e-4)
    # stalls: above 2 x 50.5 = 101 ms none; the draft's > 100 ms none (100 is not above)
    assert f["stall_threshold_ms"] == pytest.approx(101.0)
    assert f["stall_share"] == 0.0 and f["stall_events"] == 0
    assert f["itl_samples"] == 100


def test_stalls_are_the_gaps_above_twice_the_median_and_the_draft_s_above_100_ms() -> None:
    # 95 steps of 30 ms and 5 delayed ones: 61 ms (just above 2 x 30), 60 ms (not above),
    # 150, 250 and 40 ms
    gaps = [0.030] * 95 + [0.061, 0.060, 0.150, 0.250, 0.040]
    f = itl.itl_figures(gaps)
    assert f["ITL_p50_ms"] == pytest.approx(30.0)
    assert f["stall_share"] == pytest.approx(3 / 100)  # 61, 150, 250
    assert f["stall_events"] == 2  # 150 and 250
    assert f["ITL_max_ms"] == pytest.approx(250.0)
    assert itl.stall_share([], 0.1) is None
    assert itl.stall_share([0.1, 0.2, 0.3, 0.4], 0.2) == 0.5


def test_no_gaps_give_no_figures_but_zero_events() -> None:
    f = itl.itl_figures([])
    assert f["ITL_p50_ms"] is None and f["ITL_p999_ms"] is None and f["ITL_max_ms"] is None
    assert f["stall_share"] is None and f["ITL_stdev_ms"] is None
    assert f["itl_samples"] == 0 and f["stall_events"] == 0


def _rec(gaps: list[float], ttft: float = 0.5, outcome: str = "ok") -> dict:
    return {"outcome": outcome, "ttft_s": ttft, "e2e_s": ttft + sum(gaps),
            "output_tokens": len(gaps) + 1, "itl_s": gaps}  # fmt: skip


def test_a_trial_pools_every_gap_of_every_completed_request_and_takes_tpot_per_request() -> None:
    records = [
        _rec([0.030, 0.030, 0.030]),  # TPOT 30 ms
        _rec([0.040, 0.050]),  # TPOT 45 ms
        _rec([0.9, 0.9], outcome="cancelled"),  # not completed: left out
    ]
    f = itl.trial_figures({"trustworthy": True}, records)
    assert f["itl_samples"] == 5
    # pooled 30, 30, 30, 40, 50: p50 30, p90 at 3.6 -> 40 + 0.6 x 10 = 46
    assert f["ITL_p50_ms"] == pytest.approx(30.0)
    assert f["ITL_p90_ms"] == pytest.approx(46.0)
    assert f["ITL_max_ms"] == pytest.approx(50.0)
    assert f["stall_share"] == 0.0  # nothing above 60 ms
    assert f["TPOT_p50_ms"] == pytest.approx(37.5)  # the median of 30 and 45
    assert f["requests"] == 2 and f["untrusted"] == 0
    assert f["full_output_share"] == 0.0  # neither carried 512 tokens
    assert itl.trial_figures({"trustworthy": False}, records)["untrusted"] == 1
    assert itl.tpot_of({"e2e_s": 1.0, "ttft_s": 0.2, "output_tokens": 1}) is None


def test_the_cdf_points_end_at_the_largest_gap_and_rise() -> None:
    pts = itl.cdf_points([0.010, 0.020, 0.030, 0.040], points=4, tail=False)
    assert pts == [[10.0, 0.25], [20.0, 0.5], [30.0, 0.75], [40.0, 1.0]]
    # 10,000 gaps of 1..10,000 µs: the tail points are the order statistics at those shares
    tail = dict((s, ms) for ms, s in itl.cdf_points([k / 1e6 for k in range(1, 10001)], 4))
    assert tail[0.999] == 9.99 and tail[0.9999] == 9.999 and tail[0.5] == 5.0
    assert tail[1.0] == 10.0 and len(tail) == 4 + 18
    assert itl.cdf_points([]) == []


def test_the_workload_is_long_output_requests_at_the_rate(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(itl.profile(1.5)))
    p = load_profile(str(path))
    assert p.output.min == p.output.max == itl.OUTPUT_TOKENS == 512
    assert p.prompt.min == p.prompt.max == itl.PROMPT_TOKENS
    assert p.arrival.rate == 1.5 and p.prefix_cache_hit_rate == 0.0
    with pytest.raises(ConfigError, match="rate"):
        itl.profile(0)
    with pytest.raises(ConfigError, match="trial_seconds"):
        itl.check_trial_seconds(2)


def test_the_parameters_are_printed_beside_the_draft_s() -> None:
    rows = {r[0]: r for r in itl.parameter_rows(2, 15, 20, 60, 1.0)}
    assert "2,048 output tokens" in rows["requests"][1] and "512 output" in rows["requests"][2]
    assert rows["trials"][1:] == ("20 x 60 s", "2 x 15 s")
    assert "100 ms" in rows["stall"][1]
    assert rows["samples"][2] == "~7,665 a trial, ~15,330 over the trials"  # 1 x 15 x 511


def test_the_wall_estimate_counts_every_run_with_its_drain() -> None:
    sec = live102.section(BmwgConfig(trial_seconds=15, trials=2))
    one = estimate_wall_s(1, 1, 1, 15, sec.drain_s)
    assert sec.drain_s == live102.DRAIN_S and one > 15 + live102.DRAIN_S
    assert estimate_wall_s(1, 3, 2, 15, sec.drain_s) == pytest.approx(6 * one)


def _srow(fabric: str, trial: int, p99: float, untrusted: int = 0) -> dict:
    figs = {"ITL_p50_ms": 30.0 + trial * 0.1, "ITL_p99_ms": p99, "ITL_p999_ms": p99 + 5,
            "stall_share": 0.01, "untrusted": untrusted}  # fmt: skip
    return {"section": "10.2", "case": itl.case_label(1.0), "params": {"rate": 1.0},
            "fabric": fabric, "trial": trial, "figures": figs}  # fmt: skip


def test_the_comparison_uses_the_headline_figures_and_the_trials_spread() -> None:
    assert report.HEADLINE["10.2"] == ("ITL_p50_ms", "ITL_p99_ms", "ITL_p999_ms", "stall_share")
    rows = [_srow("zcube", 0, 40.0), _srow("zcube", 1, 40.2),
            _srow("roft", 0, 33.0), _srow("roft", 1, 33.1),
            _srow("clos", 0, 36.0), _srow("clos", 1, 44.0)]  # fmt: skip
    comp = report.compare(report.summarize(rows))
    by = {(c["figure"], c["versus"]): c["verdict"] for c in comp}
    assert by[("ITL_p99_ms", "roft")] == HIGHER
    assert by[("ITL_p99_ms", "clos")] == WITHIN
    assert by[("ITL_p50_ms", "roft")] == WITHIN
    spoiled = [*rows[:2], _srow("roft", 0, 33.0, untrusted=1), _srow("roft", 1, 33.1)]
    comp = report.compare(report.summarize(spoiled))
    assert {c["verdict"] for c in comp} == {OUT_OF_REACH}


def test_10_2_is_run_by_bmwg_run(capsys) -> None:
    assert cat.test_of("10.2").runner and "10.2" in cat.RUNNERS
    assert main(["bmwg", "list"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("10.2"))
    assert "  run  " in line
    assert main(["bmwg", "run", "10.2", "--trial-seconds", "1"]) == 2  # a live run's minimum
    assert "trial_seconds" in capsys.readouterr().err


def _doc(rows: list[dict]) -> dict:
    summary = report.summarize(rows)
    return {"sections": ["10.2"], "fabrics": ["zcube", "roft", "clos"], "trials": 2,
            "trial_seconds": 15, "draft_trials": {"10.2": [20, 60.0]}, "rates": [1.0],
            "rows": rows, "summary": summary, "comparison": report.compare(summary)}  # fmt: skip


def test_the_page_s_section_has_the_parameters_a_row_per_fabric_and_says_what_sets_the_gaps(
) -> None:  # fmt: skip
    rows = [_srow("zcube", 0, 40.0), _srow("zcube", 1, 40.2),
            _srow("roft", 0, 40.1), _srow("roft", 1, 40.0)]  # fmt: skip
    d = _doc(rows)
    text = "\n".join(bmwg_itl.itl_section(d, _table, _cell))
    assert "| trials | 20 x 60 s | 2 x 15 s |" in text
    assert "| 1 req/s | ZCube | 30.1 ± 0.635 | - | 40.1 ± 1.27 |" in text
    assert "| 1 req/s | ROFT |" in text and "2 of 2 |" in text
    assert "decode step" in text and "measured tie" in text
    assert "All 4 comparisons" in text  # roft only: 4 headline figures, all within
    (line,) = bmwg_itl.itl_sentences([d])
    assert "p50 spans 30.1-30.1 ms" in line and "4 of 4 comparisons" in line
    assert bmwg_itl.itl_sentences([]) == []


def test_the_cdf_graph_draws_one_line_a_trial_labelled_once_a_fabric() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [{**_srow(f, t, 40.0), "itl_cdf_ms": [[30.0, 0.5], [45.0, 1.0]]}
            for f in ("zcube", "roft") for t in (0, 1)]  # fmt: skip
    fig, ax = plt.subplots()
    bmwg_itl.draw_cdf(ax, _doc(rows))
    assert len(ax.lines) == 4
    assert [t.get_text() for t in ax.legend().get_texts()] == ["ZCube", "ROFT"]
    plt.close(fig)


def test_an_untrusted_run_puts_the_verdict_out_of_reach_and_the_page_says_why_and_the_raw_tie(
) -> None:  # fmt: skip
    cpu_kv, kv = ["cpu1 above 95% busy in 26%", "KV pulls: p50 1.52x"], ["KV pulls: p50 1.82x"]
    rows = [_srow("zcube", 0, 40.0), _srow("zcube", 1, 40.2),
            {**_srow("roft", 0, 40.1, untrusted=1), "reasons": cpu_kv},
            {**_srow("roft", 1, 40.0, untrusted=1), "reasons": kv}]  # fmt: skip
    d = _doc(rows)
    assert bmwg_itl.untrusted_kinds(d) == {"KV pulls": 2, "cpu": 1}
    words = bmwg_itl.verdict_words(d)
    assert "0 of 4 comparisons within the trials' spread, 4 out of reach" in words
    assert "KV pulls (2 trials); cpu (1 trial)" in words
    assert "(not a verdict), 4 of 4 comparisons are within" in words
    (line,) = bmwg_itl.itl_sentences([d])
    assert "0 of 4 comparisons" in line and "4 out of reach" in line and "put 4 of 4" in line
