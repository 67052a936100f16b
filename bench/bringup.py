"""Bring-up time and link-rate fidelity of the emulated fabrics (issue 2's benchmark).

Prints, for ZCube n=4,6,8 and ROFT with the same GPU counts, seconds to build, to have every
rule installed and to pass the all-pairs reachability check (median of --repeat runs), then
iperf3 goodput on an uncontended path against the configured rate. Needs root.

    .venv/bin/python -m bench.bringup --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import time

from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.hostplan import egress_interface
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.lab.measure import iperf3
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.options import LabOptions

SIZES = {
    16: (FabricSpec.of("zcube", n=4), FabricSpec.of("roft", servers=4, gpus_per_server=4)),
    36: (FabricSpec.of("zcube", n=6), FabricSpec.of("roft", servers=6, gpus_per_server=6)),
    64: (FabricSpec.of("zcube", n=8), FabricSpec.of("roft", servers=8, gpus_per_server=8)),
}


def bring_up(spec: FabricSpec, nic_mbps: float) -> dict[str, float]:
    fabric = build_fabric(spec)
    t0 = time.monotonic()
    with Lab(fabric, LabOptions(scale=Scale(nic_mbps=nic_mbps))) as lab:
        built = sum(lab.times.phases[k] for k in ("cleanup", "controller", "build", "start"))
        routed = time.monotonic() - t0
        failures = lab.check_reachability()
        reachable = time.monotonic() - t0
        bad = sum(len(v) for v in failures.values())
        if bad:
            raise SystemExit(f"{spec.kind}: {bad} unreachable address pairs")
    return {
        "built": built,
        "routed": routed,
        "reachable": reachable,
        "teardown": time.monotonic() - t0 - reachable,
    }


def fidelity(nic_mbps: float, seconds: float) -> list[tuple[str, float, float]]:
    rows = []
    for spec in (FabricSpec.of("roft", servers=4, gpus_per_server=4), FabricSpec.of("zcube", n=4)):
        fabric = build_fabric(spec)
        with Lab(fabric, LabOptions(scale=Scale(nic_mbps=nic_mbps))) as lab:
            src, dst = fabric.hosts[0], fabric.hosts[-1]
            ip = dst.interfaces[-1].ip
            out = egress_interface(src, ip) or 0
            link = next(lk for lk in fabric.links if (lk.node1, lk.port1) == (src.name, out))
            rate = lab.options.scale.link_mbps(fabric, link.gbps)
            got = iperf3(lab, src.name, ip, seconds=seconds)
            rows.append((f"{spec.kind} {src.name}->{dst.name}", rate, got))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per fabric (median shown)")
    parser.add_argument("--nic-mbps", type=float, default=100.0, help="emulated NIC rate")
    parser.add_argument("--gpus", type=int, nargs="*", default=sorted(SIZES), help="GPU counts")
    parser.add_argument("--iperf-seconds", type=float, default=5.0)
    args = parser.parse_args()

    print(f"{'fabric':<34}{'built s':>9}{'routed s':>10}{'reachable s':>13}{'teardown s':>12}")
    for gpus in args.gpus:
        for spec in SIZES[gpus]:
            runs = [bring_up(spec, args.nic_mbps) for _ in range(args.repeat)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            p = dict(spec.params)
            size = (
                f"n={p['n']}" if spec.kind == "zcube" else f"{p['servers']}x{p['gpus_per_server']}"
            )
            label = f"{spec.kind} {size} ({gpus} GPU hosts)"
            print(
                f"{label:<34}{med['built']:>9.1f}{med['routed']:>10.1f}"
                f"{med['reachable']:>13.1f}{med['teardown']:>12.1f}",
                flush=True,
            )
    for nic in (50.0, 100.0, 200.0):
        for name, rate, got in fidelity(nic, args.iperf_seconds):
            print(
                f"fidelity nic={nic:g}Mb/s {name}: configured {rate:g} Mb/s, "
                f"iperf3 {got:.1f} Mb/s ({100 * got / rate:.1f}%)",
                flush=True,
            )


if __name__ == "__main__":
    main()
