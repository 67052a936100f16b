"""The run loop `compare` and `sweep` share: run a planned run on the lab, tell the user which
run starts, and run it again when the machine spoiled it.

`RunLoop.run(planned)` runs one planned run (`comparison.PlannedRun`) and, while its verdict
rejected it for the machine's own reasons only (`zcube_lab.emulator.verdict.retry`: steal, other
processes' load, late wake-ups with the machine busy from outside), runs it again with the same
config and seed, up to `retries` times. A retry's run folder is the planned one's tagged
`-retry<N>`; the rejected runs' folders stay where they are, and the last attempt's folder gets
`retry.json` naming each earlier attempt, its reasons and why it was run again (`RETRY_FILE`,
read back by `zcube_lab.emulator.results.compare.report`), so a report rebuilt from the folders
still lists both. A retry rejected again is kept with its own reasons beside the first's; a fabric's
fault is never run again.

Why the same dilation k, not a higher one: a comparison's medians and a sweep's capacities
compare the repeats of every variant at one k; a retry at another k would mix two
configurations in one median (the dilation ladder holds figures within its tolerance, not
equal), and for a sweep the run's rate would be judged at a time scale its neighbours did not
have. When the retries are used up and the machine still spoils the run, the report says so
with the figure and what to do (`--dilation`, a quieter time), and the user chooses.

`RunLoop.over(plan)` runs a whole plan in order (`compare`); `sweep.run_sweep` walks its
ladder itself and calls `run` for each run it does not skip.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.experiment.plan import RunConfig
from zcube_lab.emulator.verdict.retry import (
    RETRY_FILE,
    Rejected,
    RetryDecision,
    retries_json,
    retry_decision,
)

if TYPE_CHECKING:
    from zcube_lab.emulator.experiment.launcher import RunResult

DEFAULT_RETRIES = 2
MAX_RETRIES = 10

Execute = Callable[["PlannedRun"], "RunResult"]  # one planned run on the lab (or a fake)


def check_retries(value: object) -> int:
    """`--retries` as an integer from 0 to `MAX_RETRIES` (text as the command line gives it, or
    an int); a ConfigError otherwise."""
    allowed = f"a whole number of retries from 0 (none) to {MAX_RETRIES}"
    number = value
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= MAX_RETRIES:
        raise ConfigError("retries", value, allowed)
    return number


@dataclass(frozen=True)
class Variant:
    """One fabric with one run policy; `config` is its untagged run configuration."""

    kind: str
    policy: str
    label: str
    config: RunConfig


@dataclass(frozen=True)
class PlannedRun:
    """One repeat of one variant: run `number` of `total`, repeat `repeat` of `repeats` (all
    counted from 1)."""

    number: int
    total: int
    repeat: int
    repeats: int
    variant: Variant
    config: RunConfig


@dataclass(frozen=True)
class LoopConfig:
    """What the run loop reads: how many times a run the machine spoiled is run again."""

    retries: int = DEFAULT_RETRIES  # `check_retries` reads it from the command line's text

    def __post_init__(self) -> None:
        check_retries(self.retries)


@dataclass(frozen=True)
class Outcome:
    """A planned run as it ended: its last attempt's result, the earlier attempts rejected for
    the machine (oldest first), and the retry rule's word on the last attempt."""

    planned: PlannedRun
    result: RunResult
    rejected: tuple[Rejected, ...] = ()
    decision: RetryDecision | None = None

    @property
    def attempts(self) -> int:
        return len(self.rejected) + 1


def retry_plan(planned: PlannedRun, attempt: int) -> PlannedRun:
    """The planned run for retry `attempt` (1, 2, ...): the same config and seed, tagged
    `<tag>-retry<attempt>` so its folder stands beside the first's."""
    tag = f"{planned.config.tag}-retry{attempt}" if planned.config.tag else f"retry{attempt}"
    return replace(planned, config=replace(planned.config, tag=tag))


def write_retries(folder: Path, rejected: Iterable[Rejected]) -> None:
    """`retry.json` in the last attempt's folder: the earlier attempts, oldest first."""
    (folder / RETRY_FILE).write_text(json.dumps(retries_json(rejected), indent=2) + "\n")


class RunLoop:
    """Runs planned runs one after another on the lab (or `execute`), telling `starting` of
    each run and `progress` of each step and retry."""

    def __init__(
        self,
        execute: Execute | None = None,
        *,
        config: LoopConfig | None = None,
        progress: Callable[[str], None] | None = None,
        starting: Callable[[PlannedRun], None] | None = None,
    ) -> None:
        self.config = config or LoopConfig()
        self.progress = progress
        self.starting = starting
        self.execute = execute or self._lab

    def _lab(self, planned: PlannedRun) -> RunResult:
        from zcube_lab.emulator.experiment.runner import Experiment

        return Experiment(planned.config, progress=self.progress).run()

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)

    def run(self, planned: PlannedRun) -> Outcome:
        """One planned run, run again while the machine alone spoiled it (module docstring)."""
        if self.starting is not None:
            self.starting(planned)
        result = self.execute(planned)
        rejected: list[Rejected] = []
        while True:
            decision = retry_decision(result.summary.health)
            if not decision.retry or len(rejected) >= self.config.retries:
                break
            rejected.append(Rejected(str(result.path), result.summary.health.reasons, decision.why))
            attempt = len(rejected)
            self._say(
                f"rejected for {decision.why}; running it again with the same seed (retry "
                f"{attempt} of {self.config.retries}), keeping its folder {result.path}"
            )
            result = self.execute(retry_plan(planned, attempt))
        if rejected:
            write_retries(result.path, rejected)
            if decision.retry:  # still the machine's after every retry
                self._say(
                    f"still rejected after {len(rejected)} retries: {decision.why}; the machine "
                    "is too noisy now: try later, or a higher --dilation"
                )
        return Outcome(planned, result, tuple(rejected), decision)

    def over(self, plan: Iterable[PlannedRun]) -> Iterator[Outcome]:
        """Every planned run in order, each outcome as it completes (a caller that stops on an
        error keeps the ones before it)."""
        for planned in plan:
            yield self.run(planned)
