"""Bring-up time of the structure-keeping default fabrics against the old scale-down (issue 32).

Pairs, at each GPU count, the fabric `compare` now builds by default
(`zcube_lab.core.fabric.scaledown`: 2 GPUs per server, several servers per ZCube A switch and
per ROFT rail leaf) with the old one (GPUs per server = the square root, one leaf per rail):
each repeat brings up both, in alternating order, one right after the other, so load on the
shared machine falls on both alike. Prints seconds to reachable (controller up, Mininet
built, every rule installed, all-pairs ping answered) and teardown, the median over repeats
and the paired ratio new / old. Needs root; each fabric's paired bring-ups at one size hold
/tmp/zcube-heavy.lock together (a minute or two; other work interleaves between them, and a
pair is not split by another lab), not the whole script.

    .venv/bin/python -m bench.bringup_structure --repeat 3 --gpus 16 64 [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

from bench.bringup import bring_up
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.experiment.comparison import fabric_specs

LOCK = Path("/tmp/zcube-heavy.lock")


def old_sizes(gpus: int) -> dict[str, int]:
    """The scale-down before issue 32: GPUs per server = sqrt, one leaf per rail."""
    side = int(gpus**0.5)
    return {"gpus_per_server": side, "servers_per_leaf": side}


def pairs(gpus: int, kinds: list[str]) -> list[tuple[str, FabricSpec, FabricSpec]]:
    """(kind, new spec, old spec) for each fabric kind at `gpus` GPU hosts."""
    new = fabric_specs(kinds, gpus, 2)
    old = fabric_specs(kinds, gpus, 2, sizes=old_sizes(gpus))
    return [(k, new[k], old[k]) for k in kinds]


@contextlib.contextmanager
def heavy_lock() -> Iterator[None]:
    """The shared lab lock, held for the block."""
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def describe(spec: FabricSpec) -> str:
    fabric = build_fabric(spec)
    p = dict(spec.params)
    return (
        f"{spec.kind} {','.join(f'{k}={v}' for k, v in sorted(p.items()))}: "
        f"{len(fabric.switches)} switches, {len(fabric.links)} links"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="paired runs (median shown)")
    parser.add_argument("--gpus", type=int, nargs="*", default=[16, 64])
    parser.add_argument("--fabrics", default="zcube,roft")
    parser.add_argument("--nic-mbps", type=float, default=100.0)
    parser.add_argument("--json", type=Path, help="write every run's times here")
    args = parser.parse_args()
    kinds = [k for k in args.fabrics.split(",") if k]
    out: list[dict[str, object]] = []
    header = f"{'fabric':<52}{'new s':>8}{'old s':>8}{'new/old':>9}{'teardown new/old s':>21}"
    print(header, flush=True)
    for gpus in args.gpus:
        for kind, new, old in pairs(gpus, kinds):
            runs: dict[str, list[dict[str, float]]] = {"new": [], "old": []}
            with heavy_lock():  # the wait for it is not counted
                for i in range(args.repeat):
                    order = ("new", "old") if i % 2 == 0 else ("old", "new")
                    for which in order:
                        spec = new if which == "new" else old
                        runs[which].append(bring_up(spec, args.nic_mbps))
            time.sleep(1)  # let the other lock waiters in
            ratios = [
                n["reachable"] / o["reachable"]
                for n, o in zip(runs["new"], runs["old"], strict=True)
            ]
            med = {w: statistics.median(r["reachable"] for r in runs[w]) for w in runs}
            down = {w: statistics.median(r["teardown"] for r in runs[w]) for w in runs}
            print(f"  new: {describe(new)}\n  old: {describe(old)}", flush=True)
            print(
                f"{kind + f' {gpus} GPU hosts':<52}{med['new']:>8.2f}{med['old']:>8.2f}"
                f"{statistics.median(ratios):>9.2f}{down['new']:>11.2f}/{down['old']:.2f}",
                flush=True,
            )
            out.append(
                {
                    "kind": kind,
                    "gpus": gpus,
                    "new": dict(new.params),
                    "old": dict(old.params),
                    "runs": runs,
                    "paired_ratio_median": statistics.median(ratios),
                }
            )
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
