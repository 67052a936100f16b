"""How often the controller polls the switches' statistics: every `active_s` while the fabric's
counters move, every `idle_s` once they have stood still for a few polls (pure).

While no counter moves, a slower poll loses nothing: the exported values are the same either
way. The first reply that shows any port's counters moved ends the idle pace at once (the app
then polls again without waiting), so a load that starts during an idle wait is seen at the
first idle poll after it, at most `idle_s` late, and polled every `active_s` from there.
`idle_s` at or below `active_s` turns relaxing off: a run's controller always polls at its
run's interval (only the live lab relaxes, `zcube_lab.emulator.experiment.live`).
"""

from __future__ import annotations

from dataclasses import dataclass

from zcube_lab.core.errors import ConfigError

QUIET_POLLS = 3  # polls in a row with no counter moved before the pace relaxes


@dataclass
class PollPace:
    """The statistics poll's interval, from whether each poll's replies moved any counter."""

    active_s: float
    idle_s: float = 0.0  # <= active_s: never relax
    quiet_polls: int = QUIET_POLLS
    _still: int = 0  # polls in a row whose replies moved nothing

    def __post_init__(self) -> None:
        if not self.active_s > 0:
            raise ConfigError("poll_interval", self.active_s, "a number of seconds > 0")
        if not self.idle_s >= 0:
            raise ConfigError("idle_poll_interval", self.idle_s, "seconds >= 0 (0: off)")
        if self.quiet_polls < 1:
            raise ConfigError("quiet_polls", self.quiet_polls, "at least 1")

    @property
    def relaxes(self) -> bool:
        """Whether this pace ever slows down."""
        return self.idle_s > self.active_s

    @property
    def idle(self) -> bool:
        """Whether the pace is relaxed now."""
        return self.relaxes and self._still >= self.quiet_polls

    def polled(self, moved: bool) -> float:
        """Seconds until the next poll, given whether the last poll's replies moved any
        counter."""
        self._still = 0 if moved else self._still + 1
        return self.idle_s if self.idle else self.active_s

    def replied(self, moved: bool) -> bool:
        """A reply came in: whether to poll again now (it moved a counter while idle); the pace
        is active from here."""
        wake = moved and self.idle
        if moved:
            self._still = 0
        return wake
