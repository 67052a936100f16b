"""Splitting a fabric across lab machines: every node placed once, every host with one of its
switches, hosts balanced, few cut links, and the `fabric --machines` command."""

from __future__ import annotations

import json

import pytest

from zcube_lab.cli import main
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_clos, build_roft, build_zcube
from zcube_lab.core.fabric.description import Fabric, FabricSpec, Host, Interface, Link, Switch
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.core.fabric.split import Split, max_machines, split_fabric

FABRICS = {
    "zcube4": build_zcube(n=4),
    "zcube6": build_zcube(n=6),
    "zcube8": build_zcube(n=8),
    "roft16": build_roft(servers=4, gpus_per_server=4),
    "roft36": build_roft(servers=6, gpus_per_server=6),
    "roft64": build_roft(servers=8, gpus_per_server=8),
    "clos16": build_clos(servers=4, gpus_per_server=4),
    "clos36": build_clos(servers=6, gpus_per_server=6),
    "clos64": build_clos(servers=8, gpus_per_server=8),
}
CASES = [
    (name, machines)
    for name, fabric in FABRICS.items()
    for machines in (2, 3, 4)
    if machines <= max_machines(fabric)
]


def cut_count(fabric: Fabric, where: dict[str, int]) -> int:
    return sum(1 for lk in fabric.links if where[lk.node1] != where[lk.node2])


def placement(split: Split) -> dict[str, int]:
    return {**split.host_machine, **split.switch_machine}


def round_robin(fabric: Fabric, machines: int) -> dict[str, int]:
    """The naive split: switch i on machine i % machines, each host with its eth0 switch."""
    where = {s.name: i % machines for i, s in enumerate(fabric.switches)}
    for h in fabric.hosts:
        where[h.name] = where[fabric.attachments[(h.name, 0)].switch]
    return where


def test_the_cases_cover_two_three_and_four_machines() -> None:
    # Clos 4x4 and 6x6 have 2 and 3 leaves (two servers each), so fewer machines fit.
    assert len(CASES) == 9 * 3 - 3
    assert max_machines(FABRICS["clos16"]) == 2
    assert max_machines(FABRICS["clos36"]) == 3


@pytest.mark.parametrize(("name", "machines"), CASES)
def test_every_node_is_placed_once_on_a_valid_machine(name: str, machines: int) -> None:
    fabric = FABRICS[name]
    split = split_fabric(fabric, machines)
    assert sorted(split.host_machine) == sorted(h.name for h in fabric.hosts)
    assert sorted(split.switch_machine) == sorted(s.name for s in fabric.switches)
    assert set(placement(split).values()) == set(range(machines))
    listed = [n for m in split.per_machine for n in (*m.hosts, *m.switches)]
    assert sorted(listed) == sorted(placement(split))


@pytest.mark.parametrize(("name", "machines"), CASES)
def test_every_host_shares_a_machine_with_one_of_its_switches(name: str, machines: int) -> None:
    fabric = FABRICS[name]
    split = split_fabric(fabric, machines)
    for h in fabric.hosts:
        switches = {fabric.attachments[(h.name, i.index)].switch for i in h.interfaces}
        assert split.host_machine[h.name] in {split.switch_machine[s] for s in switches}, h.name


@pytest.mark.parametrize(("name", "machines"), CASES)
def test_hosts_are_balanced(name: str, machines: int) -> None:
    fabric = FABRICS[name]
    split = split_fabric(fabric, machines)
    gps = dict(fabric.spec.params)["gpus_per_server"]
    if fabric.kind == "clos":
        # A Clos leaf holds two whole servers and its single-port hosts cannot leave it.
        assert split.host_spread() <= 2 * gps
    else:
        assert split.host_spread() <= gps
    assert sum(len(m.hosts) for m in split.per_machine) == len(fabric.hosts)


@pytest.mark.parametrize(("name", "machines"), CASES)
def test_the_cut_is_counted_right_and_no_larger_than_round_robin(name: str, machines: int) -> None:
    fabric = FABRICS[name]
    split = split_fabric(fabric, machines)
    where = placement(split)
    assert len(split.cut_links) == cut_count(fabric, where)
    assert all(where[lk.node1] != where[lk.node2] for lk in split.cut_links)
    inside = sum(m.links_inside for m in split.per_machine)
    assert inside + len(split.cut_links) == len(fabric.links)
    assert len(split.cut_links) <= cut_count(fabric, round_robin(fabric, machines))


@pytest.mark.parametrize("name", FABRICS)
def test_one_machine_cuts_nothing(name: str) -> None:
    split = split_fabric(FABRICS[name], 1)
    assert split.cut_links == ()
    assert split.cut_mbps == 0
    assert split.per_machine[0].links_inside == len(FABRICS[name].links)


def test_zcube_n4_on_two_machines_cuts_16_links() -> None:
    # ZCube n=4, m=1: 48 links (16 host-A, 16 host-B, 16 A-B). GPU servers are the A groups
    # (gpus_per_server 4), so servers 0-1 with a0, a1 go to machine 0 and servers 2-3 with a2,
    # a3 to machine 1. Host-A links are never cut. B switch b_r links to one host of every A
    # group and to every A: 4 links to each machine, a tie, so the B switches alternate (fewest
    # switches first): b0, b2 on 0 and b1, b3 on 1. Each A-B pair on different machines cuts
    # its A-B link and, its host sitting with the A switch, that host's B link: 8 such pairs
    # (a0,a1 x b1,b3 and a2,a3 x b0,b2), so 8 A-B + 8 host-B = 16 cut links of 50 Mb/s (the
    # 200 Gb/s port at 100 Mb/s per 400 Gb/s NIC). No split with 4 switches a machine does
    # better: every A-B pair across machines costs 2 links whatever the B switches do.
    split = split_fabric(build_zcube(n=4), 2)
    assert split.switch_machine == {
        "a0": 0, "a1": 0, "a2": 1, "a3": 1, "b0": 0, "b1": 1, "b2": 0, "b3": 1
    }  # fmt: skip
    assert len(split.cut_links) == 16
    kinds = sorted(c.label[0] for c in split.cut)
    assert kinds == ["a"] * 8 + ["h"] * 8
    assert {c.mbps for c in split.cut} == {50.0}
    assert split.cut_mbps == 800.0
    assert split.cut_gbps == 16 * 200.0
    assert [len(m.hosts) for m in split.per_machine] == [8, 8]


def test_roft_4x4_on_two_machines_cuts_8_links() -> None:
    # ROFT 4x4: 4 rail leaves of 4 single-port hosts each (one per server), 2 spines, 2 links
    # from each leaf to each spine: 16 host links + 16 uplinks. A host must sit with its leaf,
    # so whole rails move: leaf0, leaf1 on machine 0 and leaf2, leaf3 on machine 1 (8 hosts
    # each). Each spine has 4 uplinks to each machine; they spread, spine0 to 0, spine1 to 1,
    # and each cuts the 4 uplinks from the other machine's two leaves: 8 cut links of 100 Mb/s.
    split = split_fabric(build_roft(servers=4, gpus_per_server=4), 2)
    assert [m.switches for m in split.per_machine] == [
        ("leaf0", "leaf1", "spine0"),
        ("leaf2", "leaf3", "spine1"),
    ]
    assert len(split.cut_links) == 8
    assert all(c.label.startswith("leaf") for c in split.cut)
    assert split.cut_mbps == 800.0
    assert [(pair, len(links)) for pair, links in split.pairs().items()] == [((0, 1), 8)]


def test_emulated_rates_follow_the_scale() -> None:
    split = split_fabric(build_zcube(n=4), 2, Scale(nic_mbps=40.0))
    assert {c.mbps for c in split.cut} == {20.0}
    assert split.cut_mbps == 16 * 20.0


def _tiny() -> Fabric:
    """Two single-port hosts on leaves l0 and l1; l0 has 3 links to l1; x hangs off y, which
    has 2 links to l1. x is listed first so the first placement puts it on the wrong machine."""

    def host(gid: int) -> Host:
        iface = Interface(f"h{gid}", 0, f"10.0.{gid}.1", f"02:00:00:00:00:0{gid}")
        return Host(f"h{gid}", gid, gid, 0, 0, (iface,), ())

    names = ("x", "y", "l0", "l1")
    switches = tuple(Switch(s, k + 1, "leaf", k, 8) for k, s in enumerate(names))
    links = (
        Link("h0", 0, "l0", 1, 1.0),
        Link("h1", 0, "l1", 1, 1.0),
        *(Link("l0", 2 + k, "l1", 2 + k, 1.0) for k in range(3)),
        Link("x", 1, "y", 1, 1.0),
        *(Link("y", 2 + k, "l1", 5 + k, 1.0) for k in range(2)),
    )
    return Fabric(FabricSpec.of("tiny"), 1.0, (host(0), host(1)), switches, links)


def test_the_local_pass_moves_a_switch_but_never_strands_a_host() -> None:
    split = split_fabric(_tiny(), 2)
    # x alone had no placed neighbour and went to machine 0; the pass follows y to machine 1.
    assert split.switch_machine == {"x": 1, "y": 1, "l0": 0, "l1": 1}
    # Moving l0 to machine 1 would cut 1 link instead of 3, but would leave h0 alone.
    assert split.host_machine == {"h0": 0, "h1": 1}
    assert [c.label for c in split.cut] == ["l0-l1"] * 3


@pytest.mark.parametrize("machines", [0, 5, -1, 2.0, True])
def test_machines_outside_the_range_is_refused_by_name(machines: object) -> None:
    with pytest.raises(ConfigError) as err:
        split_fabric(build_zcube(n=4), machines)  # type: ignore[arg-type]
    assert err.value.field == "machines"


def test_the_limit_names_the_range() -> None:
    with pytest.raises(ConfigError, match="between 1 and 4"):
        split_fabric(build_zcube(n=4), 5)


def test_fabric_command_prints_the_split(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fabric", "--fabric", "zcube", "--n", "4", "--machines", "2"]) == 0
    out = capsys.readouterr().out
    assert "split over 2 lab machines" in out
    assert "cut: 16 of 48 links become tunnels, 800 Mb/s emulated" in out
    assert "a0-b1" in out


def test_fabric_command_json_has_the_split(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fabric", "--fabric", "roft", "--servers", "4", "--gpus-per-server", "4"]
    assert main([*argv, "--machines", "2", "--json"]) == 0
    split = json.loads(capsys.readouterr().out)["split"]
    assert split["machines"] == 2
    assert split["cut"]["count"] == 8
    assert split["cut"]["by_pair"] == [{"machines": [0, 1], "count": 8, "mbps": 800.0}]
    assert [len(m["hosts"]) for m in split["per_machine"]] == [8, 8]
    assert main([*argv, "--json"]) == 0
    assert "split" not in json.loads(capsys.readouterr().out)


def test_fabric_command_refuses_too_many_machines(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fabric", "--fabric", "clos", "--gpus-per-server", "4", "--machines", "3"]) == 2
    err = capsys.readouterr().err
    assert "machines=3" in err
    assert "between 1 and 2" in err
