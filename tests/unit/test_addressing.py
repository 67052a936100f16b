"""The lab's one address plan: every address inside RFC 2544's 198.18.0.0/15, planes apart."""

from __future__ import annotations

import re
from collections.abc import Callable
from ipaddress import ip_address, ip_network
from pathlib import Path

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.addressing import (
    FABRIC_RANGE,
    LAB_RANGE,
    MANAGEMENT_RANGE,
    MGMT_ROOT_IP,
    WIRE_HERE,
    WIRE_PEER,
    WIRE_RANGE,
    fabric_address,
    fabric_networks,
    lab_networks,
    management_address,
    mgmt_root_address,
    plan_networks,
    plane_network,
    plane_rows,
    row_network,
)
from zcube_lab.core.fabric.builders import build_clos, build_roft, build_zcube
from zcube_lab.core.fabric.description import Fabric

REPO = Path(__file__).resolve().parents[2]
FABRICS = [
    build_zcube(n=4),
    build_zcube(n=8, m=2),
    build_roft(),
    build_roft(servers=8, gpus_per_server=8, servers_per_leaf=4),
    build_clos(),
    *(build_roft(planes=p) for p in (2, 3, 4, 8)),
]


def test_the_plan_is_inside_the_benchmarking_range_and_its_parts_apart() -> None:
    assert ip_network("198.18.0.0/15") == LAB_RANGE
    parts = [FABRIC_RANGE, MANAGEMENT_RANGE, WIRE_RANGE]
    assert all(p.subnet_of(LAB_RANGE) for p in parts)
    assert not any(a.overlaps(b) for i, a in enumerate(parts) for b in parts[i + 1 :])
    assert ip_address(MGMT_ROOT_IP) in MANAGEMENT_RANGE
    assert {ip_address(WIRE_HERE), ip_address(WIRE_PEER)} < set(WIRE_RANGE.hosts())
    # The wire is the machines' own network: the host check must not refuse it.
    assert not any(net.overlaps(WIRE_RANGE) for _label, net in plan_networks())


@pytest.mark.parametrize("planes", range(1, 9))
def test_planes_split_the_fabric_range_evenly_and_apart(planes: int) -> None:
    nets = [plane_network(k, planes) for k in range(planes)]
    assert all(n.subnet_of(FABRIC_RANGE) for n in nets)
    assert len({n.prefixlen for n in nets}) == 1
    assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])
    assert plane_rows(planes) * 256 == nets[0].num_addresses


def test_addresses_read_row_and_column() -> None:
    assert plane_network(0, 1) == ip_network("198.18.0.0/16")
    assert fabric_address(0, 1, 3, 1) == "198.18.3.2"  # ROFT/Clos server 3, rank 1
    assert fabric_address(1, 2, 3, 1) == "198.18.131.2"  # the second of two planes
    assert fabric_address(7, 8, 0, 0) == "198.18.224.1"
    assert row_network(1, 2, 3) == "198.18.131.0/24"
    with pytest.raises(ValueError):
        fabric_address(1, 2, 128, 0)  # past the plane's last row


@pytest.mark.parametrize("fabric", FABRICS, ids=lambda f: f.spec.to_json())
def test_every_fabric_address_is_in_its_plane_and_unique(fabric: Fabric) -> None:
    nets = [net for _label, net in fabric_networks(fabric, management=False)]
    ips = []
    for h in fabric.hosts:
        for i in h.interfaces:
            assert ip_address(i.ip) in nets[i.index], (h.name, i.index, i.ip)
            ips.append(i.ip)
    assert len(set(ips)) == len(ips)


def test_zcube_groups_are_two_subnets_with_a_24_per_segment_and_rail() -> None:
    f = build_zcube(n=4)
    assert [str(n) for _l, n in fabric_networks(f, management=False)] == [
        "198.18.0.0/17",
        "198.18.128.0/17",
    ]
    h6 = f.host("h6")  # segment 1, rail 2
    assert [i.ip for i in h6.interfaces] == ["198.18.1.3", "198.18.130.2"]
    segment_1 = {h.interfaces[0].ip for h in f.hosts if h.gid // 4 == 1}
    assert all(ip_address(ip) in ip_network("198.18.1.0/24") for ip in segment_1)
    rail_2 = {h.interfaces[1].ip for h in f.hosts if h.gid % 4 == 2}
    assert all(ip_address(ip) in ip_network("198.18.130.0/24") for ip in rail_2)


def test_management_addresses_and_the_root_namespaces() -> None:
    assert management_address(0) == "198.19.0.1"
    assert management_address(251) == "198.19.1.2"
    last = management_address(127 * 250 - 1)
    roots = [mgmt_root_address(k) for k in range(4)]
    assert roots == ["198.19.127.254", "198.19.127.253", "198.19.127.252", "198.19.127.251"]
    assert all(ip_address(a) in MANAGEMENT_RANGE for a in [last, *roots])
    assert last not in roots
    with pytest.raises(ConfigError) as err:
        management_address(127 * 250)
    assert err.value.field == "gpus"
    assert [label for label, _n in lab_networks(1, management=True)] == [
        "fabric",
        "management network",
    ]


@pytest.mark.parametrize(
    ("build", "field", "hint"),
    [
        (lambda: build_zcube(n=129), "n", "between 2 and 128"),
        (lambda: build_roft(servers=129, gpus_per_server=1, planes=2), "servers", "at most 128"),
        (lambda: build_roft(servers=33, gpus_per_server=1, planes=8), "servers", "198.18.0.0/19"),
    ],
)
def test_sizes_past_the_plan_are_refused_by_name(
    build: Callable[[], Fabric], field: str, hint: str
) -> None:
    with pytest.raises(ConfigError) as err:
        build()
    assert err.value.field == field
    assert hint in str(err.value)


def test_the_largest_sizes_that_fit_build() -> None:
    f = build_roft(servers=32, gpus_per_server=1, spines=1, planes=8, servers_per_leaf=32)
    assert f.host("h31").interfaces[7].ip == "198.18.255.1"
    assert build_zcube(n=128, gpus_per_server=8).host("h16383").interfaces[1].ip == (
        "198.18.255.128"
    )


def test_peer_script_wire_is_the_plans() -> None:
    text = (REPO / "scripts" / "peer.sh").read_text()
    assert re.search(r"^HERE_IP=(\S+)", text, re.M)[1] == WIRE_HERE  # type: ignore[index]
    assert re.search(r"^PEER_IP=(\S+)", text, re.M)[1] == WIRE_PEER  # type: ignore[index]
