"""Check from outside that a live Open vSwitch bridge holds exactly a switch's computed rules.

The adapter around `ovs-ofctl` (a subprocess with an argument list, nothing else): it dumps a
bridge's flows and groups and compares them with `controller.ofctl`'s rendering of the specs.
"""

from __future__ import annotations

import subprocess

from controller.ofctl import dump_lines, flow_lines, group_lines
from controller.rules import SwitchRules


def dump_bridge(bridge: str, timeout_s: float = 10.0) -> tuple[list[str], list[str]]:
    """The (flows, groups) a bridge holds, sorted, as `ovs-ofctl -O OpenFlow13` prints them."""

    def ofctl(*args: str) -> str:
        return subprocess.run(
            ["ovs-ofctl", "-O", "OpenFlow13", *args, bridge],
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        ).stdout

    return dump_lines(ofctl("--no-stats", "dump-flows")), dump_lines(ofctl("dump-groups"))


def rule_differences(bridge: str, rules: SwitchRules) -> list[str]:
    """What differs between the bridge and `rules`: `-line` missing, `+line` unexpected.
    Empty when the bridge holds exactly the computed flows and groups."""
    flows, groups = dump_bridge(bridge)
    out = []
    # Sets suffice: a switch cannot hold two flows with one match and priority, nor two groups
    # with one id.
    for have, want in ((flows, flow_lines(rules)), (groups, group_lines(rules))):
        out += [f"-{line}" for line in sorted(set(want) - set(have))]
        out += [f"+{line}" for line in sorted(set(have) - set(want))]
    return out
