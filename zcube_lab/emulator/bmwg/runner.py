"""`zcube-lab bmwg run`: the draft's tests on each fabric at the fine time scale, through the
replay driver (`zcube_lab.emulator.replay.driver.replay`, used as it is; issue 46).

`plan_run` does every check and works out the cases, the time scale and the estimated wall time
before any lab is built (pure but for building the fabric descriptions and reading the
datapath's measured ceiling). `run_plan` brings one lab up per fabric and XOFF, replays every
trial of every case on it, prints progress, and writes `bmwg.json` into a results folder after
every case (so an interrupted run keeps what it measured); Ctrl-C tears the lab down (the
`finally` below and the driver's own).
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zcube_lab.core.bmwg import plan as bplan
from zcube_lab.core.bmwg import report
from zcube_lab.core.bmwg.catalogue import DRAFT, BmwgTest
from zcube_lab.core.bmwg.config import BmwgConfig
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.scaledown import scaled_fabric
from zcube_lab.core.replay.timescale import TimeScale

RESULTS_FILE = "bmwg.json"


@dataclass
class RunPlan:
    """What a run will do (see `plan_run`)."""

    tests: list[BmwgTest]
    fabrics: dict[str, Fabric]
    hosts: list[str]
    ts: TimeScale
    cases: list[bplan.Case]
    refused: list[bplan.Refused]
    estimate_s: float
    chip_share: float
    notes: list[str] = field(default_factory=list)
    pace: dict[str, Any] = field(default_factory=dict)  # each case's k, the per-port k


def plan_run(cfg: BmwgConfig, tests: list[BmwgTest]) -> RunPlan:
    """The run's plan; ConfigError for anything the fabrics or the time scale cannot carry."""
    from zcube_lab.core.replay.timescale import chip_port_share_bytes, derive, parse_frame_us
    from zcube_lab.emulator.lab.datapath_ceiling import datapath_ceiling
    from zcube_lab.emulator.replay.driver import slowest_port_gbps

    fabrics = {k: scaled_fabric(k, cfg.gpus) for k in cfg.fabric_kinds}
    host_sets = {k: [h.name for h in f.hosts] for k, f in fabrics.items()}
    hosts = next(iter(host_sets.values()))
    for k, hs in host_sets.items():
        if sorted(hs) != sorted(hosts):
            raise ConfigError("fabrics", k, f"fabrics with the same {len(hosts)} GPU hosts")
    slowest = slowest_port_gbps(list(fabrics.values()))
    nic = next(iter(fabrics.values())).nic_gbps
    ceiling = datapath_ceiling(1500).mbps
    ts = derive(parse_frame_us(cfg.resolution), nic, slowest, ceiling_mbps=ceiling)
    share = chip_port_share_bytes("51.2t", slowest)
    cases, refused = bplan.cases(cfg, tests, len(hosts), ts, share, ceiling_mbps=ceiling)
    if not cases:
        raise ConfigError("sections", [t.section for t in tests], "a case the time scale holds")
    cases, pace = paced(cases, fabrics, hosts, cfg, ts)
    est = bplan.estimate_wall_s(cases, hosts, len(fabrics), cfg.trials, cfg.trial_seconds, ts)
    try:
        bplan.check_size(cases, hosts, cfg.trial_seconds)
    except ConfigError as e:
        raise ConfigError(
            e.field, e.value, f"{e.allowed} (and the run asked would take about {_hms(est)})"
        ) from None
    notes = []
    if "8.2" in {t.section for t in tests}:
        notes.append(
            "8.2: HOL_delay is a 1 MB other-class flow's worst delay beyond its time alone, "
            "one per burst between hosts the burst leaves free (none when N_burst > hosts - 3)"
        )
    if "5.1" in {t.section for t in tests}:
        notes.append(
            "5.1: a QP is one of the pair's parallel transfers (each already spread over every "
            "NIC port of its hosts); KV_xfer_bandwidth is every byte over first start to last "
            "arrival"
        )
    if "5.2" in {t.section for t in tests}:
        notes.append(
            "5.2: the background is every other host pair (host i to host i + half) at the "
            f"level of its NIC in {bplan.BG_BYTES:,.0f} B messages; a trial whose background "
            f"carried under {report.LOAD_REACHED:.0%} of that is out of reach"
        )
    if "10.4" in {t.section for t in tests}:
        notes.append(
            "10.4: §5.2's trial at each background level; the inflection point is the lowest "
            f"level from which the KV p99 stays above {1 + report.INFLECTION_RISE:g} times its "
            "value at the lowest level, per trial; a trial whose levels up to it fell short "
            "of their background or lost transfers is out of reach"
        )
    if "8.4" in {t.section for t in tests}:
        from zcube_lab.core.bmwg import pfcstorm as ps

        cycles = {k: "yes" if ps.routing_cycle(f) else "no" for k, f in fabrics.items()}
        notes.append(
            "8.4: the storm source is a stuck receiver: every switch port toward host "
            f"{ps.stuck_host(hosts)} held paused from {ps.WARM_SHARE:.0%} of the trial for "
            f"{ps.STUCK_SHARE:.0%} of it, the lossless agent's rules pausing the ports feeding "
            f"each queue that fills; KV messages of {ps.MSG_BYTES / 1e3:g} KB into it from "
            "every other host (together "
            f"{ps.IN_LOAD:.0%} of its NIC) and between every other pair i -> i + half at "
            f"{ps.VICTIM_LOAD:.0%} of a NIC (the victims); a deadlock is pauses still held "
            f"{ps.DEADLOCK_FACTOR:g} windows after the release; cyclic buffer dependency in "
            f"the routes: {', '.join(f'{k} {v}' for k, v in cycles.items())}; the lossless "
            "agent pauses on egress queues only here (no ingress accounting: runner.STORM_INGRESS)"
        )
    from zcube_lab.core.bmwg.alltoall import note as a2a_note

    notes += a2a_note([t.section for t in tests])
    ks = sorted({c.dilation for c in cases})
    notes.append(
        f"pace: k = {', '.join(f'{k:g}' for k in ks)} by case (the per-port budget's "
        f"{ts.dilation:g} where that keeps the datapath within its share): {pace}"
    )
    return RunPlan(tests, fabrics, hosts, ts, cases, refused, est, share, notes,
                   {"per_case": {f"§{c.section} {c.label}": c.dilation for c in cases},
                    "port_budget_dilation": ts.dilation})  # fmt: skip


def paced(cases: list[bplan.Case], fabrics: dict[str, Fabric], hosts: list[str],
          cfg: BmwgConfig, ts: TimeScale) -> tuple[list[bplan.Case], str]:  # fmt: skip
    """Each case at one k on every fabric (`zcube_lab.core.replay.load.choose`): the smallest,
    at least the per-port budget's, that keeps its first trial, on every fabric and in every
    replay of it (§7.4's mixed and each class alone), within the datapath's share of its
    measured packets per second, so the compared fabrics run at one wall pace and a fabric
    whose paths cross more switches does not lose datagrams to the lab's own datapath
    (docs/REPLAY.md, pace); light cases keep the budget's k. The cases with their k, and the
    reason of the case that needed the most."""
    from dataclasses import replace

    from zcube_lab.core.replay import load
    from zcube_lab.emulator.lab.datapath_ceiling import datapath_ceiling
    from zcube_lab.emulator.replay.driver import demand_on, payload_bytes

    ceiling = datapath_ceiling(ts.mtu).packets_per_s(ts.mtu)
    out, worst = [], None
    for case in cases:
        recs = bplan.trial_recordings(case, hosts, cfg.trial_seconds, cfg.seed)
        demands = {f"{name} {case.label} {what}": demand_on(rec, fabric)
                   for what, rec in recs.items() for name, fabric in fabrics.items()}  # fmt: skip
        pace = load.choose(demands, ts, payload_bytes(ts.mtu), ceiling)
        out.append(replace(case, dilation=pace.dilation))
        if worst is None or pace.dilation > worst.dilation:
            worst = pace
    return out, worst.reason if worst is not None else ""


# §8.4's replays run without ingress accounting. With it, the storm trial's traffic raised
# ingress pauses of its own (2,455 XOFF crossings in one trial, 2026-12-07) whose spans overlap
# past the release, and §8.4's deadlock rule (pfcstorm.storm_figures: the union of every
# port's pauses still held DEADLOCK_FACTOR windows after the release) read that congestion as
# a deadlock on ZCube and Clos with no routing cycle. Until the rule tells the storm's pauses
# from the traffic's own, §8.4 keeps the egress rule alone, as its committed runs had.
STORM_INGRESS = False


def _ingress(section: str) -> bool:
    """Whether a case of `section` replays with ingress accounting (STORM_INGRESS for §8.4)."""
    from zcube_lab.emulator.replay.driver import LOSSLESS_INGRESS

    return STORM_INGRESS if section == "8.4" else LOSSLESS_INGRESS


def software(ingress: bool) -> dict[str, str]:
    """The software configuration the draft's §14 asks documented; `ingress`: whether the
    lossless agent counted ingress backlogs."""
    from zcube_lab import __version__

    def out(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "unknown"

    ovs = out(["ovs-vswitchd", "--version"]).splitlines()
    return {
        "zcube_lab": __version__,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "ovs": ovs[0] if ovs else "unknown",
        "datapath": "Open vSwitch userspace (netdev), HTB-shaped ports, lossless agent (PFC"
        + (", ingress accounting)" if ingress else ")"),
        "transport": "paced UDP datagrams, no congestion control (the replay agent)",
    }


def _document(
    plan: RunPlan, cfg: BmwgConfig, rows: list[dict[str, Any]], t0: float, done: bool
) -> dict[str, Any]:
    summary = report.summary_of(rows)
    comparisons = report.compare(summary)
    return {
        "draft": DRAFT,
        "sections": [t.section for t in plan.tests],
        "fabrics": list(plan.fabrics),
        "gpus": len(plan.hosts),
        "trials": cfg.trials,
        "trial_seconds": cfg.trial_seconds,
        "draft_trials": {t.section: [t.trials, t.trial_s] for t in plan.tests},
        "resolution": plan.ts.describe(),
        "pace": plan.pace,
        "estimate_wall_s": round(plan.estimate_s, 1),
        "wall_s": round(time.monotonic() - t0, 1),
        "complete": done,
        "software": software(ingress=any(_ingress(t.section) for t in plan.tests)),
        "notes": plan.notes,
        "refused": [
            {"section": r.section, "params": dict(r.params), "why": r.why} for r in plan.refused
        ],
        "rows": rows,
        "summary": summary,
        "comparison": comparisons,
    }


def _hms(s: float) -> str:
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m" if s >= 3600 else f"{s / 60:.1f} min"


def run_plan(plan: RunPlan, cfg: BmwgConfig, progress: Callable[[str], None] = print) -> Path:
    """Run every case's trials on every fabric; the path of bmwg.json."""
    from zcube_lab.emulator.replay.driver import Threshold, lab_for, replay

    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = cfg.results / f"bmwg-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    res = plan.ts.describe()
    progress(
        f"{DRAFT} §{', §'.join(t.section for t in plan.tests)} on {', '.join(plan.fabrics)}: "
        f"{len(plan.cases)} cases x {cfg.trials} trials of {cfg.trial_seconds:g} modelled s "
        f"(the draft asks 20 of >= 60 s), a {res['frame_us']:g} µs frame, k = "
        f"{', '.join(f'{k:g}' for k in sorted({c.dilation for c in plan.cases}))} (by case: "
        "each the smallest that keeps the datapath within its share on every fabric)"
    )
    for r in plan.refused:
        progress(f"  not run: §{r.section} {dict(r.params)}: {r.why}")
    progress(f"estimated wall time: {_hms(plan.estimate_s)}")
    total = len(plan.cases) * cfg.trials * len(plan.fabrics)
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    path = out / RESULTS_FILE
    for name, fabric in plan.fabrics.items():

        def key(c: Any) -> tuple[float, float, bool]:
            return (c.xoff_bytes, c.dilation, _ingress(c.section))  # one lab per key

        for xoff, k, ingress in dict.fromkeys(key(c) for c in plan.cases):
            cases = [c for c in plan.cases if key(c) == (xoff, k, ingress)]
            th = Threshold(xoff, cases[0].xoff_source)
            ts = plan.ts.at_dilation(k) if k else plan.ts
            lab_dir = out / f"{name}-xoff{xoff:g}-k{ts.dilation:g}"
            progress(f"bringing up {name} (XOFF {th.source}, k = {ts.dilation:g})")
            lab = lab_for(fabric, ts, th, lab_dir, ingress=ingress)
            lab.start()
            try:
                for ci, case in enumerate(cases):
                    for trial in range(cfg.trials):
                        rows.append(
                            _trial(
                                plan,
                                ts,
                                cfg,
                                name,
                                fabric,
                                case,
                                trial,
                                th,
                                lab,
                                lab_dir / f"c{ci}-t{trial}",
                                replay,
                            )
                        )
                        done_n, el = len(rows), time.monotonic() - t0
                        left = el / done_n * (total - done_n)
                        progress(
                            f"[{done_n}/{total}] §{case.section} {name} {case.label} "
                            f"trial {trial + 1}: {_headline(rows[-1])} "
                            f"({_hms(el)} in, ~{_hms(left)} left)"
                        )
                    path.write_text(json.dumps(_document(plan, cfg, rows, t0, False), indent=1))
            finally:
                lab.stop()
    doc = _document(plan, cfg, rows, t0, True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    for c in doc["comparison"]:
        progress(
            f"§{c['section']} {c['case']}: {c['figure']} zcube vs {c['versus']}: {c['verdict']}"
        )
    progress(f"written: {path} (wall {_hms(doc['wall_s'])}, estimated {_hms(plan.estimate_s)})")
    return path


def _trial(
    plan: RunPlan,
    ts: TimeScale,
    cfg: BmwgConfig,
    name: str,
    fabric: Fabric,
    case: bplan.Case,
    trial: int,
    th: Any,
    lab: Any,
    run_dir: Path,
    replay: Any,
) -> dict[str, Any]:
    w0 = time.monotonic()
    recs = bplan.trial_recordings(case, plan.hosts, cfg.trial_seconds, cfg.seed + trial)
    results = {
        k: replay(rec, fabric, ts, th, run_dir / k, progress=lambda _m: None, lab=lab,
                  **_forced(case, rec, fabric))
        for k, rec in recs.items()
    }  # fmt: skip
    return {
        "section": case.section,
        "case": case.label,
        "params": dict(case.params),
        "fabric": name,
        "trial": trial,
        "dilation": ts.dilation,
        "xoff": {
            "real_bytes": th.xoff_bytes,
            "source": th.source,
            "frames": ts.threshold_frames(th.xoff_bytes),
        },
        "recordings": {
            k: {
                "transfers": len(r.transfers),
                **{
                    m: v
                    for m, v in r.meta.items()
                    if m in ("bursts", "period_s", "layers", "kv_load", "rounds", "kv_messages")
                },
            }
            for k, r in recs.items()
        },
        "figures": _storm_figures(recs["storm"], results["storm"], fabric, run_dir)
        if case.section == "8.4"
        else _figures(case, recs, results, run_dir),
        "receive_errors": {k: r.get("receive_errors") for k, r in results.items()},
        "wall_s": round(time.monotonic() - w0, 2),
    }


def _forced(case: bplan.Case, rec: Any, fabric: Fabric) -> dict[str, Any]:
    """§8.4's stuck receiver: every switch port toward its host paused over its window."""
    if case.section != "8.4":
        return {}
    from zcube_lab.core.bmwg.pfcstorm import stuck_ports

    a, b = rec.meta["window_s"]
    return {"forced": [(p, a, b) for p in stuck_ports(fabric, rec.meta["stuck_host"])]}


def _storm_figures(rec: Any, result: dict[str, Any], fabric: Fabric,
                   run_dir: Path) -> dict[str, Any]:  # fmt: skip
    """§8.4's figures (`zcube_lab.core.bmwg.pfcstorm.storm_figures`) from the replay's pause
    log and the agents' arrivals."""
    from zcube_lab.core.bmwg.pfcstorm import possible_depth, routing_cycle, storm_figures
    from zcube_lab.core.replay.figures import outcomes

    lines = [json.loads(ln) for f in sorted((run_dir / "storm" / "agents").glob("*.out.jsonl"))
             for ln in f.read_text().splitlines() if ln.strip()]  # fmt: skip
    _sent, got = outcomes(lines)
    storm = result["storm"]
    a, b = rec.meta["window_s"]
    figs = storm_figures(storm["pause_log"], [p for p, _a, _b in storm["forced"]], (a, b),
                         float(rec.meta["bound_s"]), float(storm["seen_s"]), fabric,
                         rec.transfers, got)  # fmt: skip
    figs["PFC_frame_count"] = result["pauses"]["pause_frames"]
    figs["routing_cycle"] = int(routing_cycle(fabric) is not None)
    figs["possible_depth_hops"] = possible_depth(fabric, [p for p, _a, _b in storm["forced"]])
    figs["untrusted"] = int(not (result.get("verdict") or {}).get("trusted", False))
    return figs


def _figures(case: bplan.Case, recs: dict[str, Any], results: dict[str, Any],
             run_dir: Path) -> dict[str, Any]:  # fmt: skip
    """The trial's figures; §5.1's, §5.2's, §5.3's and §10.4's from the agents' per-transfer
    times (the driver's output)."""
    if case.section in ("7.1", "7.3"):
        from zcube_lab.core.bmwg.alltoall import trial_figures as a2a_figures

        return a2a_figures(recs["ep"], results["ep"])
    name = {"5.3": "pairs", "5.1": "qps", "5.2": "loaded", "10.4": "loaded"}.get(case.section)
    if name is None:
        return report.trial_figures(case.section, results)
    from zcube_lab.core.replay.figures import outcomes

    lines = [json.loads(ln) for f in sorted((run_dir / name / "agents").glob("*.out.jsonl"))
             for ln in f.read_text().splitlines() if ln.strip()]  # fmt: skip
    sent, got = outcomes(lines)
    if case.section in bplan.LOADED:
        offered = bplan.bg_offered_gbps(recs[name].hosts, float(case.params["bg_load"]))
        figs = report.latency_figures(recs[name].transfers, sent, got, offered)
    else:
        figs = report.pair_figures(recs[name].transfers, sent, got)
    figs["PFC_frame_count"] = results[name]["pauses"]["pause_frames"]
    return figs


def _yes(v: Any) -> str:
    return "-" if v is None else ("yes" if v else "no")


def _headline(row: dict[str, Any]) -> str:
    f = row["figures"]
    if row["section"] == "8.4":
        rec, zero = f.get("recovery_time_ms"), f.get("zero_throughput_max_ms")
        return (
            f"storm {_yes(f.get('PFC_storm'))}, deadlock {_yes(f.get('PFC_deadlock'))}, depth "
            f"{f.get('PAUSE_propagation_depth_hops')} hops, zero throughput "
            f"{'-' if zero is None else f'{zero:.3f}'} ms, recovery "
            f"{'-' if rec is None else f'{rec:.3f}'} ms, {f['incomplete']} incomplete"
        )
    if row["section"] == "8.2":
        p99 = f.get("Fabric_FCT_p99_us")
        return (
            f"{f['PFC_frame_count']} pauses, {f['PAUSE_duration_us']:,.0f} µs paused, "
            f"FCT p99 {'-' if p99 is None else f'{p99:,.0f}'} µs, "
            f"{f['incomplete']} incomplete"
        )
    if row["section"] in bplan.LOADED:
        vals = [f.get(k) for k in report.HEADLINE["5.2"]]
        text = "/".join("-" if v is None else f"{v:,.0f}" for v in vals)
        return f"KV FCT p50/p99/p99.9 {text} µs, {f['incomplete']} incomplete"
    if row["section"] in ("7.1", "7.3"):
        vals = [f.get(k) for k in ("EP_alltoall_latency_p50_us", "EP_alltoall_latency_p99_us")]
        bw = f.get("EP_alltoall_bandwidth_GBps")
        return (
            f"EP_alltoall_latency p50/p99 "
            f"{'/'.join('-' if v is None else f'{v:,.0f}' for v in vals)} µs, "
            f"{'-' if bw is None else f'{bw:.1f}'} GB/s a GPU, {f['incomplete']} incomplete"
        )
    if row["section"] in ("5.3", "5.1"):
        bw, jfi = f.get("KV_xfer_bandwidth_GBps"), f.get("JFI")
        bw_t = "-" if bw is None else f"{bw:.1f}"
        jfi_t = "-" if jfi is None else f"{jfi:.3f}"
        return f"{bw_t} GB/s, JFI {jfi_t}, {f['incomplete']} incomplete"
    pk, pe = f.get("contention_penalty_kv"), f.get("contention_penalty_ep")
    return (
        f"penalty KV {'-' if pk is None else f'{pk:.2f}'}x, EP "
        f"{'-' if pe is None else f'{pe:.2f}'}x, {f['PFC_frame_count']} pauses"
    )
