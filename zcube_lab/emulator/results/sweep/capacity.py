"""A fabric's capacity from a load sweep's ladder of rates, and ratios between capacities (pure).

Semantics (issue 22):

- A *repeat's capacity* is the highest rate R of the ladder such that the repeat met the SLO at
  every rate up to and including R. Its walk up the ladder stops at the first rate it missed
  while trustworthy (the knee lies between R and that rate: the capacity is *exact*), or at the
  first rate whose run was not trustworthy, met or missed (the capacity is *censored*: "at
  least R"; what happened there says nothing about the fabric), or at the top of the ladder
  with every rate met (censored too: at least the top rate). A met rate above a miss never
  counts: one lucky run cannot lift the capacity, one bad run can only censor it.
  A repeat that missed at the lowest rate has capacity 0 ("below the ladder").
- A *fabric's capacity* is the median of its repeats' capacities, with their [min-max] as the
  spread. A censored repeat is the interval [R, inf); the median is then the interval
  [median of the lower ends, median of the upper ends]. When the two agree (a censored repeat
  far above the median cannot move it) the capacity is exact, else it is censored with its
  lower end as the figure ("at least R") and an upper end when one is known.
- *Refinement* (`refine_rate`, `zcube-lab sweep --refine N`): the knee lies between the last
  rate every repeat met (every rate below it met too, all trustworthy) and the next rate run;
  the next rate to try is their midpoint, so N more rates, every repeat at each, halve that
  bracket N times. There is none to try when the bracket's top was not trustworthy (the
  result is censored there: refining cannot help) or when no rate was missed.
- An exact capacity R is a rung, not a point: its repeats' knees lie in [R, the rate they
  missed), the *knee bracket* (`Capacity.knee_top`, the median of the repeats' missed rates).
- A *ratio* between two capacities is the interval their knee brackets allow: from the value's
  lower end over the baseline's top to the value's top over the baseline's lower end (a censored
  capacity's top is unbounded). It is written as a bound (`>= 1.50x`, `<= 0.67x`), an interval
  that excludes 1 (`1.10x-1.50x`), `within X%` when it holds 1 (the fabrics tie to within the
  ladder's resolution, the issue-33 rule: no ratio is printed that the rungs cannot resolve), or
  `unknown`. It is one number only when both brackets are closed points, which a ladder of rungs
  never gives.
- *Resolution* (`sweep --resolution F`): a ladder resolves a knee to F when each rung's bracket,
  after the `--refine` bisections, is at most F of its lower rate; `refines_needed` gives the
  bisections that would do, and a sweep asked for F with fewer is refused naming them.

Inputs are duck-typed trials (`Trial`: variant, repeat, rate, slo_met, trustworthy), so this module
needs nothing of the sweep's types. Rates are requests/s. How the runs' verdicts combine (a walk
up the ladder that an untrustworthy run stops and censors; every repeat at a rate trustworthy) is
the verdict package's (`zcube_lab.emulator.verdict.combine`); this module turns it into capacities.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Protocol

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.verdict.combine import Step, all_trustworthy, walk_ladder

CAPACITY_RULE = (
    "per repeat, the highest rate with every rate up to it met (at least that rate when the walk "
    "stopped at an untrustworthy run or the ladder's top); the figure is the repeats' median"
)


class Trial(Step, Protocol):
    """One run at one rate of the ladder (the sweep's `RunPoint` is one): a verdict `Step`
    (rate, SLO met, trustworthy) of a variant's repeat."""

    @property
    def variant(self) -> str: ...
    @property
    def repeat(self) -> int: ...


def _tag(rate: float) -> str:
    return f"{rate:g}"


@dataclass(frozen=True)
class RepeatCapacity:
    """One repeat's capacity: the highest rate with every rate up to it met (0: none was)."""

    repeat: int
    rate: float
    censored: str | None  # why it is only a lower bound; None: exact
    stopped_at: float | None  # the rate the walk stopped at (first missed or untrustworthy)

    @property
    def upper(self) -> float:
        """The interval's upper end: the rate itself when exact, else unbounded."""
        return self.rate if self.censored is None else math.inf

    @property
    def knee_top(self) -> float:
        """Where the knee bracket ends: the rate missed when exact, else unbounded."""
        if self.censored is None and self.stopped_at is not None:
            return self.stopped_at
        return math.inf

    def text(self) -> str:
        """`8`, `>=8`."""
        return _tag(self.rate) if self.censored is None else f">={_tag(self.rate)}"


def repeat_capacity(repeat: int, trials: Iterable[Trial]) -> RepeatCapacity:
    """Walk one repeat's trials up the ladder (`zcube_lab.emulator.verdict.combine.walk_ladder`:
    sorted
    there) and stop as the module docstring says."""
    walk = walk_ladder(trials)
    best, stop = walk.reached, walk.stop
    if stop is None:
        reason = f"met at every rate tried (up to {_tag(best)})" if best else "no rate was run"
        return RepeatCapacity(repeat, best, reason, None)
    if walk.censored_by_verdict:
        verdict = "met" if stop.slo_met else "missed"
        return RepeatCapacity(repeat, best, f"not trustworthy at {_tag(stop.rate)} ({verdict})",
                              stop.rate)  # fmt: skip
    return RepeatCapacity(repeat, best, None, stop.rate)


def walk_ended(trials: Iterable[Trial]) -> bool:
    """Whether one repeat's walk up the ladder has stopped (a trustworthy miss or an
    untrustworthy run): no higher rate can change that repeat's capacity, so a sweep may skip
    them."""
    return walk_ladder(trials).ended


@dataclass(frozen=True)
class Capacity:
    """A fabric's capacity over its repeats: the median's interval and the repeats' spread."""

    rate: float  # the median (its lower end when censored); 0: below the lowest rate
    upper: float  # the median's upper end: == rate when exact, inf when unbounded
    low: float | None  # the repeats' smallest and largest capacity (lower ends)
    high: float | None
    repeats: tuple[RepeatCapacity, ...]

    @property
    def censored(self) -> bool:
        """Only a lower bound (an untrustworthy run or the ladder's top in the way)."""
        return self.upper != self.rate

    @property
    def knee_top(self) -> float:
        """The median of the repeats' knee tops: the knee lies in [rate, knee_top)."""
        if not self.repeats:
            return math.inf
        return _median([r.knee_top for r in self.repeats])

    def text(self) -> str:
        """`8 [4-8]`, `>= 8`, `>= 4 (<= 8)`, `0 (below the ladder)`."""
        if not self.repeats:
            return "none"
        spread = ""
        if self.low is not None and self.high is not None and self.low != self.high:
            spread = f" [{_tag(self.low)}-{_tag(self.high)}]"
        if not self.censored:
            head = _tag(self.rate) if self.rate > 0 else "0 (below the ladder)"
            return head + spread
        bound = f" (<= {_tag(self.upper)})" if math.isfinite(self.upper) else ""
        return f">= {_tag(self.rate)}{bound}{spread}"

    def to_dict(self) -> dict[str, Any]:
        """Plain data for sweep.json (an unbounded upper end is null)."""
        return {
            "rate": self.rate,
            "censored": self.censored,
            "upper": self.upper if math.isfinite(self.upper) else None,
            "low": self.low,
            "high": self.high,
            "per_repeat": {
                str(r.repeat): {"rate": r.rate, "censored": r.censored, "stopped_at": r.stopped_at}
                for r in self.repeats
            },
        }


def _median(values: Sequence[float]) -> float:
    # statistics.median averages the two middle values; inf + x stays inf (never inf - inf).
    return float(statistics.median(values))


def capacity(trials: Iterable[Trial]) -> Capacity:
    """One fabric's capacity from all its trials (every repeat, every rate)."""
    by_repeat: dict[int, list[Trial]] = {}
    for t in trials:
        by_repeat.setdefault(t.repeat, []).append(t)
    reps = tuple(repeat_capacity(k, by_repeat[k]) for k in sorted(by_repeat))
    if not reps:
        return Capacity(0.0, math.inf, None, None, ())
    lows = [r.rate for r in reps]
    return Capacity(
        rate=_median(lows),
        upper=_median([r.upper for r in reps]),
        low=min(lows),
        high=max(lows),
        repeats=reps,
    )


@dataclass(frozen=True)
class Ratio:
    """A capacity over the baseline's: the interval [low, high] the two allow."""

    low: float
    high: float

    @property
    def exact(self) -> float | None:
        """The ratio when it is one number, else None."""
        return self.low if self.low == self.high and math.isfinite(self.low) else None

    @property
    def within(self) -> float | None:
        """When the interval holds 1 and is bounded: the largest departure from 1 it allows
        (0.25: the fabrics tie to within 25%), else None."""
        if self.exact is not None or not (0 < self.low <= 1 <= self.high < math.inf):
            return None
        return max(1 - self.low, self.high - 1)

    def text(self) -> str:
        """`1.50x`, `>= 1.50x`, `<= 0.67x`, `1.10x-1.50x`, `within 25%`, `unknown`."""
        if self.exact is not None:
            return f"{self.exact:.2f}x"
        if self.within is not None:
            return f"within {self.within * 100:.0f}%"
        lo, hi = self.low > 0, math.isfinite(self.high)
        if lo and hi:
            return f"{self.low:.2f}x-{self.high:.2f}x"
        if lo:
            return f">= {self.low:.2f}x"
        if hi:
            return f"<= {self.high:.2f}x"
        return "unknown"


def ratio(value: Capacity, base: Capacity) -> Ratio:
    """`value` over `base` as the interval their knee brackets allow (the module docstring)."""
    if base.upper == 0:  # the base met no rate: no ratio to speak of
        return Ratio(0.0, math.inf)
    low = value.rate / base.knee_top  # 0 when the base is unbounded
    high = value.knee_top / base.rate if base.rate > 0 else math.inf
    return Ratio(low, high)


def refines_needed(rates: Sequence[float], resolution: float) -> int:
    """The `--refine` bisections after which every rung of the ladder `rates` (ascending)
    brackets its knee to at most `resolution` of its lower rate; the bracket below the lowest
    rate has no lower rate to be relative to and is left out."""
    worst = max((b - a) / a for a, b in pairwise(rates))
    return max(0, math.ceil(math.log2(worst / resolution) - 1e-9))


def check_resolution(rates: Sequence[float], refine: int, resolution: float | None) -> None:
    """Refuse a ladder and refine count that cannot resolve `resolution` (a ConfigError naming
    `--refine` and the count that would do); None asks for nothing."""
    if resolution is None or len(rates) < 2:
        return
    if not 0 < resolution < 1:
        raise ConfigError("resolution", resolution, "a share between 0 and 1, e.g. 0.1 for 10%")
    need = refines_needed(rates, resolution)
    if refine < need:
        raise ConfigError(
            "refine",
            refine,
            f"at least {need} to resolve {resolution:.0%} on rates "
            f"{','.join(_tag(r) for r in rates)} (each bisection halves a rung's bracket)",
        )


REFINE_DIGITS = 3  # a refined rate is rounded to this many decimals (run tags stay short)


def refine_rate(trials: Iterable[Trial]) -> float | None:
    """The midpoint of one variant's knee bracket (the module docstring), or None when there
    is no bracket to narrow."""
    by_rate: dict[float, list[Trial]] = {}
    for t in trials:
        by_rate.setdefault(t.rate, []).append(t)
    lo = 0.0
    for rate in sorted(by_rate):
        runs = by_rate[rate]
        if not all_trustworthy(runs):
            return None
        if all(t.slo_met for t in runs):
            lo = rate
            continue
        mid = round((lo + rate) / 2, REFINE_DIGITS)
        return mid if lo < mid < rate else None
    return None


@dataclass(frozen=True)
class FabricCapacity:
    """One variant's row of the sweep's result: its capacity, the ratio to the baseline's,
    and the rate after which the stop rule ended its ramp."""

    variant: str
    capacity: Capacity
    ratio: Ratio | None  # None for the baseline itself
    stopped_after: float | None

    @property
    def rate(self) -> float | None:
        """The capacity figure (its lower bound when censored); None when no repeat ran."""
        return self.capacity.rate if self.capacity.repeats else None

    @property
    def per_repeat(self) -> Mapping[int, RepeatCapacity]:
        """Repeat -> its own capacity."""
        return {r.repeat: r for r in self.capacity.repeats}

    def to_dict(self) -> dict[str, Any]:
        """Plain data for sweep.json: the capacity, and the ratio as a number (null unless
        exact) beside its interval and text."""
        return {
            "variant": self.variant,
            **self.capacity.to_dict(),
            "text": self.capacity.text(),
            "ratio": self.ratio.exact if self.ratio is not None else None,
            "ratio_low": self.ratio.low if self.ratio is not None else None,
            "ratio_high": (
                self.ratio.high if self.ratio is not None and math.isfinite(self.ratio.high)
                else None
            ),
            "ratio_text": self.ratio.text() if self.ratio is not None else "baseline",
            "stopped_after": self.stopped_after,
        }  # fmt: skip


def fabric_capacities(
    trials: Iterable[Trial],
    baseline: str,
    stopped_after: Mapping[str, float] | None = None,
) -> list[FabricCapacity]:
    """Each variant's capacity and its ratio to the baseline's, variants in first-seen order;
    `stopped_after` is the stop rule's rate per variant that hit it."""
    groups: dict[str, list[Trial]] = {}
    for t in trials:
        groups.setdefault(t.variant, []).append(t)
    caps = {v: capacity(ts) for v, ts in groups.items()}
    base = caps.get(baseline)
    stops = stopped_after or {}
    return [
        FabricCapacity(
            v,
            c,
            None if v == baseline else (ratio(c, base) if base is not None else Ratio(0, math.inf)),
            stops.get(v),
        )
        for v, c in caps.items()
    ]
