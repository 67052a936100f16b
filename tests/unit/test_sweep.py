"""The load sweep (emulator.experiment.sweep, emulator.results.sweeppoints): rates, the plan's
order, the stop rule, the maximum rate meeting the SLO, sweep.json, and the run loop with a fake
lab."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from emulator.experiment.comparison import PlannedRun, fabric_specs, plan_variants
from emulator.experiment.launcher import RunResult
from emulator.experiment.plan import RunConfig
from emulator.experiment.sweep import parse_rates, plan_sweep, run_sweep
from emulator.lab.verdict import HealthVerdict
from emulator.results.goodput import parse_slo
from emulator.results.summary import RunSummary
from emulator.results.sweeppoints import (
    Point,
    RunPoint,
    SweepResult,
    max_rates,
    past_saturation,
    points,
)
from zcube_lab.core.errors import ConfigError

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
    assert {p.config.seed for p in plan} == {1}  # same requests at every rate
    two = plan_variants(RunConfig(fabric=specs["zcube"], duration_s=10), specs, ["ff", "spray"])
    assert plan_sweep(two, [0.5], 1)[1].config.tag == "spray-0.5rps-r1"
    with pytest.raises(ConfigError):
        plan_sweep(variants, [1.0], 0)


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


def test_max_rate_uses_only_trustworthy_points_that_met_with_a_spread_per_repeat() -> None:
    runs = [
        *(rp(v, r, k) for v in ("zcube", "roft") for r in (1.0, 2.0) for k in (1, 2)),
        rp("zcube", 4.0, 1), rp("zcube", 4.0, 2),
        rp("zcube", 8.0, 1, trusted=False), rp("zcube", 8.0, 2),  # met, one not trustworthy
        rp("roft", 4.0, 1), rp("roft", 4.0, 2, met=False),  # one repeat missed
        rp("roft", 8.0, 1, met=False, achieved=5.0), rp("roft", 8.0, 2, met=False, achieved=5.0),
    ]  # fmt: skip
    table = {m.variant: m for m in max_rates(runs, SLO, baseline="roft")}
    z, r = table["zcube"], table["roft"]
    assert z.rate == 4.0 and z.excluded == (8.0,)
    assert z.per_repeat == {1: 4.0, 2: 8.0}  # repeat 2 was trustworthy at 8
    assert r.rate == 2.0 and r.per_repeat == {1: 4.0, 2: 2.0} and r.excluded == ()
    assert z.ratio == pytest.approx(2.0) and r.ratio == pytest.approx(1.0)
    assert r.stopped_after == 8.0 and z.stopped_after is None
    none = max_rates([rp("roft", 1.0, trusted=False)], SLO, "roft")[0]
    assert none.rate is None and none.ratio is None and none.excluded == (1.0,)


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
    assert data["max_rates"][0]["variant"] == "zcube" and data["max_rates"][0]["rate"] == 1.0
    assert data["max_rates"][1]["rate"] is None and "stop_rule" in data
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
    assert table["zcube"].rate == 4.0 and table["roft"].rate == 1.0
    assert table["zcube"].ratio == pytest.approx(4.0) and table["roft"].stopped_after == 2.0
