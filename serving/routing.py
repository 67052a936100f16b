"""Gateway routing policies: pick a backend given each one's outstanding work.

A policy is a small class with `pick(backends) -> Backend`, registered by name in `POLICIES`.
`least-outstanding` takes the backend with the least outstanding work (prompt tokens in flight
for prefill, requests in flight for decode), ties going to the earliest listed; `round-robin`
cycles regardless of load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass
class Backend:
    """One prefill or decode instance as the gateway sees it."""

    url: str
    load: int = 0
    in_flight: int = 0


class Policy(Protocol):
    """Chooses a backend for the next request."""

    def pick(self, backends: Sequence[Backend]) -> Backend:
        """The backend to use."""
        ...


class LeastOutstanding:
    """The backend with the least outstanding work; ties to the earliest listed."""

    def pick(self, backends: Sequence[Backend]) -> Backend:
        """The least-loaded backend."""
        return min(backends, key=lambda b: b.load)


class RoundRobin:
    """Each backend in turn."""

    def __init__(self) -> None:
        self._next = 0

    def pick(self, backends: Sequence[Backend]) -> Backend:
        """The next backend in order."""
        b = backends[self._next % len(backends)]
        self._next += 1
        return b


POLICIES: dict[str, type[LeastOutstanding] | type[RoundRobin]] = {
    "least-outstanding": LeastOutstanding,
    "round-robin": RoundRobin,
}


def make_policy(name: str) -> Policy:
    """A fresh policy object by registered name."""
    return POLICIES[name]()
