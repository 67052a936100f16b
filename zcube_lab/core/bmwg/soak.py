"""§13.3 of the draft (long-running serving stability), worked out before any lab (pure), in a
short form: a 24-hour soak does not fit a session, so a trial is one `zcube-lab run` of steady
serving (§12.3's load, `zcube_lab.core.bmwg.linkfail`) with one controlled perturbation at
its midpoint, as the draft puts one at the 12-hour mark: a single link flap, the same
switch-to-switch link §12.3 fails (`linkfail.failed_link`), down for `FLAP_S` and straight back
up, under the fast-failover policy.

The draft's stability figures and what stands for each here (`trial_figures`):
- QP state transitions -> `KV_connection_failures`: KV pull attempts that failed (the KV
  transport's connections are TCP, not queue pairs);
- maximum switch buffer utilization -> `Buffer_utilization_pct`: the largest queue any switch
  port held during the run (its peak backlog in packets) over that port's queue
  (`queue_packets`), in %, and `buffer_peak_port`;
- adjacency flap count -> `adjacency_flaps`: the switches' OpenFlow sessions to the controller
  lost while serving (the lab's fabric has no BGP or OSPF; the controller is its control
  plane), from the controller's log;
- RDMA retransmission count -> `TCP_retransmissions` (segments the hosts' TCP sent again) and
  `TCP_timeouts` (retransmission timer expiries), summed over hosts;
- FEC error trend: not representable (a veth pair has no forward error correction): absent;
- recovery time from the flap: `recovery_time_s` as §12.3 defines it, with the flap's onset;
- the trend over the soak: `TTFT_p99_drift`, the TTFT p99 of the requests sent in the run's
  last third over that of its first third (1: no drift; the flap sits in the middle third).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import Any

from zcube_lab.core.bmwg import linkfail as lf
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.stats import quantile

SECTION = "13.3"
FLAP_AT = 0.5  # the flap's onset, as a share of the trial (the draft: 12 h into 24 h)
FLAP_S = 1.0  # how long the link stays down: a flap, not an outage
MIN_RUN_S = 20.0  # thirds of at least 6 s, the flap well inside the middle one
DRAFT_SOAK_S = 86400.0
DRAFT_FLAP_AT_S = 43200.0
NOT_HERE = {"FEC error trend": "a veth pair has no forward error correction"}
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .* (\S+) disconnected\s*$")


def check_trial_seconds(seconds: float) -> None:
    """A trial shorter than `MIN_RUN_S`: refused, naming the field."""
    if seconds < MIN_RUN_S:
        raise ConfigError(
            "trial_seconds", seconds, f"at least {MIN_RUN_S:g} s for §13.3's soak (its thirds "
            "and the flap in the middle one)"
        )  # fmt: skip


def flap_spec(link: lf.FailedLink, trial_seconds: float) -> str:
    """The `--fail` specification of a trial's flap."""
    check_trial_seconds(trial_seconds)
    return f"link {link.spec} at {round(FLAP_AT * trial_seconds, 3):g}s for {FLAP_S:g}s"


def case_label() -> str:
    return f"link_flap={FLAP_S:g}s prompt_tokens={lf.PROMPT_TOKENS}"


def drift(requests: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """TTFT p99 (modelled ms) of the served requests sent in the first and the last third of
    the span the requests were sent over, and the last's over the first's."""
    sent = [float(r["wall_time"]) for r in requests]
    if not sent:
        return {"TTFT_p99_first_ms": None, "TTFT_p99_last_ms": None, "TTFT_p99_drift": None}
    t0, t1 = min(sent), max(sent)
    third = (t1 - t0) / 3

    def p99(lo: float, hi: float) -> float | None:
        vals = [float(r["ttft_s"]) for r in requests
                if r.get("outcome") == "ok" and r.get("ttft_s") is not None
                and lo <= float(r["wall_time"]) <= hi]  # fmt: skip
        q = quantile(vals, 0.99)
        return None if q is None else q * 1e3

    first, last = p99(t0, t0 + third), p99(t1 - third, t1)
    return {
        "TTFT_p99_first_ms": first,
        "TTFT_p99_last_ms": last,
        "TTFT_p99_drift": None if not first or last is None else last / first,
    }


def buffer_peak(qdisc: Mapping[str, Mapping[str, Any]], queue_packets: int | None,
                hosts: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """The switch port whose queue peaked highest (the run's per-port qdisc readings,
    "switch-ethN" -> its peak backlog), its peak in packets and bytes, and that peak over the
    port's `queue_packets` in % (None without a queue size). Host ports are left out."""
    mine = {k: v for k, v in qdisc.items() if k.split("-", 1)[0] not in set(hosts)}
    if not mine:
        return {"Buffer_utilization_pct": None, "buffer_peak_packets": None,
                "buffer_peak_bytes": None, "buffer_peak_port": None}  # fmt: skip
    port, q = max(mine.items(), key=lambda kv: (kv[1].get("peak_backlog_packets") or 0, kv[0]))
    pkts = int(q.get("peak_backlog_packets") or 0)
    return {
        "Buffer_utilization_pct": None if not queue_packets else 100 * pkts / queue_packets,
        "buffer_peak_packets": pkts,
        "buffer_peak_bytes": int(q.get("peak_backlog_bytes") or 0),
        "buffer_peak_port": port,
    }


def adjacency_flaps(controller_log: str, start: float, end: float) -> int:
    """OpenFlow sessions the controller lost between `start` and `end` (epoch seconds; its log
    stamps local time to the millisecond, as Python's logging writes it)."""
    n = 0
    for line in controller_log.splitlines():
        m = _STAMP.match(line)
        if m is None:
            continue
        at = dt.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        n += start <= at <= end
    return n


def retransmissions(tcp: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Segments sent again and retransmission timeouts, summed over the hosts."""
    return {
        "TCP_retransmissions": sum(int(v.get("retrans_segs") or 0) for v in tcp.values()),
        "TCP_timeouts": sum(int(v.get("timeouts") or 0) for v in tcp.values()),
    }


def serving_span(requests: Sequence[Mapping[str, Any]]) -> tuple[float, float] | None:
    """Epoch seconds from the first request's send to the last one's end."""
    if not requests:
        return None
    start = min(float(r["wall_time"]) for r in requests)
    end = max(float(r["wall_time"]) + float(r.get("e2e_s") or 0.0) for r in requests)
    return start, end


def trial_figures(summary: Mapping[str, Any], health: Mapping[str, Any],
                  requests: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]],
                  controller_log: str, queue_packets: int | None,
                  hosts: Sequence[str]) -> dict[str, Any]:  # fmt: skip
    """A trial's figures (the module docstring) from its run's summary.json and health.json,
    client records, fault records, controller log, switch queue size and host names."""
    base = lf.trial_figures(summary, requests, events)
    keep = ("requests", "failed_requests", "fault_held_s", "recovery_time_s",
            "disruption_time_s", "unrecovered", "TPS_output", "Packet_drop_rate")  # fmt: skip
    figs: dict[str, Any] = {k: base.get(k) for k in keep}
    figs["KV_connection_failures"] = base.get("kv_failed_attempts")
    figs.update(drift(requests))
    figs.update(buffer_peak(health.get("qdisc") or {}, queue_packets, hosts))
    span = serving_span(requests)
    figs["adjacency_flaps"] = None if span is None else adjacency_flaps(controller_log, *span)
    figs.update(retransmissions(health.get("tcp") or {}))
    figs["untrusted"] = base["untrusted"]
    return figs


def parameter_lines(trials: int, trial_seconds: float, draft_trials: int) -> list[str]:
    """The draft's parameters beside the ones a run uses, one line each."""
    at = round(FLAP_AT * trial_seconds, 3)
    return [
        f"  soak: draft: {draft_trials} run of {DRAFT_SOAK_S / 3600:g} h | here: {trials} of "
        f"{trial_seconds:g} s (a short form)",
        f"  perturbation: draft: one link flap at {DRAFT_FLAP_AT_S / 3600:g} h | here: the "
        f"§12.3 link down at {at:g} s for {FLAP_S:g} s (the trial's midpoint)",
        f"  load: draft: continuous serving | here: Poisson {lf.RATE:g} req/s of "
        f"{lf.PROMPT_TOKENS} prompt tokens, {lf.OUTPUT_TOKENS} output, {lf.MODEL}, "
        f"--policy {lf.POLICY}",
        "  monitored: QP transitions, max switch buffer, FEC errors, adjacency flaps, RDMA "
        "retransmissions | here: KV pull failures, max switch queue, -, OpenFlow sessions "
        "lost, TCP retransmissions and timeouts",
    ]
