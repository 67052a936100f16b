"""Benchmark: what ovs-vswitchd costs per byte on a real ZCube n=4 fabric, for each datapath
lever, side by side in one run (issue 20, item 1). Needs root; about 1.5 minutes per lever and
repeat.

    sudo .venv/bin/python -m bench.datapath_levers                        # every lever, once
    sudo .venv/bin/python -m bench.datapath_levers --repeats 3 --seconds 30 --out levers.json

Each lever is a fresh 16-GPU ZCube lab (n=4: 8 switches, 64 switch ports; 100 Mb/s NICs,
ecmp, MTU 9000) under one fixed load: `--flows` paced TCP flows (iperf3 `-b --rate` each) from
the hosts of segments 0-1 to two hosts of segments 2-3 (a hotspot: many senders, few
receivers; a mix of one- and two-hop paths), `--seconds` measured after `--warmup`. The window
reads, before and after:

- ovs-vswitchd CPU (utime + stime of every thread of every datapath daemon the lab uses: the
  system one, from its pidfile, and the lab's private instances), over the fabric ingress
  (bytes the switches received from host ports, `rx_bytes` of the root-side interfaces):
  **CPU-ms per Mb**, the same number as cores per Mb/s;
- packets per wakeup: packets the switch ports received (`rx_packets` of every switch port: each
  hop counts) over the main threads' voluntary context switches (each `poll_block` that sleeps
  is one); and `ovs-appctl coverage/show`'s `poll_create_node` per `netdev_received` (port
  polls per received batch);
- the main threads' minor page faults per second;
- the daemons' cores over `--idle` seconds of the idle lab before the load (a PMD thread's
  spinning core shows here);
- then, on the idle lab, `bench/kv_fidelity.py`'s pulls (h0 -> h4, disjoint): the ratio
  (median - fixed) / ideal for each `--kv-sizes`.

A reference row, `one-flow`, is `bench/datapath.py`'s fabric (two hosts on one bridge,
unshaped, system instance) with one unpaced iperf3 flow: what the datapath costs per Mb at its
best on this machine. The goal of issue 20 is the hotspot row at most 3x that.

Levers (`--levers`, in this order; the names are `bench/datapath_ports.py`'s): `system` (today:
every bridge in the system Open vSwitch), `inst2` (two private ovs-vswitchd instances: the A
group and the B group), `inst8` (one per switch); any `instN`; `+hash` after any of them (e.g.
`system+hash`): every select group modified to `selection_method=hash,fields(ip_src,ip_dst,
tcp_src,tcp_dst)` after the controller installed it
(`zcube_lab.emulator.lab.ovsbridges.set_hash_selection`; OpenFlow 1.5 only, so a bench-side lever
for now); `instN+afxdp`, `instN+afxdp-nonpmd`, `instN+dpdk` (issue 34): the switch ports retyped
after bring-up; `@MTU` after any (e.g. `inst1+afxdp-nonpmd@3000`: AF_XDP ports take at most 3498).
One more column for these: the share of the switch ports' sent packets that their root qdisc (HTB)
sent, `tc -s qdisc`: 1.0 when shaping and the lossless agent's queues still see every packet, 0 when
the port type bypasses them. Medians over `--repeats` (the levers interleaved, so drift hits all of
them alike). Writes JSON with every repeat when `--out` is given.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.datapath_ports import (
    DPDK_HUGEPAGES,
    apply_port_type,
    hugepages,
    parse_lever,
    qdisc_share,
    switch_qdisc_sent,
)
from zcube_lab.adapters.ports import free_port
from zcube_lab.adapters.procs import raise_interrupt
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import Fabric, FabricSpec
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.lab import ovs, ovsbridges
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.options import LabOptions
from zcube_lab.emulator.lab.system import LabError

ZCUBE = FabricSpec.of("zcube", n=4)
ONE_BRIDGE = FabricSpec.of("clos", servers=2, gpus_per_server=1, spines=1)
SENDERS = tuple(f"h{i}" for i in range(8))  # segments 0 and 1
RECEIVERS = ("h10", "h15")  # segments 2 and 3
KV_PAIR = ("h0", "h4")  # kv_fidelity's ZCube pair
REFERENCE = "one-flow"
PROC = Path("/proc")
SYS_NET = Path("/sys/class/net")
SYSTEM_PIDFILE = Path("/var/run/openvswitch/ovs-vswitchd.pid")
_COVERAGE = re.compile(r"^(\w+)\s+.*total:\s*(\d+)", re.MULTILINE)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- pure: parsing and arithmetic ------------------------------------------------------------


def parse_coverage(text: str) -> dict[str, int]:
    """`ovs-appctl coverage/show` -> {counter: total} (pure)."""
    return {m.group(1): int(m.group(2)) for m in _COVERAGE.finditer(text)}


def parse_thread_stat(text: str) -> tuple[int, int]:
    """A /proc/<pid>/task/<tid>/stat line -> (utime + stime ticks, minor faults) (pure)."""
    fields = text[text.rindex(")") + 2 :].split()
    # after the name: state(0) ppid pgrp session tty tpgid flags minflt(7) ... utime(11) stime(12)
    return int(fields[11]) + int(fields[12]), int(fields[7])


def parse_voluntary_switches(status: str) -> int:
    """`voluntary_ctxt_switches` of a /proc/.../status text (pure)."""
    for line in status.splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise ValueError("no voluntary_ctxt_switches line")


@dataclass(frozen=True)
class Counters:
    """Everything the window reads, at one instant."""

    t: float
    cpu_ticks: int  # every thread of every datapath daemon
    main_ticks: tuple[int, ...]  # each daemon's main thread
    main_faults: int
    main_wakeups: int
    ingress_bytes: int  # switch ports facing hosts: received
    switch_packets: int  # every switch port: received
    coverage: Mapping[str, int]
    switch_tx: int = 0  # every switch port: sent
    qdisc_sent: int = 0  # every switch port's root qdisc: sent


@dataclass(frozen=True)
class Window:
    """One lever's figures over one load window."""

    lever: str
    seconds: float
    daemons: int
    ovs_cores: float
    ingress_mbps: float
    cpu_ms_per_mb: float
    switch_pps: float  # packets received by every switch port, per second
    wakeups_per_s: float  # the main threads' sleeps, summed
    packets_per_wakeup: float
    polls_per_batch: float | None
    main_faults_per_s: float
    busiest_main_cores: float  # the busiest daemon's main thread, in cores
    kv_ratios: Mapping[int, float | None]
    qdisc_share: float | None = None  # switch ports' sends their root qdisc saw (1.0: all)
    idle_cores: float = 0.0  # the datapath daemons on the idle lab (a PMD's spinning core)


def window(
    lever: str,
    before: Counters,
    after: Counters,
    clk_tck: int,
    kv_ratios: Mapping[int, float | None] | None = None,
    idle_cores: float = 0.0,
) -> Window:
    """The figures between two readings (pure)."""
    dt = after.t - before.t
    cpu_s = (after.cpu_ticks - before.cpu_ticks) / clk_tck
    mb = (after.ingress_bytes - before.ingress_bytes) * 8 / 1e6
    wakeups = after.main_wakeups - before.main_wakeups
    packets = after.switch_packets - before.switch_packets
    received = after.coverage.get("netdev_received", 0) - before.coverage.get("netdev_received", 0)
    polls = after.coverage.get("poll_create_node", 0) - before.coverage.get("poll_create_node", 0)
    mains = [
        (a - b) / clk_tck / dt for a, b in zip(after.main_ticks, before.main_ticks, strict=False)
    ]
    return Window(
        lever=lever,
        seconds=round(dt, 2),
        daemons=len(after.main_ticks),
        ovs_cores=round(cpu_s / dt, 4),
        ingress_mbps=round(mb / dt, 3),
        cpu_ms_per_mb=round(cpu_s * 1e3 / mb, 3) if mb > 0 else float("inf"),
        switch_pps=round(packets / dt, 1),
        wakeups_per_s=round(wakeups / dt, 1),
        packets_per_wakeup=round(packets / wakeups, 3) if wakeups > 0 else 0.0,
        polls_per_batch=round(polls / received, 2) if received > 0 else None,
        main_faults_per_s=round((after.main_faults - before.main_faults) / dt, 2),
        busiest_main_cores=round(max(mains, default=0.0), 4),
        kv_ratios=dict(kv_ratios or {}),
        qdisc_share=qdisc_share(before.qdisc_sent, after.qdisc_sent, before.switch_tx,
                                after.switch_tx),
        idle_cores=round(idle_cores, 4),
    )  # fmt: skip


def median_window(windows: Sequence[Window]) -> Window:
    """Field-wise medians of one lever's repeats (pure; KV ratios per size, ignoring Nones)."""
    first = windows[0]

    def med(name: str) -> float:
        return round(statistics.median(getattr(w, name) for w in windows), 4)

    sizes = sorted({s for w in windows for s in w.kv_ratios})
    kv: dict[int, float | None] = {}
    for size in sizes:
        got = [r for w in windows if (r := w.kv_ratios.get(size)) is not None]
        kv[size] = round(statistics.median(got), 3) if got else None
    polls = [w.polls_per_batch for w in windows if w.polls_per_batch is not None]
    shares = [w.qdisc_share for w in windows if w.qdisc_share is not None]
    return Window(
        lever=first.lever,
        seconds=med("seconds"),
        daemons=first.daemons,
        ovs_cores=med("ovs_cores"),
        ingress_mbps=med("ingress_mbps"),
        cpu_ms_per_mb=med("cpu_ms_per_mb"),
        switch_pps=med("switch_pps"),
        wakeups_per_s=med("wakeups_per_s"),
        packets_per_wakeup=med("packets_per_wakeup"),
        polls_per_batch=round(statistics.median(polls), 2) if polls else None,
        main_faults_per_s=med("main_faults_per_s"),
        busiest_main_cores=med("busiest_main_cores"),
        kv_ratios=kv,
        qdisc_share=round(statistics.median(shares), 3) if shares else None,
        idle_cores=med("idle_cores"),
    )


def verdicts(rows: Sequence[Window], base: str = "system") -> dict[str, str]:
    """Per lever: keep (CPU per Mb at least 20% below `base` with every KV ratio within 5% of
    `base`'s and its switch ports' qdiscs still seeing at least 95% of their sends), or why not
    (pure)."""
    by = {w.lever: w for w in rows}
    if base not in by:
        return {}
    ref = by[base]
    out = {}
    for w in rows:
        if w.lever in (base, REFERENCE):
            continue
        cut = 1 - w.cpu_ms_per_mb / ref.cpu_ms_per_mb
        worse = [
            s
            for s, r in w.kv_ratios.items()
            if r is None or (ref.kv_ratios.get(s) and abs(r / ref.kv_ratios[s] - 1) > 0.05)
        ]
        if w.qdisc_share is not None and w.qdisc_share < 0.95:
            out[w.lever] = f"drop: the qdiscs saw {w.qdisc_share:.0%} of the sends (shaping lost)"
        elif cut >= 0.20 and not worse:
            out[w.lever] = f"keep: CPU/Mb -{cut:.0%}, KV within 5%"
        elif cut < 0.20:
            out[w.lever] = f"drop: CPU/Mb {-cut:+.0%} (needs -20%)"
        else:
            out[w.lever] = f"drop: KV ratio off by >5% at {worse}"
    return out


def table(rows: Sequence[Window], reference: Window | None) -> str:
    """The side-by-side table (markdown)."""
    sizes = sorted({s for w in rows for s in w.kv_ratios})
    heads = ["lever", "daemons", "idle ovs cores", "ingress Mb/s", "ovs cores", "CPU-ms/Mb"]
    heads += ["x one-flow", "switch pkt/s", "wakeups/s", "pkts/wakeup", "polls/batch"]
    heads += ["main minflt/s", "busiest main", "qdisc share"]
    heads += [f"KV {s / 1e6:g} MB" for s in sizes]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for w in rows:
        ratio = "-"
        if reference is not None and reference.cpu_ms_per_mb > 0:
            ratio = f"{w.cpu_ms_per_mb / reference.cpu_ms_per_mb:.1f}"
        cells = [w.lever, str(w.daemons), f"{w.idle_cores:.3f}", f"{w.ingress_mbps:.1f}"]
        cells += [f"{w.ovs_cores:.3f}"]
        cells += [f"{w.cpu_ms_per_mb:.2f}", ratio, f"{w.switch_pps:.0f}", f"{w.wakeups_per_s:.0f}"]
        cells += [f"{w.packets_per_wakeup:.2f}"]
        cells += ["-" if w.polls_per_batch is None else f"{w.polls_per_batch:.1f}"]
        cells += [f"{w.main_faults_per_s:.1f}", f"{w.busiest_main_cores:.3f}"]
        cells += ["-" if w.qdisc_share is None else f"{w.qdisc_share:.3f}"]
        cells += ["-" if (r := w.kv_ratios.get(s)) is None else f"{r:.3f}" for s in sizes]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- adapters: /proc, /sys, the lab ----------------------------------------------------------


def datapath_pids() -> list[int]:
    """The system ovs-vswitchd (its pidfile) and every private instance's."""
    pids = []
    with contextlib.suppress(OSError, ValueError):
        pids.append(int(SYSTEM_PIDFILE.read_text().strip()))
    return pids + [p for p in ovs.vswitchd_pids() if p not in pids]


def read_counters(fabric: Fabric) -> Counters:
    cpu = faults = wakeups = 0
    mains = []
    for pid in datapath_pids():
        for task in (PROC / str(pid) / "task").iterdir():
            try:
                ticks, minflt = parse_thread_stat((task / "stat").read_text())
            except (OSError, ValueError):
                continue
            cpu += ticks
            if task.name == str(pid):
                mains.append(ticks)
                faults += minflt
                wakeups += parse_voluntary_switches((task / "status").read_text())
    coverage: dict[str, int] = {}
    for inst in [None, *ovs.running_instances()]:
        for k, v in parse_coverage(ovs.appctl(inst, "coverage/show")).items():
            coverage[k] = coverage.get(k, 0) + v
    ingress = packets = sent = 0
    host_facing = set(fabric.switch_interfaces([lk for lk in fabric.links if _to_host(fabric, lk)]))
    for intf in fabric.switch_interfaces():
        stats = SYS_NET / intf / "statistics"
        packets += int((stats / "rx_packets").read_text())
        sent += int((stats / "tx_packets").read_text())
        if intf in host_facing:
            ingress += int((stats / "rx_bytes").read_text())
    return Counters(
        t=time.monotonic(),
        cpu_ticks=cpu,
        main_ticks=tuple(mains),
        main_faults=faults,
        main_wakeups=wakeups,
        ingress_bytes=ingress,
        switch_packets=packets,
        coverage=coverage,
        switch_tx=sent,
        qdisc_sent=switch_qdisc_sent(fabric.switch_interfaces()),
    )


def _to_host(fabric: Fabric, link: object) -> bool:
    return not (fabric.is_switch(link.node1) and fabric.is_switch(link.node2))  # type: ignore[attr-defined]


def _iperf_load(
    lab: Lab, pairs: Iterable[tuple[str, str]], rate: str, seconds: float
) -> list[subprocess.Popen[bytes]]:
    """Start one iperf3 server and one paced client per pair (each its own port)."""
    procs = []
    clients = []
    for k, (src, dst) in enumerate(pairs):
        port = 5301 + k
        ip = lab.fabric.host(dst).interfaces[k % 2].ip
        procs.append(
            lab.net.get(dst).popen(
                ["iperf3", "-s", "-1", "-p", str(port), "-B", ip],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        clients.append((src, ip, port))
    time.sleep(0.5)
    for src, ip, port in clients:
        argv = ["iperf3", "-c", ip, "-p", str(port), "-t", str(int(seconds) + 1)]
        if rate:
            argv += ["-b", rate]
        procs.append(
            lab.net.get(src).popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
    return procs


def _hash_groups(lab: Lab) -> None:
    """Every select group of the lab to `selection_method=hash` (`ovsbridges.set_hash_selection`),
    once the controller has settled after the bridges' protocol change; checked."""
    names = [s.name for s in lab.fabric.switches]
    for name in names:
        ovsbridges.allow_openflow15(name)
    time.sleep(3)  # a protocol change may reconnect the controller, which reinstalls groups
    lab.wait_for_routes()
    changed = sum(ovsbridges.set_hash_selection(name) for name in names)
    methods = {m for name in names for m in ovsbridges.group_selection_methods(name)}
    log(f"  {changed} select groups now hash fields (methods seen: {sorted(methods)})")
    if methods != {"hash"}:
        raise LabError(f"select groups not all on selection_method=hash: {sorted(methods)}")


def _stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait(timeout=5)


def measure_lever(lever: str, args: argparse.Namespace, logs: Path) -> Window:
    """Bring up the lab for `lever`, load it, read the window, then the KV pulls."""
    from zcube_lab.emulator.probes.kvprobe import kv_fidelity

    reference = lever == REFERENCE
    spec = parse_lever("system" if reference else lever)
    fabric = build_fabric(ONE_BRIDGE if reference else ZCUBE)
    options = LabOptions(
        mtu=spec.mtu,
        scale=Scale(nic_mbps=100.0),
        policy="ecmp",
        of_port=free_port(),
        metrics_port=free_port(),
        log_dir=logs,
        datapath="user",
        shaped=not reference,
        ovs_instances=spec.instances,
    )
    pages = DPDK_HUGEPAGES if spec.port_type == "dpdk" else 0
    with hugepages(pages), Lab(fabric, options, progress=lambda msg: log(f"  {msg}")) as lab:
        if spec.hash:
            _hash_groups(lab)
        apply_port_type(lab, spec)
        idle = [read_counters(fabric)]
        time.sleep(args.idle)
        idle.append(read_counters(fabric))
        clk = os.sysconf("SC_CLK_TCK")
        idle_cores = (idle[1].cpu_ticks - idle[0].cpu_ticks) / clk / (idle[1].t - idle[0].t)
        if reference:
            pairs = [("h0", "h1")]
            rate = ""
        else:
            pairs = [(s, RECEIVERS[i % len(RECEIVERS)]) for i, s in enumerate(SENDERS)]
            pairs = pairs[: args.flows]
            rate = args.rate
        procs = _iperf_load(lab, pairs, rate, args.warmup + args.seconds)
        try:
            time.sleep(args.warmup)
            before = read_counters(fabric)
            time.sleep(args.seconds)
            after = read_counters(fabric)
        finally:
            _stop(procs)
        ratios: dict[int, float | None] = {}
        if not reference and args.kv_sizes:
            sizes = [int(float(s)) for s in args.kv_sizes.split(",")]
            fid = kv_fidelity(lab, *KV_PAIR, sizes, repeat=args.kv_repeat)
            ratios = {r.size: r.ratio for r in fid.rows}
        return window(lever, before, after, clk, ratios, idle_cores)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levers", default="system,inst2,inst8", help="comma-separated")
    parser.add_argument("--repeats", type=int, default=1, help="windows per lever (median)")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=3.0, help="load before the window")
    parser.add_argument("--idle", type=float, default=5.0, help="idle window before the load")
    parser.add_argument("--flows", type=int, default=8, help=f"paced flows (<= {len(SENDERS)})")
    parser.add_argument("--rate", default="6M", help="iperf3 -b per flow")
    parser.add_argument("--kv-sizes", default="1e6,3e6,10e6", help="KV pull bytes ('' = none)")
    parser.add_argument("--kv-repeat", type=int, default=3, help="pulls per KV size")
    parser.add_argument("--no-reference", action="store_true", help="skip the one-flow row")
    parser.add_argument("--out", type=Path, help="write every window as JSON here")
    args = parser.parse_args()
    levers = [x for x in args.levers.split(",") if x]
    for lever in levers:
        try:
            parse_lever(lever)
        except ValueError as exc:
            parser.error(str(exc))
    if not args.no_reference:
        levers.append(REFERENCE)
    signal.signal(signal.SIGTERM, raise_interrupt)
    windows: dict[str, list[Window]] = {lv: [] for lv in levers}
    failed: dict[str, str] = {}  # a lever this machine cannot run: why (the others go on)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for rep in range(args.repeats):
                for lever in [lv for lv in levers if lv not in failed]:
                    log(f"» repeat {rep + 1}/{args.repeats}: {lever}")
                    try:
                        w = measure_lever(lever, args, Path(tmp) / f"{lever}-{rep}")
                    except (LabError, RuntimeError, subprocess.SubprocessError) as exc:
                        failed[lever] = str(exc)
                        log(f"  {lever} failed (torn down; not tried again): {exc}")
                        continue
                    log(f"  {w}")
                    windows[lever].append(w)
        except KeyboardInterrupt:
            log("interrupted: labs torn down")
            return 130
    for lever, why in failed.items():
        print(f"{lever}: could not run: {why}")
    rows = [median_window(ws) for ws in windows.values() if ws]
    ref = next((w for w in rows if w.lever == REFERENCE), None)
    print(table(rows, ref))
    for lever, verdict in verdicts(rows).items():
        print(f"{lever}: {verdict}")
    print(f"\n{time.strftime('%Y-%m-%d %H:%M')}, median of {args.repeats} repeat(s)")
    if args.out:
        data: dict[str, object] = {lv: [asdict(w) for w in ws] for lv, ws in windows.items()}
        data["failed"] = failed
        args.out.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
