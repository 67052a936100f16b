"""Benchmark: the fine time scale's measurements of issue 45 item 5, on ZCube, ROFT (1 and 2
planes) and Clos at the 16-GPU structure-keeping sizes, at the finest frame this machine carries
(2 µs on the slowest host port; k = 120 from the per-port budget, or with `--dilation load` the
smallest k that keeps every fabric's and row's datapath load within its share of the ceiling,
one k for all: `zcube_lab.core.replay.load`; each row records its `load` and `pace`).

- `pfc` (draft-calabria-bmwg-ai-fabric-inference-bench-05 §8.2): N_burst transfers of 16 MB into
  one host, their starts spread over 100 µs, 1 ms or 10 ms, XOFF 100 KB or 1 MB (10 KB needs a
  byte scale of 3.3, a 0.2 µs frame: out of reach at this time scale, and said so). N_burst 4, 8
  and 15 (the draft's 16 and 32 need more hosts than 16 GPUs have). Per row: PFC pause
  episodes, total pause time, KV completion (p50, max), modelled µs.
- `mix` (§7.4): an 8-GPU EP group (the decode GPUs) exchanging layer by layer, with KV pulls from
  the other 8 GPUs into its members at 50% and 75% of their NICs; each class also alone:
  KV_xfer_latency p99 and EP_alltoall_latency p99 isolated and contended, their ratio, pauses.
- `victim`: a 7-to-1 incast of 16 MB and, from the first incast sender to another host, a 64 MB
  victim transfer: its time beside the incast over its time alone.

Every row records the resolution and XOFF it ran at, where its lost datagrams were counted and
its verdict (`zcube_lab.core.replay.losses`); `--trials N` replays each row N times on the same lab
(rows keep each trial as `repeat`; the tables show the median and [min-max]). JSON to
bench/results/replay/<test>.json.

    sudo .venv/bin/python -m bench.replay_draft pfc --trials 3
    sudo .venv/bin/python -m bench.replay_draft mix victim --fabrics zcube,roft
    sudo .venv/bin/python -m bench.replay_draft mix --fabrics zcube,roft,clos --loads 0.5 \
        --trials 3 --dilation load --tag load
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import Fabric, FabricSpec
from zcube_lab.core.fabric.scaledown import scaled_fabric, scaled_sizes
from zcube_lab.core.replay import load
from zcube_lab.core.replay.figures import contention, victim_keeps
from zcube_lab.core.replay.load import Pace
from zcube_lab.core.replay.recording import Recording
from zcube_lab.core.replay.synthetic import ep_kv_mix, incast, victim
from zcube_lab.core.replay.timescale import (
    DRAFT_THRESHOLDS_BYTES,
    TimeScale,
    chip_port_share_bytes,
    derive,
)
from zcube_lab.emulator.replay.driver import (
    Threshold,
    demand_on,
    lab_for,
    payload_bytes,
    replay,
    slowest_port_gbps,
)

OUT = Path(__file__).resolve().parent / "results" / "replay"
FABRICS = ("zcube", "roft", "roft2", "clos")
BURSTS = (4, 8, 15)
WITHIN_US = (100.0, 1000.0, 10000.0)
THRESHOLDS = DRAFT_THRESHOLDS_BYTES


def build(name: str, gpus: int = 16) -> Fabric:
    if name == "roft2":
        sizes = scaled_sizes("roft", gpus, spines=1)
        return build_fabric(FabricSpec.of("roft", **sizes, planes=2))
    return scaled_fabric(name, gpus)


def pace(
    fabrics: dict[str, Fabric],
    recs: list[tuple[dict[str, Any], Recording]],
    frame_us: float,
    dilation: str | float,
) -> tuple[TimeScale, Pace]:
    """The time scale every fabric and recording of a test runs at: k from the per-port
    budget (`port`, as before the load model), from the datapath load of every fabric and
    recording (`load`: the largest any needs), or a number; with each case's load there."""
    from zcube_lab.emulator.lab.datapath_ceiling import datapath_ceiling

    fs = list(fabrics.values())
    base = derive(frame_us, fs[0].nic_gbps, slowest_port_gbps(fs))
    demands = {
        case_name(name, key): demand_on(rec, fabric)
        for name, fabric in fabrics.items()
        for key, rec in recs
    }
    ceiling = datapath_ceiling(base.mtu).packets_per_s(base.mtu)
    explicit = (
        None if dilation == "load" else base.dilation if dilation == "port" else float(dilation)
    )
    p = load.choose(demands, base, payload_bytes(base.mtu), ceiling, explicit=explicit)
    if dilation == "port":
        p = replace(p, reason=f"the per-port budget's (k={base.dilation:g})")
    print(f"k={p.dilation:g}: {p.reason}" + (f"; warning: {p.warning}" if p.warning else ""))
    return base.at_dilation(p.dilation), p


def case_name(fabric: str, key: dict[str, Any]) -> str:
    return " ".join([fabric, *(f"{k}={v}" for k, v in key.items())])


def run_all(
    fabric: Fabric,
    name: str,
    ts: TimeScale,
    xoff: float,
    recs: list[tuple[dict[str, Any], Recording]],
    repeat: int,
    p: Pace,
) -> list[dict[str, Any]]:
    """Each recording `repeat` times on one lab of `fabric` at the time scale and XOFF."""
    th = Threshold(xoff, f"{xoff:,.0f} real B")
    run_dir = Path(f"/tmp/zcube-replay-draft/{name}-{xoff:g}")
    lab = lab_for(fabric, ts, th, run_dir)
    lab.start()
    rows = []
    try:
        for i, (key, rec) in enumerate(recs):
            for rep in range(repeat):
                w0 = time.monotonic()
                res = replay(
                    rec, fabric, ts, th, run_dir / f"{i}-{rep}", lab=lab, progress=lambda _m: None
                )
                row = {
                    "fabric": name,
                    **key,
                    "repeat": rep,
                    "resolution": res["resolution"],
                    "load": p.loads[case_name(name, key)].describe(),
                    "pace": p.reason,
                    "lab": res.get("lab"),
                    "xoff_bytes": xoff,
                    "xoff_frames": res["xoff"]["frames"],
                    "classes": res["classes"],
                    "pauses": res["pauses"],
                    "reaction_p99_us": res["pause_reaction_p99_us"],
                    "losses": res.get("losses"),
                    "cpu": res.get("cpu"),
                    "verdict": res.get("verdict"),
                    "wall_s": round(time.monotonic() - w0, 2),
                }
                rows.append(row)
                print(json.dumps(short(row)), flush=True)
    finally:
        lab.stop()
    return rows


def short(row: dict[str, Any]) -> dict[str, Any]:
    """A row's headline for the terminal."""
    from zcube_lab.core.replay.losses import verdict_line, where_text

    skip = ("classes", "resolution", "pauses", "losses", "verdict", "lab", "load", "pace")
    out = {k: v for k, v in row.items() if k not in skip}
    out["pauses"] = row["pauses"]["pause_frames"]
    if row.get("losses"):
        out["lost"] = where_text(row["losses"])
    if row.get("verdict"):
        out["verdict"] = verdict_line(row["verdict"])
    out["paused_us"] = row["pauses"]["pause_total_us"]
    out["k"] = row["resolution"]["dilation"]
    out["load_of_ceiling"] = row["load"]["of_ceiling"]
    for cls, c in row["classes"].items():
        out[f"{cls}_p99_us"] = None if c["fct_s"]["p99"] is None else round(c["fct_s"]["p99"] * 1e6)
        out[f"{cls}_incomplete"] = c["incomplete"]
        if "exchange_s" in c and c["exchange_s"]["p99"] is not None:
            out["ep_exchange_p99_us"] = round(c["exchange_s"]["p99"] * 1e6, 1)
    return out


def pfc(
    fabrics: dict[str, Fabric], frame_us: float, repeat: int, dilation: str | float
) -> dict[str, Any]:
    hosts = [h.name for h in next(iter(fabrics.values())).hosts]
    receiver = hosts[len(hosts) // 3]
    recs = [
        ({"n_burst": n, "within_us": w}, incast(hosts, receiver, n, 16e6, w * 1e-6))
        for n in BURSTS
        for w in WITHIN_US
    ]
    ts, p = pace(fabrics, recs, frame_us, dilation)
    out: dict[str, Any] = {"rows": [], "refused": [], "pace": p.describe()}
    for xoff in THRESHOLDS:
        try:
            ts.threshold_frames(xoff)
        except ConfigError as e:
            out["refused"].append({"xoff_bytes": xoff, "why": str(e)})
            print(f"XOFF {xoff:g} B: out of reach at this time scale: {e}")
            continue
        for name, fabric in fabrics.items():
            out["rows"] += run_all(fabric, name, ts, xoff, recs, repeat, p)
    return out


LOADS = (0.5, 0.75)


def mix(
    fabrics: dict[str, Fabric],
    frame_us: float,
    repeat: int,
    dilation: str | float,
    loads: tuple[float, ...] = LOADS,
) -> dict[str, Any]:
    slowest = slowest_port_gbps(list(fabrics.values()))
    hosts = [h.name for h in next(iter(fabrics.values())).hosts]
    group, sources = hosts[:8], hosts[8:]
    xoff = chip_port_share_bytes("51.2t", slowest)
    out: dict[str, Any] = {"rows": [], "contention": [], "pace": {}}
    for kv_load in loads:
        full = ep_kv_mix(hosts, group, sources, kv_load, layers=20, seed=1)
        recs = [
            ({"kv_load": kv_load, "replayed": "mixed"}, full),
            ({"kv_load": kv_load, "replayed": "ep"}, full.of_class(["ep"])),
            ({"kv_load": kv_load, "replayed": "kv"}, full.of_class(["kv"])),
        ]
        ts, p = pace(fabrics, recs, frame_us, dilation)
        out["pace"][f"{kv_load:g}"] = p.describe()
        for name, fabric in fabrics.items():
            w0 = time.monotonic()
            rows = run_all(fabric, name, ts, xoff, recs, repeat, p)
            out.setdefault("wall_s", {})[f"{name} {kv_load:g}"] = round(time.monotonic() - w0, 1)
            out["rows"] += rows
            for rep in range(repeat):
                of = {r["replayed"]: r for r in rows if r["repeat"] == rep}
                mixed = of["mixed"]
                iso = {cls: of[cls]["classes"][cls] for cls in ("ep", "kv")}
                c = contention(iso, mixed["classes"])
                out["contention"].append({"fabric": name, "kv_load": kv_load, "repeat": rep, **c})
                print(json.dumps({"fabric": name, "kv_load": kv_load, "contention": c}), flush=True)
    return out


def victim_flow(
    fabrics: dict[str, Fabric], frame_us: float, repeat: int, dilation: str | float
) -> dict[str, Any]:
    slowest = slowest_port_gbps(list(fabrics.values()))
    hosts = [h.name for h in next(iter(fabrics.values())).hosts]
    receiver, senders, pair = "h5", ["h0", "h1", "h2", "h8", "h10", "h12", "h15"], ("h0", "h9")
    xoff = chip_port_share_bytes("51.2t", slowest)
    both = victim(hosts, receiver, senders, pair, 16e6, 64e6)
    recs = [({"case": "incast+victim"}, both), ({"case": "victim alone"}, both.of_class(["other"]))]
    ts, p = pace(fabrics, recs, frame_us, dilation)
    out: dict[str, Any] = {"rows": [], "victim": [], "pace": p.describe()}
    for name, fabric in fabrics.items():
        rows = run_all(fabric, name, ts, xoff, recs, repeat, p)
        out["rows"] += rows
        alone = [r["classes"]["other"]["fct_s"]["max"] for r in rows if r["case"] == "victim alone"]
        beside = [
            r["classes"]["other"]["fct_s"]["max"] for r in rows if r["case"] == "incast+victim"
        ]
        keeps = victim_keeps(alone, beside)
        if keeps is not None:
            out["victim"].append({"fabric": name, "keeps_of_its_rate": round(keeps, 3)})
            print(f"{name}: the victim keeps {keeps:.2f} of its rate beside the incast")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tests", nargs="+", choices=("pfc", "mix", "victim"))
    p.add_argument("--fabrics", default=",".join(FABRICS))
    p.add_argument("--frame-us", type=float, default=2.0)
    p.add_argument(
        "--trials",
        "--repeat",
        dest="repeat",
        type=int,
        default=1,
        help="replays of each row on the same lab; every trial is kept, the tables show the "
        "median and [min-max]",
    )
    p.add_argument("--loads", default=",".join(f"{x:g}" for x in LOADS), help="mix's KV loads")
    p.add_argument(
        "--dilation",
        default="port",
        help="k: 'port' (the per-port wall budget's, as the committed results ran), 'load' "
        "(the smallest that keeps every fabric's and row's datapath load within its share of "
        "the ceiling, one k for all: zcube_lab.core.replay.load), or a number",
    )
    p.add_argument("--tag", default="", help="write <test>-<tag>.json instead of <test>.json")
    args = p.parse_args()
    if args.repeat < 1:
        p.error("--trials: at least 1")
    if args.dilation not in ("port", "load"):
        try:
            float(args.dilation)
        except ValueError:
            p.error("--dilation: port, load or a number")
    fabrics = {name: build(name) for name in args.fabrics.split(",")}
    OUT.mkdir(parents=True, exist_ok=True)
    loads = tuple(float(x) for x in args.loads.split(","))
    for test in args.tests:
        fn = {
            "pfc": pfc,
            "mix": functools.partial(mix, loads=loads),
            "victim": victim_flow,
        }[test]
        w0 = time.monotonic()
        dilation = args.dilation if args.dilation in ("port", "load") else float(args.dilation)
        result = {
            "test": test,
            "frame_us": args.frame_us,
            "trials": args.repeat,
            "dilation_asked": args.dilation,
            **fn(fabrics, args.frame_us, args.repeat, dilation),
        }
        result["wall_s_total"] = round(time.monotonic() - w0, 1)
        path = OUT / (f"{test}-{args.tag}.json" if args.tag else f"{test}.json")
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"written: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
