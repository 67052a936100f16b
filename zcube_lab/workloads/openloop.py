"""The open-loop driver: sends each planned request at its planned time, whatever is in flight.

Closed-loop users (send, wait for the answer, send again) let a slow server slow the load down,
which hides exactly the queueing a congested fabric causes. Here one dispatcher greenlet walks
the plan, sleeps until each request's absolute deadline `t0 + t` and spawns a greenlet that
sends it; completions never gate arrivals. Deadlines are absolute, so a late wake-up does not
shift later requests (no drift), and the lag of every send is recorded.

The driver knows nothing of Locust or Prometheus: it calls `send(req)` to do a request and
`on_done(record)` with a `RequestRecord` for each finished, refused or cancelled request.
The `max_in_flight` limit protects the machine, not the model: a request refused by it is
reported with outcome `overload` (and counts as a failure), never delayed.

Time dilation (docs/DOMAIN.md §4): with the run's `Clock` (dilation k) the plan's times are
modelled seconds, each request leaves at `t0 + clock.wall(t)` on the host's clock, and every
record is in modelled seconds (the send time through `clock.modelled`; `send` returns results in
modelled seconds already: `zcube_lab.workloads.client`); `wall_time` stays the host's clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from zcube_lab.core.clock import Clock
from zcube_lab.workloads.client import RequestResult
from zcube_lab.workloads.requests import PlannedRequest


@dataclass(frozen=True)
class RequestRecord:
    """A request's plan, its actual send time (both from the driver's t0) and its result."""

    req: PlannedRequest
    sent: float
    result: RequestResult
    wall_time: float  # Unix time of the send, to line records up with Prometheus samples

    @property
    def lag(self) -> float:
        """Actual minus planned send time, seconds."""
        return self.sent - self.req.t

    def to_json(self) -> dict[str, Any]:
        """The JSONL row written for the report (times in seconds)."""
        r = self.result
        return {
            "index": self.req.index,
            "planned_s": round(self.req.t, 6),
            "sent_s": round(self.sent, 6),
            "lag_s": round(self.lag, 6),
            "wall_time": round(self.wall_time, 6),
            "outcome": r.outcome,
            "status": r.status,
            "ttft_s": _r(r.ttft),
            "tpot_s": _r(r.tpot),
            "e2e_s": _r(r.e2e),
            "itl_s": [round(g, 6) for g in r.itl],
            "prompt_tokens": self.req.prompt_tokens,
            "usage_prompt_tokens": r.prompt_tokens,
            "planned_output_tokens": self.req.max_tokens,
            "output_tokens": r.output_tokens,
            "session": self.req.session,
            "step": self.req.step,
            "error": r.error,
        }


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


class OpenLoopDriver:
    """Replays a plan open-loop on gevent; `run()` blocks until every request has finished."""

    def __init__(
        self,
        plan: Sequence[PlannedRequest],
        send: Callable[[PlannedRequest], RequestResult],
        on_done: Callable[[RequestRecord], None],
        on_send: Callable[[PlannedRequest, float], None] | None = None,
        max_in_flight: int = 1024,
        now: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], float] = time.time,
        clock: Clock | None = None,
    ) -> None:
        from gevent.pool import Group

        self.plan = list(plan)
        self.send = send
        self.on_done = on_done
        self.on_send = on_send
        self.max_in_flight = max_in_flight
        self.now = now
        self.wall_clock = wall_clock
        self.clock = clock or Clock()
        self.group = Group()
        self.t0: float | None = None
        # Requests sent and not finished: index -> (request, sent time, wall time).
        self.pending: dict[int, tuple[PlannedRequest, float, float]] = {}
        self.stopped = False
        self.dispatched = 0

    def _since_t0(self) -> float:
        """Modelled seconds since the driver started."""
        assert self.t0 is not None
        return self.clock.modelled(self.now() - self.t0)

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet finished."""
        return len(self.pending)

    def run(self) -> None:
        """Send the whole plan at its planned times, then wait for the last answers."""
        import gevent

        self.t0 = self.now()
        for req in self.plan:
            if self.stopped:
                return
            delay = self.t0 + self.clock.wall(req.t) - self.now()
            if delay > 0:
                gevent.sleep(delay)
            if self.stopped:
                return
            self.dispatched += 1
            if len(self.pending) >= self.max_in_flight:
                now = self._since_t0()
                refused = RequestResult("overload", 0, 0.0, error="driver in-flight limit")
                self.on_done(RequestRecord(req, now, refused, self.wall_clock()))
                continue
            # Registered before the greenlet runs, so `in_flight` and `cancel` see it at once.
            self.pending[req.index] = (req, self._since_t0(), self.wall_clock())
            self.group.spawn(self._one, req)
        self.group.join()

    def _one(self, req: PlannedRequest) -> None:
        # The send time is taken when the greenlet runs: that is when the request leaves.
        sent = self._since_t0()
        wall = self.wall_clock()
        self.pending[req.index] = (req, sent, wall)
        if self.on_send is not None:
            self.on_send(req, sent - req.t)
        result = self.send(req)
        if self.pending.pop(req.index, None) is not None:
            self.on_done(RequestRecord(req, sent, result, wall))

    def cancel(self) -> int:
        """Stop dispatching, abandon in-flight requests (reported `cancelled`); return how many."""
        self.stopped = True
        self.group.kill(block=True, timeout=5.0)
        now = self._since_t0() if self.t0 is not None else 0.0
        left = list(self.pending.values())
        self.pending.clear()
        for req, sent, wall in left:
            e2e = now - sent
            res = RequestResult("cancelled", 0, e2e, error="run ended before the answer")
            self.on_done(RequestRecord(req, sent, res, wall))
        return len(left)
