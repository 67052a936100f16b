"""A `bmwg run`'s figures by the draft's names, and the fabric comparison (pure; issue 46).

`trial_figures` reads one trial's replays (`zcube_lab.emulator.replay.driver.replay` results)
into the test's figures, times in modelled µs; `summarize` gives each figure's mean and 95%
interval over the trials per case and fabric; `compare` sets ZCube against each other fabric
per headline figure: higher, lower, or within the trials' spread.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from zcube_lab.core.bmwg.trials import (
    HIGHER,
    LOWER,
    NO_SPREAD,
    OUT_OF_REACH,
    WITHIN,
    Interval,
    mean_ci,
    versus,
)
from zcube_lab.core.errors import ConfigError

# Per section: the figures the comparison judges.
HEADLINE: Mapping[str, tuple[str, ...]] = {
    "5.1": ("KV_xfer_bandwidth_GBps",),
    "5.2": ("KV_xfer_latency_p50_us", "KV_xfer_latency_p99_us", "KV_xfer_latency_p999_us"),
    "5.3": ("KV_xfer_bandwidth_GBps", "Fabric_FCT_p99_us", "JFI"),
    "8.2": ("Fabric_FCT_p99_us", "PFC_frame_count", "PAUSE_duration_us", "HOL_delay_us"),
    "8.4": (
        "PFC_storm",
        "PFC_deadlock",
        "PAUSE_propagation_depth_hops",
        "zero_throughput_max_ms",
        "recovery_time_ms",
        "drain_time_ms",
    ),
    "10.4": ("KV_xfer_latency_p99_us", "inflection_point"),
    "6.1": ("TTFT_p50_ms", "T_transfer_p50_ms", "T_transfer_p99_ms"),
    "12.3": ("failed_requests", "TTFT_p99_during_ms", "recovery_time_s"),
    "13.3": ("failed_requests", "recovery_time_s", "TTFT_p99_drift", "Buffer_utilization_pct"),
    "9.3": ("JFI", "Link_utilization_max_pct", "Link_utilization_min_pct", "max_mean_ratio"),
    "9.4": ("JFI_decode", "JFI_kv", "JFI_busy", "TTFT_p99_ms"),
    "7.1": (
        "EP_alltoall_latency_p50_us",
        "EP_alltoall_latency_p99_us",
        "EP_alltoall_bandwidth_GBps",
    ),
    "7.3": (
        "EP_alltoall_latency_p50_us",
        "EP_alltoall_latency_p99_us",
        "EP_alltoall_bandwidth_GBps",
        "scaling_efficiency",
    ),
    "10.2": ("ITL_p50_ms", "ITL_p99_ms", "ITL_p999_ms", "stall_share"),
    "10.1": ("TTFT_p50_ms", "TTFT_p99_ms", "T_transfer_p50_ms", "T_transfer_over_TTFT_p50"),
    "6.2": ("TTFT_p99_ms", "T_transfer_p99_ms", "goodput_per_GPU"),
    "11.1": (
        "TPS_output",
        "Inference_Goodput",
        "TTFT_p99_ms",
        "ITL_p99_ms",
        "Link_utilization_max",
    ),
    "7.4": (
        "contention_penalty_kv",
        "contention_penalty_ep",
        "KV_xfer_latency_p99_us",
        "EP_alltoall_latency_p99_us",
    ),
}
# Figures where more is better; lower is better for the rest.
HIGHER_IS_BETTER = (
    "KV_xfer_bandwidth_GBps", "JFI", "inflection_point", "JFI_decode", "JFI_kv", "JFI_busy",
    "EP_alltoall_bandwidth_GBps", "scaling_efficiency", "goodput_per_GPU",
    "TPS_output", "Inference_Goodput",
    "Link_utilization_min_pct",
)  # fmt: skip
REFERENCE = "zcube"
# Figures whose mean above 0 makes a case's comparison out of reach (§6.1, §9.4: a live run
# the lab's verdict did not trust).
UNRESOLVED = ("incomplete", "load_short", "untrusted", "overlapped")
# Figures that a trial leaves without a value of its own: §12.3's recovery time of a run that
# never recovered is None, so the mean over the others alone would flatter its fabric; that
# comparison is out of reach (the failed requests and TTFT comparisons still stand).
FIGURE_UNRESOLVED: Mapping[str, tuple[str, ...]] = {
    "recovery_time_s": ("unrecovered",),
    "recovery_time_ms": ("PFC_deadlock",),  # §8.4: a deadlocked trial has no recovery time
}


def _us(x: float | None) -> float | None:
    return None if x is None else x * 1e6


def _p99(cls: Mapping[str, Any] | None, key: str = "fct_s") -> float | None:
    return None if cls is None else _us((cls.get(key) or {}).get("p99"))


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _hol_us(other: Mapping[str, Any] | None) -> float | None:
    """The other class's worst completion beyond its time alone (modelled µs): the delay
    the bursts' pauses and queues imposed on it (None without it or when it never came)."""
    if not other or other.get("incomplete"):
        return None
    fct, ratio = (other.get("fct_s") or {}).get("max"), (other.get("fct_over_ideal") or {})
    worst = ratio.get("max")
    if fct is None or not worst:
        return None
    return _us(fct - fct / worst)


def trial_figures(section: str, results: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One trial's figures from its replays' results (by replay name)."""
    if section == "8.2":
        r = results["burst"]
        kv = r["classes"].get("kv", {})
        fct = kv.get("fct_s") or {}
        return {
            "PFC_frame_count": r["pauses"]["pause_frames"],
            "PAUSE_duration_us": r["pauses"]["pause_total_us"],
            "ports_paused": r["pauses"]["ports_paused"],
            "Fabric_FCT_p50_us": _us(fct.get("p50")),
            "Fabric_FCT_p99_us": _us(fct.get("p99")),
            "Fabric_FCT_max_us": _us(fct.get("max")),
            "fct_over_ideal_p99": (kv.get("fct_over_ideal") or {}).get("p99"),
            "incomplete": kv.get("incomplete", 0),
            "transfers": kv.get("transfers", 0),
            "HOL_delay_us": _hol_us(r["classes"].get("other")),
            "pause_reaction_p99_us": r.get("pause_reaction_p99_us"),
        }
    if section == "7.4":
        mixed, ep, kv = results["mixed"], results["ep"], results["kv"]
        kv_iso = _p99(kv["classes"].get("kv"))
        kv_mix = _p99(mixed["classes"].get("kv"))
        ep_iso = _p99(ep["classes"].get("ep"), "exchange_s")
        ep_mix = _p99(mixed["classes"].get("ep"), "exchange_s")
        return {
            "KV_xfer_latency_p99_isolated_us": kv_iso,
            "KV_xfer_latency_p99_us": kv_mix,
            "EP_alltoall_latency_p99_isolated_us": ep_iso,
            "EP_alltoall_latency_p99_us": ep_mix,
            "contention_penalty_kv": _ratio(kv_mix, kv_iso),
            "contention_penalty_ep": _ratio(ep_mix, ep_iso),
            "PFC_frame_count": mixed["pauses"]["pause_frames"],
            "PAUSE_duration_us": mixed["pauses"]["pause_total_us"],
            "incomplete": sum(
                int(c.get("incomplete", 0)) for r in results.values() for c in r["classes"].values()
            ),
            "pause_reaction_p99_us": mixed.get("pause_reaction_p99_us"),
        }
    raise ValueError(f"no figures for section {section}")


def pair_figures(
    transfers: Sequence[Any], sent: Mapping[int, float], got: Mapping[int, Mapping[str, Any]]
) -> dict[str, Any]:
    """§5.3's figures from one trial's transfers (their `exchange` names the pair) and the
    agents' times: aggregate throughput (GB/s, every completed byte over the trial's span),
    each pair's own (its bytes over its first start to last arrival), Jain's index over the
    pairs' throughputs, and the messages' completion times (p50, p99, µs)."""
    from zcube_lab.core.bmwg.trials import jain
    from zcube_lab.core.stats import quantile

    fcts: list[float] = []
    per_pair: dict[str, list[tuple[float, float, float]]] = {}
    incomplete = 0
    for t in transfers:
        arrived = (got.get(t.id) or {}).get("arrived_s")
        if t.id not in sent or arrived is None:
            incomplete += 1
            continue
        start, end = sent[t.id], float(arrived)
        fcts.append(end - start)
        per_pair.setdefault(t.exchange, []).append((start, end, t.bytes))
    rates = [sum(b for *_, b in ms) / (max(e for _, e, _ in ms) - min(s for s, _, _ in ms))
             for ms in per_pair.values()]  # fmt: skip
    every = [m for ms in per_pair.values() for m in ms]
    span = max(e for _, e, _ in every) - min(s for s, _, _ in every) if every else 0.0
    p50 = _us(quantile(sorted(fcts), 0.5)) if fcts else None
    p99 = _us(quantile(sorted(fcts), 0.99)) if fcts else None
    return {
        "KV_xfer_bandwidth_GBps": sum(b for *_, b in every) / span / 1e9 if span else None,
        "pair_bandwidth_min_GBps": min(rates) / 1e9 if rates else None,
        "JFI": jain(rates) if rates else None,
        "Fabric_FCT_p50_us": p50,
        "Fabric_FCT_p99_us": p99,
        # a message is one KV transfer: its completion time is the draft's KV_xfer_latency too
        "KV_xfer_latency_p50_us": p50,
        "KV_xfer_latency_p99_us": p99,
        "incomplete": incomplete,
        "transfers": len(transfers),
    }


# §5.2: the background counts as at its level when it carried at least this share of what it
# offered; below it the lab did not load the fabric as asked (`load_short`: out of reach).
LOAD_REACHED = 0.9


def latency_figures(
    transfers: Sequence[Any],
    sent: Mapping[int, float],
    got: Mapping[int, Mapping[str, Any]],
    offered_gbps: float | None = None,
) -> dict[str, Any]:
    """§5.2's figures from one trial's transfers and the agents' times: the KV messages'
    completion times p50, p99 and p99.9 (µs; with few messages the upper ones approach the
    worst), their tail spread (p99 over p50), the background's throughput while they ran
    (GB/s, its completed bytes over its first start to last arrival) against `offered_gbps`
    (GB/s; `load_short` 1 when it carried less than LOAD_REACHED of it) and the transfers of
    either class that never completed."""
    from zcube_lab.core.stats import quantile

    kv: list[float] = []
    bg: list[tuple[float, float, float]] = []
    incomplete = 0
    for t in transfers:
        arrived = (got.get(t.id) or {}).get("arrived_s")
        if t.id not in sent or arrived is None:
            incomplete += 1
            continue
        if t.cls == "kv":
            kv.append(float(arrived) - sent[t.id])
        else:
            bg.append((sent[t.id], float(arrived), t.bytes))
    kv.sort()
    p50, p99 = quantile(kv, 0.5), quantile(kv, 0.99)
    span = max(e for _, e, _ in bg) - min(s for s, _, _ in bg) if bg else 0.0
    carried = sum(b for *_, b in bg) / span / 1e9 if span else None
    short = bool(offered_gbps) and (carried or 0.0) < LOAD_REACHED * float(offered_gbps or 0)
    return {
        "KV_xfer_latency_p50_us": _us(p50),
        "KV_xfer_latency_p99_us": _us(p99),
        "KV_xfer_latency_p999_us": _us(quantile(kv, 0.999)),
        "tail_spread": _ratio(p99, p50),
        "background_GBps": carried,
        "background_offered_GBps": offered_gbps,
        "load_short": int(short),
        "incomplete": incomplete,
        "transfers": len(transfers),
    }


# §10.4: the inflection point is where the KV p99 exceeds its unloaded value by more than this
# share (1.0: more than doubles) and stays above it at every higher level.
INFLECTION_RISE = 1.0


def inflection_point(
    levels: Sequence[float], p99s: Sequence[float], rise: float = INFLECTION_RISE
) -> float | None:
    """§10.4's inflection point: the lowest background level L, above the first level, such
    that the p99 at L and at every level above L is more than (1 + `rise`) times the p99 at
    the first level (the unloaded value when the levels start at 0). None when no level is
    (the p99 never rises that far, or is back at or below it by the highest level). A single
    level above the bound followed by one below it is noise, not an inflection.

    `levels` strictly ascending, one p99 each, at least two; the first p99 positive; `rise`
    above 0: ConfigError otherwise."""
    xs, ys = [float(v) for v in levels], [float(v) for v in p99s]
    if len(xs) != len(ys) or len(xs) < 2:
        raise ConfigError("levels", list(xs), "at least two levels, one p99 each")
    if any(b <= a for a, b in itertools.pairwise(xs)):
        raise ConfigError("levels", list(xs), "strictly ascending levels")
    if not ys[0] > 0 or not rise > 0:
        raise ConfigError("p99", (ys[0], rise), "a positive unloaded p99 and rise")
    bound = (1 + rise) * ys[0]
    found = None  # the lowest level of the run above the bound that reaches the highest
    for x, y in zip(xs[1:], ys[1:], strict=True):
        found = (x if found is None else found) if y > bound else None
    return found


def degradation_factor(p99s: Sequence[float]) -> float | None:
    """§10.4's degradation factor: the p99 at the highest level over the p99 at the lowest
    (None when the lowest is not positive)."""
    return _ratio(float(p99s[-1]), float(p99s[0])) if p99s and p99s[0] > 0 else None


def inflection_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """§10.4 per (message size, fabric, trial), in the trial rows' shape, case "size_bytes=N":
    the trial's `inflection_point` over its levels' KV p99 (None when none; `no_inflection`
    1 then), its `degradation_factor`, and `load_short` and `incomplete` over the levels that
    decide the inflection (those at or below it, every level when there is none): a level past
    the inflection that fell short or lost transfers does not move it."""
    from zcube_lab.core.bmwg.plan import label_of

    groups: dict[tuple[float, str, int], list[Mapping[str, Any]]] = {}
    for r in rows:
        if r["section"] == "10.4":
            key = (float(r["params"]["size_bytes"]), r["fabric"], int(r["trial"]))
            groups.setdefault(key, []).append(r)
    out = []
    for (size, fabric, trial), rs in groups.items():
        pts = sorted(
            (float(r["params"]["bg_load"]), r["figures"].get("KV_xfer_latency_p99_us"), r)
            for r in rs
            if r["figures"].get("KV_xfer_latency_p99_us") is not None
        )
        figs: dict[str, Any] = {"levels": len(pts)}
        if len(pts) >= 2 and pts[0][1] > 0:
            levels, p99s = [p[0] for p in pts], [p[1] for p in pts]
            figs["level_step"] = round(min(b - a for a, b in itertools.pairwise(levels)), 9)
            at = inflection_point(levels, p99s)
            deciding = [p[2]["figures"] for p in pts if at is None or p[0] <= at]
            figs.update(
                inflection_point=at,
                no_inflection=int(at is None),
                degradation_factor=degradation_factor(p99s),
                load_short=int(any(f.get("load_short") for f in deciding)),
                incomplete=sum(int(f.get("incomplete") or 0) for f in deciding),
            )
        out.append(
            {
                "section": "10.4",
                "case": label_of({"size_bytes": size}),
                "params": {"size_bytes": size},
                "fabric": fabric,
                "trial": trial,
                "figures": figs,
            }
        )
    return out


def inflection_verdict(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """ZCube's §10.4 inflection (summary `a`) against another fabric's (`b`): by their 95%
    intervals, each widened by half the levels' step (the grid's resolution: inflections at
    adjacent levels are a tie), when every trial of both found one; WITHIN when neither found
    one in any trial (both beyond the highest level run); HIGHER (later) when `a` found none in
    any trial and `b` one in every trial, LOWER the other way round; WITHIN when the trials
    disagree within a fabric. NO_SPREAD with one trial."""
    if min(int(a["trials"]), int(b["trials"])) < 2:
        return NO_SPREAD

    def none_share(s: Mapping[str, Any]) -> float:
        return float((s["figures"].get("no_inflection") or {}).get("mean", 1.0))

    na, nb = none_share(a), none_share(b)
    if na == 0 and nb == 0:
        step = max(float(s["figures"]["level_step"]["mean"]) for s in (a, b))
        # touching intervals overlap (`versus` is strict); the 1e-9 keeps rounding out of it
        by = step / 2 + 1e-9
        return versus(*(_widened(s["figures"]["inflection_point"], by) for s in (a, b)))
    if na == 1 and nb == 0:
        return HIGHER
    if na == 0 and nb == 1:
        return LOWER
    return WITHIN


def _widened(fig: Mapping[str, Any], by: float) -> Interval:
    """A figure's interval widened by `by` each side (a one-trial figure gets one of `by`)."""
    low, high = fig["ci95_low"], fig["ci95_high"]
    mean = float(fig["mean"])
    return Interval(mean, (mean if low is None else low) - by,
                    (mean if high is None else high) + by, int(fig["n"]))  # fmt: skip


def summary_of(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`summarize` of the trial rows, of §10.4's per-trial inflection rows and of §7.3's
    scaling rows."""
    from zcube_lab.core.bmwg.alltoall import scaling_rows

    return summarize([*rows, *inflection_rows(rows), *scaling_rows(rows)])


def summarize(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (section, case, fabric): every figure's mean and 95% interval over its trials
    (trials without the figure left out; `trials` counts them all)."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["section"], r["case"], r["fabric"]), []).append(r)
    out = []
    for (section, case, fabric), rs in groups.items():
        names = list(dict.fromkeys(k for r in rs for k in r["figures"]))
        figs: dict[str, Any] = {}
        for name in names:
            vals = [r["figures"][name] for r in rs if r["figures"].get(name) is not None]
            figs[name] = mean_ci(vals).to_dict() if vals else None
        out.append(
            {
                "section": section,
                "case": case,
                "fabric": fabric,
                "params": rs[0]["params"],
                "trials": len(rs),
                "figures": figs,
            }
        )
    return out


def _interval(fig: Mapping[str, Any] | None) -> Any:
    if fig is None:
        return None
    return Interval(fig["mean"], fig["ci95_low"], fig["ci95_high"], fig["n"])


def compare(summary: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (section, case, headline figure, other fabric): ZCube's mean against the other's,
    HIGHER/LOWER when their 95% intervals do not overlap, WITHIN otherwise (§10.4's inflection
    point: `inflection_verdict`); OUT_OF_REACH where
    either has no value, a trial's transfers did not all complete or (§5.2) a trial's
    background fell short of its level (`UNRESOLVED` figures)."""
    by = {(s["section"], s["case"], s["fabric"]): s for s in summary}
    out = []
    for (section, case, fabric), s in by.items():
        if fabric != REFERENCE:
            continue
        for other_key, other in by.items():
            if other_key[:2] != (section, case) or other_key[2] == REFERENCE:
                continue
            for fig in HEADLINE.get(section, ()):
                if fig not in s["figures"] and fig not in other["figures"]:
                    continue  # not measured in this run
                a, b = _interval(s["figures"].get(fig)), _interval(other["figures"].get(fig))
                incomplete = any(
                    (x["figures"].get(u) or {}).get("mean", 0)
                    for x in (s, other)
                    for u in (*UNRESOLVED, *FIGURE_UNRESOLVED.get(fig, ()))
                )
                if fig == "inflection_point":
                    verdict = OUT_OF_REACH if incomplete else inflection_verdict(s, other)
                else:
                    unresolved = a is None or b is None or incomplete
                    verdict = OUT_OF_REACH if unresolved else versus(a, b)
                out.append(
                    {
                        "section": section,
                        "case": case,
                        "figure": fig,
                        "versus": other_key[2],
                        "verdict": verdict,
                        "zcube": None if a is None else a.mean,
                        "other": None if b is None else b.mean,
                    }
                )
    return out


def verdict_counts(comparisons: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many comparisons came out each way."""
    out: dict[str, int] = {}
    for c in comparisons:
        out[c["verdict"]] = out.get(c["verdict"], 0) + 1
    return out


__all__ = [
    "HEADLINE",
    "NO_SPREAD",
    "Interval",
    "compare",
    "inflection_point",
    "summarize",
    "trial_figures",
    "verdict_counts",
]
