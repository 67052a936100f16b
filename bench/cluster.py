"""The lab split over two machines (issue 13): bring-up, cross-machine link rate, tunnel capacity.

For ZCube n=4 and n=6 and ROFT 4x4 and 6x6, each split over this machine and a second one
(`--machines`, default the `scripts/peer.sh` system on this machine), median of --repeat runs:
seconds to measure the tunnel, to build, to have every rule, to reach every pair, to tear down;
the cut (links, emulated Mb/s); the tunnel's own capacity each way and round-trip time; iperf3
goodput from a host on machine 0 to a host on machine 1 (every such path crosses a tunnel)
against the rate of the sender's port; and the same fabric on one machine, run alternately in
the same session, for the bring-up cost of going remote. Needs root on both machines.

    scripts/peer.sh start
    .venv/bin/python -m bench.cluster --repeat 3 [--json bench/results/cluster.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from zcube_lab.core.fabric.addressing import WIRE_HERE, WIRE_PEER
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import Fabric, FabricSpec
from zcube_lab.core.fabric.hostplan import egress_interface
from zcube_lab.core.fabric.linkplan import ends
from zcube_lab.emulator.cluster.lab import ClusterLab
from zcube_lab.emulator.cluster.remote import parse_machines
from zcube_lab.emulator.lab.measure import iperf3
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.options import LabOptions

SPECS = {
    "zcube n=4": FabricSpec.of("zcube", n=4),
    "zcube n=6": FabricSpec.of("zcube", n=6),
    "roft 4x4": FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2),
    "roft 6x6": FabricSpec.of("roft", servers=6, gpus_per_server=6, spines=2),
}


def _port_rate(lab: Lab, fabric: Fabric, src: str, dst_ip: str) -> float:
    host = fabric.host(src)
    port = egress_interface(host, dst_ip) or 0
    name = f"{src}-eth{port}"
    link = next(lk for lk in fabric.links if any(n == name for _node, n in ends(lk)))
    return lab.options.scale.link_mbps(fabric, link.gbps)


def one_run(spec: FabricSpec, machines: str | None, seconds: float) -> dict[str, Any]:
    """Bring a fabric up (on two machines, or one when `machines` is None), measure, stop."""
    fabric = build_fabric(spec)
    t0 = time.monotonic()
    if machines:
        lab: Lab = ClusterLab(fabric, parse_machines(machines), LabOptions())
    else:
        lab = Lab(fabric, LabOptions())
    out: dict[str, Any] = {}
    try:
        lab.start()
        out["routed_s"] = time.monotonic() - t0
        failures = lab.check_reachability()
        out["reachable_s"] = time.monotonic() - t0
        out["unreachable"] = sum(len(v) for v in failures.values())
        out["phases"] = dict(lab.times.phases)
        if isinstance(lab, ClusterLab):
            split = lab.split
            src, dst = split.per_machine[0].hosts[0], split.per_machine[1].hosts[-1]
            (tunnel,) = lab.tunnels.values()
            out.update(
                cut_links=len(split.cut),
                cut_mbps=split.cut_mbps,
                tunnel=tunnel.to_dict(),
            )
        else:
            src, dst = fabric.hosts[0].name, fabric.hosts[-1].name
        ip = fabric.host(dst).interfaces[-1].ip
        out["pair"] = f"{src}->{dst}"
        out["port_mbps"] = _port_rate(lab, fabric, src, ip)
        out["iperf_mbps"] = iperf3(lab, src, ip, seconds=seconds)
        t1 = time.monotonic()
    finally:
        lab.stop()
    out["teardown_s"] = time.monotonic() - t1
    return out


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", default=f"{WIRE_HERE},{WIRE_PEER}", help="wire addresses")
    parser.add_argument("--repeat", type=int, default=3, help="runs per fabric (median shown)")
    parser.add_argument("--fabrics", default=",".join(SPECS), help=f"some of {list(SPECS)}")
    parser.add_argument("--iperf-seconds", type=float, default=5.0)
    parser.add_argument("--json", type=Path, help="write every run here")
    args = parser.parse_args()

    results: dict[str, Any] = {}
    head = (
        f"{'fabric':<11}{'where':<7}{'tunnel s':>9}{'routed s':>9}{'reach s':>8}{'down s':>7}"
        f"{'cut':>5}{'cut Mb/s':>9}{'tunnel Mb/s':>13}{'rtt ms':>7}{'port':>6}{'iperf':>7}"
    )
    print(head)
    for name in args.fabrics.split(","):
        spec = SPECS[name]
        both: dict[str, list[dict[str, Any]]] = {"2 mach": [], "1 mach": []}
        for _ in range(args.repeat):  # alternate, so both see the same machine state
            both["2 mach"].append(one_run(spec, args.machines, args.iperf_seconds))
            both["1 mach"].append(one_run(spec, None, args.iperf_seconds))
        results[name] = both
        for where, runs in both.items():
            bad = sum(r["unreachable"] for r in runs)
            if bad:
                print(f"{name} {where}: {bad} unreachable address pairs")
            tunnel = ""
            cut = ""
            if where == "2 mach":
                caps = [r["tunnel"]["capacity_mbps"] for r in runs]
                rtts = [r["tunnel"]["rtt_ms"] for r in runs]
                tunnel = f"{statistics.median(caps):>13.0f}{statistics.median(rtts):>7.3f}"
                cut = f"{runs[0]['cut_links']:>5}{runs[0]['cut_mbps']:>9.0f}"
                tun_s = statistics.median(r["phases"].get("tunnels", 0.0) for r in runs)
            else:
                tunnel, cut, tun_s = " " * 20, " " * 14, 0.0
            print(
                f"{name:<11}{where:<7}{tun_s:>9.1f}{_median(runs, 'routed_s') - tun_s:>9.1f}"
                f"{_median(runs, 'reachable_s') - tun_s:>8.1f}{_median(runs, 'teardown_s'):>7.1f}"
                f"{cut}{tunnel}{runs[0]['port_mbps']:>6.0f}{_median(runs, 'iperf_mbps'):>7.1f}",
                flush=True,
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
        print(f"runs written to {args.json}")


if __name__ == "__main__":
    main()
