"""Reaction time and CPU of the lossless agent (issue 21 item 2; docs/LOSSLESS.md), measured end
to end in a private network namespace, without Mininet or Open vSwitch.

Two veth pairs with the lab's shaping (HTB class, the lossless mode's TBF leaf): `zq0` stands
for a congested switch port (100 Mb/s, XOFF `--xoff` frames of 9,000 bytes), `zf0` for the port
feeding it (1 Gb/s, so its HTB never holds a packet). A thread sends a 1,000-byte marker on
`zf0` every 0.1 ms and a receiver on its peer `zf1` stamps each arrival. Each trial sends
`xoff + 4` frames into `zq0` at once: its queue passes XOFF at a known instant (just after the
frame that crosses it is handed to the kernel), the agent pauses `zf0`, and the markers sent
from then on wait until the queue drains to XON and the agent resumes `zf0`. The end-to-end
reaction of a trial is the send time of the first marker that waited (arrived > 1 ms after
its send) less the crossing instant: an upper bound, to within one marker interval (0.1 ms)
and the one marker a pause lets through (the plan's MTU is 1,500 here: a pause leaves one
frame of burst, as a PFC pause lets the frame in transmission finish). The agent's own report
(its reaction upper bound, poll period, CPU) is printed beside it; `--ports N` adds N idle
shaped ports it watches too, as a fabric's root namespace holds (a 16-GPU ZCube: 64 switch
ports), to show what the dump costs per port; `--idle-poll-ms` the agent's poll interval while
every queue is below half its XOFF (a lab's plan computes it: `lossless.idle_interval_s`).
After a quiet reading the agent starts its reaction bound one idle interval later
(`lossless.reaction_origin`), which holds where queues fill at their feeders' rates, as in a
lab; a trial's 12 frames arrive at once, so with `--idle-poll-ms` above the poll the agent's
figure can fall below the true one: the end-to-end column is the measurement.

Needs root; about 10 s. Run under the lab's heavy lock on a shared machine:

    flock /tmp/zcube-heavy.lock .venv/bin/python -m bench.lossless_reaction
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from zcube_lab.core.fabric.lossless import PortThresholds, holding_leaf_line, thresholds
from zcube_lab.emulator.lab.lossless import AgentPlan, read_report
from zcube_lab.emulator.lab.qdisc_netlink import QdiscSocket, in_namespace

NS = f"zl-bench-{os.getpid()}"
FRAME = 9000
MARK_BYTES = 1000
MARK_EVERY_S = 0.0001
HELD_S = 0.001


def ns_run(*argv: str, check: bool = True) -> None:
    subprocess.run(["ip", "netns", "exec", NS, *argv], check=check, capture_output=True)


def setup(ports: int, fifo: int) -> None:
    subprocess.run(["ip", "netns", "add", NS], check=True)
    lines = ["link add zq0 type veth peer name zq1", "link add zf0 type veth peer name zf1"]
    lines += [f"link add zi{i}a type veth peer name zi{i}b" for i in range(ports)]
    names = ["zq0", "zq1", "zf0", "zf1"] + [f"zi{i}{e}" for i in range(ports) for e in "ab"]
    lines += [f"link set dev {n} mtu {FRAME}" for n in names]
    lines += [f"link set dev {n} up" for n in names]
    tc = []
    for dev, mbps in [("zq0", 100), ("zf0", 1000)] + [(f"zi{i}a", 100) for i in range(ports)]:
        tc += [
            f"qdisc replace dev {dev} root handle 5:0 htb default 1",
            f"class replace dev {dev} parent 5:0 classid 5:1 htb rate {mbps}Mbit burst 15k",
            holding_leaf_line(dev, fifo),
        ]
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "ip").write_text("\n".join(lines) + "\n")
        Path(tmp, "tc").write_text("\n".join(tc) + "\n")
        ns_run("sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", check=False)
        ns_run("ip", "-batch", f"{tmp}/ip")
        ns_run("tc", "-batch", f"{tmp}/tc")


def frame(size: int, payload: bytes = b"") -> bytes:
    head = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x09" + b"\x88\xb5"
    return head + payload + bytes(size - 14 - len(payload))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--xoff", type=int, default=8, help="XOFF in 9,000-byte frames")
    parser.add_argument("--ports", type=int, default=0, help="idle shaped ports also watched")
    parser.add_argument("--poll-ms", type=float, default=1.0)
    parser.add_argument(
        "--idle-poll-ms", type=float, help="poll interval while every queue is below half XOFF"
    )
    parser.add_argument("--idle-s", type=float, default=3.0, help="seconds of no congestion")
    args = parser.parse_args()
    fifo = 4 * 2**20
    setup(args.ports, fifo)
    agent = None
    try:
        xoff, xon = thresholds(args.xoff, FRAME)
        watched = ["zq0"] + [f"zi{i}a" for i in range(args.ports)]
        plan = AgentPlan(
            thresholds={p: PortThresholds(xoff, xon, fifo) for p in watched},
            feeds={"zq0": ("zf0",)},
            fifo_bytes={"zf0": fifo},
            namespaces={},
            mtu=1500,
            poll_s=args.poll_ms / 1e3,
            idle_poll_s=(args.idle_poll_ms or args.poll_ms) / 1e3,
            # Its frames enter the congested port from this bench, not through a switch port's
            # receive side where the tap listens: the agent must poll throughout.
            tap=False,
        )
        tmp = Path(tempfile.mkdtemp(prefix="zl-bench-"))
        (tmp / "plan.json").write_text(plan.to_json())
        out = tmp / "agent.json"
        agent = subprocess.Popen(
            ["ip", "netns", "exec", NS, sys.executable, "-m", "zcube_lab.emulator.lab.lossless",
             str(tmp / "plan.json"), str(out)],
            stdout=subprocess.PIPE,
        )  # fmt: skip
        assert agent.stdout is not None
        agent.stdout.readline()  # ready
        with in_namespace(f"/run/netns/{NS}"):
            tx_q = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            tx_q.bind(("zq0", 0))
            tx_f = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            tx_f.bind(("zf0", 0))
            rx_f = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88B5))
            rx_f.bind(("zf1", 0))
        rx_f.settimeout(0.2)
        sent: dict[int, float] = {}
        arrived: dict[int, float] = {}
        done = threading.Event()

        def send_marks() -> None:
            seq = 0
            nxt = time.monotonic()
            while not done.is_set():
                now = time.monotonic()
                if now >= nxt:
                    sent[seq] = now
                    tx_f.send(frame(MARK_BYTES, struct.pack("!I", seq)))
                    seq += 1
                    nxt += MARK_EVERY_S
                else:
                    time.sleep(0)

        def receive() -> None:
            while not done.is_set():
                try:
                    data = rx_f.recv(2048)
                except TimeoutError:
                    continue
                arrived[struct.unpack_from("!I", data, 14)[0]] = time.monotonic()

        threads = [threading.Thread(target=f, daemon=True) for f in (send_marks, receive)]
        for t in threads:
            t.start()
        load = [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
        time.sleep(args.idle_s)  # idle: the agent's cost with nothing congested
        idle = read_report(out)
        big = frame(FRAME)
        crossings = []
        for _ in range(args.trials):
            for i in range(args.xoff + 4):
                tx_q.send(big)
                if i + 1 == args.xoff:
                    crossings.append(time.monotonic())
            time.sleep(0.08)  # 12 frames drain in ~9 ms at 100 Mb/s; then quiet
        time.sleep(0.2)
        done.set()
        for t in threads:
            t.join(timeout=1)
        reactions = []
        for t_cross in crossings:
            held = [s for seq, s in sent.items() if s >= t_cross and seq in arrived
                    and arrived[seq] - s > HELD_S]  # fmt: skip
            later = [s for s in sent.values() if s >= t_cross]
            if held and later:
                reactions.append(min(held) - t_cross)
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=5)
        agent = None
        report = read_report(out)
        assert report is not None and idle is not None
        with in_namespace(f"/run/netns/{NS}"):
            sock = QdiscSocket()
            index = {name: i for i, name in socket.if_nameindex()}
            drops = {
                name: sum(q.drops for q in sock.backlogs() if q.ifindex == index[name])
                for name in ("zq0", "zf0")
            }
            sock.close()
        lost = len([s for s in sent if s not in arrived and sent[s] < max(arrived.values())])
        result = {
            "trials": len(crossings),
            "trials_paused": len(reactions),
            "e2e_reaction_ms": {
                "p50": round(statistics.median(reactions) * 1e3, 3) if reactions else None,
                "max": round(max(reactions) * 1e3, 3) if reactions else None,
            },
            "agent_reaction_ms": {
                "p50": _ms(report.reaction_p50_s),
                "p99": _ms(report.reaction_p99_s),
                "max": _ms(report.reaction_max_s),
                "count": report.reactions,
            },
            "poll_ms": {"p50": _ms(report.poll_p50_s), "p99": _ms(report.poll_p99_s)},
            "agent_cores_idle": round(idle.cpu_s / idle.wall_s, 4) if idle.wall_s else None,
            "agent_cores_run": round(report.cores, 4),
            "watched_ports": len(watched),
            "pauses": report.ports,
            "markers_lost": lost,  # not received: the receiver thread's socket, not a qdisc
            "qdisc_drops": drops,
            "errors": report.errors,
            "frame_time_ms_at_100mbps": FRAME * 8 / 100e6 * 1e3,
            "loadavg_before": load,
            "loadavg_after": [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]],
        }
        print(json.dumps(result, indent=1))
        return 0
    finally:
        if agent is not None:
            agent.kill()
        subprocess.run(["ip", "netns", "del", NS], check=False)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 3)


if __name__ == "__main__":
    sys.exit(main())
