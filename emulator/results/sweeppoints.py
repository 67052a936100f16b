"""The load sweep's result logic (pure): what each run measured at its rate, the points over
repeats, the stop rule and each variant's capacity, and `sweep.json`
(`SweepResult`). The ramp that runs the sweep is `emulator.experiment.sweep`; the table and
plot are `emulator.results.sweepreport`.

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
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from emulator.results.capacity import CAPACITY_RULE, FabricCapacity, fabric_capacities
from emulator.results.goodput import Slo, arrived_in_window, goodput, parse_slo
from emulator.results.summary import RunSummary
from zcube_lab.core.errors import ConfigError

SWEEP_FILE = "sweep.json"
STOP_SHARE = 0.9
STOP_FACTOR = 4.0
STOP_RULE = (
    f"a variant stops after a rate at which every repeat missed the SLO and achieved below "
    f"{STOP_SHARE:.0%} of the offered rate or observed above {STOP_FACTOR:g}x a target"
)


def rate_tag(rate: float) -> str:
    """A rate as run tags and tables write it: `2`, `0.5`."""
    return f"{rate:g}"


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
        """Each variant's capacity (the highest rate with every rate up to it met)."""
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
