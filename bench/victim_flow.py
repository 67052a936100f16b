"""Benchmark: a victim flow beside a 7-to-1 incast, per fabric, transport and buffer mode.

MRC's claim (issue 36 item 3): in a 7-to-1 incast, a flow that shares a link with the incast but
goes to another receiver keeps its throughput, where a lossless RoCE fabric's pauses block it.
Here, in one lab per (fabric, transport, lossy or lossless): KV servers
(`zcube_lab.emulator.probes.cutprobe serve`) on the 7 incast senders, `INCAST_RECEIVER` pulling from
all 7 at once (the incast into its NIC), and `VICTIM` pulling from the first incast sender
(`SENDERS[0]`, so the victim's bytes share that sender's NIC uplink with the incast's) to a receiver
on another leaf. The victim pulls once alone (its solo figure) and once while the incast runs.

Printed per row, medians [min-max] over `--repeat`: the victim's throughput during the incast
against its solo figure, the incast's completion time (its slowest pull), the lossless agent's
pauses, and over mrc the EV transitions of every pull (ASSUMED_BAD, SKIP). Throughputs are Mb/s
of the emulated links (100 Mb/s NICs, undilated: modelled = wall).

    sudo .venv/bin/python -m bench.victim_flow
    sudo .venv/bin/python -m bench.victim_flow --fabrics zcube --transports mrc --modes lossless
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from zcube_lab.adapters.ports import free_port
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import Fabric, FabricSpec
from zcube_lab.core.fabric.hostplan import kv_source_map
from zcube_lab.core.fabric.queues import (
    BUFFER_MODELS,
    DEFAULT_BUFFER_MODEL,
    QueueModel,
)
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.core.policies import SPRAY_STALL_S, SPRAY_STREAMS, get_policy
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.options import LabOptions
from zcube_lab.emulator.probes.cutprobe import PORT, _readline, mrc_rate_mbps, stop_probes
from zcube_lab.emulator.results.compare.report import median_spread

FABRICS = {
    "roft-2planes": FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2, planes=2),
    "zcube": FabricSpec.of("zcube", n=4),
}
# name -> (run policy, KV transport)
TRANSPORTS = {"tcp-ecmp": ("ecmp", "tcp"), "tcp-spray": ("spray", "tcp"), "mrc": ("ecmp", "mrc")}
MODES = ("lossy", "lossless")
INCAST_RECEIVER = "h5"
SENDERS = ("h0", "h1", "h2", "h8", "h10", "h12", "h15")
VICTIM = ("h0", "h8")  # (server, receiver): its server is the first incast sender
MRC_EVS = 16


def _server(lab: Lab, host: str, num_bytes: int, mrc: bool) -> subprocess.Popen[str]:
    addrs = [f"{i.ip}:{PORT}" for i in lab.fabric.host(host).interfaces]
    argv = [
        sys.executable,
        "-m",
        "zcube_lab.emulator.probes.cutprobe",
        "serve",
        "--bytes",
        str(num_bytes),
    ]
    if mrc:
        argv += ["--mrc-evs", str(MRC_EVS), "--mtu", str(lab.options.mtu)]
    assert lab.net is not None
    return lab.net.get(host).popen(
        [*argv, *addrs], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _pull(
    lab: Lab, src: str, dst: str, num_bytes: int, policy: str, transport: str, timeout_s: float
) -> subprocess.Popen[str]:
    fabric = lab.fabric
    addrs = [f"{i.ip}:{PORT}" for i in fabric.host(src).interfaces]
    argv = [
        sys.executable,
        "-m",
        "zcube_lab.emulator.probes.cutprobe",
        "pull",
        "--bytes",
        str(num_bytes),
    ]
    argv += ["--timeout-s", str(timeout_s)]
    argv += [f"--source={c}={local}" for c, local in kv_source_map(fabric, fabric.host(dst))]
    if get_policy(policy).spray:
        argv += ["--streams", str(SPRAY_STREAMS), "--stall-s", str(SPRAY_STALL_S)]
    if transport == "mrc":
        argv += ["--transport", "mrc", "--rate-mbps", f"{mrc_rate_mbps(lab, src, dst):g}"]
    assert lab.net is not None
    return lab.net.get(dst).popen(
        [*argv, *addrs], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _result(proc: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
    line = _readline(proc, timeout_s + 15)
    return dict(json.loads(line))


def one_lab(
    fabric: Fabric,
    tname: str,
    lossless: bool,
    incast_bytes: int,
    log_dir: Path,
    buffer_model: str = DEFAULT_BUFFER_MODEL,
) -> dict[str, Any]:
    """One lab: the victim alone, then the incast with the victim beside it. The victim pulls
    what its sender's server serves, the incast's size (a server serves one size: a pull of
    another is refused as a size mismatch)."""
    victim_bytes = incast_bytes
    policy, transport = TRANSPORTS[tname]
    mrc = transport == "mrc"
    lab = Lab(
        fabric,
        LabOptions(
            scale=Scale(nic_mbps=100.0), policy=get_policy(policy).routing, ev_rules=mrc,
            lossless=lossless, of_port=free_port(), metrics_port=free_port(), log_dir=log_dir,
            queue=QueueModel(buffer_model=buffer_model),
        ),
    )  # fmt: skip
    procs: list[subprocess.Popen[str]] = []
    timeout_s = 30.0
    try:
        lab.start()
        for host in SENDERS:
            procs.append(_server(lab, host, incast_bytes, mrc))
        for p in procs:
            if _readline(p, 20) != "ready":
                raise RuntimeError("a KV probe server did not start")
        solo = _pull(lab, *VICTIM, victim_bytes, policy, transport, timeout_s)
        procs.append(solo)
        _readline(solo, 20)
        alone = _result(solo, timeout_s)
        incast = [
            _pull(lab, s, INCAST_RECEIVER, incast_bytes, policy, transport, timeout_s)
            for s in SENDERS
        ]
        procs += incast
        for p in incast:
            _readline(p, 20)
        time.sleep(0.3)  # the incast under way: its queues built
        victim = _pull(lab, *VICTIM, victim_bytes, policy, transport, timeout_s)
        procs.append(victim)
        _readline(victim, 20)
        during = _result(victim, timeout_s)
        pulls = [_result(p, timeout_s) for p in incast]
        report = lab.lossless_report(fresh=True)
        pauses = sum(int(v.get("pauses", 0)) for v in report.ports.values()) if report else 0
        return {"solo": alone, "victim": during, "incast": pulls, "pauses": pauses}
    finally:
        try:
            stop_probes(procs)
        finally:
            lab.stop()


def mbps(pull: dict[str, Any]) -> float | None:
    """A pull's throughput, Mb/s (None if it failed)."""
    if not pull.get("ok") or not pull.get("seconds"):
        return None
    return pull["bytes"] * 8 / pull["seconds"] / 1e6


def row(fabric: str, tname: str, mode: str, labs: list[dict[str, Any]]) -> list[str]:
    """One table row from the labs of one (fabric, transport, mode)."""
    solo = [v for lab in labs if (v := mbps(lab["solo"])) is not None]
    during = [v for lab in labs if (v := mbps(lab["victim"])) is not None]
    ratio = [d / s for lab in labs if (d := mbps(lab["victim"])) and (s := mbps(lab["solo"]))]
    done = [lab for lab in labs if all(p.get("ok") for p in lab["incast"])]
    incast_s = [max(p["seconds"] for p in lab["incast"]) for lab in done]
    evs = [p for lab in labs for p in (*lab["incast"], lab["victim"]) if "skipped" in p]
    bad = [float(sum(p.get("retired") or 0 for p in lab["incast"])) for lab in labs]
    skips = [float(sum(p.get("skipped") or 0 for p in lab["incast"])) for lab in labs]
    return [
        fabric, tname, mode,
        median_spread(solo, ".1f"), median_spread(during, ".1f"), median_spread(ratio, ".2f"),
        f"{len(done)}/{len(labs)}", median_spread(incast_s, ".2f"),
        median_spread([float(lab["pauses"]) for lab in labs], ".0f") if mode == "lossless" else "-",
        median_spread(bad, ".0f") if evs else "-", median_spread(skips, ".0f") if evs else "-",
    ]  # fmt: skip


HEADS = [
    "fabric", "transport", "mode", "victim solo (Mb/s)", "victim in incast (Mb/s)",
    "victim kept", "incast completed", "incast time (s)", "pauses", "EVs assumed bad",
    "EV skips",
]  # fmt: skip


def table_lines(raw: list[dict[str, Any]]) -> list[str]:
    """The printed table from the labs as `--out` writes them (`[{"key": [fabric, transport,
    mode], "labs": [...]}]`): what `bench/map_tables.py --table victim-flow` regenerates."""
    return [
        "| " + " | ".join(HEADS) + " |",
        "|" + "---|" * len(HEADS),
        *("| " + " | ".join(row(*e["key"], e["labs"])) + " |" for e in raw),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fabrics", default=",".join(FABRICS), help=f"of {list(FABRICS)}")
    parser.add_argument("--transports", default=",".join(TRANSPORTS), help=f"of {TRANSPORTS}")
    parser.add_argument("--modes", default=",".join(MODES), help=f"of {MODES}")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--incast-mib", type=float, default=3.0, help="each incast pull and the victim's, MiB"
    )
    parser.add_argument(
        "--buffer-model",
        choices=BUFFER_MODELS,
        default=DEFAULT_BUFFER_MODEL,
        help="switch port queues (docs/DOMAIN.md, 'Switch buffer models')",
    )
    parser.add_argument("--out", type=Path, help="also write every lab's pulls as JSON here")
    args = parser.parse_args()
    fabrics = [f for f in args.fabrics.split(",") if f]
    transports = [t for t in args.transports.split(",") if t]
    modes = [m for m in args.modes.split(",") if m]
    bad = [f for f in fabrics if f not in FABRICS] + [t for t in transports if t not in TRANSPORTS]
    if bad or set(modes) - set(MODES):
        parser.error(f"unknown in {bad or modes}")
    results: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for rep in range(args.repeat):
        for name in fabrics:
            fabric = build_fabric(FABRICS[name])
            for tname in transports:
                for mode in modes:
                    with tempfile.TemporaryDirectory() as tmp:
                        lab = one_lab(
                            fabric, tname, mode == "lossless", int(args.incast_mib * 2**20),
                            Path(tmp), args.buffer_model,
                        )  # fmt: skip
                    results.setdefault((name, tname, mode), []).append(lab)
                    print(
                        f"[{rep + 1}/{args.repeat}] {name} {tname} {mode}: victim "
                        f"{mbps(lab['solo'])} -> {mbps(lab['victim'])} Mb/s, incast "
                        f"{[p.get('seconds') for p in lab['incast']]} s, pauses {lab['pauses']}",
                        flush=True,
                    )
    raw = [{"key": list(k), "labs": v} for k, v in results.items()]
    print("\n" + "\n".join(table_lines(raw)))
    if args.out:
        args.out.write_text(json.dumps(raw, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
