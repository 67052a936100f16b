"""Where a replay lost its datagrams, and whether the replay can be trusted (pure; issue 45).

A live run is judged by its verdict (`zcube_lab.emulator.verdict`): drops in the emulator, CPU
steal, an agent that failed. A replay is judged the same way from counters the driver reads
just before its agents start and just after they end (`Counters`, flat sections of plain
numbers, so nothing here reads the machine):

- `qdisc_drops`: each shaped port's root qdisc drops (`<node>-eth<port>`); on a host's port that
  is the host's send queue (the NIC), on a switch's port the switch's egress queue: in a
  lossless replay a queue that overflowed because its pause came too late;
- `tx_dropped`, `rx_dropped`: the ports' own drop counters (/proc/net/dev; a veth counts as a tx
  drop a packet its peer's input queue refused); `ovs_tx_dropped`, `ovs_rx_dropped`: the switch
  ports' as ovs-vswitchd counts them (when a send is refused, the rest of its batch is dropped
  too, which no queue counts);
- `refused`: per switch port, the packets ovs-vswitchd's OpenFlow rules forwarded to it less
  those its queue took (`zcube_lab.emulator.replay.ovsflows`): when a full queue refuses one
  packet of a batch, ovs-vswitchd drops the rest of the batch and no other counter sees them;
- `softnet`: the CPUs' input queues' drops; `datapath`: ovs-vswitchd's packet sockets' drops and
  the send errors it logged;
- `udp`: each host's UDP counters (`<host> <counter>`): SndbufErrors (a send the host's own
  queue refused: UDP drops it silently, so each port drop of a datagram shows here too),
  RcvbufErrors and InErrors (the receiver's socket, InErrors counting every receive error);
- `cpu`: the machine's jiffies (`total`, `busy`, `steal`);
- `ovs_coverage`: ovs-vswitchd's drop counters (`drop_action_of_pipeline`: no rule took the
  packet; it also takes the lossless agent's resume frames, so it is reported, not counted);
- `backlog`: each port's queue (packets) at the reading: what the closing reading still finds
  queued was not lost, only not delivered by the deadline.

`locate` puts each lost datagram at the first place that counted it: the host's send queue,
a switch's queue, a port (or the datapath between ports), the receiver. The agents' own
count (`in_flight`: payload bytes handed to the kernel less those that arrived) says how many
were lost in all; what no counter saw is `unlocated`. A host's rx drops are reported apart and
not counted: hosts also discard the lossless agent's resume frames (no protocol handler) there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Counters = Mapping[str, Mapping[str, float]]  # section -> name -> cumulative counter

# ovs-vswitchd's count of packets no OpenFlow rule took: datagrams without a route, but also
# the lossless agent's resume frames (no rule matches them), so reported, never counted
PIPELINE_DROPS = "drop_action_of_pipeline"
LOCATIONS = ("host_send_queue", "switch_queue", "port", "receiver")
LOCATION_TEXT = {
    "host_send_queue": "the host's send queue",
    "switch_queue": "a switch queue",
    "port": "a port or the datapath",
    "receiver": "the receiver",
    "unlocated": "no counter saw where",
}
# The live verdict's limits (zcube_lab.emulator.verdict.limits.Limits: steal_mean, machine_cpu)
STEAL_LIMIT = 0.05
BUSY_LIMIT = 0.90


def diff(before: Counters, after: Counters) -> dict[str, dict[str, float]]:
    """What each counter counted between the two readings (never negative; a counter that was
    not there before counts from 0)."""
    return {
        section: {
            k: max(0.0, float(v) - float(before.get(section, {}).get(k, 0))) for k, v in vs.items()
        }
        for section, vs in after.items()
    }


def _nonzero(d: Mapping[str, float]) -> dict[str, int]:
    return {k: int(v) for k, v in sorted(d.items()) if v}


def _larger(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, int]:
    return _nonzero({d: max(a.get(d, 0), b.get(d, 0)) for d in {*a, *b}})


def in_flight(lines: Iterable[Mapping[str, Any]], payload: int) -> dict[str, int]:
    """From the agents' lines: payload bytes handed to the kernel but never received, and as
    datagrams (each lane's last datagram may be short, so counted up), over every transfer whose
    sender reported what it sent (`sent_bytes`); and the bytes never sent (a replay that ran
    into its deadline)."""
    sent: dict[int, float] = {}
    got: dict[int, tuple[float, float]] = {}
    for row in lines:
        if "sent_bytes" in row:
            sent[int(row["id"])] = float(row["sent_bytes"])
        elif "want" in row:
            got[int(row["id"])] = (float(row.get("bytes") or 0.0), float(row["want"]))
    lost_bytes = lost_datagrams = unsent = 0
    for tid, given in sent.items():
        received, want = got.get(tid, (0.0, given))
        gone = max(0.0, given - received)
        lost_bytes += int(gone)
        lost_datagrams += math.ceil(gone / payload) if payload > 0 else 0
        unsent += int(max(0.0, want - given))
    return {"bytes": lost_bytes, "datagrams": lost_datagrams, "unsent_bytes": unsent}


def locate(
    delta: Counters,
    is_switch_port: Callable[[str], bool],
    lost_datagrams: int | None = None,
    end: Counters | None = None,
) -> dict[str, Any]:
    """Each lost datagram at the place that counted it, with the ports or hosts that did.
    `end`, the closing reading itself: the packets still in each port's queue then
    (`still_queued`: a paused or stalled queue holds them, not lost, only not delivered by the
    deadline), reported beside."""
    qdisc = delta.get("qdisc_drops", {})
    udp = delta.get("udp", {})

    def by_host(counter: str) -> dict[str, int]:
        return _nonzero({k.split(" ")[0]: v for k, v in udp.items() if k.endswith(f" {counter}")})

    host_queue = _nonzero({d: v for d, v in qdisc.items() if not is_switch_port(d)})
    sndbuf = by_host("SndbufErrors")
    # a switch queue's own count of its drops, or what ovs-vswitchd forwarded to the port less
    # what the queue took (`refused`: also the rest of each batch a full queue refused, which
    # ovs-vswitchd drops uncounted), the larger
    queue_counted = _nonzero({d: v for d, v in qdisc.items() if is_switch_port(d)})
    switch_queue = _larger(
        queue_counted, {d: v for d, v in delta.get("refused", {}).items() if is_switch_port(d)}
    )
    # the kernel's count of a port's drops and ovs-vswitchd's (which adds the packets of a batch
    # it dropped after a refused send) overlap: the larger of the two per port
    tx = _larger(delta.get("tx_dropped", {}), delta.get("ovs_tx_dropped", {}))
    rx = _larger(delta.get("rx_dropped", {}), delta.get("ovs_rx_dropped", {}))
    rx_switch = _nonzero({d: v for d, v in rx.items() if is_switch_port(d)})
    rx_host = _nonzero({d: v for d, v in rx.items() if not is_switch_port(d)})
    softnet = int(sum(delta.get("softnet", {}).values()))
    datapath = _nonzero(delta.get("datapath", {}))
    coverage = delta.get("ovs_coverage", {})
    pipeline = int(coverage.get(PIPELINE_DROPS, 0))
    datapath = {
        **datapath,
        **_nonzero({k: v for k, v in coverage.items() if k != PIPELINE_DROPS}),
    }
    in_errors, rcvbuf = by_host("InErrors"), by_host("RcvbufErrors")
    receiver = {h: max(in_errors.get(h, 0), rcvbuf.get(h, 0)) for h in {*in_errors, *rcvbuf}}
    ports: dict[str, int] = {}
    for src in (tx, rx_switch):
        for d, v in src.items():
            ports[d] = ports.get(d, 0) + v
    # a datagram the host's port queue dropped is counted by its qdisc and by UDP's
    # SndbufErrors: the larger of the two, not their sum
    counts = {
        "host_send_queue": max(sum(host_queue.values()), sum(sndbuf.values())),
        "switch_queue": sum(switch_queue.values()),
        "port": sum(ports.values()) + softnet + sum(datapath.values()),
        "receiver": sum(receiver.values()),
    }
    out: dict[str, Any] = {
        "datagrams": counts,
        "detail": {
            "host_send_queue": {"qdisc": host_queue, "SndbufErrors": sndbuf},
            "switch_queue": switch_queue,
            "port": {"ports": dict(sorted(ports.items())), "softnet": softnet, **datapath},
            "receiver": dict(sorted(receiver.items())),
        },
        # the switch queues' own count (without the rest of their refused batches)
        "switch_queue_counted": sum(queue_counted.values()),
        "host_rx_dropped": sum(rx_host.values()),
        "pipeline_drops": pipeline,
        "still_queued": _nonzero(end.get("backlog", {})) if end is not None else {},
    }
    if lost_datagrams is not None:
        queued = sum(out["still_queued"].values())
        out["lost_datagrams"] = lost_datagrams
        out["unlocated"] = max(0, lost_datagrams - sum(counts.values()) - queued)
    return out


def cpu_shares(delta: Counters) -> dict[str, float | None]:
    """The machine's busy and steal shares over the replay (None without a reading)."""
    cpu = delta.get("cpu", {})
    total = float(cpu.get("total", 0.0))
    if total <= 0:
        return {"busy": None, "steal": None}
    return {
        "busy": round(float(cpu.get("busy", 0.0)) / total, 4),
        "steal": round(float(cpu.get("steal", 0.0)) / total, 4),
    }


def _top(d: Mapping[str, int], n: int = 3) -> str:
    items = sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
    more = "" if len(d) <= n else f", {len(d) - n} more"
    return ", ".join(f"{k} {v:,}" for k, v in items) + more


def where_text(located: Mapping[str, Any]) -> str:
    """One line: the lost datagrams by place (`none lost` when none)."""
    counts = located["datagrams"]
    parts = [f"{LOCATION_TEXT[k]} {counts[k]:,}" for k in LOCATIONS if counts.get(k)]
    queued = sum((located.get("still_queued") or {}).values())
    if queued:
        parts.append(f"still queued at the end {queued:,}")
    if located.get("unlocated"):
        parts.append(f"{LOCATION_TEXT['unlocated']} {located['unlocated']:,}")
    lost = located.get("lost_datagrams")
    head = "" if lost is None else f"{lost:,} datagrams lost on the way: "
    if not parts:
        return head + "none counted anywhere" if lost else "none lost"
    return head + ", ".join(parts)


def verdict(
    located: Mapping[str, Any],
    cpu: Mapping[str, float | None],
    *,
    incomplete: int = 0,
    lossless: Mapping[str, Any] | None = None,
    missing: Iterable[str] = (),
    steal_limit: float = STEAL_LIMIT,
    busy_limit: float = BUSY_LIMIT,
    load: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Whether to trust a replay, with every reason (the first decides what the line says):
    counters not read, the lossless agent gone or failing, datagrams lost anywhere (a lossless
    replay loses none; each place named with its ports), transfers short at the deadline, CPU
    steal or the machine's busy share over the live verdict's limits. With `load` (the datagram
    load it was paced for, `zcube_lab.core.replay.load.Load.describe()`) above its share of the
    datapath's measured packets/s, a replay that lost datagrams says so first: the likely cause
    is the machine's datapath, not the fabric."""
    reasons = [f"{what} not read: unchecked" for what in missing]
    lost_any = bool(
        located.get("lost_datagrams")
        or any(located["datagrams"].values())
        or located.get("unlocated")
    )
    if load is not None and lost_any and not load.get("within_share", True):
        reasons.append(
            f"paced above the datapath's share: its busiest {load['window_wall_s']:g} wall s at "
            f"{load['of_ceiling']:.0%} of the measured {load['ceiling_pps']:,.0f} pps (allowed "
            f"{load['share']:.0%}), so its losses may be the machine's: a higher --dilation"
        )
    if lossless is not None:
        if not lossless.get("alive", True):
            reasons.append("lossless agent: exited before the replay ended")
        if lossless.get("errors"):
            reasons.append(f"lossless agent: {lossless['errors']} netlink or socket errors")
    counts, detail = located["datagrams"], located["detail"]
    for where in LOCATIONS:
        n = counts.get(where, 0)
        if not n:
            continue
        d = detail[where]
        if where == "host_send_queue":
            d = d["qdisc"] or d["SndbufErrors"]
        elif where == "port":
            d = {**d["ports"], **{k: v for k, v in d.items() if k != "ports" and v}}
        reasons.append(f"{n:,} datagrams lost at {LOCATION_TEXT[where]} ({_top(d)})")
    queued = located.get("still_queued") or {}
    if sum(queued.values()):
        reasons.append(
            f"{sum(queued.values()):,} datagrams still queued at the end, undelivered "
            f"({_top(queued)})"
        )
    if located.get("unlocated"):
        reasons.append(f"{located['unlocated']:,} datagrams lost where no counter saw them")
    lost = located.get("lost_datagrams") or 0
    if incomplete:
        why = "" if lost or any(counts.values()) else " (none lost: unsent at the deadline)"
        reasons.append(f"{incomplete} transfers incomplete{why}")
    steal, busy = cpu.get("steal"), cpu.get("busy")
    if steal is not None and steal > steal_limit:
        reasons.append(f"CPU steal averaged {steal:.0%} (allowed {steal_limit:.0%})")
    if busy is not None and busy > busy_limit:
        reasons.append(f"the machine's CPUs averaged {busy:.0%} busy (allowed {busy_limit:.0%})")
    return {"trusted": not reasons, "reasons": reasons}


def verdict_line(v: Mapping[str, Any]) -> str:
    """`trusted`, or `not trusted: <first reason>` (and how many more)."""
    if v["trusted"]:
        return "trusted"
    more = len(v["reasons"]) - 1
    return f"not trusted: {v['reasons'][0]}" + (f" (+{more} more)" if more else "")
