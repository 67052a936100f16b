"""The verdict paragraph that opens report.html, in sentences (pure: figures in, sentences out).

Each headline figure (`Headline`: a name, a unit, whether lower is better, and each variant's
values over its trustworthy repeats) gets a sentence per variant other than the baseline: their
medians, the difference in % of the baseline's median, whether the difference exceeds the
spread over repeats, and only then which of the two did better. It exceeds the spread when the
two ranges [min-max] do not overlap; when they overlap it is within the spread; with a single
repeat on either side the spread is unknown: no winner is named in either case. Only figures
where lower is better (times, failures) are judged: a throughput at an offered open-loop rate or
a link's load is described, never called better or worse. Runs left out as not trustworthy
(`Excluded`) are named with their first reason before the figures.

Units: `s` (shown in ms when below 1 s), `%` (a fraction shown as a percentage), or any other
unit written after the number (`req/s`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Headline:
    """One figure of the verdict: `values` maps a variant to the figure of each of its
    trustworthy repeats (a variant without it is left out of this figure's sentences)."""

    name: str
    unit: str
    lower_is_better: bool | None  # only True is judged
    values: Mapping[str, Sequence[float]]


@dataclass(frozen=True)
class Excluded:
    """A run left out of the verdict as not trustworthy, with its first reason."""

    variant: str
    run: str
    reason: str


def verdict_sentences(
    headlines: Sequence[Headline],
    repeats: Mapping[str, int],
    baseline: str,
    excluded: Sequence[Excluded] = (),
) -> list[str]:
    """The verdict paragraph: what is compared over how many trustworthy repeats, the runs left
    out, then a sentence per headline figure and variant against `baseline`. `repeats` maps each
    variant, in report order, to its number of trustworthy runs."""
    out = [_opening(repeats, baseline)]
    if excluded:
        runs = ", ".join(f"{x.run} ({x.variant}: {x.reason})" for x in excluded)
        out.append(f"Left out as not trustworthy: {runs}.")
    else:
        out.append("Every run was trustworthy.")
    if not repeats.get(baseline):
        return out
    for other in (v for v in repeats if v != baseline and repeats[v]):
        out += [s for h in headlines if (s := figure_sentence(h, other, baseline)) is not None]
    return out


def figure_sentence(h: Headline, other: str, baseline: str) -> str | None:
    """`other` against `baseline` on one figure; None when either has no value of it."""
    mine, base = h.values.get(other, ()), h.values.get(baseline, ())
    if not mine or not base:
        return None
    m, b = statistics.median(mine), statistics.median(base)
    if m == b or _value(m, h.unit) == _value(b, h.unit):
        return f"{h.name}: the same on {other} and {baseline} ({_value(m, h.unit)})."
    values = f"{_value(m, h.unit)} vs {_value(b, h.unit)}"
    if b == 0:
        text = f"{other} {_value(m, h.unit)} vs {baseline} {_value(b, h.unit)}"
    else:
        pct = round(abs(100 * (m - b) / b), 1)
        size = f"{pct:.{0 if pct >= 10 else 1}f}%" if pct >= 0.1 else "less than 0.1%"
        text = f"{other} {size} {'lower' if m < b else 'higher'} than {baseline} ({values})"
    spread, beyond = _spread(mine, base, h.unit)
    if h.lower_is_better is not True:
        return f"{h.name}: {text}; {spread} (not judged: lower is not better here)."
    if not beyond:
        return f"{h.name}: {text}; {spread}, so no winner."
    better = other if m < b else baseline
    return f"{h.name}: {text}; {spread}, so {better} better."


def _spread(mine: Sequence[float], base: Sequence[float], unit: str) -> tuple[str, bool]:
    """Whether the ranges over repeats overlap, or that a single repeat cannot tell; and
    whether the difference is beyond the spread."""
    if len(mine) < 2 or len(base) < 2:
        return "spread over repeats unknown (a single repeat)", False
    ranges = f"{_range(mine, unit)} vs {_range(base, unit)}"
    if max(min(mine), min(base)) <= min(max(mine), max(base)):
        return f"within the spread over repeats ({ranges} overlap)", False
    return f"exceeds the spread over repeats ({ranges} do not overlap)", True


def _opening(repeats: Mapping[str, int], baseline: str) -> str:
    """What is compared, over how many trustworthy repeats."""
    others = [v for v in repeats if v != baseline]
    head = f"{', '.join(others)} against the baseline {baseline}"
    if not repeats.get(baseline):
        return f"{head}: no trustworthy run of the baseline, so no verdict."
    if len(set(repeats.values())) == 1:
        n = repeats[baseline]
        each = "one trustworthy run each" if n == 1 else f"medians of {n} trustworthy repeats each"
        text = f"{head}, {each}."
    else:
        per = ", ".join(f"{v} {n}" for v, n in repeats.items() if n)
        text = f"{head}, medians of the trustworthy repeats ({per})."
    none = [v for v in others if not repeats[v]]
    if none:
        text += f" No trustworthy run of {', '.join(none)}, so no verdict for it."
    return text


def _value(v: float, unit: str) -> str:
    number, suffix = _scaled(v, unit, v)
    return number + suffix


def _range(values: Sequence[float], unit: str) -> str:
    """`low-high unit`, both ends in one scale; one value when they agree."""
    low, high = min(values), max(values)
    ref = max(abs(low), abs(high))
    (lo, suffix), (hi, _) = _scaled(low, unit, ref), _scaled(high, unit, ref)
    return f"{hi}{suffix}" if lo == hi else f"{lo}-{hi}{suffix}"


def _scaled(v: float, unit: str, ref: float) -> tuple[str, str]:
    """`v` as a number and its unit, in the scale `ref` is shown in (ms below 1 s)."""
    if unit == "%":
        return _number(100 * v), "%"
    if unit == "s" and abs(ref) < 1:
        return _number(1000 * v), " ms"
    return _number(v), f" {unit}"


def _number(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


# -- the health section: one row per run --------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """One attempt of a run as the health section shows it: its folder's name, its outcome and
    its reasons; `retried` says it was rejected for the machine and run again (`why`)."""

    run: str
    trusted: bool
    reasons: tuple[str, ...] = ()
    retried: bool = False
    why: str = ""
    machine: bool = (
        False  # rejected for the machine's reasons only (`zcube_lab.emulator.verdict.retry`)
    )


@dataclass(frozen=True)
class HealthRow:
    """A row of the health section: a variant's run, trusted or not, its first reason and how
    many more (every reason is in `attempt.reasons`, shown folded below the table)."""

    variant: str
    attempt: Attempt
    retry: int = 0  # 0: the planned run; N: its N-th retry

    @property
    def verdict(self) -> str:
        """`trusted`, `not trusted`, or either with the retry it is (`trusted (retry 1)`), or
        `rejected (machine), run again` for an attempt the loop ran again."""
        if self.attempt.retried:
            return "rejected (machine), run again"
        text = "trusted" if self.attempt.trusted else "not trusted"
        text += " (machine)" if self.attempt.machine else ""
        return f"{text} (retry {self.retry})" if self.retry else text

    @property
    def first(self) -> str:
        """The first reason (`-` for a trusted run, `no reason given` for one without)."""
        if self.attempt.trusted:
            return "-"
        return self.attempt.reasons[0] if self.attempt.reasons else "no reason given"

    @property
    def more(self) -> str:
        """`+N more` reasons after the first, or empty."""
        n = len(self.attempt.reasons) - 1
        return f"+{n} more" if n > 0 and not self.attempt.trusted else ""

    def cells(self) -> list[str]:
        """variant, run, verdict, first reason, more: the row as text."""
        return [self.variant, self.attempt.run, self.verdict, self.first, self.more]


HEALTH_COLUMNS = ("variant", "run", "verdict", "first reason", "more")


def health_rows(runs: Sequence[tuple[str, Attempt, Sequence[Attempt]]]) -> list[HealthRow]:
    """The rows of runs given as (variant, last attempt, earlier attempts oldest first): each
    earlier attempt (rejected for the machine and run again) right before the attempt that
    replaced it, so a retried run shows both its reasons and its outcome."""
    out = []
    for variant, last, earlier in runs:
        out += [HealthRow(variant, a, i) for i, a in enumerate(earlier)]
        out.append(HealthRow(variant, last, len(earlier)))
    return out


def health_summary(rows: Sequence[HealthRow]) -> str:
    """One sentence over the rows: `5 of 6 runs trusted; 2 runs rejected for the machine were
    run again (1 trusted on retry).` (only the last attempts count as runs)."""
    last = [r for r in rows if not r.attempt.retried]
    trusted = sum(r.attempt.trusted for r in last)
    text = f"{trusted} of {len(last)} runs trusted"
    retried = [r for r in last if r.retry]
    if retried:
        ok = sum(r.attempt.trusted for r in retried)
        text += (
            f"; {len(retried)} rejected for the machine {'was' if len(retried) == 1 else 'were'} "
            f"run again ({ok} trusted on a retry)"
        )
    still = [r for r in last if r.attempt.machine]
    if still:
        text += (
            f"; {len(still)} rejected for the machine alone (steal, other processes' load): "
            "the machine is too noisy now: run later, or with a higher --dilation"
        )
    return text + "."
