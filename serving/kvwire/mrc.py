"""The MRC-style KV transport (`--kv-transport mrc`): UDP datagrams sprayed over entropy values.

Prefill (`MrcServer`) listens on UDP at each KV address (the same port number as the TCP KV
server) and holds a pool of EV sockets per address: one UDP socket per entropy value, bound to
that EV's source port, since the EV *is* the source port (the controller's EV rules map its
bits to a path, `zcube_lab.core.fabric.evpaths`). Decode (`pull_kv_mrc`) opens one UDP socket
per leg (per prefill KV address, from the source address `source_map` gives), sends a GET on
every leg, places the DATA datagrams by offset, and acknowledges with SACK ranges and the EV
echoed, each ACK on every leg (so a dead path in one plane does not silence the others). The
sender's rules (window, pacing, loss, retirement, probes) are `serving.kvwire.mrcsender`'s
`SenderState`; this module only moves datagrams and keeps time.

The pull's result says what the transport did (`MrcPullResult`): distinct EVs seen, EVs the
sender marked ASSUMED_BAD and how often it skipped one or a probe brought one back (from its
STATS answer to the final ACK), bytes retransmitted, and the corrupt and duplicate datagrams
the receiver discarded. Timers are modelled seconds, crossing to wall time through a `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from serving.config import Address
from serving.kvwire import mrcwire as w
from serving.kvwire.mrcreceiver import ReceiverState
from serving.kvwire.mrcsender import Send, SenderState
from serving.kvwire.paths import pick_source
from serving.kvwire.pull import KVTransferError, PullResult
from zcube_lab.core.clock import Clock

log = logging.getLogger(__name__)

DEFAULT_EVS_PER_ADDRESS = 16
DEFAULT_WINDOW = 512 * 1024
GET_RESEND_S = 0.05
ACK_EVERY = 4  # in-order datagrams per ACK (out-of-order, duplicate and probe: at once)
ACK_FLUSH_S = 0.002
DONE_TRIES = 5
DONE_WAIT_S = 0.03
IDLE_DROP_S = 1.0  # a connection whose receiver said nothing this long is dropped
KEEPALIVE_S = 0.05  # the receiver acknowledges at least this often, data or not
FINISHED_KEEP_S = 10.0
SOCKET_BUFFER = 4 * 2**20


def _clock_us() -> int:
    return int(time.monotonic() * 1e6)


class _Proto(asyncio.DatagramProtocol):
    """Hands every datagram to a callback."""

    def __init__(self, on_datagram: Callable[[bytes, tuple[str, int]], None]) -> None:
        self.on_datagram = on_datagram
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.on_datagram(data, addr)

    def error_received(self, exc: Exception) -> None:  # ICMP unreachable and the like
        log.debug("mrc socket error: %s", exc)


async def _udp(
    on_datagram: Callable[[bytes, tuple[str, int]], None], host: str, port: int
) -> asyncio.DatagramTransport:
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(
        lambda: _Proto(on_datagram), local_addr=(host, port), family=socket.AF_INET
    )
    return transport


# -- prefill: the server --------------------------------------------------------------------
@dataclass
class _Leg:
    address: int  # index of the server address
    client: tuple[str, int]


@dataclass(eq=False)
class _Conn:
    conn_id: int
    data: bytes
    state: SenderState
    legs: dict[int, _Leg] = field(default_factory=dict)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    last_heard: float = 0.0
    task: asyncio.Task[None] | None = None


@dataclass
class ServerCounters:
    """What the server discarded or answered, across connections."""

    corrupt: int = 0
    not_found: int = 0
    connections: int = 0
    finished: int = 0


class MrcServer:
    """The prefill side: UDP at each KV address, `evs` EV sockets per address.

    `ev_ports`: the EV source ports of every address (the same list on each); an empty list
    binds `evs` ephemeral ports (loopback tests: no fabric rules to match). Of each address's
    EVs the last `spare_evs` are spares: out of the rotation until one of the same leg is
    assumed bad and replaced. `time_scale`: the run's time dilation k, by which every timer
    (the sender's floors, idle drop, keeping finished answers) is longer."""

    def __init__(
        self,
        lookup: Callable[[str], bytes | None],
        addrs: Sequence[Address],
        *,
        ev_ports: Sequence[int] = (),
        evs: int = DEFAULT_EVS_PER_ADDRESS,
        mtu: int = w.DEFAULT_MTU,
        drop: Callable[[int, int, Send], bool] | None = None,
        time_scale: float = 1.0,
        spare_evs: int = 0,
    ) -> None:
        self.lookup = lookup
        self.clock = Clock(time_scale)
        self.addrs = tuple(addrs)
        self.ev_ports = tuple(ev_ports)
        self.evs = len(self.ev_ports) or evs
        if not 0 <= spare_evs < self.evs:
            raise ValueError(f"spare_evs must be 0..{self.evs - 1}, not {spare_evs}")
        self.spare_evs = spare_evs
        self.mss = w.payload_bytes(mtu)
        self.drop = drop  # tests: (connection, leg, send) -> lose it
        self.counters = ServerCounters()
        self._controls: list[asyncio.DatagramTransport] = []
        self._ev_socks: list[list[tuple[int, asyncio.DatagramTransport]]] = []
        self._conns: dict[int, _Conn] = {}
        self._finished: dict[int, tuple[float, bytes]] = {}
        self._reaper: asyncio.Task[None] | None = None

    async def start(self) -> MrcServer:
        for i, a in enumerate(self.addrs):
            self._controls.append(
                await _udp(lambda d, src, i=i: self._on_control(i, d, src), a.host, a.port)
            )
            socks = []
            for k in range(self.evs):
                port = self.ev_ports[k] if self.ev_ports else 0
                t = await _udp(lambda d, src: None, a.host, port)
                socks.append((int(t.get_extra_info("sockname")[1]), t))
            self._ev_socks.append(socks)
        self._reaper = asyncio.create_task(self._reap())
        return self

    def close(self) -> None:
        for c in self._conns.values():
            if c.task is not None:
                c.task.cancel()
        if self._reaper is not None:
            self._reaper.cancel()
        for t in self._controls:
            t.close()
        for socks in self._ev_socks:
            for _, t in socks:
                t.close()

    def ports(self, address: int) -> list[int]:
        """The EV source ports bound at server address `address`."""
        return [p for p, _ in self._ev_socks[address]]

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for cid, c in list(self._conns.items()):
                if now - c.last_heard > self.clock.wall(IDLE_DROP_S):
                    self._end(cid)
            for cid, (at, _) in list(self._finished.items()):
                if now - at > self.clock.wall(FINISHED_KEEP_S):
                    del self._finished[cid]

    def _end(self, cid: int, stats: bytes | None = None) -> None:
        c = self._conns.pop(cid, None)
        if c is not None and c.task is not None:
            c.task.cancel()
        if stats is not None:
            self._finished[cid] = (time.monotonic(), stats)

    def _on_control(self, address: int, data: bytes, src: tuple[str, int]) -> None:
        try:
            kind, leg, cid, body = w.open_datagram(data)
            if kind == w.GET:
                self._on_get(address, leg, cid, w.decode_get(body), src)
            elif kind == w.ACK:
                self._on_ack(address, leg, cid, w.decode_ack(body), src)
        except w.WireError:
            self.counters.corrupt += 1

    def _on_get(self, address: int, leg: int, cid: int, get: w.Get, src: tuple[str, int]) -> None:
        if cid in self._finished:
            return
        c = self._conns.get(cid)
        if c is None:
            data = self.lookup(get.request_id)
            if data is None or len(data) != get.num_bytes:
                self.counters.not_found += 1
                self._controls[address].sendto(w.encode_not_found(cid, leg), src)
                return
            window = max(self.mss, get.window)
            state = SenderState(
                len(data),
                mss=self.mss,
                window=window,
                rate=get.rate,
                now=time.monotonic(),
                time_scale=self.clock.dilation,
                delay_bound=get.delay_bound_us / 1e6,
                active_per_leg=self.evs - self.spare_evs if self.spare_evs else 0,
            )
            c = _Conn(cid, data, state, last_heard=time.monotonic())
            self._conns[cid] = c
            self.counters.connections += 1
            c.task = asyncio.create_task(self._send_loop(c))
        c.last_heard = time.monotonic()
        if leg not in c.legs:
            c.legs[leg] = _Leg(address, src)
            c.state.add_leg(leg, self.ports(address))
            c.wake.set()

    def _on_ack(self, address: int, leg: int, cid: int, ack: w.Ack, src: tuple[str, int]) -> None:
        if cid in self._finished:
            if ack.done:
                self._controls[address].sendto(self._finished[cid][1], src)
            return
        c = self._conns.get(cid)
        if c is None:
            return
        now = time.monotonic()
        c.last_heard = now
        c.state.on_ack(ack, now)
        if ack.done or c.state.done:
            st = c.state
            # The sender's times on the wall clock: the failover bench compares them with a cut's.
            stats = w.encode_stats(cid, st.stats(time.time() - time.monotonic()))
            self.counters.finished += 1
            self._end(cid, stats)
            if ack.done:
                self._controls[address].sendto(stats, src)
            return
        c.wake.set()

    async def _send_loop(self, c: _Conn) -> None:
        st = c.state
        # leg -> EV port -> the socket bound to it; a leg joining later is added when used.
        socks: dict[int, dict[int, asyncio.DatagramTransport]] = {}
        try:
            while not st.done:
                now = time.monotonic()
                if now - c.last_heard > self.clock.wall(IDLE_DROP_S):
                    # The receiver is gone (or every path to it is): stop, rather than resend.
                    log.info("mrc connection %d: receiver silent, dropped", c.conn_id)
                    self._conns.pop(c.conn_id, None)
                    return
                st.on_timer(now)
                sent = 0
                while (s := st.next_send(now)) is not None:
                    leg = c.legs[s.ev.leg]
                    if s.ev.leg not in socks:
                        socks[s.ev.leg] = dict(self._ev_socks[leg.address])
                    payload = memoryview(c.data)[s.offset : s.offset + s.length]
                    d = w.Data(s.offset, s.seq, s.ev.port, _clock_us(), payload, s.probe)
                    if self.drop is None or not self.drop(c.conn_id, s.ev.leg, s):
                        socks[s.ev.leg][s.ev.port].sendto(
                            w.encode_data(c.conn_id, s.ev.leg, d), leg.client
                        )
                    sent += 1
                    if sent >= 64:  # let acks in
                        break
                    now = time.monotonic()
                if sent >= 64:
                    await asyncio.sleep(0)
                    continue
                c.wake.clear()
                delay = st.wake_at(time.monotonic()) - time.monotonic()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, delay)):
                        await c.wake.wait()
        except Exception:  # a bug, not the network: say so rather than die silently
            log.exception("mrc sender of connection %d failed", c.conn_id)


async def start_mrc_server(
    lookup: Callable[[str], bytes | None],
    addrs: Sequence[Address],
    *,
    ev_ports: Sequence[int] = (),
    evs: int = DEFAULT_EVS_PER_ADDRESS,
    mtu: int = w.DEFAULT_MTU,
    time_scale: float = 1.0,
) -> MrcServer:
    """Start an `MrcServer` on `addrs` (UDP, the KV ports); `time_scale`: the dilation k."""
    server = MrcServer(lookup, addrs, ev_ports=ev_ports, evs=evs, mtu=mtu, time_scale=time_scale)
    return await server.start()


# -- decode: the pull -----------------------------------------------------------------------
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
    legs: list[asyncio.DatagramTransport] = field(default_factory=list)
    heard: set[int] = field(default_factory=set)  # legs data arrived on
    seen: set[tuple[int, int]] = field(default_factory=set)
    by_leg: dict[int, int] = field(default_factory=dict)
    corrupt: int = 0
    unacked: int = 0
    acked_at: float = 0.0
    last: w.Data | None = None
    not_found: bool = False
    stats: w.Stats | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)


def _send_ack(c: _Client, addrs: Sequence[Address], d: w.Data | None) -> None:
    ack = c.recv.ack(d)
    for i, t in enumerate(c.legs):
        t.sendto(w.encode_ack(c.conn, i, ack), (addrs[i].host, addrs[i].port))
    c.unacked = 0
    c.acked_at = time.monotonic()


def _on_client_datagram(c: _Client, addrs: Sequence[Address], data: bytes) -> None:
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
    gap_before = c.recv.got.prefix
    fresh = c.recv.on_data(d)
    c.by_leg[leg] = c.by_leg.get(leg, 0) + c.recv.placed_bytes - before
    c.unacked += 1
    c.last = d
    in_order = fresh and c.recv.got.prefix > gap_before and len(c.recv.got.ranges()) == 1
    if d.probe or not in_order or c.unacked >= ACK_EVERY or c.recv.complete:
        _send_ack(c, addrs, d)
    if c.recv.complete:
        c.changed.set()


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
    time_scale: float = 1.0,
    delay_bound_s: float = 0.0,
) -> tuple[bytearray, MrcPullResult]:
    """Pull one request's KV over MRC-style datagrams on every address (one leg each); verify
    bytes and checksum. `rate_bytes_s` paces the sender per leg (0: window-limited only);
    `time_scale`, the dilation k, lengthens the receiver's timers (GET resend, ack flush,
    keepalive, the wait for the sender's statistics); `delay_bound_s` (modelled) goes to the
    sender in the GET (`SenderState`'s delay bound: a pause is not a loss)."""
    clock = Clock(time_scale)
    if not addrs:
        raise KVTransferError("no KV address to pull from")
    c = _Client(random.getrandbits(32), ReceiverState(num_bytes))
    bound_us = round(delay_bound_s * 1e6)
    get = w.Get(request_id, num_bytes, window, int(rate_bytes_s), len(addrs), bound_us)
    try:
        for a in addrs:
            local = pick_source(a.host, source_map) or "0.0.0.0"
            c.legs.append(await _udp(lambda d, _src: _on_client_datagram(c, addrs, d), local, 0))
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
                    wait = ACK_FLUSH_S if c.unacked else GET_RESEND_S
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
