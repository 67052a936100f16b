"""The replay agent, one per host: an RDMA-like sender and receiver of paced datagrams whose
timers run on the lab's clock (issue 45 item 2).

Why not TCP: at a fine time scale the dilation k is 50-500, and kernel TCP's timers do not
dilate (delayed ACK 40 ms, minimum RTO 200 ms, SYN retry 1 s of wall time), so TCP at that k is
not TCP. A RoCE sender in a lossless fabric sends at line rate with congestion control off (as
DeepEP runs) and is held back only by its NIC and by PFC pauses. Here that is a blocking UDP
socket with a small send buffer on each lane: its datagrams wait in the host port's shaped
queue (the NIC's line rate, paused by the lossless agent as the switch ports are), and the
socket blocks while its bytes sit there. Nothing is retransmitted: a replay runs lossless, and a
transfer still short of bytes at the deadline is reported incomplete with what arrived.

A transfer's lanes are `[source address, destination address]` pairs (on ZCube one per NIC
port, each on its own link-disjoint path, as the KV pulls and the EP exchanges of a live run use
them); each lane has its own thread and socket. A datagram carries a 12-byte header (transfer
id, lane, sequence) and fills the MTU. The bytes go over the lanes one of two ways (striping):
- even (the default; RDMA multi-rail, as DeepEP and a NIC's static split send): each lane
  carries an equal share, whatever its path's load;
- shared (the live KV pull's rule, `zcube_lab.serving.kvwire.pull`): the transfer is cut into
  chunks of `chunk` bytes dealt from one queue; a lane keeps up to `window` chunks unacknowledged
  (a second one only while the queue holds a chunk for every lane) and takes the next when the
  receiver acknowledges one, so a lane on a loaded path carries fewer. The sequence field then
  holds the chunk's index, and the receiver answers each whole chunk with one header-only
  datagram to the lane's socket.

    python -m zcube_lab.emulator.replay.agent PLAN.json OUT.jsonl

PLAN.json: `{"host", "dilation", "mtu", "port", "listen": [addresses], "deadline_s" (modelled),
"out": [{"id", "start_s", "bytes", "after", "gap_s", "lanes": [[src, dst], ...], "tos" (the
class's IP TOS byte, optional), and for shared striping "chunk", "window"}], "expect": {"<id>":
bytes}, "chunks": {"<id>": chunk bytes} (shared striping)}` with lab bytes. The agent binds its
receivers, prints "ready", reads one line `go T0` (the wall-clock origin on the shared monotonic
clock, the same in every namespace), runs, and writes one JSON line per transfer it sent
(`{"id", "sent_s", "sent_bytes"}`: when it started, modelled seconds from T0, and the payload
bytes its lanes handed to the kernel: what the fabric was given, so that sent minus received is
what was lost on the way) and per transfer it received (`{"id", "arrived_s", "first_s",
"bytes"}`), then prints "done".
"""

from __future__ import annotations

import functools
import json
import select
import socket
import struct
import sys
import threading
import time
from pathlib import Path
from typing import Any

from zcube_lab.core.clock import Clock
from zcube_lab.core.replay.chains import HostChains
from zcube_lab.core.replay.recording import Transfer

HEADER = struct.Struct("!IHH")  # transfer id, lane, sequence (wraps: only counted) or chunk
ACK_WAIT_WALL_S = 0.02  # a shared lane's wait for an acknowledgement before it looks at `stop`
IP_UDP_BYTES = 28
SNDBUF_BYTES = 16_384  # a few frames per lane: the shaped queue, not the socket, holds the rest
RCVBUF_BYTES = 8 << 20
POLL_WALL_S = 0.0005


def udp_errors() -> dict[str, int]:
    """This namespace's UDP errors so far (/proc/net/snmp): datagrams dropped because a socket's
    receive buffer was full (RcvbufErrors) or for any reason (InErrors), and sends the host's own
    queue refused (SndbufErrors: UDP drops those silently)."""
    try:
        lines = [ln.split() for ln in Path("/proc/net/snmp").read_text().splitlines()]
    except OSError:
        return {}
    udp = [ln[1:] for ln in lines if ln and ln[0] == "Udp:"]
    if len(udp) < 2:
        return {}
    wanted = ("InErrors", "RcvbufErrors", "SndbufErrors")
    return {k: int(v) for k, v in zip(udp[0], udp[1], strict=False) if k in wanted}


class ChunkQueue:
    """A transfer's chunks, `(index, bytes)`, dealt in order to whichever lane asks (threads)."""

    def __init__(self, total: int, chunk: int) -> None:
        self.total, self.chunk = total, max(1, chunk)
        self.count = max(1, -(-total // self.chunk))
        self.next = 0
        self.lock = threading.Lock()

    def left(self) -> int:
        """Chunks not yet taken."""
        with self.lock:
            return self.count - self.next

    def take(self) -> tuple[int, int] | None:
        """The next chunk, or None when all are taken."""
        with self.lock:
            if self.next >= self.count:
                return None
            i = self.next
            self.next += 1
        return i, min(self.chunk, self.total - i * self.chunk)


class Agent:
    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.payload = int(plan["mtu"]) - IP_UDP_BYTES - HEADER.size
        self.port = int(plan["port"])
        self.expect = {int(k): float(v) for k, v in plan.get("expect", {}).items()}
        self.outbound = {
            int(o["id"]): Transfer(
                id=int(o["id"]),
                cls="other",
                start_s=float(o["start_s"]),
                src=plan["host"],
                dst="?",
                bytes=float(o["bytes"]),
                after=tuple(int(a) for a in o.get("after", ())),
                gap_s=float(o.get("gap_s", 0.0)),
            )
            for o in plan.get("out", [])
        }
        self.lanes = {int(o["id"]): [tuple(x) for x in o["lanes"]] for o in plan.get("out", [])}
        self.tos = {int(o["id"]): int(o.get("tos", 0)) for o in plan.get("out", [])}
        # shared striping: id -> (chunk bytes, window) of a transfer sent; id -> chunk bytes of
        # one received, and the bytes each of its chunks has so far
        self.chunked = {
            int(o["id"]): (int(o["chunk"]), int(o.get("window", 2)))
            for o in plan.get("out", [])
            if o.get("chunk")
        }
        self.ack_chunks = {int(k): int(v) for k, v in plan.get("chunks", {}).items()}
        self.chunk_got: dict[tuple[int, int], int] = {}
        self.chains = HostChains(self.outbound.values())
        self.received: dict[int, float] = {}
        self.first: dict[int, float] = {}
        self.arrived: dict[int, float] = {}
        self.sent: dict[int, float] = {}
        self.sent_bytes: dict[int, int] = {}  # payload bytes the kernel took, per transfer
        self.sent_lock = threading.Lock()
        self.t0 = 0.0
        self.cond = threading.Condition()
        self.socks = []
        for addr in plan.get("listen", []):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
            s.bind((addr, self.port))
            s.setblocking(False)
            self.socks.append(s)
        self.stop = threading.Event()
        self.senders: list[threading.Thread] = []

    @functools.cached_property
    def clock(self) -> Clock:
        """The lab's clock at the plan's dilation."""
        return Clock(float(self.plan["dilation"]))

    def now(self) -> float:
        """Modelled seconds since T0."""
        return self.clock.modelled(time.monotonic() - self.t0)

    # -- receiving ---------------------------------------------------------------------
    def receive(self) -> None:
        buf = bytearray(65536)
        while not self.stop.is_set():
            ready, _, _ = select.select(self.socks, [], [], 0.05)
            for s in ready:
                while True:
                    try:
                        n, sender = s.recvfrom_into(buf)
                    except BlockingIOError:
                        break
                    if n < HEADER.size:
                        continue
                    tid, lane, seq = HEADER.unpack_from(buf)
                    self._count(tid, n - HEADER.size)
                    if tid in self.ack_chunks:
                        self._chunk_part(s, sender, tid, lane, seq, n - HEADER.size)

    def _chunk_part(
        self, sock: socket.socket, sender: tuple[str, int], tid: int, lane: int, chunk: int,
        nbytes: int,
    ) -> None:  # fmt: skip
        """Count a shared-striping datagram toward its chunk; acknowledge a whole chunk to the
        lane that sent it (one header-only datagram, retried while the socket is full)."""
        size = self.ack_chunks[tid]
        want = min(size, round(self.expect.get(tid, 0.0)) - chunk * size)
        key = (tid, chunk)
        got = self.chunk_got.get(key, 0) + nbytes
        self.chunk_got[key] = got
        if got - nbytes < want <= got:
            ack = HEADER.pack(tid, lane, chunk)
            for _ in range(100):
                try:
                    sock.sendto(ack, sender)
                    return
                except BlockingIOError:
                    time.sleep(POLL_WALL_S)
                except OSError:  # no route back now: the lane waits, as for a lost datagram
                    return

    def _count(self, tid: int, nbytes: int) -> None:
        now = self.now()
        if tid not in self.first:
            self.first[tid] = now
        got = self.received.get(tid, 0.0) + nbytes
        self.received[tid] = got
        want = self.expect.get(tid)
        if want is not None and tid not in self.arrived and got >= want:
            with self.cond:
                self.arrived[tid] = now
                self.chains.arrival(tid, now)
                self.cond.notify_all()

    # -- sending -----------------------------------------------------------------------
    def send(self, tid: int) -> None:
        total = round(self.outbound[tid].bytes)
        lanes = self.lanes[tid]
        n = len(lanes)
        if tid in self.chunked:
            chunk, window = self.chunked[tid]
            queue = ChunkQueue(total, chunk)
            threads = [
                threading.Thread(
                    target=self._shared_lane,
                    args=(tid, i, src, dst, queue, window, n),
                    daemon=True,
                )
                for i, (src, dst) in enumerate(lanes)
            ]
        else:
            share = [total // n + (1 if i < total % n else 0) for i in range(n)]
            threads = [
                threading.Thread(target=self._lane, args=(tid, i, src, dst, share[i]), daemon=True)
                for i, (src, dst) in enumerate(lanes)
            ]
        for t in threads:
            t.start()
        self.senders.extend(threads)

    def _lane(self, tid: int, lane: int, src: str, dst: str, nbytes: int) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF_BYTES)
        if self.tos.get(tid):  # the class's DSCP mark, as the live lab's connections carry
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.tos[tid])
        if src:
            s.bind((src, 0))
        seq = 0
        body = bytes(self.payload)
        given = 0
        try:
            while nbytes > 0 and not self.stop.is_set():
                n = min(self.payload, nbytes)
                pkt = HEADER.pack(tid, lane, seq & 0xFFFF) + body[:n]
                try:
                    s.sendto(pkt, (dst, self.port))
                except OSError:  # ENOBUFS: the host queue is full; wait a frame and retry
                    time.sleep(0.0002)
                    continue
                nbytes -= n
                given += n
                seq += 1
        finally:
            s.close()
            with self.sent_lock:
                self.sent_bytes[tid] = self.sent_bytes.get(tid, 0) + given

    def _shared_lane(
        self, tid: int, lane: int, src: str, dst: str, queue: ChunkQueue, window: int, lanes: int
    ) -> None:
        """One lane of shared striping: take chunks from `queue` while fewer than `window` are
        unacknowledged (a second only while the queue holds one for every lane), send each
        whole, and wait for the receiver's acknowledgements."""
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF_BYTES)
        if self.tos.get(tid):  # the class's DSCP mark, as the live lab's connections carry
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.tos[tid])
        if src:
            s.bind((src, 0))
        s.settimeout(ACK_WAIT_WALL_S)
        body = bytes(self.payload)
        given = 0
        waiting: set[int] = set()
        try:
            while not self.stop.is_set():
                if not waiting or (len(waiting) < window and queue.left() >= lanes):
                    taken = queue.take()
                    if taken is not None:
                        index, nbytes = taken
                        given += self._send_chunk(s, tid, index, dst, nbytes, body)
                        waiting.add(index)
                        continue
                if not waiting:
                    break
                try:
                    data = s.recv(64)
                except (TimeoutError, BlockingIOError):
                    continue
                if len(data) >= HEADER.size:
                    got_tid, _lane, index = HEADER.unpack_from(data)
                    if got_tid == tid:
                        waiting.discard(index)
        finally:
            s.close()
            with self.sent_lock:
                self.sent_bytes[tid] = self.sent_bytes.get(tid, 0) + given

    def _send_chunk(
        self, s: socket.socket, tid: int, index: int, dst: str, nbytes: int, body: bytes
    ) -> int:
        """Send one chunk's datagrams (blocking on the host queue); the payload bytes given."""
        given = 0
        while nbytes > 0 and not self.stop.is_set():
            n = min(self.payload, nbytes)
            pkt = HEADER.pack(tid, 0, index & 0xFFFF) + body[:n]
            try:
                s.sendto(pkt, (dst, self.port))
            except TimeoutError:  # the socket's timeout also bounds a blocked send: try again
                continue
            except OSError:  # ENOBUFS: the host queue is full; wait a frame and retry
                time.sleep(0.0002)
                continue
            nbytes -= n
            given += n
        return given

    def run(self, t0: float, out: Path) -> None:
        self.t0 = t0
        errors_before = udp_errors()
        rx = threading.Thread(target=self.receive, daemon=True)
        rx.start()
        deadline = float(self.plan.get("deadline_s", 60.0))
        while True:
            with self.cond:
                for t in self.chains.due(self.now()):
                    self.sent[t.id] = self.now()
                    self.send(t.id)
                # sent means every lane has put its last datagram out, not only started: a
                # host that only sends would otherwise stop its lanes mid-transfer
                done_out = not self.chains.pending and not any(th.is_alive() for th in self.senders)
                done_in = len(self.arrived) == len(self.expect)
                if (done_out and done_in) or self.now() > deadline:
                    break
                nxt = self.chains.next_time()
                wait = POLL_WALL_S * 20
                if nxt is not None:
                    wait = max(0.0, min(wait, self.clock.wall(nxt - self.now())))
                self.cond.wait(wait)
            wall_left = t0 + self.clock.wall(deadline) - time.monotonic()
            if wall_left < 0:
                break
        self.stop.set()  # the deadline passed: lanes still sending stop now
        for th in self.senders:
            th.join(timeout=1.0)
        rx.join(timeout=1.0)
        lines = [
            json.dumps({"id": i, "sent_s": s, "sent_bytes": self.sent_bytes.get(i, 0)})
            for i, s in sorted(self.sent.items())
        ]
        after = udp_errors()
        lost = {k: after[k] - errors_before.get(k, 0) for k in after}
        lines.append(json.dumps({"host": self.plan["host"], "udp_errors": lost}))
        for tid, want in sorted(self.expect.items()):
            lines.append(
                json.dumps(
                    {
                        "id": tid,
                        "arrived_s": self.arrived.get(tid),
                        "first_s": self.first.get(tid),
                        "bytes": self.received.get(tid, 0.0),
                        "want": want,
                    }
                )
            )
        out.write_text("\n".join(lines) + ("\n" if lines else ""))


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[0]).read_text())
    agent = Agent(plan)
    print("ready", flush=True)
    line = sys.stdin.readline().split()
    if len(line) != 2 or line[0] != "go":
        print(f"expected 'go T0', got {line!r}", flush=True)
        return 2
    agent.run(float(line[1]), Path(argv[1]))
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
