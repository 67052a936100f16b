"""Rule specs rendered the way `ovs-ofctl -O OpenFlow13` prints them, to check a live switch.

`flow_lines` matches `ovs-ofctl -O OpenFlow13 --no-stats dump-flows BRIDGE` line for line and
`group_lines` matches `dump-groups BRIDGE` without its header, once leading spaces are stripped
and both sides sorted (the switch lists flows of equal priority in no fixed order);
`line_differences` compares such dumps with the specs. Pure: running `ovs-ofctl` is
`zcube_lab.emulator.lab.ovsbridges`'s job.
"""

from __future__ import annotations

from zcube_lab.controller.rules import (
    COOKIE,
    ETH_TYPE_ARP,
    ETH_TYPE_IPV4,
    ETH_TYPE_IPV6,
    Action,
    DecTtl,
    FlowSpec,
    GroupSpec,
    Output,
    SwitchRules,
    ToGroup,
)

# ovs-ofctl's shorthand for the ethertypes we match on.
_ETH_TYPE_WORDS = {ETH_TYPE_IPV4: "ip", ETH_TYPE_ARP: "arp", ETH_TYPE_IPV6: "ipv6"}
_GROUP_TYPE_WORDS = {"select": "select", "indirect": "indirect", "ff": "fast_failover"}


def _action_text(action: Action) -> str:
    if isinstance(action, DecTtl):
        return "dec_ttl"
    if isinstance(action, Output):
        return f"output:{action.port}"
    if isinstance(action, ToGroup):
        return f"group:{action.group_id}"
    raise TypeError(f"no ovs-ofctl text for {action!r}")


def flow_line(flow: FlowSpec, cookie: int = COOKIE) -> str:
    """One flow as `--no-stats dump-flows` prints it (without the leading space)."""
    fields = flow.match_fields
    parts = [f"priority={flow.priority}"]
    eth_type = fields.pop("eth_type", None)
    if eth_type is not None:
        parts.append(_ETH_TYPE_WORDS.get(int(eth_type), f"dl_type=0x{int(eth_type):04x}"))
    if "in_port" in fields:
        parts.append(f"in_port={fields.pop('in_port')}")
    if "ipv4_dst" in fields:
        parts.append(f"nw_dst={fields.pop('ipv4_dst')}")
    if fields:
        raise ValueError(f"no ovs-ofctl text for match fields {sorted(fields)}")
    actions = ",".join(_action_text(a) for a in flow.actions) or "drop"
    return f"cookie=0x{cookie:x}, {','.join(parts)} actions={actions}"


def group_line(group: GroupSpec) -> str:
    """One group as `dump-groups` prints it (without the leading space)."""
    buckets = []
    for b in group.buckets:
        words = []
        if b.weight != 1:
            words.append(f"weight:{b.weight}")
        if b.watch_port is not None:
            words.append(f"watch_port:{b.watch_port}")
        words.append(f"actions=output:{b.port}")
        buckets.append("bucket=" + ",".join(words))
    return f"group_id={group.group_id},type={_GROUP_TYPE_WORDS[group.type]}," + ",".join(buckets)


def flow_lines(rules: SwitchRules) -> list[str]:
    """All flows of a switch, sorted, as `--no-stats dump-flows` prints them."""
    return sorted(flow_line(f) for f in rules.flows)


def group_lines(rules: SwitchRules) -> list[str]:
    """All groups of a switch, sorted, as `dump-groups` prints them."""
    return sorted(group_line(g) for g in rules.groups)


def dump_lines(text: str) -> list[str]:
    """The entries of an `ovs-ofctl` dump, sorted, without headers (`OFPST_... reply`)."""
    return sorted(
        line.strip() for line in text.splitlines() if line.strip() and " reply " not in line
    )


def line_differences(flows: list[str], groups: list[str], rules: SwitchRules) -> list[str]:
    """What differs between dumped `flows` and `groups` (as `dump_lines` returns them) and
    `rules`: `-line` missing, `+line` unexpected. Empty when they match exactly."""
    out = []
    # Sets suffice: a switch cannot hold two flows with one match and priority, nor two groups
    # with one id.
    for have, want in ((flows, flow_lines(rules)), (groups, group_lines(rules))):
        out += [f"-{line}" for line in sorted(set(want) - set(have))]
        out += [f"+{line}" for line in sorted(set(have) - set(want))]
    return out
