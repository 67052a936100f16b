"""Rule specs turned into OpenFlow 1.3 messages for one datapath: the only place that does so.

Each function takes the datapath (for its `ofproto` constants and `ofproto_parser` classes) and
plain specs from `zcube_lab.controller.rules`, and returns unsent messages; the app sends them.
Nothing here touches a socket, so tests pass a stand-in datapath and serialise the messages.
"""

from __future__ import annotations

from typing import Any

from zcube_lab.controller.rules import (
    COOKIE,
    Action,
    DecTtl,
    FlowSpec,
    GroupSpec,
    Output,
    RuleDiff,
    SwitchRules,
    ToGroup,
)

# The cookie mask that selects exactly our flows in deletes and statistics requests.
COOKIE_MASK = 0xFFFFFFFFFFFFFFFF
# Open vSwitch's group-mod command for OpenFlow 1.1-1.4 that adds a group or, when its id
# exists, replaces its type and buckets (`ovs-ofctl mod-group --may-create`).
OFPGC_ADD_OR_MOD = 0x8000


def _group_type(ofp: Any, name: str) -> int:
    return {"select": ofp.OFPGT_SELECT, "indirect": ofp.OFPGT_INDIRECT, "ff": ofp.OFPGT_FF}[name]


def _actions(parser: Any, actions: tuple[Action, ...]) -> list[Any]:
    out = []
    for a in actions:
        if isinstance(a, DecTtl):
            out.append(parser.OFPActionDecNwTtl())
        elif isinstance(a, Output):
            out.append(parser.OFPActionOutput(a.port))
        elif isinstance(a, ToGroup):
            out.append(parser.OFPActionGroup(a.group_id))
        else:
            raise TypeError(f"no OpenFlow action for {a!r}")
    return out


def flow_mod(datapath: Any, flow: FlowSpec) -> Any:
    """An OFPFC_ADD for one flow spec in table 0 (it replaces a flow of equal priority and
    match); no actions means drop."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    actions = _actions(parser, flow.actions)
    # An empty instruction list is OpenFlow's drop.
    instructions = (
        [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)] if actions else []
    )
    return parser.OFPFlowMod(
        datapath,
        cookie=COOKIE,
        table_id=0,
        command=ofp.OFPFC_ADD,
        priority=flow.priority,
        match=parser.OFPMatch(**flow.match_fields),
        instructions=instructions,
    )


def flow_delete_strict(datapath: Any, flow: FlowSpec) -> Any:
    """An OFPFC_DELETE_STRICT removing our flow of equal priority and match from table 0."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPFlowMod(
        datapath,
        cookie=COOKIE,
        cookie_mask=COOKIE_MASK,
        table_id=0,
        command=ofp.OFPFC_DELETE_STRICT,
        priority=flow.priority,
        out_port=ofp.OFPP_ANY,
        out_group=ofp.OFPG_ANY,
        match=parser.OFPMatch(**flow.match_fields),
    )


def group_mod(datapath: Any, group: GroupSpec, modify: bool | None = False) -> Any:
    """An OFPGC_ADD for one group spec, or (`modify`) an OFPGC_MODIFY replacing the type and
    buckets of the group with its id, or (`modify=None`) OVS's add-or-modify."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    buckets = [
        parser.OFPBucket(
            weight=b.weight if group.type == "select" else 0,
            watch_port=ofp.OFPP_ANY if b.watch_port is None else b.watch_port,
            watch_group=ofp.OFPG_ANY,
            actions=[parser.OFPActionOutput(b.port)],
        )
        for b in group.buckets
    ]
    return parser.OFPGroupMod(
        datapath,
        command=OFPGC_ADD_OR_MOD
        if modify is None
        else (ofp.OFPGC_MODIFY if modify else ofp.OFPGC_ADD),
        type_=_group_type(ofp, group.type),
        group_id=group.group_id,
        buckets=buckets,
    )


def group_delete(datapath: Any, group_id: int) -> Any:
    """An OFPGC_DELETE for one group id."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPGroupMod(datapath, command=ofp.OFPGC_DELETE, group_id=group_id)


def install_messages(datapath: Any, rules: SwitchRules) -> list[Any]:
    """Everything a connecting switch needs, without clearing what it holds: groups added or
    replaced in place (add-or-modify), then flows added (an add replaces the flow of equal
    priority and match, so a flow that already forwards keeps forwarding). A switch that
    reconnects to a restarted controller therefore never loses a working route. The caller
    ends with a barrier to learn when the switch has applied them."""
    return [
        *(group_mod(datapath, g, modify=None) for g in rules.groups),
        *(flow_mod(datapath, f) for f in rules.flows),
    ]


def flow_stats_request(datapath: Any) -> Any:
    """Ask for every flow of ours in table 0 (to find the ones the rules no longer hold)."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    return parser.OFPFlowStatsRequest(
        datapath, 0, 0, ofp.OFPP_ANY, ofp.OFPG_ANY, COOKIE, COOKIE_MASK, parser.OFPMatch()
    )


def stale_flows(entries: Any, rules: SwitchRules) -> list[FlowSpec]:
    """The flows of a flow-stats reply (our cookie) that `rules` do not hold, by priority and
    match (what an add replaces and a strict delete removes), as specs to delete."""
    wanted = {(f.priority, tuple(sorted(f.match_fields.items()))) for f in rules.flows}
    out = []
    for e in entries:
        if e.table_id != 0 or e.cookie != COOKIE:
            continue
        key = (e.priority, tuple(sorted(dict(e.match.items()).items())))
        if key not in wanted:
            out.append(FlowSpec(e.priority, key[1], ()))
    return out


def diff_messages(datapath: Any, diff: RuleDiff) -> list[Any]:
    """A `RuleDiff` as messages in its order: add groups, modify groups, add (or replace)
    flows, delete flows, delete groups. The caller ends with a barrier."""
    return [
        *(group_mod(datapath, g) for g in diff.groups_added),
        *(group_mod(datapath, g, modify=True) for g in diff.groups_modified),
        *(flow_mod(datapath, f) for f in diff.flows_added),
        *(flow_delete_strict(datapath, f) for f in diff.flows_deleted),
        *(group_delete(datapath, g.group_id) for g in diff.groups_deleted),
    ]


def stats_requests(datapath: Any, with_groups: bool) -> list[Any]:
    """One polling round: port counters, our flow count, and group bucket counters."""
    ofp, parser = datapath.ofproto, datapath.ofproto_parser
    requests = [
        parser.OFPPortStatsRequest(datapath, 0, ofp.OFPP_ANY),
        parser.OFPAggregateStatsRequest(
            datapath,
            0,
            ofp.OFPTT_ALL,
            ofp.OFPP_ANY,
            ofp.OFPG_ANY,
            COOKIE,
            COOKIE_MASK,
            parser.OFPMatch(),
        ),
    ]
    if with_groups:
        requests.append(parser.OFPGroupStatsRequest(datapath, 0, ofp.OFPG_ALL))
    return requests
