"""Benchmark: bring-up of a fabric from a file against the same fabric built in (issue 47: within
1.2x at 64 GPU hosts). ZCube n=8 (64 GPUs, 2 per server) is exported to a zcube-fabric/1 file;
then, alternating, a lab is brought up from the built-in spec and from the file's `file` spec
(the controller rebuilds each from its spec), timed from building the description to routed,
and torn down. Needs root and Open vSwitch; run under the shared lock, ~30 s with the defaults:

    sudo flock /tmp/zcube-heavy.lock .venv/bin/python -m bench.fabric_file_bringup --repeat 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from zcube_lab.adapters.ports import free_port
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.files import FabricFileError, file_spec, write_fabric
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.options import LabOptions


def bring_up(spec: FabricSpec) -> tuple[float, dict[str, float]]:
    """Seconds from building the description to a routed lab, and the lab's phases."""
    t0 = time.monotonic()
    fabric = build_fabric(spec)
    options = LabOptions(
        scale=Scale(nic_mbps=100.0),
        of_port=free_port(),
        metrics_port=free_port(),
        state_dir=Path(tempfile.mkdtemp(prefix="zcl-ffb-")),
    )
    lab = Lab(fabric, options)
    lab.start()
    took = time.monotonic() - t0
    lab.stop()
    return took, {k: round(v, 2) for k, v in lab.times.phases.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8, help="ZCube n (n*n GPU hosts)")
    parser.add_argument("--gpus-per-server", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args()
    builtin = FabricSpec.of("zcube", n=args.n, gpus_per_server=args.gpus_per_server)
    path = Path(tempfile.mkdtemp(prefix="zcl-ffb-")) / f"zcube-{args.n * args.n}.yaml"
    try:
        write_fabric(build_fabric(builtin), path)
        specs = {"builtin": builtin, "file": file_spec(path)}
    except FabricFileError as exc:
        print(exc, file=sys.stderr)
        return 2
    times: dict[str, list[float]] = {name: [] for name in specs}
    rows = []
    for r in range(args.repeat):
        for name, spec in specs.items():
            took, phases = bring_up(spec)
            times[name].append(took)
            rows.append({"fabric": name, "repeat": r, "seconds": round(took, 2), **phases})
            print(f"{name:8} repeat {r}: {took:5.1f} s  {phases}", flush=True)
    ratio = statistics.mean(times["file"]) / statistics.mean(times["builtin"])
    print(
        f"mean: builtin {statistics.mean(times['builtin']):.1f} s, file "
        f"{statistics.mean(times['file']):.1f} s, ratio {ratio:.2f} (goal <= 1.2)"
    )
    if args.out:
        args.out.write_text(json.dumps({"runs": rows, "ratio": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
