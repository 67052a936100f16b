"""§7.1 (AllToAll dispatch throughput) and §7.3 (wide EP scaling) of the IETF draft: cases,
the recordings a trial replays, and the figures' arithmetic against hand answers (issue 46);
no lab."""

from __future__ import annotations

import pytest

from zcube_lab.core.bmwg import alltoall as a2a
from zcube_lab.core.bmwg import catalogue as cat
from zcube_lab.core.bmwg import plan, report, scaling
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.bmwg.trials import HIGHER, LOWER
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.replay.recording import Recording, Transfer

HOSTS = [f"h{i}" for i in range(16)]
FINE = scaling.fine_scale()
SHARE = 644_531.0


def test_bytes_per_peer_and_per_gpu_by_hand():
    # 128 tokens x top-8 over 8 GPUs: 128 tokens to each peer; FP8 7,168 B + 56 scales x 4 B
    assert a2a.dispatch_bytes(128, 8) == 128 * 7392 == 946_176
    assert a2a.combine_bytes(128, 8) == 128 * 7168 * 2 == 1_835_008
    # to 7 peers each way: 7 x 2,781,184 B
    assert a2a.gpu_bytes(128, 8) == 19_468_288
    # through a 400 Gb/s NIC: 19,468,288 x 8 / 400e9 s
    assert a2a.ideal_s(128, 8) == pytest.approx(389.36576e-6)
    # at EP 16 each peer gets half as many tokens; a GPU's bytes barely change
    assert a2a.dispatch_bytes(128, 16) == 64 * 7392
    assert a2a.gpu_bytes(128, 16) == 15 * 64 * (7392 + 14336)


def test_throughput_is_bytes_over_latency():
    assert a2a.bandwidth_gbps(19_468_288, 1e-3) == pytest.approx(19.468288)
    assert a2a.bandwidth_gbps(1e9, None) is None and a2a.bandwidth_gbps(1e9, 0.0) is None
    # at the ideal latency a GPU moves its NIC's 50 GB/s
    assert a2a.bandwidth_gbps(a2a.gpu_bytes(32, 8), a2a.ideal_s(32, 8)) == pytest.approx(50.0)


def test_a_trial_is_layers_of_dispatch_then_combine_among_the_first_hosts():
    rec = a2a.exchanges(HOSTS, 128, 4, 1e-9)  # the least: 2 layers
    assert rec.meta["layers"] == 2 and rec.meta["tokens"] == 128 and rec.meta["ep_size"] == 4
    assert len(rec.transfers) == 2 * 4 * 3 * 2
    assert {t.src for t in rec.transfers} | {t.dst for t in rec.transfers} == set(HOSTS[:4])
    assert {t.exchange for t in rec.transfers} == {"ep/l0", "ep/l1"}
    by_id = {t.id: t for t in rec.transfers}
    # 128 x 8 / 4 = 256 tokens a peer
    dispatches = [t for t in rec.transfers if t.bytes == 256 * 7392]
    combines = [t for t in rec.transfers if t.bytes == 256 * 14336]
    assert len(dispatches) == len(combines) == 24
    for c in combines:  # each combine answers one dispatch, back the other way, same layer
        (d,) = (by_id[i] for i in c.after)
        assert (d.src, d.dst, d.exchange) == (c.dst, c.src, c.exchange) and d in dispatches
    # a member's second-layer dispatches wait for the 3 combines into it of the first
    for d in (t for t in dispatches if t.exchange == "ep/l1"):
        into = [by_id[i] for i in d.after]
        assert len(into) == 3 and all(c.dst == d.src and c.exchange == "ep/l0" for c in into)
        assert d.gap_s == a2a.GAP_S
    assert all(not t.after for t in dispatches if t.exchange == "ep/l0")


def test_layers_fill_the_trial_at_line_rate():
    one = a2a.ideal_s(128, 8) + a2a.GAP_S  # 439.4 µs
    assert a2a.layers(128, 8, 10 * one) == 10
    n, modelled = a2a.trial_size(128, 8, 10 * one)
    assert n == 10 * 8 * 7 * 2 == len(a2a.exchanges(HOSTS, 128, 8, 10 * one).transfers)
    assert modelled == pytest.approx(10 * one)


def test_default_cases_and_the_dispatch_the_fine_scale_does_not_hold():
    ok, refused = a2a.case_params("7.1", 16, FINE)
    assert ok == [{"ep_size": 8, "tokens": t} for t in (32, 128, 512)]
    # 8 tokens at EP 8: 59,136 B a peer is 1,774 lab bytes at S = 33.3, 1.2 frames
    ((params, why),) = refused
    assert params == {"ep_size": 8, "tokens": 8} and "1.2 frames" in why
    ok, refused = a2a.case_params("7.3", 16, FINE)
    assert ok == [{"ep_size": g, "tokens": 128} for g in (4, 8, 16)] and refused == []
    ok, _ = a2a.case_params("7.3", 8, FINE)  # 16 capped to the 8 hosts, once
    assert [p["ep_size"] for p in ok] == [4, 8]


def test_an_ep_size_past_the_hosts_is_refused_naming_the_range():
    with pytest.raises(ConfigError, match="2 to 16"):
        a2a.case_params("7.3", 16, FINE, ep_sizes=(4, 17))
    with pytest.raises(ConfigError, match="2 to 16"):
        a2a.case_params("7.1", 16, FINE, ep_sizes=(1,))
    with pytest.raises(ConfigError, match="tokens"):
        BmwgConfig(tokens="12.5")


def test_the_plan_carries_the_cases_their_recordings_and_sizes():
    cfg = BmwgConfig(tokens="64,256", ep_sizes="16")
    cases, refused = plan.cases(cfg, cat.runnable_sections(["7.1"]), 16, FINE, SHARE)
    assert [c.params for c in cases] == [{"ep_size": 16, "tokens": t} for t in (64, 256)]
    assert refused == [] and all(c.replays == ("ep",) for c in cases)
    assert cases[0].label == "ep_size=16, tokens=64"
    recs = plan.trial_recordings(cases[1], HOSTS, 0.002, 1)
    assert list(recs) == ["ep"] and recs["ep"].meta["ep_size"] == 16
    assert plan.trial_size(cases[1], HOSTS, 0.002)[0] == len(recs["ep"].transfers)


def _result(p50: float | None, p99: float | None, n: int, incomplete: int = 0) -> dict:
    ex = {"n": n, "p50": p50, "p99": p99, "max": p99}
    return {"classes": {"ep": {"transfers": 112, "incomplete": incomplete, "exchange_s": ex}},
            "pauses": {"pause_frames": 3, "pause_total_us": 12.5}}  # fmt: skip


def test_trial_figures_by_the_draft_s_names():
    rec = Recording((Transfer(0, "ep", 0.0, "h0", "h1", 1.0),), tuple(HOSTS),
                    {"tokens": 128, "ep_size": 8, "layers": 5})  # fmt: skip
    f = a2a.trial_figures(rec, _result(1e-3, 2e-3, 5))
    assert f["EP_alltoall_latency_p50_us"] == pytest.approx(1000)
    assert f["EP_alltoall_latency_p99_us"] == pytest.approx(2000)
    assert f["EP_alltoall_bandwidth_GBps"] == pytest.approx(19.468288)
    assert f["latency_over_ideal_p50"] == pytest.approx(1000 / 389.36576)
    assert f["dispatch_bytes_per_peer"] == 946_176 and f["exchanges"] == 5
    assert f["PFC_frame_count"] == 3 and f["incomplete"] == 0 and f["transfers"] == 112
    lost = a2a.trial_figures(rec, _result(None, None, 0, incomplete=4))
    assert lost["EP_alltoall_bandwidth_GBps"] is None and lost["incomplete"] == 4


def _row(fabric: str, trial: int, g: int, bw: float, lost: int = 0) -> dict:
    params = {"ep_size": g, "tokens": 128}
    return {"section": "7.3", "case": plan.label_of(params), "params": params, "fabric": fabric,
            "trial": trial, "figures": {"EP_alltoall_bandwidth_GBps": bw,
                                        "incomplete": lost}}  # fmt: skip


def test_scaling_efficiency_is_each_size_over_the_smallest_in_its_trial():
    rows = [_row("zcube", 0, 4, 20.0), _row("zcube", 0, 8, 10.0), _row("zcube", 0, 16, 5.0),
            _row("zcube", 1, 4, 16.0), _row("zcube", 1, 16, 12.0, lost=1)]  # fmt: skip
    got = {(r["trial"], r["case"]): r["figures"] for r in a2a.scaling_rows(rows)}
    assert got[(0, "ep_size=8, tokens=128, vs_ep_size=4")]["scaling_efficiency"] == 0.5
    assert got[(0, "ep_size=16, tokens=128, vs_ep_size=4")]["scaling_efficiency"] == 0.25
    assert got[(1, "ep_size=16, tokens=128, vs_ep_size=4")] == {
        "scaling_efficiency": 0.75, "incomplete": 1}  # fmt: skip
    assert len(got) == 3
    params = {"ep_size": 16, "tokens": 128, "vs_ep_size": 4}
    assert plan.label_of(params) == "ep_size=16, tokens=128, vs_ep_size=4"


def test_the_comparison_judges_bandwidth_higher_and_latency_lower_as_better():
    rows = []
    for t in range(3):
        for fabric, bw in (("zcube", 20.0 + t * 0.1), ("roft", 10.0 + t * 0.1)):
            for g, scale in ((4, 1.0), (8, 0.5 if fabric == "roft" else 0.9)):
                r = _row(fabric, t, g, bw * scale)
                r["figures"]["EP_alltoall_latency_p99_us"] = 1000.0 / scale + t
                rows.append(r)
    comps = report.compare(report.summary_of(rows))
    got = {(c["case"], c["figure"]): c["verdict"] for c in comps}
    assert got[("ep_size=8, tokens=128", "EP_alltoall_bandwidth_GBps")] == HIGHER
    assert got[("ep_size=8, tokens=128", "EP_alltoall_latency_p99_us")] == LOWER
    assert got[("ep_size=8, tokens=128, vs_ep_size=4", "scaling_efficiency")] == HIGHER
    assert "EP_alltoall_bandwidth_GBps" in report.HIGHER_IS_BETTER


def test_both_sections_are_run_and_fine_scale_only():
    for s in ("7.1", "7.3"):
        t = cat.test_of(s)
        assert t.runner and t.status == cat.FINE and s in report.HEADLINE
    assert [t.section for t in cat.runnable_sections(["7.1", "7.3"])] == ["7.1", "7.3"]
