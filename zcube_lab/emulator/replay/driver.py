"""Replay a recording on a fabric at a chosen time scale (issue 45 item 3): bring the lab up at
that scale (lossless, its thresholds in real bytes), start one agent per host
(`zcube_lab.emulator.replay.agent`), start them together on the shared monotonic clock, wait, gather
what they and the lossless agent saw, tear everything down (on errors and Ctrl-C too).

The plan per host (`host_plans`) is pure: a transfer's lanes are the addresses a live run's KV
pull or EP exchange between the same two hosts would use (`peer_addresses`, every NIC port of
the destination; the KV source map on ZCube so each lane leaves its own port on its own
link-disjoint path), its bytes the recording's real bytes over the scale's bandwidth scale.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.replay import figures
from zcube_lab.core.replay.config import STRIPINGS
from zcube_lab.core.replay.load import Demand
from zcube_lab.core.replay.recording import Recording, Transfer
from zcube_lab.core.replay.timescale import TimeScale
from zcube_lab.emulator.lab.options import LOSSLESS_PRIORITY as _LAB_PRIORITY

if TYPE_CHECKING:
    from zcube_lab.emulator.lab.network import Lab

AGENT_MODULE = "zcube_lab.emulator.replay.agent"
REPLAY_PORT = 7470
START_DELAY_WALL_S = 0.5
# The lossless agent stands for a switch's PFC logic, which is hardware: at k = 120 every wall
# millisecond it waits for a CPU is 8 modelled µs, so it runs at real-time priority (as in live
# lossless runs: the lab's default).
LOSSLESS_PRIORITY = _LAB_PRIORITY
# The agent also pauses at ingress (ovs-vswitchd's receive socket on a switch port past XOFF,
# as PFC's ingress accounting): at a fine time scale an incast offers ovs-vswitchd more than it
# forwards, and the pile in those sockets reached the egress queue faster than its headroom
# (docs/REPLAY.md, "a third cause"). Live runs keep the lab's default (off: docs/LOSSLESS.md).
LOSSLESS_INGRESS = True
# Frames an HTB class may send at once above its rate. Mininet's 15 KB is a real half megabyte
# at a 2 µs frame (S = 33), more than XOFF for a chip's share (12 frames): a single flow would
# pause itself. A real port sends one frame at a time at line rate; two frames keep HTB exact.
BURST_FRAMES = 2
# Modelled seconds a replay may run past its last release: every transfer's time alone, one
# after another, DEADLINE_FACTOR times over (an incast through one NIC takes their sum at line
# rate, and the lab's pauses waste some of it), at least the floor. Only a replay that does not
# finish waits this long.
# A live KV pull's TCP connections per prefill address (DecodeConfig.kv_streams' default), which
# shared striping keeps as lanes; a chunk's index rides in the header's 16-bit sequence field.
LIVE_STREAMS = 2
MAX_CHUNKS = 1 << 16
DEADLINE_FLOOR_S = 0.05
DEADLINE_FACTOR = 5.0


@dataclass(frozen=True)
class Threshold:
    """The lossless thresholds: XOFF in real bytes (a chip's per-port share or the draft's)."""

    xoff_bytes: float
    source: str


def check_hosts(rec: Recording, fabric: Fabric) -> None:
    """Refuse a recording whose hosts the fabric does not have (naming the fix)."""
    have = {h.name for h in fabric.hosts}
    used = {t.src for t in rec.transfers} | {t.dst for t in rec.transfers}
    missing = sorted(used - have, key=lambda h: (len(h), h))
    if missing:
        raise ConfigError(
            "fabric",
            fabric.kind,
            f"a fabric with the recording's hosts ({', '.join(missing[:6])} missing): replay on "
            f"a fabric of the same size as the run ({len(rec.hosts) or len(used)} hosts)",
        )


def ideal_s(fabric: Fabric) -> Callable[[Transfer], float]:
    """A transfer's time alone on the fabric: real bytes over the lower of the two NICs' real
    rates (every port of both, as its lanes spread), modelled seconds."""

    def nic_bps(host: str) -> float:
        return sum(lk.gbps for lk in fabric.links if host in (lk.node1, lk.node2)) * 1e9

    def f(t: Transfer) -> float:
        return t.bytes * 8 / min(nic_bps(t.src), nic_bps(t.dst))

    return f


def lanes(fabric: Fabric, src: str, dst: str) -> list[list[str]]:
    """[source address, destination address] per lane from `src` to `dst`."""
    from zcube_lab.core.fabric.hostplan import kv_source_map
    from zcube_lab.emulator.experiment.plan import peer_addresses
    from zcube_lab.serving.kvwire.paths import pick_source

    smap = kv_source_map(fabric, fabric.host(src))
    return [[pick_source(ip, smap) or "", ip] for ip in peer_addresses(fabric, src, dst)]


def demand_on(rec: Recording, fabric: Fabric) -> tuple[Demand, float]:
    """What `rec` asks of `fabric`'s switches (`zcube_lab.core.replay.load`), each pair's
    switch count from the lanes its transfers take, and the recording's real bytes."""
    from zcube_lab.core.replay.load import fabric_demand

    cache: dict[tuple[str, str], list[list[str]]] = {}

    def lanes_of(src: str, dst: str) -> list[list[str]]:
        if (src, dst) not in cache:
            cache[(src, dst)] = lanes(fabric, src, dst)
        return cache[(src, dst)]

    return fabric_demand(rec, fabric, lanes_of), sum(t.bytes for t in rec.transfers)


def payload_bytes(mtu: int) -> int:
    """Lab bytes a replay datagram carries at `mtu`."""
    from zcube_lab.emulator.replay.agent import HEADER, IP_UDP_BYTES

    return mtu - IP_UDP_BYTES - HEADER.size


def deadline_s(rec: Recording, fabric: Fabric) -> float:
    """Modelled seconds after which the agents stop waiting."""
    ideal = ideal_s(fabric)
    total = sum(ideal(t) for t in rec.transfers)
    return rec.duration_s + max(DEADLINE_FLOOR_S, DEADLINE_FACTOR * total)


def shared_chunk(rec: Recording, ts: TimeScale, nbytes: int, lanes: int) -> int:
    """Lab bytes of a chunk of a KV transfer of `nbytes` lab bytes over `lanes` lanes under
    shared striping: the live pull's rule (`chunk_size`: `CHUNKS_PER_LANE` chunks a lane, at
    most the decode's `kv_chunk_bytes` of the recorded run, carried to this scale)."""
    from zcube_lab.serving.config import DecodeConfig
    from zcube_lab.serving.kvwire.paths import chunk_size

    most = DecodeConfig.kv_chunk_bytes
    scale = rec.meta.get("bandwidth_scale")
    largest = max(1, round(ts.lab_bytes(most * float(scale)))) if scale else nbytes
    return chunk_size(nbytes, lanes, largest)


def host_plans(
    rec: Recording,
    fabric: Fabric,
    ts: TimeScale,
    port: int = REPLAY_PORT,
    striping: str = "even",
) -> dict[str, dict[str, Any]]:
    """Each host's agent plan (see `zcube_lab.emulator.replay.agent`). `striping` "shared"
    sends KV transfers as the live pull does (`LIVE_STREAMS` lanes per address pair, chunks
    dealt from one queue, `LANE_WINDOW` unacknowledged a lane); "even" splits every transfer
    evenly over its address pairs."""
    from zcube_lab.serving.kvwire.pull import LANE_WINDOW
    from zcube_lab.serving.trafficclass import DSCP, tos_byte

    if striping not in STRIPINGS:
        raise ConfigError("striping", striping, ", ".join(STRIPINGS))
    check_hosts(rec, fabric)
    deadline = deadline_s(rec, fabric)
    plans: dict[str, dict[str, Any]] = {}
    for h in fabric.hosts:
        plans[h.name] = {
            "host": h.name,
            "dilation": ts.dilation,
            "mtu": ts.mtu,
            "port": port,
            "listen": [i.ip for i in h.interfaces],
            "deadline_s": deadline,
            "out": [],
            "expect": {},
            "chunks": {},
        }
    lane_cache: dict[tuple[str, str], list[list[str]]] = {}
    for t in rec.transfers:
        nbytes = max(1, round(ts.lab_bytes(t.bytes)))
        key = (t.src, t.dst)
        if key not in lane_cache:
            lane_cache[key] = lanes(fabric, t.src, t.dst)
        out: dict[str, Any] = {
            "id": t.id,
            "start_s": t.start_s,
            "bytes": nbytes,
            "after": list(t.after),
            "gap_s": t.gap_s,
            "lanes": lane_cache[key],
        }
        if t.cls in DSCP:  # marked as the live lab marks the class (its counters see them)
            out["tos"] = tos_byte(t.cls)
        if striping == "shared" and t.cls == "kv":
            out["lanes"] = [lane for lane in lane_cache[key] for _ in range(LIVE_STREAMS)]
            chunk = shared_chunk(rec, ts, nbytes, len(out["lanes"]))
            out["chunk"], out["window"] = chunk, LANE_WINDOW
            if -(-nbytes // chunk) > MAX_CHUNKS:
                raise ConfigError("striping", striping, f"at most {MAX_CHUNKS} chunks a transfer")
            plans[t.dst]["chunks"][str(t.id)] = chunk
        plans[t.src]["out"].append(out)
        plans[t.dst]["expect"][str(t.id)] = nbytes
    return {h: p for h, p in plans.items() if p["out"] or p["expect"]}


def lab_for(
    fabric: Fabric,
    ts: TimeScale,
    threshold: Threshold,
    run_dir: Path,
    ingress: bool = LOSSLESS_INGRESS,
) -> Lab:
    """A lossless lab at the time scale, XOFF the threshold's frames at its byte scale;
    `ingress`: whether the agent also counts ingress backlogs (bmwg §8.4 turns it off:
    `zcube_lab.emulator.bmwg.runner.STORM_INGRESS`)."""
    from zcube_lab.adapters.ports import free_port
    from zcube_lab.core.fabric.queues import QueueModel
    from zcube_lab.core.fabric.scale import Scale
    from zcube_lab.emulator.lab.network import Lab
    from zcube_lab.emulator.lab.options import LabOptions

    frames = ts.threshold_frames(threshold.xoff_bytes, "xoff")
    return Lab(
        fabric,
        LabOptions(
            scale=Scale(nic_mbps=ts.nic_mbps, dilation=ts.dilation),
            mtu=ts.mtu,
            policy="ecmp",
            of_port=free_port(),
            metrics_port=free_port(),
            log_dir=run_dir,
            queue=QueueModel(packets=frames),
            lossless=True,
            lossless_priority=LOSSLESS_PRIORITY,
            lossless_ingress=ingress,
            htb_burst_bytes=BURST_FRAMES * ts.mtu,
        ),
    )


def replay(
    rec: Recording,
    fabric: Fabric,
    ts: TimeScale,
    threshold: Threshold,
    run_dir: Path,
    progress: Callable[[str], None] = print,
    lab: Lab | None = None,
    load: Mapping[str, Any] | None = None,
    striping: str = "even",
    forced: Sequence[tuple[str, float, float]] = (),
) -> dict[str, Any]:
    """Replay `rec` on `fabric` at `ts`; the figures (also written to run_dir/replay.json),
    with `load` (the datapath load it was paced for, `Load.describe()`) when given, and the
    `striping` of its KV transfers (`host_plans`).
    With `lab` given (started by the caller) it is used and left running.
    `forced`: switch ports the lossless agent holds paused, `(port, start, end)` in modelled
    seconds from the replay's origin (bmwg §8.4's stuck receiver; none by default); with them
    the result's `storm` holds the windows and the agent's pause log in modelled seconds."""
    plans = host_plans(rec, fabric, ts, striping=striping)
    run_dir.mkdir(parents=True, exist_ok=True)
    own = lab is None
    if lab is None:
        lab = lab_for(fabric, ts, threshold, run_dir)
        frame_us = ts.frame_s * 1e6
        progress(f"bringing up {fabric.kind} at a {frame_us:.3g} µs frame, k={ts.dilation:g}")
        lab.start()
    procs: list[subprocess.Popen[str]] = []
    try:
        before = _pauses(lab)
        ingress0 = _ingress_count(lab)  # the report `_pauses` just refreshed
        counters = CounterReader(lab)
        origin: list[float] = []

        def force(t0: float) -> None:
            origin.append(t0)
            windows = [(p, t0 + ts.clock.wall(a), t0 + ts.clock.wall(b)) for p, a, b in forced]
            if not lab.lossless_force(windows):
                raise RuntimeError("the lossless agent did not take the forced pauses")

        lines, wall0 = _run_agents(lab, plans, run_dir, procs, ts, progress, mark=counters.mark,
                                   before_go=force if forced else None)  # fmt: skip
        wall_end = time.time()
        after = _pauses(lab)  # asks the agent for its report: its episodes are written with it
        ingress = _ingress_figures(lab, ingress0)  # the same report, before the agent rewrites it
        storm = _storm(lab, ts, forced, origin[0]) if forced else None
        judged = counters.judge(lines, ts.mtu, _incomplete(rec, lines), load)
        extra = dict(judged or {})
        extra["victims"] = _victims(rec, fabric, ts, lab, lines, wall0, wall_end)
        if load is not None:
            extra["load"] = dict(load)
        extra["striping"] = striping
        if storm is not None:
            extra["storm"] = storm
        extra["ingress"] = ingress
        return _figures(rec, fabric, ts, threshold, lines, before, after, lab, run_dir, extra)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        if own:
            lab.stop()


def _storm(
    lab: Lab, ts: TimeScale, forced: Sequence[tuple[str, float, float]], t0: float
) -> dict[str, Any]:
    """The forced windows and the agent's pause log (just refreshed) in modelled seconds from
    the origin `t0` (monotonic), and when it was read (`seen_s`); the agent then stops
    forcing and logging."""
    report = lab.lossless_report()
    seen = ts.clock.modelled(time.monotonic() - t0)

    def mod(x: float | None) -> float | None:
        return None if x is None else ts.clock.modelled(float(x) - t0)

    log = [[p, mod(a), mod(b)] for p, a, b in (report.pause_log or [])] if report else []
    lab.lossless_force([])
    return {"forced": [list(f) for f in forced], "pause_log": log, "seen_s": seen}


def _victims(
    rec: Recording,
    fabric: Fabric,
    ts: TimeScale,
    lab: Lab,
    lines: Sequence[dict[str, Any]],
    wall0: float,
    wall_end: float,
) -> dict[str, Any] | None:
    """The replay's victims as a live run counts them (`zcube_lab.emulator.replay.victims`);
    None when the lab recorded no pause episodes (no class counters)."""
    from zcube_lab.core.fabric.pauseepisodes import EPISODES_FILE
    from zcube_lab.emulator.replay.victims import replay_victims
    from zcube_lab.emulator.results.lossless.victimlogs import read_episodes

    path = lab.lossless_report_path.parent / EPISODES_FILE
    if not path.is_file():
        return None
    sent, got = figures.outcomes(lines)
    report = replay_victims(
        rec.transfers, sent, got, fabric, wall0, ts.clock, read_episodes(path), wall_end
    )
    return report.to_dict()


def _ingress_count(lab: Lab) -> int:
    """Ingress backlogs the agent has seen pass XOFF so far (its last report)."""
    report = lab.lossless_report()
    return report.ingress_congestions if report is not None else 0


def _ingress_figures(lab: Lab, before: int) -> dict[str, Any] | None:
    """What ingress accounting did in this replay (None: the agent did not count ingress): the
    ports counted, the ingress backlogs that passed XOFF since `before`, and the largest
    backlog over the lab's life (socket memory, bytes) and where."""
    report = lab.lossless_report()  # refreshed just before (`_pauses`)
    if report is None or not report.ingress:
        return None
    return {
        "ports": report.ingress_ports,
        "congestions": report.ingress_congestions - before,
        "peak_bytes": report.ingress_peak_bytes,
        "peak_port": report.ingress_peak_port,
    }


def _pauses(lab: Lab) -> dict[str, dict[str, float]]:
    report = lab.lossless_report(fresh=True)
    return dict(report.ports) if report is not None else {}


def _run_agents(
    lab: Lab,
    plans: dict[str, dict[str, Any]],
    run_dir: Path,
    procs: list[subprocess.Popen[str]],
    ts: TimeScale,
    progress: Callable[[str], None],
    mark: Callable[[], None] = lambda: None,
    before_go: Callable[[float], None] | None = None,
) -> tuple[list[dict[str, Any]], float]:
    """Start every agent, `mark()` once all are ready (just before they go) and once all are
    done; their lines and the origin T0 on the wall clock (`time.time()`). `before_go` is
    given the origin on the monotonic clock before the agents are told it."""
    from zcube_lab.emulator.probes.hostprobe import ProbeOutput

    assert lab.net is not None
    outs: dict[str, tuple[ProbeOutput, Path]] = {}
    adir = run_dir / "agents"
    adir.mkdir(exist_ok=True)
    for host, plan in plans.items():
        pf, of = adir / f"{host}.plan.json", adir / f"{host}.out.jsonl"
        pf.write_text(json.dumps(plan))
        of.unlink(missing_ok=True)
        proc = lab.net.get(host).popen(
            [sys.executable, "-m", AGENT_MODULE, str(pf), str(of)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs.append(proc)
        lab.track_pid(proc.pid)
        outs[host] = (ProbeOutput(proc, host), of)
    for out, _ in outs.values():
        out.until("ready", 30)
    mark()
    t0 = time.monotonic() + START_DELAY_WALL_S
    wall0 = time.time() + (t0 - time.monotonic())
    if before_go is not None:
        before_go(t0)
    for out, _ in outs.values():
        assert out.proc.stdin is not None
        out.proc.stdin.write(f"go {t0!r}\n")
        out.proc.stdin.flush()
    deadline = max(p["deadline_s"] for p in plans.values())
    wall = ts.clock.wall(deadline)
    progress(f"replaying {sum(len(p['out']) for p in plans.values())} transfers over "
             f"{len(plans)} hosts (up to {wall:.0f} wall s)")  # fmt: skip
    lines: list[dict[str, Any]] = []
    for out, _of in outs.values():
        left = max(1.0, t0 + wall - time.monotonic()) + 10.0
        out.until("done", left)
    mark()
    for _out, of in outs.values():
        lines.extend(json.loads(ln) for ln in of.read_text().splitlines() if ln.strip())
    return lines, wall0


def _figures(
    rec: Recording,
    fabric: Fabric,
    ts: TimeScale,
    threshold: Threshold,
    lines: Sequence[dict[str, Any]],
    before: dict[str, dict[str, float]],
    after: dict[str, dict[str, float]],
    lab: Lab,
    run_dir: Path,
    judged: dict[str, Any] | None = None,
) -> dict[str, Any]:
    sent, got = figures.outcomes(lines)
    delta = {
        port: {
            "pauses": v.get("pauses", 0) - before.get(port, {}).get("pauses", 0),
            "paused_s": v.get("paused_s", 0.0) - before.get(port, {}).get("paused_s", 0.0),
        }
        for port, v in after.items()
    }
    report = lab.lossless_report()
    result = {
        "fabric": fabric.kind,
        "fabric_params": dict(fabric.spec.params),
        "resolution": ts.describe(),
        "lab": {
            "htb_burst_bytes": lab.options.htb_burst_bytes,
            "lossless_priority": lab.options.lossless_priority,
            "lossless_poll_s": lab.options.lossless_poll_s,
            "lossless_ingress": lab.options.lossless_ingress,
        },
        "xoff": {
            "real_bytes": threshold.xoff_bytes,
            "source": threshold.source,
            "frames": ts.threshold_frames(threshold.xoff_bytes, "xoff"),
        },
        "recording": {k: v for k, v in rec.meta.items() if k != "hosts"},
        "transfers": len(rec.transfers),
        "receive_errors": figures.receive_errors(lines),
        "classes": figures.class_figures(
            rec.transfers, sent, got, ideal_s(fabric), float(rec.meta.get("kv_fixed_s", 0.0))
        ),
        "pauses": figures.pause_figures(delta, ts.clock),
        "pause_reaction_p99_us": None
        if report is None or report.reaction_p99_s is None
        else round(ts.clock.modelled(report.reaction_p99_s) * 1e6, 2),
        **(judged or {}),
    }
    (run_dir / "replay.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _incomplete(rec: Recording, lines: Sequence[dict[str, Any]]) -> int:
    sent, got = figures.outcomes(lines)
    return sum(
        1
        for t in rec.transfers
        if t.id not in sent or (got.get(t.id) or {}).get("arrived_s") is None
    )


class CounterReader:
    """The lab's loss counters and the machine's CPU, read at two marks (`mark`: agents ready,
    agents done): every shaped port's qdisc drops and backlog and its tx/rx drops (switch ports
    in the root namespace, host ports in each host's), the CPUs' input-queue drops, each host's
    UDP counters, ovs-vswitchd's packet sockets' drops, per-interface drops, drop coverage
    counters and logged send errors, /proc/stat. A part that cannot be read is named in
    `missing` (the verdict then says it was unchecked)."""

    def __init__(self, lab: Lab) -> None:
        from zcube_lab.core.fabric.linkplan import port_rates

        self.lab = lab
        self.ports = set(port_rates(lab.fabric, lab.options.scale))
        self.switches = {n for n in self._nodes() if lab.fabric.is_switch(n)}
        self.readings: list[dict[str, dict[str, float]]] = []
        self.missing: set[str] = set()
        self.log_at = 0
        self.agent_errors = 0

    def _nodes(self) -> set[str]:
        return {p.rsplit("-eth", 1)[0] for p in self.ports}

    def is_switch_port(self, dev: str) -> bool:
        return dev.rsplit("-eth", 1)[0] in self.switches

    def mark(self) -> None:
        if not self.readings:
            report = self.lab.lossless_report()  # refreshed just before (`_pauses`)
            self.agent_errors = report.errors if report is not None else 0
        self.readings.append(self.read())

    def read(self) -> dict[str, dict[str, float]]:
        from zcube_lab.emulator.lab import ovs
        from zcube_lab.emulator.lab.netsampler import net_path, softnet_counters
        from zcube_lab.emulator.verdict.netstats import parse_proc_table

        out: dict[str, dict[str, float]] = {
            "qdisc_drops": {}, "tx_dropped": {}, "rx_dropped": {}, "udp": {}, "datapath": {},
        }  # fmt: skip
        if self.readings:  # the CPU's window closes before this reading's own work ...
            self._cpu(out)
        self._ports(out, None, "switch ports")
        try:
            out["softnet"] = {k: float(v) for k, v in softnet_counters().items()}
        except (OSError, ValueError):
            self.missing.add("the CPUs' input queues (/proc/net/softnet_stat)")
        assert self.lab.net is not None
        for h in self.lab.fabric.hosts:
            pid = self.lab.net.get(h.name).pid
            self._ports(out, pid, f"{h.name}'s ports")
            try:
                udp = parse_proc_table(net_path("snmp", pid).read_text()).get("Udp", {})
            except (OSError, ValueError):
                self.missing.add(f"{h.name}'s UDP counters")
                continue
            for k in ("InErrors", "RcvbufErrors", "SndbufErrors"):
                out["udp"][f"{h.name} {k}"] = float(udp.get(k, 0))
        if self.lab.datapath == "user":
            for sock in ovs.packet_sockets():
                if not sock.is_send_socket:
                    dev = sock.local.split(":", 1)[-1]
                    out["datapath"][f"{dev} socket drops"] = float(sock.drops)
            out["ovs_coverage"] = {k: float(v) for k, v in ovs_drop_counters().items()}
            self._refused(out)
            for name, stats in ovs_port_drops().items():
                if name in self.ports:
                    for k in ("tx_dropped", "rx_dropped"):
                        out.setdefault(f"ovs_{k}", {})[name] = float(stats.get(k, 0))
            if not self.readings:
                self.log_at = ovs.log_size()
                out["datapath"]["send errors logged"] = 0.0
            else:
                out["datapath"]["send errors logged"] = float(
                    len(ovs.send_errors_since(self.log_at))
                )
        if not self.readings:  # ... and opens after it
            self._cpu(out)
        return out

    def _refused(self, out: dict[str, dict[str, float]]) -> None:
        """Per switch port, what ovs-vswitchd forwarded to it less what its queue took, less the
        lossless agent's resume frames (its pauses so far): `ovsflows.refused`, cumulative."""
        from zcube_lab.emulator.replay import ovsflows

        forwarded = ovs_forwarded(sorted(self.switches))
        if not forwarded:  # the agents' own count still finds such losses, as unlocated
            return
        # the agent writes its report every second; the opening reading follows a fresh one
        report = self.lab.lossless_report(fresh=bool(self.readings))
        kicks = {p: float(v.get("pauses", 0)) for p, v in (report.ports if report else {}).items()}
        out["refused"] = ovsflows.refused(
            {p: float(n) for p, n in forwarded.items() if self.is_switch_port(p)},
            out.get("qdisc_packets", {}),
            out.get("backlog", {}),
            kicks,
        )

    def _cpu(self, out: dict[str, dict[str, float]]) -> None:
        from zcube_lab.emulator.verdict.cpustats import parse_proc_stat

        try:
            cpu = parse_proc_stat(Path("/proc/stat").read_text())["cpu"]
            out["cpu"] = {"total": cpu.total, "busy": cpu.busy, "steal": cpu.steal}
        except (OSError, ValueError):
            self.missing.add("CPU times (/proc/stat)")

    def _ports(self, out: dict[str, dict[str, float]], pid: int | None, what: str) -> None:
        """The shaped ports' queue and device counters in the root namespace or `pid`'s."""
        from zcube_lab.emulator.lab.netsampler import (
            READ_ERRORS,
            dev_counters,
            net_path,
            qdisc_stats,
        )

        try:
            for name, q in qdisc_stats(pid, timeout=10).items():
                if name in self.ports:
                    out["qdisc_drops"][name] = float(q.drops)
                    out.setdefault("qdisc_packets", {})[name] = float(q.packets)
                    out.setdefault("backlog", {})[name] = float(q.backlog_packets)
        except READ_ERRORS:
            self.missing.add(f"{what}' queues (tc)")
        try:
            for name, c in dev_counters(pid).items():
                if name in self.ports:
                    out["tx_dropped"][name] = float(c.tx_dropped)
                    out["rx_dropped"][name] = float(c.rx_dropped)
        except (OSError, ValueError):
            self.missing.add(f"{what}' counters ({net_path('dev', pid)})")

    def judge(
        self,
        lines: Sequence[dict[str, Any]],
        mtu: int,
        incomplete: int,
        load: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """`losses` (where the datagrams went), `cpu` (busy and steal shares between the two
        marks) and `verdict` (trusted, reasons; `load`: the pace's load, `losses.verdict`) for
        the replay's result."""
        from zcube_lab.core.replay import losses
        from zcube_lab.emulator.replay.agent import HEADER, IP_UDP_BYTES
        from zcube_lab.emulator.verdict.limits import Limits

        if len(self.readings) < 2:
            return {}
        delta = losses.diff(self.readings[0], self.readings[-1])
        flight = losses.in_flight(lines, mtu - IP_UDP_BYTES - HEADER.size)
        located = losses.locate(
            delta, self.is_switch_port, flight["datagrams"], end=self.readings[-1]
        )
        located["lost_bytes"] = flight["bytes"]
        located["unsent_bytes"] = flight["unsent_bytes"]
        cpu = losses.cpu_shares(delta)
        report = self.lab.lossless_report()  # refreshed just before (`_pauses`)
        lossless = None
        if report is not None:
            errors = max(0, report.errors - self.agent_errors)
            lossless = {"alive": self.lab.lossless_alive(), "errors": errors}
        limits = Limits()
        v = losses.verdict(
            located,
            cpu,
            incomplete=incomplete,
            lossless=lossless,
            missing=sorted(self.missing),
            steal_limit=limits.steal_mean,
            busy_limit=limits.machine_cpu,
            load=load,
        )
        return {"losses": located, "cpu": cpu, "verdict": v}


def ovs_drop_counters() -> dict[str, int]:
    """ovs-vswitchd's coverage counters whose name says drop (`ovs-appctl coverage/show`
    lists those counted so far, with their totals); empty when it does not answer."""
    try:
        out = subprocess.run(
            ["ovs-appctl", "coverage/show"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    found = {}
    for line in out.splitlines():
        parts = line.split()
        if parts and "drop" in parts[0] and "total:" in parts:
            with contextlib.suppress(ValueError, IndexError):
                found[parts[0]] = int(parts[parts.index("total:") + 1])
    return found


def ovs_forwarded(bridges: Sequence[str]) -> dict[str, int]:
    """Packets ovs-vswitchd's OpenFlow rules sent to each port of `bridges` (interface name),
    after one revalidation round (the rules' counters follow the datapath's only then); empty
    when it does not answer. `ovsflows` says why a replay reads them."""
    from zcube_lab.emulator.replay import ovsflows

    def ask(argv: list[str]) -> str:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True).stdout

    try:
        ask(["ovs-appctl", "revalidator/wait"])
        rows = json.loads(
            ask(["ovs-vsctl", "--format=json", "--columns=name,ofport", "list", "Interface"])
        )["data"]
        found: dict[str, int] = {}
        for bridge in bridges:
            dumps = [
                ask(["ovs-ofctl", "-O", "OpenFlow13", "--no-names", what, bridge])
                for what in ("dump-flows", "dump-groups", "dump-group-stats")
            ]
            sent = ovsflows.forwarded(*dumps)
            for name, number in rows:
                mine = str(name).rsplit("-eth", 1)[0] == bridge
                if mine and isinstance(number, int) and number in sent:
                    found[str(name)] = sent[number]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
        return {}
    return found


def ovs_port_drops() -> dict[str, dict[str, int]]:
    """Each OVS interface's statistics as ovs-vswitchd counts them (`ovs-vsctl list Interface`):
    its tx_dropped counts the packets of a batch it could not send (after a send the port's
    queue refused, the rest of that batch goes too, which the queue never counted)."""
    try:
        out = subprocess.run(
            ["ovs-vsctl", "--format=json", "--columns=name,statistics", "list", "Interface"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
        rows = json.loads(out)["data"]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return {}
    found = {}
    for name, stats in rows:
        if isinstance(stats, list) and stats[:1] == ["map"]:
            found[str(name)] = {str(k): int(v) for k, v in stats[1]}
    return found


def thresholds_for(chip: str | None, xoff_bytes: float | None, port_gbps: float) -> Threshold:
    """The XOFF asked for: explicit real bytes, else a chip's per-port share at `port_gbps`."""
    from zcube_lab.core.replay.timescale import chip_port_share_bytes

    if xoff_bytes is not None:
        return Threshold(float(xoff_bytes), f"{xoff_bytes:g} B (given)")
    name = chip or "51.2t"
    share = chip_port_share_bytes(name, port_gbps)
    return Threshold(share, f"{name} chip's share for a {port_gbps:g} Gb/s port ({share:,.0f} B)")


def slowest_port_gbps(fabrics: Sequence[Fabric]) -> float:
    """The slowest host port among the fabrics (a frame is at most this long on every one)."""
    hosts_links = [
        lk.gbps
        for f in fabrics
        for lk in f.links
        if any(h.name in (lk.node1, lk.node2) for h in f.hosts)
    ]
    return min(hosts_links)
