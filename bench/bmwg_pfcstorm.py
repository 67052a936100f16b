"""docs/BMWG.md's §8.4 part (PFC storm and deadlock resilience), from a committed `bmwg run 8.4`
(`zcube_lab.core.bmwg.pfcstorm`): its parameters beside the draft's, one row per fabric (each
figure's mean ± half its 95% interval over the trials; the yes/no figures as the share of trials
that said yes), and what the comparison says, in words. `bench.bmwg_tables` puts it under
§8.4's results."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench.bmwg_common import LABEL, comparison_words, trials_of, trusted
from zcube_lab.core.bmwg import pfcstorm as ps


def _share(trials: list[dict[str, Any]], name: str) -> str:
    """ "k of n" trials whose yes/no figure said yes."""
    vals = [r["figures"].get(name) for r in trials]
    return f"{sum(1 for v in vals if v)} of {len(vals)}"


def parameter_table(d: Mapping[str, Any], table: Callable[..., list[str]]) -> list[str]:
    """The draft's §8.4 parameters beside the run's."""
    n, t = d["draft_trials"]["8.4"]
    trial = float(d["trial_seconds"])
    p = next(s["params"] for s in d["summary"] if s["section"] == "8.4")
    share = float(p["stuck_share"])
    a = ps.WARM_SHARE * trial
    b = a + share * trial
    msg = float(p.get("msg_bytes", 1e6))  # the first runs' messages were 1 MB
    rows = [
        ["storm source", "a circular buffer dependency across switches (the training "
         "document's scenario)",
         "a stuck receiver: every switch port toward one host held paused (its NIC sending "
         "PAUSE), the lossless agent pausing the ports feeding each queue that fills; the "
         "routes' buffer dependencies are checked for a cycle instead (the `cycle` column)"],
        ["stuck window", "-", f"{a * 1e3:g} to {b * 1e3:g} modelled ms of each trial"],
        ["traffic", "KV cache transfers on all affected paths",
         f"{msg / 1e3:g} KB KV messages into the stuck host from every other host "
         f"({float(p['in_load']):.0%} of its "
         "NIC together) and between every other pair i -> i + half "
         f"({float(p['victim_load']):.0%} of a NIC each: the victims)"],
        ["deadlock", "yes/no",
         f"pauses still held {ps.DEADLOCK_FACTOR:g} windows "
         f"({ps.DEADLOCK_FACTOR * (b - a) * 1e3:g} modelled ms) after the release"],
        ["trials", f"{n} x {t:g} s (at least 300 s)",
         f"{d['trials']} x {trial:g} s (at k = 120 a modelled second is 2 wall minutes: "
         "short trials)"],
    ]  # fmt: skip
    return [*table(["parameter", "draft", "this run"], rows), ""]


def fabric_rows(d: Mapping[str, Any], cell: Callable[[Any], str]) -> list[list[str]]:
    """One row per fabric."""
    out = []
    for s in [s for s in d["summary"] if s["section"] == "8.4"]:
        f = s["figures"]
        trials = trials_of(d, "8.4", s["case"], s["fabric"])
        cycle = {r["figures"].get("routing_cycle") for r in trials}
        out.append([LABEL.get(s["fabric"], s["fabric"]), _share(trials, "PFC_storm"),
                    _share(trials, "PFC_deadlock"), cell(f.get("PAUSE_propagation_depth_hops")),
                    cell(f.get("possible_depth_hops")),
                    cell(f.get("zero_throughput_max_ms")), cell(f.get("recovery_time_ms")),
                    cell(f.get("drain_time_ms")),
                    f"{cell(f.get('pause_rate_before_per_ms'))} / "
                    f"{cell(f.get('pause_rate_after_per_ms'))}",
                    cell(f.get("PFC_frame_count")), cell(f.get("ports_paused_storm")),
                    cell(f.get("pauses_before_window")),
                    "yes" if cycle == {1} else "no" if cycle == {0} else "-",
                    cell(f.get("incomplete")), trusted(trials)])  # fmt: skip
    return out


def storm_section(d: Mapping[str, Any], table: Callable[..., list[str]],
                  cell: Callable[[Any], str]) -> list[str]:  # fmt: skip
    """The §8.4 part of a committed run's results."""
    head = ["fabric", "storm", "deadlock", "PAUSE depth hops", "possible", "zero throughput ms",
            "recovery ms", "drain ms", "pauses per ms before / after", "PFC frames",
            "ports paused", "pauses before", "cycle",
            "incomplete", "runs trusted"]  # fmt: skip
    words = comparison_words(
        d, "8.4",
        "All {n} comparisons (storm, deadlock, depth, zero throughput and recovery, ZCube "
        "against each other fabric) are within the trials' spread: a measured tie.",
    )  # fmt: skip
    return [
        "§8.4 parameters, the draft's and this run's:",
        "",
        *parameter_table(d, table),
        "§8.4 per fabric: storm and deadlock as the trials that said yes; the PAUSE depth is "
        "the most links from a stuck port's switch to a port paused during the storm (the "
        "ports feeding the stuck one are 1), beside the most the routes allow (the ports "
        "feeding those, and on); zero throughput is the longest a victim flow had "
        "bytes due and received none; recovery from the release to the first instant no port "
        "was paused; drain from the release until every victim message due before it had "
        "arrived (modelled ms, mean ± half the 95% interval); pauses begun per modelled ms "
        "before the window and over the deadlock bound after the release; ports paused during "
        "the storm, "
        "pauses before the window (the traffic's own congestion); cycle: whether the lab's "
        "routes make a cyclic buffer dependency:",
        "",
        *table(head, fabric_rows(d, cell)),
        "",
        words,
        "",
    ]
