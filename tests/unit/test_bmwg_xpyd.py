"""§6.2 (xPyD ratio optimization) worked out before any lab: the splits the placement allows and
the draft's shares mapped onto them, each split's knee and offered load, the workload, a
trial's figures and its SLO check, the best split per fabric, and the CLI's checks
(zcube_lab.core.bmwg.xpyd, zcube_lab.emulator.bmwg.xpyd)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from zcube_lab.cli import main
from zcube_lab.core.bmwg import catalogue as cat
from zcube_lab.core.bmwg import report
from zcube_lab.core.bmwg import xpyd as x62
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.bmwg import xpyd as live62
from zcube_lab.emulator.bmwg.live import RUN_OVERHEAD_S, estimate_wall_s
from zcube_lab.workloads.profiles import load_profile


def test_allowed_splits_are_whole_servers_leaving_one_of_each_role() -> None:
    assert x62.allowed(16, 2) == (2, 4, 6, 8, 10, 12, 14)
    assert x62.allowed(16, 4) == (4, 8, 12)
    with pytest.raises(ConfigError, match="two whole servers"):
        x62.allowed(4, 4)


def test_the_draft_s_shares_of_12_nodes_map_to_the_nearest_allowed_count() -> None:
    # 1/12, 2/12 of 16 = 1.33, 2.67 -> 2; 3/12 -> 4; 4/12 = 5.33 -> 6; 6/12 -> 8;
    # 8/12 = 10.67 -> 10; 10/12 = 13.33, 11/12 = 14.67 -> 14
    assert x62.draft_splits(16, 2) == (2, 4, 6, 8, 10, 14)
    assert [s.label for s in x62.splits("", 16, 2)] == [
        "2P14D", "4P12D", "6P10D", "8P8D", "10P6D", "14P2D",
    ]  # fmt: skip
    assert x62.quick(16, 2) == (4, 8, 12)


def test_splits_from_text_keep_order_drop_repeats_and_refuse_what_the_placement_cannot() -> None:
    got = x62.splits("12,4,4", 16, 2)
    assert [(s.prefill, s.decode, s.prefill_servers) for s in got] == [(12, 4, 6), (4, 12, 2)]
    for bad in ("3", "16", "0", "a", ","):
        with pytest.raises(ConfigError, match="xpyd"):
            x62.splits(bad, 16, 2)
    with pytest.raises(ConfigError, match="2, 4, 6, 8, 10, 12, 14"):
        x62.splits("5", 16, 2)


def test_a_split_s_knee_is_the_lower_of_its_pools_and_its_load_a_share_of_it() -> None:
    s = x62.Split(4, 12, 2)
    # prefill: 4 engines / 0.5 s = 8 req/s; decode: 12 * 256 / (32 * 0.1) = 960 req/s
    k = x62.knees(s, 0.5, 0.1, 256)
    assert k == {"prefill": 8.0, "decode": pytest.approx(960.0), "knee": 8.0}
    # a slow decode makes the decode pool the knee: 12 * 1 / (32 * 0.1) = 3.75
    assert x62.knees(s, 0.5, 0.1, 1)["knee"] == pytest.approx(3.75)
    assert x62.rate_of(8.0) == 6.4 and x62.rate_of(8.0, 0.5) == 4.0
    with pytest.raises(ConfigError):
        x62.knees(s, 0.0, 0.1, 256)


def test_the_lab_s_model_puts_every_split_s_knee_in_prefill_compute() -> None:
    # GLM-5.1: a 16,384-token prefill is 0.92 s, so 8 prefill GPUs carry 8 / 0.92 = 8.69 req/s
    for s in x62.splits("", 16, 2):
        p = live62.plan(s)
        assert p["knee"] == p["knee_prefill"] < p["knee_decode"]
        assert p["rate"] == pytest.approx(x62.LOAD * p["knee"], abs=1e-3)
    assert live62.plan(x62.Split(8, 8, 2))["knee"] == pytest.approx(8.694, abs=1e-3)


def test_the_profile_is_fixed_lengths_at_the_split_s_rate_and_loads_as_a_workload(
    tmp_path: Path,
) -> None:
    p = x62.profile(x62.Split(12, 4, 2), 10.432)
    assert p["arrival"] == {"process": "poisson", "rate": 10.432}
    assert p["prompt"]["min"] == p["prompt"]["max"] == x62.PROMPT_TOKENS
    assert p["output"]["median"] == x62.OUTPUT_TOKENS and "prefill_servers" not in p
    path = tmp_path / "w.json"
    path.write_text(json.dumps(p))
    assert load_profile(str(path)).model == x62.MODEL
    with pytest.raises(ConfigError):
        x62.profile(x62.Split(12, 4, 2), 0)


SUMMARY: dict[str, Any] = {
    "trustworthy": True,
    "client": {"completed": 40, "tpot_p50_s": 0.031, "tpot_p99_s": 0.045},
    "bmwg": {
        "TTFT": {"p50": 1000.0, "p99": 1800.0},
        "ITL": {"p50": 31.0, "p99": 40.0},
        "T_transfer": {"p50": 30.0, "p99": 50.0},
        "TPS_output": 128.0,
    },
}


def test_trial_figures_per_gpu_goodput_and_prefill_utilization_by_hand() -> None:
    s = x62.Split(4, 12, 2)
    good = {"good_output_tokens": 960, "window_s": 10.0, "met": True}
    f = x62.trial_figures(SUMMARY, s, good, rate=3.2, prefill_step_s=1.0)
    assert f["TTFT_p99_ms"] == 1800.0 and f["T_transfer_p50_ms"] == 30.0
    assert f["TPOT_p99_ms"] == pytest.approx(45.0)
    assert f["TPS_per_GPU"] == 128.0 / 16  # over all 16 GPUs, prefill and decode
    assert f["goodput_tokens_s"] == 96.0 and f["goodput_per_GPU"] == 6.0
    assert f["prefill_util"] == pytest.approx(0.8)  # 3.2 req/s x 1 s over 4 engines
    assert f["slo_met"] == 1 and f["untrusted"] == 0 and f["requests"] == 40
    missed = x62.trial_figures({**SUMMARY, "trustworthy": False}, s,
                               {"good_output_tokens": 0, "window_s": 10.0, "met": False},
                               3.2, 1.0)  # fmt: skip
    assert missed["slo_met"] == 0 and missed["untrusted"] == 1 and missed["goodput_per_GPU"] == 0


def _rec(i: int, ttft: float, tpot: float, sent: float = 1.0, ok: bool = True) -> dict:
    return {"index": i, "sent_s": sent, "outcome": "ok" if ok else "error", "ttft_s": ttft,
            "tpot_s": tpot, "output_tokens": 32}  # fmt: skip


def test_slo_check_counts_the_output_tokens_of_requests_meeting_every_target(
    tmp_path: Path,
) -> None:
    recs = [
        _rec(0, 1.0, 0.03),  # meets both
        _rec(1, 2.5, 0.03),  # TTFT over 2 s
        _rec(2, 1.0, 0.06),  # TPOT over 50 ms
        _rec(3, 1.0, 0.03, ok=False),  # failed
        _rec(4, 1.0, 0.03, sent=12.0),  # after the window: not counted
    ]
    (tmp_path / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    g = live62.slo_check(tmp_path, 10.0)
    assert g["requests"] == 4 and g["good"] == 1 and g["good_output_tokens"] == 32
    assert g["attainment"] == {"ttft": 0.5, "tpot": 0.5} and g["met"] is False


def _row(fabric: str, split: str, gp: float, met: int = 1, trial: int = 0) -> dict:
    return {"section": "6.2", "case": f"xPyD={split}", "params": {}, "fabric": fabric,
            "trial": trial, "figures": {"goodput_per_GPU": gp, "slo_met": met, "untrusted": 0,
                                        "TTFT_p99_ms": 1000.0 + gp}}  # fmt: skip


def test_best_split_is_the_highest_goodput_among_splits_that_met_the_slo_ties_named() -> None:
    rows = [
        _row("zcube", "4P12D", 1.0), _row("zcube", "4P12D", 1.1, trial=1),
        _row("zcube", "8P8D", 6.0), _row("zcube", "8P8D", 6.4, trial=1),
        _row("zcube", "12P4D", 6.1), _row("zcube", "12P4D", 6.3, trial=1),
        _row("zcube", "14P2D", 9.0, met=0), _row("zcube", "14P2D", 9.0, trial=1),
        _row("roft", "8P8D", 0.0, met=0),
    ]  # fmt: skip
    summary = report.summarize(rows)
    b = x62.best_split(summary, "zcube")
    # 14P2D is higher but one of its trials missed the SLO; 8P8D and 12P4D overlap
    assert b is not None and b["case"] == "xPyD=8P8D" and b["mean"] == pytest.approx(6.2)
    assert b["ties"] == ["xPyD=12P4D"]
    assert x62.best_split(summary, "roft") is None


def test_the_comparison_judges_the_headline_figures_zcube_against_the_others() -> None:
    rows = [_row("zcube", "8P8D", 6.0), _row("zcube", "8P8D", 6.2, trial=1),
            _row("clos", "8P8D", 3.0), _row("clos", "8P8D", 3.1, trial=1)]  # fmt: skip
    verdicts = {c["figure"]: c["verdict"] for c in report.compare(report.summarize(rows))}
    assert verdicts["goodput_per_GPU"] == "higher" and verdicts["TTFT_p99_ms"] == "higher"
    assert "goodput_per_GPU" in report.HIGHER_IS_BETTER


def test_headline_and_parameter_lines_name_the_draft_s_and_the_run_s() -> None:
    s = x62.splits("4,8", 16, 2)
    lines = live62.parameter_lines(16, s, {x.label: live62.plan(x) for x in s}, 2, 10)
    text = "\n".join(lines)
    assert "1P11D, 2P10D" in text and "-> 4P12D, 8P8D of 16 GPU hosts" in text
    assert "20 x 60 s -> 2 x 10 s" in text and x62.SLO_TEXT in text
    f = x62.trial_figures(SUMMARY, s[0], {"good_output_tokens": 960, "window_s": 10.0,
                                          "met": True}, 3.2, 1.0)  # fmt: skip
    assert "SLO met" in live62.headline(f) and "8.00 tokens/s per GPU" in live62.headline(f)
    assert estimate_wall_s(3, 3, 1, 10, live62.DRAIN_S) == 9 * (10 + RUN_OVERHEAD_S + 5)


def test_bmwg_list_marks_6_2_run_and_the_cli_refuses_a_split_before_any_lab(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cat.test_of("6.2").runner and "6.2" in cat.RUNNERS
    assert main(["bmwg", "list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("6.2"))
    assert "  run  " in line
    assert BmwgConfig(xpyd="4,8").xpyd == "4,8"
    assert (
        main(["bmwg", "run", "6.2", "--xpyd", "5", "--trials", "1", "--trial-seconds", "10"]) == 2
    )
    assert "2, 4, 6, 8, 10, 12, 14" in capsys.readouterr().err


def test_the_page_names_the_best_split_its_ties_and_the_comparison_in_words() -> None:
    from bench import bmwg_xpyd

    rows = [
        _row("zcube", "4P12D", 1.0), _row("zcube", "4P12D", 1.1, trial=1),
        _row("zcube", "8P8D", 6.0), _row("zcube", "8P8D", 6.4, trial=1),
        _row("roft", "4P12D", 1.0), _row("roft", "4P12D", 1.1, trial=1),
        _row("roft", "8P8D", 6.0, met=0), _row("roft", "8P8D", 6.4, met=0, trial=1),
    ]  # fmt: skip
    summary = report.summarize(rows)
    d = {
        "summary": summary,
        "comparison": report.compare(summary),
        "best_split": [{"fabric": f, "best": None, "detail": x62.best_split(summary, f)}
                       for f in ("zcube", "roft")],
    }  # fmt: skip
    words = bmwg_xpyd.best_words(d)
    assert "ZCube: 8P8D (6.2 tokens/s per GPU" in words and "ROFT: 4P12D (1.05" in words
    # same figures on both fabrics: TTFT p99 and goodput, 2 splits, all measured ties
    assert bmwg_xpyd.verdict_words(d).startswith("4 of 4 comparisons within the trials' spread")
    one = report.summarize([_row("zcube", "8P8D", 6.0), _row("roft", "8P8D", 5.0)])
    assert "no spread to judge by" in bmwg_xpyd.verdict_words({"comparison": report.compare(one)})
    # 8P8D with two trials on both fabrics (TTFT p99, goodput: 2 ties; 4P12D has no ROFT
    # row), 2P14D with one trial each (2 without spread)
    mixed = report.summarize(
        [*rows[:4], _row("roft", "8P8D", 6.1), _row("roft", "8P8D", 6.2, trial=1)]
    )
    mixed += report.summarize([_row("zcube", "2P14D", 1.0), _row("roft", "2P14D", 1.0)])
    text = bmwg_xpyd.verdict_words({"comparison": report.compare(mixed)})
    assert text.startswith("2 of 4 comparisons within") and "2 with one trial" in text
