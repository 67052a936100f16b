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


def add_arguments(p: argparse.ArgumentParser) -> None:
    from zcube_lab.core.options import add_flags
    from zcube_lab.core.replay.config import ReplayConfig

    p.description = (
        "Replay a run's transfers (KV pulls, EP exchanges with their chains) on one or more "
        "fabrics at a time scale of your choice: a frame of a few µs of modelled time, where "
        "a real switch's buffer and PFC live. Needs root. docs/REPLAY.md."
    )
    p.add_argument(
        "source",
        nargs="?",
        type=Path,
        help="a run folder (its transfers.jsonl; recorded from its logs if missing) or a "
        "recording file; or none, with --incast",
    )
    add_flags(p, ReplayConfig)


def config_of(args: argparse.Namespace) -> Any:
    """The replay's config from the parsed flags; a source or --incast, not both."""
    from zcube_lab.core.options import from_args
    from zcube_lab.core.replay.config import ReplayConfig

    cfg = from_args(ReplayConfig, args)
    if (args.source is None) == (cfg.incast is None):
        raise ConfigError("source", args.source, "a run folder or recording, or --incast N")
    return cfg


def plan(cfg: Any, source: Path | None) -> tuple[Any, list[Any], Any, Any]:
    """(recording, fabrics, time scale, pace) the config asks for, every check done before any
    lab is built: the time scale's k is the pace's (`pace`)."""
    from zcube_lab.core.fabric.scaledown import scaled_fabric
    from zcube_lab.core.replay import synthetic
    from zcube_lab.core.replay.recording import busiest_window
    from zcube_lab.core.replay.timescale import derive, own, parse_frame_us
    from zcube_lab.emulator.replay.driver import slowest_port_gbps
    from zcube_lab.emulator.replay.record import load_or_record, record_run, run_fabric

    kinds = cfg.fabric_kinds
    if cfg.incast is not None:
        fabrics = [scaled_fabric(k, cfg.gpus) for k in (kinds or ["zcube", "roft"])]
        hosts = [h.name for h in fabrics[0].hosts]
        receiver = hosts[len(hosts) // 3]
        rec = synthetic.incast(
            hosts, receiver, cfg.incast, cfg.bytes, cfg.within_us * 1e-6, cfg.seed
        )
    else:
        assert source is not None
        if not source.exists():
            raise ConfigError("source", str(source), "a run folder or a recording file")
        rec = record_run(source, cfg.ep_split) if cfg.ep_split > 1 else load_or_record(source)
        if not rec.transfers:
            raise ConfigError("source", str(source), "a run whose engines moved bytes")
        gpus = len(rec.hosts)
        if kinds:
            fabrics = [scaled_fabric(k, gpus) for k in kinds]
        else:
            fabrics = [run_fabric({"fabric": rec.meta["fabric_spec"]})]
    if cfg.window:
        rec = rec.window(*cfg.window_s)
    elif cfg.busiest:
        rec = rec.window(*busiest_window(rec, cfg.busiest))
    rec = rec.of_class(cfg.class_list)
    if not rec.transfers:
        raise ConfigError("classes", cfg.classes, "classes with transfers in the window")
    slowest = slowest_port_gbps(fabrics)
    nic = fabrics[0].nic_gbps
    if cfg.resolution == "run":
        m = rec.meta
        if "nic_mbps" not in m:
            raise ConfigError("resolution", "run", "a recorded run (an --incast has no run)")
        ts = own(nic, slowest, float(m["nic_mbps"]), int(m["mtu"]), float(m["dilation"]))
    else:
        from zcube_lab.emulator.lab.datapath_ceiling import datapath_ceiling

        ceiling = datapath_ceiling(cfg.mtu).mbps
        ts = derive(parse_frame_us(cfg.resolution), nic, slowest, cfg.mtu, ceiling_mbps=ceiling)
    p = pace(cfg, rec, fabrics, ts)
    return rec, fabrics, ts.at_dilation(p.dilation), p


def pace(cfg: Any, rec: Any, fabrics: list[Any], ts: Any) -> Any:
    """The k every fabric replays at (`zcube_lab.core.replay.load.choose`): the smallest that
    keeps each fabric's datapath load, with each class alone too under --isolate, within its
    share of the measured ceiling, one k for all; or --dilation (warned of when it leaves a
    fabric above the share); at --resolution run, the run's own k unless --dilation."""
    from zcube_lab.core.replay import load
    from zcube_lab.emulator.lab.datapath_ceiling import datapath_ceiling
    from zcube_lab.emulator.replay.driver import demand_on, payload_bytes

    recs = {"": rec}
    classes = sorted({t.cls for t in rec.transfers})
    if cfg.isolate and len(classes) > 1:
        recs |= {f" {c} alone": rec.of_class([c]) for c in classes}
    demands = {f.kind + what: demand_on(r, f) for f in fabrics for what, r in recs.items()}
    ceiling = datapath_ceiling(ts.mtu).packets_per_s(ts.mtu)
    explicit = cfg.dilation
    if explicit is None and cfg.resolution == "run":
        explicit = ts.dilation
    return load.choose(demands, ts, payload_bytes(ts.mtu), ceiling, explicit=explicit)


def _threshold(cfg: Any, ts: Any, slowest: float) -> Any:
    from zcube_lab.core.fabric.queues import FLOOR_PACKETS
    from zcube_lab.emulator.replay.driver import Threshold, thresholds_for

    if cfg.resolution == "run" and cfg.xoff_bytes is None:
        real = FLOOR_PACKETS * ts.mtu * ts.bandwidth_scale
        return Threshold(real, f"the run's queue: {FLOOR_PACKETS} frames of {ts.mtu} B")
    th = thresholds_for(cfg.chip, cfg.xoff_bytes, slowest)
    ts.threshold_frames(th.xoff_bytes, "xoff")  # refused before any lab is built
    return th


def run(args: argparse.Namespace) -> int:
    from zcube_lab.adapters.procs import interrupt_on_stop_signals
    from zcube_lab.emulator.lab.system import LabError
    from zcube_lab.emulator.replay.driver import slowest_port_gbps

    cfg = config_of(args)
    rec, fabrics, ts, p = plan(cfg, args.source)  # every check before a lab is built
    threshold = _threshold(cfg, ts, slowest_port_gbps(fabrics))
    interrupt_on_stop_signals()
    try:
        return _replay_all(cfg, rec, fabrics, ts, threshold, p)
    except (LabError, RuntimeError) as exc:
        print(f"zcube-lab replay: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("zcube-lab replay: interrupted; the lab is torn down", file=sys.stderr)
        return 130


def _replay_all(cfg: Any, rec: Any, fabrics: list[Any], ts: Any, threshold: Any, pace: Any) -> int:
    from zcube_lab.core.replay import trials as tr
    from zcube_lab.core.replay.figures import contention
    from zcube_lab.emulator.replay.driver import lab_for, replay, slowest_port_gbps

    slowest = slowest_port_gbps(fabrics)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = cfg.results / f"replay-{stamp}"
    res = ts.describe()
    print(
        f"resolution: a {res['frame_us']:g} µs frame on the slowest host port "
        f"({slowest:g} Gb/s), byte scale {res['bandwidth_scale']:g}, MTU {ts.mtu}, "
        f"k={ts.dilation:g} ({ts.dilation:g} wall s per modelled s); XOFF {threshold.source}; "
        f"KV striping {cfg.kv_striping}"
    )
    print(f"k={pace.dilation:g}: {pace.reason}")
    for case, ld in pace.loads.items():
        print(
            f"  datapath load, {case}: {ld.peak_pps:,.0f} packet-hops/s in its busiest "
            f"{ld.window_wall_s:g} s, {ld.of_ceiling:.0%} of {ld.ceiling_pps:,.0f} pps "
            f"(allowed {ld.share:.0%}; {ld.mean_hops:.2f} switches a datagram)"
        )
    if pace.warning:
        print(f"warning: {pace.warning}", file=sys.stderr)
    results: dict[str, Any] = {
        "resolution": res,
        "pace": pace.describe(),
        "xoff": threshold.source,
        "striping": cfg.kv_striping,
        "trials": cfg.trials,
        "fabrics": {},
    }
    classes = sorted({t.cls for t in rec.transfers})
    isolate = cfg.isolate and len(classes) > 1
    for fabric in fabrics:
        name = fabric.kind
        (out / name).mkdir(parents=True, exist_ok=True)
        lab = lab_for(fabric, ts, threshold, out / name)
        print(f"bringing up {name} at a {res['frame_us']:g} µs frame, k={ts.dilation:g}")
        lab.start()
        runs: list[dict[str, Any]] = []
        try:
            for i in range(cfg.trials):
                sub = f"-t{i + 1}" if cfg.trials > 1 else ""
                mixed = replay(
                    rec, fabric, ts, threshold, out / f"{name}{sub}", lab=lab,
                    load=pace.loads[name].describe(), striping=cfg.kv_striping,
                )  # fmt: skip
                entry: dict[str, Any] = {"mixed": mixed}
                if isolate:
                    iso: dict[str, Any] = {}
                    for cls in classes:
                        alone = replay(
                            rec.of_class([cls]), fabric, ts, threshold,
                            out / f"{name}-{cls}{sub}", lab=lab,
                            load=pace.loads[f"{name} {cls} alone"].describe(),
                            striping=cfg.kv_striping,
                        )  # fmt: skip
                        iso[cls] = alone["classes"][cls]
                        entry.setdefault("isolated_verdicts", {})[cls] = alone.get("verdict")
                    entry["isolated"] = iso
                    entry["contention"] = contention(iso, mixed["classes"])
                runs.append(entry)
                head = name if cfg.trials == 1 else f"{name}, trial {i + 1} of {cfg.trials}"
                _print(head, entry)
        finally:
            lab.stop()
        if cfg.trials == 1:
            results["fabrics"][name] = runs[0]
        else:
            spread = {
                "mixed": tr.aggregate([r["mixed"] for r in runs]),
                "contention": tr.contention_spread([r.get("contention", {}) for r in runs]),
                "trusted_trials": sum(
                    1 for r in runs if (r["mixed"].get("verdict") or {}).get("trusted")
                ),
            }
            results["fabrics"][name] = {"trials": runs, "spread": spread}
            _print_spread(name, spread, cfg.trials)
    (out / "replay.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"written: {out / 'replay.json'}")
    return 0


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e6:,.1f}"


def _print(name: str, entry: dict[str, Any]) -> None:
    from zcube_lab.core.replay.losses import verdict_line, where_text

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
    v = mixed.get("victims")
    if v and v.get("pauses"):
        raised = ", ".join(
            f"{c} {t['pauses_raised']}" for c, t in v["classes"].items() if t["pauses_raised"]
        )
        print(
            f"  victims: {v['ep_victims']} of {v['ep_exchanges']} EP exchanges behind a pause "
            f"another class raised; {v['pauses']} episodes (raised by {raised or 'none known'})"
        )
    if "losses" in mixed:
        print(f"  lost: {where_text(mixed['losses'])}")
        cpu = mixed["cpu"]
        if cpu.get("busy") is not None:
            print(f"  CPU: {cpu['busy']:.0%} busy, {cpu['steal']:.1%} steal")
    if "verdict" in mixed:
        print(f"  {verdict_line(mixed['verdict'])}")
    for cls, v in (entry.get("isolated_verdicts") or {}).items():
        if v is not None:
            print(f"  {cls} alone: {verdict_line(v)}")


def _print_spread(name: str, spread: dict[str, Any], n: int) -> None:
    """Each headline figure as `median [min-max]` over the trials."""
    from zcube_lab.core.replay.trials import text

    m = spread["mixed"]
    print(f"{name} over {n} trials (median [min-max]):")
    for key, s in m.items():
        if key.endswith("_s"):
            print(f"  {key.removesuffix('_s')}: {text(s, ',.1f', 1e6)} µs")
        elif key == "trusted":
            print(f"  trusted: {spread['trusted_trials']} of {n}")
        elif key.startswith("cpu."):
            print(f"  {key}: {text(s, '.0%')}")
        else:
            print(f"  {key}: {text(s, ',.0f')}")
    for cls, ratios in spread["contention"].items():
        for k, s in ratios.items():
            if k.endswith("ratio"):
                print(f"  {cls} contended/isolated {k.split('_')[0]} p99: {text(s, '.2f')}x")
