"""A load sweep: every variant (fabric and run policy) at a ladder of offered rates, to past
saturation, judged against an SLO (`zcube_lab.emulator.results.run.goodput`). Used by `zcube-lab
sweep`.

Plan (pure): the rates ascend; at each rate every variant runs once per repeat, repeat-major
(all variants once, then again), as `comparison.interleave` orders a comparison; then the next
rate. Repeat k runs with seed `seed + k - 1` at every rate and on every fabric: the rate changes
only the arrival gaps, never what the i-th request is (`zcube_lab.workloads.requests`), and the
repeats see different workloads, so their spread is the workload's as well as the emulator's. A
run's tag is `<rate>rps-r<repeat>` (with its policy in front when the variants' policies differ).

The run points, the points, the stop rule and the capacities are pure result logic:
`zcube_lab.emulator.results.sweep.sweeppoints` and `zcube_lab.emulator.results.sweep.capacity`. The
ramp here (`run_sweep`) skips a repeat's higher rates once its walk up the ladder has ended
(`walk_ended`: a trustworthy miss or an untrustworthy run, above which its capacity cannot change),
and a variant's once the stop rule (`past_saturation`) holds for it; with `full_ladder` only the
latter. With
`refine` N, after the ladder each variant runs N more rates, every repeat at each, each
the midpoint of its knee's bracket (`zcube_lab.emulator.results.sweep.capacity.refine_rate`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.experiment.comparison import PlannedRun, Variant
from zcube_lab.emulator.experiment.runloop import (
    Execute,
    LoopConfig,
    Outcome,
    RunLoop,
    check_retries,
)
from zcube_lab.emulator.results.run.figures import read_jsonl
from zcube_lab.emulator.results.run.goodput import Slo
from zcube_lab.emulator.results.sweep.capacity import refine_rate, walk_ended
from zcube_lab.emulator.results.sweep.sweeppoints import (
    RunPoint,
    past_saturation,
    points,
    rate_tag,
    run_point,
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


# Wall seconds a run takes besides its arrivals and drain: lab bring-up, targets, collection
# and teardown. The default sweep of 2026-12-04 (16 GPUs, coding-agent, 30 s of arrivals)
# started a run every 52-54 s at 1-2 req/s, where the drain takes a few seconds: about 20 s.
RUN_OVERHEAD_S = 20.0


def wall_time_estimate(plan: Sequence[PlannedRun]) -> tuple[float, float]:
    """(least, most) wall seconds the planned runs take: each run's overhead and its arrivals,
    plus at most its whole drain, each crossed into wall time by the run's clock. A ramp that
    stops early takes less than the least."""
    least = most = 0.0
    for p in plan:
        least += RUN_OVERHEAD_S + p.config.clock.wall(p.config.duration_s)
        most += RUN_OVERHEAD_S + p.config.wall_s
    return least, most


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


def run_sweep(
    plan: Sequence[PlannedRun],
    slo: Slo,
    progress: Callable[[str], None] | None = None,
    starting: Callable[[PlannedRun], None] | None = None,
    skipped: Callable[[PlannedRun], None] | None = None,
    execute: Execute | None = None,
    refine: int = 0,
    full_ladder: bool = False,
    retries: int | str = 0,
) -> Iterator[RunPoint]:
    """Run the plan in order, yielding each run's point as it completes. A repeat whose walk
    has ended skips its higher rates (unless `full_ladder`), and once a rate's repeats are
    done, a variant past saturation skips its higher rates (`skipped` is told of each); then
    `refine` bisection rates per variant. Each run goes through the shared run loop
    (`zcube_lab.emulator.experiment.runloop`: a run the machine alone spoiled runs again, up to
    `retries` times, and its point is the last attempt's: `sweep` passes its --retries,
    default 2; none by default here, so a benchmark's runs stay as they ran); `execute` runs one
    planned run (default: the lab, which needs root)."""
    loop = RunLoop(
        execute, config=LoopConfig(check_retries(retries)), progress=progress, starting=starting
    )
    return _ramp(plan, slo, loop, skipped, refine, full_ladder)


def _ramp(
    plan: Sequence[PlannedRun],
    slo: Slo,
    loop: RunLoop,
    skipped: Callable[[PlannedRun], None] | None,
    refine: int,
    full_ladder: bool,
) -> Iterator[RunPoint]:
    stopped: set[str] = set()
    ended: set[tuple[str, int]] = set()  # (variant, repeat) whose walk up the ladder ended
    done: list[RunPoint] = []
    for rate in sorted({p.config.rate for p in plan if p.config.rate is not None}):
        at_rate: list[RunPoint] = []
        for planned in (p for p in plan if p.config.rate == rate):
            key = (planned.variant.label, planned.repeat)
            if planned.variant.label in stopped or (not full_ladder and key in ended):
                if skipped is not None:
                    skipped(planned)
                continue
            point = _point(loop.run(planned), slo)
            done.append(point)
            at_rate.append(point)
            if walk_ended(r for r in done if (r.variant, r.repeat) == key):
                ended.add(key)
            yield point
        stopped |= {p.variant for p in points(at_rate) if past_saturation(p, slo)}
    if refine:
        yield from _refine(plan, slo, done, refine, loop)


def _point(outcome: Outcome, slo: Slo) -> RunPoint:
    """The run point of a run's last attempt."""
    planned, result = outcome.planned, outcome.result
    records = read_jsonl(result.path / "requests.jsonl")
    rate = planned.config.rate or 0.0
    return run_point(rate, planned.repeat, result.summary, records, slo, planned.config.duration_s)


def _refine(
    plan: Sequence[PlannedRun], slo: Slo, done: list[RunPoint], steps: int, loop: RunLoop
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
            point = _point(loop.run(replace(planned, number=number, total=total)), slo)
            done.append(point)
            yield point
