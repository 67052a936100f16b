"""The fabric description: wiring, paths, reports and validation, with no root."""

from __future__ import annotations

import itertools

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_clos, build_fabric, build_roft, build_zcube
from zcube_lab.core.fabric.description import FabricSpec


@pytest.mark.parametrize("n", [4, 8])
def test_zcube_wiring_follows_the_gid_rule(n: int) -> None:
    f = build_zcube(n=n)
    assert len(f.hosts) == n * n
    assert sorted(s.name for s in f.switches) == sorted(
        [f"a{i}" for i in range(n)] + [f"b{i}" for i in range(n)]
    )
    for h in f.hosts:
        assert len(h.interfaces) == 2
        assert f.attachments[(h.name, 0)].switch == f"a{h.gid // n}"
        assert f.attachments[(h.name, 1)].switch == f"b{h.gid % n}"
    # K(n,n) between the groups, one link per pair by default, none inside a group.
    pairs = [
        (lk.node1, lk.node2) for lk in f.links if f.is_switch(lk.node1) and f.is_switch(lk.node2)
    ]
    assert len(pairs) == n * n
    assert {(a[0], b[0]) for a, b in pairs} == {("a", "b")}
    assert len(set(pairs)) == n * n
    # Radix 2n: n ports down, n across, every port used.
    assert set(f.ports_used().values()) == {2 * n}
    assert f.diameter() == 2


def test_zcube_parallel_links_multiply_cross_ports() -> None:
    f = build_zcube(n=4, m=2)
    assert f.switch_adjacency["a0"]["b3"] == ((11, 5), (12, 6))
    assert set(f.ports_used().values()) == {4 + 8}


def test_zcube_ports_run_at_half_the_nic_rate() -> None:
    f = build_zcube(n=4, nic_gbps=400)
    assert {lk.gbps for lk in f.links} == {200.0}
    # Switching capacity 2*N*B (docs/DOMAIN.md §2), ROFT's is 3*N*B.
    assert f.switching_capacity_gbps() == 2 * 16 * 400
    assert build_roft().switching_capacity_gbps() == 3 * 16 * 400


@pytest.mark.parametrize("n", [4, 8])
def test_zcube_path_counts(n: int) -> None:
    f = build_zcube(n=n)
    for src, dst in itertools.permutations(f.hosts, 2):
        paths = f.shortest_paths(src.name, dst.name)
        s1, r1 = divmod(src.gid, n)
        s2, r2 = divmod(dst.gid, n)
        if s1 == s2:
            assert [p.switches for p in paths] == [(f"a{s1}",)]
            assert (paths[0].src_interface, paths[0].dst_interface) == (0, 0)
        elif r1 == r2:
            assert [p.switches for p in paths] == [(f"b{r1}",)]
            assert (paths[0].src_interface, paths[0].dst_interface) == (1, 1)
        else:
            assert sorted(p.switches for p in paths) == sorted(
                [(f"a{s1}", f"b{r2}"), (f"b{r1}", f"a{s2}")]
            )
            by_port = {p.src_interface: p for p in paths}
            assert by_port[0].dst_interface == 1 and by_port[1].dst_interface == 0
            # Link-disjoint: the two paths share no switch, hence no link.
            assert not set(paths[0].switches) & set(paths[1].switches)


def test_zcube_host_routes_pick_the_path_by_destination_address() -> None:
    f = build_zcube(n=4)
    h0 = f.host("h0")
    routes = {r.prefix: r.interface for r in h0.routes}
    assert routes == {
        "198.18.0.0/24": 0,  # own segment, group A
        "198.18.128.0/24": 1,  # own rail, group B
        "198.18.0.0/17": 1,
        "198.18.128.0/17": 0,
    }
    assert [i.ip for i in f.host("h5").interfaces] == ["198.18.1.2", "198.18.129.2"]


def test_roft_paths_one_hop_in_rail_one_path_per_spine_across() -> None:
    f = build_roft(servers=4, gpus_per_server=4, spines=2)
    assert len(f.hosts) == 16
    assert sorted(s.name for s in f.switches) == [f"leaf{i}" for i in range(4)] + [
        "spine0",
        "spine1",
    ]
    for src, dst in itertools.permutations(f.hosts, 2):
        paths = f.shortest_paths(src.name, dst.name)
        if src.rank == dst.rank:
            assert [p.switches for p in paths] == [(f"leaf{src.rank}",)]
        else:
            assert sorted(p.switches for p in paths) == [
                (f"leaf{src.rank}", f"spine{k}", f"leaf{dst.rank}") for k in range(2)
            ]
    assert f.diameter() == 3
    # Rail r of every server sits on leaf r; 1:1 means as many uplinks as downlinks.
    for h in f.hosts:
        assert f.attachments[(h.name, 0)].switch == f"leaf{h.rank}"
    assert f.ports_used()["leaf0"] == 8


def test_roft_server_groups_make_more_leaves() -> None:
    f = build_roft(servers=4, gpus_per_server=2, spines=2, servers_per_leaf=2)
    assert sum(1 for s in f.switches if s.role == "leaf") == 4
    assert f.attachments[("h5", 0)].switch == "leaf3"  # server 2 is in group 1, rank 1


def test_clos_keeps_a_server_under_one_leaf() -> None:
    f = build_clos()
    for h in f.hosts:
        assert f.attachments[(h.name, 0)].switch == f"leaf{h.server // 2}"
    assert f.host_hops("h0", "h7") == 1
    assert f.host_hops("h0", "h8") == 3


def test_addresses_and_names_are_unique() -> None:
    many_leaves = build_roft(servers=8, gpus_per_server=8, servers_per_leaf=4, planes=8)
    for f in (build_zcube(n=8), build_roft(), build_clos(), build_roft(planes=8), many_leaves):
        ips = [i.ip for h in f.hosts for i in h.interfaces]
        macs = [i.mac for h in f.hosts for i in h.interfaces]
        assert len(set(ips)) == len(ips)
        assert len(set(macs)) == len(macs)
        assert len({s.dpid for s in f.switches}) == len(f.switches)
        # Mininet interface names must fit Linux's 15 characters.
        for lk in f.links:
            for node, port in ((lk.node1, lk.port1), (lk.node2, lk.port2)):
                assert len(f"{node}-eth{port}") <= 15


def test_one_plane_roft_is_the_plain_roft() -> None:
    assert build_roft(planes=1) == build_roft()
    f = build_roft(servers=4, gpus_per_server=2, servers_per_leaf=2, planes=1)
    assert "planes" not in dict(f.spec.params)
    assert f.spec.to_json() == (
        '{"kind": "roft", "params": {"gpus_per_server": 2, "nic_gbps": 400.0, '
        '"oversubscription": 1, "servers": 4, "servers_per_leaf": 2, "spines": 2}}'
    )
    assert [s.name for s in f.switches][:2] == ["leaf0", "leaf1"]
    assert f.switch("spine1").dpid == 0x20002
    assert f.host("h3").interfaces[0].ip == "198.18.1.2"


def test_multi_plane_roft_names_ids_and_rates() -> None:
    f = build_roft(planes=2, nic_gbps=400)
    assert dict(f.spec.params)["planes"] == 2
    assert FabricSpec.from_json(f.spec.to_json()) == f.spec
    assert build_fabric(f.spec) == f
    assert f.switch("p0leaf3").dpid == 0x10004  # plane 0 keeps the 1-plane ids
    assert f.switch("p1leaf3").dpid == 0x110004
    assert f.switch("p1spine0").dpid == 0x120001
    assert {lk.gbps for lk in f.links} == {200.0}
    assert f.nic_gbps == 400  # the NIC, all planes together
    assert f.summary()["switches_by_role"] == {"leaf": 8, "spine": 4}


def test_spec_round_trips_through_json() -> None:
    spec = FabricSpec.of("roft", servers=4, spines=2)
    assert FabricSpec.from_json(spec.to_json()) == spec
    assert build_fabric(spec).summary()["hosts"] == 16


@pytest.mark.parametrize(
    ("spec", "field", "hint"),
    [
        (FabricSpec.of("zcube", n=1), "n", "between 2"),
        (FabricSpec.of("zcube", n=6, gpus_per_server=4), "gpus_per_server", "[1, 2, 3, 6]"),
        (FabricSpec.of("zcube", n="4"), "n", "whole number"),
        (FabricSpec.of("roft", spines=3), "spines", "[1, 2, 4]"),
        (FabricSpec.of("roft", oversubscription=3), "oversubscription", "[4, 2, 1]"),
        (FabricSpec.of("roft", servers=6, servers_per_leaf=4), "servers_per_leaf", "[1, 2, 3, 6]"),
        (FabricSpec.of("clos", nic_gbps=-1), "nic_gbps", "positive"),
        (FabricSpec.of("clos", nic_gbps=float("nan")), "nic_gbps", "positive"),
        (FabricSpec.of("roft", oversubscription=float("nan")), "oversubscription", "number"),
        (FabricSpec.of("roft", n=4), "n", "not a roft parameter"),
        (FabricSpec.of("roft", planes=0), "planes", "between 1 and 8"),
        (FabricSpec.of("roft", planes=9), "planes", "between 1 and 8"),
        (FabricSpec.of("roft", planes=2.0), "planes", "whole number"),
        (
            FabricSpec.of(
                "roft", servers=128, gpus_per_server=8, spines=1, servers_per_leaf=1, planes=2
            ),
            "planes",
            "p0spine0-eth1000 longer than Linux's 15",
        ),
        (FabricSpec.of("clos", planes=2), "planes", "not a clos parameter"),
        (FabricSpec.of("zcube", planes=2), "planes", "not a zcube parameter"),
        (FabricSpec.of("torus"), "fabric", "['clos', 'file', 'roft', 'zcube']"),
    ],
)
def test_invalid_sizes_name_the_parameter(spec: FabricSpec, field: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_fabric(spec)
    assert info.value.field == field
    assert hint in str(info.value)


def test_planes_option_maps_to_roft_and_is_refused_elsewhere() -> None:
    import argparse

    from zcube_lab.cli.fabric_options import add_fabric_arguments, spec_from_args

    parser = argparse.ArgumentParser()
    add_fabric_arguments(parser)
    spec = spec_from_args(parser.parse_args(["--fabric", "roft", "--planes", "4"]))
    assert dict(spec.params) == {"planes": 4, "servers": 8, "gpus_per_server": 2,
                                 "servers_per_leaf": 2}  # fmt: skip
    assert len(build_fabric(spec).host("h0").interfaces) == 4
    unset = spec_from_args(parser.parse_args(["--fabric", "roft"]))
    assert build_fabric(unset) == build_roft(servers=8, gpus_per_server=2, servers_per_leaf=2)
    with pytest.raises(ConfigError) as info:
        build_fabric(spec_from_args(parser.parse_args(["--fabric", "zcube", "--planes", "2"])))
    assert info.value.field == "planes"
