"""docs/BMWG.md's §13.3 part (long-running serving stability, short form), from a committed
`bmwg run 13.3` (`zcube_lab.core.bmwg.soak`): the draft's parameters beside the run's, one row
per fabric (the flap, what it cost, the drift over the soak and the stand-ins for the draft's
monitored figures, each the mean over trials ± half its 95% interval), what could not be
represented, and the comparison in words. `bench.bmwg_tables` puts it under §13.3's results."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench.bmwg_common import comparison_words, name, trials_of, trusted

COLUMNS = (
    ("fault_held_s", "flap held s"), ("failed_requests", "failed requests"),
    ("recovery_time_s", "recovery s"), ("disruption_time_s", "disruption s"),
    ("TTFT_p99_first_ms", "TTFT p99 first third ms"),
    ("TTFT_p99_last_ms", "TTFT p99 last third ms"), ("TTFT_p99_drift", "drift"),
    ("Buffer_utilization_pct", "max switch queue %"),
    ("KV_connection_failures", "KV pull failures"), ("adjacency_flaps", "sessions lost"),
    ("TCP_retransmissions", "TCP retransmissions"), ("TCP_timeouts", "TCP timeouts"),
)  # fmt: skip


def fabric_rows(d: Mapping[str, Any], cell: Callable[[Any], str]) -> list[list[str]]:
    """One row per fabric."""
    out = []
    for s in (s for s in d["summary"] if s["section"] == "13.3"):
        trials = trials_of(d, "13.3", s["case"], s["fabric"])
        link = (d.get("flapped_links") or {}).get(s["fabric"]) or {}
        ports = sorted({r.get("buffer_peak_port") or "-" for r in trials})
        out.append([name(s["fabric"]), f"`{link.get('spec', '-')}`",
                    *(cell(s["figures"].get(k)) for k, _ in COLUMNS), ", ".join(ports),
                    trusted(trials)])  # fmt: skip
    return out


def soak_section(d: Mapping[str, Any], table: Callable[..., list[str]],
                 cell: Callable[[Any], str]) -> list[str]:  # fmt: skip
    """The §13.3 part of a committed run's results."""
    head = ["fabric", "link flapped", *(n for _, n in COLUMNS), "fullest queue at",
            "runs trusted"]  # fmt: skip
    missing = "; ".join(f"{k}: {why}" for k, why in (d.get("not_representable") or {}).items())
    words = comparison_words(
        d, "13.3",
        "All {n} comparisons (failed requests, recovery time, TTFT p99 drift and the largest "
        "switch queue, ZCube against each other fabric) are within the trials' spread: a "
        "measured tie.",
        at_case=False,
    )  # fmt: skip
    return [
        f"§13.3 in a short form: {d['trials']} trial(s) of {d['trial_seconds']:g} s per fabric "
        f"(the draft: one 24-hour soak), §12.3's link flapped at {d.get('flap_at_s', 0):g} s "
        f"for {d.get('flap_s', 0):g} s under `--policy {d.get('policy')}`, "
        f"{d.get('rate', 0):g} req/s of {d.get('prompt_tokens', 0):,} prompt tokens. Each "
        "figure the mean over trials ± half its 95% interval; stand-ins: KV pull failures for "
        "QP state transitions, the largest switch queue over its size for buffer utilization, "
        "OpenFlow sessions lost while serving for adjacency flaps, TCP retransmissions for "
        "RDMA's:",
        "",
        *table(head, fabric_rows(d, cell)),
        "",
        f"Not representable here: {missing}." if missing else "",
        words,
        "",
    ]
