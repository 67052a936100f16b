"""How the verdicts of parts make the verdict of a whole (pure): the machines of a cluster run,
the runs of a variant, the repeats of a sweep point, a repeat's walk up a ladder of rates.

One rule throughout: a whole is trustworthy only when every part is, and a part that is not
says why under its own name. Each whole has its own shape:

- **machines** (`over_machines`): a run on several machines keeps machine 0's verdict (its
  figures), untrustworthy when any machine's is, each other machine's reasons added after
  machine 0's with the machine's label (`machine 1 (198.19.254.2): ...`);
- **runs** (`over_runs`): the runs of a variant, or of a sweep point, or of one level of the
  dilation ladder (`Judged`: a name, the outcome, the reasons). `RunsVerdict` counts them and
  gives the reasons of the runs that were not trustworthy, each prefixed with its run's name,
  and the first of them; a whole of no runs is not trustworthy (nothing was judged);
- **a ladder of rates** (`walk_ladder`): one repeat's runs from the lowest rate up count for a
  fabric figure until the first run that missed its SLO or was not trustworthy. The walk stops
  there; when that run was not trustworthy, what it measured says nothing about the fabric, so
  the figure the walk reached is only a lower bound (censored), never lifted by a run above it.
  The capacity at an SLO (`zcube_lab.emulator.results.sweep.capacity`) is built on this walk.

Inputs are duck-typed (`Trusted`: anything with `trustworthy`; `Step`: a rate, whether its SLO
was met, whether it was trustworthy), so run summaries, sweep points and benchmark rows combine
without this package importing them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from zcube_lab.emulator.verdict.judge import HealthVerdict

NO_REASON = "no reason given"  # an untrustworthy part that named no reason


class Trusted(Protocol):
    """Anything judged: a verdict, a run's summary, a sweep's run point, a benchmark row."""

    @property
    def trustworthy(self) -> bool: ...


def all_trustworthy(parts: Iterable[Trusted]) -> bool:
    """Whether a whole of these parts is trustworthy: at least one part, and every one is."""
    parts = list(parts)
    return bool(parts) and all(p.trustworthy for p in parts)


def over_machines(
    local: HealthVerdict, others: Sequence[tuple[str, HealthVerdict]]
) -> HealthVerdict:
    """Machine 0's verdict (`local`), untrustworthy when any other machine's is, with every
    other machine's reasons after its own, each prefixed with that machine's label."""
    reasons = list(local.reasons)
    for label, verdict in others:
        reasons += [f"{label}: {r}" for r in verdict.reasons]
    trustworthy = local.trustworthy and all(v.trustworthy for _label, v in others)
    return replace(local, trustworthy=trustworthy, reasons=tuple(reasons))


@dataclass(frozen=True)
class Judged:
    """One run as the combination sees it: its name, whether it was trustworthy, its reasons."""

    name: str
    trustworthy: bool
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunsVerdict:
    """The verdict over several runs: how many there were and the ones not trustworthy."""

    runs: int
    untrusted: tuple[Judged, ...]

    @property
    def trustworthy(self) -> bool:
        """At least one run, and every one trustworthy."""
        return self.runs > 0 and not self.untrusted

    @property
    def trusted(self) -> int:
        """How many runs were trustworthy."""
        return self.runs - len(self.untrusted)

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every reason of every untrustworthy run, `<run>: <reason>` (`NO_REASON` for a run
        that gave none), in the runs' order."""
        return tuple(f"{j.name}: {r}" for j in self.untrusted for r in j.reasons or (NO_REASON,))

    @property
    def first_reason(self) -> str | None:
        """The first reason an untrustworthy run gave (`NO_REASON` when none gave one); None
        when every run was trustworthy."""
        if not self.untrusted:
            return None
        return next((r for j in self.untrusted for r in j.reasons), NO_REASON)

    def count_text(self) -> str:
        """`yes` when no run was untrustworthy, else `no (k of n trusted)`, k the trusted runs
        (`no (2 of 3)` read as "2 of 3 trusted" where it counted the untrusted)."""
        if not self.untrusted:
            return "yes"
        return f"no ({self.trusted} of {self.runs} trusted)"


def over_runs(runs: Iterable[Judged]) -> RunsVerdict:
    """The verdict over `runs` (in the order given)."""
    runs = list(runs)
    return RunsVerdict(len(runs), tuple(j for j in runs if not j.trustworthy))


class Step(Protocol):
    """One run on a ladder of rates (the sweep's `RunPoint`, a capacity `Trial`)."""

    @property
    def rate(self) -> float: ...
    @property
    def slo_met(self) -> bool: ...
    @property
    def trustworthy(self) -> bool: ...


@dataclass(frozen=True)
class Walk:
    """One repeat's walk up its ladder: the highest rate that counts (0: none) and the run it
    stopped at (None: it met every rate it ran, all trustworthy)."""

    reached: float
    stop: Step | None

    @property
    def ended(self) -> bool:
        """Whether the walk stopped at a run (no higher rate can change what it reached)."""
        return self.stop is not None

    @property
    def censored_by_verdict(self) -> bool:
        """Whether it stopped at an untrustworthy run: what it reached is a lower bound."""
        return self.stop is not None and not self.stop.trustworthy


def walk_ladder(steps: Iterable[Step]) -> Walk:
    """Walk one repeat's runs from the lowest rate up (they are sorted here) to the first one
    that was not trustworthy or missed its SLO."""
    reached = 0.0
    for step in sorted(steps, key=lambda s: s.rate):
        if not step.trustworthy or not step.slo_met:
            return Walk(reached, step)
        reached = step.rate
    return Walk(reached, None)
