"""The lossless agent pauses every port whose traffic can wait at a congested switch port,
including a sender bound to one of its ports' addresses (ZCube's link-disjoint lanes), which
the hosts' own routes never pick (issue 45: the switch-queue losses under PFC)."""

from __future__ import annotations

import pytest

from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import Fabric, FabricSpec
from zcube_lab.core.fabric.lossless import feeders
from zcube_lab.core.fabric.scaledown import scaled_sizes
from zcube_lab.emulator.lab.lossless import bound_feeders

ZCUBE16 = build_fabric(FabricSpec.of("zcube", **scaled_sizes("zcube", 16)))


def first_egress(fabric: Fabric, src_ip: str, dst_ip: str) -> list[str]:
    """The switch ports a packet from `src_ip` to `dst_ip` can leave its first switch by."""
    src, dst = fabric.interfaces_by_ip[src_ip], fabric.interfaces_by_ip[dst_ip]
    first = fabric.attachments[(src.host, src.index)].switch
    last = fabric.attachments[(dst.host, dst.index)]
    if first == last.switch:
        return [f"{last.switch}-eth{last.port}"]
    to_dst = fabric.switch_distances[last.switch]
    return [
        f"{a}-eth{pa}"
        for lk in fabric.links
        for a, pa, b in ((lk.node1, lk.port1, lk.node2), (lk.node2, lk.port2, lk.node1))
        if a == first and b in to_dst and to_dst[b] == to_dst[first] - 1
    ]


def test_a_bound_lane_into_its_own_b_switch_feeds_the_a_switchs_uplink():
    # h9 (on a2 and b1) sends to h5's B address (198.18.129.2, on b1) bound to its A port, as
    # a KV pull or a replay's lane does: through a2's port up to b1 (a2-eth6)
    assert first_egress(ZCUBE16, "198.18.2.2", "198.18.129.2") == ["a2-eth6"]
    assert "h9-eth0" not in feeders(ZCUBE16)["a2-eth6"]  # the hosts' routes: h9 goes via b1
    assert bound_feeders(ZCUBE16)["a2-eth6"] == {"h8-eth0", "h9-eth0", "h10-eth0", "h11-eth0"}


def test_every_lane_a_zcube_sender_binds_is_paused_by_its_first_switch_port():
    from zcube_lab.emulator.replay.driver import lanes

    feeds = bound_feeders(ZCUBE16)
    missed = [
        (src.name, src_ip, dst_ip, port)
        for src in ZCUBE16.hosts
        for dst in ZCUBE16.hosts
        if src is not dst
        for src_ip, dst_ip in lanes(ZCUBE16, src.name, dst.name)
        for port in first_egress(ZCUBE16, src_ip, dst_ip)
        if f"{src.name}-eth{ZCUBE16.interfaces_by_ip[src_ip].index}" not in feeds[port]
    ]
    assert missed == []


def test_the_agents_plan_pauses_the_bound_sender():
    from zcube_lab.core.fabric.linkplan import port_shapes
    from zcube_lab.core.fabric.queues import QueueModel
    from zcube_lab.core.fabric.scale import Scale
    from zcube_lab.emulator.lab.lossless import agent_plan

    zcube = build_fabric(FabricSpec.of("zcube", n=2))
    shapes = port_shapes(zcube, Scale(), 9000, QueueModel(packets=8), lossless=True)
    plan = agent_plan(zcube, shapes, {h.name: 100 + h.gid for h in zcube.hosts}, 9000)
    # a0's port up to b0 carries h1's unbound traffic and h0's bound to its A port (h0 reaches
    # its own B switch b0's addresses directly only when unbound)
    assert plan.feeds["a0-eth3"] == ("h0-eth0", "h1-eth0")


@pytest.mark.parametrize("kind", ["roft", "clos"])
def test_fabrics_without_a_source_map_keep_their_feeders(kind: str):
    fabric = build_fabric(FabricSpec.of(kind, **scaled_sizes(kind, 16)))
    assert bound_feeders(fabric) == feeders(fabric)
