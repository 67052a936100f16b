"""§12.3 of the draft (link failure convergence impact on serving), worked out before any lab
(pure): a live-serving test, like §6.1 (`zcube_lab.core.bmwg.ttft`). A trial is one `zcube-lab
run` on one fabric: single-turn requests of `PROMPT_TOKENS` prompt tokens arriving as a Poisson
stream at `RATE` (a load below the knee: the twelve prefill engines of the 16-GPU cell are busy
about a third of the time), with one link failed at `FAIL_AT` of the trial for `FAIL_FOR` of it
and then restored (`zcube-lab run --fail`, the run's fault schedule), under the fast-failover
routing policy `POLICY` (each switch takes the next live bucket of its fast-failover group as
soon as the port goes down, without the controller: docs/FAILURES.md).

The failed link is chosen by role so every fabric loses a comparable one (`failed_link`): a
switch-to-switch link of the switch that carries the most decode hosts' ports, the first of its
fabric-facing links. Every KV pull lands on a decode host, so that switch's fabric-facing links
carry the KV pulls into the decode hosts behind it; each fabric of 16 GPU hosts has 16
switch-to-switch links and loses one of them (ZCube a3-b0: 1 of a3's 4 links to B switches;
ROFT leaf6-spine0: 1 of the decode leaf's 2 uplinks; Clos leaf3-spine0#0: 1 of the decode
leaf's 4). A host's own port is not failed: on ROFT and Clos a host has one NIC port, and
losing it takes the decode engine off the fabric, which is an engine outage, not a fabric's
convergence.

A trial's figures (`trial_figures`), phases by send time against the fault's own record
(`faults.jsonl`: the `down` and `up` wall times), as the run's fault report counts them:
- failed requests (the whole run's, and those sent during the failure);
- TTFT p50 and p99 before, during and after the failure (modelled ms);
- `recovery_time_s`, the time until serving recovered, defined once here: requests are put in
  bins of `BIN_S` by send time, the first starting at the failure's onset; a bin is disrupted
  when a request sent in it failed or its TTFT p99 is above the before window's range with a
  margin, `TOLERANCE` above the highest TTFT of the requests sent before the onset (a trial's
  TTFT is mostly modelled prefill, which jitters by a few % on this 2-core machine: without
  the margin a second of a run without any failure would count as disrupted). The recovery
  time is from the onset to the end of the last disrupted bin, 0 when none is: from then on to
  the run's end every second served within the before window's range. None (`unrecovered` 1)
  when the run's last non-empty bin is disrupted;
- `disruption_time_s`: the disrupted bins after the onset, times `BIN_S`;
- the KV pulls retried, the failed pull attempts and, from the fault report, the first hit KV
  pull's convergence (`recovery_kv_first_s`: the fault's onset to the first pull it hit
  completing);
- the run's TPS_output and Packet_drop_rate, and `untrusted` (1 when the lab's verdict did not
  trust the run: its comparison is then out of reach).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from zcube_lab.core.bmwg import workload
from zcube_lab.core.bmwg.workload import single_turn
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.description import Fabric, Link
from zcube_lab.core.stats import quantile

SECTION = "12.3"
MODEL = workload.MODEL
PROMPT_TOKENS = 16384
OUTPUT_TOKENS = 16
# Requests per modelled second: a 16k-token GLM-5.1 prefill takes about a second on one
# prefill engine, and the 16-GPU cell has twelve: about a third of them busy, below the knee.
RATE = 4.0
POLICY = "ff"
# The failure starts at this share of the trial and holds for this share, then the link is
# restored: at 60 s (the draft's shortest trial) 24 s of steady serving, 15 s failed, 21 s after.
FAIL_AT, FAIL_FOR = 0.4, 0.25
BIN_S = 1.0
TOLERANCE = 0.1
MIN_RUN_S = 10.0  # the shortest trial: 4 s before the failure, 2.5 s of it, 3.5 s after
PREFILL_SHARE = 0.75  # 3 of 4 servers prefill (as §6.1's cell), the rest decode
PHASES = ("before", "during", "after")
# The draft's procedure against the quick form (printed side by side before a run).
DRAFT_PROCEDURE = "one link failed during steady-state serving, then restored"


def check_trial_seconds(seconds: float) -> None:
    """A trial shorter than `MIN_RUN_S` has too few seconds before, during and after its
    failure: refused, naming the field."""
    if seconds < MIN_RUN_S:
        raise ConfigError(
            "trial_seconds", seconds, f"at least {MIN_RUN_S:g} s for §12.3's live serving runs "
            "(run 12.3 in its own command when the replay tests' trials are shorter)"
        )  # fmt: skip


def fault_timing(trial_seconds: float) -> tuple[float, float]:
    """(onset, span) of a trial's failure, seconds from the load's start, to the millisecond."""
    check_trial_seconds(trial_seconds)
    return round(FAIL_AT * trial_seconds, 3), round(FAIL_FOR * trial_seconds, 3)


def prefill_servers(fabric: Fabric) -> int:
    """The servers that prefill: `PREFILL_SHARE` of the fabric's, at least one, leaving one."""
    servers = len({h.server for h in fabric.hosts})
    return min(max(1, round(PREFILL_SHARE * servers)), max(1, servers - 1))


def decode_hosts(fabric: Fabric) -> tuple[str, ...]:
    """The GPU hosts the run's decode engines sit on (the default placement)."""
    from zcube_lab.core.fabric.placement import LayoutSpec, place

    placement = place(fabric, LayoutSpec(prefill_servers=prefill_servers(fabric)))
    return tuple(e.host for e in placement.role("decode"))


@dataclass(frozen=True)
class FailedLink:
    """The link a fabric's trials fail and why it is the comparable one."""

    spec: str  # the `--fail` target: "a3-b0", "leaf3-spine0#0"
    link: Link
    switch: str  # the switch carrying the most decode hosts' ports
    decode_ports: int  # decode hosts' ports on it
    fabric_links: int  # its switch-to-switch links (the failed one among them)
    switch_links: int  # the fabric's switch-to-switch links

    def describe(self) -> str:
        return (
            f"{self.spec}: 1 of the {self.fabric_links} fabric-facing links of {self.switch} "
            f"(which carries {self.decode_ports} decode host ports), 1 of the fabric's "
            f"{self.switch_links} switch-to-switch links"
        )

    def to_dict(self) -> dict[str, Any]:
        lk = self.link
        return {
            "spec": self.spec,
            "link": f"{lk.node1}:{lk.port1}-{lk.node2}:{lk.port2}",
            "switch": self.switch,
            "decode_ports": self.decode_ports,
            "fabric_links": self.fabric_links,
            "switch_links": self.switch_links,
            "why": self.describe(),
        }


def failed_link(fabric: Fabric, decodes: Sequence[str]) -> FailedLink:
    """The link §12.3 fails on `fabric` whose decode engines sit on hosts `decodes`: the switch
    with the most ports to those hosts (ties: the first in the fabric's switch order), and its
    first switch-to-switch link in the fabric's link order; with parallel links between the
    same two switches, the spec names the one (`#k`) so only it fails. ConfigError when no
    switch of a decode host has a link to another switch."""
    wanted = set(decodes)
    order = {s.name: i for i, s in enumerate(fabric.switches)}

    def inter(lk: Link) -> bool:
        return fabric.is_switch(lk.node1) and fabric.is_switch(lk.node2)

    ports: dict[str, int] = {}
    for lk in fabric.links:
        for host, sw in ((lk.node1, lk.node2), (lk.node2, lk.node1)):
            if host in wanted and fabric.is_switch(sw):
                ports[sw] = ports.get(sw, 0) + 1
    between = [lk for lk in fabric.links if inter(lk)]
    for sw in sorted(ports, key=lambda s: (-ports[s], order.get(s, 0))):
        mine = [lk for lk in between if sw in (lk.node1, lk.node2)]
        if not mine:
            continue
        lk = mine[0]
        parallel = [x for x in fabric.links if {x.node1, x.node2} == {lk.node1, lk.node2}]
        spec = f"{lk.node1}-{lk.node2}"
        if len(parallel) > 1:
            spec += f"#{parallel.index(lk)}"
        return FailedLink(spec, lk, sw, ports[sw], len(mine), len(between))
    raise ConfigError("fabric", fabric.kind, "a fabric whose decode hosts' switches have links "
                      "to other switches")  # fmt: skip


def fail_spec(link: FailedLink, trial_seconds: float) -> str:
    """The `--fail` specification of a trial."""
    at, span = fault_timing(trial_seconds)
    return f"link {link.spec} at {at:g}s for {span:g}s"


def profile(rate: float = RATE, prompt_tokens: int = PROMPT_TOKENS) -> dict[str, Any]:
    """The workload profile of a trial: single-turn completions of exactly `prompt_tokens`
    prompt tokens and `OUTPUT_TOKENS` output tokens, no prefix cache, Poisson at `rate`."""
    return single_turn(
        f"bmwg-12.3-{prompt_tokens}",
        f"BMWG §12.3: single-turn requests of exactly {prompt_tokens} prompt "
        f"tokens and {OUTPUT_TOKENS} output tokens at {rate:g} req/s, one link failed.",
        prompt_tokens, OUTPUT_TOKENS, rate, prefill_servers=3,
    )  # fmt: skip


def case_label() -> str:
    return f"link_failed=1 prompt_tokens={PROMPT_TOKENS}"


def fault_window(events: Sequence[Mapping[str, Any]]) -> tuple[float, float] | None:
    """The failure's (down, up) wall times from its records (`faults.jsonl`): the first
    `down` and the last `up` after it (None without a `down`; the up is then +inf when the
    link never came back)."""
    downs = [float(e["wall"]) for e in events if e.get("action") == "down"]
    if not downs:
        return None
    down = min(downs)
    ups = [float(e["wall"]) for e in events if e.get("action") == "up" and e["wall"] >= down]
    return down, (max(ups) if ups else float("inf"))


def phase_of(sent_wall: float, window: tuple[float, float]) -> str:
    down, up = window
    return "before" if sent_wall < down else ("during" if sent_wall < up else "after")


def _ok_ttft(r: Mapping[str, Any]) -> float | None:
    if r.get("outcome") != "ok" or r.get("ttft_s") is None:
        return None
    return float(r["ttft_s"])


def bins_after(
    requests: Sequence[Mapping[str, Any]], onset: float, bin_s: float = BIN_S
) -> list[tuple[int, float | None, int]]:
    """Requests sent from `onset` on in bins of `bin_s` by send time (`wall_time`): per
    non-empty bin (its index, TTFT p99 of its served requests in s or None, its failed
    requests), in order."""
    groups: dict[int, list[Mapping[str, Any]]] = {}
    for r in requests:
        t = float(r["wall_time"])
        if t >= onset:
            groups.setdefault(int((t - onset) // bin_s), []).append(r)
    out = []
    for i in sorted(groups):
        rs = groups[i]
        ttft = [v for v in (_ok_ttft(r) for r in rs) if v is not None]
        out.append((i, quantile(ttft, 0.99), sum(1 for r in rs if r.get("outcome") != "ok")))
    return out


def recovery(
    requests: Sequence[Mapping[str, Any]], onset: float, bin_s: float = BIN_S
) -> dict[str, Any]:
    """`recovery_time_s`, `disruption_time_s`, `unrecovered` and the bound they judge by
    (`ttft_bound_ms`: `TOLERANCE` above the highest TTFT sent before `onset`), as the module
    docstring defines them; every figure None without a served request before the onset."""
    before = [v for r in requests if float(r["wall_time"]) < onset
              for v in [_ok_ttft(r)] if v is not None]  # fmt: skip
    if not before:
        return {"recovery_time_s": None, "disruption_time_s": None, "unrecovered": None,
                "ttft_bound_ms": None}  # fmt: skip
    bound = (1 + TOLERANCE) * max(before)
    bins = bins_after(requests, onset, bin_s)
    bad = [failed > 0 or (p99 is not None and p99 > bound) for _, p99, failed in bins]
    rec: float | None = 0.0
    if any(bad):
        last = max(i for (i, _, _), b in zip(bins, bad, strict=True) if b)
        rec = None if bad[-1] else (last + 1) * bin_s
    return {
        "recovery_time_s": rec,
        "disruption_time_s": sum(bad) * bin_s,
        "unrecovered": int(rec is None),
        "ttft_bound_ms": bound * 1e3,
    }


def phase_figures(
    requests: Sequence[Mapping[str, Any]], window: tuple[float, float]
) -> dict[str, Any]:
    """Per phase (by send time): requests, failed ones, TTFT p50 and p99 of the served ones
    (modelled ms)."""
    figs: dict[str, Any] = {}
    for name in PHASES:
        mine = [r for r in requests if phase_of(float(r["wall_time"]), window) == name]
        ttft = [v for v in (_ok_ttft(r) for r in mine) if v is not None]
        p50, p99 = quantile(ttft, 0.5), quantile(ttft, 0.99)
        figs[f"TTFT_p50_{name}_ms"] = None if p50 is None else p50 * 1e3
        figs[f"TTFT_p99_{name}_ms"] = None if p99 is None else p99 * 1e3
        figs[f"requests_{name}"] = len(mine)
        figs[f"failed_{name}"] = sum(1 for r in mine if r.get("outcome") != "ok")
    return figs


def link_util_pct(summary: Mapping[str, Any], link: str) -> float | None:
    """The busier direction of `link` ("a3:5-b0:8") over the run: each end's egress mean
    utilization (the summary's `port_util`, "switch:port" -> share), in %; None without
    either end's figure."""
    util = summary.get("port_util") or {}
    ends = [util.get(end) for end in link.split("-")]
    vals = [float(v) for v in ends if v is not None]
    return max(vals) * 100 if vals else None


def trial_figures(
    summary: Mapping[str, Any],
    requests: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    link: str = "",
) -> dict[str, Any]:
    """A trial's figures (the module docstring) from its run's summary.json, its client
    records (`requests.jsonl`) and its fault records (`faults.jsonl`). `fault_held_s` is the
    failure's span as recorded (down to up); without a `down` record the failure never
    happened: `fault_held_s` None and the phase and recovery figures None. With the failed
    `link` ("a3:5-b0:8"), `failed_link_util_pct`: its busier direction's mean utilization over
    the run (`link_util_pct`), which shows it carried traffic (the KV pulls into the decode
    hosts) while it was up."""
    faults = summary.get("faults") or {}
    kpis = summary.get("bmwg") or {}
    window = fault_window(events)
    figs: dict[str, Any] = {
        "failed_requests": sum(1 for r in requests if r.get("outcome") != "ok"),
        "requests": len(requests),
    }
    if window is None:
        figs["fault_held_s"] = None
        figs.update({f"{k}_{p}_ms": None for k in ("TTFT_p50", "TTFT_p99") for p in PHASES})
        figs.update(recovery_time_s=None, disruption_time_s=None, unrecovered=None)
    else:
        held = window[1] - window[0]
        figs["fault_held_s"] = None if held == float("inf") else round(held, 3)
        figs.update(phase_figures(requests, window))
        figs.update(recovery(requests, window[0]))
    figs["KV_pulls_retried"] = faults.get("kv_retried")
    figs["kv_failed_attempts"] = faults.get("kv_failed_attempts")
    figs["kv_hit_transfers"] = faults.get("kv_hit_transfers")
    figs["recovery_kv_first_s"] = faults.get("recovery_kv_first_s")
    figs["TPS_output"] = kpis.get("TPS_output")
    figs["Packet_drop_rate"] = kpis.get("Packet_drop_rate")
    if link:
        figs["failed_link_util_pct"] = link_util_pct(summary, link)
    figs["untrusted"] = 0 if summary.get("trustworthy") else 1
    return figs


def parameter_lines(
    trials: int, trial_seconds: float, draft_trials: int, draft_trial_s: float
) -> list[str]:
    """The draft's parameters beside the ones a run uses, one line each."""
    at, span = fault_timing(trial_seconds)
    d_at, d_span = FAIL_AT * draft_trial_s, FAIL_FOR * draft_trial_s
    return [
        f"  procedure: draft: {DRAFT_PROCEDURE} | here: the same, one switch-to-switch link "
        "on the KV path into the decode hosts, by role (failed_link)",
        f"  trials: draft: {draft_trials} of >= {draft_trial_s:g} s | here: {trials} of "
        f"{trial_seconds:g} s",
        f"  failure: draft: during steady-state serving, then restored | here: at {at:g} s "
        f"for {span:g} s ({FAIL_AT:g} and {FAIL_FOR:g} of the trial; at the draft's "
        f"{draft_trial_s:g} s: at {d_at:g} s for {d_span:g} s)",
        f"  load: draft: steady serving below saturation | here: Poisson {RATE:g} req/s of "
        f"{PROMPT_TOKENS} prompt tokens, {OUTPUT_TOKENS} output, {MODEL}",
        f"  routing: draft: the fabric's own failover | here: --policy {POLICY} (fast-failover "
        "groups, no controller in the repair)",
    ]
