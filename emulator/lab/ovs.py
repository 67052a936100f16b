"""Every call the lab makes to Open vSwitch's tools: `ovs-vsctl`, `ovs-ofctl`, `ovs-appctl`.

Thin adapters over `system.run` (argument lists, timeouts): list, find and delete bridges, dump
a bridge's flows, groups, port and group counters, check a bridge against the controller's
computed rules, and ask whether ovsdb and ovs-vswitchd answer. Parsing the tools' text is kept
in small pure functions beside them. Nothing else in the lab runs an `ovs-*` program.

OpenFlow commands speak 1.3 (`-O OpenFlow13`), the only version our controller and bridges use.
"""

from __future__ import annotations

import shutil

from controller.ofctl import dump_lines, line_differences
from controller.rules import SwitchRules
from emulator.lab.system import attempt, run

VSCTL = "ovs-vsctl"
OFCTL = "ovs-ofctl"
APPCTL = "ovs-appctl"
OPENFLOW13 = ("-O", "OpenFlow13")


def installed() -> bool:
    """Whether Open vSwitch's command-line tools are on PATH."""
    return shutil.which(VSCTL) is not None


def ofctl(*args: str, check: bool = True, timeout: float = 30) -> str:
    """`ovs-ofctl -O OpenFlow13 ARGS...`; its stdout."""
    return run([OFCTL, *OPENFLOW13, *args], check=check, timeout=timeout)


# ---- bridges --------------------------------------------------------------------------------


def list_bridges() -> list[str]:
    """Names of the bridges that exist now (none when ovsdb does not answer)."""
    return run([VSCTL, "--timeout=10", "list-br"], check=False).split()


def marked_bridges(key: str) -> dict[str, int]:
    """Bridges carrying `external_ids:<key>=<number>`, with that number (an owner's pid)."""
    out = run(
        [VSCTL, "--timeout=10", "--bare", "--columns=name,external_ids", "list", "Bridge"],
        check=False,
    )
    return parse_marks(out, key)


def parse_marks(text: str, key: str) -> dict[str, int]:
    """`ovs-vsctl --bare --columns=name,external_ids list Bridge` output -> {bridge: number} for
    the bridges whose external_ids hold `key`. Pure."""
    marks: dict[str, int] = {}
    for block in text.strip().split("\n\n"):
        lines = block.strip().splitlines()
        if len(lines) >= 2 and f"{key}=" in lines[1]:
            marks[lines[0].strip()] = int(lines[1].split(f"{key}=")[1].split()[0].strip('",}'))
    return marks


def delete_bridges(names: list[str]) -> list[str]:
    """Delete those of `names` that exist, in one transaction; returns the ones deleted."""
    if not names:
        return []
    existing = set(list_bridges())
    gone = [b for b in names if b in existing]
    if gone:
        argv = [VSCTL, "--timeout=20"]
        for b in gone:
            argv += ["--", "--if-exists", "del-br", b]
        run(argv, check=False)
    return gone


# ---- dumps and counters ---------------------------------------------------------------------


def dump_flows(bridge: str, check: bool = True, timeout: float = 30) -> str:
    """`--no-stats dump-flows BRIDGE`, as the tool prints it."""
    return ofctl("--no-stats", "dump-flows", bridge, check=check, timeout=timeout)


def flow_count(bridge: str) -> int:
    """Flow entries the bridge holds now (0 when it cannot be read)."""
    text = dump_flows(bridge, check=False)
    return sum(1 for line in text.splitlines() if "actions=" in line)


def dump_bridge(bridge: str, timeout_s: float = 10.0) -> tuple[list[str], list[str]]:
    """The (flows, groups) a bridge holds, sorted, as `ovs-ofctl -O OpenFlow13` prints them."""
    flows = dump_flows(bridge, timeout=timeout_s)
    groups = ofctl("dump-groups", bridge, timeout=timeout_s)
    return dump_lines(flows), dump_lines(groups)


def rule_differences(bridge: str, rules: SwitchRules) -> list[str]:
    """What differs between the bridge and `rules`: `-line` missing, `+line` unexpected.
    Empty when the bridge holds exactly the computed flows and groups."""
    flows, groups = dump_bridge(bridge)
    return line_differences(flows, groups, rules)


def dump_ports(bridge: str, port: int) -> str:
    """`dump-ports BRIDGE PORT`: one port's counters, as the tool prints them."""
    return ofctl("dump-ports", bridge, str(port))


def dump_group_stats(bridge: str) -> str:
    """`dump-group-stats BRIDGE`: every group's and bucket's counters."""
    return ofctl("dump-group-stats", bridge, timeout=10)


# ---- daemons --------------------------------------------------------------------------------


def db_status(timeout_s: float = 3) -> tuple[int | None, str]:
    """Whether ovsdb-server answers (`ovs-vsctl show`): (return code or None, output)."""
    return attempt([VSCTL, f"--timeout={timeout_s:g}", "show"])


def vswitchd_status(timeout_s: float = 3) -> tuple[int | None, str]:
    """Whether ovs-vswitchd answers (`ovs-appctl version`): (return code or None, output)."""
    return attempt([APPCTL, f"--timeout={timeout_s:g}", "version"])
