"""Per-class counters on a port: the tc lines, and their counters read back from the JSON `tc -s
-j filter show` printed on this machine (tests/unit/data/tc-filter-counters.json: a veth with
HTB and the two filters, three 1,042-byte pings marked AF41 and two 542-byte ones AF21, the
prefs renumbered to PRIO_BASE)."""

from __future__ import annotations

from pathlib import Path

import pytest

from zcube_lab.core.fabric.classcounters import (
    PRIO_BASE,
    SINK,
    counter_lines,
    parse_counters,
    root_handle,
    sink_lines,
)
from zcube_lab.core.fabric.queues import HTB_CLASS
from zcube_lab.serving.trafficclass import DSCP

DATA = Path(__file__).parent / "data" / "tc-filter-counters.json"


def test_one_filter_per_class_under_the_htb_root() -> None:
    lines = counter_lines("a0-eth1", DSCP)
    assert lines == [
        f"filter replace dev a0-eth1 parent {root_handle()} protocol ip prio {PRIO_BASE} u32 "
        f"match ip dsfield 0x88 0xfc classid {HTB_CLASS} action mirred egress mirror dev {SINK}",
        f"filter replace dev a0-eth1 parent {root_handle()} protocol ip prio {PRIO_BASE + 1} "
        f"u32 match ip dsfield 0x48 0xfc classid {HTB_CLASS} action mirred egress mirror dev "
        f"{SINK}",
    ]  # ep (AF41 = 34 << 2 = 0x88) sorts before kv (AF21 = 18 << 2 = 0x48)
    assert root_handle() == "5:" and sink_lines() == [f"link add {SINK} type ifb"]
    with pytest.raises(ValueError):
        counter_lines("x", {"bad": 64})


def test_counters_read_back_per_class() -> None:
    assert parse_counters(DATA.read_text(), DSCP) == {"ep": 3 * 1042, "kv": 2 * 542}
    assert parse_counters("", DSCP) == {"ep": 0, "kv": 0}


def test_the_counted_ports_are_the_ones_the_agent_watches() -> None:
    from zcube_lab.core.fabric.builders import build_fabric
    from zcube_lab.core.fabric.description import FabricSpec
    from zcube_lab.core.fabric.lossless import feeders
    from zcube_lab.emulator.lab.classcounterproc import counted_ports

    fabric = build_fabric(FabricSpec.of("zcube", n=2))
    ports = counted_ports(fabric)
    assert ports == sorted(feeders(fabric)) and all(not p.startswith("h") for p in ports)
