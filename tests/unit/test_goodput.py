"""SLOs and goodput (zcube_lab.emulator.results.run.goodput): parsing, per-request thresholds,
attainment."""

from __future__ import annotations

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.results.run.goodput import (
    SloTarget,
    arrived_in_window,
    goodput,
    parse_slo,
    request_meets,
    request_meets_slo,
    vllm_duration,
    vllm_goodput,
    vllm_goodput_arg,
)


def _rec(ttft: float | None = 0.5, tpot: float | None = 0.02, e2e: float = 2.0, ok: bool = True):
    return {
        "outcome": "ok" if ok else "timeout",
        "ttft_s": ttft,
        "tpot_s": tpot,
        "e2e_s": e2e,
    }


def test_targets_with_and_without_a_percentile_and_units() -> None:
    slo = parse_slo("ttft_p99=2s, tpot=50ms,E2E_p90=10s", attainment=0.8)
    assert slo.targets == (
        SloTarget("ttft", 2.0, 0.99, 99.0),
        SloTarget("tpot", pytest.approx(0.05), 0.8, None),
        SloTarget("e2e", 10.0, pytest.approx(0.9), 90.0),
    )
    assert [t.label for t in slo.targets] == ["ttft_p99", "tpot", "e2e_p90"]
    assert slo.target("tpot") is slo.targets[1] and slo.target("itl") is None
    assert parse_slo("ttft_p99.9=1.5s").targets[0].attainment == pytest.approx(0.999)
    assert parse_slo(slo.text, attainment=0.8) == slo  # the text parses back
    # shown to people, a bare target carries the percentile it asks (--attainment)
    assert slo.shown == "ttft_p99=2s, tpot=50ms (p80), e2e_p90=10s"
    assert parse_slo("tpot=50ms", attainment=0.9).shown == "tpot=50ms (p90)"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("", "slo"),
        ("ttft", "slo"),  # no value
        ("itl=50ms", "slo"),  # a request has many gaps, not one value
        ("ttft_x=2s", "slo"),
        ("ttft_p100=2s", "slo"),
        ("ttft_p0=2s", "slo"),
        ("ttft=2", "slo ttft"),  # the unit is required
        ("ttft=2min", "slo ttft"),
        ("ttft=0s", "slo ttft"),
        ("ttft=-1s", "slo ttft"),
        ("ttft=1s,ttft_p99=2s", "slo"),  # one target per metric
    ],
)
def test_bad_slos_name_the_field_and_what_is_allowed(text: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_slo(text)
    assert info.value.field == field and info.value.allowed


def test_the_attainment_is_a_share() -> None:
    for bad in (0.0, 1.5, -0.1):
        with pytest.raises(ConfigError) as info:
            parse_slo("ttft=1s", attainment=bad)
        assert info.value.field == "attainment"


def test_a_request_meets_a_target_when_it_completed_within_the_threshold() -> None:
    ttft = parse_slo("ttft=1s").targets[0]
    tpot = parse_slo("tpot=50ms").targets[0]
    assert request_meets(_rec(ttft=1.0), ttft)  # at the threshold holds
    assert not request_meets(_rec(ttft=1.01), ttft)
    assert not request_meets(_rec(ttft=0.1, ok=False), ttft)  # failed: a miss
    assert not request_meets(_rec(ttft=None), ttft)  # no first token: a miss
    assert request_meets(_rec(tpot=None), tpot)  # one output token: no TPOT to miss
    assert not request_meets(_rec(tpot=None, ok=False), tpot)
    slo = parse_slo("ttft=1s,tpot=50ms")
    assert request_meets_slo(_rec(ttft=0.9, tpot=0.05), slo)
    assert not request_meets_slo(_rec(ttft=0.9, tpot=0.06), slo)


def test_goodput_counts_requests_meeting_every_target_over_the_window() -> None:
    slo = parse_slo("ttft=1s,tpot=50ms", attainment=0.7)
    recs = (
        [_rec(ttft=0.5, tpot=0.02)] * 7  # good
        + [_rec(ttft=1.5, tpot=0.02)]  # misses ttft
        + [_rec(ttft=0.5, tpot=0.08)]  # misses tpot
        + [_rec(ok=False)]  # failed: misses both
    )
    g = goodput(recs, slo, window_s=2.0)
    assert (g.requests, g.good) == (10, 7)
    assert g.goodput_per_s == pytest.approx(3.5)
    assert g.attainment == {"ttft": pytest.approx(0.8), "tpot": pytest.approx(0.8)}
    assert g.met  # 80% >= 70% on both
    assert not goodput(recs, parse_slo("ttft=1s,tpot=50ms", attainment=0.81), 2.0).met
    # The observed quantile is over completed requests at the target's share.
    assert g.observed["ttft"] == pytest.approx(0.5)
    assert goodput(recs, parse_slo("ttft_p99=1s"), 2.0).observed["ttft_p99"] > 1.0


def test_only_requests_that_arrived_in_the_window_count() -> None:
    slo = parse_slo("ttft=1s")
    inside = [{**_rec(), "sent_s": 0.5 * i} for i in range(8)]  # sent at 0-3.5 s
    late = [{**_rec(ttft=5.0), "sent_s": 4.0}, {**_rec(ttft=5.0), "planned_s": 4.2}]
    assert arrived_in_window([*inside, *late], 4.0) == inside
    g = goodput([*inside, *late], slo, window_s=4.0)
    # The late ones (sent at or after the window's end) are neither counted nor missed.
    assert (g.requests, g.good, g.goodput_per_s, g.met) == (8, 8, 2.0, True)
    assert len(arrived_in_window([_rec()], 4.0)) == 1  # a record without times counts
    assert len(arrived_in_window(late, 0.0)) == 2  # no window: every record


def test_a_percentile_target_asks_its_own_share_and_no_requests_never_meet() -> None:
    recs = [_rec(ttft=0.5)] * 98 + [_rec(ttft=3.0)] * 2
    assert goodput(recs, parse_slo("ttft_p98=1s"), 10.0).met
    assert not goodput(recs, parse_slo("ttft_p99=1s"), 10.0).met
    empty = goodput([], parse_slo("ttft=1s"), 10.0)
    assert not empty.met and empty.goodput_per_s == 0.0 and empty.attainment == {"ttft": 0.0}
    assert goodput(recs, parse_slo("ttft=1s"), 0.0).goodput_per_s is None


def _sent(sent: float, ttft: float | None, e2e: float | None, tokens: int, ok: bool = True):
    """A record as the driver writes it, its TPOT from its times as vLLM takes it."""
    tpot = (e2e - ttft) / (tokens - 1) if ok and tokens > 1 and e2e and ttft else None
    return {"outcome": "ok" if ok else "error", "sent_s": sent, "ttft_s": ttft, "tpot_s": tpot,
            "e2e_s": e2e, "output_tokens": tokens}  # fmt: skip


def test_vllm_goodput_matches_hand_computed_records() -> None:
    slo = parse_slo("ttft_p99=1s,tpot=50ms,e2e=5s")
    assert vllm_goodput_arg(slo) == "ttft:1000 tpot:50 e2el:5000"
    records = [
        _sent(0.0, 0.5, 2.5, 41),  # TPOT (2.5-0.5)/40 = 50 ms: at the threshold, good
        _sent(1.0, 0.9, 3.0, 31),  # TPOT 2.1/30 = 70 ms: misses tpot
        _sent(2.0, 1.2, 2.0, 9),  # TTFT 1.2 s: misses ttft
        _sent(3.0, 0.3, 0.3, 1),  # one token: TPOT 0 as vLLM counts it, good
        _sent(4.0, 0.5, 5.5, 101),  # TPOT 50 ms but e2e 5.5 s: misses e2el; ends last, 9.5 s
        _sent(5.0, None, None, 0, ok=False),  # failed: never good, ends at its send
        _sent(6.0, 0.25, 3.25, 61),  # TPOT 3/60 = 50 ms, e2e 3.25 s: good (ends at 9.25 s)
    ]
    v = vllm_goodput(records, slo)
    assert vllm_duration(records) == pytest.approx(9.5)
    assert (v.good, v.completed) == (3, 6)
    assert v.duration_s == pytest.approx(9.5)
    assert v.request_goodput == pytest.approx(3 / 9.5)
    # ours counts the same requests as good but over the window, and only those sent in it
    g = goodput(records, slo, window_s=5.0)
    assert (g.requests, g.good, g.goodput_per_s) == (5, 2, pytest.approx(2 / 5.0))


def test_vllm_goodput_of_no_records_is_undefined() -> None:
    v = vllm_goodput([], parse_slo("ttft=2s"))
    assert (v.good, v.duration_s, v.request_goodput) == (0, None, None)
