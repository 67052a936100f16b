"""What ovs-vswitchd handed to each switch port, from its OpenFlow counters (issue 45).

The userspace datapath sends a port's packets in batches (up to 32) through one packet
socket. When the port's queue refuses one (a full FIFO: the kernel counts it as the qdisc's
drop), the socket's send stops there and ovs-vswitchd drops the rest of the batch without
counting it anywhere: not the queue (it never saw them), not the interface's statistics, not a
coverage counter, not its log (it takes ENOBUFS for "try later"). So a switch queue that
overflows loses up to 31 more datagrams than it counts, and a replay used to report them as
lost where no counter saw.

What ovs-vswitchd *meant* to send to a port is counted, though: every packet matches one
OpenFlow rule, whose `n_packets` counts it, and a rule either outputs to one port or to a
select group whose buckets count the packets each took (the controller installs nothing
else, and sends no packet-outs). Packets forwarded to a port, less those its root qdisc took
(sent, plus what it still holds), less the lossless agent's own resume frames sent through it,
is what was lost between ovs-vswitchd and the port's queue: the counted drops and the uncounted
rest of their batches alike. `refused` gives it as one cumulative counter per port, so two
readings diff like every other counter. The rule counters are refreshed by ovs-vswitchd's
revalidators: ask `ovs-appctl revalidator/wait` before reading them.

Pure: the parsers take `ovs-ofctl -O OpenFlow13 --no-names` output as text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_N_PACKETS = re.compile(r"\bn_packets=(\d+)")
_ACTIONS = re.compile(r"\bactions=(.*)$")
_OUTPUT = re.compile(r"(?:^|,)output:(\d+)")
_GROUP = re.compile(r"(?:^|,)group:(\d+)")
_GROUP_ID = re.compile(r"\bgroup_id=(\d+)")
_BUCKET_STATS = re.compile(r"\bbucket(\d+):packet_count=(\d+)")


def flow_outputs(dump_flows: str) -> tuple[dict[int, int], dict[int, int]]:
    """From `ovs-ofctl dump-flows`: packets each port was sent by rules that output to it
    directly, and packets each group was handed (port or group number -> packets)."""
    ports: dict[int, int] = {}
    groups: dict[int, int] = {}
    for line in dump_flows.splitlines():
        n = _N_PACKETS.search(line)
        a = _ACTIONS.search(line)
        if n is None or a is None:
            continue
        packets = int(n.group(1))
        for p in _OUTPUT.findall(a.group(1)):
            ports[int(p)] = ports.get(int(p), 0) + packets
        for g in _GROUP.findall(a.group(1)):
            groups[int(g)] = groups.get(int(g), 0) + packets
    return ports, groups


def group_buckets(dump_groups: str) -> dict[int, list[int | None]]:
    """From `ovs-ofctl dump-groups`: each group's buckets in order, each the port it outputs to
    (None for a bucket that outputs to no one port)."""
    out: dict[int, list[int | None]] = {}
    for line in dump_groups.splitlines():
        g = _GROUP_ID.search(line)
        if g is None:
            continue
        buckets: list[int | None] = []
        for part in line.split("bucket=")[1:]:
            found = _OUTPUT.findall(part.split("actions=", 1)[-1])
            buckets.append(int(found[0]) if len(found) == 1 else None)
        out[int(g.group(1))] = buckets
    return out


def bucket_packets(dump_group_stats: str) -> dict[int, list[int]]:
    """From `ovs-ofctl dump-group-stats`: each group's packets per bucket, in bucket order."""
    out: dict[int, list[int]] = {}
    for line in dump_group_stats.splitlines():
        g = _GROUP_ID.search(line)
        if g is None:
            continue
        counts = {int(i): int(n) for i, n in _BUCKET_STATS.findall(line)}
        out[int(g.group(1))] = [counts[i] for i in sorted(counts)]
    return out


def forwarded(dump_flows: str, dump_groups: str, dump_group_stats: str) -> dict[int, int]:
    """Packets one bridge's rules sent to each of its ports (OpenFlow port number -> packets),
    through a direct output or a group's bucket. A group bucket that outputs to no single port
    is left out."""
    ports, _groups = flow_outputs(dump_flows)
    buckets = group_buckets(dump_groups)
    for group, counts in bucket_packets(dump_group_stats).items():
        for port, n in zip(buckets.get(group, []), counts, strict=False):
            if port is not None:
                ports[port] = ports.get(port, 0) + n
    return ports


def refused(
    forwarded_packets: Mapping[str, float],
    qdisc_packets: Mapping[str, float],
    backlog_packets: Mapping[str, float],
    kicks: Mapping[str, float],
) -> dict[str, float]:
    """Per port (interface name): packets ovs-vswitchd forwarded to it, less those its root
    qdisc sent or still holds, less the lossless agent's resume frames sent through it (which the
    qdisc counts and no rule does). Cumulative: its growth between two readings is what the
    port lost between ovs-vswitchd and its queue (the queue's counted drops and the uncounted
    rest of each refused batch). Only ports with all three counters."""
    return {
        port: float(fwd)
        - (float(qdisc_packets[port]) - float(kicks.get(port, 0)))
        - float(backlog_packets[port])
        for port, fwd in sorted(forwarded_packets.items())
        if port in qdisc_packets and port in backlog_packets
    }
