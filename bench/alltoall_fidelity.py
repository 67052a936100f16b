"""Benchmark: all-to-all fidelity (issue 11, item 5): uncontended expert-parallel exchanges on
each fabric, against bytes / rate, with the fixed software cost reported.

For each fabric a fresh lab (100 Mb/s NICs, ecmp), an EP peer (`zcube_lab.serving.alltoall`'s
server) on each of three hosts and, on the leader (`epprobe.EP_GROUP`: h0 with h4, h8, h12, the
rail-0 group of an instance over four servers), the engines' own `AllToAll` on warm connections
running `--repeat` exchanges of every size (bytes per peer: each peer gets that many and sends
as many back; `zcube_lab.emulator.probes.epprobe`). The fixed cost is the median of a
`--fixed-bytes` exchange; each size reports its median time, the ideal time at the port rates
(the busiest port, usually the leader's, carrying bytes per peer times the peers routed through
it), `ratio = (median - fixed) / ideal` and whether that is within 20%. Needs root; about a
minute with the defaults.

    sudo .venv/bin/python -m bench.alltoall_fidelity
    sudo .venv/bin/python -m bench.alltoall_fidelity --fabrics zcube,roft,clos --out a2a.json
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
from zcube_lab.core.fabric.builders import BUILDERS, build_fabric
from zcube_lab.emulator.experiment.comparison import fabric_specs
from zcube_lab.emulator.probes.epprobe import (
    ALLTOALL_TOLERANCE,
    EP_GROUP,
    alltoall_fidelity,
)
from zcube_lab.emulator.probes.fidelity import Fidelity, fidelity_table
from zcube_lab.emulator.probes.hostprobe import running_lab

SIZES = "10e3,100e3,300e3,1e6,3e6"


def _list(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def _measure(kind: str, args: argparse.Namespace, logs: Path) -> Fidelity:
    fabric = build_fabric(fabric_specs([kind], 16, 2)[kind])
    leader = args.leader or EP_GROUP[0]
    peers = _list(args.peers) if args.peers else list(EP_GROUP[1])
    sizes = [int(float(s)) for s in _list(args.sizes)]

    def progress(rec: dict) -> None:
        state = "ok" if not rec["failures"] else f"{rec['failures']} peers FAILED"
        print(f"  {rec['bytes_per_peer']:>12,} B/peer  {rec['seconds']:.4f} s  {state}", flush=True)

    print(f"{kind}: lab up, leader {leader}, peers {','.join(peers)}", flush=True)
    with running_lab(fabric, logs) as lab:
        return alltoall_fidelity(
            lab,
            leader,
            peers,
            sizes,
            repeat=args.repeat,
            fixed_bytes=args.fixed_bytes,
            progress=progress,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fabrics", default="zcube,roft", help=f"of {list(BUILDERS)}")
    parser.add_argument("--sizes", default=SIZES, help="bytes per peer, comma-separated")
    parser.add_argument("--repeat", type=int, default=5, help="exchanges of each size (median)")
    parser.add_argument("--fixed-bytes", type=int, default=1000, help="the fixed-cost exchange")
    parser.add_argument("--leader", help=f"leader host (default {EP_GROUP[0]})")
    parser.add_argument("--peers", help=f"peer hosts (default {','.join(EP_GROUP[1])})")
    parser.add_argument("--logs", type=Path, help="keep each lab's logs under this folder")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    fabrics = _list(args.fabrics)
    if unknown := [f for f in fabrics if f not in BUILDERS]:
        parser.error(f"--fabrics: unknown {unknown}; choose from {list(BUILDERS)}")
    signal.signal(signal.SIGTERM, raise_interrupt)
    results: list[Fidelity] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            for kind in fabrics:
                logs = (args.logs or Path(tmp)) / kind
                logs.mkdir(parents=True, exist_ok=True)
                results.append(_measure(kind, args, logs))
        except KeyboardInterrupt:
            print("interrupted: labs torn down", file=sys.stderr)
            return 130
    print("\n" + "\n".join(fidelity_table(results, ALLTOALL_TOLERANCE)))
    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M')}, {args.repeat} exchanges per size, warm connections"
    )
    if args.out:
        args.out.write_text(json.dumps([r.to_dict() for r in results], indent=2) + "\n")
    return 0 if all(row.within for r in results for row in r.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
