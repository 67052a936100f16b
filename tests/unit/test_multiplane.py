"""Multi-plane ROFT (`roft --planes P`): wiring, addressing, host routes and controller rules.

Each GPU's NIC splits into P ports, port k into plane k, a leaf-spine fabric of its own; for
every host pair and every address, traffic must stay in the address's plane and arrive."""

from __future__ import annotations

import itertools

import pytest

from zcube_lab.controller.flowtable import FabricTable
from zcube_lab.controller.rules import ROUTING_POLICIES, compute_rules
from zcube_lab.core.fabric.addressing import fabric_address, plane_network
from zcube_lab.core.fabric.builders import build_roft
from zcube_lab.core.fabric.description import Fabric, Host
from zcube_lab.core.fabric.hostplan import egress_interface, ip_batch, kv_source_map

FABRICS = [
    build_roft(planes=2),
    build_roft(planes=4),
    build_roft(servers=4, gpus_per_server=2, spines=2, servers_per_leaf=2, planes=2),
]


def plane_of(switch: str) -> int:
    """Plane k's switches are named `p<k>...`."""
    assert switch.startswith("p"), switch
    return int(switch[1])


def planes(fabric: Fabric) -> int:
    return dict(fabric.spec.params)["planes"]


@pytest.mark.parametrize("fabric", FABRICS)
def test_each_plane_is_a_whole_disconnected_roft(fabric: Fabric) -> None:
    p = planes(fabric)
    one = build_roft(**{k: v for k, v in fabric.spec.params if k != "planes"})
    assert len(fabric.switches) == p * len(one.switches)
    assert len(fabric.links) == p * len(one.links)
    # Plane k is the 1-plane fabric with `p<k>` names, its host port k and NIC/P rates.
    for k in range(p):

        def rename(node: str, port: int, k: int = k) -> tuple[str, int]:
            return (node, k) if node.startswith("h") else (f"p{k}{node}", port)

        expected = {
            (*rename(lk.node1, lk.port1), *rename(lk.node2, lk.port2), lk.gbps / p)
            for lk in one.links
        }
        got = {
            (lk.node1, lk.port1, lk.node2, lk.port2, lk.gbps)
            for lk in fabric.links
            if plane_of(lk.node2) == k
        }
        assert got == expected
    # No switch reaches a switch of another plane.
    for src, dists in fabric.switch_distances.items():
        assert {plane_of(dst) for dst in dists} == {plane_of(src)}
    # The planes together carry what one plane of full-rate ports would.
    assert fabric.switching_capacity_gbps() == one.switching_capacity_gbps()
    assert fabric.diameter() == one.diameter()


@pytest.mark.parametrize("fabric", FABRICS)
def test_port_k_has_a_plane_k_address_and_route(fabric: Fabric) -> None:
    p = planes(fabric)
    for h in fabric.hosts:
        assert [i.name for i in h.interfaces] == [f"{h.name}-eth{k}" for k in range(p)]
        assert [i.ip for i in h.interfaces] == [
            fabric_address(k, p, h.server, h.rank) for k in range(p)
        ]
        assert {(r.prefix, r.interface) for r in h.routes} == {
            (str(plane_network(k, p)), k) for k in range(p)
        }
        for k in range(p):
            assert plane_of(fabric.attachments[(h.name, k)].switch) == k
    ips = [i.ip for h in fabric.hosts for i in h.interfaces]
    macs = [i.mac for h in fabric.hosts for i in h.interfaces]
    assert len(set(ips)) == len(ips) and len(set(macs)) == len(macs)
    assert len({s.dpid for s in fabric.switches}) == len(fabric.switches)


@pytest.mark.parametrize("fabric", FABRICS)
def test_every_address_is_reached_over_its_own_plane(fabric: Fabric) -> None:
    for src, dst in itertools.permutations(fabric.hosts, 2):
        for di in dst.interfaces:
            out = egress_interface(src, di.ip)
            assert out == di.index  # plane k's address leaves through port k
            a = fabric.attachments[(src.name, out)].switch
            b = fabric.attachments[(dst.name, di.index)].switch
            assert plane_of(a) == plane_of(b) == di.index
            assert b in fabric.switch_distances[a]
        # Shortest paths: one per plane per spine (or one per plane in the same rail).
        paths = fabric.shortest_paths(src.name, dst.name)
        assert {p.src_interface for p in paths} == set(range(planes(fabric)))
        for path in paths:
            assert path.src_interface == path.dst_interface
            assert {plane_of(s) for s in path.switches} == {path.src_interface}


def test_host_config_binds_each_port_to_its_plane() -> None:
    f = build_roft(planes=4)
    h0 = f.host("h0")
    lines = ip_batch(f, h0, mtu=1500)
    for k, (ip, plane) in enumerate(
        [
            ("198.18.0.1", "198.18.0.0/18"),
            ("198.18.64.1", "198.18.64.0/18"),
            ("198.18.128.1", "198.18.128.0/18"),
            ("198.18.192.1", "198.18.192.0/18"),
        ]
    ):
        assert f"addr add {ip}/32 dev h0-eth{k}" in lines
        assert f"route replace {plane} dev h0-eth{k} src {ip}" in lines
        table = 100 + k
        assert f"rule add from {ip} table {table} priority {table}" in lines
    # Static ARP for every other host's 4 addresses, on each of the 4 ports.
    assert len([ln for ln in lines if ln.startswith("neigh")]) == 15 * 4 * 4
    # The routes already keep each KV pull in its plane: no source map needed.
    assert kv_source_map(f, h0) == ()


@pytest.mark.parametrize("policy", ROUTING_POLICIES)
@pytest.mark.parametrize("fabric", FABRICS)
def test_controller_delivers_every_address_within_its_plane(fabric: Fabric, policy: str) -> None:
    rules = compute_rules(fabric, policy)
    table = FabricTable(fabric, rules)
    for src, dst in itertools.permutations(fabric.hosts, 2):
        for di in dst.interfaces:
            trace = table.send(src.name, di.ip)
            assert trace.receivers == {(dst.name, di.index)}, (src.name, di.ip)
            assert not trace.dropped and not trace.looped, (src.name, di.ip)
            for path in trace.paths:
                assert {plane_of(s) for s in path} == {di.index}
                expected = 1 if src.rail == dst.rail and _same_leaf(src, dst, fabric) else 3
                assert len(path) == expected
    # A switch holds flows only for its own plane's addresses (the others are unreachable).
    for r in rules.values():
        routed = {f.match_fields.get("ipv4_dst") for f in r.flows} - {None}
        assert len(routed) == len(fabric.hosts)
        assert {fabric.interfaces_by_ip[str(ip)].index for ip in routed} == {plane_of(r.name)}


def _same_leaf(src: Host, dst: Host, fabric: Fabric) -> bool:
    return fabric.attachments[(src.name, 0)].switch == fabric.attachments[(dst.name, 0)].switch


def test_ecmp_spreads_over_the_spines_of_the_plane() -> None:
    f = build_roft(planes=2, spines=2)
    table = FabricTable(f, compute_rules(f, "ecmp"))
    trace = table.send("h0", f.host("h5").interfaces[1].ip)
    assert trace.paths == {("p1leaf0", "p1spine0", "p1leaf1"), ("p1leaf0", "p1spine1", "p1leaf1")}
