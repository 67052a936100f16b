"""The example fabrics in examples/fabrics/ load and validate; routing on the irregular example
against hand-computed path sets; the file figures (hop classes, disjoint paths, bisection)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from zcube_lab.controller.flowtable import FabricTable
from zcube_lab.controller.rules import Output, ToGroup, compute_rules
from zcube_lab.core.fabric.builders import build_clos, build_roft, build_zcube
from zcube_lab.core.fabric.files import load_fabric
from zcube_lab.core.fabric.files.cost import fabric_cost
from zcube_lab.core.fabric.files.report import (
    bisection_per_gpu,
    cost_rows,
    file_summary,
    pair_figures,
)
from zcube_lab.core.fabric.scaledown import scaled_sizes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "fabrics"
ALL = sorted(EXAMPLES.glob("*.yaml"))


def test_the_examples_are_there() -> None:
    names = {p.stem for p in ALL}
    assert {"hpn-pod", "rail-only", "two-plane", "zcube-16", "roft-16", "clos-16"} <= names


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_each_example_loads_and_validates(path: Path) -> None:
    loaded = load_fabric(path)
    f = loaded.fabric
    assert f.hosts and f.switches and f.links
    # every GPU port is attached, and every switch port carries one link
    assert len(f.attachments) == sum(len(h.interfaces) for h in f.hosts)
    ends = [(lk.node1, lk.port1) for lk in f.links] + [(lk.node2, lk.port2) for lk in f.links]
    assert len(ends) == len(set(ends))
    for s in f.switches:
        assert f.ports_used()[s.name] <= s.radix


@pytest.mark.parametrize(
    "kind, build", [("zcube", build_zcube), ("roft", build_roft), ("clos", build_clos)]
)
def test_the_exported_builtins_are_the_builtins_at_16_gpus(kind: str, build) -> None:
    built = build(**scaled_sizes(kind, 16))
    f = load_fabric(EXAMPLES / f"{kind}-16.yaml").fabric
    assert (f.hosts, f.switches, f.links) == (built.hosts, built.switches, built.links)


def test_the_examples_hold_the_builtins_gpu_layout() -> None:
    """`compare` needs every fabric to hold the same GPU hosts: gid -> server and rank alike."""
    layout = [(h.server, h.rank) for h in build_zcube(**scaled_sizes("zcube", 16)).hosts]
    for name in ("hpn-pod", "rail-only", "two-plane"):
        f = load_fabric(EXAMPLES / f"{name}.yaml").fabric
        assert [(h.server, h.rank) for h in f.hosts] == layout, name


def test_hpn_pod_is_dual_tor_and_dual_plane() -> None:
    loaded = load_fabric(EXAMPLES / "hpn-pod.yaml")
    f = loaded.fabric
    for h in f.hosts:
        tors = [f.attachments[(h.name, i.index)].switch for i in h.interfaces]
        assert [loaded.switch_planes[t] for t in tors] == [0, 1]
    # no link joins the planes
    for lk in f.links:
        if f.is_switch(lk.node1) and f.is_switch(lk.node2):
            assert loaded.switch_planes[lk.node1] == loaded.switch_planes[lk.node2]
    assert loaded.roles is not None and loaded.roles.ep_servers == 2


def test_rail_only_leaves_cross_rail_pairs_without_a_fabric_path() -> None:
    f = load_fabric(EXAMPLES / "rail-only.yaml").fabric
    assert f.shortest_paths("h0", "h2") != []  # rank 0 and rank 0: the rail-0 switch
    assert f.shortest_paths("h0", "h3") == []  # rank 0 to rank 1: NVLink's job
    hops, disjoint, _ = pair_figures(f, [("h0", "h2"), ("h0", "h3")])
    assert hops == {"1": 1, "none": 1} and disjoint == {1: 1, 0: 1}


# -- routing on the irregular graph ----------------------------------------------------------
# s0-s1, s1-s2, s2-s3, s3-s0, and s0=s2 (two links). h0: s0,s3  h1: s1,s3  h2: s2,s0  h3: s3,s1.
@pytest.fixture(scope="module")
def irregular():
    return load_fabric(EXAMPLES / "irregular.yaml").fabric


def _ip(fabric, host: str, port: int) -> str:
    return fabric.host(host).interfaces[port].ip


@pytest.mark.parametrize(
    "src, dst, port, paths",
    [
        # h3-eth0 is on s3; h1 leaves plane 0 by its port 0 on s1: s1 > s0 > s3 or s1 > s2 > s3
        ("h1", "h3", 0, {("s1", "s0", "s3"), ("s1", "s2", "s3")}),
        # h3-eth1 is on s1; h1 leaves plane 1 by its port 1 on s3: s3 > s0 > s1 or s3 > s2 > s1
        ("h1", "h3", 1, {("s3", "s0", "s1"), ("s3", "s2", "s1")}),
        # h2-eth0 on s2, from h0's port 0 on s0: the chord (two links, one switch path)
        ("h0", "h2", 0, {("s0", "s2")}),
        # h2-eth1 on s0, from h0's port 1 on s3: s3 > s0
        ("h0", "h2", 1, {("s3", "s0")}),
        # h1-eth0 on s1 from h2's port 0 on s2: one hop over s2-s1
        ("h2", "h1", 0, {("s2", "s1")}),
    ],
)
def test_ecmp_paths_on_the_irregular_graph(irregular, src, dst, port, paths) -> None:
    table = FabricTable(irregular, compute_rules(irregular, "ecmp"))
    trace = table.send(src, _ip(irregular, dst, port))
    assert trace.paths == frozenset(paths)
    assert trace.receivers == {(dst, port)}
    assert not trace.dropped and not trace.looped


def test_parallel_chord_links_are_two_ecmp_buckets(irregular) -> None:
    rules = compute_rules(irregular, "ecmp")
    s0 = irregular.switch("s0")
    chord_ports = sorted(
        lk.port1 if lk.node1 == "s0" else lk.port2
        for lk in irregular.links
        if {lk.node1, lk.node2} == {"s0", "s2"}
    )
    assert len(chord_ports) == 2
    flow = next(
        f for f in rules[s0.dpid].flows if f.match_fields.get("ipv4_dst") == _ip(irregular, "h2", 0)
    )
    (action,) = [a for a in flow.actions if isinstance(a, ToGroup | Output)]
    assert isinstance(action, ToGroup)
    group = next(g for g in rules[s0.dpid].groups if g.group_id == action.group_id)
    assert sorted(b.port for b in group.buckets) == chord_ports


def test_fast_failover_detours_on_the_irregular_graph(irregular) -> None:
    rules = compute_rules(irregular, "ff")
    table = FabricTable(irregular, rules)
    dst = _ip(irregular, "h3", 0)  # on s3
    (path,) = table.send("h1", dst).paths  # ff: one path with every link up
    assert path in {("s1", "s0", "s3"), ("s1", "s2", "s3")}
    middle = path[1]
    down = [
        lk for lk in irregular.links if {lk.node1, lk.node2} == {"s1", middle}
    ]  # the primary's first hop fails: the other side of the ring is left
    other = "s2" if middle == "s0" else "s0"
    assert table.with_failed(down).send("h1", dst).paths == {("s1", other, "s3")}


def test_the_controller_recomputes_on_what_remains(irregular) -> None:
    chord = [lk for lk in irregular.links if {lk.node1, lk.node2} == {"s0", "s2"}]
    left = irregular.without_links(chord)
    table = FabricTable(left, compute_rules(left, "ecmp"))
    # without the chord, s0 to s2 is two hops either way round the ring
    assert table.send("h0", _ip(left, "h2", 0)).paths == {("s0", "s1", "s2"), ("s0", "s3", "s2")}


def test_figures_of_the_irregular_graph_by_hand(irregular) -> None:
    names = [h.name for h in irregular.hosts]
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1 :]]
    hops, disjoint, note = pair_figures(irregular, pairs)
    # h0-h1 share s3, h0-h2 s0, h0-h3 s3, h1-h3 s1 and s3; h1-h2 and h2-h3 are one link apart
    assert hops == {"1": 4, "2": 2}
    # every GPU has 2 ports and the ring keeps 2 link-disjoint paths for every pair
    assert disjoint == {2: 6} and note is None
    # servers 0,1 | 2,3: h0,h1 send 4 x 400G; the cut is their 4 ports' worth: 400 per GPU
    assert bisection_per_gpu(irregular) == 400


def test_bisection_of_the_two_plane_example_is_halved_by_its_2to1_leaves() -> None:
    f = load_fabric(EXAMPLES / "two-plane.yaml").fabric
    assert bisection_per_gpu(f) == 200


def test_summary_and_cost_rows_of_an_example() -> None:
    loaded = load_fabric(EXAMPLES / "hpn-pod.yaml")
    summary = file_summary(loaded)
    # prefill servers 0-1, decode 2-7: a prefill GPU meets the 2 decode GPUs of its rail in
    # its segment (servers 2, 3) under its ToR; the other 10 pulls cross an aggregation switch
    assert summary["pd_pulls_by_hops"] == {"1": 8, "3": 40}
    assert summary["diameter_hops"] == 3 and summary["hosts"] == 16
    args = argparse.Namespace(switch_ports=64, port_gbps=400, switch_price=None, optic_price=None)
    rows = cost_rows(loaded, args)
    assert set(rows["fabrics"]) == {"file", "roft", "clos", "zcube"}
    mine = fabric_cost(loaded)
    assert rows["fabrics"]["file"]["switches"] == mine.switches == 12
    assert mine.capex_switches == 12 * 30000  # the file's own prices


def test_pd_pulls_by_hops_with_host_lists() -> None:
    summary = file_summary(load_fabric(EXAMPLES / "rail-only.yaml"))
    # prefill h0..h3 (servers 0, 1), decode h4..h15: 4 x 12 pulls, same rank for half
    assert summary["pd_pulls_by_hops"] == {"1": 24, "none": 24}


def test_spraying_entropy_values_spread_over_both_ring_paths(irregular) -> None:
    from zcube_lab.core.fabric.evpaths import ev_ports

    table = FabricTable(irregular, compute_rules(irregular, "ecmp", ev_rules=True))
    dst = _ip(irregular, "h3", 0)
    seen = set()
    for ev in ev_ports(8):
        (path,) = table.send("h1", dst, udp_src=ev).paths  # one path per entropy value
        seen.add(path)
    assert seen == {("s1", "s0", "s3"), ("s1", "s2", "s3")}
