"""Fidelity evidence beyond CPU: did the emulator lose, hold or mis-shape packets, or run the
engines late, in a way no configured fault explains? (pure)

`judge_network(evidence, limits)` turns `NetworkEvidence` (events and figures from
`zcube_lab.emulator.verdict.netstats`, engine step overruns, the run's fault windows) into reasons a
run is not trustworthy and the events that faults explain. `zcube_lab.emulator.verdict.judge.judge`
adds them to the CPU verdict. Judged, each unless a fault window explains it:
- a retransmission timeout or a SYN retransmit on any host: the 1 s stalls of the issue; a
  faithful fabric would have to lose a whole window or a SYN for it, which the lab never asks for
  outside a fault;
- packets dropped by a qdisc, by an interface, or by a CPU's input queue (softnet). A drop in a
  switch port's queue (one of `NetworkEvidence.switch_ports`) is the modelled switch's own
  congestion (zcube_lab.core.fabric.queues): counted per port, not judged; a retransmission timeout
  it causes is. A drop in a host's NIC queue is never faithful (a real NIC back-pressures its
  host), so it is judged;
- a shaped link sending more than `RateLimits.over` (5%) above its rate over a window
  (shaping did not hold), or provably backlogged through a window while sending under
  `RateLimits.under` (50%) of its rate (the emulator did not keep up);
- engine steps that woke more than `overrun_s` late in more than `overrun_fraction` of an
  engine's steps, or more than `late_share` of their modelled step late in more than
  `late_fraction` of all engines' steps: the report leads with p99, so a late share above 1%
  reaches it;
- KV pulls slower than `kv_ratio_p50` x their ideal at p50 while their NIC links were under
  `kv_path_busy` busy (`KvPulls`; not judged in a run that turned KV transfer off, `--kv-off`:
  each pull then moves one byte, so its time is all fixed cost and its ratio to the ideal says
  nothing of the end host; the verdict says so in `not_judged`), the gateway's event-loop lag
  and the load generator's send lag (`LoopLag`), and every source of evidence that did not
  answer (`NetworkEvidence.missing`): `zcube_lab.emulator.verdict.limits` says why;
- packets the userspace datapath lost between itself and its ports: send errors ovs-vswitchd
  logged (its shared send socket was full; `zcube_lab.emulator.lab.ovs` says why) and drops of its
  ports' receive sockets; no port, qdisc or OpenFlow counter records these, and a real switch has no
  such loss;
Fast retransmits are reported, not judged: spraying a flow over several paths reorders segments,
which triggers fast retransmits without any loss, and a loss that caused one is judged where it
happened (a qdisc, an interface, softnet) when the lab can see it.

A fault explains an event whose window overlaps the fault from its start to `fault_grace_s`
after its end (TCP backs its retransmission timer off exponentially, so a timeout may fire
seconds after the link is back).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from prometheus_client.parser import text_string_to_metric_families

from zcube_lab.emulator.verdict.limits import Limits
from zcube_lab.emulator.verdict.netstats import (
    DEV_DROPS,
    OVER_RATE,
    QDISC_DROPS,
    SOFTNET_DROPS,
    STALLED,
    SYN_RETRANS,
    TIMEOUTS,
    NetEvent,
    QueueFigures,
    TcpCounters,
)
from zcube_lab.serving.vllm_metrics import STEP_LATENESS, STEP_OVERRUN


@dataclass(frozen=True)
class FaultWindow:
    """A configured fault, in the sampler's clock: from `start` to `end` (None: the run's end)."""

    label: str
    start: float
    end: float | None


@dataclass(frozen=True)
class EngineOverruns:
    """One engine's steps during the load, how many woke more than the threshold late, and how
    many more than the share (`StepOverruns.late_share`) of their modelled step late (`behind`;
    None from an engine, or a run, without the relative histogram)."""

    steps: int
    late: int
    behind: int | None = None


@dataclass(frozen=True)
class StepOverruns:
    """Engine step overruns over the load: per engine, the threshold a late step exceeded, the
    share of its modelled step a step behind exceeded, and the engines whose metrics did not
    answer (before or after the load)."""

    threshold_s: float
    engines: Mapping[str, EngineOverruns] = field(default_factory=dict)
    late_share: float | None = None
    missing: tuple[str, ...] = ()

    @property
    def steps(self) -> int:
        return sum(e.steps for e in self.engines.values())

    @property
    def late(self) -> int:
        return sum(e.late for e in self.engines.values())


@dataclass(frozen=True)
class KvPulls:
    """KV pulls over the load against their ideal time
    (`zcube_lab.emulator.results.fabric.transfers`), the busiest mean load over the load window of a
    NIC link of a host that pulled or served KV,
    and the load the pulls met as they ran."""

    rated: int  # pulls with a known ideal time
    ratio_p50: float | None  # of (time - fixed_s) / ideal
    path_busy: float | None  # 0-1; None when the links were not counted
    fixed_s: float = 0.0  # the fixed cost per pull taken off each time (Limits.kv_fixed_s)
    # 0-1: p50 over the pulls of the busiest of each pull's links as it ran
    # (`transfers.kv_seen_busy`); judged in place of `path_busy` when counted
    seen_busy: float | None = None
    # the run turned KV transfer off (`--kv-off`): each pull moved one byte, so not judged
    kv_off: bool = False


@dataclass(frozen=True)
class LoopLag:
    """An event loop's lag over the load: samples (timer wake-ups, or requests sent) and how
    many were more than `threshold_s` late."""

    samples: int
    late: int
    threshold_s: float


@dataclass(frozen=True)
class LosslessEvidence:
    """The lossless agent over the load (zcube_lab.emulator.lab.lossless): its reaction times (queue
    past XOFF -> feeders paused, an upper bound), its errors, whether it still ran at the end, and
    the ports it paused (their held backlog is the fabric's pause, not a stalled emulator)."""

    reactions: int
    reaction_p99_s: float | None
    errors: int
    alive: bool
    paused_ports: frozenset[str] = frozenset()
    last_error: str = ""


@dataclass(frozen=True)
class NetworkEvidence:
    """What the network and engine samplers saw during the load, and the run's faults."""

    events: tuple[NetEvent, ...] = ()
    tcp: Mapping[str, TcpCounters] = field(default_factory=dict)
    queues: Mapping[str, QueueFigures] = field(default_factory=dict)
    softnet: Mapping[str, int] = field(default_factory=dict)
    overruns: StepOverruns | None = None
    faults: tuple[FaultWindow, ...] = ()
    # ovs-vswitchd's own losses during the load: DATAPATH_SEND_ERRORS, DATAPATH_RECEIVE_DROPS
    datapath_drops: Mapping[str, int] = field(default_factory=dict)
    # Interfaces whose qdisc drops are congestion of the modelled switch (reported, not judged)
    switch_ports: frozenset[str] = frozenset()
    kv: KvPulls | None = None
    loops: Mapping[str, LoopLag] = field(default_factory=dict)  # "gateway", "load generator"
    # Sources of evidence that did not answer: source -> what was not seen
    missing: Mapping[str, str] = field(default_factory=dict)
    lossless: LosslessEvidence | None = None  # under --lossless only


@dataclass(frozen=True)
class NetworkJudgement:
    reasons: tuple[str, ...]
    explained: tuple[str, ...]
    not_judged: tuple[str, ...] = ()  # rules that did not apply to the run, and why


def judge_network(evidence: NetworkEvidence, limits: Limits) -> NetworkJudgement:
    """Reasons (one per missing source, one per host, interface or CPU, then one per late
    engine, the KV pulls, one per late loop), the events faults explain, and the rules that did
    not apply to the run (the KV-pull rule under `--kv-off`).
    `judge_qdisc_drops=False` reports qdisc drops without judging them: for when the shaped
    queues model a real port's buffer, whose drops under incast are the fabric's own."""
    unexplained: dict[str, list[NetEvent]] = defaultdict(list)
    explained: dict[tuple[str, str], list[NetEvent]] = defaultdict(list)
    lossless = evidence.lossless
    for event in evidence.events:
        if (
            lossless is None
            and event.quantity == QDISC_DROPS
            and (not limits.judge_qdisc_drops or event.where in evidence.switch_ports)
        ):
            continue  # still in the interface's figures (`QueueFigures.drops`)
        if (
            lossless is not None
            and event.quantity == STALLED
            and event.where in lossless.paused_ports
        ):
            continue  # a paused port holds its queue: the fabric's pause, not the emulator's
        fault = _explaining(event, evidence.faults, limits.fault_grace_s)
        if fault is None:
            unexplained[event.where].append(event)
        else:
            explained[(event.where, fault)].append(event)
    reasons = [f"{source}: {what}" for source, what in sorted(evidence.missing.items())]
    reasons += [f"{where}: {describe(unexplained[where])}" for where in sorted(unexplained)]
    reasons += _datapath_reasons(evidence.datapath_drops)
    reasons += _overrun_reasons(evidence.overruns, limits)
    reasons += _kv_reasons(evidence.kv, limits)
    reasons += _loop_reasons(evidence.loops, limits)
    reasons += _vswitchd_reasons(evidence.faults)
    reasons += _lossless_reasons(lossless, limits)
    notes = [f"{w}: {describe(evs)} (during {f})" for (w, f), evs in sorted(explained.items())]
    return NetworkJudgement(tuple(reasons), tuple(notes), _kv_not_judged(evidence.kv, limits))


def _lossless_reasons(lossless: LosslessEvidence | None, limits: Limits) -> list[str]:
    """Under --lossless the agent is part of the emulator: it must run to the end, without
    errors, and pause feeders within `lossless_reaction_s` at p99 (a slower agent lets a
    queue grow past XOFF by more than PFC's headroom would hold). A switch port's drop is
    judged too (above: under --lossless no port may drop)."""
    if lossless is None:
        return []
    out = []
    if not lossless.alive:
        out.append("lossless agent: it exited before the end of the load, so ports stayed as "
                   "it left them and queues were unwatched")  # fmt: skip
    if lossless.errors:
        out.append(f"lossless agent: {lossless.errors} netlink or socket errors "
                   f"(last: {lossless.last_error})")  # fmt: skip
    p99 = lossless.reaction_p99_s
    if p99 is not None and p99 > limits.lossless_reaction_s:
        out.append(
            f"lossless agent: reaction p99 {p99 * 1e3:.2f} ms over "
            f"{limits.lossless_reaction_s * 1e3:g} ms ({lossless.reactions} congestions)"
        )
    return out


def _vswitchd_reasons(faults: Sequence[FaultWindow]) -> list[str]:
    """An injected `vswitchd` fault (`zcube_lab.core.fault_schedule`) is never explained: the
    emulator itself was killed and rebuilt every bridge and flow, which no real fabric does."""
    return [
        f"{f.label}: ovs-vswitchd was killed and restarted by an injected fault; the emulated "
        "fabric stopped forwarding until its flows were reinstalled"
        for f in faults
        if f.label.split(" ")[0] == "vswitchd"
    ]


def _explaining(event: NetEvent, faults: Sequence[FaultWindow], grace: float) -> str | None:
    for f in faults:
        end = math.inf if f.end is None else f.end + grace
        if event.t1 >= f.start and event.t0 <= end:
            return f.label
    return None


_COUNTED = (
    (TIMEOUTS, "TCP retransmission timeout", "TCP retransmission timeouts"),
    (SYN_RETRANS, "SYN retransmit", "SYN retransmits"),
    (QDISC_DROPS, "packet dropped by the qdisc", "packets dropped by the qdisc"),
    (DEV_DROPS, "packet dropped by the interface", "packets dropped by the interface"),
    (SOFTNET_DROPS, "packet dropped by the CPU's input queue (softnet)",
     "packets dropped by the CPU's input queue (softnet)"),
)  # fmt: skip


def describe(events: Sequence[NetEvent]) -> str:
    """One place's events as text: `2 TCP retransmission timeouts, 1 SYN retransmit`."""
    parts = []
    for quantity, one, many in _COUNTED:
        n = sum(e.count for e in events if e.quantity == quantity)
        if n:
            parts.append(f"{n} {one if n == 1 else many}")
    over = [e for e in events if e.quantity == OVER_RATE]
    if over:
        worst = max(over, key=lambda e: e.detail["mbps"])
        d = worst.detail
        parts.append(
            f"sent {d['mbps']:.1f} Mb/s over {d['window_s']:.1f} s, "
            f"{d['mbps'] / d['rate_mbps'] - 1:.0%} above its {d['rate_mbps']:g} Mb/s rate "
            f"(shaping did not hold; {_windows(len(over))})"
        )
    stalled = [e for e in events if e.quantity == STALLED]
    if stalled:
        worst = min(stalled, key=lambda e: e.detail["mbps"])
        d = worst.detail
        parts.append(
            f"held a backlog ({d['backlog_bytes'] / 1e3:.0f} KB) through {d['window_s']:.1f} s "
            f"while sending {d['mbps']:.1f} Mb/s, {d['mbps'] / d['rate_mbps']:.0%} of its "
            f"{d['rate_mbps']:g} Mb/s rate (the emulator did not keep up; "
            f"{_windows(len(stalled))})"
        )
    return ", ".join(parts)


DATAPATH_SEND_ERRORS = "send_errors_logged"
DATAPATH_RECEIVE_DROPS = "receive_socket_drops"


def _datapath_reasons(drops: Mapping[str, int]) -> list[str]:
    parts = []
    if n := drops.get(DATAPATH_SEND_ERRORS, 0):
        parts.append(
            f"{n} send error{'' if n == 1 else 's'} logged (packets lost between the datapath "
            "and its ports; the log is rate-limited, so at least that many)"
        )
    if n := drops.get(DATAPATH_RECEIVE_DROPS, 0):
        parts.append(f"{n} packet{'' if n == 1 else 's'} dropped by its ports' receive sockets")
    return [f"ovs-vswitchd: {', '.join(parts)}"] if parts else []


def _windows(n: int) -> str:
    return "1 window" if n == 1 else f"{n} windows"


def _overrun_reasons(overruns: StepOverruns | None, limits: Limits) -> list[str]:
    if overruns is None:
        return []
    out = [
        f"{name}: its metrics did not answer, so its step lateness is unchecked"
        for name in overruns.missing
    ]
    for name, e in sorted(overruns.engines.items()):
        if e.steps and e.late / e.steps > limits.overrun_fraction:
            out.append(
                f"{name}: {e.late} of {e.steps} engine steps ({e.late / e.steps:.1%}) woke more "
                f"than {overruns.threshold_s * 1e3:g} ms late (allowed "
                f"{limits.overrun_fraction:.0%})"
            )
    return out + _behind_reasons(overruns, limits)


def _behind_reasons(overruns: StepOverruns, limits: Limits) -> list[str]:
    """The relative rule, over every step of every engine that counted it: the report's ITL
    and TPOT quantiles are over all tokens, so that is the share their tail sees (per engine,
    100-400 steps make 1% two to four steps: a single slow wake-up would decide)."""
    share = overruns.late_share
    counted = {n: e for n, e in overruns.engines.items() if e.behind is not None}
    steps = sum(e.steps for e in counted.values())
    behind = sum(e.behind or 0 for e in counted.values())
    if share is None or not steps or behind / steps <= limits.late_fraction:
        return []
    worst = sorted(counted.items(), key=lambda ne: (-(ne[1].behind or 0), ne[0]))[:3]
    most = ", ".join(f"{n} {e.behind} of {e.steps}" for n, e in worst if e.behind)
    return [
        f"engine steps: {behind} of {steps} ({behind / steps:.1%}) woke more than {share:.0%} "
        f"of their modelled step late (allowed {limits.late_fraction:.0%}; most on {most})"
    ]


def _kv_not_judged(kv: KvPulls | None, limits: Limits) -> tuple[str, ...]:
    """Why the KV-pull rule did not apply, when the run turned KV transfer off."""
    if not limits.judge_kv_pulls or kv is None or not kv.kv_off:
        return ()
    ratio = "" if kv.ratio_p50 is None else f" (p50 {kv.ratio_p50:.2f}x their ideal)"
    return (
        f"KV pulls: not judged over {kv.rated} pulls{ratio}: the run turned KV transfer off "
        "(--kv-off), so each pull moved one byte and its time was all fixed cost, which says "
        "nothing of how fast the end hosts moved KV",
    )


def _kv_reasons(kv: KvPulls | None, limits: Limits) -> list[str]:
    if not limits.judge_kv_pulls or kv is None or kv.ratio_p50 is None or kv.kv_off:
        return []
    if kv.rated < limits.kv_min_pulls:
        return []
    if kv.path_busy is None:
        return [
            f"KV pulls: p50 {kv.ratio_p50:.2f}x their ideal over {kv.rated} pulls, but the "
            "load of their links was not counted, so the pulls are unchecked"
        ]
    seen = kv.seen_busy is not None
    busy = kv.seen_busy if kv.seen_busy is not None else kv.path_busy
    if kv.ratio_p50 > limits.kv_ratio_p50 and busy < limits.kv_path_busy:
        fixed = f" after {kv.fixed_s * 1e3:g} ms of fixed cost each" if kv.fixed_s else ""
        where = (
            "the median pull's busiest link was" if seen else "their busiest link was"
        ) + f" {busy:.0%} busy{' as it ran' if seen else ''}"
        return [
            f"KV pulls: p50 {kv.ratio_p50:.2f}x their ideal{fixed} over {kv.rated} pulls "
            f"(allowed {limits.kv_ratio_p50:g}x) while {where} (under "
            f"{limits.kv_path_busy:.0%}): an end-host artifact, not the fabric"
        ]
    return []


GATEWAY = "gateway"
LOADGEN = "load generator"  # its lag is the send lag of its requests


def _loop_reasons(loops: Mapping[str, LoopLag], limits: Limits) -> list[str]:
    out = []
    for name, lag in sorted(loops.items()):
        if name == LOADGEN:
            allowed, of, what = limits.send_lag_fraction, "requests", "they were sent"
        else:
            allowed, of, what = limits.loop_lag_fraction, "timer samples", "its event loop woke"
        if lag.samples and lag.late / lag.samples > allowed:
            out.append(
                f"{name}: in {lag.late} of {lag.samples} {of} ({lag.late / lag.samples:.1%}) "
                f"{what} more than {lag.threshold_s * 1e3:g} ms late (allowed {allowed:.0%})"
            )
    return out


# --- engine step overruns from an engine's /metrics text -------------------------------------


def overrun_buckets(metrics_text: str) -> dict[float, float]:
    """The cumulative buckets (upper bound -> steps) of the step-overrun histogram in a
    Prometheus text exposition, summed over its series; empty when absent."""
    return histogram_buckets(metrics_text, STEP_OVERRUN)


def lateness_buckets(metrics_text: str) -> dict[float, float]:
    """The same for the step-lateness histogram (share of the modelled step)."""
    return histogram_buckets(metrics_text, STEP_LATENESS)


def histogram_buckets(metrics_text: str, name: str) -> dict[float, float]:
    """The cumulative buckets (upper bound -> count) of histogram `name` in a Prometheus text
    exposition, summed over its series; empty when absent."""
    out: dict[float, float] = defaultdict(float)
    for family in text_string_to_metric_families(metrics_text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name == name + "_bucket":
                out[float(sample.labels["le"])] += sample.value
    return dict(out)


def loop_lag(
    before: Mapping[float, float], after: Mapping[float, float], threshold_s: float
) -> LoopLag:
    """Samples of a lag histogram between two readings, and those later than `threshold_s`
    (the next bucket bound at or above it)."""
    counted = engine_overruns(before, after, threshold_s)
    return LoopLag(samples=counted.steps, late=counted.late, threshold_s=threshold_s)


def send_lag(lags: Sequence[float], threshold_s: float) -> LoopLag:
    """The load generator's send lags (seconds, one per request sent) against a threshold."""
    return LoopLag(len(lags), sum(1 for lag in lags if lag > threshold_s), threshold_s)


def engine_overruns(
    before: Mapping[float, float], after: Mapping[float, float], threshold_s: float
) -> EngineOverruns:
    """Steps between two readings of the buckets, and those later than `threshold_s` (which
    should be a bucket bound; otherwise the next bound above it is used)."""

    def delta(le: float) -> float:
        return after.get(le, 0.0) - before.get(le, 0.0)

    steps = delta(math.inf)
    bounds = sorted(b for b in after if b >= threshold_s)
    on_time = delta(bounds[0]) if bounds else steps
    return EngineOverruns(steps=max(0, round(steps)), late=max(0, round(steps - on_time)))


def step_overruns(
    before: Mapping[str, Mapping[float, float]],
    after: Mapping[str, Mapping[float, float]],
    threshold_s: float,
    *,
    expected: Sequence[str] = (),
    lateness: tuple[Mapping[str, Mapping[float, float]], Mapping[str, Mapping[float, float]]]
    | None = None,
    late_share: float | None = None,
) -> StepOverruns:
    """Per engine read both times: its steps between the readings and the late ones; with
    `lateness` (the relative histogram's buckets before and after) and `late_share`, also the
    steps behind by more than that share of their modelled step. An `expected` engine not read
    both times is `missing`."""
    engines = {}
    for name, buckets in sorted(after.items()):
        if name not in before:
            continue
        counted = engine_overruns(before[name], buckets, threshold_s)
        if lateness is not None and late_share is not None:
            was, now = lateness[0].get(name, {}), lateness[1].get(name, {})
            if now:  # an engine without the histogram is judged on overrun_s alone
                counted = replace(counted, behind=engine_overruns(was, now, late_share).late)
        engines[name] = counted
    missing = tuple(sorted(n for n in expected if n not in engines))
    return StepOverruns(threshold_s, engines, late_share if lateness else None, missing)
