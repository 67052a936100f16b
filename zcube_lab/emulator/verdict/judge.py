"""The emulator health verdict: given CPU samples of a run (and its network evidence), was the
emulator trustworthy?

Pure: `judge(samples, limits, evidence, window=...)` turns `HealthSample`s (taken by
`zcube_lab.emulator.lab.health`) and `NetworkEvidence` (`zcube_lab.emulator.lab.netsampler`, judged
by `zcube_lab.emulator.verdict.network`) into a `HealthVerdict` with the reasons a run is not
trustworthy and the figures behind it. No clock, no /proc, so tests feed it synthetic samples.

Only the samples of the load window are judged (`window`: from the load's start to the load
generator's exit): waiting for targets before it and the drain after it are idle time that would
dilute a saturated load. A registered process with no sample in the window is a missing source.

Default limits (`zcube_lab.emulator.verdict.limits.Limits`, every limit of the verdict in one
object), chosen for the 2-core machine the lab is sized for:
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
- one core above 95% busy in more than 20% of samples: the kernel moves packets between veth
  pairs in softirq on the CPU that sent them, so a pegged core delays and drops packets (its
  input queue overflows) although the machine as a whole has room; 20% as for processes.
- any single ovs-vswitchd thread above the datapath limit (0.85 core) in more than 20% of
  samples: the userspace datapath forwards in one thread, so one thread, not the process total,
  saturates first.
Beyond CPU, `judge` takes the network and engine evidence (`zcube_lab.emulator.verdict.network`):
TCP timeouts, drops, shaping and step overruns that no configured fault explains.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from zcube_lab.core.stats import mean, quantile
from zcube_lab.emulator.verdict.limits import Limits
from zcube_lab.emulator.verdict.netstats import QueueFigures, TcpCounters
from zcube_lab.emulator.verdict.network import (
    EngineOverruns,
    KvPulls,
    LoopLag,
    NetworkEvidence,
    StepOverruns,
    judge_network,
)

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
    threads: Mapping[str, float] = field(default_factory=dict)  # ovs-vswitchd thread -> cores


@dataclass(frozen=True)
class Usage:
    """Mean, p95 and share of samples over a limit, for one measured quantity."""

    mean: float
    p95: float
    over: float


@dataclass(frozen=True)
class BusiestLink:
    """The run's busiest link as the summary names it
    (`zcube_lab.emulator.results.fabric.linkstats.busiest`: the highest mean utilization over the
    run window, then the highest peak), so the verdict and the summary agree: the link direction
    (`h5->a0:3`), its emulated rate, its peak over one scrape interval and the peak's and the mean's
    shares of the rate. Verdicts written before
    issue 19 hold a shaped interface (`a0-eth3`) ranked by its sampled peak instead."""

    iface: str  # the link's name (the JSON key of older verdicts, kept)
    rate_mbps: float
    peak_mbps: float | None
    peak_share: float | None  # peak_mbps / rate_mbps
    mean_share: float | None = None  # absent in older verdicts


# HealthVerdict fields added for issue 11; older health.json and summary.json lack them.
FIDELITY_FIELDS = (
    "datapath_threads",
    "tcp",
    "qdisc",
    "softnet_drops",
    "step_overruns",
    "busiest_link",
    "explained",
    "datapath_drops",
    "kv_pulls",  # issue 20 from here
    "loop_lag",
    "missing",
    "not_judged",  # from 2026-12-07
)


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
    # Fidelity evidence (empty or None when the run had no network sampling, as older runs):
    datapath_threads: Mapping[str, Usage] = field(default_factory=dict)  # in cores
    tcp: Mapping[str, TcpCounters] = field(default_factory=dict)  # host -> counted in the load
    qdisc: Mapping[str, QueueFigures] = field(default_factory=dict)  # shaped interface
    softnet_drops: Mapping[str, int] = field(default_factory=dict)  # cpu<N> -> drops
    step_overruns: StepOverruns | None = None
    busiest_link: BusiestLink | None = None  # the summary's busiest link, set by the run
    explained: tuple[str, ...] = ()  # events a configured fault explains (not reasons)
    datapath_drops: Mapping[str, int] = field(default_factory=dict)  # ovs-vswitchd's own losses
    kv_pulls: KvPulls | None = None
    loop_lag: Mapping[str, LoopLag] = field(default_factory=dict)  # gateway, load generator
    missing: Mapping[str, str] = field(default_factory=dict)  # source -> what was not seen
    # Rules that did not apply to this run, and why (not reasons): the KV-pull rule under --kv-off
    not_judged: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """Plain data for summary.json. A fidelity field with nothing in it (a run without
        network sampling) is left out, so an older verdict is written back as it was read."""
        data = asdict(self)
        for name in FIDELITY_FIELDS:
            if data[name] in (None, {}, ()):
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HealthVerdict:
        """The verdict as `to_dict` stored it; a key an older run lacks reads as None (or
        empty), a key a newer run added is ignored."""
        values: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        values["reasons"] = tuple(data.get("reasons") or ())
        values["explained"] = tuple(data.get("explained") or ())
        values["not_judged"] = tuple(data.get("not_judged") or ())
        values["per_core_p95"] = tuple(data.get("per_core_p95") or ())
        for name in ("processes", "datapath_threads"):
            values[name] = {n: _typed(Usage, u) for n, u in (data.get(name) or {}).items()}
        values["tcp"] = {h: _typed(TcpCounters, c) for h, c in (data.get("tcp") or {}).items()}
        values["qdisc"] = {i: _typed(QueueFigures, q) for i, q in (data.get("qdisc") or {}).items()}
        values["softnet_drops"] = dict(data.get("softnet_drops") or {})
        values["datapath_drops"] = dict(data.get("datapath_drops") or {})
        values["missing"] = dict(data.get("missing") or {})
        values["loop_lag"] = {
            n: _typed(LoopLag, v) for n, v in (data.get("loop_lag") or {}).items()
        }
        if (o := data.get("step_overruns")) is not None:
            engines = {n: _typed(EngineOverruns, e) for n, e in (o.get("engines") or {}).items()}
            values["step_overruns"] = StepOverruns(
                o.get("threshold_s", 0.0),
                engines,
                o.get("late_share"),
                tuple(o.get("missing") or ()),
            )
        if (k := data.get("kv_pulls")) is not None:
            values["kv_pulls"] = _typed(KvPulls, k)
        if (b := data.get("busiest_link")) is not None:
            values["busiest_link"] = _typed(BusiestLink, b)
        return cls(**values)


def _typed(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """A dataclass from a dict, ignoring keys it does not know."""
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


def judge(
    samples: Sequence[HealthSample],
    limits: Limits | None = None,
    evidence: NetworkEvidence | None = None,
    *,
    window: tuple[float, float] | None = None,
    expected: Sequence[str] = (),
) -> HealthVerdict:
    """Verdict on a run from its health samples and, when given, its network evidence. With
    `window` (start, end in the samples' clock) only the samples whose interval lies inside it
    count; a name in `expected` (a registered process) without a sample there is a reason."""
    limits = limits or Limits()
    if window is not None:
        samples = in_window(samples, *window)
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
    threads = _by_name(samples, "threads", limits.datapath_cores)
    for name, usage in threads.items():
        if usage.over > limits.datapath_fraction:
            reasons.append(
                f"{DATAPATH} thread {name} above {limits.datapath_cores:.2f} core in "
                f"{usage.over:.0%} of samples (allowed {limits.datapath_fraction:.0%}; "
                f"p95 {usage.p95:.2f} core)"
            )
    processes = _by_name(samples, "processes", limits.process_cores)
    processes.pop(DATAPATH, None)
    if n:
        reasons += [
            f"process {name} was never sampled during the load: its CPU is unchecked"
            for name in sorted(set(expected) - set(processes) - {DATAPATH})
        ]
    for name, usage in processes.items():
        if usage.over > limits.process_fraction:
            reasons.append(
                f"process {name} above {limits.process_cores:.2f} core in {usage.over:.0%} of "
                f"samples (allowed {limits.process_fraction:.0%}; p95 {usage.p95:.2f} core)"
            )
    reasons += _core_reasons(samples, limits)
    steal = mean([s.steal for s in samples])
    if steal is not None and steal > limits.steal_mean:
        reasons.append(f"CPU steal averaged {steal:.0%} (allowed {limits.steal_mean:.0%})")
    width = min((len(s.per_core) for s in samples), default=0)
    verdict = HealthVerdict(
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
        datapath_threads=threads,
    )
    return verdict if evidence is None else _with_network(verdict, evidence, limits)


def in_window(samples: Sequence[HealthSample], start: float, end: float) -> list[HealthSample]:
    """The samples whose interval ends after `start` and began by `end`, with at least half of
    it inside: the 1 s sample a boundary cuts counts on the side that holds most of it."""
    return [s for s in samples if inside(s, start, end)]


def inside(sample: HealthSample, start: float, end: float) -> bool:
    """Whether `in_window(..., start, end)` keeps `sample`."""
    begin = sample.t - sample.interval_s
    return min(sample.t, end) - max(begin, start) >= sample.interval_s / 2


def _with_network(
    verdict: HealthVerdict, evidence: NetworkEvidence, limits: Limits
) -> HealthVerdict:
    judged = judge_network(evidence, limits)
    reasons = verdict.reasons + judged.reasons
    return replace(
        verdict,
        trustworthy=not reasons,
        reasons=reasons,
        tcp=dict(evidence.tcp),
        qdisc=dict(evidence.queues),
        softnet_drops=dict(evidence.softnet),
        datapath_drops={k: v for k, v in evidence.datapath_drops.items() if v},
        step_overruns=evidence.overruns,
        explained=judged.explained,
        not_judged=judged.not_judged,
        kv_pulls=evidence.kv,
        loop_lag=dict(evidence.loops),
        missing=dict(evidence.missing),
    )


def _by_name(samples: Sequence[HealthSample], part: str, limit: float) -> dict[str, Usage]:
    """Usage of each name in one per-name part of the samples (`processes`, `threads`)."""
    names = sorted({name for s in samples for name in getattr(s, part)})
    out = {}
    for name in names:
        usage = _usage([getattr(s, part)[name] for s in samples if name in getattr(s, part)], limit)
        assert usage is not None  # the name came from some sample
        out[name] = usage
    return out


def _core_reasons(samples: Sequence[HealthSample], limits: Limits) -> list[str]:
    width = min((len(s.per_core) for s in samples), default=0)
    out = []
    for i in range(width):
        usage = _usage([s.per_core[i] for s in samples], limits.core_busy)
        assert usage is not None
        if usage.over > limits.core_fraction:
            out.append(
                f"cpu{i} above {limits.core_busy:.0%} busy in {usage.over:.0%} of samples "
                f"(allowed {limits.core_fraction:.0%}; p95 {usage.p95:.0%})"
            )
    return out


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
