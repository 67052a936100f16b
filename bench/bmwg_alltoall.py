"""docs/BMWG.md's §7.1 and §7.3 part (EP all-to-all dispatch throughput, wide EP scaling), from
a committed `bmwg run 7.1 7.3` (`zcube_lab.core.bmwg.alltoall`): per case and fabric the bytes
a GPU dispatches to each peer, the k the case ran at, the latency alone at line rate and the
measured p50 over it, beside the headline figures. `bench.bmwg_tables` puts it under each
section's results."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench.bmwg_common import LABEL, trials_of


def _ks(d: Mapping[str, Any], section: str, case: str, fabric: str) -> str:
    ks = sorted({float(r["dilation"]) for r in trials_of(d, section, case, fabric)})
    return ", ".join(f"{k:g}" for k in ks) or "-"


def alltoall_section(d: Mapping[str, Any], section: str, table: Callable[..., list[str]],
                     cell: Callable[[Any], str]) -> list[str]:  # fmt: skip
    """The extra table of a §7.1 or §7.3 run: one row per measured case and fabric."""
    head = ["EP size", "tokens a GPU", "dispatch a peer", "fabric", "k", "ideal µs",
            "p50 / ideal", "exchanges measured", "PFC frames"]  # fmt: skip
    rows = []
    for s in d["summary"]:
        p, f = s["params"], s["figures"]
        if s["section"] != section or "vs_ep_size" in p:
            continue
        ideal = (f.get("EP_alltoall_latency_ideal_us") or {}).get("mean")
        size = (f.get("dispatch_bytes_per_peer") or {}).get("mean")
        rows.append([str(p["ep_size"]), str(p["tokens"]),
                     "-" if size is None else f"{size / 1e3:,.0f} KB",
                     LABEL.get(s["fabric"], s["fabric"]), _ks(d, section, s["case"], s["fabric"]),
                     "-" if ideal is None else f"{ideal:,.0f}",
                     cell(f.get("latency_over_ideal_p50")),
                     cell(f.get("exchanges")), cell(f.get("PFC_frame_count"))])  # fmt: skip
    if not rows:
        return []
    over = [
        s["figures"]["latency_over_ideal_p50"]["mean"]
        for s in d["summary"]
        if s["section"] == section and (s["figures"].get("latency_over_ideal_p50") or {})
    ]
    pfc = [s["figures"]["PFC_frame_count"]["mean"] for s in d["summary"]
           if s["section"] == section and (s["figures"].get("PFC_frame_count") or {})]  # fmt: skip
    words = (
        f"Every case's exchanges took {min(over):.1f}-{max(over):.1f} times their time alone "
        f"(the p50's mean by case and fabric), with {min(pfc):,.0f}-{max(pfc):,.0f} PFC frames "
        "a trial (mean); what makes up the difference, the lossless agent's pauses or the "
        "replay agents' cost per transfer, is not separated here, so the figures compare the "
        "fabrics under this lab's datapath rather than give a fabric's own dispatch time."
        if over and pfc
        else ""
    )
    return [
        f"§{section} per case: the dispatch a GPU sends each peer (real bytes), the k the case "
        "ran at (the pace: the smallest keeping the datapath within its share on every fabric), "
        "an exchange's time alone at line rate (a GPU's dispatches and combines through its "
        "400 Gb/s NIC) and the measured p50 over it:",
        "",
        *table(head, rows),
        "",
        *([words, ""] if words else []),
    ]
