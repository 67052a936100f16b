"""Benchmark: the recovery time of one KV transfer whose link is cut mid-way, per policy.

For each fabric and policy, `--repeat` times: a fresh lab, a real KV server on h0 and a real pull
of `--mib` MiB from h5 (decode's source binding; spray's subflows and stall timeout), once
without a fault (the reference) and once with the switch-to-switch link that carried most of the
transfer in its first 0.4 s cut for the rest of it (`zcube_lab.emulator.probes.cutprobe`). Prints
medians [min-max]: pull time without and with the cut, the time the cut cost (*recovery*: with minus
the median without), pulls completed with every byte verified, subflows retired, and the controller
recomputes. A pull that does not complete within `--timeout` counts as failed.

The policy `mrc` is ECMP routing plus the controller's EV rules, with the pull over the
MRC-style datagram transport (`zcube_lab.serving.kvwire.mrc`) instead of TCP; its rows also give the
bytes the sender retransmitted. Every row gives the puller's CPU per Mb pulled (the puller
process only: the prefill side's sender is not counted).

    sudo .venv/bin/python -m bench.kv_cut                       # zcube, roft, roft 2 planes
    sudo .venv/bin/python -m bench.kv_cut --fabrics zcube --policies ff,spray --repeat 5
    sudo .venv/bin/python -m bench.kv_cut --fabrics roft-2planes --policies ecmp,spray,mrc
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.probes.cutprobe import cut_during_pull
from zcube_lab.emulator.results.compare.report import median_spread

FABRICS = {
    "zcube": FabricSpec.of("zcube", n=4),
    "roft": FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2),
    "roft-2planes": FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2, planes=2),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fabrics", default="zcube,roft,roft-2planes", help=f"of {list(FABRICS)}")
    parser.add_argument("--policies", default="static,ecmp,ff,recompute,spray")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--mib", type=int, default=24, help="KV bytes per pull, MiB")
    parser.add_argument("--timeout", type=float, default=6.0, help="pull timeout, seconds")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    fabrics = [f for f in args.fabrics.split(",") if f]
    policies = [p for p in args.policies.split(",") if p]
    unknown = [f for f in fabrics if f not in FABRICS]
    if unknown:
        parser.error(f"--fabrics: unknown {unknown}; choose from {list(FABRICS)}")
    rows = []
    total = len(fabrics) * len(policies) * args.repeat
    done = 0
    results: dict[tuple[str, str], dict[str, list]] = {}
    for _rep in range(args.repeat):
        for name in fabrics:
            fabric = build_fabric(FABRICS[name])
            for policy in policies:
                done += 1
                r = results.setdefault((name, policy), {"clean": [], "cut": []})
                for link in (None, "auto"):
                    with tempfile.TemporaryDirectory() as tmp:
                        res = cut_during_pull(
                            fabric,
                            "ecmp" if policy == "mrc" else policy,
                            "h0",
                            "h5",
                            link=link,
                            num_bytes=args.mib * 1024 * 1024,
                            timeout_s=args.timeout,
                            log_dir=Path(tmp),
                            transport="mrc" if policy == "mrc" else "tcp",
                        )
                    r["clean" if link is None else "cut"].append(res)
                cut = r["cut"][-1]
                print(
                    f"[{done}/{total}] {name} {policy}: clean {r['clean'][-1].pull['seconds']}s, "
                    f"cut {cut.link}: ok={cut.pull['ok']} {cut.pull['seconds']}s "
                    f"retired={cut.pull['retired']} {cut.pull['error'][:60]}",
                    flush=True,
                )
    heads = [
        "fabric",
        "policy",
        "pull, no cut (s)",
        "pull, cut (s)",
        "recovery (s)",
        "completed",
        "retired subflows / EVs",
        "recomputes",
        "retransmitted KB (cut)",
        "puller CPU ms/Mb (no cut)",
    ]
    for (name, policy), r in results.items():
        clean = [x.pull["seconds"] for x in r["clean"] if x.pull["ok"]]
        cut_ok = [x for x in r["cut"] if x.pull["ok"] and x.pull["checksum_ok"]]
        base = statistics.median(clean) if clean else None
        rec = [x.pull["seconds"] - base for x in cut_ok] if base is not None else []
        rows.append(
            [
                name,
                policy,
                median_spread(clean, ".2f"),
                median_spread([x.pull["seconds"] for x in cut_ok], ".2f"),
                median_spread(rec, ".2f"),
                f"{len(cut_ok)}/{len(r['cut'])}",
                median_spread([float(x.pull["retired"]) for x in r["cut"]], ".2f"),
                median_spread([float(x.recomputes) for x in r["cut"]], ".2f"),
                median_spread(
                    [
                        x.pull["retransmitted_bytes"] / 1e3
                        for x in cut_ok
                        if x.pull.get("retransmitted_bytes") is not None
                    ],
                    ".0f",
                ),
                median_spread(
                    [
                        1e3 * x.pull["cpu_s"] / (x.pull["bytes"] * 8 / 1e6)
                        for x in r["clean"]
                        if x.pull["ok"] and "cpu_s" in x.pull
                    ],
                    ".1f",
                ),
            ]
        )
    print("\n| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if args.out:
        args.out.write_text(json.dumps({"columns": heads, "rows": rows}, indent=2) + "\n")
    print(f"\n{time.strftime('%Y-%m-%d %H:%M')}, {args.mib} MiB pulls, timeout {args.timeout}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
