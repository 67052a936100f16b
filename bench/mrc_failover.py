"""Benchmark: failover without the controller, MRC-style transport against TCP fast failover.

For each fabric, `--repeat` times: a fresh lab whose controller is stopped once its rules are
in, a real KV server on h0 and a real pull of `--mib` MiB from h5
(`zcube_lab.emulator.probes.cutprobe`), once without a fault and once with the switch-to-switch link
that carried most of the pull in its first 0.4 s cut for the rest of it. Two transports: `mrc` (ECMP
routes plus the EV rules, the pull over `zcube_lab.serving.kvwire.mrc`) and `tcp-ff` (TCP over the
`ff` policy's fast-failover groups, which the switches apply on their own). With the controller
stopped, whatever recovers does so without it.

Printed, medians [min-max], in modelled time (the lab's dilation is 1 here, so modelled =
wall): for mrc, the time from the cut to the sender's first ASSUMED_BAD EV (*detect*) and to
its last retransmission on a GOOD EV (*failover*: every byte the cut lost is on its way again
over a good path); for both, the pull's time without and with the cut and their difference
(*recovery*), and pulls completed with every byte verified.

    sudo .venv/bin/python -m bench.mrc_failover
    sudo .venv/bin/python -m bench.mrc_failover --fabrics zcube --repeat 5 --out rows.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from zcube_lab.core.clock import Clock
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.probes.cutprobe import CutResult, cut_during_pull
from zcube_lab.emulator.results.compare.report import median_spread

FABRICS = {
    "roft-2planes": FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2, planes=2),
    "zcube": FabricSpec.of("zcube", n=4),
}
TRANSPORTS = {"mrc": ("ecmp", "mrc"), "tcp-ff": ("ff", "tcp")}  # name -> (policy, transport)
CLOCK = Clock(1.0)  # cutprobe's labs run undilated

HEADS = [
    "fabric", "transport", "completed (cut)", "detect (ms)", "failover (ms)",
    "pull, no cut (s)", "pull, cut (s)", "recovery (s)", "EVs assumed bad",
]  # fmt: skip


def since_cut_ms(res: CutResult, key: str) -> float | None:
    """Modelled ms from the cut to the sender's time `key` (None if either is unknown)."""
    at = res.pull.get(key)
    if res.cut_wall is None or at is None:
        return None
    return 1e3 * CLOCK.modelled(at - res.cut_wall)


def row(fabric: str, transport: str, clean: list[CutResult], cut: list[CutResult]) -> list[str]:
    """One table row from a fabric's and transport's pulls."""
    ok = [x for x in cut if x.pull["ok"] and x.pull["checksum_ok"]]
    base_runs = [x.pull["seconds"] for x in clean if x.pull["ok"]]
    base = statistics.median(base_runs) if base_runs else None
    detect = [v for x in ok if (v := since_cut_ms(x, "first_bad_wall")) is not None]
    failover = [v for x in ok if (v := since_cut_ms(x, "last_retx_wall")) is not None]
    mrc = transport == "mrc"
    return [
        fabric,
        transport,
        f"{len(ok)}/{len(cut)}",
        median_spread(detect, ".0f") if mrc else "-",
        median_spread(failover, ".0f") if mrc else "-",
        median_spread(base_runs, ".2f"),
        median_spread([x.pull["seconds"] for x in ok], ".2f"),
        median_spread([x.pull["seconds"] - base for x in ok], ".2f") if base else "-",
        median_spread([float(x.pull["retired"]) for x in ok], ".0f") if mrc else "-",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fabrics", default=",".join(FABRICS), help=f"of {list(FABRICS)}")
    parser.add_argument("--transports", default=",".join(TRANSPORTS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mib", type=int, default=24, help="KV bytes per pull, MiB")
    parser.add_argument("--timeout", type=float, default=8.0, help="pull timeout, seconds")
    parser.add_argument("--out", type=Path, help="also write the raw pulls as JSON here")
    args = parser.parse_args()
    fabrics = [f for f in args.fabrics.split(",") if f]
    transports = [t for t in args.transports.split(",") if t]
    if bad := [f for f in fabrics if f not in FABRICS] + [
        t for t in transports if t not in TRANSPORTS
    ]:
        parser.error(f"unknown {bad}; fabrics {list(FABRICS)}, transports {list(TRANSPORTS)}")
    runs: dict[tuple[str, str], dict[str, list[CutResult]]] = {}
    raw: list[dict[str, Any]] = []
    for rep in range(args.repeat):
        for name in fabrics:
            fabric = build_fabric(FABRICS[name])
            for tname in transports:
                policy, transport = TRANSPORTS[tname]
                r = runs.setdefault((name, tname), {"clean": [], "cut": []})
                for link in (None, "auto"):
                    with tempfile.TemporaryDirectory() as tmp:
                        res = cut_during_pull(
                            fabric, policy, "h0", "h5", link=link,
                            num_bytes=args.mib * 1024 * 1024, timeout_s=args.timeout,
                            log_dir=Path(tmp), transport=transport, controller=False,
                        )  # fmt: skip
                    r["clean" if link is None else "cut"].append(res)
                    raw.append({"rep": rep, "fabric": name, "transport": tname, "link": res.link,
                                "cut_wall": res.cut_wall, "pull": res.pull})  # fmt: skip
                cut = r["cut"][-1]
                print(
                    f"[{rep + 1}/{args.repeat}] {name} {tname}: clean "
                    f"{r['clean'][-1].pull['seconds']}s; cut {cut.link}: ok={cut.pull['ok']} "
                    f"{cut.pull['seconds']}s detect={since_cut_ms(cut, 'first_bad_wall')} "
                    f"failover={since_cut_ms(cut, 'last_retx_wall')} {cut.pull['error'][:60]}",
                    flush=True,
                )
    print("\n| " + " | ".join(HEADS) + " |")
    print("|" + "---|" * len(HEADS))
    for (name, tname), r in runs.items():
        print("| " + " | ".join(row(name, tname, r["clean"], r["cut"])) + " |")
    if args.out:
        args.out.write_text(json.dumps(raw, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
