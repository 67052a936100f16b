"""The draft's test catalogue, its parameter scaling and the trials' statistics against hand
answers (issue 46)."""

from __future__ import annotations

import math

import pytest

from zcube_lab.core.bmwg import catalogue as cat
from zcube_lab.core.bmwg import scaling, trials
from zcube_lab.core.errors import ConfigError

# The draft's §5-§13 as numbered in -05: how many tests each section has.
SECTION_SIZES = {5: 4, 6: 4, 7: 4, 8: 4, 9: 4, 10: 4, 11: 3, 12: 3, 13: 3}


def test_every_test_of_sections_5_to_13_is_there_once():
    sections = [t.section for t in cat.TESTS]
    assert len(sections) == len(set(sections))
    want = [f"{s}.{i}" for s, n in SECTION_SIZES.items() for i in range(1, n + 1)]
    assert sections == want


def test_every_test_has_a_status_a_reason_and_named_kpis():
    known = set(cat.KPIS_05) | set(cat.DERIVED)
    for t in cat.TESTS:
        assert t.status in cat.STATUSES, t.section
        assert t.reason.strip(), t.section
        assert set(t.kpis) <= known, (t.section, set(t.kpis) - known)
        assert t.name and t.trials >= 1
        # a duration, or (the draft naming none) what a repetition is
        assert (t.trial_s > 0) if t.trial_s is not None else "{n}" in t.repetition, t.section


def test_the_draft_s_trials_are_20_of_at_least_60_s_where_it_asks_them():
    for s in ("5.1", "5.3", "7.4", "8.2"):
        t = cat.test_of(s)
        assert (t.trials, t.trial_s) == (20, 60.0)
    assert cat.test_of("5.2").trial_s == 120.0
    assert cat.test_of("8.4").trial_s == 300.0


def test_10_1_repeats_a_single_request_100_times_a_length_as_the_draft_says_untimed(capsys):
    """The draft's §10.1: single requests, no concurrent load, repeated at least 100 times per
    prompt length; it names no trial duration (the catalogue said "100 x 60 s")."""
    from zcube_lab.cli import main
    from zcube_lab.core.bmwg import ttftlen

    t = cat.test_of("10.1")
    assert t.trials == ttftlen.DRAFT_REPETITIONS == 100 and t.trial_s is None
    want = "at least 100 single requests per prompt length (no duration named)"
    assert t.trials_text == want
    draft, lab = scaling.trial_text(t, scaling.scale_for(t))
    assert draft == want and " s modelled" not in lab and "wall h" not in lab
    assert main(["bmwg", "list", "--params"]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if "10.1 | trials" in ln)
    assert f"| {want} |" in row and "60 s" not in row
    assert cat.test_of("6.1").trials_text == "20 x 60 s"  # a timed trial reads as before


def test_ecn_storage_and_dcqcn_are_not_representable_and_say_why():
    assert "qdisc" in cat.test_of("8.1").reason
    assert "memory" in cat.test_of("5.4").reason
    assert "NIC" in cat.test_of("8.3").reason
    for s in ("8.1", "5.4", "8.3"):
        assert cat.test_of(s).status == cat.NOT


def test_pfc_and_ep_kv_contention_are_fine_scale_tests_the_runner_carries():
    for s in ("8.2", "7.4"):
        t = cat.test_of(s)
        assert t.status == cat.FINE and t.runner


def test_an_unknown_section_names_the_sections_there_are():
    with pytest.raises(ConfigError, match=r"5\.1.*13\.3"):
        cat.test_of("5.9")
    assert cat.test_of("§8.2").section == "8.2"


def test_a_section_the_runner_does_not_carry_is_refused_with_its_status():
    with pytest.raises(ConfigError, match="no marking qdisc"):
        cat.runnable_sections(["8.1"])
    with pytest.raises(ConfigError, match="not built into bmwg run yet"):
        cat.runnable_sections(["6.4"])
    assert [t.section for t in cat.runnable_sections(["8.2", "7.4"])] == ["8.2", "7.4"]


def test_fine_tests_scale_bytes_by_the_fine_byte_scale_and_others_by_the_default():
    fine, default = scaling.scale_for(cat.test_of("8.2")), scaling.scale_for(cat.test_of("6.1"))
    # 2 µs x 200 Gb/s / 12,000 bits = 33.3; 400 Gb/s at 100 Mb/s = 4,000.
    assert fine.bandwidth_scale == pytest.approx(100 / 3)
    assert (fine.dilation, default.bandwidth_scale, default.dilation) == (120, 4000, 1)
    msg = next(p for p in cat.test_of("8.2").params if p.name == "message size")
    # 16 MB / 33.3 = 480,000 lab bytes, 320 frames of 1,500 B
    assert scaling.lab_value(msg, fine, 16) == "480,000 B (320 frames)"


def test_thresholds_become_whole_frames_or_out_of_reach():
    th = next(p for p in cat.test_of("8.2").params if p.name == "PFC threshold")
    # 10 KB is 300 lab bytes (0.2 frames); 100 KB 3,000 (2 frames); 1 MB 30,000 (20 frames)
    assert scaling.lab_value(th, scaling.fine_scale(), 16) == "out of reach, 2 frames, 20 frames"


def test_host_counts_are_kept_where_the_fabric_has_the_hosts_and_capped_where_not():
    assert scaling.lab_counts(cat.SENDERS, (4, 8, 16, 32), 16) == (4, 8, 15)
    assert scaling.lab_counts(cat.PAIRS, (1, 2, 4, 8, 16), 16) == (1, 2, 4, 8)
    with pytest.raises(ConfigError, match="1 to 15 on a fabric of 16"):
        scaling.check_counts(cat.SENDERS, "n_burst", [16], 16)
    scaling.check_counts(cat.SENDERS, "n_burst", [4, 15], 16)


def test_trial_wall_time_follows_the_dilation():
    draft, lab = scaling.trial_text(cat.test_of("8.2"), scaling.fine_scale())
    assert draft == "20 x 60 s"
    assert "40 wall h" in lab  # 20 x 60 s x 120 = 144,000 s


def test_every_parameter_has_a_row_and_every_test_its_trials_row():
    rows = scaling.parameter_rows(cat.TESTS)
    n_params = sum(len(t.params) for t in cat.TESTS)
    assert len(rows) == n_params + len(cat.TESTS)


def test_mean_and_ci_by_hand():
    # 1, 2, 3: mean 2, s = 1, t(2) = 4.303: half width 4.303 / sqrt(3) = 2.4843
    iv = trials.mean_ci([1.0, 2.0, 3.0])
    assert iv.mean == 2.0 and iv.n == 3
    assert iv.half == pytest.approx(4.303 / math.sqrt(3))
    one = trials.mean_ci([5.0])
    assert (one.mean, one.low, one.high) == (5.0, None, None)
    with pytest.raises(ConfigError):
        trials.mean_ci([])


def test_t_table_beyond_its_rows_errs_wide_and_tends_to_z():
    assert trials.t975(35) == 2.042  # df 30's row
    assert trials.t975(1000) == 1.960
    with pytest.raises(ConfigError):
        trials.t975(0)


def test_jain_by_hand():
    assert trials.jain([1, 1, 1, 1]) == 1.0
    assert trials.jain([1, 0, 0, 0]) == 0.25
    assert trials.jain([1, 3]) == pytest.approx(16 / 20)  # (4)^2 / (2 x 10)
    assert trials.jain([0, 0]) == 1.0
    with pytest.raises(ConfigError):
        trials.jain([-1, 2])


def test_versus_needs_intervals_that_do_not_overlap():
    lo = trials.mean_ci([1.0, 1.1, 0.9])
    hi = trials.mean_ci([5.0, 5.1, 4.9])
    wide = trials.mean_ci([0.0, 5.0, 10.0])
    assert trials.versus(hi, lo) == trials.HIGHER
    assert trials.versus(lo, hi) == trials.LOWER
    assert trials.versus(wide, lo) == trials.WITHIN
    assert trials.versus(trials.mean_ci([1.0]), lo) == trials.NO_SPREAD
