"""Modelled time and wall time under time dilation k (docs/DOMAIN.md §4), pure.

The lab runs the modelled world k times slower than the wall clock. One `Clock(k)` converts:
`wall(modelled_s)` is how long a modelled duration lasts on the wall clock (a timeout, an
interval, a compute sleep) and `modelled(wall_s)` is what a wall-clock measurement means in the
modelled world (a latency observed by a server or the load generator). A value crosses between
the two only through a clock, so which time a figure is in is decided where the clock is held,
not by a name suffix.

The dilation k is validated here and nowhere else (`check_dilation`: every config that holds a
k, the run's, the load generator's, the serving roles', builds or checks it through this module).
A clock is built once, by the config that holds k (its `clock` property: `RunConfig`, `Scale`,
`LoadConfig`, the serving roles' configs, `RunSummary` for a finished run), and passed on as an
object; a process gets k as a number in its own config and takes that config's clock.
`tests/unit/test_clock_crossing.py` holds both rules: no `Clock(number)` outside a `clock`
property, and no multiplication or division by a value that came from a dilation, whatever the
variable is called.
Rates cross too: a rate per modelled second is `wall_rate(...)` per wall second (a link shaped
k times slower carries the same bytes in k times the time).

Also here: what the kernel's TCP does on its own clock, and the per-route options
(`ip route ... rto_min ... quickack 1`) that dilate what can be dilated (`tcp_route_options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from zcube_lab.core.errors import ConfigError

MAX_DILATION = 16.0
# The fine time scale (`zcube_lab.core.replay.timescale`): replays on paced datagrams, whose
# timers run on the lab's clock, stretch time far further than kernel TCP can follow.
MAX_FINE_DILATION = 1000.0

# Linux's minimum retransmission timeout (TCP_RTO_MIN in include/net/tcp.h), settable per route
# (`rto_min`). The delayed-ACK minimum (TCP_DELACK_MIN, 40 ms) has no route option that
# stretches it (`quickack 1` turns delayed ACKs off instead). Not settable per route or per
# namespace in a way that scales: the initial SYN timeout (TCP_TIMEOUT_INIT, 1 s; only its retry
# count is a sysctl) and the fixed parts of the tail-loss probe's timer (the rest is derived
# from the RTT, which dilates).
TCP_RTO_MIN_S = 0.2


def check_dilation(dilation: float, field: str = "dilation") -> None:
    """Refuse a time dilation outside 1 <= k <= MAX_DILATION (a ConfigError naming `field`)."""
    if not 1.0 <= dilation <= MAX_DILATION:
        raise ConfigError(field, dilation, f"between 1 (off) and {MAX_DILATION:g}")


def check_fine_dilation(dilation: float, field: str = "dilation") -> None:
    """Refuse a dilation outside 1 <= k <= MAX_FINE_DILATION: the bound of a clock that no
    kernel TCP timer runs on (a replay's paced datagrams); a run's config keeps
    `check_dilation`'s."""
    if not 1.0 <= dilation <= MAX_FINE_DILATION:
        raise ConfigError(field, dilation, f"between 1 (off) and {MAX_FINE_DILATION:g}")


@dataclass(frozen=True)
class Clock:
    """The time dilation k of one run: modelled seconds last k wall seconds."""

    dilation: float = 1.0

    def __post_init__(self) -> None:
        check_fine_dilation(self.dilation)

    @property
    def dilated(self) -> bool:
        """True when the run is dilated (k != 1)."""
        return self.dilation != 1.0

    def wall(self, modelled_s: float) -> float:
        """Wall seconds a duration of `modelled_s` modelled seconds lasts."""
        return modelled_s * self.dilation

    def modelled(self, wall_s: float) -> float:
        """Modelled seconds a wall-clock measurement of `wall_s` seconds stands for."""
        return wall_s / self.dilation

    def wall_rate(self, per_modelled_s: float) -> float:
        """A rate per modelled second (a link's Mb/s) as a rate per wall second."""
        return per_modelled_s / self.dilation


def tcp_route_options(clock: Clock) -> str:
    """The options every fabric route of a host namespace gets (appended to `ip route`): none
    at k = 1 (the kernel's own timers are the model's); dilated, the minimum RTO x k and delayed
    ACKs off, since their 40 ms minimum cannot be stretched and would shrink to 40/k modelled
    ms (docs/DOMAIN.md §4 says what else stays on the kernel's clock)."""
    if not clock.dilated:
        return ""
    rto_ms = round(clock.wall(TCP_RTO_MIN_S) * 1000)
    return f"rto_min {rto_ms}ms quickack 1"
