"""The load sweep (zcube_lab.emulator.experiment.sweep,
zcube_lab.emulator.results.sweep.sweeppoints): rates, the plan's order, the stop rule, the maximum
rate meeting the SLO, sweep.json, and the run loop with a fake
lab."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.stats import quantile
from zcube_lab.emulator.experiment.comparison import PlannedRun, fabric_specs, plan_variants
from zcube_lab.emulator.experiment.launcher import RunResult
from zcube_lab.emulator.experiment.plan import RunConfig
from zcube_lab.emulator.experiment.sweep import (
    parse_rates,
    plan_sweep,
    run_sweep,
    wall_time_estimate,
)
from zcube_lab.emulator.results.run.goodput import parse_slo
from zcube_lab.emulator.results.run.summary import RunSummary
from zcube_lab.emulator.results.sweep.sweeppoints import (
    Point,
    RunPoint,
    SweepResult,
    max_rates,
    past_saturation,
    points,
    run_point,
)
from zcube_lab.emulator.verdict.judge import HealthVerdict

DATA = Path(__file__).parent / "data"
SLO = parse_slo("ttft_p99=2s,tpot=50ms")


def rp(
    variant: str,
    rate: float,
    repeat: int = 1,
    met: bool = True,
    trusted: bool = True,
    achieved: float | None = None,
    ttft_p99: float = 1.0,
) -> RunPoint:
    """A run point: by default it met the SLO, was trustworthy and achieved the offered rate."""
    return RunPoint(
        variant=variant, rate=rate, repeat=repeat, run=f"{variant}-{rate:g}-r{repeat}",
        requests=int(rate * 60), failed=0, sent_per_s=rate,
        achieved_per_s=rate if achieved is None else achieved,
        ttft_p50_s=ttft_p99 / 2, ttft_p99_s=ttft_p99, tpot_p50_s=0.02, tpot_p99_s=0.04,
        e2e_p50_s=3.0, e2e_p99_s=6.0, goodput_per_s=rate if met else rate / 2, slo_met=met,
        attainment={"ttft_p99": 1.0 if met else 0.5, "tpot": 1.0},
        observed={"ttft_p99": ttft_p99, "tpot": 0.04}, link_peak=0.1 * rate,
        trustworthy=trusted, reason=None if trusted else "machine CPU above 90%",
    )  # fmt: skip


def test_rates_as_a_list_or_a_geometric_range_ascend() -> None:
    assert parse_rates("4, 1,2,2") == (1.0, 2.0, 4.0)
    assert parse_rates("1:16:x2") == (1.0, 2.0, 4.0, 8.0, 16.0)
    assert parse_rates("0.5:5:x3") == (0.5, 1.5, 4.5)
    for bad in ("", "a,b", "0,1", "1,2000", "1:16:x1", "16:1:x2", "1:16:2"):
        with pytest.raises(ConfigError) as info:
            parse_rates(bad)
        assert info.value.field == "rates"


def test_plan_ascends_in_rate_and_interleaves_repeats_within_a_rate() -> None:
    specs = fabric_specs(["zcube", "roft"], 16, 2)
    variants = plan_variants(RunConfig(fabric=specs["zcube"], duration_s=10), specs, ["ecmp"])
    plan = plan_sweep(variants, [4.0, 1.0], repeat=2)
    order = [(p.config.rate, p.repeat, p.variant.label) for p in plan]
    assert order == [
        (1.0, 1, "zcube"), (1.0, 1, "roft"), (1.0, 2, "zcube"), (1.0, 2, "roft"),
        (4.0, 1, "zcube"), (4.0, 1, "roft"), (4.0, 2, "zcube"), (4.0, 2, "roft"),
    ]  # fmt: skip
    assert [p.number for p in plan] == list(range(1, 9)) and {p.total for p in plan} == {8}
    assert plan[5].config.tag == "4rps-r1" and plan[5].config.fabric == specs["roft"]
    # Repeat k has seed k at every rate and on every fabric: the same requests at every rate
    # and on every fabric, different ones per repeat (this asserted one seed for all before).
    assert {(p.repeat, p.config.seed) for p in plan} == {(1, 1), (2, 2)}
    two = plan_variants(RunConfig(fabric=specs["zcube"], duration_s=10), specs, ["ff", "spray"])
    assert plan_sweep(two, [0.5], 1)[1].config.tag == "spray-0.5rps-r1"
    with pytest.raises(ConfigError):
        plan_sweep(variants, [1.0], 0)


def test_the_wall_time_estimate_counts_each_run_its_overhead_arrivals_and_drain() -> None:
    specs = fabric_specs(["zcube", "roft"], 16, 2)
    base = RunConfig(fabric=specs["zcube"], duration_s=60, drain_s=30)
    plan = plan_sweep(plan_variants(base, specs, ["ecmp"]), [1.0, 2.0, 4.0], repeat=2)
    # 12 runs: each 20 s of overhead and 60 s of arrivals, and at most its 30 s drain.
    assert wall_time_estimate(plan) == (12 * (20 + 60), 12 * (20 + 60 + 30))
    # Dilation k stretches arrivals and drain k times in wall time, never the overhead.
    slow = plan_sweep(plan_variants(replace(base, dilation=2.0), specs, ["ecmp"]), [1.0], 1)
    assert wall_time_estimate(slow) == (2 * (20 + 120), 2 * (20 + 180))
    assert wall_time_estimate([]) == (0.0, 0.0)


def test_past_saturation_needs_every_repeat_to_miss_and_to_fall_behind() -> None:
    def point(*runs: RunPoint) -> Point:
        return Point("zcube", 8.0, runs)

    behind = rp("zcube", 8.0, met=False, achieved=6.0)  # below 90% of 8
    slow = rp("zcube", 8.0, 2, met=False, ttft_p99=8.5)  # above 4 x 2 s
    assert past_saturation(point(behind, slow), SLO)
    assert not past_saturation(point(rp("zcube", 8.0, met=False, achieved=7.5)), SLO)
    assert not past_saturation(point(rp("zcube", 8.0, met=False, ttft_p99=7.9)), SLO)
    assert not past_saturation(point(behind, rp("zcube", 8.0, 2, met=True, achieved=6.0)), SLO)
    assert not past_saturation(point(), SLO)
    # Behind the nominal rate but not behind what the run's arrivals drew: not saturated.
    assert not past_saturation(point(replace(behind, sent_per_s=6.5)), SLO)


def test_max_rates_are_capacities_censored_by_an_untrustworthy_run_or_the_ladder_top() -> None:
    # This scenario used to give zcube 4, roft 2 and a plain 2.00x: zcube's untrustworthy run at
    # 8 was silently dropped and the ratio printed as if exact. Under the capacity rule
    # (zcube_lab.emulator.results.sweep.capacity) zcube's repeat 1 stops at that run (at least 4)
    # and repeat 2 met every rate (at least 8), so zcube is "at least 6" and the ratio only a bound.
    runs = [
        *(rp(v, r, k) for v in ("zcube", "roft") for r in (1.0, 2.0) for k in (1, 2)),
        rp("zcube", 4.0, 1), rp("zcube", 4.0, 2),
        rp("zcube", 8.0, 1, trusted=False), rp("zcube", 8.0, 2),  # met, one not trustworthy
        rp("roft", 4.0, 1), rp("roft", 4.0, 2, met=False),  # one repeat missed
        rp("roft", 8.0, 1, met=False, achieved=5.0), rp("roft", 8.0, 2, met=False, achieved=5.0),
    ]  # fmt: skip
    table = {m.variant: m for m in max_rates(runs, SLO, baseline="roft")}
    z, r = table["zcube"], table["roft"]
    assert z.capacity.censored and z.rate == 6.0
    assert {k: c.text() for k, c in z.per_repeat.items()} == {1: ">=4", 2: ">=8"}
    assert z.per_repeat[1].censored == "not trustworthy at 8 (met)"
    assert not r.capacity.censored and r.rate == 3.0  # median of 4 and 2
    assert {k: c.text() for k, c in r.per_repeat.items()} == {1: "4", 2: "2"}
    # roft's knees lie in [4, 8) and [2, 4): its bracket tops' median is 6, zcube at least 6.
    assert z.ratio is not None and z.ratio.exact is None and z.ratio.text() == ">= 1.00x"
    assert r.ratio is None  # the baseline
    assert r.stopped_after == 8.0 and z.stopped_after is None
    none = max_rates([rp("roft", 1.0, trusted=False)], SLO, "roft")[0]
    assert none.rate == 0.0 and none.capacity.censored


def test_points_group_by_variant_then_ascending_rate_with_spreads() -> None:
    pts = points([rp("roft", 2.0, 2, ttft_p99=3.0), rp("zcube", 1.0), rp("roft", 2.0, 1),
                  rp("roft", 1.0)])  # fmt: skip
    assert [(p.variant, p.rate, len(p.runs)) for p in pts] == [
        ("roft", 1.0, 1), ("roft", 2.0, 2), ("zcube", 1.0, 1),
    ]  # fmt: skip
    s = pts[1].figure("ttft_p99_s")
    assert (s.median, s.low, s.high) == (2.0, 1.0, 3.0)
    assert [r.repeat for r in pts[1].runs] == [1, 2]


def test_sweep_json_round_trips(tmp_path: Path) -> None:
    slo = parse_slo("ttft_p99=2s,tpot=50ms", attainment=0.8)
    result = SweepResult(
        "coding-agent", slo, (1.0, 2.0), 2, "roft", ("zcube", "roft"),
        (rp("zcube", 1.0), rp("roft", 1.0, trusted=False)),
    )  # fmt: skip
    result.write(tmp_path)
    back = SweepResult.read(tmp_path)
    assert back == result and back.slo.targets[1].attainment == 0.8
    data = json.loads((tmp_path / "sweep.json").read_text())
    zcube, roft = data["max_rates"]
    assert zcube["variant"] == "zcube" and zcube["rate"] == 1.0 and zcube["censored"]
    assert zcube["per_repeat"]["1"]["censored"] == "met at every rate tried (up to 1)"
    assert roft["rate"] == 0.0 and roft["censored"] and roft["upper"] is None
    assert zcube["ratio"] is None and zcube["ratio_text"] == "unknown"
    assert "stop_rule" in data and "capacity_rule" in data
    with pytest.raises(ConfigError):
        SweepResult.read(tmp_path / "nothing")


# --- the run loop, with a fake lab -----------------------------------------------------------


def _summary(label: str, achieved: float) -> RunSummary:
    base = RunSummary.from_dict(json.loads((DATA / "summary-zcube.json").read_text()))
    client = replace(base.client, requests_per_s=achieved)
    health = HealthVerdict.from_dict({**base.health.to_dict(), "trustworthy": True, "reasons": []})
    return replace(base, label=label, client=client, health=health, trustworthy=True)


def test_run_sweep_skips_a_variant_past_saturation(tmp_path: Path) -> None:
    specs = fabric_specs(["zcube", "roft"], 16, 2)
    variants = plan_variants(RunConfig(fabric=specs["zcube"], duration_s=10), specs, ["ecmp"])
    plan = plan_sweep(variants, [1.0, 2.0, 4.0], repeat=2)
    capacity = {"zcube": 10.0, "roft": 1.5}  # roft saturates at 2 req/s

    def fake(p: PlannedRun) -> RunResult:
        rate = p.config.rate or 0.0
        achieved = min(rate, capacity[p.variant.label])
        ttft = 0.5 if achieved == rate else 9.0
        n = int(rate * 10)
        folder = tmp_path / f"{p.variant.label}-{rate:g}-{p.repeat}"
        folder.mkdir()
        rec = {"outcome": "ok", "ttft_s": ttft, "tpot_s": 0.02, "e2e_s": 3.0}
        (folder / "requests.jsonl").write_text("".join(json.dumps(rec) + "\n" for _ in range(n)))
        return RunResult(folder, _summary(p.variant.label, achieved))

    ran, skipped = [], []
    got = list(run_sweep(plan, SLO, starting=ran.append, skipped=skipped.append, execute=fake))
    assert [(p.variant.label, p.config.rate) for p in skipped] == [("roft", 4.0)] * 2
    assert len(got) == len(ran) == 10
    assert [(g.variant, g.rate, g.slo_met) for g in got if g.rate == 2.0] == [
        ("zcube", 2.0, True), ("roft", 2.0, False), ("zcube", 2.0, True), ("roft", 2.0, False),
    ]  # fmt: skip
    assert got[0].goodput_per_s == pytest.approx(1.0)  # 10 good requests over 10 s
    assert got[0].sent_per_s == pytest.approx(1.0)
    table = {m.variant: m for m in max_rates(got, SLO, "roft")}
    assert table["zcube"].rate == 4.0 and table["zcube"].capacity.censored  # met to the top
    assert table["roft"].rate == 1.0 and not table["roft"].capacity.censored
    zcube_ratio = table["zcube"].ratio
    assert zcube_ratio is not None and zcube_ratio.text() == ">= 2.00x"  # roft's knee below 2
    assert table["roft"].stopped_after == 2.0


def test_run_sweep_ends_each_repeats_walk_at_its_first_miss_or_untrustworthy_run(
    tmp_path: Path,
) -> None:
    """Repeat 1 misses at 2 req/s, repeat 2's run at 2 is not trustworthy, repeat 3 meets every
    rate: only repeat 3 runs at 4 and 8, and the capacities are what the full ladder gives."""
    specs = fabric_specs(["zcube"], 16, 2)
    variants = plan_variants(RunConfig(fabric=specs["zcube"], duration_s=10), specs, ["ecmp"])
    plan = plan_sweep(variants, [1.0, 2.0, 4.0, 8.0], repeat=3)

    def fake(p: PlannedRun) -> RunResult:
        rate = p.config.rate or 0.0
        miss = p.repeat == 1 and rate >= 2.0
        folder = tmp_path / f"{p.config.tag}-{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        rec = {"outcome": "ok", "ttft_s": 9.0 if miss else 0.5, "tpot_s": 0.02, "e2e_s": 3.0}
        n = int(rate * 10)
        (folder / "requests.jsonl").write_text("".join(json.dumps(rec) + "\n" for _ in range(n)))
        summary = _summary(p.variant.label, rate)
        if p.repeat == 2 and rate == 2.0:
            health = HealthVerdict.from_dict(
                {**summary.health.to_dict(), "trustworthy": False, "reasons": ["machine CPU"]}
            )
            summary = replace(summary, health=health, trustworthy=False)
        return RunResult(folder, summary)

    ran: list[PlannedRun] = []
    skipped: list[PlannedRun] = []
    got = list(run_sweep(plan, SLO, starting=ran.append, skipped=skipped.append, execute=fake))
    assert [(p.config.rate, p.repeat) for p in ran] == [
        (1.0, 1), (1.0, 2), (1.0, 3), (2.0, 1), (2.0, 2), (2.0, 3), (4.0, 3), (8.0, 3),
    ]  # fmt: skip
    assert [(p.config.rate, p.repeat) for p in skipped] == [(4.0, 1), (4.0, 2), (8.0, 1), (8.0, 2)]
    short = {m.variant: m for m in max_rates(got, SLO, "zcube")}["zcube"]
    assert [short.per_repeat[k].text() for k in (1, 2, 3)] == ["1", ">=1", ">=8"]

    for folder in tmp_path.iterdir():
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()
    full = list(run_sweep(plan, SLO, execute=fake, full_ladder=True))
    assert len(full) == 12
    whole = {m.variant: m for m in max_rates(full, SLO, "zcube")}["zcube"]
    assert whole.capacity.text() == short.capacity.text()


def test_run_sweep_refines_the_knee_by_bisection(tmp_path: Path) -> None:
    specs = fabric_specs(["zcube", "roft"], 16, 2)
    variants = plan_variants(RunConfig(fabric=specs["zcube"], duration_s=10), specs, ["ecmp"])
    plan = plan_sweep(variants, [1.0, 2.0, 4.0], repeat=2)
    capacity = {"zcube": 10.0, "roft": 1.6}  # roft: met at 1, missed at 2

    def fake(p: PlannedRun) -> RunResult:
        rate = p.config.rate or 0.0
        achieved = min(rate, capacity[p.variant.label])
        n = int(rate * 10)
        folder = tmp_path / f"{p.variant.label}-{rate:g}-{p.repeat}"
        folder.mkdir()
        rec = {"outcome": "ok", "ttft_s": 0.5 if achieved == rate else 9.0, "tpot_s": 0.02}
        (folder / "requests.jsonl").write_text("".join(json.dumps(rec) + "\n" for _ in range(n)))
        return RunResult(folder, _summary(p.variant.label, achieved))

    ran: list[PlannedRun] = []
    got = list(run_sweep(plan, SLO, starting=ran.append, execute=fake, refine=2))
    extra = [(p.variant.label, p.config.rate, p.repeat, p.config.tag) for p in ran[10:]]
    # roft's bracket [1, 2] is tried at 1.5 (met), then [1.5, 2] at 1.75 (missed); zcube met
    # every rate, so it has no bracket and runs nothing more.
    assert extra == [
        ("roft", 1.5, 1, "1.5rps-r1"), ("roft", 1.5, 2, "1.5rps-r2"),
        ("roft", 1.75, 1, "1.75rps-r1"), ("roft", 1.75, 2, "1.75rps-r2"),
    ]  # fmt: skip
    assert [p.number for p in ran[10:]] == [13, 14, 15, 16] and {p.total for p in ran[10:]} == {20}
    assert {p.config.seed for p in ran[10:] if p.repeat == 2} == {2}
    table = {m.variant: m for m in max_rates(got, SLO, "roft")}
    assert table["roft"].rate == 1.5 and not table["roft"].capacity.censored


# --- samples, intervals and the interoperable figures --------------------------------------


def _ttft_records(n: int, seed: int = 5) -> list[dict]:
    gen = random.Random(seed)
    return [
        {"outcome": "ok", "sent_s": i / 10, "ttft_s": gen.expovariate(2.0), "tpot_s": 0.02,
         "e2e_s": 1.0, "output_tokens": 20, "prompt_tokens": 50}
        for i in range(n)
    ]  # fmt: skip


def _point_of(records: list[dict], repeat: int = 1) -> RunPoint:
    base = _summary("zcube", 1.0)
    client = replace(base.client, requests=len(records))
    return run_point(1.0, repeat, replace(base, client=client), records, SLO, 10.0)


def test_a_run_below_1000_requests_has_few_samples_and_order_statistic_intervals() -> None:
    records = _ttft_records(200)
    p = _point_of(records)
    assert p.few_samples and p.intervals is not None
    assert set(p.intervals) == {"ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s"}
    ttft = sorted(r["ttft_s"] for r in records)
    # 200 samples: the p99's ranks are 195 and none above (0.99^200 = 13.4% > 2.5%), the
    # median's 86 and 115 (quantile_ranks); the intervals hold the sample quantiles.
    assert p.intervals["ttft_p99_s"] == (ttft[194], None)
    assert p.intervals["ttft_p50_s"] == (ttft[85], ttft[114])
    assert ttft[194] <= quantile(ttft, 0.99)  # type: ignore[operator]
    assert p.intervals["tpot_p99_s"] == (0.02, None)  # every TPOT the same
    assert p.intervals["tpot_p50_s"] == (0.02, 0.02)
    enough = _point_of(_ttft_records(1000))
    assert not enough.few_samples and enough.intervals is None


def test_a_run_point_carries_vllm_goodput_and_the_bmwg_kpis() -> None:
    p = _point_of(_ttft_records(200))
    good = sum(1 for r in _ttft_records(200) if r["ttft_s"] <= 2.0)
    assert p.vllm_duration_s == pytest.approx(19.9 + 1.0)  # last send 19.9 s, e2e 1 s
    assert p.vllm_goodput_per_s == pytest.approx(good / 20.9)
    assert p.bmwg["TPS_input"] == pytest.approx(100 * 50 / 10.0)  # 100 sent in the 10 s window
    assert "TTFT" in p.bmwg and "Link_utilization" in p.bmwg


def test_a_points_interval_is_the_envelope_of_its_repeats_and_sweep_json_keeps_it(
    tmp_path: Path,
) -> None:
    a, b = _point_of(_ttft_records(150, seed=1)), _point_of(_ttft_records(150, seed=2), 2)
    assert a.intervals is not None and b.intervals is not None
    (point,) = points([a, b])
    lows = [a.intervals["ttft_p50_s"][0], b.intervals["ttft_p50_s"][0]]
    highs = [a.intervals["ttft_p50_s"][1], b.intervals["ttft_p50_s"][1]]
    assert None not in lows + highs and point.interval("ttft_p50_s") == (min(lows), max(highs))  # type: ignore[type-var]
    lo = min(a.intervals["ttft_p99_s"][0], b.intervals["ttft_p99_s"][0])  # type: ignore[type-var]
    hi = None  # 150 samples bound no p99 from above
    assert a.intervals["ttft_p99_s"][1] is None and b.intervals["ttft_p99_s"][1] is None
    assert point.few_samples and point.interval("ttft_p99_s") == (lo, hi)
    result = SweepResult("coding-agent", SLO, (1.0,), 2, "zcube", ("zcube",), (a, b))
    result.write(tmp_path)
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert data["points"][0]["few_samples"]
    assert data["points"][0]["intervals"]["ttft_p99_s"] == [lo, None]  # null: unbounded
    assert data["runs"][0]["intervals"]["ttft_p99_s"][1] is None
    assert data["vllm_goodput_arg"] == "ttft:2000 tpot:50"
    assert data["runs"][0]["bmwg"]["TTFT"]["p99"] == pytest.approx(1000 * a.ttft_p99_s)
    capacity = result.max_rates()[0].capacity.to_dict()
    assert data["bmwg"]["Request_Rate"]["zcube"] == json.loads(json.dumps(capacity))
    assert SweepResult.read(tmp_path).runs == (a, b)  # intervals come back as tuples


def test_a_sweep_json_from_before_the_intervals_still_reads() -> None:
    old = {k: v for k, v in rp("roft", 1.0).to_dict().items()
           if k not in ("few_samples", "intervals", "vllm_goodput_per_s", "vllm_duration_s",
                        "bmwg")}  # fmt: skip
    p = RunPoint.from_dict(old)
    assert not p.few_samples and p.intervals is None and p.bmwg == {}


def test_a_sweep_json_with_the_earlier_bootstrap_intervals_still_reads(tmp_path: Path) -> None:
    # Written before the order-statistic interval: both ends numbers, the bootstrap's rule text.
    run = replace(rp("roft", 1.0), few_samples=True, requests=96)
    data = SweepResult("coding-agent", SLO, (1.0,), 1, "roft", ("roft",), (run,)).to_dict()
    data["samples_rule"] = "95% percentile-bootstrap interval (1000 resamples) of its TTFT"
    data["runs"][0]["intervals"] = {"ttft_p99_s": [0.9, 1.3], "ttft_p50_s": [0.4, 0.5]}
    (tmp_path / "sweep.json").write_text(json.dumps(data))
    (back,) = SweepResult.read(tmp_path).runs
    assert back.intervals == {"ttft_p99_s": (0.9, 1.3), "ttft_p50_s": (0.4, 0.5)}
    (point,) = SweepResult.read(tmp_path).points()
    assert point.interval("ttft_p99_s") == (0.9, 1.3)


def test_the_sweeps_eta_counts_the_runs_left_at_the_mean_run_time() -> None:
    from zcube_lab.cli.commands.sweep import _eta

    specs = fabric_specs(["zcube", "roft"], 16, 2)
    variants = plan_variants(RunConfig(fabric=specs["zcube"], duration_s=10), specs, ["ecmp"])
    plan = plan_sweep(variants, [1.0, 2.0], repeat=3)  # 12 runs
    assert _eta(0.0, [], plan[0]) == ""
    # 4 runs took 4 minutes; run 5 starts: 8 runs left (this one included) at 1 min each
    assert _eta(240.0, plan[:4], plan[4]) == " (4 min so far, at most ~8 min left)"
