"""The MRC-style KV transport's datagrams, pure: their layout, encoding and decoding.

No socket and no clock here (`zcube_lab.serving.kvwire.mrc` does the I/O and passes `now`), so every
rule below is unit-tested on its own. The endpoints' state of one pull is beside it:
`zcube_lab.serving.kvwire.mrcreceiver` (decode's side, and the byte ranges both sides keep) and
`zcube_lab.serving.kvwire.mrcsender` (prefill's side). Names: a datagram type's constant is its name
in capitals (`GET`, `DATA`, ...), its fields a frozen dataclass of that name in title case (`Get`,
`Data`, ...) and its codec `encode_<type>` / `decode_<type>`; `*_HEAD` / `*_BODY` are their
fixed-size `struct` layouts.

Datagrams (network byte order), each at most the path MTU. Every one starts with
`HEADER`: magic u16, type u8, leg u8, connection id u32, CRC-32 u32 of the whole datagram
computed with this field zero. A datagram whose magic, length or CRC is wrong is discarded
(and counted) by whoever receives it.
- GET (decode -> prefill, once per leg, repeated until data arrives on that leg):
  num_bytes u64, window bytes u32, pacing rate bytes/s u64, delay bound us u32 (the longest
  modelled time a datagram may wait in the paths' queues without being lost; 0: none known),
  legs u8, request id (u16 length).
  A *leg* is one (prefill KV address, decode address) pair: a plane of a multi-plane ROFT, a
  NIC port pair on ZCube.
- DATA (prefill -> decode): offset u64, seq u32, EV u16, send time us u64, payload. The EV is
  the UDP source port it was sent from (the fabric maps its bits to a path); the offset places
  the payload, so reordering costs nothing. A zero-length DATA with the PROBE flag is a probe of
  a retired EV.
- ACK (decode -> prefill, on every leg): cumulative offset u64, echoed seq u32, echoed EV u16,
  echoed send time u64, flags u8 (DONE: the pull has every byte; PARTIAL: the receiver holds
  more ranges than fit, and sent the lowest and the highest half, so the bytes between the two
  halves are unreported), range count u8, then up to `MAX_SACK_RANGES` SACK ranges (start u64,
  end u64) above the cumulative offset.
- STATS (prefill -> decode, answering a DONE ack): datagrams sent u32, bytes retransmitted u64,
  EVs used u16, SKIP transitions u32, PROBE_OK transitions u16, the sender's wall-clock time
  (us since the epoch; 0: never) of its first ASSUMED_BAD and of its last retransmission on a
  GOOD EV, u64 each, then the EVs marked ASSUMED_BAD as (leg u8, EV u16) pairs, one per
  transition.
- NOT_FOUND (prefill -> decode): the request id is not held, or num_bytes is wrong.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

MAGIC = 0x4D52  # "MR"
GET, DATA, ACK, STATS, NOT_FOUND = 1, 2, 3, 4, 5
FLAG_PROBE = 1
ACK_DONE, ACK_PARTIAL = 1, 2

HEADER = struct.Struct("!HBBII")  # magic, type, leg, conn, crc
GET_BODY = struct.Struct("!QIQIBH")  # num_bytes, window, rate, delay bound us, legs, id length
DATA_HEAD = struct.Struct("!QIHQ")  # offset, seq, ev, send time us
DATA_PREFIX = struct.Struct("!HBBIIQIHQ")  # HEADER then DATA_HEAD: a DATA datagram's bytes
ACK_HEAD = struct.Struct("!QIHQBB")  # cum, echo seq, echo ev, echo ts us, flags, ranges
RANGE = struct.Struct("!QQ")
# sent, rtx bytes, evs used, skips, restores, first bad us, last rtx us, bad count
STATS_HEAD = struct.Struct("!IQHIHQQH")
RETIRED_EV = struct.Struct("!BH")
MAX_SACK_RANGES = 32
IP_UDP_BYTES = 28  # IPv4 header 20 + UDP header 8
DEFAULT_MTU = 1500


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
    delay_bound_us: int = 0  # modelled microseconds; 0: none known


def encode_get(conn: int, leg: int, get: Get) -> bytes:
    rid = get.request_id.encode()
    bound = min(get.delay_bound_us, 2**32 - 1)
    body = GET_BODY.pack(get.num_bytes, get.window, get.rate, bound, get.legs, len(rid)) + rid
    return _seal(GET, leg, conn, body)


def decode_get(body: memoryview) -> Get:
    if len(body) < GET_BODY.size:
        raise WireError("GET cut short")
    num_bytes, window, rate, bound, legs, id_len = GET_BODY.unpack_from(body)
    rid = bytes(body[GET_BODY.size : GET_BODY.size + id_len])
    if len(rid) != id_len:
        raise WireError("GET id cut short")
    return Get(rid.decode(errors="replace"), num_bytes, window, rate, legs, bound)


@dataclass(frozen=True)
class Data:
    offset: int
    seq: int
    ev: int
    sent_us: int
    payload: memoryview | bytes
    probe: bool = False


def encode_data(conn: int, leg: int, d: Data) -> bytes:
    return seal_data(conn, leg, d.offset, d.seq, d.ev, d.sent_us, d.payload, d.probe)


def seal_data(
    conn: int, leg: int, offset: int, seq: int, ev: int, sent_us: int,
    payload: memoryview | bytes, probe: bool = False,
) -> bytes:  # fmt: skip
    """`encode_data` from the fields (the sender's path: no `Data` made per datagram)."""
    leg_byte = leg | 0x80 if probe else leg
    head = DATA_PREFIX.pack(MAGIC, DATA, leg_byte, conn, 0, offset, seq, ev, sent_us)
    crc = zlib.crc32(payload, zlib.crc32(head))
    return DATA_PREFIX.pack(MAGIC, DATA, leg_byte, conn, crc, offset, seq, ev, sent_us) + payload


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
    partial: bool = False

    def unreported(self) -> tuple[int, int] | None:
        """The bytes a PARTIAL ack does not report (between its two halves of ranges)."""
        if not self.partial or len(self.ranges) < 2:
            return None
        half = len(self.ranges) // 2
        return self.ranges[half - 1][1], self.ranges[half][0]


def encode_ack(conn: int, leg: int, a: Ack) -> bytes:
    ranges = a.ranges[:MAX_SACK_RANGES]
    flags = (ACK_DONE if a.done else 0) | (ACK_PARTIAL if a.partial else 0)
    body = ACK_HEAD.pack(a.cum, a.echo_seq, a.echo_ev, a.echo_us, flags, len(ranges))
    body += b"".join(RANGE.pack(s, e) for s, e in ranges)
    return _seal(ACK, leg, conn, body)


def decode_ack(body: memoryview) -> Ack:
    if len(body) < ACK_HEAD.size:
        raise WireError("ACK cut short")
    cum, seq, ev, us, flags, n = ACK_HEAD.unpack_from(body)
    if len(body) < ACK_HEAD.size + n * RANGE.size:
        raise WireError("ACK ranges cut short")
    ranges = tuple(RANGE.unpack_from(body, ACK_HEAD.size + i * RANGE.size) for i in range(n))
    return Ack(cum, seq, ev, us, ranges, bool(flags & ACK_DONE), bool(flags & ACK_PARTIAL))


@dataclass(frozen=True)
class Stats:
    sent: int
    retransmitted_bytes: int
    evs_used: int
    retired: tuple[tuple[int, int], ...]  # (leg, ev): every GOOD/SKIP -> ASSUMED_BAD
    skipped: int = 0  # GOOD -> SKIP
    restored: int = 0  # ASSUMED_BAD -> GOOD
    first_bad_us: int = 0  # wall clock, us since the epoch; 0: never
    last_retx_us: int = 0


def encode_stats(conn: int, s: Stats) -> bytes:
    retired = s.retired[:300]
    skipped, restored = min(s.skipped, 2**32 - 1), min(s.restored, 2**16 - 1)
    times = (s.first_bad_us, s.last_retx_us)
    body = STATS_HEAD.pack(
        s.sent, s.retransmitted_bytes, s.evs_used, skipped, restored, *times, len(retired)
    )
    body += b"".join(RETIRED_EV.pack(leg, ev) for leg, ev in retired)
    return _seal(STATS, 0, conn, body)


def decode_stats(body: memoryview) -> Stats:
    if len(body) < STATS_HEAD.size:
        raise WireError("STATS cut short")
    sent, rtx, used, skipped, restored, bad_us, rtx_us, n = STATS_HEAD.unpack_from(body)
    if len(body) < STATS_HEAD.size + n * RETIRED_EV.size:
        raise WireError("STATS cut short")
    retired = tuple(
        RETIRED_EV.unpack_from(body, STATS_HEAD.size + i * RETIRED_EV.size) for i in range(n)
    )
    return Stats(sent, rtx, used, retired, skipped, restored, bad_us, rtx_us)


def encode_not_found(conn: int, leg: int) -> bytes:
    return _seal(NOT_FOUND, leg, conn, b"")
