"""The structure table against hand-counted answers and against every pair of small fabrics."""

from __future__ import annotations

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_roft, build_zcube
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.fullsize import (
    StructureComparison,
    compare_structure,
    full_size_layout,
    full_size_spec,
    structure_rows,
)
from zcube_lab.core.fabric.placement import LayoutSpec
from zcube_lab.core.fabric.structure import _Graph, fabric_structure
from zcube_lab.emulator.results.structure.structuretable import structure_html, structure_text


def _by_shared(stats):
    return {c.shared: (c.hops, c.disjoint_paths, c.pairs) for c in stats.classes}


def test_zcube_n16_hand_count():
    # Of a GPU's 255 partners: 15 on its A switch, 15 on its B, 225 two hops over 2 paths.
    s = fabric_structure(build_zcube(16, gpus_per_server=8))
    got = _by_shared(s.pair_set("all"))
    assert got == {("A",): (1, 1, 256 * 15), ("B",): (1, 1, 256 * 15), (): (2, 2, 256 * 225)}
    assert s.servers_per_group == 2 and s.leaves_per_rail == 2
    assert s.bisection_gbps_per_gpu == 400 and s.oversubscription == 1


def test_zcube_n4_one_server_per_a_vs_two():
    # 4 per server: A holds one server, B[r] is rank r of every server (ROFT's rail).
    one = fabric_structure(build_zcube(4, gpus_per_server=4), LayoutSpec(layout="rail-aligned"))
    assert one.servers_per_group == 1 and one.leaves_per_rail == 1
    # rail-aligned PD pulls (server 0 to servers 1-3, same rank): all meet on one B.
    assert one.pair_set("pd").share_via("B") == 100
    # 2 per server: A holds 2 servers; rank r spreads over 2 B switches.
    two = fabric_structure(build_zcube(4, gpus_per_server=2), LayoutSpec(layout="rail-aligned"))
    assert two.servers_per_group == 2 and two.leaves_per_rail == 2
    # prefill server 0 (gids 0,1) to decode servers 1..7, same rank: 7 pairs per prefill GPU;
    # server 1 shares A0 (1 pair each); same B needs the same position (servers 2, 4, 6: 3).
    pd = _by_shared(two.pair_set("pd"))
    assert pd == {("A",): (1, 1, 2), ("B",): (1, 1, 6), (): (2, 2, 6)}


def test_roft_small_hand_count():
    # 4 servers x 2 GPUs, 2 servers per leaf: 2 leaves per rail, 4 leaves.
    s = fabric_structure(build_roft(4, 2, spines=2, servers_per_leaf=2))
    # a GPU's 7 partners: 1 on its leaf (same rank, other server of the group), 6 over spines.
    assert _by_shared(s.pair_set("all")) == {("leaf",): (1, 1, 8), (): (3, 1, 48)}
    assert s.servers_per_group == 2 and s.leaves_per_rail == 2
    over = fabric_structure(build_roft(4, 2, spines=1, oversubscription=2, servers_per_leaf=2))
    assert over.oversubscription == 2 and over.bisection_gbps_per_gpu == 200


def test_roft_planes_paths_and_ports():
    s = fabric_structure(build_roft(2, 2, spines=1, planes=2))
    assert {c.hops: (c.disjoint_paths, c.ports) for c in s.pair_set("all").classes} == {
        1: (2, 2),
        3: (2, 2),
    }


@pytest.mark.parametrize(
    "fabric",
    [
        build_zcube(4, gpus_per_server=2),
        build_zcube(4, m=2, gpus_per_server=4),
        build_roft(4, 2, spines=2, servers_per_leaf=2),
        build_roft(4, 4, spines=2),
    ],
)
def test_classes_match_every_pair(fabric):
    # The class counting and one representative per class agree with each pair measured alone.
    graph = _Graph(fabric)
    expected: dict[tuple[int, int], int] = {}
    names = [h.name for h in fabric.hosts]
    for x in names:
        for y in names:
            if x != y:
                hops, paths, _ = graph.measure(x, y)
                assert hops == fabric.host_hops(x, y)
                expected[(hops, paths)] = expected.get((hops, paths), 0) + 1
    got: dict[tuple[int, int], int] = {}
    for c in fabric_structure(fabric).pair_set("all").classes:
        got[(c.hops, c.disjoint_paths)] = got.get((c.hops, c.disjoint_paths), 0) + c.pairs
    assert got == expected


def test_ep_pairs_counted_from_placement():
    layout = LayoutSpec(prefill_servers=2, ep_servers=2, alltoall="rail")
    s = fabric_structure(build_zcube(4, gpus_per_server=4), layout)
    # 2 instances of 2 servers x 4 ranks, each GPU with its one peer: 16 ordered pairs on B.
    assert s.pair_set("ep").pairs == 16 and s.pair_set("ep").share_via("B") == 100


def test_full_size_specs():
    assert full_size_spec(FabricSpec.of("zcube", n=4)).params == (
        ("gpus_per_server", 8),
        ("m", 1),
        ("n", 32),
    )
    roft = dict(full_size_spec(FabricSpec.of("roft", servers=4, gpus_per_server=4)).params)
    assert roft == {"servers": 128, "gpus_per_server": 8, "servers_per_leaf": 32, "spines": 16}
    with pytest.raises(ConfigError, match="full_gpus"):
        full_size_spec(FabricSpec.of("zcube", n=4), gpus=1000)


def test_full_size_layout_keeps_ratio_and_ep_width():
    got = full_size_layout(4, 128, LayoutSpec(prefill_servers=1, ep_servers=2))
    assert got.prefill_servers == 32 and got.ep_servers == 2 and got.decode_servers is None


def test_comparison_rows_round_trip_and_render():
    cmp = compare_structure(FabricSpec.of("zcube", n=4), LayoutSpec(), "coding-agent")
    assert StructureComparison.from_dict(cmp.to_dict()) == cmp
    rows = structure_rows(cmp)
    one_hop = next(r for r in rows if r.section == "all GPU pairs" and r.label == "1 switch hop")
    assert (one_hop.scaled, one_hop.full, one_hop.diff) == ("40.0%", "6.1%", "+33.9 pt")
    assert one_hop.beyond_goal
    text = structure_text(cmp)
    assert "+33.9 pt !" in text and "beyond 5 points" in text
    page = structure_html(cmp)
    assert "<table class='structure'>" in page and "<tr class='bad'>" in page


def test_scenario_wider_than_fabric_is_refused():
    with pytest.raises(ConfigError, match="ep_servers"):
        compare_structure(FabricSpec.of("zcube", n=4), LayoutSpec(prefill_servers=1, ep_servers=3))


def test_cli_vs_full_size_json(capsys):
    import json

    from zcube_lab.cli import main

    argv = ["fabric", "--vs-full-size", "--n", "4", "--gpus-per-server", "2", "--json"]
    assert main([*argv, "--workload", "kv-heavy", "--workload", "hotspot"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["scenario"] for c in out] == ["kv-heavy", "hotspot"]
    assert out[0]["scaled"]["servers_per_group"] == 2 and out[0]["full"]["gpus"] == 1024
