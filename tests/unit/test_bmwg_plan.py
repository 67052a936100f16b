"""A `bmwg run`'s plan (cases, recordings, estimate) and its figures and fabric comparison,
against hand answers (issue 46); no lab."""

from __future__ import annotations

import pytest

from zcube_lab.core.bmwg import catalogue as cat
from zcube_lab.core.bmwg import plan, report, scaling
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.bmwg.trials import HIGHER, LOWER, OUT_OF_REACH, WITHIN
from zcube_lab.core.errors import ConfigError

HOSTS = [f"h{i}" for i in range(16)]
FINE = scaling.fine_scale()
SHARE = 644_531.0


def _cases(**kw):
    cfg = BmwgConfig(**kw)
    return plan.cases(cfg, cat.runnable_sections(["8.2", "7.4"]), 16, FINE, SHARE)


def test_default_cases_are_the_draft_s_matrix_less_what_the_scale_refuses():
    cases, refused = _cases()
    pfc = [c for c in cases if c.section == "8.2"]
    # N_burst 4, 8, 15 (16 and 32 capped) x 3 windows x 2 thresholds (10 KB refused)
    assert len(pfc) == 3 * 3 * 2
    assert {c.params["n_burst"] for c in pfc} == {4, 8, 15}
    assert [r.params for r in refused] == [{"xoff_bytes": 10_000}]
    mix = [c for c in cases if c.section == "7.4"]
    assert [c.params["kv_load"] for c in mix] == [0.5, 0.75]
    assert all(c.replays == ("mixed", "ep", "kv") and c.xoff_bytes == SHARE for c in mix)


def test_more_senders_than_the_fabric_has_is_refused_naming_the_range():
    with pytest.raises(ConfigError, match="1 to 15"):
        _cases(n_burst="4,16")


def test_a_burst_repeats_every_period_within_the_trial():
    # period = 100 µs + 1.5 x 4 x 16 MB x 8 / 400 Gb/s = 100 µs + 1.92 ms = 2.02 ms
    assert plan.burst_period_s(4, 100e-6) == pytest.approx(2.02e-3)
    rec = plan.bursts(HOSTS, 4, 100e-6, 5e-3, seed=1)
    kv = [t for t in rec.transfers if t.cls == "kv"]
    assert rec.meta["bursts"] == 2 and len(kv) == 8
    assert [t.id for t in rec.transfers] == list(range(10))
    second = kv[4:]
    assert all(2.02e-3 <= t.start_s < 2.02e-3 + 100e-6 for t in second)
    assert {t.dst for t in kv} == {"h5"}
    # senders h6-h9 into h5; the victim from h10 to h4, once the burst's last sender started
    victims = [t for t in rec.transfers if t.cls == "other"]
    assert [(t.src, t.dst, t.bytes) for t in victims] == [("h10", "h4", 1e6)] * 2
    assert victims[1].start_s == max(t.start_s for t in second)
    assert plan.victim_pair(HOSTS, 13) == ("h3", "h4")
    assert plan.victim_pair(HOSTS, 14) is None  # the senders reach h4
    # a trial shorter than one period still carries one burst
    assert plan.bursts(HOSTS, 15, 10e-3, 1e-3, seed=1).meta["bursts"] == 1


def test_the_mix_replays_each_class_alone_too():
    recs = plan.mix(HOSTS, 0.5, 5e-3, seed=3)
    assert set(recs) == {"mixed", "ep", "kv"}
    assert {t.cls for t in recs["ep"].transfers} == {"ep"}
    assert {t.cls for t in recs["kv"].transfers} == {"kv"}
    assert len(recs["mixed"].transfers) == len(recs["ep"].transfers) + len(recs["kv"].transfers)
    assert plan.ep_layers(HOSTS, 5e-3) > plan.ep_layers(HOSTS, 1e-3) >= 2


def test_the_estimate_grows_with_trials_and_their_length():
    cases, _ = _cases(n_burst="4", within_us="100", xoff_bytes="1e6", kv_load="0.5")
    est = [plan.estimate_wall_s(cases, HOSTS, 3, n, s, FINE)
           for n, s in ((1, 1e-3), (3, 1e-3), (3, 0.1))]  # fmt: skip
    assert est[0] < est[1] < est[2]
    # at k = 120 a 60 s trial is at least 7,200 wall s
    assert plan.estimate_wall_s(cases, HOSTS, 1, 1, 60.0, FINE) > 7200


def test_a_trial_too_large_to_hold_is_refused_naming_the_longest_that_fits():
    cases, _ = _cases(n_burst="4", within_us="100", xoff_bytes="1e6", kv_load="0.5")
    n, modelled = plan.trial_size(cases[0], HOSTS, 5e-3)
    # two bursts of 4 (and a victim each), 2.02 ms apart
    assert (n, modelled) == (10, pytest.approx(4.04e-3))
    mixed = plan.mix(HOSTS, 0.5, 5e-3, seed=1)
    n74, _ = plan.trial_size(cases[1], HOSTS, 5e-3)
    # the estimate counts the mixed replay and each class alone: twice the mixed transfers
    assert n74 == pytest.approx(2 * len(mixed["mixed"].transfers), rel=0.2)
    plan.check_size(cases, HOSTS, 5e-3)
    with pytest.raises(ConfigError, match=r"at most .* modelled s for section 7\.4"):
        plan.check_size(cases, HOSTS, 60.0)


def _replay(pauses, paused_us, classes):
    return {"pauses": {"pause_frames": pauses, "pause_total_us": paused_us, "ports_paused": 1},
            "classes": classes, "pause_reaction_p99_us": 50.0}  # fmt: skip


def _cls(p99_s, exchange_p99_s=None, incomplete=0):
    c = {"transfers": 4, "incomplete": incomplete,
         "fct_s": {"p50": p99_s / 2, "p99": p99_s, "max": p99_s},
         "fct_over_ideal": {"p99": 2.0}}  # fmt: skip
    if exchange_p99_s is not None:
        c["exchange_s"] = {"p99": exchange_p99_s}
    return c


def test_pfc_figures_by_the_draft_s_names():
    victim = _cls(100e-6)
    victim["fct_over_ideal"] = {"p99": 5.0, "max": 5.0}  # 100 µs against 20 µs alone
    f = report.trial_figures("8.2", {"burst": _replay(12, 300.0, {"kv": _cls(2e-3),
                                                                  "other": victim})})  # fmt: skip
    assert f["PFC_frame_count"] == 12 and f["PAUSE_duration_us"] == 300.0
    assert f["Fabric_FCT_p99_us"] == pytest.approx(2000.0)
    assert f["HOL_delay_us"] == pytest.approx(80.0)
    assert f["incomplete"] == 0
    alone = report.trial_figures("8.2", {"burst": _replay(0, 0.0, {"kv": _cls(2e-3)})})
    assert alone["HOL_delay_us"] is None


def test_contention_penalty_is_contended_over_isolated_p99_per_class():
    results = {
        "mixed": _replay(5, 10.0, {"kv": _cls(3e-3), "ep": _cls(1e-4, 6e-4)}),
        "ep": _replay(0, 0.0, {"ep": _cls(1e-4, 2e-4)}),
        "kv": _replay(1, 1.0, {"kv": _cls(2e-3)}),
    }
    f = report.trial_figures("7.4", results)
    assert f["contention_penalty_kv"] == pytest.approx(1.5)  # 3 ms / 2 ms
    assert f["contention_penalty_ep"] == pytest.approx(3.0)  # 600 µs / 200 µs
    assert f["PFC_frame_count"] == 5


def _row(fabric, trial, fct_us, incomplete=0):
    figures = {"Fabric_FCT_p99_us": fct_us, "PFC_frame_count": 10, "PAUSE_duration_us": 5.0,
               "incomplete": incomplete}  # fmt: skip
    return {"section": "8.2", "case": "n_burst=4", "params": {"n_burst": 4}, "fabric": fabric,
            "trial": trial, "figures": figures}  # fmt: skip


def test_compare_says_lower_higher_or_within_from_the_intervals():
    rows = [_row("zcube", i, v) for i, v in enumerate((100, 101, 99))]
    rows += [_row("roft", i, v) for i, v in enumerate((200, 201, 199))]
    rows += [_row("clos", i, v) for i, v in enumerate((50, 150, 100))]
    summary = report.summarize(rows)
    z = next(s for s in summary if s["fabric"] == "zcube")
    assert z["figures"]["Fabric_FCT_p99_us"]["mean"] == 100 and z["trials"] == 3
    got = {(c["figure"], c["versus"]): c["verdict"] for c in report.compare(summary)}
    assert got[("Fabric_FCT_p99_us", "roft")] == LOWER
    assert got[("Fabric_FCT_p99_us", "clos")] == WITHIN
    assert got[("PFC_frame_count", "roft")] == WITHIN  # equal, zero spread: overlap
    assert report.verdict_counts(report.compare(summary))[LOWER] == 1
    assert HIGHER not in report.verdict_counts(report.compare(summary))


def test_incomplete_transfers_make_a_comparison_out_of_reach_not_a_difference():
    rows = [_row("zcube", i, v, incomplete=1) for i, v in enumerate((100, 101, 99))]
    rows += [_row("roft", i, v) for i, v in enumerate((200, 201, 199))]
    got = report.compare(report.summarize(rows))
    assert {c["verdict"] for c in got} == {OUT_OF_REACH}


def test_pairs_send_16mb_messages_back_to_back_between_disjoint_hosts():
    # one message is 16 MB x 8 / 400 Gb/s = 0.32 ms: 5 ms holds 15 of them
    rec = plan.pairs(HOSTS, 4, 5e-3, seed=1)
    assert rec.meta["messages"] == 15 and len(rec.transfers) == 4 * 15
    assert {(t.src, t.dst) for t in rec.transfers} == {(f"h{i}", f"h{i + 8}") for i in range(4)}
    p0 = [t.start_s for t in rec.transfers if t.exchange == "pair0"]
    assert p0[1] - p0[0] == pytest.approx(0.32e-3)
    cases, _ = _cases(pairs="1,8")
    assert [c.params["pairs"] for c in cases if c.section == "5.3"] == []  # not asked for
    cfg = BmwgConfig(pairs="1,8")
    got, _ = plan.cases(cfg, cat.runnable_sections(["5.3"]), 16, FINE, SHARE)
    assert [c.params["pairs"] for c in got] == [1, 8]
    with pytest.raises(ConfigError, match="1 to 8"):
        plan.cases(BmwgConfig(pairs="9"), cat.runnable_sections(["5.3"]), 16, FINE, SHARE)


def test_pair_figures_by_hand():
    from zcube_lab.core.replay.recording import Transfer

    ts = [Transfer(0, "kv", 0.0, "h0", "h8", 1e9, exchange="pair0"),
          Transfer(1, "kv", 0.0, "h1", "h9", 1e9, exchange="pair1"),
          Transfer(2, "kv", 0.0, "h1", "h9", 1e9, exchange="pair1")]  # fmt: skip
    sent = {0: 0.0, 1: 0.0, 2: 1.0}
    got = {0: {"arrived_s": 1.0}, 1: {"arrived_s": 1.0}, 2: {"arrived_s": 2.0}}
    f = report.pair_figures(ts, sent, got)
    # 3 GB over 2 s; pair0 1 GB/s, pair1 2 GB over 2 s = 1 GB/s: fair
    assert f["KV_xfer_bandwidth_GBps"] == pytest.approx(1.5)
    assert f["JFI"] == pytest.approx(1.0) and f["incomplete"] == 0
    assert f["Fabric_FCT_p99_us"] == pytest.approx(1e6)
    # every message took 1 s: its KV_xfer_latency is its completion time
    assert f["KV_xfer_latency_p50_us"] == f["KV_xfer_latency_p99_us"] == pytest.approx(1e6)
    f = report.pair_figures(ts, {0: 0.0, 1: 0.0}, {0: {"arrived_s": 0.5}, 1: {"arrived_s": 1.0}})
    # pair0 2 GB/s, pair1 1 GB/s: (3)^2 / (2 x 5) = 0.9; one message never sent
    assert f["JFI"] == pytest.approx(0.9) and f["incomplete"] == 1


def test_a_case_at_its_own_k_costs_its_time_at_that_k_and_a_lab_of_its_own():
    from dataclasses import replace

    (case,) = _cases(n_burst="4", within_us="100", xoff_bytes="1e6", kv_load="0.5")[0][:1]
    one = plan.estimate_wall_s([case], HOSTS, 1, 1, 0.01, FINE)
    slow = replace(case, dilation=2 * FINE.dilation)
    two = plan.estimate_wall_s([case, slow], HOSTS, 1, 1, 0.01, FINE)
    _, modelled = plan.trial_size(case, HOSTS, 0.01)
    # the slow copy: one more lab, the same fixed cost, and its modelled time at twice the k
    extra = (plan.LAB_WALL_S + len(case.replays) * plan.REPLAY_FIXED_WALL_S
             + 2 * FINE.clock.wall(modelled) * plan.SLOWDOWN["8.2"])  # fmt: skip
    assert two == pytest.approx(one + extra)


def test_the_pace_gives_a_case_more_k_where_its_datapath_load_needs_it(tmp_path, monkeypatch):
    """`runner.paced` on the real 16-GPU fabrics, against the unmeasured machine's default
    ceiling (every machine alike): one pair stays at the per-port budget's k, four disjoint
    pairs crossing ROFT's spines need more; one k per case for every fabric."""
    import warnings

    from zcube_lab.emulator.bmwg.runner import plan_run
    from zcube_lab.emulator.lab import datapath_ceiling

    monkeypatch.setattr(datapath_ceiling, "RESULTS_PATH", tmp_path / "unmeasured.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the unmeasured ceiling's warning
        p = plan_run(BmwgConfig(fabrics="zcube,roft", pairs="1,4", trial_seconds=0.005,
                                trials=1), cat.runnable_sections(["5.3"]))  # fmt: skip
    k = {c.params["pairs"]: c.dilation for c in p.cases}
    assert k[1] == p.ts.dilation == FINE.dilation and k[4] > k[1], k
    assert p.pace["per_case"] == {"§5.3 pairs=1": k[1], "§5.3 pairs=4": k[4]}
    assert any(n.startswith("pace: k = ") for n in p.notes)
