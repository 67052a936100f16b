"""The dilation ladder's verdict (bench/dilation_ladder.py, pure part): k is accepted when its
figures agree with 2k's (5% at p50, 10% at p99), every run of both is trustworthy and the trend
from k on is monotone; the analytic M/D/1 and M/D/c anchors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.dilation_ladder import (
    Row,
    checks,
    erlang_c,
    level,
    mdc_wait_s,
    merge,
    monotone,
    queue_anchor,
    report,
    validated_k,
)


def _row(k: float, seed: int = 1, scale: float = 1.0, **kw: object) -> Row:
    base = Row(
        point="light", k=k, seed=seed, run=f"r{k}-{seed}", trustworthy=True, reasons=(),
        machine_cpu_mean=0.4 / k, completed=20, failed=0, duration_s=20.0,
        ttft_p50_s=1.0 * scale, ttft_p99_s=2.0 * scale, tpot_p50_s=0.03 * scale,
        kv_p50_s=0.4 * scale, kv_p99_s=0.8 * scale, kv_ratio_p50=1.1, prefills=2,
        prefill_queue_mean_s=0.01, prefill_time_mean_s=0.2,
    )  # fmt: skip
    return replace(base, **kw)  # type: ignore[arg-type]


def _ladder(scales: dict[float, float], seeds: tuple[int, ...] = (1, 2)) -> list[Row]:
    return [_row(k, s, scales[k]) for k in scales for s in seeds]


def test_the_smallest_k_that_has_settled_is_validated() -> None:
    # k = 1 carries the emulator's fixed costs: 10% slower; 2 and 4 agree within 2%.
    rows = _ladder({1.0: 1.10, 2.0: 1.00, 4.0: 0.98})
    first, second = checks(rows, "light")
    assert first.k == 1.0 and not first.agree and first.monotone
    assert first.changes["TTFT p50"] == pytest.approx(-1 / 11)
    assert second.k == 2.0 and second.accepted
    assert validated_k(rows, "light") == 2.0


def test_a_p99_may_move_twice_as_much_as_a_p50() -> None:
    rows = _ladder({1.0: 1.0, 2.0: 1.0})
    rows = [replace(r, ttft_p99_s=2.0 * 1.08) if r.k == 2 else r for r in rows]
    assert checks(rows, "light")[0].accepted  # +8% at p99: within 10%
    rows = [replace(r, ttft_p50_s=1.08) if r.k == 2 else r for r in rows]
    check = checks(rows, "light")[0]
    assert not check.agree and check.changes["TTFT p50"] == pytest.approx(0.08)


def test_an_untrusted_run_or_a_turning_trend_blocks_the_verdict() -> None:
    rows = _ladder({1.0: 1.0, 2.0: 1.0, 4.0: 1.0})
    rows[-1] = replace(rows[-1], trustworthy=False)  # one k = 4 run
    first, second = checks(rows, "light")
    assert first.accepted and not second.trustworthy and not second.accepted
    # 1 -> 2 agree, then down 10% and up 11% again: something unscaled is left.
    rows = _ladder({1.0: 1.0, 2.0: 1.0, 4.0: 0.9, 8.0: 1.0})
    first = checks(rows, "light")[0]
    assert first.agree and not first.monotone and not first.accepted
    assert validated_k(rows, "light") is None


def test_no_2k_means_no_verdict_for_k() -> None:
    rows = _ladder({1.0: 1.0, 4.0: 1.0})
    assert checks(rows, "light") == [] and validated_k(rows, "light") is None


def test_levels_are_medians_over_seeds_with_their_spread_and_missing_figures_count_as_absent() -> (
    None
):
    rows = [_row(2.0, 1, 1.0), _row(2.0, 2, 1.2), _row(2.0, 3, 2.0), _row(2.0, 4, kv_p50_s=None)]
    mid, lo, hi = level(rows, "light", 2.0, "ttft_p50_s")
    assert (mid, lo, hi) == (pytest.approx(1.1), 1.0, 2.0)
    assert level(rows, "light", 2.0, "kv_p50_s")[0] == pytest.approx(0.48)
    assert level(rows, "light", 8.0, "kv_p50_s")[0] is None


def test_monotone_allows_steps_back_within_the_tolerance() -> None:
    assert monotone([1.1, 1.0, 0.99], 0.05) and monotone([1.0, 1.02, 1.0, 1.03], 0.05)
    assert not monotone([1.1, 1.0, 1.2], 0.05)
    assert monotone([1.0, None, 1.2], 0.05) and monotone([], 0.05)


def test_md1_and_mdc_mean_waits_and_the_queue_anchor() -> None:
    assert mdc_wait_s(2.5, 0.2) == pytest.approx(0.5 * 0.2 / (2 * 0.5))  # M/D/1: rho D / 2(1-rho)
    assert mdc_wait_s(5.0, 0.2) is None  # rho = 1: unstable
    assert erlang_c(1, 0.5) == pytest.approx(0.5)  # M/M/1: an arrival waits with prob. rho
    # M/M/2 at a = 1 (rho 0.5): P(wait) = (1/2 / 0.5) / (1 + 1 + 1) = 1/3.
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert mdc_wait_s(5.0, 0.2, 2) == pytest.approx(0.5 * (1 / 3) * 0.2 / 1.0)
    assert mdc_wait_s(10.0, 0.2, 2) is None
    # 20 requests in 20 s over 2 prefills, D = 0.2 s: a = 0.2.
    measured, model = queue_anchor(_row(1.0))
    assert measured == 0.01
    assert model == pytest.approx(0.5 * erlang_c(2, 0.2) * 0.2 / 1.8)
    assert queue_anchor(_row(1.0, prefill_time_mean_s=None))[1] is None


def test_merge_replaces_a_rerun_and_keeps_the_rest() -> None:
    saved = [_row(1.0, 1), _row(2.0, 1)]
    again = _row(2.0, 1, 1.5)
    merged = merge(saved, [again, _row(4.0, 1)])
    assert [(r.k, r.ttft_p50_s) for r in merged] == [(1.0, 1.0), (2.0, 1.5), (4.0, 1.0)]
    assert Row.from_dict(again.__dict__ | {"reasons": ["x"]}).reasons == ("x",)


def test_the_report_names_the_validated_k_and_why_the_others_failed() -> None:
    text = "\n".join(report(_ladder({1.0: 1.10, 2.0: 1.00, 4.0: 0.98})))
    assert "k=1 vs 2: TTFT p50 -9.1%" in text and "not accepted (disagree)" in text
    assert "k=2 vs 4:" in text and "accepted" in text
    assert "validated k: 2" in text
    assert "KV time / ideal p50 1.10" in text
