"""The MRC-style KV transport, pure: prefill's side of one pull (`SenderState`).

No socket and no clock here (`zcube_lab.serving.kvwire.mrc` does the I/O and passes `now`); the
datagrams are `zcube_lab.serving.kvwire.mrcwire`'s, the byte ranges
`zcube_lab.serving.kvwire.mrcreceiver`'s. Names: an `EV` is one entropy value (a UDP source port on
one leg, hence one path), a `Sent` one datagram in flight, a `Send` what the sender wants sent next;
the timer constants are `<WHAT>_RTTS` (multiples of the smoothed RTT) with a floor `MIN_<WHAT>_S` in
seconds.

The sender (`SenderState`) keeps a window in bytes, paced at a rate (token bucket), puts every
datagram on the next GOOD EV of the rotation (over the legs and each leg's active EVs), and
learns from every ACK which datagrams arrived. The EVs' states are the spec's
(`zcube_lab.serving.kvwire.evstate`: GOOD, SKIP, ASSUMED_BAD, DENIED, the `ev_min_active` floor,
spares of the same leg replacing a bad EV); this module says when their events happen.

Loss, told from a pause. A path is FIFO, so a datagram not acknowledged while one sent after
it on the same EV was is lost once `LOSS_RTTS` of its leg's smoothed RTTs have passed (unless
the ack that said so left its offset unreported: `MAX_SACK_RANGES` cut the ranges). With no
later datagram of its EV acknowledged, a datagram is lost only past the timeout: the leg's
retransmission timeout, and at least the smoothed RTT plus `delay_bound`, the longest a
datagram may wait in the path's queues without being dropped (the path's queue limits, and
under the lossless model the full paused queues: a pause delays, it does not lose). A loss
is a TIMEOUT event of its EV (ASSUMED_BAD unless the floor holds it GOOD; its datagrams in
flight are sent again on other EVs). An ASSUMED_BAD EV is probed every `PROBE_INTERVAL_RTTS`
RTTs; a probe's ack brings it back (PROBE_OK).

Congestion: the lab's switch queues cannot mark ECN (docs/FAILURES.md) and cannot trim, so the
signal is the queue delay in the echoed timestamps: an ack whose RTT exceeds its EV's own
minimum by more than `QUEUE_DELAY_S` is a CONGESTION event (GOOD -> SKIP for one rotation).

Times: `now` is wall seconds on any monotonic clock; the constants are modelled seconds (or
multiples of measured, hence already dilated, RTTs) and cross to wall time through the run's
`Clock`.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from dataclasses import dataclass, field

from zcube_lab.core.clock import Clock
from zcube_lab.serving.kvwire.evstate import USABLE, EvSet, EvState
from zcube_lab.serving.kvwire.mrcreceiver import RangeSet
from zcube_lab.serving.kvwire.mrcwire import Ack, Stats

# Loss and congestion constants (in RTTs of the smoothed estimate, with floors in seconds so a
# loopback RTT of microseconds does not turn scheduler jitter into losses).
LOSS_RTTS = 3.0
MIN_LOSS_S = 0.01
RTO_RTTS = 6.0
MIN_RTO_S = 0.05
PROBE_INTERVAL_RTTS = 8.0
MIN_PROBE_S = 0.02
QUEUE_DELAY_S = 0.02
INITIAL_RTT_S = 0.01
# `ev_min_active` as a share of a connection's active EVs (the spec's examples use a quarter).
MIN_ACTIVE_SHARE = 0.25


# -- the sender -----------------------------------------------------------------------------
@dataclass(eq=False)
class EV:
    """One entropy value of a connection: a UDP source port on one leg, hence one path."""

    leg: int
    port: int
    states: EvSet = field(repr=False)
    retired_at: float | None = None  # when it last became ASSUMED_BAD
    probe_at: float = 0.0
    probe_seq: int | None = None
    min_rtt: float = float("inf")
    sent: int = 0
    retirements: int = 0

    @property
    def state(self) -> EvState:
        return self.states.state(self.key)

    @property
    def live(self) -> bool:
        """GOOD or SKIP: usable."""
        return self.state in USABLE

    @property
    def key(self) -> tuple[int, int]:
        return (self.leg, self.port)


@dataclass
class Sent:
    seq: int
    offset: int
    length: int
    ev: EV
    at: float


@dataclass(frozen=True)
class Send:
    """What the sender wants sent next: a datagram of `length` bytes at `offset` on `ev`."""

    seq: int
    offset: int
    length: int
    ev: EV
    probe: bool = False


class SenderState:
    """Prefill's side of one pull: window, pacing, EV choice, loss, retirement and probes.

    A leg and its EVs (UDP source ports) join when the receiver's GET for it arrives
    (`add_leg`). `rate` is bytes per second per leg with a live EV (0: unpaced); `window` the
    bytes in flight at most. Times are seconds on any monotonic clock. `clock`: the run's
    (its dilation k; None: undilated); `delay_bound`: the longest modelled time a datagram
    may spend in its path's queues without being lost (0: no bound beyond the timeout's floor);
    `active_per_leg`: EVs of a leg in the rotation at once, the rest spares (0: all)."""

    def __init__(
        self,
        num_bytes: int,
        *,
        mss: int,
        window: int,
        rate: float,
        now: float,
        clock: Clock | None = None,
        delay_bound: float = 0.0,
        active_per_leg: int = 0,
    ) -> None:
        if mss < 1 or window < mss:
            raise ValueError(f"need mss >= 1 and window >= mss, not {mss}, {window}")
        self.num_bytes = num_bytes
        self.mss = mss
        self.window = window
        self.rate = rate
        self.all_evs: dict[int, list[EV]] = {}
        self.acked = RangeSet()
        self.next_offset = 0
        self.retx: deque[tuple[int, int]] = deque()
        self.inflight: dict[int, Sent] = {}  # by seq, in send order
        self._offsets: list[tuple[int, int]] = []  # (offset, seq) of the data in flight, sorted
        self.inflight_bytes = 0
        self.seq = 0
        # Time dilation k (docs/DOMAIN.md section 4): the timers' floors, the queue-delay
        # threshold and the delay bound are modelled times, k times longer in wall time; the
        # multiples of an RTT follow the (dilated) RTTs by themselves.
        self.clock = clock or Clock()
        self.delay_bound_wall = self.clock.wall(delay_bound)
        self.srtt = self.clock.wall(INITIAL_RTT_S)
        self.states = EvSet(min_active=1, active_per_leg=active_per_leg)
        # The byte span the latest ack left unreported (its ranges cut to MAX_SACK_RANGES).
        self.unreported: tuple[int, int] | None = None
        # Per leg: the smoothed RTT. Per EV: the latest-sent datagram known to have arrived.
        # Loss is judged within one EV only: an EV is one path, and a path is FIFO, so a later
        # datagram of the same EV arriving first means this one was lost; EVs of one leg take
        # different paths, and one path's longer queue is reordering, not loss (judged per
        # leg, an incast on 2-plane ROFT retired 42 EVs with no packet dropped).
        self.leg_srtt: dict[int, float] = {}
        self.ev_acked_seq: dict[tuple[int, int], int] = {}
        self.tokens = float(mss)
        self.token_time = now
        self.sent_datagrams = 0
        self.retransmitted_bytes = 0
        self.retired_log: list[tuple[int, int]] = []  # every GOOD/SKIP -> ASSUMED_BAD
        self.restored = 0
        self.slowed = 0  # CONGESTION events that skipped an EV
        # Failover, as it happened: the first EV marked ASSUMED_BAD, the last retransmission
        # sent on a GOOD EV (times as `now`; None: never).
        self.first_bad_at: float | None = None
        self.last_retx_at: float | None = None
        self.used: set[tuple[int, int]] = set()
        self._evs: list[EV] = []
        self._by_key: dict[tuple[int, int], EV] = {}
        # Derived from the EVs' states, recomputed when `states.version` moves (`_ev_summary`).
        self._summary_version = -1
        self._any_bad = False
        self._live_legs = 1
        # No datagram younger than this can be judged lost nor a probe given up (`on_timer`).
        self._timer_floor = min(self.clock.wall(MIN_LOSS_S), self.clock.wall(MIN_PROBE_S))

    # -- legs and EVs -------------------------------------------------------------------------
    def add_leg(self, leg: int, ports: list[int]) -> bool:
        """Add a leg and its EVs; False if it was known already."""
        if leg in self.all_evs or not ports:
            return False
        self.all_evs[leg] = [EV(leg, p, self.states) for p in ports]
        self._by_key.update((ev.key, ev) for ev in self.all_evs[leg])
        self.states.add_leg(leg, list(ports))
        self.states.min_active = max(1, int(MIN_ACTIVE_SHARE * len(self.states.rotation())))
        columns = itertools.zip_longest(*(self.all_evs[lg] for lg in sorted(self.all_evs)))
        self._evs = [ev for column in columns for ev in column if ev is not None]
        return True

    @property
    def legs(self) -> list[int]:
        return sorted(self.all_evs)

    def evs(self) -> list[EV]:
        """Every EV (spares too), leg by leg, interleaved so that the legs alternate."""
        return self._evs

    def _ev_summary(self) -> tuple[bool, int]:
        """(any EV ASSUMED_BAD, legs with a live EV (at least 1)), as the states are now."""
        if self._summary_version != self.states.version:
            self._summary_version = self.states.version
            self._any_bad = any(s is EvState.ASSUMED_BAD for s in self.states.states.values())
            self._live_legs = max(1, len({e.leg for e in self._evs if e.live}))
        return self._any_bad, self._live_legs

    def _pick(self) -> EV | None:
        key = self.states.pick()
        if key is not None:
            return self._by_key[key]
        active = [self._by_key[k] for k in self.states.rotation()]
        bad = [e for e in active if e.state is EvState.ASSUMED_BAD]
        if not bad:
            return None  # nothing active at all (every EV denied)
        # Every active EV assumed bad (the floor counts usable ones only, and a probe may
        # not have been answered yet): keep going on the one marked longest ago.
        return min(bad, key=lambda e: e.retired_at or 0.0)

    def _timeout(self, ev: EV, now: float) -> bool:
        """A datagram of `ev` judged lost: its TIMEOUT event. True if it became ASSUMED_BAD."""
        if self.states.timeout(ev.key) is False:
            return False
        ev.retired_at = now
        ev.retirements += 1
        if self.first_bad_at is None:
            self.first_bad_at = now
        ev.probe_at = now + self.probe_interval
        ev.probe_seq = None
        self.retired_log.append(ev.key)
        # Its other datagrams in flight most likely went the same way: send them again now.
        for s in [s for s in self.inflight.values() if s.ev is ev]:
            self._lost(s)
        return True

    def stats(self, clock_offset: float = 0.0) -> Stats:
        """What the sender did, for its STATS answer; `clock_offset` is added to its times
        (to put them on another clock)."""
        times = [
            0 if t is None else round((t + clock_offset) * 1e6)
            for t in (self.first_bad_at, self.last_retx_at)
        ]
        figures = (self.sent_datagrams, self.retransmitted_bytes, len(self.used))
        return Stats(*figures, tuple(self.retired_log), self.slowed, self.restored, *times)

    def deny(self, leg: int, port: int) -> bool:
        """The controller forbids an EV (DENIED: never sent on, never probed)."""
        return self.states.deny((leg, port))

    def allow(self, leg: int, port: int) -> bool:
        """The controller allows a denied EV again (GOOD)."""
        return self.states.allow((leg, port))

    def _forget(self, s: Sent) -> None:
        """Take `s` out of flight."""
        if self.inflight.pop(s.seq, None) is not None and s.length:
            self.inflight_bytes -= s.length
            i = bisect.bisect_left(self._offsets, (s.offset, s.seq))
            if i < len(self._offsets) and self._offsets[i] == (s.offset, s.seq):
                del self._offsets[i]

    def _lost(self, s: Sent) -> None:
        if s.seq in self.inflight and s.length:
            self.retx.append((s.offset, s.offset + s.length))
        self._forget(s)

    @property
    def probe_interval(self) -> float:
        return max(self.clock.wall(MIN_PROBE_S), PROBE_INTERVAL_RTTS * self.srtt)

    @property
    def loss_after(self) -> float:
        return max(self.clock.wall(MIN_LOSS_S), LOSS_RTTS * self.srtt)

    @property
    def rto(self) -> float:
        return max(self.clock.wall(MIN_RTO_S), RTO_RTTS * self.srtt)

    def leg_limits(self, leg: int) -> tuple[float, float]:
        """(loss after, timeout) of a datagram on `leg`, wall seconds: the first when a later
        datagram of its EV arrived, the second when none did (the retransmission timeout, and
        at least the RTT plus the delay bound: a paused or full queue is not a loss)."""
        srtt = self.leg_srtt.get(leg, self.srtt)
        loss_after = max(self.clock.wall(MIN_LOSS_S), LOSS_RTTS * srtt)
        rto = max(self.clock.wall(MIN_RTO_S), RTO_RTTS * srtt, srtt + self.delay_bound_wall)
        return loss_after, rto

    @property
    def done(self) -> bool:
        return self.acked.prefix >= self.num_bytes

    # -- sending ------------------------------------------------------------------------------
    def _refill(self, now: float) -> None:
        if self.rate <= 0:
            return
        rate = self.rate * self._ev_summary()[1]
        self.tokens = min(self.tokens + (now - self.token_time) * rate, self._bucket(rate))
        self.token_time = now

    def _bucket(self, rate: float) -> float:
        """The most tokens (bytes) that build up while idle: a small burst."""
        return max(4 * self.mss, rate * 0.002)

    def _next_range(self) -> tuple[int, int, bool] | None:
        """(start, end, is a retransmission) of the next datagram's bytes."""
        while self.retx:
            start, end = self.retx.popleft()
            holes = self.acked.missing(start, end)
            if not holes:
                continue
            first_start, first_end = holes[0]
            first_end = min(first_end, first_start + self.mss)
            rest = [(first_end, end)] if first_end < end else []
            self.retx.extendleft(reversed(rest))
            return first_start, first_end, True
        if self.next_offset < self.num_bytes:
            start = self.next_offset
            end = min(self.num_bytes, start + self.mss)
            self.next_offset = end
            return start, end, False
        return None

    def next_send(self, now: float) -> Send | None:
        """The next datagram to send now, or None (window full, paced out, nothing to send
        or no leg yet). A due probe of a retired EV goes first."""
        for ev in self.evs() if self._ev_summary()[0] else ():
            if ev.state is EvState.ASSUMED_BAD and ev.probe_seq is None and now >= ev.probe_at:
                self.seq += 1
                ev.probe_seq = self.seq
                ev.probe_at = now + self.probe_interval
                self.inflight[self.seq] = Sent(self.seq, 0, 0, ev, now)
                self.sent_datagrams += 1
                return Send(self.seq, 0, 0, ev, probe=True)
        if self.done or not self.legs:
            return None
        self._refill(now)
        if self.inflight_bytes + self.mss > self.window:
            return None
        if self.rate > 0 and self.tokens < self.mss:
            return None
        ev = self._pick()
        if ev is None:
            return None
        rng = self._next_range()
        if rng is None:
            return None
        start, end, retransmit = rng
        length = end - start
        self.seq += 1
        self.inflight[self.seq] = Sent(self.seq, start, length, ev, now)
        bisect.insort(self._offsets, (start, self.seq))
        self.inflight_bytes += length
        if self.rate > 0:
            self.tokens -= length
        self.sent_datagrams += 1
        ev.sent += 1
        self.used.add(ev.key)
        if retransmit:
            self.retransmitted_bytes += length
            if ev.state is EvState.GOOD:
                self.last_retx_at = now
        return Send(self.seq, start, length, ev)

    def wake_at(self, now: float, batch: int = 1) -> float:
        """When `next_send` or `on_timer` may have something to do, at the latest. Paced out,
        when `batch` datagrams may go (at most what the bucket holds): a paced sender's I/O
        then wakes once per `batch` datagrams, not once per datagram."""
        times = [now + self.loss_after]
        any_bad, live_legs = self._ev_summary()
        for ev in self.evs() if any_bad else ():
            if ev.state is EvState.ASSUMED_BAD and ev.probe_seq is None:
                times.append(ev.probe_at)
        if self.rate > 0 and self.tokens < self.mss:
            rate = self.rate * live_legs
            need = min(batch * self.mss, self._bucket(rate))
            times.append(now + (need - self.tokens) / rate)
        return max(now, min(times))

    # -- acknowledgements and timers ------------------------------------------------------------
    def on_ack(self, ack: Ack, now: float) -> None:
        """Learn what arrived; a probe's answer (PROBE_OK); the RTT; queue delay (CONGESTION)."""
        spans = [(0, ack.cum), *ack.ranges]
        self.unreported = ack.unreported()
        echoed = self.inflight.get(ack.echo_seq)
        if echoed is not None and echoed.ev.port == ack.echo_ev and echoed.length:
            # The echo proves that datagram arrived, whatever the ranges could not say.
            spans.append((echoed.offset, echoed.offset + echoed.length))
        grown = []
        for s, e in spans:
            e = min(e, self.num_bytes)
            if not self.acked.covers(s, e):
                self.acked.add(s, e)
                grown.append(s)
        if echoed is not None and echoed.ev.port == ack.echo_ev:
            rtt = max(0.0, now - echoed.at)
            ev = echoed.ev
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
            leg_srtt = self.leg_srtt.get(ev.leg, rtt)
            self.leg_srtt[ev.leg] = 0.875 * leg_srtt + 0.125 * rtt
            ev.min_rtt = min(ev.min_rtt, rtt)
            if ev.probe_seq == ack.echo_seq:
                ev.probe_seq = None
                if self.states.probe_ok(ev.key):
                    self.restored += 1
            elif rtt - ev.min_rtt > self.clock.wall(QUEUE_DELAY_S) and self.states.congestion(
                ev.key
            ):
                self.slowed += 1
        if echoed is not None and not echoed.length:
            self._forget(echoed)
        # Only where the acknowledged bytes grew can a datagram in flight have become covered,
        # and all of it lies in the merged range that grew: look there (most of an ack's ranges
        # were known already, and looking through them again was most of an ack's cost).
        regions = {r for s in grown if (r := self.acked.span(s)) is not None}
        for start, end in sorted(regions):
            i = bisect.bisect_left(self._offsets, (start, -1))
            j = bisect.bisect_left(self._offsets, (end, -1))
            for _off, seq in self._offsets[i:j]:
                sent = self.inflight[seq]
                if self.acked.covers(sent.offset, sent.offset + sent.length):
                    key = sent.ev.key
                    self.ev_acked_seq[key] = max(self.ev_acked_seq.get(key, 0), seq)
                    self._forget(sent)
        self.on_timer(now)

    def on_timer(self, now: float) -> None:
        """Declare lost what SACKs left behind for `loss_after` (or the timeout): its EV's
        TIMEOUT event, its bytes queued again; a probe unanswered for a probe interval is
        sent again later."""
        oldest = next(iter(self.inflight.values()), None)
        if oldest is None or now - oldest.at <= self._timer_floor:
            return  # every datagram in flight is younger than any limit (the loop's break)
        probe_interval = self.probe_interval
        limits = {leg: self.leg_limits(leg) for leg in self.all_evs}
        oldest_probe = min([probe_interval, *(lo for lo, _ in limits.values())])
        for s in list(self.inflight.values()):
            if s.seq not in self.inflight:
                continue  # already requeued by a retirement earlier in this loop
            age = now - s.at
            if age <= oldest_probe:
                break  # in send order: everything after is younger still
            if not s.length:
                if age > probe_interval:
                    self._forget(s)
                    if s.ev.probe_seq == s.seq:
                        s.ev.probe_seq = None
                        s.ev.probe_at = now
                continue
            loss_after, rto = limits[s.ev.leg]
            overtaken = s.seq < self.ev_acked_seq.get(s.ev.key, 0) and not self._unreported(s)
            lost = (overtaken and age > loss_after) or age > rto
            if lost and not self._timeout(s.ev, now):
                self._lost(s)

    def _unreported(self, s: Sent) -> bool:
        """Whether the latest ack left `s`'s bytes out of its ranges (it may have arrived)."""
        span = self.unreported
        return span is not None and span[0] <= s.offset < span[1]
