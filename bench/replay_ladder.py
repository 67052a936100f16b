"""Benchmark: the convergence ladder of the fine time scale (issue 45 items 4b and 5, and its
performance line): one scenario replayed on each fabric at frames of ~720, ~70, ~7 and 2 µs.

Scenarios (each a recording, `zcube_lab.core.replay`):
- `incast`: the IETF draft's §8.2 burst (draft-calabria-bmwg-ai-fabric-inference-bench-05):
  `--senders` transfers of `--bytes` into one host, starting within `--within-us`;
- a run folder: its recording (`--run DIR`, with `--window A:B` or `--busiest S`).
XOFF is the 51.2T chip's per-port share (644,531 B for a 200 Gb/s port) or `--xoff-bytes`;
where a rung cannot hold it in two frames it is raised to two frames there, and the row says
so (that is the coarse rungs' artifact the ladder exists to show).

Printed per fabric and rung: the frame, k, XOFF as run (real bytes), per class the completion
p50/p99/max (modelled µs) and the EP exchange p99, pauses (episodes, total modelled µs), the
lossless agent's reaction p99 (modelled µs), the replay's wall seconds and wall seconds per
modelled second, and the machine's CPU over the replay (busy cores, from /proc/stat: noisy on a
shared machine). Then each figure's change between the last two rungs; a figure is converged
when that change is under 10%. JSON to bench/results/replay/ladder-<scenario>.json.

    sudo .venv/bin/python -m bench.replay_ladder --senders 8
    sudo .venv/bin/python -m bench.replay_ladder --run results/<run> --busiest 0.1 --rungs 7,2
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.scaledown import scaled_sizes
from zcube_lab.core.replay.recording import busiest_window
from zcube_lab.core.replay.synthetic import incast
from zcube_lab.core.replay.timescale import (
    LADDER_US,
    MIN_FRAMES,
    chip_port_share_bytes,
    derive,
)
from zcube_lab.emulator.replay.driver import Threshold, lab_for, replay, slowest_port_gbps
from zcube_lab.emulator.replay.record import load_or_record

OUT = Path(__file__).resolve().parent / "results" / "replay"
CONVERGED = 0.10


def busy_cores() -> tuple[float, float]:
    """(busy jiffies, total jiffies) of the whole machine so far."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def figures_of(result: dict[str, Any]) -> dict[str, float | None]:
    """The figures the ladder follows, in modelled µs (None where absent)."""
    out: dict[str, float | None] = {}
    for cls, row in result["classes"].items():
        for q in ("p50", "p99", "max"):
            v = row["fct_s"][q]
            out[f"{cls}_fct_{q}_us"] = None if v is None else v * 1e6
        if "exchange_s" in row and row["exchange_s"]["p99"] is not None:
            out["ep_exchange_p99_us"] = row["exchange_s"]["p99"] * 1e6
    out["pauses"] = float(result["pauses"]["pause_frames"])
    out["paused_us"] = result["pauses"]["pause_total_us"]
    return out


def change(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a == 0:
        return None
    return (b - a) / a


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fabrics", default="zcube,roft,clos")
    p.add_argument("--gpus", type=int, default=16)
    p.add_argument("--rungs", default=",".join(f"{r:g}" for r in LADDER_US), help="frame µs")
    p.add_argument("--senders", type=int, default=8)
    p.add_argument("--bytes", type=float, default=16e6)
    p.add_argument("--within-us", type=float, default=0.0)
    p.add_argument("--run", type=Path, default=None, help="a run folder instead of an incast")
    p.add_argument("--window", default="")
    p.add_argument("--busiest", type=float, default=0.0)
    p.add_argument("--xoff-bytes", type=float, default=None)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--name", default="")
    args = p.parse_args()
    rungs = [float(r) for r in args.rungs.split(",")]
    fabrics = {
        k: build_fabric(FabricSpec.of(k, **scaled_sizes(k, args.gpus)))
        for k in args.fabrics.split(",")
    }
    slowest = slowest_port_gbps(list(fabrics.values()))
    nic = next(iter(fabrics.values())).nic_gbps
    hosts = [h.name for h in next(iter(fabrics.values())).hosts]
    if args.run is not None:
        rec = load_or_record(args.run)
        if args.window:
            a, b = (float(x) for x in args.window.split(":"))
            rec = rec.window(a, b)
        elif args.busiest:
            rec = rec.window(*busiest_window(rec, args.busiest))
        scenario = args.name or f"run-{args.run.name}"
    else:
        rec = incast(hosts, hosts[len(hosts) // 3], args.senders, args.bytes, args.within_us * 1e-6)
        scenario = args.name or f"incast{args.senders}x{args.bytes / 1e6:g}MB"
    xoff = args.xoff_bytes or chip_port_share_bytes("51.2t", slowest)
    rows: list[dict[str, Any]] = []
    for kind, fabric in fabrics.items():
        for rung in rungs:
            ts = derive(rung, nic, slowest)
            try:
                ts.threshold_frames(xoff)
                used, note = xoff, ""
            except ConfigError:
                used = MIN_FRAMES * ts.mtu * ts.bandwidth_scale
                note = f"XOFF raised to {MIN_FRAMES} frames ({used:,.0f} real B)"
            th = Threshold(used, note or f"{used:,.0f} real B")
            run_dir = Path(f"/tmp/zcube-replay-ladder/{scenario}/{kind}-{rung:g}")
            lab = lab_for(fabric, ts, th, run_dir)
            lab.start()
            try:
                for rep in range(args.repeat):
                    b0, t0 = busy_cores()
                    w0 = time.monotonic()
                    res = replay(
                        rec, fabric, ts, th, run_dir / str(rep), lab=lab, progress=lambda _m: None
                    )
                    wall = time.monotonic() - w0
                    b1, t1 = busy_cores()
                    span = max(
                        (row["fct_s"]["max"] or 0.0) for row in res["classes"].values()
                    ) + max((t.start_s for t in rec.transfers), default=0.0)
                    figs = {
                        k: (None if v is None else round(v, 2)) for k, v in figures_of(res).items()
                    }
                    row = {
                        "fabric": kind,
                        "frame_us": rung,
                        "repeat": rep,
                        "dilation": ts.dilation,
                        "bandwidth_scale": round(ts.bandwidth_scale, 3),
                        "xoff_real_bytes": round(used),
                        "xoff_note": note,
                        "lab": res.get("lab"),
                        "reaction_p99_us": res["pause_reaction_p99_us"],
                        "wall_s": round(wall, 2),
                        "modelled_span_s": span,
                        "wall_per_modelled_s": round(wall / span, 1) if span else None,
                        "busy_cores": round((b1 - b0) / (t1 - t0) * 2, 2) if t1 > t0 else None,
                        **figs,
                        "incomplete": sum(r["incomplete"] for r in res["classes"].values()),
                        # where lost datagrams were counted, and the replay's own verdict
                        "losses": res.get("losses"),
                        "verdict": res.get("verdict"),
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            finally:
                lab.stop()
    conv = converged(rows, rungs)
    for line in conv["lines"]:
        print(line)
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"ladder-{scenario}.json"
    doc = {"scenario": scenario, "rows": rows, "convergence": conv["table"]}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"written: {out}")
    return 0


def converged(rows: list[dict[str, Any]], rungs: list[float]) -> dict[str, Any]:
    """Per fabric and figure, the median of the last two rungs and their change."""
    import statistics

    table: dict[str, dict[str, Any]] = {}
    lines = []
    if len(rungs) < 2:
        return {"table": table, "lines": lines}
    a, b = rungs[-2], rungs[-1]
    for kind in sorted({r["fabric"] for r in rows}):
        table[kind] = {}
        keys = [k for k in rows[0] if k.endswith("_us") or k == "pauses"]
        for key in keys:
            va = [r[key] for r in rows if r["fabric"] == kind and r["frame_us"] == a]
            vb = [r[key] for r in rows if r["fabric"] == kind and r["frame_us"] == b]
            va = [v for v in va if v is not None]
            vb = [v for v in vb if v is not None]
            if not va or not vb:
                continue
            c = change(statistics.median(va), statistics.median(vb))
            table[kind][key] = {
                "at": [a, b],
                "values": [statistics.median(va), statistics.median(vb)],
                "change": None if c is None else round(c, 4),
                "converged": c is not None and abs(c) < CONVERGED,
            }
            verdict = "converged" if c is not None and abs(c) < CONVERGED else "NOT converged"
            shown = "-" if c is None else f"{c:+.1%}"
            lines.append(f"{kind} {key}: {a:g} -> {b:g} µs: {shown} ({verdict})")
    return {"table": table, "lines": lines}


if __name__ == "__main__":
    raise SystemExit(main())
