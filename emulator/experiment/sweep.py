"""A load sweep: every variant (fabric and run policy) at a ladder of offered rates, to past
saturation, judged against an SLO (`emulator.results.goodput`). Used by `zcube-lab sweep`.

Plan (pure): the rates ascend; at each rate every variant runs once per repeat, repeat-major
(all variants once, then again), as `comparison.interleave` orders a comparison; then the next
rate. Repeat k runs with seed `seed + k - 1` at every rate and on every fabric: the rate changes
only the arrival gaps, never what the i-th request is (`workloads.requests`), and the repeats
see different workloads, so their spread is the workload's as well as the emulator's. A run's
tag is `<rate>rps-r<repeat>` (with its policy in front when the variants' policies differ).

Names: a *run point* (`RunPoint`) is what one run measured at its rate; a *point* (`Point`) is
one variant at one rate over its repeats (medians and [min-max]). A point *met the SLO* when
every repeat met it, and is *trustworthy* when every repeat was (issue 11's verdict). A run's
*sent* rate counts the requests that arrived in the load window (`--duration`), over it.

Stop rule (`past_saturation`): a variant's ramp stops after a rate at which every repeat missed
the SLO and, in every repeat, the achieved throughput was below `STOP_SHARE` of the offered
rate or some target's observed quantile exceeded `STOP_FACTOR` times its threshold; its higher
rates are skipped. The offered rate here is the rate the run's arrivals came at (requests
sent over the arrival window), so a Poisson draw below the nominal rate is not read as falling
behind. The rule uses untrustworthy runs too (at such a rate the lab is overloaded
anyway); it only saves time, never picks the result.

Result (`max_rates`): each variant's *capacity* by `emulator.results.capacity`'s rule: per
repeat, the highest rate with every rate up to it met (censored, "at least", when an
untrustworthy run or the ladder's top stopped the walk); the figure is the repeats' median
with their spread, and the ratio to the baseline's a number only when neither is censored.
With `refine` N, after the ladder each variant runs N more rates, every repeat at each, each
the midpoint of its knee's bracket (`capacity.refine_rate`).
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from emulator.experiment.comparison import PlannedRun, Variant, run_planned
from emulator.experiment.launcher import RunResult
from emulator.results.capacity import (
    CAPACITY_RULE,
    FabricCapacity,
    fabric_capacities,
    refine_rate,
)
from emulator.results.figures import read_jsonl
from emulator.results.goodput import Slo, arrived_in_window, goodput, parse_slo
from emulator.results.summary import RunSummary
from zcube_lab.errors import ConfigError

SWEEP_FILE = "sweep.json"
STOP_SHARE = 0.9
STOP_FACTOR = 4.0
STOP_RULE = (
    f"a variant stops after a rate at which every repeat missed the SLO and achieved below "
    f"{STOP_SHARE:.0%} of the offered rate or observed above {STOP_FACTOR:g}x a target"
)
MAX_RATE = 1000.0  # RunConfig's bound
_RANGE = re.compile(r"^(?P<lo>[\d.]+):(?P<hi>[\d.]+):x(?P<factor>[\d.]+)$")
_RATES_FORM = "ascending requests/s: 1,2,4,8 or start:stop:xFACTOR (1:16:x2), each in (0, 1000]"


def parse_rates(text: str) -> tuple[float, ...]:
    """The offered rates `--rates` describes, ascending and distinct."""
    text = (text or "").strip()
    m = _RANGE.match(text)
    try:
        if m is not None:
            rates = _geometric(float(m["lo"]), float(m["hi"]), float(m["factor"]))
        else:
            rates = [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ConfigError("rates", text, _RATES_FORM) from None
    if not rates or any(not 0 < r <= MAX_RATE for r in rates):
        raise ConfigError("rates", text, _RATES_FORM)
    return tuple(sorted(set(rates)))


def _geometric(lo: float, hi: float, factor: float) -> list[float]:
    if factor <= 1 or lo <= 0 or hi < lo:
        raise ValueError("not a growing range")
    out, r = [], lo
    while r <= hi * (1 + 1e-9):
        out.append(round(r, 6))
        r *= factor
    return out


def rate_tag(rate: float) -> str:
    """A rate as run tags and tables write it: `2`, `0.5`."""
    return f"{rate:g}"


def plan_sweep(
    variants: Sequence[Variant], rates: Sequence[float], repeat: int
) -> list[PlannedRun]:
    """Every variant at every rate `repeat` times: rates ascending, repeats interleaved within
    a rate; each config carries its rate and repeat k's seed (the variant's seed + k - 1) and is
    tagged `[<policy>-]<rate>rps-r<repeat>`."""
    if repeat < 1:
        raise ConfigError("repeat", repeat, "at least 1")
    tag_policy = len({v.policy for v in variants}) > 1
    total = len(variants) * len(rates) * repeat
    runs: list[PlannedRun] = []
    for rate in sorted(rates):
        for rep in range(1, repeat + 1):
            for v in variants:
                tag = f"{rate_tag(rate)}rps-r{rep}"
                tag = f"{v.policy}-{tag}" if tag_policy else tag
                cfg = replace(v.config, rate=rate, tag=tag, seed=v.config.seed + rep - 1)
                runs.append(PlannedRun(len(runs) + 1, total, rep, repeat, v, cfg))
    return runs


@dataclass(frozen=True)
class RunPoint:
    """What one run measured at its offered rate (times in seconds, rates in requests/s)."""

    variant: str
    rate: float
    repeat: int
    run: str  # the run folder's name
    requests: int
    failed: int
    sent_per_s: float | None  # requests that arrived in the load window, per second of it
    achieved_per_s: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p99_s: float | None
    e2e_p50_s: float | None
    e2e_p99_s: float | None
    goodput_per_s: float | None
    slo_met: bool
    attainment: Mapping[str, float]  # SLO target label -> share of requests meeting it
    observed: Mapping[str, float | None]  # SLO target label -> observed quantile
    link_peak: float | None  # the busiest link's peak utilization (0-1)
    trustworthy: bool
    reason: str | None  # the verdict's first reason when not trustworthy

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "attainment": dict(self.attainment),
            "observed": dict(self.observed),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunPoint:
        return cls(**data)


def run_point(
    rate: float,
    repeat: int,
    summary: RunSummary,
    records: Sequence[Mapping[str, Any]],
    slo: Slo,
    window_s: float,
) -> RunPoint:
    """One run's point: its client figures, goodput against `slo` over the arrival window
    `window_s`, the busiest link's peak and the verdict."""
    c = summary.client
    g = goodput(records, slo, window_s)
    d = summary.fabric_stats.directed
    return RunPoint(
        variant=summary.variant,
        rate=rate,
        repeat=repeat,
        run=summary.run,
        requests=c.requests,
        failed=c.failed,
        sent_per_s=len(arrived_in_window(records, window_s)) / window_s if window_s > 0 else None,
        achieved_per_s=c.requests_per_s,
        ttft_p50_s=c.ttft_p50_s,
        ttft_p99_s=c.ttft_p99_s,
        tpot_p50_s=c.tpot_p50_s,
        tpot_p99_s=c.tpot_p99_s,
        e2e_p50_s=c.e2e_p50_s,
        e2e_p99_s=c.e2e_p99_s,
        goodput_per_s=g.goodput_per_s,
        slo_met=g.met,
        attainment=dict(g.attainment),
        observed=dict(g.observed),
        link_peak=d.busiest_link_util_peak if d is not None else None,
        trustworthy=summary.trustworthy,
        reason=None if summary.trustworthy else next(iter(summary.health.reasons), "no reason"),
    )


@dataclass(frozen=True)
class Spread:
    """A figure over repeats: median, min and max of the repeats that have it."""

    median: float | None
    low: float | None
    high: float | None


def spread(values: Sequence[float | None]) -> Spread:
    """The median and range of the values that are not None."""
    vals = [v for v in values if v is not None]
    if not vals:
        return Spread(None, None, None)
    return Spread(statistics.median(vals), min(vals), max(vals))


@dataclass(frozen=True)
class Point:
    """One variant at one offered rate, over its repeats."""

    variant: str
    rate: float
    runs: tuple[RunPoint, ...]

    @property
    def met(self) -> bool:
        """Every repeat met the SLO."""
        return bool(self.runs) and all(r.slo_met for r in self.runs)

    @property
    def trustworthy(self) -> bool:
        """Every repeat was trustworthy."""
        return bool(self.runs) and all(r.trustworthy for r in self.runs)

    @property
    def reason(self) -> str | None:
        """The first reason a repeat was not trustworthy."""
        return next((r.reason or "no reason" for r in self.runs if not r.trustworthy), None)

    def figure(self, name: str) -> Spread:
        """A RunPoint field (`ttft_p99_s`, `goodput_per_s`) over the repeats."""
        return spread([getattr(r, name) for r in self.runs])


def points(runs: Sequence[RunPoint]) -> list[Point]:
    """The run points grouped by variant (first-seen order) and rate (ascending)."""
    groups: dict[tuple[str, float], list[RunPoint]] = {}
    for r in runs:
        groups.setdefault((r.variant, r.rate), []).append(r)
    order = list(dict.fromkeys(r.variant for r in runs))
    keys = sorted(groups, key=lambda k: (order.index(k[0]), k[1]))
    return [
        Point(v, rate, tuple(sorted(groups[(v, rate)], key=lambda r: r.repeat))) for v, rate in keys
    ]


def past_saturation(point: Point, slo: Slo) -> bool:
    """Whether the point is clearly past saturation (the module docstring's stop rule)."""

    def saturated(r: RunPoint) -> bool:
        offered = r.sent_per_s if r.sent_per_s is not None else r.rate
        if (r.achieved_per_s or 0.0) < STOP_SHARE * offered:
            return True
        return any(
            (r.observed.get(t.label) or 0.0) > STOP_FACTOR * t.threshold_s for t in slo.targets
        )

    return bool(point.runs) and all(not r.slo_met and saturated(r) for r in point.runs)


MaxRate = FabricCapacity  # a variant's capacity row (emulator.results.capacity)


def max_rates(runs: Sequence[RunPoint], slo: Slo, baseline: str) -> list[MaxRate]:
    """Each variant's capacity, its spread and its ratio to the baseline's, with the rate
    after which the stop rule ended its ramp."""
    stops: dict[str, float] = {}
    for p in points(runs):
        if p.variant not in stops and past_saturation(p, slo):
            stops[p.variant] = p.rate
    return fabric_capacities(runs, baseline, stops)


@dataclass(frozen=True)
class SweepResult:
    """What `sweep.json` holds: the sweep's settings and every run point; the points and the
    max-rate table are derived (and written too, for readers without this code)."""

    workload: str
    slo: Slo
    rates: tuple[float, ...]
    repeat: int
    baseline: str
    variants: tuple[str, ...]
    runs: tuple[RunPoint, ...]
    dir: Path | None = field(default=None, compare=False, repr=False)
    refine: int = 0  # rates bisected per variant after the ladder (`--refine`)

    def points(self) -> list[Point]:
        """Every (variant, rate) point measured."""
        return points(self.runs)

    def max_rates(self) -> list[MaxRate]:
        """Each variant's maximum rate meeting the SLO."""
        return max_rates(self.runs, self.slo, self.baseline)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "slo": self.slo.text,
            "targets": [asdict(t) for t in self.slo.targets],
            "rates": list(self.rates),
            "repeat": self.repeat,
            "baseline": self.baseline,
            "variants": list(self.variants),
            "refine": self.refine,
            "stop_rule": STOP_RULE,
            "capacity_rule": CAPACITY_RULE,
            "runs": [r.to_dict() for r in self.runs],
            "max_rates": [m.to_dict() for m in self.max_rates()],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], dir: Path | None = None) -> SweepResult:
        # The shares of targets without `_pNN` are written per target; parse with any default
        # and put them back.
        slo = parse_slo(data["slo"])
        shares = {t["metric"]: t["attainment"] for t in data.get("targets") or ()}
        slo = Slo(tuple(replace(t, attainment=shares.get(t.metric, t.attainment))
                        for t in slo.targets))  # fmt: skip
        return cls(
            workload=data["workload"],
            slo=slo,
            rates=tuple(data["rates"]),
            repeat=data["repeat"],
            baseline=data["baseline"],
            variants=tuple(data["variants"]),
            runs=tuple(RunPoint.from_dict(r) for r in data["runs"]),
            dir=dir,
            refine=data.get("refine", 0),
        )

    def write(self, out_dir: Path) -> Path:
        """Write `out_dir/sweep.json`; its path."""
        path = out_dir / SWEEP_FILE
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def read(cls, out_dir: Path) -> SweepResult:
        """The sweep written in `out_dir`."""
        path = out_dir / SWEEP_FILE
        if not path.is_file():
            raise ConfigError("report_only", str(out_dir), f"a sweep folder holding {SWEEP_FILE}")
        return cls.from_dict(json.loads(path.read_text()), dir=out_dir)


Execute = Callable[[PlannedRun], RunResult]


def run_sweep(
    plan: Sequence[PlannedRun],
    slo: Slo,
    progress: Callable[[str], None] | None = None,
    starting: Callable[[PlannedRun], None] | None = None,
    skipped: Callable[[PlannedRun], None] | None = None,
    execute: Execute | None = None,
    refine: int = 0,
) -> Iterator[RunPoint]:
    """Run the plan in order, yielding each run's point as it completes; once a rate's repeats
    are done, a variant past saturation skips its higher rates (`skipped` is told of each);
    then `refine` bisection rates per variant. `execute` runs one planned run (default: the
    lab, which needs root)."""

    def lab(p: PlannedRun) -> RunResult:
        return next(iter(run_planned([p], progress=progress)))[1]

    run_one = execute or lab
    stopped: set[str] = set()
    done: list[RunPoint] = []
    for rate in sorted({p.config.rate for p in plan if p.config.rate is not None}):
        at_rate: list[RunPoint] = []
        for planned in (p for p in plan if p.config.rate == rate):
            if planned.variant.label in stopped:
                if skipped is not None:
                    skipped(planned)
                continue
            if starting is not None:
                starting(planned)
            result = run_one(planned)
            records = read_jsonl(result.path / "requests.jsonl")
            point = run_point(
                rate, planned.repeat, result.summary, records, slo, planned.config.duration_s
            )
            done.append(point)
            at_rate.append(point)
            yield point
        stopped |= {p.variant for p in points(at_rate) if past_saturation(p, slo)}
    if refine:
        yield from _refine(plan, slo, done, refine, run_one, starting)


def _refine(
    plan: Sequence[PlannedRun],
    slo: Slo,
    done: list[RunPoint],
    steps: int,
    run_one: Execute,
    starting: Callable[[PlannedRun], None] | None,
) -> Iterator[RunPoint]:
    """`steps` rounds: every variant with a knee bracket runs its midpoint, every repeat,
    repeats interleaved across the variants as in the ladder."""
    variants = list({p.variant.label: p.variant for p in plan}.values())
    repeats = max((p.repeats for p in plan), default=1)
    number, total = len(plan), len(plan) + steps * len(variants) * repeats  # at most
    for _ in range(steps):
        runs: list[PlannedRun] = []
        for v in variants:
            rate = refine_rate([r for r in done if r.variant == v.label])
            if rate is not None:
                runs += [p for p in plan_sweep(variants, [rate], repeats) if p.variant == v]
        for planned in sorted(runs, key=lambda p: p.repeat):
            number += 1
            planned = replace(planned, number=number, total=total)
            if starting is not None:
                starting(planned)
            result = run_one(planned)
            records = read_jsonl(result.path / "requests.jsonl")
            rate = planned.config.rate or 0.0
            point = run_point(
                rate, planned.repeat, result.summary, records, slo, planned.config.duration_s
            )
            done.append(point)
            yield point
