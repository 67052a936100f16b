"""The Open vSwitch datapath's ceiling on this machine (issue 11): iperf3 goodput and
packets/s between two hosts on one bridge, unshaped, for each MTU and number of parallel flows.

Writes `DatapathResults` (`zcube_lab.emulator.lab.datapath_ceiling`) to this machine's state folder,
/var/lib/zcube-lab/datapath.json (`$ZCUBE_LAB_MEASUREMENTS` when set): `zcube-lab doctor` shows
it and the rate guard (`LabOptions`) uses the best total at the lab's MTU. A copy goes to
bench/results/datapath.json, the record the docs quote (`--record`).
Packets/s counts full-size segments (payload / (MTU - 52)). Needs root; about a minute.

    sudo .venv/bin/python -m bench.datapath

With `--rate MBPS` it measures CPU at a fixed load instead of the ceiling: iperf3 paced at MBPS in
all, the machine's busy CPU (/proc/stat) and ovs-vswitchd's over the run, less the same lab's
idle CPU over as long, per Mb carried; written to bench/results/datapath_cpu.json (not the
ceiling's file). Run it once per `--datapath` to compare the kernel and userspace datapaths.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import time
from pathlib import Path

from zcube_lab.adapters.procs import raise_interrupt
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.lab.datapath_ceiling import (
    RESULTS_PATH,
    DatapathResults,
    Measurement,
    cores,
    machine_id,
)
from zcube_lab.emulator.lab.measure import iperf3
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.options import LabOptions
from zcube_lab.emulator.lab.system import LabError
from zcube_lab.emulator.verdict.cpustats import parse_pid_stat, parse_proc_stat

# Two hosts on one leaf (the idle spine is the builder's minimum): every packet crosses one
# bridge, as on a same-rail or same-segment path.
SPEC = FabricSpec.of("clos", servers=2, gpus_per_server=1, spines=1)
HEADERS = 52  # IPv4 (20) + TCP with timestamps (32): what a full-size segment does not carry
RECORD_PATH = Path(__file__).resolve().parent / "results" / "datapath.json"
CPU_RESULTS_PATH = RECORD_PATH.with_name("datapath_cpu.json")
VSWITCHD_PID = Path("/var/run/openvswitch/ovs-vswitchd.pid")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def measure_mtu(
    mtu: int, flows: list[int], seconds: float, datapath: str
) -> tuple[list[Measurement], str]:
    """Bring up the two-host lab at `mtu`, unshaped, and run iperf3 for each flow count;
    returns the points and the datapath used."""
    fabric = build_fabric(SPEC)
    src, dst = fabric.hosts[0], fabric.hosts[1]
    options = LabOptions(mtu=mtu, datapath=datapath, shaped=False)
    points = []
    log(f"» MTU {mtu}: bringing up two hosts on one bridge (unshaped)")
    with Lab(fabric, options, progress=lambda msg: log(f"  {msg}")) as lab:
        log(f"  datapath {lab.datapath}")
        for n in flows:
            mbps = iperf3(lab, src.name, dst.interfaces[0].ip, seconds=seconds, parallel=n)
            pps = mbps * 1e6 / 8 / (mtu - HEADERS)
            points.append(Measurement(mtu, n, gbps=round(mbps / 1000, 3), pps=round(pps)))
            log(f"  MTU {mtu}, {n} flow(s): {mbps / 1000:.2f} Gb/s, {pps / 1000:.1f} kpps")
        return points, lab.datapath


def cpu_s() -> tuple[float, float]:
    """The machine's busy CPU-seconds (all cores) and ovs-vswitchd's, cumulative."""
    clk = os.sysconf("SC_CLK_TCK")
    busy = parse_proc_stat(Path("/proc/stat").read_text())["cpu"].busy / clk
    try:
        pid = int(VSWITCHD_PID.read_text())
        vswitchd = parse_pid_stat(Path(f"/proc/{pid}/stat").read_text()).ticks / clk
    except (OSError, ValueError):
        vswitchd = 0.0
    return busy, vswitchd


def paced_iperf3(
    lab: Lab, src: str, dst_ip: str, seconds: float, parallel: int, mbps: float
) -> tuple[float, float, float]:
    """iperf3 paced at `mbps` in all (split over the flows): goodput in Mb/s and the machine's
    and ovs-vswitchd's CPU-seconds over the run."""
    before = cpu_s()
    goodput = iperf3(lab, src, dst_ip, seconds=seconds, parallel=parallel, mbps=mbps)
    after = cpu_s()
    return goodput, after[0] - before[0], after[1] - before[1]


def measure_cpu(
    mtu: int, flows: list[int], seconds: float, datapath: str, rate: float
) -> tuple[list[dict[str, float]], str]:
    """CPU per Mb at a paced load of `rate` Mb/s: the two-host lab at `mtu`, unshaped."""
    fabric = build_fabric(SPEC)
    src, dst = fabric.hosts[0], fabric.hosts[1]
    options = LabOptions(mtu=mtu, datapath=datapath, shaped=False)
    rows = []
    log(f"» MTU {mtu}: two hosts on one bridge, load {rate:g} Mb/s")
    with Lab(fabric, options, progress=lambda msg: log(f"  {msg}")) as lab:
        log(f"  datapath {lab.datapath}")
        for n in flows:
            before = cpu_s()
            time.sleep(seconds)  # the idle lab: what the load's figures are net of
            idle = cpu_s()
            mbps, busy, vswitchd = paced_iperf3(
                lab, src.name, dst.interfaces[0].ip, seconds, n, rate
            )
            idle_busy, idle_vswitchd = idle[0] - before[0], idle[1] - before[1]
            mb = mbps * seconds
            row = {
                "mtu": mtu,
                "flows": n,
                "rate_mbps": rate,
                "mbps": round(mbps, 2),
                "busy_cpu_s": round(busy, 3),
                "idle_busy_cpu_s": round(idle_busy, 3),
                "vswitchd_cpu_s": round(vswitchd, 3),
                "idle_vswitchd_cpu_s": round(idle_vswitchd, 3),
                "cpu_ms_per_mb": round(1000 * (busy - idle_busy) / mb, 4),
                "vswitchd_ms_per_mb": round(1000 * (vswitchd - idle_vswitchd) / mb, 4),
            }
            rows.append(row)
            log(
                f"  MTU {mtu}, {n} flow(s): {mbps:.1f} Mb/s, machine "
                f"{row['cpu_ms_per_mb']:.3f} CPU-ms/Mb, ovs-vswitchd "
                f"{row['vswitchd_ms_per_mb']:.3f} CPU-ms/Mb (net of the idle lab)"
            )
        return rows, lab.datapath


def table(results: DatapathResults) -> str:
    """The figures as a plain table."""
    rows = [f"{'MTU':>6}{'flows':>7}{'Gb/s':>8}{'kpps':>8}"]
    rows += [f"{p.mtu:>6}{p.flows:>7}{p.gbps:>8.2f}{p.pps / 1000:>8.1f}" for p in results.points]
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mtus", type=int, nargs="+", default=[1500, 9000], help="MTUs")
    parser.add_argument(
        "--flows", type=int, nargs="+", default=[1, 4, 8], help="parallel TCP flows"
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="iperf3 seconds per point")
    parser.add_argument(
        "--datapath", choices=["auto", "user", "kernel"], default="auto", help="OVS datapath"
    )
    parser.add_argument(
        "--rate", type=float, help="CPU per Mb at this paced load (Mb/s in all), not the ceiling"
    )
    parser.add_argument("--out", type=Path, help=f"JSON file to write (default {RESULTS_PATH})")
    parser.add_argument(
        "--record", type=Path, default=RECORD_PATH, help="the copy the docs quote (ceiling only)"
    )
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, raise_interrupt)
    if args.rate is not None:
        return main_cpu(args)
    args.out = args.out or RESULTS_PATH
    t0 = time.monotonic()
    points: list[Measurement] = []
    datapath = args.datapath
    try:
        for mtu in args.mtus:
            measured, datapath = measure_mtu(mtu, args.flows, args.seconds, args.datapath)
            points += measured
    except KeyboardInterrupt:
        log(f"interrupted after {time.monotonic() - t0:.0f} s: torn down, nothing written")
        return 130
    except LabError as exc:
        log(f"datapath bench: {exc}")
        return 1
    results = DatapathResults(
        machine_id=machine_id(),
        cores=cores(),
        measured_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        seconds=round(time.monotonic() - t0, 1),
        bridges=1,
        points=tuple(points),
        datapath=datapath,
    )
    results.write(args.out)
    results.write(args.record)
    print(table(results))
    log(f"took {results.seconds:.0f} s; wrote {args.out} and {args.record}")
    return 0


def main_cpu(args: argparse.Namespace) -> int:
    """`--rate`: CPU per Mb at a fixed load, written apart from the ceiling's file."""
    out = args.out or CPU_RESULTS_PATH
    t0 = time.monotonic()
    rows: list[dict[str, float]] = []
    datapath = args.datapath
    try:
        for mtu in args.mtus:
            measured, datapath = measure_cpu(
                mtu, args.flows, args.seconds, args.datapath, args.rate
            )
            rows += measured
    except KeyboardInterrupt:
        log(f"interrupted after {time.monotonic() - t0:.0f} s: torn down, nothing written")
        return 130
    except LabError as exc:
        log(f"datapath bench: {exc}")
        return 1
    result = {
        "machine_id": machine_id(),
        "cores": cores(),
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "datapath": datapath,
        "seconds_per_point": args.seconds,
        "points": rows,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{'MTU':>6}{'flows':>7}{'Mb/s':>9}{'CPU-ms/Mb':>11}{'vswitchd':>10}  datapath {datapath}"
    )
    for r in rows:
        print(
            f"{r['mtu']:>6}{r['flows']:>7}{r['mbps']:>9.1f}{r['cpu_ms_per_mb']:>11.3f}"
            f"{r['vswitchd_ms_per_mb']:>10.3f}"
        )
    log(f"took {time.monotonic() - t0:.0f} s; wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
