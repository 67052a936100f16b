"""The MRC-style KV transport, decode's side: `pull_kv_mrc` and what it returns (`MrcPullResult`).

One UDP socket per leg (per prefill KV address, from the source address `source_map` gives);
a GET on every leg until data arrives on it; DATA placed by offset (`ReceiverState`); ACKs
with SACK ranges and the EV echoed, each on every leg (so a dead path in one plane does not
silence the others). ACKs are batched: one per `ACK_EVERY` datagrams, sent once the socket's
waiting datagrams are read, or after `ACK_FLUSH_S`; a probe is answered at once, and a
datagram that a PARTIAL ack would leave unreported gets an ACK echoing it. Prefill's side is
`zcube_lab.serving.kvwire.mrc`; the sockets are `zcube_lab.serving.kvwire.mrcsock`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from zcube_lab.core.clock import Clock
from zcube_lab.serving.config import Address
from zcube_lab.serving.kvwire import mrcwire as w
from zcube_lab.serving.kvwire.mrcreceiver import ReceiverState
from zcube_lab.serving.kvwire.mrcsock import Endpoint, open_endpoint
from zcube_lab.serving.kvwire.paths import pick_source
from zcube_lab.serving.kvwire.pull import KVTransferError, PullResult

DEFAULT_WINDOW = 512 * 1024
GET_RESEND_S = 0.05
# Datagrams per ACK, sent once the socket's waiting datagrams are read (a duplicate or the last
# byte: at that batch's end too; a probe: at once). Reordering alone does not hasten one: loss
# is judged no sooner than MIN_LOSS_S, and an ACK at once for every hole cost more than the data.
ACK_EVERY = 8
ACK_FLUSH_S = 0.002
DONE_TRIES = 5
DONE_WAIT_S = 0.03
KEEPALIVE_S = 0.05  # the receiver acknowledges at least this often, data or not


@dataclass(frozen=True)
class MrcPullResult(PullResult):
    """A `PullResult` (lanes = legs, paths_used = distinct (leg, EV) seen, source_ports = the
    EVs seen) and what the transport did: the EVs the sender marked ASSUMED_BAD ((leg, EV)
    pairs, once per transition; None when its STATS answer never came), its SKIP and PROBE_OK
    transitions, bytes it retransmitted, datagrams it sent, and what the receiver discarded."""

    retired_evs: tuple[tuple[int, int], ...] | None = None
    skipped: int | None = None
    restored: int | None = None
    first_bad_wall: float | None = None  # time.time() of the first ASSUMED_BAD, of the last
    last_retx_wall: float | None = None  # retransmission on a GOOD EV (sender's clock)
    retransmitted_bytes: int | None = None
    datagrams_sent: int | None = None
    datagrams_received: int = 0
    duplicates: int = 0
    corrupt: int = 0


@dataclass
class _Client:
    conn: int
    recv: ReceiverState
    legs: list[Endpoint] = field(default_factory=list)
    heard: set[int] = field(default_factory=set)  # legs data arrived on
    seen: set[tuple[int, int]] = field(default_factory=set)
    by_leg: dict[int, int] = field(default_factory=dict)
    corrupt: int = 0
    unacked: int = 0
    ack_due: bool = False  # send an ACK at the end of this batch of datagrams
    ack_soon: bool = False  # that ACK is scheduled (after the other legs' batches)
    flush_s: float = ACK_FLUSH_S  # wall seconds an unacknowledged datagram waits at most
    flush: asyncio.TimerHandle | None = None
    acked_at: float = 0.0
    last: w.Data | None = None
    pending: list[w.Data] = field(default_factory=list)  # arrived since the last ACK
    not_found: bool = False
    stats: w.Stats | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)


def _send_ack(c: _Client, addrs: Sequence[Address], d: w.Data | None) -> None:
    """An ACK echoing `d`, on every leg; and one echoing each datagram since the last ACK that
    this one, PARTIAL, leaves unreported (only its echo can tell the sender it arrived)."""
    ack = c.recv.ack(d)
    for i, t in enumerate(c.legs):
        t.sendto(w.encode_ack(c.conn, i, ack), (addrs[i].host, addrs[i].port))
    hidden = ack.unreported()
    if hidden is not None:
        for p in c.pending:
            if p is not d and hidden[0] <= p.offset < hidden[1]:
                echo = c.recv.ack(p)
                for i, t in enumerate(c.legs):
                    t.sendto(w.encode_ack(c.conn, i, echo), (addrs[i].host, addrs[i].port))
    c.pending.clear()
    c.unacked = 0
    if c.flush is not None:  # nothing left to flush: no wake for it
        c.flush.cancel()
        c.flush = None
    c.ack_due = False
    c.acked_at = time.monotonic()


def _on_client_batch(c: _Client, addrs: Sequence[Address]) -> None:
    """A leg's waiting datagrams are read: the ACK they call for, once, after the other legs'
    sockets ready in this turn of the loop are read too (their datagrams fill the gaps the
    legs' interleaving leaves, so the ACK says more and needs fewer echoes)."""
    if c.ack_due:
        if not c.ack_soon:
            c.ack_soon = True
            asyncio.get_running_loop().call_soon(_ack_soon, c, addrs)
    elif c.unacked and c.flush is None:
        c.flush = asyncio.get_running_loop().call_later(c.flush_s, _flush, c, addrs)
    if c.recv.complete:
        c.changed.set()


def _ack_soon(c: _Client, addrs: Sequence[Address]) -> None:
    c.ack_soon = False
    if c.ack_due:
        _send_ack(c, addrs, c.last)


def _flush(c: _Client, addrs: Sequence[Address]) -> None:
    c.flush = None
    if c.unacked:
        _send_ack(c, addrs, c.last)


def _on_client_datagram(c: _Client, addrs: Sequence[Address], data: memoryview) -> None:
    try:
        kind, leg_byte, cid, body = w.open_datagram(data)
        if cid != c.conn:
            return
        if kind == w.DATA:
            leg, d = w.decode_data(leg_byte, body)
        elif kind == w.STATS:
            c.stats = w.decode_stats(body)
            c.changed.set()
            return
        elif kind == w.NOT_FOUND:
            c.not_found = True
            c.changed.set()
            return
        else:
            return
    except w.WireError:
        c.corrupt += 1
        return
    c.heard.add(leg)
    c.seen.add((leg, d.ev))
    before = c.recv.placed_bytes
    fresh = c.recv.on_data(d)
    c.by_leg[leg] = c.by_leg.get(leg, 0) + c.recv.placed_bytes - before
    c.unacked += 1
    # Its payload is a view of the socket's buffer: only its fields are used later.
    c.last = d
    c.pending.append(d)
    if d.probe:
        _send_ack(c, addrs, d)  # the probe's answer is its echo
    elif not fresh or c.unacked >= ACK_EVERY or c.recv.complete:
        c.ack_due = True


async def pull_kv_mrc(
    request_id: str,
    addrs: Sequence[Address],
    num_bytes: int,
    expected_checksum: int,
    *,
    timeout_s: float,
    source_map: Sequence[tuple[str, str]] = (),
    window: int = DEFAULT_WINDOW,
    rate_bytes_s: float = 0.0,
    clock: Clock | None = None,
    delay_bound_s: float = 0.0,
) -> tuple[bytearray, MrcPullResult]:
    """Pull one request's KV over MRC-style datagrams on every address (one leg each); verify
    bytes and checksum. `rate_bytes_s` paces the sender per leg (0: window-limited only);
    `clock`, the run's (None: undilated), lengthens the receiver's timers (GET resend, ack flush,
    keepalive, the wait for the sender's statistics); `delay_bound_s` (modelled) goes to the
    sender in the GET (`SenderState`'s delay bound: a pause is not a loss)."""
    clock = clock or Clock()
    if not addrs:
        raise KVTransferError("no KV address to pull from")
    c = _Client(random.getrandbits(32), ReceiverState(num_bytes), flush_s=clock.wall(ACK_FLUSH_S))
    bound_us = round(delay_bound_s * 1e6)
    get = w.Get(request_id, num_bytes, window, int(rate_bytes_s), len(addrs), bound_us)
    try:
        for a in addrs:
            local = pick_source(a.host, source_map) or "0.0.0.0"
            c.legs.append(
                open_endpoint(
                    lambda d, _src: _on_client_datagram(c, addrs, d), local, 0,
                    on_batch=lambda: _on_client_batch(c, addrs),
                )
            )  # fmt: skip
        async with asyncio.timeout(timeout_s):
            next_get = 0.0
            while not c.recv.complete:
                now = time.monotonic()
                if now >= next_get:
                    for i, t in enumerate(c.legs):
                        if i not in c.heard:
                            t.sendto(w.encode_get(c.conn, i, get), (addrs[i].host, addrs[i].port))
                    next_get = now + clock.wall(GET_RESEND_S)
                if c.not_found:
                    raise KVTransferError(
                        f"prefill at {addrs[0]} holds no KV of {num_bytes} bytes for {request_id}"
                    )
                if c.unacked:
                    _send_ack(c, addrs, c.last)
                elif c.heard and now - c.acked_at >= clock.wall(KEEPALIVE_S):
                    _send_ack(c, addrs, None)  # echoes nothing: no stale RTT sample
                c.changed.clear()
                with contextlib.suppress(TimeoutError):
                    wait = GET_RESEND_S  # an unacknowledged datagram has its flush timer
                    async with asyncio.timeout(clock.wall(wait)):
                        await c.changed.wait()
            for _ in range(DONE_TRIES):
                _send_ack(c, addrs, c.last)
                c.changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(clock.wall(DONE_WAIT_S)):
                        await c.changed.wait()
                if c.stats is not None:
                    break
    except TimeoutError:
        hint = "" if c.heard else "; no datagram came back: does prefill serve --kv-transport mrc?"
        exc = KVTransferError(
            f"KV pull of {num_bytes} bytes over mrc timed out after {timeout_s}s "
            f"({c.recv.got.total} bytes received){hint}"
        )
        exc.received, exc.lanes, exc.paths_used = c.recv.got.total, len(addrs), len(c.seen)
        raise exc from None
    except OSError as e:
        raise KVTransferError(f"KV pull over mrc failed: {e}") from None
    finally:
        if c.flush is not None:
            c.flush.cancel()
        for t in c.legs:
            t.close()
    buf = c.recv.buf
    crc = zlib.crc32(buf)
    if crc != expected_checksum:
        exc = KVTransferError(
            f"KV checksum {crc:#010x} != expected {expected_checksum:#010x}", checksum_ok=False
        )
        exc.received, exc.lanes = num_bytes, len(addrs)
        raise exc
    st = c.stats
    by_addr = {str(addrs[leg]): n for leg, n in sorted(c.by_leg.items())}
    return buf, MrcPullResult(
        num_bytes,
        by_addr,
        len(addrs),
        crc,
        retired_lanes=len(set(st.retired)) if st else 0,
        paths_used=len(c.seen),
        source_ports=tuple(sorted({ev for _, ev in c.seen})),
        retired_evs=st.retired if st else None,
        skipped=st.skipped if st else None,
        restored=st.restored if st else None,
        first_bad_wall=st.first_bad_us / 1e6 if st and st.first_bad_us else None,
        last_retx_wall=st.last_retx_us / 1e6 if st and st.last_retx_us else None,
        retransmitted_bytes=st.retransmitted_bytes if st else None,
        datagrams_sent=st.sent if st else None,
        datagrams_received=c.recv.datagrams,
        duplicates=c.recv.duplicates,
        corrupt=c.corrupt,
    )
