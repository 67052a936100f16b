"""§11.1 (aggregate tokens per second) worked out before any lab: the ladder and its checks,
the knee, the workload, a trial's figures from hand-made records, the link utilization over
hand-made link loads, the SLO boundary per fabric, the section's build and its page part
(zcube_lab.core.bmwg.throughput, zcube_lab.emulator.bmwg.throughput, bench.bmwg_tps)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from zcube_lab.core.bmwg import report
from zcube_lab.core.bmwg import throughput as t111
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.bmwg import live
from zcube_lab.emulator.bmwg import throughput as live111
from zcube_lab.workloads.profiles import load_profile


def test_the_ladder_defaults_sorts_drops_repeats_and_refuses_bad_shares() -> None:
    assert t111.rates("") == t111.RATES == (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.2)
    assert t111.rates("1, 0.5,0.5") == (0.5, 1.0)
    for bad in ("a", ",", "0", "0.01", "2.5", "-1"):
        with pytest.raises(ConfigError, match="tps_rates"):
            t111.rates(bad)
    with pytest.raises(ConfigError, match=r"0\.05 to 2"):
        BmwgConfig(tps_rates="3")
    assert BmwgConfig(tps_rates="0.5,1").tps_ladder == (0.5, 1.0)


def test_the_knee_is_the_prefill_pool_over_one_prefill_and_a_rung_a_share_of_it() -> None:
    assert t111.knee_rate(2, 0.25) == 8.0
    assert t111.rate_of(0.75, 8.0) == 6.0 and t111.rate_of(1 / 3, 10.0) == 3.333
    assert t111.draft_share(8.0) == 0.125
    with pytest.raises(ConfigError):
        t111.knee_rate(0, 0.25)
    with pytest.raises(ConfigError):
        t111.knee_rate(2, 0.0)


def test_a_quarter_of_the_servers_prefill_at_least_one_leaving_one_to_decode() -> None:
    assert t111.prefill_servers(8) == 2 and t111.prefill_servers(32) == 8
    assert t111.prefill_servers(2) == 1 and t111.prefill_servers(3) == 1
    assert t111.prefill_servers(6) == 2  # 1.5 rounds to 2
    with pytest.raises(ConfigError, match="two servers"):
        t111.prefill_servers(1)


def test_the_prompt_leaves_room_under_the_draft_s_ttft_and_a_decode_step_is_under_its_itl() -> None:
    from zcube_lab.serving.models import decode_step_seconds, get_profile, prefill_step_seconds

    p = get_profile(t111.MODEL)
    # one prefill well under 500 ms (half of it at most), twice the prompt not
    assert prefill_step_seconds(p, t111.PROMPT_TOKENS) * 1e3 < t111.TTFT_P99_MS / 2
    assert prefill_step_seconds(p, 2 * t111.PROMPT_TOKENS) * 1e3 < t111.TTFT_P99_MS
    assert prefill_step_seconds(p, 4 * t111.PROMPT_TOKENS) * 1e3 > t111.TTFT_P99_MS
    # a decode step of a small batch fits 50 ms; of a full one it does not
    assert decode_step_seconds(p, 8) * 1e3 < t111.ITL_P99_MS
    assert decode_step_seconds(p, p.max_num_seqs) * 1e3 > t111.ITL_P99_MS


def test_a_rung_s_profile_is_fixed_lengths_at_its_share_of_the_knee(tmp_path: Path) -> None:
    prof = t111.profile(0.5, 8.0)
    assert prof["arrival"] == {"process": "poisson", "rate": 4.0}
    assert prof["prompt"]["min"] == prof["prompt"]["max"] == t111.PROMPT_TOKENS
    assert prof["output"]["min"] == prof["output"]["max"] == t111.OUTPUT_TOKENS
    assert prof["prefix_cache_hit_rate"] == 0.0
    path = tmp_path / "w.json"
    path.write_text(json.dumps(prof))
    assert load_profile(str(path)).arrival.rate == 4.0
    with pytest.raises(ConfigError, match="tps_rates"):
        t111.profile(0.0, 8.0)


LINKS = {
    "h0->a0:1": {"mean": 0.1, "peak": 0.3},  # host uplink
    "a0:1->h0": {"mean": 0.0, "peak": None},  # host downlink
    "a0:3->b1:2": {"mean": 0.2, "peak": 0.5},  # switch to switch
    "b1:2->a0:3": {"mean": 0.4, "peak": 0.6},
}


def test_link_figures_are_the_mean_and_busiest_over_every_direction_and_the_trunks() -> None:
    f = t111.link_figures(LINKS)
    assert f["Link_utilization_mean"] == pytest.approx((10 + 0 + 20 + 40) / 4)
    assert f["Link_utilization_max"] == pytest.approx(40)
    assert f["Trunk_utilization_mean"] == pytest.approx(30)
    assert f["Trunk_utilization_max"] == pytest.approx(40)
    assert f["Link_utilization_peak"] == pytest.approx(60)
    assert (f["links"], f["trunk_links"]) == (4, 2)
    # over a load window half the run's window: the means double, the 1 s peak does not
    g = t111.link_figures(LINKS, 2.0)
    assert g["Link_utilization_mean"] == pytest.approx(35)
    assert g["Trunk_utilization_max"] == pytest.approx(80)
    assert g["Link_utilization_peak"] == pytest.approx(60)
    empty = t111.link_figures({})
    assert empty["Link_utilization_mean"] is None and empty["Link_utilization_max"] is None


def test_a_run_meets_the_slo_at_the_thresholds_and_not_above_or_without_a_figure() -> None:
    assert t111.met_slo(500.0, 50.0)
    assert not t111.met_slo(500.1, 10.0)
    assert not t111.met_slo(100.0, 50.1)
    assert not t111.met_slo(None, 10.0)


def _summary(ttft_p99: float, itl_p99: float, trusted: bool = True) -> dict[str, Any]:
    return {
        "window_s": 20.0,
        "trustworthy": trusted,
        "bmwg": {
            "TTFT": {"p50": 300.0, "p99": ttft_p99},
            "ITL": {"p50": 31.0, "p99": itl_p99},
            "E2E_latency": {"p50": 2300.0, "p99": 2900.0},
            "TPS_input": 40960.0,
            "TPS_output": 640.0,
        },
        "link_util": LINKS,
    }


def test_a_trial_s_figures_from_its_summary_and_its_requests_against_the_slo() -> None:
    good = {"requests": 11, "completed": 10, "good": 8, "good_output_tokens": 8 * 64}
    f = t111.trial_figures(_summary(480.0, 40.0), good, 10.0)
    assert (f["TPS_output"], f["TPS_input"]) == (640.0, 40960.0)
    assert f["Inference_Goodput"] == pytest.approx(51.2)  # 512 tokens over 10 s
    assert f["Request_Rate"] == pytest.approx(1.0)
    assert (f["TTFT_p99_ms"], f["ITL_p99_ms"], f["E2E_p99_ms"]) == (480.0, 40.0, 2900.0)
    assert f["slo_met"] == 1 and f["untrusted"] == 0 and f["requests"] == 11
    # the run's 20 s window over its 10 s of load: the means doubled
    assert f["Link_utilization_mean"] == pytest.approx(35)
    # dilated twice, the 10 modelled s of load lasted the run's 20 wall s: the means as read
    k2 = t111.trial_figures(_summary(480.0, 40.0), good, 10.0, load_wall_s=20.0)
    assert k2["Link_utilization_mean"] == pytest.approx(17.5)
    missed = t111.trial_figures(_summary(510.0, 40.0, trusted=False), good, 10.0)
    assert missed["slo_met"] == 0 and missed["untrusted"] == 1
    with pytest.raises(ConfigError):
        t111.trial_figures(_summary(480.0, 40.0), good, 0.0)


def _rung(fabric: str, load: float, met: list[int], untrusted: list[int] | None = None,
          tps: float = 100.0) -> list[dict[str, Any]]:  # fmt: skip
    return [
        {"section": "11.1", "case": t111.case_label(load), "fabric": fabric, "trial": i,
         "params": {"load": load, "rate": load * 8},
         "figures": {"slo_met": m, "untrusted": (untrusted or [0] * len(met))[i],
                     "TPS_output": tps * load + i, "Link_utilization_max": 2.0 * load}}
        for i, m in enumerate(met)
    ]  # fmt: skip


def test_the_boundary_is_the_rate_below_the_first_a_trial_missed() -> None:
    rows = [
        *_rung("zcube", 0.25, [1, 1]),
        *_rung("zcube", 0.5, [1, 1], untrusted=[0, 1]),
        *_rung("zcube", 0.75, [1, 0]),  # one trial missed: the first failure
        *_rung("zcube", 1.0, [1, 1]),  # met again above it: does not move the boundary
    ]
    b = t111.boundary(report.summarize(rows), "zcube")
    assert b is not None
    assert (b["rate"], b["load"], b["first_failed_rate"], b["censored"]) == (4.0, 0.5, 6.0, False)
    assert b["case"] == "load=0.5" and b["untrusted_trials"] == 1
    assert b["figures"]["TPS_output"] == pytest.approx(50.5)  # trials 50 and 51
    assert b["figures"]["Link_utilization_max"] == pytest.approx(1.0)
    assert b["figures"]["TTFT_p99_ms"] is None  # not in these rows
    assert "4 req/s (load 0.5; 6 req/s missed it)" in t111.boundary_words(b)
    assert "1 trial(s) up to the first missed rate not trusted" in t111.boundary_words(b)


def test_a_boundary_is_censored_when_no_rate_missed_and_none_when_the_lowest_did() -> None:
    rows = [*_rung("roft", 0.25, [1, 1]), *_rung("roft", 0.5, [1, 1]),
            *_rung("clos", 0.25, [0, 1]), *_rung("clos", 0.5, [1, 1])]  # fmt: skip
    s = report.summarize(rows)
    top = t111.boundary(s, "roft")
    assert top is not None and (top["rate"], top["first_failed_rate"], top["censored"]) == (
        4.0, None, True,
    )  # fmt: skip
    assert "at or above the ladder's top, 4 req/s" in t111.boundary_words(top)
    low = t111.boundary(s, "clos")
    assert low is not None and (low["rate"], low["first_failed_rate"]) == (None, 2.0)
    assert low["figures"] == {}
    assert "lowest rate, 2 req/s" in t111.boundary_words(low)
    assert t111.boundary(s, "zcube") is None


def test_the_comparison_judges_throughput_goodput_latency_and_the_busiest_link() -> None:
    assert report.HEADLINE["11.1"] == (
        "TPS_output", "Inference_Goodput", "TTFT_p99_ms", "ITL_p99_ms", "Link_utilization_max",
    )  # fmt: skip
    assert {"TPS_output", "Inference_Goodput"} <= set(report.HIGHER_IS_BETTER)
    assert "TTFT_p99_ms" not in report.HIGHER_IS_BETTER


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_slo_check_counts_the_window_s_requests_and_the_tokens_of_those_meeting_it(
    tmp_path: Path,
) -> None:
    ok = {"outcome": "ok", "output_tokens": 64, "tpot_s": 0.032}
    _jsonl(tmp_path / "requests.jsonl", [
        {**ok, "sent_s": 0.5, "ttft_s": 0.3},  # meets both
        {**ok, "sent_s": 1.0, "ttft_s": 0.6},  # TTFT above 500 ms
        {**ok, "sent_s": 2.0, "ttft_s": 0.3, "tpot_s": 0.06},  # TPOT above 50 ms
        {"outcome": "error", "sent_s": 3.0, "output_tokens": 5},  # failed
        {**ok, "sent_s": 9.5, "ttft_s": 0.2},  # meets both
        {**ok, "sent_s": 10.5, "ttft_s": 0.2},  # after the window: not counted
    ])  # fmt: skip
    g = live111.slo_check(tmp_path, 10.0)
    assert (g["requests"], g["completed"], g["good"]) == (5, 4, 2)
    assert g["good_output_tokens"] == 128
    # a real run's summary (its clock: no dilation) with this trial's figures and links
    base = json.loads((Path(__file__).parent / "data" / "summary-zcube.json").read_text())
    (tmp_path / "summary.json").write_text(json.dumps({**base, **_summary(450.0, 35.0)}))
    row = live111.trial_row(tmp_path, 10.0)
    assert row["figures"]["Inference_Goodput"] == pytest.approx(12.8)
    assert row["figures"]["Request_Rate"] == pytest.approx(0.4)
    assert row["slo"]["slo"] == t111.SLO_TEXT
    # the run's 20 wall s over the 10 s of load: the link means doubled
    assert row["figures"]["Link_utilization_mean"] == pytest.approx(35)


def test_the_section_builds_its_ladder_on_the_default_quarter_of_the_servers() -> None:
    cfg = BmwgConfig(trials=2, trial_seconds=10, tps_rates="0.5,1")
    sec = live.build("11.1", cfg)
    step = live111.prefill_step_s()
    knee = 4 / step  # 2 servers of 2 GPU hosts prefill, as the lab's default split
    assert sec.head["knee_rate"] == pytest.approx(knee, abs=1e-3)
    assert sec.head["prefill_gpus"] == 4 and sec.head["ladder"] == [0.5, 1.0]
    assert [c.params["rate"] for c in sec.cases] == [
        t111.rate_of(0.5, knee), t111.rate_of(1.0, knee),
    ]  # fmt: skip
    assert all(c.argv == ("--prefill-servers", "2") for c in sec.cases)
    assert [c.key for c in sec.cases] == ["0.5", "1"]
    lines = "\n".join(sec.parameter_lines)
    assert "from 1 req/s up until the SLO breaks" in lines and "trials: 20 x 60 s -> 2 x 10 s" in (
        lines
    )
    assert "TTFT p99 500 ms, ITL p99 50 ms -> the same" in lines
    with pytest.raises(ConfigError, match="tps_rates"):
        live.build("11.1", BmwgConfig(tps_rates="5"))


def _doc() -> dict[str, Any]:
    rows = []
    for fab in ("zcube", "roft"):
        for load, met in ((0.25, [1, 1]), (0.5, [1, 1]), (0.75, [0, 0])):
            for r in _rung(fab, load, met):
                r["figures"].update({"TTFT_p99_ms": 300 + 400 * load, "Inference_Goodput": 90.0,
                                     "ITL_p99_ms": 35.0, "Request_Rate": load * 8,
                                     "Link_utilization_mean": load})  # fmt: skip
                rows.append(r)
    summary = report.summarize(rows)
    return {
        "sections": ["11.1"], "fabrics": ["zcube", "roft"], "gpus": 16, "trials": 2,
        "trial_seconds": 10.0, "draft_trials": {"11.1": [20, 60.0]},
        "ladder": [0.25, 0.5, 0.75], "rates": [2.0, 4.0, 6.0], "knee_rate": 8.0,
        "prefill_gpus": 2, "prefill_step_s": 0.25, "prompt_tokens": 4096, "output_tokens": 64,
        "slo_run": {"TTFT_p99_ms": 500.0, "ITL_p99_ms": 50.0}, "slo_request": t111.SLO_TEXT,
        "rows": rows, "summary": summary, "comparison": report.compare(summary),
        "boundary": [t111.boundary(summary, f) for f in ("zcube", "roft")], "source": "x.json",
    }  # fmt: skip


def test_the_page_part_has_a_row_per_rate_and_fabric_and_the_boundary_per_fabric() -> None:
    from bench import bmwg_tables as bt
    from bench import bmwg_tps

    d = _doc()
    lines = bmwg_tps.tps_section(d, bt._table, bt._cell)
    text = "\n".join(lines)
    assert "| 2 (0.25) | ZCube |" in text and "| 6 (0.75) | ROFT |" in text
    assert text.count("0 of 2 | 2 of 2 |") == 2  # the 0.75 rung: missed, trusted
    assert "| ZCube | 4 | 6 |" in text and "| ROFT | 4 | 6 |" in text
    assert "Every fabric's SLO boundary is the same rung, at 4 req/s." in text
    assert "Link utilization there, over the load: ZCube 0.50% mean, busiest 1.00%; ROFT" in text
    # the 0.75 rung's four trials missed on TTFT (600 ms), none on ITL (35 ms)
    assert "Of the 4 trials that missed the SLO, 4 passed TTFT p99 500 ms and 0 ITL p99" in text
    assert "the draft's 1 req/s is 0.12 of this cell's knee" in text


def test_the_graph_is_drawn_with_the_boundaries(tmp_path: Path) -> None:
    from bench import bmwg_tables as bt

    [path] = bt.write_graphs([_doc()], tmp_path)
    assert path.name == "11.1-x.png" and path.stat().st_size > 1000
