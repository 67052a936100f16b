"""Gateway load balancing: pick a backend given each one's outstanding work.

A balancer is a small class with `pick(backends) -> Backend`, registered in `BALANCERS` under
the name of its balancing policy (the gateway's `--policy`; not the fabric's routing policy nor
the lab's run policy).
`least-outstanding` takes the backend with the least outstanding work (prompt tokens in flight
for prefill, requests in flight for decode), rotating among ties (always taking the first tie
would pile a lightly loaded cluster's KV traffic onto the first few GPUs, a hotspot of the
router's making, not the fabric's); `round-robin` cycles regardless of load.

A backend that refused a connection (its engine died) is marked down for `DOWN_HOLD_S`:
`usable` leaves it out of the choice until then, and the gateway retries a refused request on
another backend (nothing was sent, so nothing is done twice).

Backends may carry a group (`http://host:port#group=rail3`): when the chosen prefill has one,
the decode is chosen among the decodes of the same group, if there are any. The lab uses this
for rail-aligned placements, where a prefill GPU hands its KV only to decode GPUs on its rail.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

DOWN_HOLD_S = 5.0  # how long a backend that refused a connection is left out


@dataclass
class Backend:
    """One prefill or decode instance as the gateway sees it."""

    url: str
    load: int = 0
    in_flight: int = 0
    group: str = ""
    down_until: float = 0.0  # monotonic time until which it is left out (refused a connection)

    @classmethod
    def parse(cls, spec: str) -> Backend:
        """A backend from `URL` or `URL#group=NAME`."""
        url, _, fragment = spec.partition("#")
        group = fragment.removeprefix("group=") if fragment.startswith("group=") else ""
        return cls(url.rstrip("/"), group=group)


def usable(backends: Sequence[Backend], now: float, tried: Collection[str] = ()) -> list[Backend]:
    """The backends to choose from: not yet tried for this request (`tried`: URLs) and not
    marked down; the untried ones if all are down; empty once every one was tried."""
    untried = [b for b in backends if b.url not in tried]
    return [b for b in untried if b.down_until <= now] or untried


def same_group(backends: Sequence[Backend], group: str) -> Sequence[Backend]:
    """The backends of `group`; all of them when the group is empty or has none."""
    if not group:
        return backends
    matching = [b for b in backends if b.group == group]
    return matching or backends


class HotSet:
    """`size` of the backends, redrawn every `period_s` seconds from a seeded generator."""

    def __init__(self, size: int, period_s: float, seed: int = 0) -> None:
        if size < 1 or period_s <= 0:
            raise ValueError(f"a hot set needs size >= 1 and period_s > 0, not {size}, {period_s}")
        self.size = size
        self.period_s = period_s
        self.seed = seed
        self._start: float | None = None

    def window(self, now: float) -> int:
        """The period `now` falls in; the first call starts period 0."""
        if self._start is None:
            self._start = now
        return int(max(0.0, now - self._start) // self.period_s)

    def indices(self, count: int, window: int) -> list[int]:
        """The hot positions among `count` backends in `window` (all of them when fewer)."""
        if count <= self.size:
            return list(range(count))
        rng = random.Random(self.seed * 1_000_003 + window)
        return sorted(rng.sample(range(count), self.size))

    def members(self, backends: Sequence[Backend], now: float) -> list[Backend]:
        """The backends hot at time `now` (seconds on any monotonic clock)."""
        return [backends[i] for i in self.indices(len(backends), self.window(now))]


class Balancer(Protocol):
    """Chooses a backend for the next request."""

    def pick(self, backends: Sequence[Backend]) -> Backend:
        """The backend to use."""
        ...


class LeastOutstanding:
    """The backend with the least outstanding work; ties taken in turn."""

    def __init__(self) -> None:
        self._turn = 0

    def pick(self, backends: Sequence[Backend]) -> Backend:
        """The least-loaded backend (the next of the tied ones)."""
        least = min(b.load for b in backends)
        ties = [b for b in backends if b.load == least]
        b = ties[self._turn % len(ties)]
        self._turn += 1
        return b


class RoundRobin:
    """Each backend in turn."""

    def __init__(self) -> None:
        self._next = 0

    def pick(self, backends: Sequence[Backend]) -> Backend:
        """The next backend in order."""
        b = backends[self._next % len(backends)]
        self._next += 1
        return b


BALANCERS: dict[str, type[LeastOutstanding] | type[RoundRobin]] = {
    "least-outstanding": LeastOutstanding,
    "round-robin": RoundRobin,
}


def make_balancer(name: str) -> Balancer:
    """A fresh balancer for the balancing policy `name`."""
    return BALANCERS[name]()
