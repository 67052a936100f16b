"""`zcube-lab replay`: a run's recorded transfers (or a made-up incast) replayed on fabrics at a
chosen time scale, paced datagrams on a lossless lab (docs/REPLAY.md; issue 45)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path
from typing import Any

from zcube_lab.core.errors import ConfigError

FABRIC_KINDS = ("zcube", "roft", "clos")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Replay a run's transfers (KV pulls, EP exchanges with their chains) on one or more "
        "fabrics at a time scale of your choice: a frame of a few µs of modelled time, where "
        "a real switch's buffer and PFC live. Needs root. docs/REPLAY.md."
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "source",
        nargs="?",
        type=Path,
        help="a run folder (its transfers.jsonl; recorded from its logs if missing) or a "
        "recording file",
    )
    src.add_argument(
        "--incast",
        type=int,
        metavar="N",
        help="instead of a run: N senders into one host (the IETF draft's §8.2 burst)",
    )
    p.add_argument(
        "--fabrics",
        default="",
        help="comma-separated fabric kinds to replay on (zcube, roft, clos), each at the "
        "recording's GPU count and structure-keeping size (default: the run's own fabric; "
        "for --incast: zcube,roft)",
    )
    p.add_argument("--gpus", type=int, default=16, help="GPU hosts of an --incast's fabrics")
    p.add_argument(
        "--resolution",
        default="finest",
        help="the modelled duration of one frame on the slowest host port: a preset "
        "(coarse 720 µs, medium 70, fine 7, finest 2), a time (7us, 0.5ms), or 'run' "
        "(the recorded run's own scale)",
    )
    p.add_argument("--mtu", type=int, default=1500, help="MTU at a chosen resolution")
    p.add_argument(
        "--window",
        default="",
        help="START:END modelled seconds of the run to replay (default: all, or --busiest)",
    )
    p.add_argument(
        "--busiest",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="replay the window of this length with the most KV bytes released",
    )
    p.add_argument(
        "--classes",
        default="kv,ep,other",
        help="traffic classes to replay (kv, ep, other)",
    )
    p.add_argument(
        "--isolate",
        action="store_true",
        help="also replay each class alone, and report the contended / isolated p99 per "
        "class (the draft's §7.4)",
    )
    p.add_argument(
        "--xoff-bytes",
        type=float,
        default=None,
        help="PFC XOFF in real bytes (the draft's 10 KB-1 MB); default: the chip's per-port "
        "buffer share",
    )
    p.add_argument("--chip", default="51.2t", help="switch chip of the buffer share: 51.2t, 25.6t")
    p.add_argument("--ep-split", type=int, default=1, help="exchanges per recorded EP frame")
    p.add_argument("--bytes", type=float, default=16e6, help="bytes per --incast transfer")
    p.add_argument(
        "--within-us", type=float, default=0.0, help="--incast starts spread over this window"
    )
    p.add_argument("--seed", type=int, default=1, help="seed of --incast's start times")
    p.add_argument(
        "--results",
        type=Path,
        default=Path("results"),
        help="where replay-<time>/ goes",
    )


def _window(text: str) -> tuple[float, float]:
    try:
        a, b = (float(x) for x in text.split(":"))
    except ValueError:
        raise ConfigError("window", text, "START:END in modelled seconds, e.g. 2.0:2.5") from None
    return a, b


def _fabric(kind: str, gpus: int) -> Any:
    from zcube_lab.core.fabric.builders import build_fabric
    from zcube_lab.core.fabric.description import FabricSpec
    from zcube_lab.core.fabric.scaledown import scaled_sizes

    if kind not in FABRIC_KINDS:
        raise ConfigError("fabrics", kind, f"kinds from {list(FABRIC_KINDS)}")
    return build_fabric(FabricSpec.of(kind, **scaled_sizes(kind, gpus)))


def plan(args: argparse.Namespace) -> tuple[Any, list[Any], Any]:
    """(recording, fabrics, time scale) the arguments ask for, every check done before any lab
    is built."""
    from emulator.replay.driver import slowest_port_gbps
    from emulator.replay.record import load_or_record, run_fabric
    from zcube_lab.core.replay import synthetic
    from zcube_lab.core.replay.recording import busiest_window
    from zcube_lab.core.replay.timescale import derive, own, parse_frame_us

    kinds = [k for k in args.fabrics.split(",") if k]
    if args.incast is not None:
        fabrics = [_fabric(k, args.gpus) for k in (kinds or ["zcube", "roft"])]
        hosts = [h.name for h in fabrics[0].hosts]
        rec = synthetic.incast(
            hosts, hosts[len(hosts) // 3], args.incast, args.bytes, args.within_us * 1e-6,
            args.seed,
        )  # fmt: skip
    else:
        if not args.source.exists():
            raise ConfigError("source", str(args.source), "a run folder or a recording file")
        rec = load_or_record(args.source)
        if not rec.transfers:
            raise ConfigError("source", str(args.source), "a run whose engines moved bytes")
        gpus = len(rec.hosts)
        if kinds:
            fabrics = [_fabric(k, gpus) for k in kinds]
        else:
            fabrics = [run_fabric({"fabric": rec.meta["fabric_spec"]})]
    if args.window and args.busiest:
        raise ConfigError("window", args.window, "either --window or --busiest, not both")
    if args.window:
        rec = rec.window(*_window(args.window))
    elif args.busiest:
        rec = rec.window(*busiest_window(rec, args.busiest))
    classes = [c for c in args.classes.split(",") if c]
    rec = rec.of_class(classes)
    if not rec.transfers:
        raise ConfigError("classes", args.classes, "classes with transfers in the window")
    slowest = slowest_port_gbps(fabrics)
    nic = fabrics[0].nic_gbps
    if args.resolution == "run":
        m = rec.meta
        if "nic_mbps" not in m:
            raise ConfigError("resolution", "run", "a recorded run (an --incast has no run)")
        ts = own(nic, slowest, float(m["nic_mbps"]), int(m["mtu"]), float(m["dilation"]))
    else:
        from emulator.lab.datapath_ceiling import datapath_ceiling

        ceiling = datapath_ceiling(args.mtu).mbps
        ts = derive(parse_frame_us(args.resolution), nic, slowest, args.mtu, ceiling_mbps=ceiling)
    return rec, fabrics, ts


def _threshold(args: argparse.Namespace, rec: Any, ts: Any, slowest: float) -> Any:
    from emulator.replay.driver import Threshold, thresholds_for
    from zcube_lab.core.fabric.queues import FLOOR_PACKETS

    if args.resolution == "run" and args.xoff_bytes is None:
        real = FLOOR_PACKETS * ts.mtu * ts.bandwidth_scale
        return Threshold(real, f"the run's queue: {FLOOR_PACKETS} frames of {ts.mtu} B")
    th = thresholds_for(args.chip, args.xoff_bytes, slowest)
    ts.threshold_frames(th.xoff_bytes, "xoff")  # refused before any lab is built
    return th


def run(args: argparse.Namespace) -> int:
    from emulator.lab.system import LabError
    from zcube_lab.adapters.procs import interrupt_on_stop_signals

    rec, fabrics, ts = plan(args)  # every check before a lab is built
    interrupt_on_stop_signals()
    try:
        return _replay_all(args, rec, fabrics, ts)
    except (LabError, RuntimeError) as exc:
        print(f"zcube-lab replay: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("zcube-lab replay: interrupted; the lab is torn down", file=sys.stderr)
        return 130


def _replay_all(args: argparse.Namespace, rec: Any, fabrics: list[Any], ts: Any) -> int:
    from emulator.replay.driver import replay, slowest_port_gbps
    from zcube_lab.core.replay.figures import contention

    slowest = slowest_port_gbps(fabrics)
    threshold = _threshold(args, rec, ts, slowest)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = args.results / f"replay-{stamp}"
    res = ts.describe()
    print(
        f"resolution: a {res['frame_us']:g} µs frame on the slowest host port "
        f"({slowest:g} Gb/s), byte scale {res['bandwidth_scale']:g}, MTU {ts.mtu}, "
        f"k={ts.dilation:g} ({ts.dilation:g} wall s per modelled s); XOFF {threshold.source}"
    )
    results: dict[str, Any] = {"resolution": res, "xoff": threshold.source, "fabrics": {}}
    classes = sorted({t.cls for t in rec.transfers})
    for fabric in fabrics:
        name = fabric.kind
        mixed = replay(rec, fabric, ts, threshold, out / name)
        entry: dict[str, Any] = {"mixed": mixed}
        if args.isolate and len(classes) > 1:
            iso: dict[str, Any] = {}
            for cls in classes:
                alone = replay(rec.of_class([cls]), fabric, ts, threshold, out / f"{name}-{cls}")
                iso[cls] = alone["classes"][cls]
            entry["isolated"] = iso
            entry["contention"] = contention(iso, mixed["classes"])
        results["fabrics"][name] = entry
        _print(name, entry)
    (out / "replay.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"written: {out / 'replay.json'}")
    return 0


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e6:,.1f}"


def _print(name: str, entry: dict[str, Any]) -> None:
    mixed = entry["mixed"]
    p = mixed["pauses"]
    print(
        f"{name}: {p['pause_frames']} pauses, {p['pause_total_us']:,.1f} µs paused in all, "
        f"reaction p99 {mixed['pause_reaction_p99_us']} µs"
    )
    for cls, row in mixed["classes"].items():
        fct = row["fct_s"]
        line = (
            f"  {cls}: {row['transfers']} transfers ({row['incomplete']} incomplete), FCT p50 "
            f"{_us(fct['p50'])} µs p99 {_us(fct['p99'])} µs"
        )
        if "exchange_s" in row:
            ex = row["exchange_s"]
            line += f"; exchange p50 {_us(ex['p50'])} µs p99 {_us(ex['p99'])} µs"
        fid = row.get("replay_over_live")
        if fid and fid.get("p50") is not None:
            verdict = "within 10%/20%" if fid["within"] else "outside 10%/20%"
            line += f"; replay/live p50 {fid['p50']:.2f} p99 {fid['p99']:.2f} ({verdict})"
        ratio = entry.get("contention", {}).get(cls, {})
        if ratio:
            line += "; contended/isolated p99 " + ", ".join(
                f"{k.split('_')[0]} {v:.2f}x" for k, v in ratio.items() if k.endswith("ratio")
            )
        print(line)
