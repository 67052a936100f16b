"""The MRC-style KV transport (`--kv-transport mrc`): UDP datagrams sprayed over entropy values.

Prefill (`MrcServer`) listens on UDP at each KV address (the same port number as the TCP KV
server) and holds a pool of EV sockets per address: one UDP socket per entropy value, bound to
that EV's source port, since the EV *is* the source port (the controller's EV rules map its
bits to a path, `zcube_lab.core.fabric.evpaths`). Decode (`pull_kv_mrc`, here for its
importers, in `zcube_lab.serving.kvwire.mrcpull`) sends a GET on every leg, places the DATA
datagrams by offset, and acknowledges with SACK ranges and the EV echoed, each ACK on every leg. The
sender's rules (window, pacing, loss, retirement, probes) are `zcube_lab.serving.kvwire.mrcsender`'s
`SenderState`; this module only moves datagrams and keeps time: it makes a burst of datagrams,
then sends it back to back (the receiver, woken once, finds the rest waiting); paced out, it
sleeps until `PACE_BATCH` datagrams may go; of an ACK's copies (one a leg) it reads only the
first. The sockets are `zcube_lab.serving.kvwire.mrcsock`'s (every waiting datagram read per wake).

The pull's result says what the transport did (`MrcPullResult`): distinct EVs seen, EVs the
sender marked ASSUMED_BAD and how often it skipped one or a probe brought one back (from its
STATS answer to the final ACK), bytes retransmitted, and the corrupt and duplicate datagrams
the receiver discarded. Timers are modelled seconds, crossing to wall time through a `Clock`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from zcube_lab.core.clock import Clock
from zcube_lab.serving.config import Address
from zcube_lab.serving.kvwire import mrcwire as w
from zcube_lab.serving.kvwire.mrcpull import MrcPullResult, pull_kv_mrc
from zcube_lab.serving.kvwire.mrcsender import Send, SenderState
from zcube_lab.serving.kvwire.mrcsock import Endpoint, open_endpoint

__all__ = ["MrcPullResult", "MrcServer", "ServerCounters", "pull_kv_mrc", "start_mrc_server"]

log = logging.getLogger(__name__)

DEFAULT_EVS_PER_ADDRESS = 16
# A paced-out sender sleeps until this many datagrams may go (wakes cost more than datagrams;
# the burst is at most a few datagrams, well inside any queue).
PACE_BATCH = 8
IDLE_DROP_S = 1.0  # a connection whose receiver said nothing this long is dropped
FINISHED_KEEP_S = 10.0


def _clock_us() -> int:
    return int(time.monotonic() * 1e6)


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
    last_ack: bytes = b""  # the latest ACK's body: its copies on the other legs add nothing
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
    assumed bad and replaced. `clock`: the run's (its time dilation k, by which every timer:
    the sender's floors, idle drop, keeping finished answers, is longer; None: undilated)."""

    def __init__(
        self,
        lookup: Callable[[str], bytes | None],
        addrs: Sequence[Address],
        *,
        ev_ports: Sequence[int] = (),
        evs: int = DEFAULT_EVS_PER_ADDRESS,
        mtu: int = w.DEFAULT_MTU,
        drop: Callable[[int, int, Send], bool] | None = None,
        clock: Clock | None = None,
        spare_evs: int = 0,
    ) -> None:
        self.lookup = lookup
        self.clock = clock or Clock()
        self.addrs = tuple(addrs)
        self.ev_ports = tuple(ev_ports)
        self.evs = len(self.ev_ports) or evs
        if not 0 <= spare_evs < self.evs:
            raise ValueError(f"spare_evs must be 0..{self.evs - 1}, not {spare_evs}")
        self.spare_evs = spare_evs
        self.mss = w.payload_bytes(mtu)
        self.drop = drop  # tests: (connection, leg, send) -> lose it
        self.counters = ServerCounters()
        self._controls: list[Endpoint] = []
        self._ev_socks: list[list[tuple[int, Endpoint]]] = []
        self._conns: dict[int, _Conn] = {}
        self._finished: dict[int, tuple[float, bytes]] = {}
        self._reaper: asyncio.Task[None] | None = None

    async def start(self) -> MrcServer:
        for i, a in enumerate(self.addrs):
            self._controls.append(
                open_endpoint(lambda d, src, i=i: self._on_control(i, d, src), a.host, a.port)
            )
            socks = []
            for k in range(self.evs):
                port = self.ev_ports[k] if self.ev_ports else 0
                t = open_endpoint(lambda d, src: None, a.host, port)
                socks.append((t.port, t))
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

    def _on_control(self, address: int, data: memoryview, src: tuple[str, int]) -> None:
        try:
            kind, leg, cid, body = w.open_datagram(data)
            if kind == w.GET:
                self._on_get(address, leg, cid, w.decode_get(body), src)
            elif kind == w.ACK:
                c = self._conns.get(cid)
                if c is not None:
                    raw = bytes(body)
                    if raw == c.last_ack:  # the copy sent on another leg: heard, no news
                        c.last_heard = time.monotonic()
                        return
                    c.last_ack = raw
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
                clock=self.clock,
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
        socks: dict[int, dict[int, Endpoint]] = {}
        data, cid, drop = memoryview(c.data), c.conn_id, self.drop
        loop = asyncio.get_running_loop()
        try:
            while not st.done:
                now = time.monotonic()
                if now - c.last_heard > self.clock.wall(IDLE_DROP_S):
                    # The receiver is gone (or every path to it is): stop, rather than resend.
                    log.info("mrc connection %d: receiver silent, dropped", c.conn_id)
                    self._conns.pop(c.conn_id, None)
                    return
                st.on_timer(now)
                # The burst is made first and sent back to back: the receiver, woken by its
                # first datagram, then finds the rest waiting (one wake, not one a datagram).
                burst: list[tuple[Endpoint, bytes, tuple[str, int]]] = []
                sent = 0
                while (s := st.next_send(now)) is not None:
                    leg = c.legs[s.ev.leg]
                    if s.ev.leg not in socks:
                        socks[s.ev.leg] = dict(self._ev_socks[leg.address])
                    if drop is None or not drop(cid, s.ev.leg, s):
                        payload = data[s.offset : s.offset + s.length]
                        raw = w.seal_data(
                            cid, s.ev.leg, s.offset, s.seq, s.ev.port, _clock_us(), payload,
                            s.probe,
                        )  # fmt: skip
                        burst.append((socks[s.ev.leg][s.ev.port], raw, leg.client))
                    sent += 1
                    if sent >= 64:  # let acks in
                        break
                    now = time.monotonic()
                for sock, raw, dest in burst:
                    sock.sendto(raw, dest)
                if sent >= 64:
                    await asyncio.sleep(0)
                    continue
                c.wake.clear()
                delay = st.wake_at(time.monotonic(), PACE_BATCH) - time.monotonic()
                # The timer sets the same event an ack does: a paced sender wakes by it most
                # often, and a timeout that cancels the task costs an exception each time.
                timer = loop.call_later(max(0.0, delay), c.wake.set)
                await c.wake.wait()
                timer.cancel()
        except Exception:  # a bug, not the network: say so rather than die silently
            log.exception("mrc sender of connection %d failed", c.conn_id)


async def start_mrc_server(
    lookup: Callable[[str], bytes | None],
    addrs: Sequence[Address],
    *,
    ev_ports: Sequence[int] = (),
    evs: int = DEFAULT_EVS_PER_ADDRESS,
    mtu: int = w.DEFAULT_MTU,
    clock: Clock | None = None,
) -> MrcServer:
    """Start an `MrcServer` on `addrs` (UDP, the KV ports); `clock`: the run's."""
    server = MrcServer(lookup, addrs, ev_ports=ev_ports, evs=evs, mtu=mtu, clock=clock)
    return await server.start()
