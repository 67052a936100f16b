"""§10.4 (latency against background traffic 0-95% and its inflection point) and the refusal
of a background level or pair count the lab cannot carry, against hand answers; no lab
(issue 46)."""

from __future__ import annotations

import pytest

from zcube_lab.core.bmwg import catalogue as cat
from zcube_lab.core.bmwg import plan, report, scaling
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.bmwg.trials import HIGHER, LOWER, NO_SPREAD, OUT_OF_REACH, WITHIN
from zcube_lab.core.errors import ConfigError

HOSTS = [f"h{i}" for i in range(16)]
FINE = scaling.fine_scale()  # a NIC shaped at 100 Mb/s of wall rate
SHARE = 644_531.0
LEVELS = (0.0, 0.05, 0.1, 0.15, 0.2)


def _cases(sections, hosts=16, ceiling=None, **kw):
    cfg = BmwgConfig(**kw)
    return plan.cases(cfg, cat.runnable_sections(sections), hosts, FINE, SHARE, ceiling)


# inflection_point: the lowest level from which the p99 stays above twice its unloaded value


def test_the_inflection_is_the_first_level_from_which_p99_stays_above_twice_unloaded():
    # bound 2 x 50 = 100: 0.1 (90) is under it, 0.15 (120) and 0.2 (300) above
    assert report.inflection_point(LEVELS, [50, 60, 90, 120, 300]) == 0.15
    # exactly at the bound is not above it
    assert report.inflection_point(LEVELS, [50, 60, 100, 120, 300]) == 0.15
    assert report.inflection_point(LEVELS, [50, 101, 120, 130, 300]) == 0.05
    # a smaller rise finds it earlier: bound 1.5 x 50 = 75
    assert report.inflection_point(LEVELS, [50, 60, 90, 120, 300], rise=0.5) == 0.1


def test_no_inflection_when_p99_never_doubles_or_falls_back_by_the_highest_level():
    assert report.inflection_point(LEVELS, [50, 60, 70, 80, 99]) is None
    assert report.inflection_point(LEVELS, [50, 120, 130, 140, 90]) is None
    assert report.inflection_point([0.0, 0.5], [50, 50]) is None


def test_a_noisy_spike_that_falls_back_is_not_the_inflection():
    # 0.05 spikes to 120, back to 60 at 0.1; the rise that stays starts at 0.15
    assert report.inflection_point(LEVELS, [50, 120, 60, 130, 140]) == 0.15
    # levels need not start at 0 nor be evenly spaced: the first is the reference
    assert report.inflection_point([0.25, 0.5, 0.9], [10, 15, 21]) == 0.9


def test_inflection_refuses_what_it_cannot_judge():
    with pytest.raises(ConfigError, match="ascending"):
        report.inflection_point([0.0, 0.1, 0.1], [1, 2, 3])
    with pytest.raises(ConfigError, match="one p99 each"):
        report.inflection_point([0.0, 0.1], [1, 2, 3])
    with pytest.raises(ConfigError, match="one p99 each"):
        report.inflection_point([0.0], [1])
    with pytest.raises(ConfigError, match="positive"):
        report.inflection_point([0.0, 0.1], [0, 2])


def test_degradation_is_the_highest_level_s_p99_over_the_lowest():
    assert report.degradation_factor([50, 60, 400]) == 8.0
    assert report.degradation_factor([0, 60]) is None


# §10.4's plan


def test_10_4_is_a_fine_scale_test_the_runner_carries_at_twenty_levels():
    t = cat.test_of("10.4")
    assert t.status == cat.FINE and t.runner and "inflection_point" in t.kpis
    cases, refused = _cases(["10.4"], trial_seconds=0.002)
    levels = [c.params["bg_load"] for c in cases]
    assert levels == pytest.approx([0.05 * i for i in range(20)])
    assert levels[-1] == 0.95 and not refused
    assert {c.params["size_bytes"] for c in cases} == {1e6}
    assert all(c.replays == ("loaded",) for c in cases)


def test_10_4_quick_form_takes_fewer_levels_and_its_trial_is_5_2_s():
    cases, _ = _cases(["10.4"], levels="0,0.1,0.3", trial_seconds=4e-4)
    assert [c.label for c in cases] == [
        "size_bytes=1000000, bg_load=0",
        "size_bytes=1000000, bg_load=0.1",
        "size_bytes=1000000, bg_load=0.3",
    ]
    recs = plan.trial_recordings(cases[2], HOSTS, 4e-4, seed=3)
    assert recs.keys() == {"loaded"}
    same = plan.loaded(HOSTS, 1e6, 0.3, 4e-4, seed=3)
    assert recs["loaded"].transfers == same.transfers
    n, span = plan.trial_size(cases[2], HOSTS, 4e-4)
    # 1 MB every 80 µs: 5 KV messages over 400 µs; 7 pairs x ceil(400 µs x 0.3 / 20 µs) = 6
    assert (n, span) == (5 + 7 * 6, pytest.approx(4e-4))


# §10.4's figures and comparison


def _rows(fabric, per_trial, short=(), incomplete=()):
    """Trial rows of §10.4: `per_trial` is one list of p99s over LEVELS per trial."""
    rows = []
    for t, p99s in enumerate(per_trial):
        for level, p99 in zip(LEVELS, p99s, strict=True):
            rows.append({
                "section": "10.4", "case": plan.label_of({"size_bytes": 1e6, "bg_load": level}),
                "params": {"size_bytes": 1e6, "bg_load": level}, "fabric": fabric, "trial": t,
                "figures": {"KV_xfer_latency_p99_us": p99, "load_short": int(level in short),
                            "incomplete": int(level in incomplete)},
            })  # fmt: skip
    return rows


def _verdict(zcube_rows, other_rows):
    summary = report.summary_of([*zcube_rows, *other_rows])
    [c] = [c for c in report.compare(summary) if c["figure"] == "inflection_point"]
    return c["verdict"], summary


EARLY = [[50, 120, 130, 140, 150], [55, 130, 150, 160, 170]]  # inflects at 0.05
MID = [[50, 60, 70, 150, 160], [50, 55, 120, 150, 160]]  # 0.15 and 0.1
LATE = [[50, 60, 70, 80, 160], [52, 60, 70, 90, 170]]  # 0.2
FLAT = [[50, 60, 70, 80, 90], [50, 50, 60, 60, 70]]  # none


def test_per_trial_inflection_is_summarized_with_its_spread_and_degradation():
    verdict, summary = _verdict(_rows("zcube", MID), _rows("roft", MID))
    [z] = [s for s in summary if s["fabric"] == "zcube" and s["case"] == "size_bytes=1000000"]
    f = z["figures"]
    assert f["inflection_point"]["mean"] == pytest.approx(0.125)
    # two trials 0.15 and 0.1: s = 0.0354, half = 12.706 x 0.0354 / sqrt(2) = 0.318
    assert f["inflection_point"]["ci95_high"] == pytest.approx(0.125 + 0.3177, abs=1e-3)
    assert f["degradation_factor"]["mean"] == pytest.approx(3.2)
    assert f["no_inflection"]["mean"] == 0 and f["level_step"]["mean"] == pytest.approx(0.05)
    assert verdict == WITHIN


def test_an_earlier_inflection_beyond_the_spread_is_lower_and_adjacent_levels_tie():
    assert _verdict(_rows("zcube", EARLY), _rows("roft", LATE))[0] == LOWER
    assert _verdict(_rows("zcube", LATE), _rows("roft", EARLY))[0] == HIGHER
    # 0.05 in both trials against 0.1 in both: one level apart, the grid's resolution
    next_level = [[50, 60, 120, 130, 140], [50, 60, 130, 140, 150]]
    assert _verdict(_rows("zcube", EARLY), _rows("roft", next_level))[0] == WITHIN


def test_no_inflection_on_either_fabric_is_a_tie_and_on_one_only_is_later():
    assert _verdict(_rows("zcube", FLAT), _rows("roft", FLAT))[0] == WITHIN
    assert _verdict(_rows("zcube", FLAT), _rows("roft", EARLY))[0] == HIGHER
    assert _verdict(_rows("zcube", EARLY), _rows("roft", FLAT))[0] == LOWER
    mixed = [EARLY[0], FLAT[1]]
    assert _verdict(_rows("zcube", mixed), _rows("roft", EARLY))[0] == WITHIN
    assert _verdict(_rows("zcube", EARLY[:1]), _rows("roft", LATE[:1]))[0] == NO_SPREAD


def test_a_short_background_at_or_below_the_inflection_puts_it_out_of_reach_not_above():
    # EARLY inflects at 0.05: a short 0.2 does not move it, a short 0.05 does
    assert _verdict(_rows("zcube", EARLY, short=(0.2,)), _rows("roft", LATE))[0] == LOWER
    assert _verdict(_rows("zcube", EARLY, short=(0.05,)), _rows("roft", LATE))[0] == OUT_OF_REACH
    assert _verdict(_rows("zcube", EARLY), _rows("roft", LATE, incomplete=(0.1,)))[0] == (
        OUT_OF_REACH
    )
    # no inflection: every level decides it
    assert _verdict(_rows("zcube", FLAT, short=(0.2,)), _rows("roft", FLAT))[0] == OUT_OF_REACH


# Refusing a background level or pair count the lab cannot carry


def test_a_level_outside_0_to_0_95_is_refused_naming_the_field_and_range():
    for field in ("loads", "levels"):
        for bad in ("0.96", "1", "-0.05"):
            with pytest.raises(ConfigError, match=rf"{field}.*from 0 to 0\.95"):
                BmwgConfig(**{field: f"0.5,{bad}"})
    assert BmwgConfig(levels="0,0.95").bg_levels == (0.0, 0.95)
    with pytest.raises(ConfigError, match=r"levels.*from 0 to 0\.95"):
        plan.check_level("levels", 0.97, 16, FINE, None)


def test_the_highest_carried_level_is_the_ceiling_over_the_offered_wall_rate():
    # 16 hosts: KV pair + 7 pairs x L x 100 Mb/s <= 1,066 allows L up to 1.38, so 0.95
    assert plan.max_level(16, FINE, 1066.0) == 0.95
    # 64 hosts: (10.66 - 1) / 31 = 0.3116
    assert plan.max_level(64, FINE, 1066.0) == pytest.approx(0.3116, abs=1e-4)
    assert plan.max_level(16, FINE, 400.0) == pytest.approx(3 / 7)
    assert plan.max_level(16, FINE, 50.0) == -1


def test_an_asked_level_past_the_ceiling_is_refused_before_any_lab():
    with pytest.raises(ConfigError, match=r"levels.*0 to 0\.31 on 64 GPU hosts.*1,650 Mb/s"):
        _cases(["10.4"], hosts=64, ceiling=1066.0, levels="0,0.5")
    with pytest.raises(ConfigError, match=r"loads.*0 to 0\.43 on 16 GPU hosts"):
        _cases(["5.2"], ceiling=400.0, loads="0.25,0.5", sizes="1e6")
    cases, _ = _cases(["5.2"], ceiling=400.0, loads="0.25,0.4", sizes="1e6")
    assert [c.params["bg_load"] for c in cases] == [0.25, 0.4]


def test_the_draft_s_default_levels_past_the_ceiling_are_reported_not_run():
    cases, refused = _cases(["10.4"], hosts=64, ceiling=1066.0, trial_seconds=0.002)
    assert [c.params["bg_load"] for c in cases] == pytest.approx([0.05 * i for i in range(7)])
    assert len(refused) == 13 and all("0 to 0.31 on 64 GPU hosts" in r.why for r in refused)
    # without a ceiling (a plan that did not read one) all twenty stay
    assert len(_cases(["10.4"], hosts=64, trial_seconds=0.002)[0]) == 20


def test_pairs_past_what_the_datapath_carries_are_refused():
    # 1,066 Mb/s over 100 Mb/s a pair: 10 pairs
    with pytest.raises(ConfigError, match=r"pairs.*1 to 10: 12 pairs.*1,200 Mb/s"):
        plan.check_pairs(12, FINE, 1066.0)
    plan.check_pairs(10, FINE, 1066.0)
    with pytest.raises(ConfigError, match=r"pairs.*1 to 4"):
        _cases(["5.3"], hosts=16, ceiling=450.0, pairs="2,8")
    cases, refused = _cases(["5.3"], hosts=16, ceiling=450.0)
    assert [c.params["pairs"] for c in cases] == [1, 2, 4]
    assert [r.params for r in refused] == [{"pairs": 8}]
