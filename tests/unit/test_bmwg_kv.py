"""§5.1 (KV transfer throughput over message sizes and QPs) and §5.2 (KV transfer latency under
background load): their cases, recordings, figures and comparison against hand answers, and
one formatting of a case's label everywhere (issue 46); no lab."""

from __future__ import annotations

import itertools

import pytest

from zcube_lab.core.bmwg import catalogue as cat
from zcube_lab.core.bmwg import plan, report, scaling
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.bmwg.trials import OUT_OF_REACH, WITHIN
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.replay.recording import Transfer

HOSTS = [f"h{i}" for i in range(16)]
FINE = scaling.fine_scale()
SHARE = 644_531.0


def _cases(sections, **kw):
    cfg = BmwgConfig(**kw)
    return plan.cases(cfg, cat.runnable_sections(sections), 16, FINE, SHARE)


def test_5_1_cases_are_sizes_by_capped_qps_less_rounds_longer_than_the_trial():
    cases, refused = _cases(["5.1"], trial_seconds=0.005)
    # QPs 1, 4, 8 (16-128 capped to 8); a round is QPs x size at 400 Gb/s: 1 x 64 MB is
    # 1.28 ms (kept), 1 x 256 MB 5.12 ms (past 5 ms), 4 x 16 MB 1.28 ms, 4 x 64 MB 5.12 ms
    by_q = {}
    for c in cases:
        by_q.setdefault(c.params["qps"], []).append(c.params["size_bytes"])
    assert sorted(by_q) == [1, 4, 8]
    assert max(by_q[1]) == 64e6 and max(by_q[4]) == 16e6 and max(by_q[8]) == 16e6
    assert min(by_q[8]) == 64e3 and len(cases) == 6 + 5 + 5
    assert {(r.params["qps"], r.params["size_bytes"]) for r in refused} == {
        (1, 256e6), (1, 1e9), (4, 64e6), (4, 256e6), (4, 1e9), (8, 64e6), (8, 256e6), (8, 1e9)
    }  # fmt: skip
    assert all("longer than the trial's 5 ms" in r.why for r in refused)


def test_5_1_qps_past_the_cap_are_refused_and_asked_ones_kept():
    with pytest.raises(ConfigError, match="1 to 8"):
        _cases(["5.1"], qps="4,16")
    cases, _ = _cases(["5.1"], qps="2", sizes="1e6")
    assert [c.label for c in cases] == ["size_bytes=1000000, qps=2"]


def test_qps_scale_as_parallel_transfers_capped_in_the_parameter_table():
    assert scaling.lab_qps((1, 4, 8, 16, 32, 64, 128)) == (1, 4, 8)
    rows = {(r[0], r[1]): r for r in scaling.parameter_rows([cat.BY_SECTION["5.1"]])}
    assert rows[("5.1", "QPs")][2] == "1, 4, 8, 16, 32, 64, 128"
    assert rows[("5.1", "QPs")][3].startswith("1, 4, 8 parallel transfers")
    assert "16, 32, 64, 128: capped to 8" in rows[("5.1", "QPs")][3]
    # 1 GB at S = 33.3 is 30 MB, 20,000 frames
    assert "30,000,000 B (20,000 frames)" in rows[("5.1", "message size")][3]


def test_a_5_1_trial_is_rounds_of_parallel_transfers_of_one_pair_at_line_rate():
    # 4 x 1 MB at 400 Gb/s = 80 µs a round; 0.0003 s holds 3 rounds
    rec = plan.qp_trains(HOSTS, 1e6, 4, 3e-4)
    assert rec.meta["rounds"] == 3 and len(rec.transfers) == 12
    assert {(t.src, t.dst) for t in rec.transfers} == {("h0", "h8")}
    assert [t.start_s for t in rec.transfers[4:8]] == [pytest.approx(80e-6)] * 4
    assert [t.exchange for t in rec.transfers[:4]] == ["qp0", "qp1", "qp2", "qp3"]
    assert [t.id for t in rec.transfers] == list(range(12))
    # small messages stop at ROUNDS_MAX; a round longer than the trial still runs once
    assert plan.qp_rounds(64e3, 1, 1.0) == plan.ROUNDS_MAX
    assert plan.qp_rounds(1e9, 1, 1e-3) == 1
    n, modelled = plan.trial_size(plan.Case("5.1", {"size_bytes": 1e6, "qps": 4}, 0, "", ()),
                                  HOSTS, 3e-4)  # fmt: skip
    assert n == 12 and modelled == pytest.approx(240e-6)


def test_5_2_cases_are_sizes_by_loads_less_messages_longer_than_the_trial():
    cases, refused = _cases(["5.2"], trial_seconds=0.005)
    # 256 MB: 5.12 ms at line rate, x 4 spacing, past 5 ms
    assert {c.params["size_bytes"] for c in cases} == {64e3, 1e6, 16e6}
    assert {c.params["bg_load"] for c in cases} == {0.25, 0.5, 0.75, 0.9}
    assert [r.params["size_bytes"] for r in refused] == [256e6] * 4
    with pytest.raises(ConfigError, match="loads"):
        BmwgConfig(loads="0.5,1")
    cases, _ = _cases(["5.2"], sizes="1e6", loads="0,0.5")
    assert [c.label for c in cases] == ["size_bytes=1000000, bg_load=0",
                                        "size_bytes=1000000, bg_load=0.5"]  # fmt: skip


def test_a_5_2_trial_is_spaced_kv_messages_beside_every_other_pair_at_the_load():
    # 1 MB: 20 µs at line rate, one every 80 µs; 400 µs holds 5, a 400 µs span
    rec = plan.loaded(HOSTS, 1e6, 0.5, 4e-4, seed=3)
    kv = [t for t in rec.transfers if t.cls == "kv"]
    bg = [t for t in rec.transfers if t.cls == "other"]
    assert [(t.src, t.dst) for t in kv] == [("h0", "h8")] * 5
    assert [t.start_s for t in kv] == pytest.approx([0, 80e-6, 160e-6, 240e-6, 320e-6])
    # background: h1-h7 to h9-h15 (the KV pair's hosts left out), 1 MB every 40 µs at 50%
    assert {(t.src, t.dst) for t in bg} == {(f"h{i}", f"h{i + 8}") for i in range(1, 8)}
    for i in range(1, 8):
        starts = [t.start_s for t in bg if t.src == f"h{i}"]
        assert starts[0] < 40e-6 and all(s < 4e-4 for s in starts)
        assert [b - a for a, b in itertools.pairwise(starts)] == pytest.approx(
            [40e-6] * (len(starts) - 1)
        )
        assert len(starts) in (10, 11)
    # offered bytes over the span: 7 pairs x 50% x 50 GB/s = 175 GB/s
    assert plan.bg_offered_gbps(HOSTS, 0.5) == pytest.approx(175.0)
    assert sum(t.bytes for t in bg) / 4e-4 / 1e9 == pytest.approx(175.0, rel=0.1)
    assert [t.id for t in rec.transfers] == list(range(len(rec.transfers)))
    assert not [t for t in plan.loaded(HOSTS, 1e6, 0.0, 4e-4, 1).transfers if t.cls != "kv"]
    n, span = plan.trial_size(plan.Case("5.2", {"size_bytes": 1e6, "bg_load": 0.5}, 0, "", ()),
                              HOSTS, 4e-4)  # fmt: skip
    assert span == pytest.approx(4e-4) and n == 5 + 7 * 10
    assert plan.kv_count(64e3, 10.0) == plan.KV_MAX


def _times(durations):
    sent = {i: 0.0 for i in range(len(durations))}
    got = {i: {"arrived_s": d} for i, d in enumerate(durations) if d is not None}
    return sent, got


def test_5_1_bandwidth_is_every_byte_over_the_span_and_jfi_over_the_qps():
    ts = [Transfer(0, "kv", 0, "h0", "h8", 1e6, exchange="qp0"),
          Transfer(1, "kv", 0, "h0", "h8", 1e6, exchange="qp1")]  # fmt: skip
    sent = {0: 0.0, 1: 0.0}
    got = {0: {"arrived_s": 20e-6}, 1: {"arrived_s": 40e-6}}
    f = report.pair_figures(ts, sent, got)
    assert f["KV_xfer_bandwidth_GBps"] == pytest.approx(2e6 / 40e-6 / 1e9)  # 50 GB/s
    # 50 and 25 GB/s: (75)^2 / (2 x (2500 + 625)) = 0.9
    assert f["JFI"] == pytest.approx(0.9)


def test_5_2_latency_quantiles_background_and_a_short_load():
    kv = [Transfer(i, "kv", 0, "h0", "h8", 1e6) for i in range(5)]
    bg = [Transfer(5 + i, "other", 0, "h1", "h9", 1e6) for i in range(2)]
    durations = [10e-6, 20e-6, 30e-6, 40e-6, 100e-6, 50e-6, 100e-6]
    sent, got = _times(durations)
    f = report.latency_figures([*kv, *bg], sent, got, offered_gbps=10.0)
    assert f["KV_xfer_latency_p50_us"] == pytest.approx(30.0)
    # linear interpolation over 5: p99 at 3.96 -> 40 + 0.96 x 60
    assert f["KV_xfer_latency_p99_us"] == pytest.approx(97.6)
    assert f["KV_xfer_latency_p999_us"] == pytest.approx(99.76)
    assert f["tail_spread"] == pytest.approx(97.6 / 30)
    # the background carried 2 MB over 100 µs = 20 GB/s of the 10 offered: reached
    assert f["background_GBps"] == pytest.approx(20.0) and f["load_short"] == 0
    short = report.latency_figures([*kv, *bg], sent, got, offered_gbps=25.0)
    assert short["load_short"] == 1  # 20 < 0.9 x 25
    lost = report.latency_figures([*kv, *bg], *_times([*durations[:6], None]))
    assert lost["incomplete"] == 1 and lost["load_short"] == 0


def _rows(section, case, figs_by_fabric):
    return [{"section": section, "case": case, "params": {}, "fabric": fab, "trial": i,
             "figures": f}
            for fab, fs in figs_by_fabric.items() for i, f in enumerate(fs)]  # fmt: skip


def test_a_short_background_makes_the_5_2_comparison_out_of_reach():
    def figs(p99, short):
        return {"KV_xfer_latency_p99_us": p99, "incomplete": 0, "load_short": short}

    reached = {"zcube": [figs(100, 0), figs(101, 0)], "roft": [figs(100.5, 0), figs(100, 0)]}
    out = report.compare(report.summarize(_rows("5.2", "c", reached)))
    assert [c["verdict"] for c in out if c["figure"] == "KV_xfer_latency_p99_us"] == [WITHIN]
    short = {"zcube": [figs(100, 0), figs(101, 0)], "roft": [figs(500, 1), figs(510, 0)]}
    out = report.compare(report.summarize(_rows("5.2", "c", short)))
    assert [c["verdict"] for c in out if c["figure"] == "KV_xfer_latency_p99_us"] == [OUT_OF_REACH]


def test_a_threshold_label_is_written_one_way_whether_asked_as_1e6_or_1000000():
    a = plan.Case("8.2", {"n_burst": 4, "xoff_bytes": 1e6}, 1e6, "", ())
    b = plan.Case("8.2", {"n_burst": 4, "xoff_bytes": 1_000_000}, 1e6, "", ())
    assert a.label == b.label == "n_burst=4, xoff_bytes=1000000"
    assert plan.label_of({"within_us": 100.0, "kv_load": 0.75}) == "within_us=100, kv_load=0.75"
    # labels of older runs read the same way
    assert plan.relabel("n_burst=4, within_us=100, xoff_bytes=1e+06") == (
        "n_burst=4, within_us=100, xoff_bytes=1000000"
    )
    assert plan.relabel("pairs=2") == "pairs=2"
    assert plan.relabel("odd, kind=x") == "odd, kind=x"
