"""docs/BMWG.md's §9.3 part (ECMP and dynamic load balancing under inference traffic), from a
committed `bmwg run 9.3` (`zcube_lab.core.bmwg.balance`): its parameters beside the draft's,
one row per scenario, algorithm and fabric (JFI over the switch tier's links, the highest,
lowest and mean link utilization, the hottest link over the mean, the structural
oversubscription, the runs trusted), and what the comparison says, in words.
`bench.bmwg_tables` puts it under §9.3's results."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench.bmwg_common import LABEL, comparison_words, trials_of, trusted
from zcube_lab.core.bmwg import balance as b93

FIGURES = ("JFI", "Link_utilization_max_pct", "Link_utilization_min_pct",
           "Link_utilization_mean_pct", "max_mean_ratio", "oversubscription_ratio")  # fmt: skip


def parameter_table(d: Mapping[str, Any], table: Callable[..., list[str]]) -> list[str]:
    """The draft's §9.3 parameters beside the run's."""
    t = d["draft_trials"]["9.3"]
    sc, ep = d["scenarios"], d["ep_dispatch_bytes"]
    kv = sc["kv"]
    rows = [
        ["(a) KV cache transfers only", f"large flows, {b93.DRAFT_KV_BYTES / 1e6:g} MB+",
         f"KV pulls of {d['kv_bytes_per_pull'] / 1e9:.2f} GB ({kv['prompt_tokens']:,}-token "
         f"prompts, {kv['output_tokens']} output tokens, prefix-cache hit "
         f"{kv['prefix_cache_hit_rate']:g}), no expert parallelism"],
        ["(b) EP all-to-all only", f"small flows, < {b93.DRAFT_EP_BYTES / 1e6:g} MB",
         f"dispatches of {ep['prefill_ep'] / 1e3:,.0f} KB (prefill of "
         f"{sc['ep']['prompt_tokens']} tokens) and {ep['decode_8'] / 1e3:,.0f} KB (decode, 8 "
         f"tokens) per peer and MoE layer, {sc['ep']['output_tokens']} output tokens; EP "
         f"instances of {d['ep_servers']} servers exchanging with every GPU of them; KV pulls "
         "of one byte (--kv-off)"],
        ["(c) mixed", "KV and EP together", "(a)'s requests with (b)'s expert parallelism"],
        ["load", "not named", f"{d['rate']:g} req/s, Poisson, in every scenario"],
        ["load balancing algorithms", "ECMP, dynamic (flowlet, packet spray)",
         ", ".join(d["algorithms"]) + " (the lab's run policies; spray and mrc change the KV "
         "transport only, so the EP-only scenario does not run them)"],
        ["links", "fabric links",
         "the switch-to-switch tier (leaf-spine on ROFT and Clos, A-B on ZCube), each link "
         "at its busier direction's mean over the run"],
        ["trials", f"{t[0]} x {t[1]:g} s", f"{d['trials']} x {d['trial_seconds']:g} s"],
    ]  # fmt: skip
    return [*table(["parameter", "draft", "this run"], rows), ""]


def case_rows(d: Mapping[str, Any], cell: Callable[[Any], str]) -> list[list[str]]:
    """One row per scenario, algorithm and fabric."""
    out = []
    order = {f: i for i, f in enumerate(d["fabrics"])}
    scen = {s: i for i, s in enumerate(b93.SCENARIOS)}
    algs = {a: i for i, a in enumerate(b93.ALGORITHMS)}
    summary = [s for s in d["summary"] if s["section"] == "9.3"]

    def key(s: Mapping[str, Any]) -> tuple[int, int, int]:
        p = s["params"]
        return (scen.get(p["traffic"], 9), algs.get(p["balance"], 9), order.get(s["fabric"], 9))

    for s in sorted(summary, key=key):
        f = s["figures"]
        trials = trials_of(d, "9.3", s["case"], s["fabric"])
        out.append([s["params"]["traffic"], s["params"]["balance"],
                    LABEL.get(s["fabric"], s["fabric"]), *(cell(f.get(k)) for k in FIGURES),
                    trusted(trials)])  # fmt: skip
    return out


def verdict_words(d: Mapping[str, Any]) -> str:
    """The fabric comparison of a §9.3 run in a sentence."""
    return comparison_words(
        d, "9.3",
        "All {n} comparisons (JFI, maximum and minimum utilization and max/mean, per scenario "
        "and algorithm, ZCube against each other fabric) are within the trials' spread: a "
        "measured tie.",
    )  # fmt: skip


def balance_section(d: Mapping[str, Any], table: Callable[..., list[str]],
                    cell: Callable[[Any], str]) -> list[str]:  # fmt: skip
    """The §9.3 part of a committed run's results."""
    head = ["traffic", "algorithm", "fabric", "JFI", "max util %", "min util %", "mean util %",
            "max/mean", "oversubscription", "runs trusted"]  # fmt: skip
    return [
        "§9.3 runs as live serving runs (`zcube-lab run`, the live lab's default time scale), "
        'as §9.4 does: its "out of reach" is a run the lab\'s verdict did not trust.',
        "",
        "§9.3 parameters, the draft's and this run's:",
        "",
        *parameter_table(d, table),
        "§9.3 link utilization over the switch tier's links per scenario and load-balancing "
        "algorithm: Jain's index over the links (1: every link equally loaded), the highest, "
        "lowest and mean link's utilization in % of its rate, the hottest link over the mean "
        "(measured) and the fabric's structural oversubscription (host-facing over "
        "switch-facing capacity), each the mean over trials ± half its 95% interval:",
        "",
        *table(head, case_rows(d, cell)),
        "",
        "On ZCube with one link per A-B pair each KV lane and EP connection leaves from the NIC "
        "port whose path reaches the address it sends to, so every switch on its way has one "
        "next hop and the switches route alike under every algorithm there: the hosts spread "
        "the traffic over both ports and the two link-disjoint 2-hop paths (spray still "
        "changes how a host splits each pull over its subflows). " + verdict_words(d),
        "",
    ]
