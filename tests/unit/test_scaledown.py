"""The scale-down rule (`zcube_lab.core.fabric.scaledown`): the default sizes of `compare` and
`sweep` keep several servers per ZCube A switch and per ROFT rail leaf, sizes given win, and a
GPU count or size that cannot keep the structure is refused by name with what fits."""

from __future__ import annotations

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.fullsize import compare_structure
from zcube_lab.core.fabric.placement import LayoutSpec
from zcube_lab.core.fabric.scaledown import (
    FULL_SERVERS_PER_LEAF,
    FULL_SERVERS_PER_SEGMENT,
    scaled_sizes,
    structure_gpus,
    structure_gpus_per_server,
    structure_servers_per_leaf,
)
from zcube_lab.core.fabric.structure import SHARE_GOAL_POINTS
from zcube_lab.emulator.experiment.comparison import fabric_specs
from zcube_lab.emulator.probes.epprobe import EP_GROUP
from zcube_lab.emulator.probes.kvprobe import KV_PAIRS


def test_the_full_size_has_4_servers_per_a_segment_and_32_per_rail_leaf() -> None:
    assert (FULL_SERVERS_PER_SEGMENT, FULL_SERVERS_PER_LEAF) == (4, 32)


@pytest.mark.parametrize(
    ("n", "gps"), [(4, 2), (6, 2), (8, 2), (9, 3), (16, 4), (32, 8), (2, None), (5, None)]
)
def test_zcube_takes_the_fewest_gpus_per_server_with_2_to_4_servers_per_a(
    n: int, gps: int | None
) -> None:
    assert structure_gpus_per_server(n) == gps


def test_roft_keeps_several_servers_per_leaf_and_several_leaves_per_rail() -> None:
    # 8 servers of 2: 2 per leaf (4 leaves per rail, as at full size); 32 of 2: 4 per leaf
    # (8 per leaf would put 7 of a GPU's 63 partners under its leaf: 11%, full size 3%)
    assert structure_servers_per_leaf(8, 16) == 2
    assert structure_servers_per_leaf(32, 64) == 4
    assert structure_servers_per_leaf(2, 16) is None  # one leaf per rail at most
    # whole uplinks for every spine preferred: 4 per leaf has 4 uplinks, 2 has 2
    assert structure_servers_per_leaf(32, 64, spines=4) == 4
    assert structure_servers_per_leaf(32, 64, oversubscription=4) == 4
    assert structure_servers_per_leaf(32, 64, oversubscription=2, spines=2) == 4


@pytest.mark.parametrize("gpus", [16, 64])
def test_the_default_fabrics_keep_the_structure_of_the_ep_cell(gpus: int) -> None:
    specs = fabric_specs(["zcube", "roft"], gpus, 2)
    zcube, roft = (build_fabric(specs[k]) for k in ("zcube", "roft"))
    # the same GPU hosts on both: gid -> (server, rank)
    assert [(h.server, h.rank) for h in zcube.hosts] == [(h.server, h.rank) for h in roft.hosts]
    n = dict(specs["zcube"].params)["n"]
    per_a = {len({h.server for h in zcube.hosts if h.gid // n == a}) for a in range(n)}
    assert min(per_a) >= 2  # several servers under every A switch
    servers = len({h.server for h in roft.hosts})
    ep_cell = LayoutSpec(
        prefill_servers=servers // 2, ep_servers=2, alltoall="rail", layout="rail-aligned"
    )
    for kind in ("zcube", "roft"):
        gaps = compare_structure(specs[kind], ep_cell, "ep").share_gaps()
        assert gaps["ep"] <= SHARE_GOAL_POINTS, kind
    roft_all = compare_structure(specs["roft"]).share_gaps()["all"]
    assert roft_all <= SHARE_GOAL_POINTS


def test_sizes_given_win_and_the_old_scale_down_is_reachable() -> None:
    old = {"gpus_per_server": 4, "servers_per_leaf": 4}
    assert scaled_sizes("zcube", 16, old) == {"n": 4, "gpus_per_server": 4}
    assert scaled_sizes("roft", 16, old) == {
        "servers": 4,
        "gpus_per_server": 4,
        "servers_per_leaf": 4,
    }
    # GPUs per server alone: the rule still picks ROFT's leaves (2 of the 4 servers each)
    assert scaled_sizes("roft", 16, {"gpus_per_server": 4})["servers_per_leaf"] == 2


@pytest.mark.parametrize(
    ("kind", "gpus", "given", "field", "fits"),
    [
        ("zcube", 25, {}, "gpus", "[16, 36, 64, 81, 100, 144]"),
        ("roft", 4, {}, "gpus", "--gpus-per-server (a divisor of 2: [1, 2])"),
        ("zcube", 16, {"gpus_per_server": 3}, "gpus_per_server", "[1, 2, 4, 8, 16]"),
        ("roft", 16, {"gpus_per_server": 8}, "gpus_per_server", "one of [1, 2, 4]"),
        ("roft", 16, {"servers": 2, "gpus_per_server": 8}, "servers", "--servers-per-leaf"),
        ("zcube", 15, {}, "gpus", "a square"),
    ],
)
def test_a_size_that_cannot_keep_the_structure_is_refused_with_what_fits(
    kind: str, gpus: int, given: dict, field: str, fits: str
) -> None:
    with pytest.raises(ConfigError) as err:
        scaled_sizes(kind, gpus, given)
    assert err.value.field == field and fits in err.value.allowed


def test_structure_gpus_lists_the_squares_that_keep_it() -> None:
    assert structure_gpus(64) == [16, 36, 64]


def test_the_probes_pairs_keep_their_meaning_on_the_default_fabrics() -> None:
    specs = fabric_specs(["zcube", "roft", "clos"], 16, 2)
    zcube, roft, clos = (build_fabric(specs[k]) for k in ("zcube", "roft", "clos"))
    # ZCube's KV pair is same-rail (one B switch), ROFT's and Clos's cross a spine
    assert len(zcube.shortest_paths(*KV_PAIRS["zcube"])[0].switches) == 1
    for fabric, kind in ((roft, "roft"), (clos, "clos")):
        assert any("spine" in s for s in fabric.shortest_paths(*KV_PAIRS[kind])[0].switches)
    # the EP probe's group: four servers, rank 0 of each
    leader, peers = EP_GROUP
    hosts = [roft.host(h) for h in (leader, *peers)]
    assert {h.rank for h in hosts} == {0} and len({h.server for h in hosts}) == 4


def test_profiles_prefill_counts_keep_their_share_of_the_servers() -> None:
    from zcube_lab.emulator.experiment.runconfig import prefill_servers_hint, profile_fallback

    # written for 4 servers: coding-agent 1 (1:3), kv-heavy 3 (3:1), hotspot 2 (1:1)
    for workload, four, eight, thirty_two in (
        ("coding-agent", 1, 2, 8),
        ("kv-heavy", 3, 6, 24),
        ("hotspot", 2, 4, 16),
    ):
        assert prefill_servers_hint(workload) == four
        assert prefill_servers_hint(workload, 8) == eight
        assert prefill_servers_hint(workload, 32) == thirty_two
    assert prefill_servers_hint("kv-heavy", 2) == 1  # a decode server is left
    spec = fabric_specs(["zcube"], 16, 2)["zcube"]
    assert profile_fallback("coding-agent", spec)["prefill_servers"] == 2


def test_compares_default_run_keeps_coding_agents_prefill_share() -> None:
    import argparse

    from zcube_lab.cli.commands import compare

    parser = argparse.ArgumentParser()
    compare.add_arguments(parser)
    _kinds, _specs, variants, _base = compare.variants_from_args(parser.parse_args([]))
    assert {v.config.layout.prefill_servers for v in variants} == {2}  # 4 of 16 GPUs, as before
