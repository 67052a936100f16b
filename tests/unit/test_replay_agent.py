"""The replay agent's shared striping (the live pull's rule) on loopback, in-process: chunks
dealt from one queue, each whole chunk acknowledged, every byte delivered; and the queue."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

from zcube_lab.emulator.replay.agent import Agent, ChunkQueue


def test_the_chunk_queue_deals_each_chunk_once_the_last_one_short():
    q = ChunkQueue(10_000, 4_096)
    assert q.left() == 3
    assert [q.take(), q.take(), q.take(), q.take()] == [(0, 4096), (1, 4096), (2, 1808), None]
    assert q.left() == 0


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(plans: dict[str, dict], tmp: Path) -> tuple[dict[str, list[dict]], float]:
    agents = {h: Agent(p) for h, p in plans.items()}
    t0 = time.monotonic() + 0.05
    threads = [
        threading.Thread(target=a.run, args=(t0, tmp / f"{h}.jsonl")) for h, a in agents.items()
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    took = time.monotonic() - t0
    out = {h: [json.loads(x) for x in (tmp / f"{h}.jsonl").read_text().splitlines()] for h in plans}
    return out, took


def test_shared_striping_delivers_every_byte_and_each_lane_ends_on_its_acknowledgements(
    tmp_path: Path,
):
    port, nbytes, chunk = _free_udp_port(), 200_000, 12_500  # 16 chunks over 4 lanes
    lane = ["127.0.0.1", "127.0.0.1"]
    base = {"dilation": 1.0, "mtu": 1500, "port": port, "deadline_s": 10.0}
    plans = {
        "s": {**base, "host": "s", "listen": [], "expect": {}, "out": [
            {"id": 7, "start_s": 0.0, "bytes": nbytes, "after": [], "gap_s": 0.0,
             "lanes": [lane] * 4, "chunk": chunk, "window": 2},
        ]},
        "r": {**base, "host": "r", "listen": ["127.0.0.1"], "out": [],
              "expect": {"7": nbytes}, "chunks": {"7": chunk}},
    }  # fmt: skip
    out, took = _run(plans, tmp_path)
    sent = next(x for x in out["s"] if x.get("id") == 7)
    got = next(x for x in out["r"] if x.get("id") == 7)
    assert sent["sent_bytes"] == nbytes == got["bytes"]
    assert got["arrived_s"] is not None and got["arrived_s"] >= sent["sent_s"]
    # A lane waits for its chunks' acknowledgements before it ends, and the sender ends only
    # when its lanes have: with an acknowledgement missing it would wait for the 10 s deadline.
    assert took < 5.0


def test_without_acknowledgements_a_shared_lane_holds_its_window_until_the_deadline(
    tmp_path: Path,
):
    # The receiver is told no chunk size, so it acknowledges nothing: each lane sends its
    # window (2 chunks of 10,000) and waits; the deadline ends the replay with those bytes out.
    port = _free_udp_port()
    base = {"dilation": 1.0, "mtu": 1500, "port": port, "deadline_s": 0.5}
    plans = {
        "s": {**base, "host": "s", "listen": [], "expect": {}, "out": [
            {"id": 3, "start_s": 0.0, "bytes": 100_000, "after": [], "gap_s": 0.0,
             "lanes": [["127.0.0.1", "127.0.0.1"]], "chunk": 10_000, "window": 2},
        ]},
        "r": {**base, "host": "r", "listen": ["127.0.0.1"], "out": [],
              "expect": {"3": 100_000}},
    }  # fmt: skip
    out, took = _run(plans, tmp_path)
    sent = next(x for x in out["s"] if x.get("id") == 3)
    got = next(x for x in out["r"] if x.get("id") == 3)
    # one lane, so its second chunk waits for the queue to hold one for every lane (it does):
    # two chunks out, then nothing until the deadline
    assert sent["sent_bytes"] == got["bytes"] == 20_000
    assert got["arrived_s"] is None
    assert took >= 0.5


class _NoRouteBack:
    """A receiving socket whose acknowledgements cannot leave (no route back)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def fileno(self) -> int:
        return self.sock.fileno()

    def recvfrom_into(self, buf: bytearray) -> tuple[int, tuple[str, int]]:
        return self.sock.recvfrom_into(buf)

    def sendto(self, data: bytes, addr: tuple[str, int]) -> int:
        raise OSError(101, "Network is unreachable")


def test_an_acknowledgement_that_cannot_leave_does_not_stop_the_receiver(tmp_path: Path):
    # One lane, two chunks unacknowledged at most: both chunks arrive and are counted though
    # neither acknowledgement could be sent; the lane then waits for the deadline.
    port = _free_udp_port()
    base = {"dilation": 1.0, "mtu": 1500, "port": port, "deadline_s": 0.5}
    plans = {
        "s": {**base, "host": "s", "listen": [], "expect": {}, "out": [
            {"id": 4, "start_s": 0.0, "bytes": 100_000, "after": [], "gap_s": 0.0,
             "lanes": [["127.0.0.1", "127.0.0.1"]], "chunk": 10_000, "window": 2},
        ]},
        "r": {**base, "host": "r", "listen": ["127.0.0.1"], "out": [],
              "expect": {"4": 100_000}, "chunks": {"4": 10_000}},
    }  # fmt: skip
    agents = {h: Agent(p) for h, p in plans.items()}
    agents["r"].socks = [_NoRouteBack(s) for s in agents["r"].socks]
    t0 = time.monotonic() + 0.05
    threads = [threading.Thread(target=a.run, args=(t0, tmp_path / f"{h}.jsonl"))
               for h, a in agents.items()]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    got = next(
        json.loads(x)
        for x in (tmp_path / "r.jsonl").read_text().splitlines()
        if json.loads(x).get("id") == 4
    )
    assert got["bytes"] == 20_000 and got["arrived_s"] is None
