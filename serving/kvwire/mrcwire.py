"""The MRC-style KV transport, pure: datagram encoding and the sender's and receiver's state.

No socket and no clock here (`serving.kvwire.mrc` does the I/O and passes `now`), so every rule
below is unit-tested on its own.

Datagrams (network byte order), each at most the path MTU. Every one starts with
`HEADER`: magic u16, type u8, leg u8, connection id u32, CRC-32 u32 of the whole datagram
computed with this field zero. A datagram whose magic, length or CRC is wrong is discarded
(and counted) by whoever receives it.
- GET (decode -> prefill, once per leg, repeated until data arrives on that leg):
  num_bytes u64, window bytes u32, pacing rate bytes/s u64, legs u8, request id (u16 length).
  A *leg* is one (prefill KV address, decode address) pair: a plane of a multi-plane ROFT, a
  NIC port pair on ZCube.
- DATA (prefill -> decode): offset u64, seq u32, EV u16, send time us u64, payload. The EV is
  the UDP source port it was sent from (the fabric maps its bits to a path); the offset places
  the payload, so reordering costs nothing. A zero-length DATA with the PROBE flag is a probe of
  a retired EV.
- ACK (decode -> prefill, on every leg): cumulative offset u64, echoed seq u32, echoed EV u16,
  echoed send time u64, flags u8 (DONE: the pull has every byte), range count u8, then up to
  `MAX_SACK_RANGES` SACK ranges (start u64, end u64) above the cumulative offset.
- STATS (prefill -> decode, answering a DONE ack): datagrams sent u32, bytes retransmitted u64,
  EVs used u16, then the retired EVs as (leg u8, EV u16) pairs.
- NOT_FOUND (prefill -> decode): the request id is not held, or num_bytes is wrong.

The sender (`SenderState`) keeps a window in bytes, paced at a rate (token bucket), puts every
datagram on the next live EV round-robin (over the legs and each leg's EVs), and learns from
every ACK which datagrams arrived. Loss: a datagram not acknowledged while one sent after it on
the same EV was, once `LOSS_RTTS` of its leg's smoothed RTTs have passed since it was sent
(or, with no later one acked, after the leg's retransmission timeout) is lost: its EV is
retired at once and its bytes are retransmitted on another EV (as are the EV's other datagrams
in flight). A retired EV is probed every `PROBE_INTERVAL_RTTS` RTTs; a probe's ack restores it.
Congestion: an ack whose RTT exceeds the EV's own minimum by more than `QUEUE_DELAY_S` marks
that EV slow for `SLOW_HOLD_RTTS`; new datagrams go to the EVs that are not slow while there
are any (the ECN-free stand-in for MRC's congestion-driven EV swap).
"""

from __future__ import annotations

import bisect
import itertools
import struct
import zlib
from collections import deque
from dataclasses import dataclass, field

MAGIC = 0x4D52  # "MR"
GET, DATA, ACK, STATS, NOT_FOUND = 1, 2, 3, 4, 5
FLAG_PROBE = 1
ACK_DONE = 1

HEADER = struct.Struct("!HBBII")  # magic, type, leg, conn, crc
GET_BODY = struct.Struct("!QIQBH")  # num_bytes, window, rate, legs, id length
DATA_HEAD = struct.Struct("!QIHQ")  # offset, seq, ev, send time us
ACK_HEAD = struct.Struct("!QIHQBB")  # cum, echo seq, echo ev, echo ts us, flags, ranges
RANGE = struct.Struct("!QQ")
STATS_HEAD = struct.Struct("!IQHH")  # sent, retransmitted bytes, evs used, retired count
RETIRED_EV = struct.Struct("!BH")
MAX_SACK_RANGES = 32
IP_UDP_BYTES = 28  # IPv4 header 20 + UDP header 8
DEFAULT_MTU = 1500

# Loss and congestion constants (in RTTs of the smoothed estimate, with floors in seconds so a
# loopback RTT of microseconds does not turn scheduler jitter into losses).
LOSS_RTTS = 3.0
MIN_LOSS_S = 0.01
RTO_RTTS = 6.0
MIN_RTO_S = 0.05
PROBE_INTERVAL_RTTS = 8.0
MIN_PROBE_S = 0.02
QUEUE_DELAY_S = 0.02
SLOW_HOLD_RTTS = 16.0
INITIAL_RTT_S = 0.01


class WireError(ValueError):
    """A datagram that is not ours, is cut short, or fails its checksum."""


def payload_bytes(mtu: int = DEFAULT_MTU) -> int:
    """KV bytes one DATA datagram carries so that its IP packet is at most `mtu` bytes."""
    room = mtu - IP_UDP_BYTES - HEADER.size - DATA_HEAD.size
    if room < 1:
        raise ValueError(f"mtu {mtu} leaves no room for a payload")
    return room


def _seal(kind: int, leg: int, conn: int, body: bytes) -> bytes:
    head = HEADER.pack(MAGIC, kind, leg, conn, 0)
    crc = zlib.crc32(body, zlib.crc32(head))
    return HEADER.pack(MAGIC, kind, leg, conn, crc) + body


def open_datagram(data: bytes) -> tuple[int, int, int, memoryview]:
    """(type, leg, connection id, body) of a datagram, or WireError."""
    if len(data) < HEADER.size:
        raise WireError("shorter than a header")
    magic, kind, leg, conn, crc = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise WireError("bad magic")
    view = memoryview(data)
    head = HEADER.pack(MAGIC, kind, leg, conn, 0)
    if zlib.crc32(view[HEADER.size :], zlib.crc32(head)) != crc:
        raise WireError("checksum mismatch")
    return kind, leg, conn, view[HEADER.size :]


@dataclass(frozen=True)
class Get:
    request_id: str
    num_bytes: int
    window: int
    rate: int  # bytes per second per leg; 0: unpaced
    legs: int


def encode_get(conn: int, leg: int, get: Get) -> bytes:
    rid = get.request_id.encode()
    body = GET_BODY.pack(get.num_bytes, get.window, get.rate, get.legs, len(rid)) + rid
    return _seal(GET, leg, conn, body)


def decode_get(body: memoryview) -> Get:
    if len(body) < GET_BODY.size:
        raise WireError("GET cut short")
    num_bytes, window, rate, legs, id_len = GET_BODY.unpack_from(body)
    rid = bytes(body[GET_BODY.size : GET_BODY.size + id_len])
    if len(rid) != id_len:
        raise WireError("GET id cut short")
    return Get(rid.decode(errors="replace"), num_bytes, window, rate, legs)


@dataclass(frozen=True)
class Data:
    offset: int
    seq: int
    ev: int
    sent_us: int
    payload: memoryview | bytes
    probe: bool = False


def encode_data(conn: int, leg: int, d: Data) -> bytes:
    body = DATA_HEAD.pack(d.offset, d.seq, d.ev, d.sent_us) + bytes(d.payload)
    head = HEADER.pack(MAGIC, DATA, leg | (0x80 if d.probe else 0), conn, 0)
    crc = zlib.crc32(body, zlib.crc32(head))
    return HEADER.pack(MAGIC, DATA, leg | (0x80 if d.probe else 0), conn, crc) + body


def decode_data(leg_byte: int, body: memoryview) -> tuple[int, Data]:
    """(leg, Data) of a DATA body; the probe flag rides in the leg byte's top bit."""
    if len(body) < DATA_HEAD.size:
        raise WireError("DATA cut short")
    offset, seq, ev, sent_us = DATA_HEAD.unpack_from(body)
    probe = bool(leg_byte & 0x80)
    return leg_byte & 0x7F, Data(offset, seq, ev, sent_us, body[DATA_HEAD.size :], probe)


@dataclass(frozen=True)
class Ack:
    cum: int
    echo_seq: int
    echo_ev: int
    echo_us: int
    ranges: tuple[tuple[int, int], ...] = ()
    done: bool = False


def encode_ack(conn: int, leg: int, a: Ack) -> bytes:
    ranges = a.ranges[:MAX_SACK_RANGES]
    body = ACK_HEAD.pack(
        a.cum, a.echo_seq, a.echo_ev, a.echo_us, ACK_DONE if a.done else 0, len(ranges)
    )
    body += b"".join(RANGE.pack(s, e) for s, e in ranges)
    return _seal(ACK, leg, conn, body)


def decode_ack(body: memoryview) -> Ack:
    if len(body) < ACK_HEAD.size:
        raise WireError("ACK cut short")
    cum, seq, ev, us, flags, n = ACK_HEAD.unpack_from(body)
    if len(body) < ACK_HEAD.size + n * RANGE.size:
        raise WireError("ACK ranges cut short")
    ranges = tuple(RANGE.unpack_from(body, ACK_HEAD.size + i * RANGE.size) for i in range(n))
    return Ack(cum, seq, ev, us, ranges, bool(flags & ACK_DONE))


@dataclass(frozen=True)
class Stats:
    sent: int
    retransmitted_bytes: int
    evs_used: int
    retired: tuple[tuple[int, int], ...]  # (leg, ev)


def encode_stats(conn: int, s: Stats) -> bytes:
    retired = s.retired[:300]
    body = STATS_HEAD.pack(s.sent, s.retransmitted_bytes, s.evs_used, len(retired))
    body += b"".join(RETIRED_EV.pack(leg, ev) for leg, ev in retired)
    return _seal(STATS, 0, conn, body)


def decode_stats(body: memoryview) -> Stats:
    if len(body) < STATS_HEAD.size:
        raise WireError("STATS cut short")
    sent, rtx, used, n = STATS_HEAD.unpack_from(body)
    if len(body) < STATS_HEAD.size + n * RETIRED_EV.size:
        raise WireError("STATS cut short")
    retired = tuple(
        RETIRED_EV.unpack_from(body, STATS_HEAD.size + i * RETIRED_EV.size) for i in range(n)
    )
    return Stats(sent, rtx, used, retired)


def encode_not_found(conn: int, leg: int) -> bytes:
    return _seal(NOT_FOUND, leg, conn, b"")


# -- byte ranges ----------------------------------------------------------------------------
class RangeSet:
    """Disjoint, sorted half-open byte ranges; adjacent ones merge."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def add(self, start: int, end: int) -> int:
        """Cover [start, end); returns how many bytes were not covered before."""
        if end <= start:
            return 0
        i = bisect.bisect_left(self._ends, start)  # first range ending at or after start
        j = bisect.bisect_right(self._starts, end)  # ranges starting at or before end
        covered = sum(
            max(0, min(e, end) - max(s, start))
            for s, e in zip(self._starts[i:j], self._ends[i:j], strict=True)
        )
        new = (end - start) - covered
        if i < j:
            start = min(start, self._starts[i])
            end = max(end, self._ends[j - 1])
        self._starts[i:j] = [start]
        self._ends[i:j] = [end]
        return new

    def covers(self, start: int, end: int) -> bool:
        """Whether every byte of [start, end) is covered."""
        if end <= start:
            return True
        i = bisect.bisect_right(self._starts, start) - 1
        return i >= 0 and self._ends[i] >= end

    def missing(self, start: int, end: int) -> list[tuple[int, int]]:
        """The parts of [start, end) not covered, in order."""
        out = []
        pos = start
        i = max(0, bisect.bisect_right(self._starts, start) - 1)
        while pos < end and i < len(self._starts):
            s, e = self._starts[i], self._ends[i]
            if e <= pos:
                i += 1
                continue
            if s > pos:
                out.append((pos, min(s, end)))
            pos = max(pos, e)
            i += 1
        if pos < end:
            out.append((pos, end))
        return out

    @property
    def prefix(self) -> int:
        """End of the range that starts at 0 (0 if none)."""
        return self._ends[0] if self._starts and self._starts[0] == 0 else 0

    @property
    def total(self) -> int:
        return sum(e - s for s, e in zip(self._starts, self._ends, strict=True))

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._ends, strict=True))


# -- the receiver ---------------------------------------------------------------------------
@dataclass
class ReceiverState:
    """Decode's side of one pull: places DATA payloads by offset and builds the SACKs."""

    num_bytes: int
    buf: bytearray = field(init=False)
    got: RangeSet = field(default_factory=RangeSet)
    datagrams: int = 0
    duplicates: int = 0
    out_of_range: int = 0
    placed_bytes: int = 0

    def __post_init__(self) -> None:
        self.buf = bytearray(self.num_bytes)

    def on_data(self, d: Data) -> bool:
        """Place a payload; False for a duplicate (every byte already held) or one that
        does not fit the buffer, both discarded and counted."""
        self.datagrams += 1
        end = d.offset + len(d.payload)
        if d.probe or not d.payload:
            return True
        if end > self.num_bytes:
            self.out_of_range += 1
            return False
        if self.got.covers(d.offset, end):
            self.duplicates += 1
            return False
        self.buf[d.offset : end] = d.payload
        self.placed_bytes += self.got.add(d.offset, end)
        return True

    @property
    def complete(self) -> bool:
        return self.got.prefix >= self.num_bytes

    def ack(self, d: Data | None) -> Ack:
        """The ACK for what is held now, echoing `d` (the datagram that prompted it)."""
        cum = self.got.prefix
        above = [(s, e) for s, e in self.got.ranges() if s > 0]
        if len(above) > MAX_SACK_RANGES:
            # The lowest ranges (the holes the sender must fill) and the highest (where new
            # data lands); the echoed datagram is acknowledged by its echo in any case.
            half = MAX_SACK_RANGES // 2
            above = above[:half] + above[-half:]
        ranges = tuple(above)
        if d is None:
            return Ack(cum, 0, 0, 0, ranges, self.complete)
        return Ack(cum, d.seq, d.ev, d.sent_us, ranges, self.complete)


# -- the sender -----------------------------------------------------------------------------
@dataclass
class EV:
    """One entropy value of a connection: a UDP source port on one leg, hence one path."""

    leg: int
    port: int
    retired_at: float | None = None
    probe_at: float = 0.0
    probe_seq: int | None = None
    min_rtt: float = float("inf")
    slow_until: float = 0.0
    sent: int = 0
    retirements: int = 0

    @property
    def live(self) -> bool:
        return self.retired_at is None

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
    bytes in flight at most. Times are seconds on any monotonic clock."""

    def __init__(
        self,
        num_bytes: int,
        *,
        mss: int,
        window: int,
        rate: float,
        now: float,
        time_scale: float = 1.0,
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
        # Time dilation k (docs/DOMAIN.md section 4): the timers' floors and the queue-delay
        # threshold are modelled times, so they are k times longer in wall time; the multiples
        # of an RTT follow the (dilated) RTTs by themselves.
        self.time_scale = time_scale
        self.srtt = INITIAL_RTT_S * time_scale
        # Per leg: the smoothed RTT. Per EV: the latest-sent datagram known to have arrived.
        # Loss is judged within one EV only: an EV is one path, and a path is FIFO, so a later
        # datagram of the same EV arriving first means this one was lost; EVs of one leg take
        # different paths, and one path's longer queue is reordering, not loss (judged per
        # leg, an incast on 2-plane ROFT retired 42 EVs with no packet dropped).
        self.leg_srtt: dict[int, float] = {}
        self.ev_acked_seq: dict[tuple[int, int], int] = {}
        self.tokens = float(mss)
        self.token_time = now
        self.turn = 0
        self.sent_datagrams = 0
        self.retransmitted_bytes = 0
        self.retired_log: list[tuple[int, int]] = []
        self.restored = 0
        self.slowed = 0
        self.used: set[tuple[int, int]] = set()
        self._evs: list[EV] = []

    # -- legs and EVs -------------------------------------------------------------------------
    def add_leg(self, leg: int, ports: list[int]) -> bool:
        """Add a leg and its EVs; False if it was known already."""
        if leg in self.all_evs or not ports:
            return False
        self.all_evs[leg] = [EV(leg, p) for p in ports]
        columns = itertools.zip_longest(*(self.all_evs[lg] for lg in sorted(self.all_evs)))
        self._evs = [ev for column in columns for ev in column if ev is not None]
        return True

    @property
    def legs(self) -> list[int]:
        return sorted(self.all_evs)

    def evs(self) -> list[EV]:
        """Every EV, leg by leg, interleaved so that round-robin alternates the legs."""
        return self._evs

    def _pick(self, now: float) -> EV | None:
        evs = self.evs()
        if not evs:
            return None
        live = [e for e in evs if e.live]
        fast = [e for e in live if e.slow_until <= now]
        pool = fast or live
        if not pool:
            # Every EV retired: keep going on the one retired longest ago (it is also probed).
            return min(evs, key=lambda e: e.retired_at or 0.0)
        self.turn += 1
        return pool[self.turn % len(pool)]

    def _retire(self, ev: EV, now: float) -> None:
        if not ev.live:
            return
        ev.retired_at = now
        ev.retirements += 1
        ev.probe_at = now + self.probe_interval
        ev.probe_seq = None
        self.retired_log.append(ev.key)
        # Its other datagrams in flight most likely went the same way: send them again now.
        for s in [s for s in self.inflight.values() if s.ev is ev]:
            self._lost(s)

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
        return max(MIN_PROBE_S * self.time_scale, PROBE_INTERVAL_RTTS * self.srtt)

    @property
    def loss_after(self) -> float:
        return max(MIN_LOSS_S * self.time_scale, LOSS_RTTS * self.srtt)

    @property
    def rto(self) -> float:
        return max(MIN_RTO_S * self.time_scale, RTO_RTTS * self.srtt)

    def leg_limits(self, leg: int) -> tuple[float, float]:
        """(loss after, retransmission timeout) of a datagram on `leg`, from its own RTT."""
        srtt = self.leg_srtt.get(leg, self.srtt)
        k = self.time_scale
        return max(MIN_LOSS_S * k, LOSS_RTTS * srtt), max(MIN_RTO_S * k, RTO_RTTS * srtt)

    @property
    def done(self) -> bool:
        return self.acked.prefix >= self.num_bytes

    # -- sending ------------------------------------------------------------------------------
    def _refill(self, now: float) -> None:
        if self.rate <= 0:
            return
        live_legs = max(1, len({e.leg for e in self.evs() if e.live}))
        rate = self.rate * live_legs
        self.tokens = min(
            self.tokens + (now - self.token_time) * rate, max(4 * self.mss, rate * 0.002)
        )
        self.token_time = now

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
        for ev in self.evs():
            if not ev.live and ev.probe_seq is None and now >= ev.probe_at:
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
        ev = self._pick(now)
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
        return Send(self.seq, start, length, ev)

    def wake_at(self, now: float) -> float:
        """When `next_send` or `on_timer` may have something to do, at the latest."""
        times = [now + self.loss_after]
        for ev in self.evs():
            if not ev.live and ev.probe_seq is None:
                times.append(ev.probe_at)
        if self.rate > 0 and self.tokens < self.mss:
            live_legs = max(1, len({e.leg for e in self.evs() if e.live}))
            times.append(now + (self.mss - self.tokens) / (self.rate * live_legs))
        return max(now, min(times))

    # -- acknowledgements and timers ------------------------------------------------------------
    def on_ack(self, ack: Ack, now: float) -> None:
        """Learn what arrived; restore a probed EV; update the RTT and the slow marks."""
        spans = [(0, ack.cum), *ack.ranges]
        echoed = self.inflight.get(ack.echo_seq)
        if echoed is not None and echoed.ev.port == ack.echo_ev and echoed.length:
            # The echo proves that datagram arrived, whatever the ranges could not say.
            spans.append((echoed.offset, echoed.offset + echoed.length))
        for s, e in spans:
            e = min(e, self.num_bytes)
            if not self.acked.covers(s, e):
                self.acked.add(s, e)
        if echoed is not None and echoed.ev.port == ack.echo_ev:
            rtt = max(0.0, now - echoed.at)
            ev = echoed.ev
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
            leg_srtt = self.leg_srtt.get(ev.leg, rtt)
            self.leg_srtt[ev.leg] = 0.875 * leg_srtt + 0.125 * rtt
            ev.min_rtt = min(ev.min_rtt, rtt)
            if ev.probe_seq == ack.echo_seq:
                ev.retired_at = None
                ev.probe_seq = None
                self.restored += 1
            elif rtt - ev.min_rtt > QUEUE_DELAY_S * self.time_scale and ev.slow_until <= now:
                ev.slow_until = now + SLOW_HOLD_RTTS * self.srtt
                self.slowed += 1
        if echoed is not None and not echoed.length:
            self._forget(echoed)
        for start, end in spans:
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
        """Declare lost what SACKs left behind for `loss_after` (or the RTO): retire its EV at
        once and queue its bytes again; a probe unanswered for a probe interval renews the
        retirement."""
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
            overtaken = s.seq < self.ev_acked_seq.get(s.ev.key, 0)
            if (overtaken and age > loss_after) or age > rto:
                if s.ev.live:
                    self._retire(s.ev, now)
                else:
                    self._lost(s)
