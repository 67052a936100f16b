"""Benchmark: KV transfer fidelity (issue 11, item 3): uncontended KV pulls of 100 KB to 25 MB
on each fabric and each ZCube path mode, against bytes / path rate.

For each fabric (and, on ZCube, each path mode: `disjoint` binds every lane to its own NIC port,
`shortest` lets the host routes pick) a fresh lab (100 Mb/s NICs, ecmp), a real KV server on
one host and, from a host across the fabric (`kvprobe.KV_PAIRS`), `--repeat` pulls of every
size, one at a time, as a decode engine pulls (its default lanes and chunking, its connections
kept across pulls; `--connections fresh` opens new ones for every pull, as before issue 21),
all in one process (`zcube_lab.emulator.probes.kvprobe`). The fixed cost is the median time of a
`--fixed-bytes` pull; each size reports its median time, the ideal bytes * 8 / path rate (the
NIC ports the pull can use), `ratio = (median - fixed) / ideal` and whether that is within
10%. Needs root; about 2-3 minutes with the defaults (most of it the 25 MB pulls and three lab
bring-ups).

    sudo .venv/bin/python -m bench.kv_fidelity                  # zcube (both modes), roft
    sudo .venv/bin/python -m bench.kv_fidelity --fabrics zcube,roft,clos --repeat 5 --out kv.json
    sudo .venv/bin/python -m bench.kv_fidelity --transport mrc --modes disjoint

`--transport mrc` pulls over the MRC-style transport (16 EVs per address, each leg paced at 95%
of its NIC port, on a lab with the EV rules): its ideal is still bytes / path rate, so the
pacing headroom alone puts its ratio near 1.05.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

from zcube_lab.adapters.procs import raise_interrupt
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.emulator.experiment.comparison import fabric_specs
from zcube_lab.emulator.probes.fidelity import Fidelity, fidelity_table
from zcube_lab.emulator.probes.hostprobe import running_lab
from zcube_lab.emulator.probes.kvprobe import KV_PAIRS, KV_TOLERANCE, PATH_MODES, kv_fidelity

SIZES = "100e3,300e3,1e6,3e6,10e6,25e6"


def _list(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def _measure(kind: str, mode: str, args: argparse.Namespace, logs: Path) -> Fidelity:
    fabric = build_fabric(fabric_specs([kind], 16, 2)[kind])
    server, puller = args.pair.split(",") if args.pair else KV_PAIRS[kind]
    sizes = [int(float(s)) for s in _list(args.sizes)]

    def progress(rec: dict) -> None:
        state = "ok" if rec["ok"] and rec["checksum_ok"] else f"FAILED {rec['error'][:60]}"
        print(f"  {rec['bytes']:>12,} B  {rec['seconds']:.4f} s  {state}", flush=True)

    print(f"{kind} {mode}: lab up, server {server}, puller {puller}", flush=True)
    with running_lab(fabric, logs, ev_rules=args.transport == "mrc") as lab:
        return kv_fidelity(
            lab,
            server,
            puller,
            sizes,
            mode=mode,
            repeat=args.repeat,
            fixed_bytes=args.fixed_bytes,
            progress=progress,
            connections=args.connections,
            transport=args.transport,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fabrics", default="zcube,roft", help=f"of {list(KV_PAIRS)}")
    parser.add_argument("--modes", default=",".join(PATH_MODES), help="ZCube path modes")
    parser.add_argument("--sizes", default=SIZES, help="bytes per pull, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="pulls of each size (median)")
    parser.add_argument("--fixed-bytes", type=int, default=1000, help="the fixed-cost pull")
    parser.add_argument("--pair", help="SERVER,PULLER for every fabric (default: KV_PAIRS)")
    parser.add_argument(
        "--connections",
        choices=["kept", "fresh"],
        default="kept",
        help="kept across pulls (a decode engine's) or fresh for every pull",
    )
    parser.add_argument(
        "--transport",
        choices=["tcp", "mrc"],
        default="tcp",
        help="tcp lanes, or the MRC-style datagrams (each leg paced at 95%% of its NIC port)",
    )
    parser.add_argument("--logs", type=Path, help="keep each lab's logs under this folder")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    fabrics, modes = _list(args.fabrics), _list(args.modes)
    if unknown := [f for f in fabrics if f not in KV_PAIRS]:
        parser.error(f"--fabrics: unknown {unknown}; choose from {list(KV_PAIRS)}")
    if unknown := [m for m in modes if m not in PATH_MODES]:
        parser.error(f"--modes: unknown {unknown}; choose from {list(PATH_MODES)}")
    signal.signal(signal.SIGTERM, raise_interrupt)
    results: list[Fidelity] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for kind in fabrics:
                for mode in modes if kind == "zcube" else ["-"]:
                    logs = (args.logs or Path(tmp)) / f"{kind}-{mode}"
                    logs.mkdir(parents=True, exist_ok=True)
                    results.append(_measure(kind, mode, args, logs))
        except KeyboardInterrupt:
            print("interrupted: labs torn down", file=sys.stderr)
            return 130
    print("\n" + "\n".join(fidelity_table(results, KV_TOLERANCE)))
    print(f"\n{time.strftime('%Y-%m-%d %H:%M')}, {args.repeat} pulls per size, one at a time")
    if args.out:
        args.out.write_text(json.dumps([r.to_dict() for r in results], indent=2) + "\n")
    return 0 if all(row.within for r in results for row in r.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
