"""Capacity of the Open vSwitch datapath on this machine (issue 11): iperf3 goodput and
packets/s between two hosts on one bridge, unshaped, for each MTU and number of parallel flows.

Writes bench/results/datapath.json (`emulator.lab.capacity.DatapathResults`): `zcube-lab
doctor` shows it and the rate guard (`LabOptions`) uses the best total at the lab's MTU.
Packets/s counts full-size segments (payload / (MTU - 52)). Needs root; about a minute.

    sudo .venv/bin/python bench/datapath.py
"""

from __future__ import annotations

import argparse
import datetime
import signal
import sys
import time
from pathlib import Path

from emulator.lab.capacity import (
    RESULTS_PATH,
    DatapathResults,
    Measurement,
    cores,
    machine_id,
)
from emulator.lab.measure import iperf3
from emulator.lab.network import Lab, LabOptions
from emulator.lab.system import LabError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.procs import raise_interrupt

# Two hosts on one leaf (the idle spine is the builder's minimum): every packet crosses one
# bridge, as on a same-rail or same-segment path.
SPEC = FabricSpec.of("clos", servers=2, gpus_per_server=1, spines=1)
HEADERS = 52  # IPv4 (20) + TCP with timestamps (32): what a full-size segment does not carry


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
    parser.add_argument("--out", type=Path, default=RESULTS_PATH, help="JSON file to write")
    args = parser.parse_args()

    signal.signal(signal.SIGTERM, raise_interrupt)
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
    print(table(results))
    log(f"took {results.seconds:.0f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
