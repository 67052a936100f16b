"""Per-class byte counters on a shaped port (pure): the `tc` lines that count the bytes of each
traffic class entering a port's queue, and the reading of those counters back (docs/LOSSLESS.md,
"Victim accounting").

The EP and KV senders mark their packets with distinct DSCP values
(`zcube_lab.serving.trafficclass`); a port keeps one queue for both, as production keeps both in one
lossless priority. To count them apart without touching the queueing, each class gets one u32 filter
on the port's HTB root (`5:`), matching its DSCP and classifying to the port's one class (`5:1`,
where HTB's default sends it anyway) with a `mirred egress mirror` action aimed at a sink device
that stays down: this kernel has no gact or police action and no u32 hit counters, and mirred counts
every packet it sees (bytes, packets) before finding its target down, so the mirror copies nothing
and the packet goes on (`pipe`). The action's counters, read with `tc -s -j filter show`, are
the class's bytes into the queue. A packet of neither class (ARP, the agent's MAC-control
kick) matches no filter and still reaches `5:1` through HTB's default.

Names: `SINK` is the sink device (an IFB left down, in the namespace of the ports); the filter of
class number i sits at priority `PRIO_BASE + i`, its `classes` order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from zcube_lab.core.fabric.queues import HTB_CLASS

SINK = "zcsink"
PRIO_BASE = 10
DSCP_MASK = 0xFC  # the DSCP's six bits of the TOS byte; ECN's two left out


def root_handle() -> str:
    """The HTB root's handle (`5:`) the filters hang under."""
    return HTB_CLASS.split(":", 1)[0] + ":"


def sink_lines() -> list[str]:
    """`ip -batch` lines making the sink (an IFB, never set up)."""
    return [f"link add {SINK} type ifb"]


def counter_lines(interface: str, classes: Mapping[str, int]) -> list[str]:
    """`tc -batch` lines putting one counting filter per class (name -> DSCP) on a port."""
    lines = []
    for i, (_name, dscp) in enumerate(sorted(classes.items())):
        if not 0 <= dscp < 64:
            raise ValueError(f"DSCP {dscp} is not a 6-bit code point")
        lines.append(
            f"filter replace dev {interface} parent {root_handle()} protocol ip "
            f"prio {PRIO_BASE + i} u32 match ip dsfield {dscp << 2:#04x} {DSCP_MASK:#04x} "
            f"classid {HTB_CLASS} action mirred egress mirror dev {SINK}"
        )
    return lines


def parse_counters(text: str, classes: Mapping[str, int]) -> dict[str, int]:
    """Per class, the bytes its filter's action counted, from `tc -s -j filter show dev X
    parent 5:` (a class without a filter reads 0)."""
    by_prio = {PRIO_BASE + i: name for i, name in enumerate(sorted(classes))}
    out = dict.fromkeys(classes, 0)
    data: Sequence[Any] = json.loads(text) if text.strip() else []
    for entry in data:
        name = by_prio.get(entry.get("pref"))
        options = entry.get("options") or {}
        if name is None:
            continue
        for action in options.get("actions") or ():
            stats = action.get("stats") or {}
            out[name] += int(stats.get("bytes", 0))
    return out
