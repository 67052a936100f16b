"""Whether a rejected run may be run again (pure): was it the machine's fault, or the fabric's?

`compare` and `sweep` run a repeat again, with the same seed, when its verdict rejected it for
the machine's own reasons only, and never when the fabric (or the lab itself) caused a reason:
a retry must not turn a fabric's drop or stall into a clean run by chance. Each reason of a
verdict gets a `Cause` (`cause_of`, from the reason's text as `judge` and `network` write it):

- `MACHINE`: CPU steal above its limit. The hypervisor ran someone else; nothing of the lab did.
- `BUSY`: the machine's or one core's CPU above its limit; `LATE`: late wake-ups (engine steps,
  the gateway's event loop, the load generator's sends, KV pulls as an end-host artifact).
  These are the machine's only when the same verdict shows it was disturbed from outside
  (`disturbed`: steal above its limit, or other processes' load, the machine's busy cores less
  the lab's registered processes, its datapath and the kernel's softirq, of at least
  `OTHER_LOAD_CORES`, 0.75 core). Without that, the lab's own load made them, and the same run
  again would repeat them (a higher dilation k would serve, which the user chooses).
- `LAB`: a registered process or ovs-vswitchd above its core limit (the lab's own load), too few
  samples, a source of evidence that did not answer. Not retried: the same run repeats them, or
  they need a look.
- `FABRIC`: everything else: TCP timeouts, drops, shaping that did not hold, stalled queues,
  ovs-vswitchd's losses, the lossless agent, an injected fault. A reason this module does not
  recognise counts as the fabric's too, so a new kind of reason is never retried by accident.

`retry_decision` retries a run when every reason is the machine's (a run with one fabric reason
among ten machine ones is kept as it is). A run judged on several machines carries the other
machines' reasons prefixed `machine N (address): `; those are classified by their text alone,
since the verdict keeps only machine 0's figures.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from zcube_lab.emulator.verdict.judge import HealthVerdict
from zcube_lab.emulator.verdict.limits import Limits

# Other processes' load (in cores) from which the machine counts as busy from outside. The lab
# leaves some of its own load unregistered with the health sampler: the command's own process
# (the samplers; 0.13-0.35 core in `top` over a light 16-GPU compare run here, 2026-12-07),
# Prometheus (0.14 core idle, more under load), the emulated hosts' shells. Below 0.75 core it
# is not told apart from the lab's own, so the rule does not blame the machine for it.
OTHER_LOAD_CORES = 0.75
# The file in a retried run's folder that names its earlier attempts (`retries_json`).
RETRY_FILE = "retry.json"


class Cause(Enum):
    """Who a reason of a verdict is attributed to."""

    MACHINE = "machine"  # steal: the machine's alone
    BUSY = "busy"  # CPU above a limit: the machine's when disturbed, else the lab's
    LATE = "late"  # late wake-ups: the machine's when disturbed, else the lab's
    LAB = "lab"  # the lab's own load or missing evidence
    FABRIC = "fabric"  # the fabric's (and anything not recognised)


_MACHINE_PREFIX = re.compile(r"^machine \d+ \([^)]*\): ")
_PATTERNS: tuple[tuple[Cause, re.Pattern[str]], ...] = (
    (Cause.MACHINE, re.compile(r"^CPU steal averaged ")),
    (Cause.BUSY, re.compile(r"^(machine CPU|cpu\d+) above \d+%")),
    (Cause.LAB, re.compile(r"^(process \S+|ovs-vswitchd( thread \S+)?) above [\d.]+ core")),
    (Cause.LAB, re.compile(r"^only \d+ health samples")),
    (Cause.LAB, re.compile(r"was never sampled|did not answer|unchecked")),
    (Cause.LATE, re.compile(r"engine steps \(?.*woke more than|^engine steps: \d+ of \d+")),
    (Cause.LATE, re.compile(r"^[^:]+: in \d+ of \d+ timer samples .* its event loop woke more")),
    (Cause.LATE, re.compile(r"^[^:]+: in \d+ of \d+ requests .* they were sent more than")),
    (Cause.LATE, re.compile(r"^KV pulls: p50 .*: an end-host artifact, not the fabric$")),
)


def cause_of(reason: str) -> Cause:
    """The cause of one reason as a verdict wrote it (`FABRIC` when not recognised)."""
    text = _MACHINE_PREFIX.sub("", reason)
    for cause, pattern in _PATTERNS:
        if pattern.search(text):
            return cause
    return Cause.FABRIC


def other_load_cores(verdict: HealthVerdict) -> float | None:
    """Cores busy with what the lab did not register: the machine's busy cores less the
    registered processes, the datapath and softirq (None without the figures)."""
    cores = len(verdict.per_core_p95)
    if verdict.machine_cpu_mean is None or not cores:
        return None
    lab = sum(u.mean for u in verdict.processes.values()) + (verdict.datapath_cpu_mean or 0.0)
    softirq = (verdict.softirq_mean or 0.0) * cores
    return max(0.0, verdict.machine_cpu_mean * cores - lab - softirq)


def disturbed(verdict: HealthVerdict, limits: Limits | None = None) -> str | None:
    """What shows that the machine was busy from outside during the run (`CPU steal 23%`,
    `other processes 1.4 cores`), or None."""
    limits = limits or Limits()
    found = []
    if verdict.steal_mean is not None and verdict.steal_mean > limits.steal_mean:
        found.append(f"CPU steal {verdict.steal_mean:.0%}")
    others = other_load_cores(verdict)
    if others is not None and others >= OTHER_LOAD_CORES:
        found.append(f"other processes {others:.1f} cores")
    return ", ".join(found) or None


@dataclass(frozen=True)
class RetryDecision:
    """Whether to run a rejected run again, and why (or why not) in one sentence."""

    retry: bool
    why: str


def retry_decision(verdict: HealthVerdict, limits: Limits | None = None) -> RetryDecision:
    """Retry a rejected run when every reason is the machine's (module docstring); a trusted
    run is never retried."""
    if verdict.trustworthy:
        return RetryDecision(False, "trusted")
    reasons = verdict.reasons
    if not reasons:
        return RetryDecision(False, "rejected without a reason: not the machine's to blame")
    outside = disturbed(verdict, limits)
    not_machine = [r for r in reasons if not _machines(cause_of(r), outside)]
    if not_machine:
        cause = cause_of(not_machine[0])
        whose = "the fabric's" if cause is Cause.FABRIC else "the lab's own"
        if cause in (Cause.BUSY, Cause.LATE):
            whose += " (the machine was not busy from outside)"
        return RetryDecision(False, f"not retried: {whose}: {not_machine[0]}")
    return RetryDecision(True, f"the machine's ({outside}): {reasons[0]}")


def _machines(cause: Cause, outside: str | None) -> bool:
    return cause is Cause.MACHINE or (cause in (Cause.BUSY, Cause.LATE) and outside is not None)


@dataclass(frozen=True)
class Rejected:
    """An earlier attempt of a run, rejected for the machine and run again: its folder, its
    reasons and why it was retried."""

    run: str
    reasons: tuple[str, ...]
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "reasons": list(self.reasons), "why": self.why}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rejected:
        return cls(str(data["run"]), tuple(data.get("reasons") or ()), str(data.get("why", "")))


def retries_json(rejected: Iterable[Rejected]) -> dict[str, Any]:
    """What `RETRY_FILE` holds: the earlier attempts, oldest first."""
    return {"earlier": [r.to_dict() for r in rejected]}


def retries_from_json(data: Mapping[str, Any]) -> tuple[Rejected, ...]:
    """The earlier attempts `retries_json` wrote."""
    return tuple(Rejected.from_dict(d) for d in data.get("earlier") or ())
