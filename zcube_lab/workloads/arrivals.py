"""Arrival processes: seeded schedules of request times, in seconds from 0.

Every generator is pure: it takes a `random.Random` (seeded by the caller) and returns a sorted
list of arrival times in `[0, duration)`. Names follow the serving-benchmark vocabulary:

- `poisson`: exponential gaps with mean 1/rate (coefficient of variation 1);
- `gamma`: gamma gaps with shape k (the *burstiness*) and scale 1/(k*rate), so the mean rate is
  unchanged and the coefficient of variation is 1/sqrt(k): k = 1 is Poisson, k < 1 is burstier,
  k > 1 is smoother (vLLM's `--burstiness`);
- `fixed`: evenly spaced, the first request at 0;
- `staged`: a list of (duration, rate) stages, each filled with one of the processes above;
- `trace`: times read from a trace (see `zcube_lab.workloads.mooncake`), optionally rescaled to a
  rate.

`ArrivalSpec` is the validated, frozen description; `schedule(spec, duration, rng)` realizes it.

A window's count is the rate's: `schedule` draws the Poisson and gamma processes (also inside a
stage) with `counted`, which places exactly round(rate x duration) arrivals in the window, with
the process's gaps rescaled to fill it. For Poisson this is the Poisson process conditioned on
its count (the arrival times are uniform order statistics), so the gaps keep their shape while
a run at 8 req/s for 20 s sends 160 requests, not the 140-190 an open-ended draw gives.
`poisson` and `gamma` are the open-ended renewal processes themselves.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from zcube_lab.core.errors import ConfigError

PROCESSES = ("poisson", "gamma", "fixed", "staged", "trace")
# Processes a stage may use (a stage cannot itself be staged or a trace).
STAGE_PROCESSES = ("poisson", "gamma", "fixed")


@dataclass(frozen=True)
class Stage:
    """One stage of a staged load: `rate` requests/s for `duration` seconds."""

    duration: float
    rate: float


@dataclass(frozen=True)
class ArrivalSpec:
    """How requests arrive: the process, its mean rate, burstiness and (if staged) stages."""

    process: str = "poisson"
    rate: float = 1.0
    burstiness: float = 1.0
    stages: tuple[Stage, ...] = ()
    # The process used inside each stage of a staged load.
    stage_process: str = "poisson"

    def __post_init__(self) -> None:
        if self.process not in PROCESSES:
            raise ConfigError("arrival", self.process, "one of " + ", ".join(PROCESSES))
        _check_positive("rate", self.rate)
        _check_positive("burstiness", self.burstiness)
        if self.stage_process not in STAGE_PROCESSES:
            raise ConfigError(
                "stage_process", self.stage_process, "one of " + ", ".join(STAGE_PROCESSES)
            )
        if self.process == "staged" and not self.stages:
            raise ConfigError("stages", self.stages, "at least one (duration, rate) stage")
        for i, st in enumerate(self.stages):
            _check_positive(f"stages[{i}].duration", st.duration)
            _check_positive(f"stages[{i}].rate", st.rate, allow_zero=True)


def _check_positive(field: str, value: object, allow_zero: bool = False) -> None:
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        raise ConfigError(field, value, "a finite number " + (">= 0" if allow_zero else "> 0"))


def parse_stages(text: str) -> tuple[Stage, ...]:
    """Stages from `"DURATION:RATE,DURATION:RATE"` (seconds and requests/s), e.g. `10:5,20:50`."""
    stages = []
    for part in text.split(","):
        try:
            d, r = part.split(":")
            stages.append(Stage(float(d), float(r)))
        except ValueError:
            raise ConfigError("stages", text, "DURATION:RATE[,DURATION:RATE...]") from None
    return tuple(stages)


def poisson(rng: random.Random, rate: float, duration: float) -> list[float]:
    """Poisson arrivals: exponential gaps of mean 1/rate, up to `duration`."""
    return _renewal(rng, duration, lambda: rng.expovariate(rate))


def gamma(rng: random.Random, rate: float, burstiness: float, duration: float) -> list[float]:
    """Gamma-gap arrivals: shape `burstiness`, scale 1/(burstiness*rate); mean rate `rate`."""
    scale = 1.0 / (burstiness * rate)
    return _renewal(rng, duration, lambda: rng.gammavariate(burstiness, scale))


def counted(
    rng: random.Random, rate: float, duration: float, burstiness: float = 1.0
) -> list[float]:
    """Exactly round(rate x duration) arrivals in (0, duration): n + 1 gaps drawn from the
    process (exponential for burstiness 1, else gamma of shape `burstiness`) and scaled so
    that together they span the window."""
    n = math.floor(rate * duration + 0.5)
    if burstiness == 1.0:
        gaps = [rng.expovariate(1.0) for _ in range(n + 1)]
    else:
        gaps = [rng.gammavariate(burstiness, 1.0) for _ in range(n + 1)]
    total = sum(gaps)
    # Very bursty gaps (shape far below 1) can leave the last gap below the rounding of the
    # sum: keep every time inside the window.
    last = math.nextafter(duration, 0.0)
    times, t = [], 0.0
    for g in gaps[:n]:
        t += g
        times.append(min(duration * t / total, last))
    return times


def fixed(rate: float, duration: float) -> list[float]:
    """Evenly spaced arrivals at i/rate, starting at 0."""
    n = math.ceil(rate * duration - 1e-9)
    return [i / rate for i in range(n) if i / rate < duration]


def staged(
    rng: random.Random,
    stages: Sequence[Stage],
    process: str = "poisson",
    burstiness: float = 1.0,
) -> list[float]:
    """Arrivals for consecutive stages, each with its own rate; stage i starts where i-1 ended."""
    times: list[float] = []
    start = 0.0
    for st in stages:
        if st.rate > 0:
            part = _stationary(rng, process, st.rate, burstiness, st.duration)
            times.extend(start + t for t in part)
        start += st.duration
    return times


def rescale(times: Sequence[float], rate: float | None, duration: float | None) -> list[float]:
    """Trace times shifted to start at 0, stretched to a mean `rate`, cut at `duration`."""
    if not times:
        return []
    t0 = min(times)
    out = sorted(t - t0 for t in times)
    if rate is not None and len(out) > 1 and out[-1] > 0:
        # Mean rate of the trace measured as n/span, matched to the requested rate.
        factor = (len(out) / out[-1]) / rate
        out = [t * factor for t in out]
    if duration is not None:
        out = [t for t in out if t < duration]
    return out


def schedule(spec: ArrivalSpec, duration: float, rng: random.Random) -> list[float]:
    """Arrival times in [0, duration) for a non-trace `spec` (traces carry their own times)."""
    _check_positive("duration", duration)
    if spec.process == "staged":
        times = staged(rng, spec.stages, spec.stage_process, spec.burstiness)
        return [t for t in times if t < duration]
    if spec.process == "trace":
        raise ConfigError("arrival", "trace", "a trace profile (the times come from the trace)")
    return _stationary(rng, spec.process, spec.rate, spec.burstiness, duration)


def staged_duration(spec: ArrivalSpec) -> float:
    """Total length of a staged spec's stages (0 for other processes)."""
    return sum(st.duration for st in spec.stages)


def _stationary(
    rng: random.Random, process: str, rate: float, burstiness: float, duration: float
) -> list[float]:
    if process == "poisson":
        return counted(rng, rate, duration)
    if process == "gamma":
        return counted(rng, rate, duration, burstiness)
    return fixed(rate, duration)


def _renewal(rng: random.Random, duration: float, gap: Callable[[], float]) -> list[float]:
    # A renewal process: independent gaps from `gap()`, the first one measured from 0 (so the
    # schedule does not always start with a request at exactly 0, unlike `fixed`).
    times: list[float] = []
    t = 0.0
    while True:
        t += gap()
        if t >= duration:
            return times
        times.append(t)
