"""The live lab's scrape pace (pure): Prometheus scrapes at the run's interval while load flows
and at a relaxed one once nothing has flowed for a while.

What tells load: the gateway's `/activity` (API requests received so far, and in flight now;
`zcube_lab.serving.gateway`), read about once a second by the live lab
(`zcube_lab.emulator.experiment.live`). Any new request, or any in flight, is activity; so is an
answer that could not be read (the lab then stays at the run's interval, the safe side).
`quiet_s` seconds without activity relax the interval to `idle_s`; the first activity brings
the run's interval back at once. While nothing flows every counter stands still, so the idle
samples lose nothing; when a load starts, the last idle sample is from before it and the run's
interval resumes within a poll, so `increase()` over the load counts all of it. A run
(`zcube-lab run`, `compare`, `sweep`) has no pace: it scrapes at its interval throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

from zcube_lab.core.errors import ConfigError

IDLE_SCRAPE_S = 10.0  # wall seconds between scrapes of an idle live lab
QUIET_S = 10.0  # wall seconds without a request before the scrapes relax


@dataclass(frozen=True)
class Activity:
    """What the gateway's `/activity` said."""

    received: int
    outstanding: int


@dataclass
class ScrapePace:
    """The wall interval Prometheus should scrape at, from the gateway's activity over time."""

    active_s: float
    idle_s: float = IDLE_SCRAPE_S
    quiet_s: float = QUIET_S
    _last: Activity | None = None
    _active_at: float | None = None  # when activity was last seen (None: never looked)

    def __post_init__(self) -> None:
        if not self.active_s > 0:
            raise ConfigError("active_s", self.active_s, "seconds > 0")
        if not self.idle_s >= self.active_s:
            raise ConfigError("idle_s", self.idle_s, f"at least the active {self.active_s} s")
        if not self.quiet_s >= 0:
            raise ConfigError("quiet_s", self.quiet_s, "seconds >= 0")

    def seen(self, now: float, activity: Activity | None) -> float:
        """The interval to scrape at from `now`, given the gateway's activity read now (None:
        it could not be read)."""
        moved = (
            activity is None
            or activity.outstanding > 0
            or self._last is None
            or activity.received != self._last.received
        )
        if activity is not None:
            self._last = activity
        if moved or self._active_at is None:
            self._active_at = now
        return self.idle_s if now - self._active_at >= self.quiet_s else self.active_s
