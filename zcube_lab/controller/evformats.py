"""The switch rules each EV format costs: UDP-port EVs (today's) against SRv6 uSID EVs.

`ev_rule_counts(fabric, evs)` counts, for one fabric, the rules that make EVs name their paths:
- `udp_port`: the masked `udp_src` rules `compute_rules(..., ev_rules=True)` installs (per
  switch, per destination address, per value of the source-port field its distance reads);
- `sid`: one rule per SID (`zcube_lab.core.fabric.srv6.sid_rules`: per linked switch port,
  whatever the number of destinations or EVs);
- `exact_per_ev`: one exact rule per EV at every switch it crosses, for every source host and
  destination address: what a switch that cannot read the path from the packet would need;
and the longest segment list any EV of the fabric needs (uSIDs, host SID included), which must
fit the format profile (MRC's example: 4). Pure: computed from the fabric alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from zcube_lab.controller.rules import PRIORITY_EV, compute_rules
from zcube_lab.core.fabric.description import Fabric
from zcube_lab.core.fabric.evpaths import ev_ports
from zcube_lab.core.fabric.srv6 import exact_ev_rules, segment_list, sid_plan, sid_rules


@dataclass(frozen=True)
class EvRuleCounts:
    """Rules the EV formats need on one fabric (totals over its switches, and the most any one
    switch holds), with `evs` EVs per destination address."""

    evs: int
    udp_port: int
    udp_port_max_switch: int
    sid: int
    sid_max_switch: int
    exact_per_ev: int
    longest_segment_list: int


def ev_rule_counts(fabric: Fabric, evs: int = 16) -> EvRuleCounts:
    """Rule counts of UDP-port EVs, SID rules and exact per-EV rules on `fabric`."""
    rules = compute_rules(fabric, "ecmp", ev_rules=True)
    per_switch = {
        r.name: sum(1 for f in r.flows if f.priority == PRIORITY_EV) for r in rules.values()
    }
    plan = sid_plan(fabric)
    sids: dict[str, int] = {}
    for rule in sid_rules(fabric, plan):
        sids[rule.switch] = sids.get(rule.switch, 0) + 1
    ports = ev_ports(evs)
    longest = max(
        (
            len(segment_list(fabric, plan, h.name, dst.ip, port))
            for h in fabric.hosts
            for dst in fabric.interfaces_by_ip.values()
            if dst.host != h.name
            for port in ports
        ),
        default=0,
    )
    return EvRuleCounts(
        evs=evs,
        udp_port=sum(per_switch.values()),
        udp_port_max_switch=max(per_switch.values(), default=0),
        sid=sum(sids.values()),
        sid_max_switch=max(sids.values(), default=0),
        exact_per_ev=exact_ev_rules(fabric, ports),
        longest_segment_list=longest,
    )
