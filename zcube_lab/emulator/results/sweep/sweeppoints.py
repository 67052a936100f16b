"""The load sweep's result logic (pure): what each run measured at its rate, the points over
repeats, the stop rule and each variant's capacity, and `sweep.json`
(`SweepResult`). The ramp that runs the sweep is `zcube_lab.emulator.experiment.sweep`; the table
and plot are `zcube_lab.emulator.results.sweep.sweepreport`.

Names: a *run point* (`RunPoint`) is what one run measured at its rate; a *point* (`Point`) is
one variant at one rate over its repeats (medians and [min-max]). A point *met the SLO* when
every repeat met it, and is *trustworthy* when every repeat was (issue 11's verdict). A run's
*sent* rate counts the requests that arrived in the load window (`--duration`), over it.

Samples: a run with fewer than `ENOUGH_SAMPLES` requests has *few samples* (its p99 is one of
its ten largest values or fewer); for such a run the point carries the 95% order-statistic
(binomial) interval (`zcube_lab.core.stats.quantile_intervals`) of the client's TTFT and TPOT
p50 and p99, over the same completed requests as those figures. An end the samples cannot
bound is None (null in sweep.json): below 368 requests a p99 has no upper end. A point has few
samples when one of its repeats has; its interval is the envelope of its repeats' intervals
(the lowest low to the highest high, unbounded when a repeat's is), which holds each repeat's
interval. sweep.json files written with the earlier bootstrap intervals read the same way.

Interoperable figures per run: vLLM's "Request goodput (req/s)" (`goodput.vllm_goodput`) and the
IETF BMWG draft's KPIs under their names: the run summary's `bmwg` section, or for a run from
before summaries carried it the same KPIs computed from its summary and records
(`zcube_lab.emulator.results.ietf.bmwg`); a point's capacity is the draft's Request_Rate.

Stop rules: a repeat's ramp ends at the first rate where it missed the SLO or was not
trustworthy (`capacity.walk_ended`): by the capacity rule no higher rate can change that
repeat's capacity, so its higher rates are skipped (`zcube-lab sweep --full-ladder` runs them
anyway, for curves past the knee). Saturation (`past_saturation`) is what the table notes: a
variant is past saturation at a rate at which every repeat missed the SLO and, in every repeat,
the achieved throughput was below `STOP_SHARE` of the offered rate or some target's observed
quantile exceeded `STOP_FACTOR` times its threshold (GuideLLM's over-saturation in spirit); with
`--full-ladder` it is what ends a variant's ramp. The offered rate here is the rate the run's
arrivals came at (requests sent over the arrival window), so a Poisson draw below the nominal
rate is not read as falling behind. Both rules use untrustworthy runs too; they only save
time, never pick the result.

Result (`max_rates`): each variant's *capacity* by `zcube_lab.emulator.results.sweep.capacity`'s
rule: per repeat, the highest rate with every rate up to it met (censored, "at least", when an
untrustworthy run or the ladder's top stopped the walk); the figure is the repeats' median
with their spread, and the ratio to the baseline's a number only when neither is censored.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.stats import CONFIDENCE, Interval, quantile_intervals
from zcube_lab.emulator.results.ietf import bmwg, kpis
from zcube_lab.emulator.results.run.goodput import (
    Slo,
    arrived_in_window,
    goodput,
    parse_slo,
    vllm_goodput,
    vllm_goodput_arg,
)
from zcube_lab.emulator.results.run.summary import RunSummary
from zcube_lab.emulator.results.sweep.capacity import (
    CAPACITY_RULE,
    FabricCapacity,
    fabric_capacities,
)
from zcube_lab.emulator.results.sweep.gputhroughput import TokensPerGpu, at_capacity

SWEEP_FILE = "sweep.json"
STOP_SHARE = 0.9
STOP_FACTOR = 4.0
ENOUGH_SAMPLES = 1000  # requests per run for a p99 without an interval
INTERVAL_FIGURES = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")
SAMPLES_RULE = (
    f"a run with fewer than {ENOUGH_SAMPLES} requests has few samples and carries the "
    f"{CONFIDENCE:.0%} order-statistic (binomial) interval of its TTFT and TPOT p50 and p99, "
    f"an end the samples cannot bound null; a point's interval is the envelope of its repeats'"
)
STOP_RULE = (
    f"a repeat stops at the first rate it missed the SLO or was not trustworthy (no higher rate "
    f"can change its capacity); with --full-ladder, a variant stops after a rate at which every "
    f"repeat missed the SLO and achieved below {STOP_SHARE:.0%} of the offered rate or observed "
    f"above {STOP_FACTOR:g}x a target"
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
    few_samples: bool = False  # fewer than ENOUGH_SAMPLES requests
    intervals: Mapping[str, Interval] | None = None  # INTERVAL_FIGURES -> 95% CI; few samples
    vllm_goodput_per_s: float | None = None  # vLLM's request goodput (goodput.vllm_goodput)
    vllm_duration_s: float | None = None  # its denominator: the run's start to last response
    bmwg: Mapping[str, Any] = field(default_factory=dict)  # the BMWG draft's KPIs by name

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "attainment": dict(self.attainment),
            "observed": dict(self.observed),
            "intervals": _intervals_dict(self.intervals),
            "bmwg": dict(self.bmwg),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunPoint:
        data = dict(data)
        if data.get("intervals") is not None:
            data["intervals"] = {k: (lo, hi) for k, (lo, hi) in data["intervals"].items()}
        return cls(**data)


def _intervals_dict(
    intervals: Mapping[str, Interval] | None,
) -> dict[str, list[float | None]] | None:
    if intervals is None:
        return None
    return {k: [lo, hi] for k, (lo, hi) in intervals.items()}


def sample_intervals(records: Sequence[Mapping[str, Any]]) -> dict[str, Interval]:
    """`INTERVAL_FIGURES` -> the 95% order-statistic interval of that client quantile (an
    unbounded end None), over the completed requests that have the metric (as the client
    figures are taken); a figure without values is absent."""
    out: dict[str, Interval] = {}
    for metric in ("ttft", "tpot"):
        values = [
            float(r[f"{metric}_s"])
            for r in records
            if r.get("outcome") == "ok" and r.get(f"{metric}_s") is not None
        ]
        cis = quantile_intervals(values, (0.5, 0.99))
        if cis is not None:
            out[f"{metric}_p50_s"] = cis[0.5]
            out[f"{metric}_p99_s"] = cis[0.99]
    return out


def envelope(intervals: Sequence[Interval]) -> Interval:
    """The lowest low and the highest high of `intervals` (not empty); None (unbounded) wins."""
    lows, highs = [lo for lo, _ in intervals], [hi for _, hi in intervals]
    low = None if None in lows else min(lo for lo in lows if lo is not None)
    high = None if None in highs else max(hi for hi in highs if hi is not None)
    return low, high


def interval_text(ci: Interval, fmt: Callable[[float], str]) -> str:
    """`[low, high]`, with an unbounded end written out: `[1.62, unbounded)`,
    `(unbounded, 1.62]`."""
    low, high = ci
    left = "(unbounded" if low is None else f"[{fmt(low)}"
    right = "unbounded)" if high is None else f"{fmt(high)}]"
    return f"{left}, {right}"


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
    v = vllm_goodput(records, slo)
    d = summary.fabric_stats.directed
    few = c.requests < ENOUGH_SAMPLES
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
        few_samples=few,
        intervals=sample_intervals(records) if few else None,
        vllm_goodput_per_s=v.request_goodput,
        vllm_duration_s=v.duration_s,
        bmwg=(summary.bmwg or bmwg.run_kpis(summary, records, window_s)).to_dict(),
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

    @property
    def few_samples(self) -> bool:
        """A repeat had fewer than `ENOUGH_SAMPLES` requests."""
        return any(r.few_samples for r in self.runs)

    def interval(self, name: str) -> Interval | None:
        """The envelope of the repeats' intervals of an `INTERVAL_FIGURES` figure (the lowest
        low, the highest high; an end unbounded in a repeat is unbounded); None when no repeat
        has one."""
        cis = [r.intervals[name] for r in self.runs if r.intervals and name in r.intervals]
        if not cis:
            return None
        return envelope(cis)

    def to_dict(self) -> dict[str, Any]:
        """The point as sweep.json writes it (derived from its runs; not read back)."""
        return {
            "variant": self.variant,
            "rate": self.rate,
            "repeats": len(self.runs),
            "requests_min": min((r.requests for r in self.runs), default=0),
            "few_samples": self.few_samples,
            "ttft_p99_s": asdict(self.figure("ttft_p99_s")),
            "vllm_goodput_per_s": asdict(self.figure("vllm_goodput_per_s")),
            "intervals": _intervals_dict(
                {n: ci for n in INTERVAL_FIGURES if (ci := self.interval(n)) is not None}
                if self.few_samples
                else None
            ),
        }


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


MaxRate = FabricCapacity  # a variant's capacity row (zcube_lab.emulator.results.sweep.capacity)


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

    def tokens_per_gpu(self) -> list[TokensPerGpu]:
        """Each variant's decode and prefill tokens per GPU-second at its capacity."""
        return at_capacity(self.runs, self.max_rates())

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
            "samples_rule": SAMPLES_RULE,
            "vllm_goodput_arg": vllm_goodput_arg(self.slo),
            "bmwg_draft": kpis.DRAFT,
            "runs": [r.to_dict() for r in self.runs],
            "points": [p.to_dict() for p in self.points()],
            "max_rates": [m.to_dict() for m in self.max_rates()],
            "bmwg": {"Request_Rate": {m.variant: m.capacity.to_dict() for m in self.max_rates()}},
            "tokens_per_gpu_at_capacity": [t.to_dict() for t in self.tokens_per_gpu()],
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
