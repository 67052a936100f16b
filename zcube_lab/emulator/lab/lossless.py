"""The lossless mode's agent: a process that watches every switch port's queue and pauses the
ports feeding a congested one (adapter: rtnetlink, packet sockets, the clock; the decisions are
`zcube_lab.core.fabric.lossless.PauseMachine`'s; docs/LOSSLESS.md).

Under `--lossless` every shaped port's leaf queue is a TBF
(`zcube_lab.core.fabric.lossless.holding_leaf_line`): at the pass-through rate it is a plain
byte FIFO under the port's HTB class; paused, its rate is 1 byte/s and its burst one frame, so
at most the frame at its head still leaves (as a PFC pause lets the frame in transmission
finish) and the rest waits, none dropped. Resuming restores the pass-through rate and sends one
60-byte MAC-control frame (ethertype 0x8808, to the PFC group address) through the port:
changing a qdisc does not reschedule it, and a paused queue whose feeders are paused too would
otherwise wait for its next arrival (the TBF watchdog set while paused fires hours later).
Switches drop it (no rule matches: the table-miss drop), hosts drop it (no protocol handler).

Forced pauses (opt-in; bmwg §8.4's stuck receiver): on SIGUSR2 the agent reads FORCED_FILE beside
its report (`{"pauses": [[port, start, end], ...]}`, times on the monotonic clock every namespace
shares), holds each port paused over its window (`PauseMachine.force`), polls at its busy
interval until the last window has ended, and reports every pause's times (`pause_log`) and the
windows it holds (`forced`) until the next such file; an empty list ends it.

`python -m zcube_lab.emulator.lab.lossless PLAN OUT` runs the agent: every `poll_s` one qdisc dump
of the root namespace (every switch port), the machine's decision, one netlink change per port to
pause or resume (host ports through a socket opened in the host's namespace). It writes `OUT`
(`AgentReport` as JSON) every second, at once on SIGUSR1, and when it ends; SIGTERM or SIGINT
end it, first resuming every paused port. Its reaction time per congestion: from the start of
the previous reading (the queue was below XOFF then) to the acknowledgement of the last pause
it caused, an upper bound on "queue passes XOFF -> feeding port stopped"; after a quiet
reading, from the earliest instant the queue could have passed XOFF (`reaction_origin`).

Ingress accounting (the plan's `ingress`: `LabOptions.lossless_ingress`, on in replays, off in
live runs by default; docs/LOSSLESS.md): with each poll the
agent also reads every switch port's ingress backlog, the receive memory of ovs-vswitchd's
packet socket on that port (`zcube_lab.emulator.lab.ingressbacklog`: one read of
/proc/net/packet in the root namespace, each socket mapped to its port by ifindex), and the
machine pauses the far end of a port whose backlog passed its XOFF until it falls to XON.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from zcube_lab.core.fabric.description import Fabric, Route
from zcube_lab.core.fabric.hostplan import kv_source_map
from zcube_lab.core.fabric.linkplan import PortShape
from zcube_lab.core.fabric.lossless import (
    FRAME_OVERHEAD,
    PASS_BURST,
    PASS_RATE_BYTES,
    ForcedPause,
    Histogram,
    PauseMachine,
    PortThresholds,
    Stillness,
    feeders,
    idle_interval_s,
    ingress_watch,
    port_thresholds,
    reaction_origin,
)
from zcube_lab.core.fabric.pauseepisodes import EPISODES_FILE
from zcube_lab.core.fabric.queues import HTB_CLASS, LEAF_HANDLE
from zcube_lab.emulator.lab import classcounterproc
from zcube_lab.emulator.lab.episodehook import EpisodeHook
from zcube_lab.emulator.lab.ingressbacklog import IngressReader
from zcube_lab.emulator.lab.losslesstap import FabricTap
from zcube_lab.emulator.lab.qdisc_netlink import (
    NetlinkError,
    QdiscSocket,
    in_namespace,
    open_in_namespace,
    tc_handle,
)

PAUSE_RATE_BYTES = 1
POLL_S = 0.001
REPORT_FILE = "lossless.json"
FORCED_FILE = "lossless-forced.json"  # read on SIGUSR2 (forced pauses)
REPORT_EVERY_S = 1.0
STILL_S = 0.05  # still readings over this long, and the agent sleeps on its tap
KICK_FRAME = (
    bytes.fromhex("0180c2000001")  # the MAC-control (PFC) group address
    + bytes.fromhex("020000000001")
    + bytes.fromhex("8808")  # MAC control
    + bytes.fromhex("0101")  # PFC opcode; all-zero class vector and times: "pause nothing"
    + bytes(44)
)


@dataclass(frozen=True)
class AgentPlan:
    """What the agent watches and pauses: every monitored switch port's thresholds, each one's
    feeders, each pausable port's FIFO limit in bytes and its namespace (a path such as
    /proc/<pid>/ns/net; absent: the root namespace), the MTU and the poll interval; and the
    switch ports whose ingress backlog it counts (`ingress`: port -> the far end it pauses,
    `ingress_thresholds`; empty: egress only)."""

    thresholds: dict[str, PortThresholds]
    feeds: dict[str, tuple[str, ...]]
    fifo_bytes: dict[str, int]
    namespaces: dict[str, str]
    mtu: int
    poll_s: float = POLL_S
    idle_poll_s: float = POLL_S  # while every queue is below half XOFF (`idle_interval_s`)
    tap: bool = True  # sleep on a packet tap while the fabric is still (losslesstap)
    # How long no queue below half XOFF can take to reach XOFF (`idle_interval_s` without the
    # poll's floor), where the reaction starts after a quiet reading; None: `idle_poll_s`.
    quiet_s: float | None = None
    ingress: dict[str, str] = field(default_factory=dict)
    ingress_thresholds: dict[str, PortThresholds] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> AgentPlan:
        d = json.loads(text)
        return cls(
            thresholds={k: PortThresholds(**v) for k, v in d["thresholds"].items()},
            feeds={k: tuple(v) for k, v in d["feeds"].items()},
            fifo_bytes=dict(d["fifo_bytes"]),
            namespaces=dict(d["namespaces"]),
            mtu=int(d["mtu"]),
            poll_s=float(d["poll_s"]),
            idle_poll_s=float(d.get("idle_poll_s", d["poll_s"])),
            tap=bool(d.get("tap", True)),
            quiet_s=None if d.get("quiet_s") is None else float(d["quiet_s"]),
            ingress=dict(d.get("ingress", {})),
            ingress_thresholds={
                k: PortThresholds(**v) for k, v in d.get("ingress_thresholds", {}).items()
            },
        )


def bound_feeders(fabric: Fabric) -> dict[str, frozenset[str]]:
    """`feeders` as the hosts' routes pick their egress, and also as the lab's senders that
    bind a source address send: on ZCube the KV pulls, the EP lanes and a replay's lanes bind
    port 1 for group B's addresses and port 2 for group A's (`hostplan.kv_source_map`, the two
    link-disjoint paths), and the host's source rules send such a packet out of the bound port
    even where its own routes pick the other (a same-segment or same-rail peer). From there a
    route crosses a switch port `feeders` never gives it: ZCube-16's h9, bound to its A port,
    reaches h5's B address (on h9's own B switch b1) through a2's port up to b1, which
    `feeders` gives only a2's other three hosts. A congestion there must pause it too (PFC
    pauses every ingress whose bytes wait at the congested port), so the agent pauses the
    union. Fabrics without a source map (ROFT, Clos) are unchanged."""
    out = {port: set(ups) for port, ups in feeders(fabric).items()}
    hosts = []
    for h in fabric.hosts:
        index = {i.ip: i.index for i in h.interfaces}
        bound = tuple(Route(cidr, index[ip]) for cidr, ip in kv_source_map(fabric, h))
        hosts.append(replace(h, routes=bound) if bound else h)
    if any(a is not b for a, b in zip(hosts, fabric.hosts, strict=True)):
        for port, ups in feeders(replace(fabric, hosts=tuple(hosts))).items():
            out.setdefault(port, set()).update(ups)
    return {port: frozenset(ups) for port, ups in sorted(out.items())}


def agent_plan(
    fabric: Fabric,
    shapes: Mapping[str, PortShape],
    host_pids: Mapping[str, int],
    mtu: int,
    poll_s: float = POLL_S,
    ingress: bool = True,
) -> AgentPlan:
    """The agent's plan for a lab: every routed switch port watched, its feeders pausable (a
    host's port in its namespace, through the pid of a process in it); with `ingress`, also
    every switch port whose link's far end is pausable counted at ingress (`ingress_watch`)."""
    packets = {name: shape.packets for name, shape in shapes.items()}
    rates = {name: shape.mbps for name, shape in shapes.items()}
    limits = port_thresholds(fabric, packets, rates, mtu)
    feeds = {
        port: tuple(sorted(ups)) for port, ups in bound_feeders(fabric).items() if port in limits
    }
    pausable = sorted({up for ups in feeds.values() for up in ups})
    fifo = {}
    for port in pausable:
        size = shapes[port].fifo_bytes
        if size is None:
            raise ValueError(f"{port} has no pausable FIFO (shapes made without lossless)")
        fifo[port] = size
    namespaces = {}
    for port in pausable:
        node = port.rsplit("-eth", 1)[0]
        if node in host_pids:
            namespaces[port] = f"/proc/{host_pids[node]}/ns/net"
    ends, ends_limits = ingress_watch(fabric, pausable, packets, mtu) if ingress else ({}, {})
    idle = idle_interval_s(limits, feeds, rates, poll_s, ingress=ends, ingress_limits=ends_limits)
    quiet = idle_interval_s(limits, feeds, rates, 0.0, ingress=ends, ingress_limits=ends_limits)
    return AgentPlan(
        limits,
        feeds,
        fifo,
        namespaces,
        mtu,
        poll_s,
        idle,
        quiet_s=quiet,
        ingress=ends,
        ingress_thresholds=ends_limits,
    )


@dataclass
class AgentReport:
    """What the agent saw: pauses per port, its reaction times and poll periods (seconds,
    sorted samples summarised), its CPU, and errors."""

    ports: dict[str, dict[str, float]] = field(default_factory=dict)  # pauses, paused_s
    reactions: int = 0
    reaction_p50_s: float | None = None
    reaction_p99_s: float | None = None
    reaction_max_s: float | None = None
    polls: int = 0
    poll_p50_s: float | None = None
    poll_p99_s: float | None = None
    cpu_s: float = 0.0
    wall_s: float = 0.0
    errors: int = 0
    last_error: str = ""
    running: bool = True
    tap: bool = False  # it sleeps on a packet tap while the fabric is still (losslesstap)
    wakes: int = 0  # packets that woke it
    asleep_s: float = 0.0  # wall seconds it slept on the tap
    forced: list[list[Any]] = field(default_factory=list)  # [port, start, end] it holds
    # [port, start, end (None: still paused)] of every pause since the forced ones were given
    pause_log: list[list[Any]] | None = None
    ingress: bool = False  # it counted the switch ports' ingress backlogs (ingressbacklog)
    ingress_ports: int = 0  # how many
    ingress_congestions: int = 0  # ingress backlogs that passed XOFF
    ingress_peak_bytes: int = 0  # the largest ingress backlog read (socket memory)
    ingress_peak_port: str = ""

    @property
    def cores(self) -> float:
        """The agent's mean CPU in cores over its life."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cores": round(self.cores, 4)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AgentReport:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


class Agent:
    """The running agent: sockets per namespace, the machine, the samples."""

    def __init__(self, plan: AgentPlan) -> None:
        self.plan = plan
        self.machine = PauseMachine(
            plan.thresholds,
            {k: frozenset(v) for k, v in plan.feeds.items()},
            ingress=dict(plan.ingress),
            ingress_limits=dict(plan.ingress_thresholds),
        )
        self.sockets: dict[str | None, QdiscSocket] = {}
        self.index: dict[str, tuple[QdiscSocket, int]] = {}
        self.kicks: dict[str, socket.socket] = {}
        self.reactions = Histogram()
        self.periods = Histogram()
        self.first_poll = True
        self.errors = 0
        self.last_error = ""
        self.started = time.monotonic()
        self.cpu0 = _cpu_s()
        self.leaf = tc_handle(LEAF_HANDLE)
        self.quiet = False  # the last reading found every queue below half XOFF
        self.stopping = False
        self.dump_now = False  # SIGUSR1: write the report at the next poll
        self.force_now = False  # SIGUSR2: read the forced pauses at the next poll
        self.quiet_s = plan.idle_poll_s if plan.quiet_s is None else plan.quiet_s
        self.stillness = Stillness(STILL_S)
        self.sleepy = False  # the last readings were still for STILL_S: sleep on the tap
        self.wakeup_fd: int | None = None  # readable when a signal came (set_wakeup_fd)
        self.wakes = 0
        self.asleep_s = 0.0
        self.episodes: EpisodeHook | None = None  # set by `run` when the lab counts classes
        self._open()
        root = self.sockets[None]
        self.watched = {
            ifindex: port
            for port in plan.thresholds
            for sock, ifindex in [self.index[port]]
            if sock is root
        }
        self.tap = self._open_tap(root) if plan.tap else None
        self.ingress_index = {self.index[port][1]: port for port in plan.ingress}
        self.ingress_reader = IngressReader() if plan.ingress else None  # root: opened here
        self.ingress_congestions = 0
        self.ingress_peak = (0, "")

    def _open(self) -> None:
        ports = set(self.plan.fifo_bytes) | set(self.plan.thresholds) | set(self.plan.ingress)
        by_ns: dict[str | None, list[str]] = {}
        for port in sorted(ports):
            by_ns.setdefault(self.plan.namespaces.get(port), []).append(port)
        by_ns.setdefault(None, [])
        for ns, names in by_ns.items():
            sock, indexes = open_in_namespace(ns)
            self.sockets[ns] = sock
            kicks = _packet_sockets(ns, [n for n in names if n in self.plan.fifo_bytes])
            for name in names:
                if name not in indexes:
                    raise NetlinkError(f"no interface {name} in namespace {ns or 'root'}")
                self.index[name] = (sock, indexes[name])
            self.kicks.update(kicks)

    def _open_tap(self, root: QdiscSocket) -> FabricTap | None:
        """The tap on every switch port (root namespace) a packet can arrive at: watched or
        pausable; None, and polling only, where the kernel refuses it."""
        ports = set(self.plan.thresholds) | set(self.plan.fifo_bytes)
        indexes = [i for p in ports for sock, i in [self.index[p]] if sock is root]
        try:
            return FabricTap(indexes)
        except OSError as exc:
            print(f"lossless agent: no packet tap ({exc}); polling while idle", flush=True)
            return None

    def force(self, path: Path) -> None:
        """Hold the ports `path` names paused over their windows (module docstring); a port
        the plan does not pause (a watched switch port) gets its FIFO limit from its
        thresholds and its own packet socket."""
        try:
            rows = json.loads(path.read_text())["pauses"]
            pauses = [ForcedPause(str(p), float(a), float(b)) for p, a, b in rows]
            for f in pauses:
                if f.port not in self.plan.thresholds and f.port not in self.plan.fifo_bytes:
                    raise KeyError(f"{f.port} is neither watched nor pausable")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.errors += 1
            self.last_error = f"forced pauses: {exc}"
            return
        for f in pauses:
            if f.port not in self.kicks:
                self.kicks.update(_packet_sockets(self.plan.namespaces.get(f.port), [f.port]))
        self.machine.force(pauses)

    def _pending(self, now: float) -> bool:
        """A forced window has not ended yet: poll at the busy interval."""
        return any(f.end > now for f in self.machine.forced)

    def _set(self, port: str, paused: bool) -> None:
        sock, ifindex = self.index[port]
        limit = self.plan.fifo_bytes.get(port) or self.plan.thresholds[port].limit
        if paused:
            rate, burst = PAUSE_RATE_BYTES, self.plan.mtu + FRAME_OVERHEAD
        else:
            rate, burst = PASS_RATE_BYTES, PASS_BURST
        try:
            sock.set_tbf(ifindex, tc_handle(LEAF_HANDLE), tc_handle(HTB_CLASS), rate, burst, limit)
            if not paused:
                self.kicks[port].send(KICK_FRAME)
        except OSError as exc:
            self.errors += 1
            self.last_error = f"{port}: {exc}"

    def step(self, previous_start: float) -> float:
        """One reading and its decision; returns when the reading started."""
        start = time.monotonic()
        root = self.sockets[None]
        sent: dict[str, int] = {}
        try:
            backlogs = root.leaf_backlogs(self.watched, self.leaf, sent)
        except OSError as exc:
            self.errors += 1
            self.last_error = f"dump: {exc}"
            self.quiet = False
            self.sleepy = self.stillness.observe(start, False, {}, -1)
            return start
        ingress = self._ingress()
        decision = self.machine.observe(time.monotonic(), backlogs, ingress)
        for port in decision.pause:
            self._set(port, True)
        for port in decision.resume:
            self._set(port, False)
        if self.episodes is not None:
            self.episodes.after_observe(backlogs, self.machine.congested)
        self.ingress_congestions += len(decision.ingress)
        if (decision.congested or decision.ingress) and decision.pause:
            origin = reaction_origin(previous_start, self.quiet, self.quiet_s)
            self.reactions.add(max(0.0, time.monotonic() - origin))
        self.quiet = self.machine.quiet(backlogs, ingress) and not self._pending(start)
        held = {**backlogs, **{f"in:{p}": b for p, b in ingress.items()}}
        self.sleepy = self.stillness.observe(start, self.quiet, held, sum(sent.values()))
        return start

    def _ingress(self) -> dict[str, int]:
        """Every counted port's ingress backlog now (empty without ingress accounting). A read
        that fails counts an error (the verdict rejects the run) and reads as empty backlogs,
        so a far end paused at ingress is resumed, never held without end; the egress rule
        still holds."""
        if self.ingress_reader is None:
            return {}
        try:
            memory = self.ingress_reader.read()
        except (OSError, ValueError) as exc:
            self.errors += 1
            self.last_error = f"ingress: {exc}"
            return dict.fromkeys(self.ingress_index.values(), 0)
        out = {port: memory.get(ifindex, 0) for ifindex, port in self.ingress_index.items()}
        if out:
            peak = max((b, p) for p, b in out.items())
            if peak[0] > self.ingress_peak[0]:
                self.ingress_peak = peak
        return out

    def run(self, out: Path) -> None:
        """Poll until told to stop, writing the report every second and at the end (and the
        pause episodes beside it, when the lab counts classes)."""
        if (out.parent / classcounterproc.BATCH_FILE).exists():
            feeds = {p: frozenset(f) for p, f in self.plan.feeds.items()}
            self.episodes = EpisodeHook(feeds, self.plan.thresholds, out.parent / EPISODES_FILE)
        previous = time.monotonic()
        next_report = previous + REPORT_EVERY_S
        heartbeat = False  # the last wait on the tap ended without a packet
        while not self.stopping:
            if self.force_now:
                self.force_now, self.dump_now = False, True
                self.force(out.parent / FORCED_FILE)
            start = self.step(previous)
            if not self.first_poll and not heartbeat:
                self.periods.add(start - previous)
            self.first_poll = heartbeat = False
            previous = start
            now = time.monotonic()
            if now >= next_report or self.dump_now:
                self.dump_now = False
                write_report(out, self.report(now))
                if self.episodes is not None:
                    self.episodes.write()
                next_report = now + REPORT_EVERY_S
            tap = self.tap
            if tap is not None and self.sleepy:
                if not tap.armed:
                    try:
                        tap.arm()  # the next reading, at once, confirms the fabric still
                    except OSError as exc:  # polling still watches every port: no error
                        print(f"lossless agent: tap not armed ({exc}); polling", flush=True)
                        self.tap = None
                    continue
                woke = self._sleep(tap, next_report)
                if woke is None:  # the heartbeat (report) or a signal: read again
                    heartbeat = True
                    continue
                # A packet entered the fabric at `woke`: the next reading is timed from there,
                # as after a quiet reading (no queue can reach XOFF within the idle interval).
                previous, self.quiet = woke, True
                continue
            if tap is not None and tap.armed:
                tap.disarm()  # the confirming reading found traffic: poll
            interval = self.plan.idle_poll_s if self.quiet else self.plan.poll_s
            time.sleep(rest_s(interval, now - start))
        if self.tap is not None and self.tap.armed:
            self.tap.disarm()
        now = time.monotonic()
        for port in self.machine.release_all(now):
            self._set(port, False)
        if self.episodes is not None:
            self.episodes.stop()
        report = self.report(now)
        report.running = False
        write_report(out, report)

    def _sleep(self, tap: FabricTap, until: float) -> float | None:
        """Sleep on the armed tap until a packet (disarm; its arrival time) or `until` or a
        signal (None; still armed)."""
        t0 = time.monotonic()
        woke = tap.wait(until - t0, self.wakeup_fd)
        self.asleep_s += time.monotonic() - t0
        if self.wakeup_fd is not None:
            with contextlib.suppress(BlockingIOError):
                os.read(self.wakeup_fd, 64)
        if woke is not None:
            tap.disarm()
            self.wakes += 1
            self.stillness.woken()
        return woke

    def report(self, now: float) -> AgentReport:
        reactions, periods = self.reactions, self.periods
        return AgentReport(
            ports={
                port: {"pauses": n, "paused_s": round(s, 6)}
                for port, (n, s) in self.machine.totals(now).items()
            },
            reactions=reactions.n,
            reaction_p50_s=reactions.quantile(0.5),
            reaction_p99_s=reactions.quantile(0.99),
            reaction_max_s=reactions.largest if reactions.n else None,
            polls=periods.n,
            poll_p50_s=periods.quantile(0.5),
            poll_p99_s=periods.quantile(0.99),
            cpu_s=_cpu_s() - self.cpu0,
            wall_s=now - self.started,
            errors=self.errors,
            last_error=self.last_error,
            tap=self.tap is not None,
            wakes=self.wakes,
            asleep_s=round(self.asleep_s, 3),
            forced=[[f.port, f.start, f.end] for f in self.machine.forced],
            pause_log=None
            if self.machine.history is None
            else [list(e) for e in self.machine.history],
            ingress=self.ingress_reader is not None,
            ingress_ports=len(self.ingress_index),
            ingress_congestions=self.ingress_congestions,
            ingress_peak_bytes=self.ingress_peak[0],
            ingress_peak_port=self.ingress_peak[1],
        )


def rest_s(interval: float, busy: float) -> float:
    """How long the agent sleeps after a reading that took `busy` seconds, at `interval`
    between readings: the rest of the interval, and never less than the reading took. At
    real-time priority (SCHED_FIFO) nothing else runs on its core while it is busy, so a reading
    longer than the interval (a large lab) would otherwise hold that core; this way it holds at
    most half of one, and the datapath and the lab keep the rest."""
    return max(interval - busy, busy, 0.0)


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def _packet_sockets(ns: str | None, names: list[str]) -> dict[str, socket.socket]:
    """A raw packet socket bound to each interface, opened in namespace `ns`."""
    out = {}
    with in_namespace(ns):
        for name in names:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            s.bind((name, 0))
            out[name] = s
    return out


def write_report(path: Path, report: AgentReport) -> None:
    """Write the report whole (a reader never sees half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report.to_dict(), indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


def read_report(path: Path) -> AgentReport | None:
    """The report an agent wrote, or None when there is none (or it is unreadable)."""
    try:
        return AgentReport.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(
            "usage: python -m zcube_lab.emulator.lab.lossless PLAN.json OUT.json", file=sys.stderr
        )
        return 2
    plan = AgentPlan.from_json(Path(args[0]).read_text())
    out = Path(args[1])
    agent = Agent(plan)

    def stop(_sig: int, _frame: object) -> None:
        agent.stopping = True

    def dump(_sig: int, _frame: object) -> None:
        agent.dump_now = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def force(_sig: int, _frame: object) -> None:
        agent.force_now = True

    signal.signal(signal.SIGUSR1, dump)
    signal.signal(signal.SIGUSR2, force)
    wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_write)  # a signal ends a sleep on the tap at once
    agent.wakeup_fd = wake_read
    write_report(out, agent.report(time.monotonic()))  # the lab waits for this: ready
    print(f"lossless agent ready: {len(plan.thresholds)} ports watched", flush=True)
    agent.run(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
