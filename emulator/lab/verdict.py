"""The emulator health verdict: given CPU samples of a run, was the emulator trustworthy?

Pure: `judge(samples, thresholds)` turns `HealthSample`s (taken by `emulator.lab.health`) into a
`HealthVerdict` with the reasons a run is not trustworthy and the figures behind it. No clock,
no /proc, so tests feed it synthetic samples.

Default thresholds (`Thresholds`), chosen for the 2-core machine the lab is sized for:
- machine CPU above 90% in more than 5% of samples (about: p95 above 90%): on two cores the emulated
  hosts, Open vSwitch, the controller and Locust all queue for the same CPUs, and queueing lands
  in the tail the report leads with (TTFT P99), so even a short saturated share matters. 90%, not
  100%, because a 1 s average of 90% usually hides sub-second stretches at 100%.
- ovs-vswitchd above 0.85 core in more than 20% of samples: with the kernel datapath it only
  handles flow-table misses (upcalls), so a sustained high share means packets took the slow
  path; with the userspace datapath it forwards every packet and this is the binding limit.
  Short bursts (first packets of each flow, revalidation) are expected, hence 20%.
- any registered process above 0.90 core in more than 20% of samples: Python event loops and
  Locust workers are single-threaded, so they saturate at one core however idle the other core
  is (Locust itself warns at 90%). Startup bursts are expected, hence 20%.
- mean steal above 5%: the machine ran slower than its clock says.
- fewer than 3 samples: too few to tell, so not trustworthy.
Per-core busy is reported but not judged: the scheduler moves tasks between cores, and the one
case where one pegged core hurts (a single-threaded bottleneck) is what the process rule checks.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from zcube_lab.errors import ConfigError
from zcube_lab.stats import mean, quantile

DATAPATH = "ovs-vswitchd"  # the process name of Open vSwitch's datapath daemon


@dataclass(frozen=True)
class HealthSample:
    """CPU use over one interval ending at `t`: shares of all CPUs, per core, per process."""

    t: float
    interval_s: float
    machine_cpu: float
    per_core: tuple[float, ...]
    softirq: float
    steal: float
    processes: Mapping[str, float]  # name -> cores


@dataclass(frozen=True)
class Thresholds:
    """Limits beyond which a run is not trustworthy; the module docstring says why these."""

    machine_cpu: float = 0.90  # share of all CPUs
    machine_fraction: float = 0.05  # of samples above machine_cpu (i.e. a p95 rule)
    datapath_cores: float = 0.85  # ovs-vswitchd, in cores
    datapath_fraction: float = 0.20
    process_cores: float = 0.90  # any registered process, in cores
    process_fraction: float = 0.20
    steal_mean: float = 0.05
    min_samples: int = 3
    require_datapath: bool = True  # no ovs-vswitchd samples: the datapath is unchecked

    def __post_init__(self) -> None:
        for name in ("machine_cpu", "machine_fraction", "datapath_fraction", "process_fraction"):
            _check_share(name, getattr(self, name))
        _check_share("steal_mean", self.steal_mean)
        for name in ("datapath_cores", "process_cores"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ConfigError(f"thresholds.{name}", value, "a positive number of cores")
        if isinstance(self.min_samples, bool) or not isinstance(self.min_samples, int):
            raise ConfigError("thresholds.min_samples", self.min_samples, "an integer >= 1")
        if self.min_samples < 1:
            raise ConfigError("thresholds.min_samples", self.min_samples, "an integer >= 1")


@dataclass(frozen=True)
class Usage:
    """Mean, p95 and share of samples over a limit, for one measured quantity."""

    mean: float
    p95: float
    over: float


@dataclass(frozen=True)
class HealthVerdict:
    """Whether the emulator kept up; the reasons when it did not, and the figures behind it."""

    trustworthy: bool
    reasons: tuple[str, ...]
    samples: int
    machine_cpu_mean: float | None
    machine_cpu_p95: float | None
    datapath_cpu_mean: float | None  # ovs-vswitchd, in cores
    datapath_cpu_p95: float | None
    per_core_p95: tuple[float, ...]
    softirq_mean: float | None
    steal_mean: float | None
    processes: Mapping[str, Usage]  # registered processes, in cores

    def to_dict(self) -> dict[str, object]:
        """Plain data for summary.json."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HealthVerdict:
        """The verdict as `to_dict` stored it; a key an older run lacks reads as None."""
        values: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        values["reasons"] = tuple(data.get("reasons") or ())
        values["per_core_p95"] = tuple(data.get("per_core_p95") or ())
        values["processes"] = {n: Usage(**u) for n, u in (data.get("processes") or {}).items()}
        return cls(**values)


def judge(samples: Sequence[HealthSample], thresholds: Thresholds | None = None) -> HealthVerdict:
    """Verdict on a run from its health samples."""
    limits = thresholds or Thresholds()
    reasons: list[str] = []
    n = len(samples)
    if n < limits.min_samples:
        reasons.append(
            f"only {n} health samples (need {limits.min_samples}): cannot tell whether the "
            "emulator kept up"
        )
    machine = _usage([s.machine_cpu for s in samples], limits.machine_cpu)
    if machine and machine.over > limits.machine_fraction:
        reasons.append(
            f"machine CPU above {limits.machine_cpu:.0%} in {machine.over:.0%} of samples "
            f"(allowed {limits.machine_fraction:.0%}; p95 {machine.p95:.0%})"
        )
    datapath = _usage(
        [s.processes[DATAPATH] for s in samples if DATAPATH in s.processes], limits.datapath_cores
    )
    if datapath is None:
        if limits.require_datapath and n:
            reasons.append(f"{DATAPATH} was never sampled: the switch datapath is unchecked")
    elif datapath.over > limits.datapath_fraction:
        reasons.append(
            f"{DATAPATH} above {limits.datapath_cores:.2f} core in {datapath.over:.0%} of "
            f"samples (allowed {limits.datapath_fraction:.0%}; p95 {datapath.p95:.2f} core)"
        )
    names = sorted({name for s in samples for name in s.processes} - {DATAPATH})
    processes: dict[str, Usage] = {}
    for name in names:
        usage = _usage(
            [s.processes[name] for s in samples if name in s.processes], limits.process_cores
        )
        assert usage is not None  # the name came from some sample
        processes[name] = usage
        if usage.over > limits.process_fraction:
            reasons.append(
                f"process {name} above {limits.process_cores:.2f} core in {usage.over:.0%} of "
                f"samples (allowed {limits.process_fraction:.0%}; p95 {usage.p95:.2f} core)"
            )
    steal = mean([s.steal for s in samples])
    if steal is not None and steal > limits.steal_mean:
        reasons.append(f"CPU steal averaged {steal:.0%} (allowed {limits.steal_mean:.0%})")
    width = min((len(s.per_core) for s in samples), default=0)
    return HealthVerdict(
        trustworthy=not reasons,
        reasons=tuple(reasons),
        samples=n,
        machine_cpu_mean=machine.mean if machine else None,
        machine_cpu_p95=machine.p95 if machine else None,
        datapath_cpu_mean=datapath.mean if datapath else None,
        datapath_cpu_p95=datapath.p95 if datapath else None,
        per_core_p95=tuple(_p95([s.per_core[i] for s in samples]) for i in range(width)),
        softirq_mean=mean([s.softirq for s in samples]),
        steal_mean=steal,
        processes=processes,
    )


def _usage(values: Sequence[float], limit: float) -> Usage | None:
    if not values:
        return None
    return Usage(
        mean=statistics.fmean(values),
        p95=_p95(values),
        over=sum(1 for v in values if v > limit) / len(values),
    )


def _p95(values: Sequence[float]) -> float:
    value = quantile(values, 0.95)
    assert value is not None, "p95 of no samples"
    return value


def _check_share(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigError(f"thresholds.{name}", value, "a share between 0 and 1")
