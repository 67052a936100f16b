"""Benchmark: does userspace TSO make the shaped userspace datapath cheaper per byte, at a GSO
size the lab could keep? (issue 20, item 1, the lever the levers bench left untried.)

One private ovs-vswitchd per variant (`zcube_lab.emulator.lab.ovs.start_instance`, with the lab's
malloc thresholds), one `dummy` bridge with two system ports, two host namespaces, MTU 9000; HTB at
`--rate` Mb/s with a byte FIFO on the sending host's port and on the switch port towards the
receiver (the lab's two shaped queues on a one-hop path); one iperf3 flow for `--seconds`.
Per variant it prints goodput, ovs-vswitchd's CPU (utime + stime of every thread) in cores and
per Mb of goodput, the packets the switch port sent (a GSO packet counts once), and the
store-and-forward time of the largest GSO packet at the emulated rate: what each hop adds to a
packet's latency, since HTB charges a GSO packet whole and sends it as one.

Variants (`--variants`): `off` (today: offloads off on every interface, TSO not enabled), and
`tso-N` (`other_config:userspace-tso-enable=true`, tx/tso/gso on at both ends of both veths,
`gso_max_size N` on every interface). Interleaved over `--repeats`; medians with [min-max].
Needs root; about 15 s per variant and repeat.

    sudo .venv/bin/python -m bench.datapath_tso
    sudo .venv/bin/python -m bench.datapath_tso --rate 200 --variants off,tso-65536
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from zcube_lab.adapters.procs import raise_interrupt
from zcube_lab.emulator.lab import ovs

MTU = 9000
NS = ("zcl-tso-a", "zcl-tso-b")
HOST_IF = ("zts-a1", "zts-b1")  # in the namespaces
PORT_IF = ("zts-a0", "zts-b0")  # the switch's ports, in the root namespace
ADDR = ("10.250.0.1", "10.250.0.2")
FIFO_BYTES = 400_000
BRIDGE = "ztsobr"


@dataclass(frozen=True)
class Variant:
    name: str
    tso: bool
    gso_max: int | None


def parse_variant(name: str) -> Variant:
    """`off` or `tso-N` (N: gso_max_size in bytes, 2 MTU-sized segments to 65536; pure)."""
    if name == "off":
        return Variant(name, False, None)
    head, _, size = name.partition("-")
    if head == "tso" and size.isdigit() and 2 * MTU <= int(size) <= 65536:
        return Variant(name, True, int(size))
    raise ValueError(f"unknown variant {name!r}: off or tso-N with {2 * MTU} <= N <= 65536")


@dataclass(frozen=True)
class Window:
    variant: str
    goodput_mbps: float
    ovs_cores: float
    port_packets: int
    retransmits: int

    @property
    def cpu_ms_per_mb(self) -> float:
        return self.ovs_cores * 1000 / self.goodput_mbps


def sh(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()[:300]}")
    return done.stdout


def in_ns(ns: str, *argv: str, check: bool = True) -> str:
    return sh("ip", "netns", "exec", ns, *argv, check=check)


def cpu_ticks(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total


def shape(ns: str | None, dev: str, rate: float) -> None:
    tc = ["tc"] if ns is None else ["tc", "-n", ns]
    sh(*tc, "qdisc", "replace", "dev", dev, "root", "handle", "5:", "htb", "default", "1")
    sh(*tc, "class", "replace", "dev", dev, "parent", "5:", "classid", "5:1", "htb", "rate",
       f"{rate}mbit", "burst", "15k")  # fmt: skip
    sh(*tc, "qdisc", "replace", "dev", dev, "parent", "5:1", "handle", "10:", "bfifo", "limit",
       str(FIFO_BYTES))  # fmt: skip


def sent_packets(dev: str) -> int:
    """Packets (skbs: a GSO packet counts once) the veth sent. Not the qdisc's count: a GSO
    packet Open vSwitch sends through its packet socket arrives with gso_segs 0, and the qdisc
    counts its packets by gso_segs."""
    return int(Path(f"/sys/class/net/{dev}/statistics/tx_packets").read_text())


@contextlib.contextmanager
def testbed(variant: Variant, rate: float) -> Iterator[int]:
    """Two namespaces on one bridge of a fresh private instance; yields its ovs-vswitchd pid."""
    rundir = Path(tempfile.mkdtemp(prefix="zcl-tso-"))
    config = {"userspace-tso-enable": "true"} if variant.tso else {}
    inst = ovs.start_instance(rundir, other_config=config)
    try:
        for ns in NS:
            sh("ip", "netns", "add", ns)
        for ns, host, port, addr in zip(NS, HOST_IF, PORT_IF, ADDR, strict=True):
            sh("ip", "link", "add", port, "type", "veth", "peer", "name", host, "netns", ns)
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", host)
            sh("ip", "-n", ns, "link", "set", host, "mtu", str(MTU), "up")
            sh("ip", "link", "set", port, "mtu", str(MTU), "up")
            state = "on" if variant.tso else "off"
            features = ("tx", state, "tso", state, "gso", state, "gro", "off")
            sh("ethtool", "-K", port, *features, check=False)
            in_ns(ns, "ethtool", "-K", host, *features, check=False)
            if variant.gso_max:
                sh("ip", "link", "set", port, "gso_max_size", str(variant.gso_max))
                sh("ip", "-n", ns, "link", "set", host, "gso_max_size", str(variant.gso_max))
        sh(*ovs.vsctl_argv(inst), "add-br", BRIDGE, "--", "set", "bridge", BRIDGE,
           f"datapath_type={ovs.PRIVATE_DATAPATH_TYPE}", "--", "add-port", BRIDGE, PORT_IF[0],
           "--", "add-port", BRIDGE, PORT_IF[1])  # fmt: skip
        # Open vSwitch resets a port's qdisc when it adds the port: shape afterwards.
        shape(NS[0], HOST_IF[0], rate)
        shape(None, PORT_IF[1], rate)
        deadline = time.monotonic() + 10
        while in_ns(NS[0], "ping", "-c", "1", "-W", "1", ADDR[1], check=False).find(" 0%") < 0:
            if time.monotonic() > deadline:
                raise RuntimeError("the two namespaces do not reach each other")
        yield inst.pids()[ovs.VSWITCHD]
    finally:
        for ns in NS:
            sh("ip", "netns", "del", ns, check=False)
        for port in PORT_IF:
            sh("ip", "link", "del", port, check=False)
        ovs.stop_instance(inst)


def measure(variant: Variant, rate: float, seconds: float) -> Window:
    with testbed(variant, rate) as pid:
        server = subprocess.Popen(
            ["ip", "netns", "exec", NS[1], "iperf3", "-s", "-1", "-B", ADDR[1]],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            time.sleep(0.5)
            before, t0 = cpu_ticks(pid), time.monotonic()
            out = in_ns(NS[0], "iperf3", "-c", ADDR[1], "-t", str(seconds), "-J")
            cores = (cpu_ticks(pid) - before) / 100 / (time.monotonic() - t0)
        finally:
            server.kill()
            server.wait()
        end = json.loads(out[out.find("{") :])["end"]
        return Window(
            variant.name,
            goodput_mbps=end["sum_received"]["bits_per_second"] / 1e6,
            ovs_cores=cores,
            port_packets=sent_packets(PORT_IF[1]),
            retransmits=end["sum_sent"].get("retransmits", 0),
        )


def spread(values: Sequence[float], fmt: str) -> str:
    med = statistics.median(values)
    return f"{med:{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"


def table(windows: Sequence[Window], variants: Sequence[Variant], rate: float) -> str:
    lines = [
        "| variant | goodput Mb/s | ovs cores | CPU-ms/Mb | vs off | switch-port packets |"
        " largest packet per hop | retransmits |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = [w.cpu_ms_per_mb for w in windows if w.variant == "off"]
    for v in variants:
        rows = [w for w in windows if w.variant == v.name]
        cost = [w.cpu_ms_per_mb for w in rows]
        ratio = f"{statistics.median(cost) / statistics.median(base) - 1:+.0%}" if base else "-"
        largest = v.gso_max or MTU
        hop_ms = largest * 8 / (rate * 1e3)
        lines.append(
            f"| {v.name} | {spread([w.goodput_mbps for w in rows], '.1f')} "
            f"| {spread([w.ovs_cores for w in rows], '.3f')} | {spread(cost, '.2f')} | {ratio} "
            f"| {statistics.median([w.port_packets for w in rows]):.0f} | {hop_ms:.2f} ms "
            f"| {sum(w.retransmits for w in rows)} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="off,tso-18000,tso-36000,tso-65536")
    parser.add_argument("--rate", type=float, default=50.0, help="emulated Mb/s of both queues")
    parser.add_argument("--seconds", type=float, default=8.0, help="iperf3 window")
    parser.add_argument("--repeats", type=int, default=3, help="windows per variant (median)")
    args = parser.parse_args(argv)
    try:
        variants = [parse_variant(v) for v in args.variants.split(",")]
    except ValueError as err:
        parser.error(str(err))
    signal.signal(signal.SIGTERM, raise_interrupt)
    windows = []
    for r in range(args.repeats):
        for v in variants:
            print(f"» repeat {r + 1}/{args.repeats}: {v.name}", file=sys.stderr, flush=True)
            w = measure(v, args.rate, args.seconds)
            print(f"  {w} {w.cpu_ms_per_mb:.2f} CPU-ms/Mb", file=sys.stderr, flush=True)
            windows.append(w)
    print(table(windows, variants, args.rate))
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"\n{stamp}, {args.rate:g} Mb/s, median of {args.repeats} repeat(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
