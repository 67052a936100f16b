"""Open vSwitch's bridges and what they hold: every `ovs-ofctl` call and the lab's bridge-level
`ovs-vsctl` calls.

Thin adapters over `system.run` (argument lists, timeouts): list, find and delete bridges, dump
a bridge's flows, groups, port and group counters, check a bridge against the controller's
computed rules, and set the selection method of its select groups (a bench lever). Parsing the
tools' text is kept in small pure functions beside them. The daemons holding the bridges (the
system one and the lab's private instances) are `zcube_lab.emulator.lab.ovs`: every call below finds
the instance that holds its bridge (`ovs.instance_of`), and the bridge lists are the union over the
system instance and every private one. Names: a function named for an `ovs-ofctl` command
(`dump_flows`, `dump_ports`, ...) returns its text as the tool prints it.

OpenFlow commands speak 1.3 (`-O OpenFlow13`), the only version our controller and bridges use,
except where the selection method needs 1.5 (see below).
"""

from __future__ import annotations

import re

from zcube_lab.controller.ofctl import dump_lines, line_differences
from zcube_lab.controller.rules import SwitchRules
from zcube_lab.emulator.lab.ovs import (
    VSWITCHD,
    Instance,
    exited,
    instance_of,
    running_instances,
    vsctl_argv,
)
from zcube_lab.emulator.lab.system import run

OFCTL = "ovs-ofctl"
OPENFLOW13 = ("-O", "OpenFlow13")


def ofctl(*args: str, check: bool = True, timeout: float = 30) -> str:
    """`ovs-ofctl -O OpenFlow13 ARGS...`; its stdout."""
    return run([OFCTL, *OPENFLOW13, *args], check=check, timeout=timeout)


def bridge_target(bridge: str) -> str:
    """What `ovs-ofctl` must be given to reach `bridge`: its name for the system instance,
    its management socket for a private one."""
    inst = instance_of(bridge)
    return bridge if inst is None else f"unix:{inst.rundir / f'{bridge}.mgmt'}"


# ---- bridges --------------------------------------------------------------------------------


def _everywhere() -> list[Instance | None]:
    return [None, *running_instances()]


def _bridges_in(inst: Instance | None) -> list[str]:
    return run([*vsctl_argv(inst), "--timeout=10", "list-br"], check=False).split()


def list_bridges() -> list[str]:
    """Names of the bridges that exist now, in the system instance and every private one
    (none from an ovsdb that does not answer)."""
    return [b for inst in _everywhere() for b in _bridges_in(inst)]


def marked_bridges(key: str) -> dict[str, int]:
    """Bridges carrying `external_ids:<key>=<number>`, with that number (an owner's pid), in
    every instance."""
    marks: dict[str, int] = {}
    for inst in _everywhere():
        out = run(
            [
                *vsctl_argv(inst),
                "--timeout=10",
                "--bare",
                "--columns=name,external_ids",
                "list",
                "Bridge",
            ],
            check=False,
        )
        marks.update(parse_marks(out, key))
    return marks


def parse_marks(text: str, key: str) -> dict[str, int]:
    """`ovs-vsctl --bare --columns=name,external_ids list Bridge` output -> {bridge: number} for
    the bridges whose external_ids hold `key`. Pure."""
    marks: dict[str, int] = {}
    for block in text.strip().split("\n\n"):
        lines = block.strip().splitlines()
        if len(lines) >= 2 and f"{key}=" in lines[1]:
            marks[lines[0].strip()] = int(lines[1].split(f"{key}=")[1].split()[0].strip('",}'))
    return marks


def _vswitchd_alive(inst: Instance | None) -> bool:
    """Whether `inst`'s ovs-vswitchd runs (the system one is taken to)."""
    if inst is None:
        return True
    pid = inst.pids().get(VSWITCHD)
    return pid is not None and not exited(pid)  # a zombie nobody reaped is no vswitchd


def del_br_argv(inst: Instance | None, bridges: list[str], vswitchd_alive: bool) -> list[str]:
    """One `ovs-vsctl` transaction deleting `bridges`. Without a running ovs-vswitchd nothing
    would ever acknowledge the change, and ovs-vsctl would wait out its timeout: the database
    row is all there is to delete then (`--no-wait`)."""
    argv = [*vsctl_argv(inst), "--timeout=20"]
    if not vswitchd_alive:
        argv.append("--no-wait")
    for b in bridges:
        argv += ["--", "--if-exists", "del-br", b]
    return argv


def delete_bridges(names: list[str]) -> list[str]:
    """Delete those of `names` that exist, in one transaction; returns the ones deleted."""
    if not names:
        return []
    gone_all = []
    for inst in _everywhere():
        existing = set(_bridges_in(inst))
        gone = [b for b in names if b in existing]
        if gone:
            run(del_br_argv(inst, gone, _vswitchd_alive(inst)), check=False)
        gone_all += gone
    return gone_all


# ---- dumps and counters ---------------------------------------------------------------------


def dump_flows(bridge: str, check: bool = True, timeout: float = 30) -> str:
    """`--no-stats dump-flows BRIDGE`, as the tool prints it."""
    return ofctl("--no-stats", "dump-flows", bridge_target(bridge), check=check, timeout=timeout)


def flow_count(bridge: str) -> int:
    """Flow entries the bridge holds now (0 when it cannot be read)."""
    text = dump_flows(bridge, check=False)
    return sum(1 for line in text.splitlines() if "actions=" in line)


def dump_bridge(bridge: str, timeout_s: float = 10.0) -> tuple[list[str], list[str]]:
    """The (flows, groups) a bridge holds, sorted, as `ovs-ofctl -O OpenFlow13` prints them."""
    flows = dump_flows(bridge, timeout=timeout_s)
    groups = ofctl("dump-groups", bridge_target(bridge), timeout=timeout_s)
    return dump_lines(flows), dump_lines(groups)


def rule_differences(bridge: str, rules: SwitchRules) -> list[str]:
    """What differs between the bridge and `rules`: `-line` missing, `+line` unexpected.
    Empty when the bridge holds exactly the computed flows and groups."""
    flows, groups = dump_bridge(bridge)
    return line_differences(flows, groups, rules)


def dump_ports(bridge: str, port: int) -> str:
    """`dump-ports BRIDGE PORT`: one port's counters, as the tool prints them."""
    return ofctl("dump-ports", bridge_target(bridge), str(port))


def dump_group_stats(bridge: str) -> str:
    """`dump-group-stats BRIDGE`: every group's and bucket's counters."""
    return ofctl("dump-group-stats", bridge_target(bridge), timeout=10)


# ---- select groups' selection method (a bench lever, issue 20) ------------------------------
#
# A select group our controller sends (OpenFlow 1.3: no group properties) gets Open vSwitch's
# default selection method, dp_hash when the bucket weights allow: the datapath hashes the
# packet and recirculates, two datapath passes per ECMP hop. `selection_method=hash` with
# `fields(...)` hashes those fields in the slow path instead (no recirculation), but only an
# OpenFlow 1.5 group mod carries it (a Netronome extension property), so the bench sets it
# after the controller installed the groups: the bridge is allowed OpenFlow 1.5 as well and each
# select group is modified in place, buckets unchanged.

OPENFLOW15 = ("-O", "OpenFlow15")
_SELECTION = re.compile(r",(selection_method=[^,]*|selection_method_param=[^,]*|fields\([^)]*\))")


def hash_group_line(line: str, fields: str) -> str | None:
    """An OpenFlow 1.5 `dump-groups` line of a select group rewritten with
    `selection_method=hash,fields(FIELDS)`; None for any other line (pure)."""
    line = line.strip()
    if not line.startswith("group_id=") or ",type=select" not in line:
        return None
    bare = _SELECTION.sub("", line)
    return bare.replace(",type=select", f",type=select,selection_method=hash,fields({fields})", 1)


def allow_openflow15(bridge: str) -> None:
    """Let `bridge` speak OpenFlow 1.5 besides 1.3 (our controller still negotiates 1.3)."""
    inst = instance_of(bridge)
    run(
        [
            *vsctl_argv(inst),
            "--timeout=10",
            "set",
            "bridge",
            bridge,
            "protocols=OpenFlow13,OpenFlow15",
        ]
    )


def set_hash_selection(bridge: str, fields: str = "ip_src,ip_dst,tcp_src,tcp_dst") -> int:
    """Modify every select group of `bridge` to `selection_method=hash,fields(FIELDS)` (the
    bridge must allow OpenFlow 1.5: `allow_openflow15`); returns how many."""
    target = bridge_target(bridge)
    text = run([OFCTL, *OPENFLOW15, "dump-groups", target], timeout=10)
    count = 0
    for line in text.splitlines():
        new = hash_group_line(line, fields)
        if new is not None:
            run([OFCTL, *OPENFLOW15, "mod-group", target, new], timeout=10)
            count += 1
    return count


def group_selection_methods(bridge: str) -> list[str]:
    """The selection method of each select group of `bridge` as OpenFlow 1.5 dumps show it
    ('' when the dump names none)."""
    text = run([OFCTL, *OPENFLOW15, "dump-groups", bridge_target(bridge)], timeout=10)
    found = []
    for line in text.splitlines():
        if ",type=select" in line:
            m = re.search(r"selection_method=([^,]*)", line)
            found.append(m.group(1) if m else "")
    return found
