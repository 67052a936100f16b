"""Fabric files (docs/FABRIC_FILES.md): the validator's rules, one failing file each; the
round trip of every built-in; the cost of a hand-counted fabric."""

from __future__ import annotations

import textwrap
from pathlib import Path

import jsonschema
import pytest

from zcube_lab.controller.rules import compute_rules
from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_clos, build_roft, build_zcube
from zcube_lab.core.fabric.files import (
    RULES,
    FabricFileError,
    fabric_document,
    load_fabric,
    write_fabric,
)
from zcube_lab.core.fabric.files.cost import fabric_cost
from zcube_lab.core.fabric.files.native import expand_names, fill_template, schema

# A small valid leaf-spine: 2 servers of 2 GPUs, 2 leaves, 1 spine.
GOOD = """\
format: zcube-fabric/1
name: tiny
nic_gbps: 400
switches:
  - {name: "leaf{0..1}", tier: leaf, radix: 4}
  - {name: spine0, tier: spine, radix: 4}
servers:
  - {count: 2, gpus: 2, ports: ["leaf{server}"]}
links:
  - {a: "leaf{0..1}", b: spine0, gbps: 400, count: 2}
"""


def write(tmp_path: Path, text: str, name: str = "fab.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_the_good_file_loads_with_the_ports_and_addresses_assigned(tmp_path: Path) -> None:
    loaded = load_fabric(write(tmp_path, GOOD))
    f = loaded.fabric
    assert [h.name for h in f.hosts] == ["h0", "h1", "h2", "h3"]
    assert [(h.server, h.rank) for h in f.hosts] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # host ports first (1, 2 on each leaf), then the uplinks (3, 4), spine ports in order
    assert f.attachments[("h1", 0)].switch == "leaf0" and f.attachments[("h1", 0)].port == 2
    uplinks = [(lk.node1, lk.port1, lk.node2, lk.port2) for lk in f.links[4:]]
    assert uplinks == [
        ("leaf0", 3, "spine0", 1),
        ("leaf0", 4, "spine0", 2),
        ("leaf1", 3, "spine0", 3),
        ("leaf1", 4, "spine0", 4),
    ]
    assert f.host("h3").interfaces[0].ip == "198.18.1.2"
    assert f.kind == "file" and dict(f.spec.params) == {"path": str(tmp_path / "fab.yaml")}
    assert f.diameter() == 3


# rule -> (a text of GOOD, what replaces it everywhere, the element the error line names)
BROKEN: dict[str, tuple[str, str, str]] = {
    "unknown-node": ("b: spine0, gbps", "b: spine9, gbps", "link leaf0-spine9"),
    "host-without-link": ('ports: ["leaf{server}"]', "ports: []", "host h0"),
    "radix": (
        "{name: spine0, tier: spine, radix: 4}",
        "{name: spine0, tier: spine, radix: 3}",
        "switch spine0",
    ),
    "duplicate-link": (
        "count: 2}\n",
        "count: 2}\n  - {a: leaf1, b: spine0}\n",
        "link leaf1-spine0",
    ),
    "self-link": ("b: spine0, gbps", 'b: "leaf{0..1}", gbps', "link leaf0-leaf0"),
    "duplicate-node": ("{name: spine0,", "{name: leaf1,", "switch leaf1"),
    "uneven-ports": (
        '  - {count: 2, gpus: 2, ports: ["leaf{server}"]}',
        '  - {count: 1, gpus: 2, ports: ["leaf{server}"]}\n'
        '  - {count: 1, gpus: 2, ports: ["leaf{server}", spine0]}',
        "host h2",
    ),
    "port-taken": (
        'ports: ["leaf{server}"]',
        'ports: [{switch: "leaf{server}", port: 1}]',
        "host h1 port 0",
    ),
    "name-length": ("leaf", "leafswitch", "switch leafswitch0"),
    "plane": ("tier: spine, radix: 4}", "tier: spine, radix: 4, plane: 1}", "switch spine0"),
    "schema": ("gbps: 400, count: 2", "gbps: -5, count: 2", "links[0]"),
    "format": ("format: zcube-fabric/1", "format: zcube-fabric/9", "format"),
    "syntax": ("nic_gbps: 400", "nic_gbps: [400", "file"),
    "disconnected": (
        "radix: 4}\nservers",
        "radix: 4}\n  - {name: spine1}\nservers",
        "switch spine1",
    ),
    "roles": (
        "nic_gbps: 400",
        "nic_gbps: 400\nroles: {prefill_servers: 2, decode_servers: 1}",
        "roles",
    ),
    "address": (
        'ports: ["leaf{server}"]',
        'ports: [{switch: "leaf{server}", ip: 198.18.9.9}]',
        "host h1 port 0",
    ),
}


@pytest.mark.parametrize("rule", sorted(BROKEN))
def test_every_rule_has_a_failing_file_with_one_line_naming_file_element_rule(
    tmp_path: Path, rule: str
) -> None:
    old, new, element = BROKEN[rule]
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(FabricFileError) as info:
        load_fabric(path)
    err = info.value
    text = str(err)
    assert err.rule == rule, text
    assert "\n" not in text and "Traceback" not in text
    assert text.startswith(str(path)) and f"[{rule}]" in text
    assert element in err.element, text
    assert isinstance(err, ConfigError)  # the CLI prints it as one line, exit 2


def test_every_rule_named_is_tested() -> None:
    # the rules with a case elsewhere in this file
    elsewhere = set()
    assert set(RULES) - set(BROKEN) - elsewhere == set()


def test_errors_carry_the_line_of_the_element(tmp_path: Path) -> None:
    text = GOOD.replace("count: 2}\n", "count: 2}\n  - {a: leaf1, b: spine0}\n")
    with pytest.raises(FabricFileError) as info:
        load_fabric(write(tmp_path, text))
    assert info.value.line == 11
    assert "first on line 10" in info.value.detail


def test_unknown_node_names_the_host_port_too(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace('ports: ["leaf{server}"]', 'ports: ["leaf{server + 5}"]'))
    with pytest.raises(FabricFileError) as info:
        load_fabric(path)
    assert info.value.rule == "unknown-node"
    assert info.value.element == "host h0 port 0" and "leaf5" in info.value.detail


def test_a_host_named_as_a_link_end_is_refused_with_the_reason(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("b: spine0, gbps", "b: h1, gbps"))
    with pytest.raises(FabricFileError, match="a GPU's links are its ports"):
        load_fabric(path)


def test_disconnected_pair_of_gpus_is_named(tmp_path: Path) -> None:
    # leaf1 loses its uplinks: h0/h1 and h2/h3 have no path
    text = GOOD.replace('a: "leaf{0..1}"', "a: leaf0")
    with pytest.raises(FabricFileError) as info:
        load_fabric(write(tmp_path, text))
    assert info.value.rule == "disconnected"
    assert info.value.element == "hosts h0 and h2"
    # the same rail-only cut is accepted when the file says NVLink forwards inside a server:
    # every server still reaches every other through one of its GPUs
    rails = GOOD.replace(
        '  - {count: 2, gpus: 2, ports: ["leaf{server}"]}',
        '  - {count: 2, gpus: 2, ports: ["leaf{rank}"]}',
    ).replace('a: "leaf{0..1}"', "a: leaf0")
    with pytest.raises(FabricFileError, match="nvlink_forwarding"):
        load_fabric(write(tmp_path, rails))
    loaded = load_fabric(write(tmp_path, "nvlink_forwarding: true\n" + rails))
    assert loaded.nvlink_forwarding


@pytest.mark.parametrize(
    "roles, detail",
    [
        ("{prefill: [h0, h9]}", "h9 is not a GPU"),
        ("{prefill: [h0], decode: [h0]}", "prefill and decode"),
        ("{ep_groups: [[h0, h1], [h2]]}", "unequal sizes"),
        ("{ep_groups: [[h0, h1], [h1, h2]]}", "two EP groups"),
        ("{prefill_servers: 1, ep_servers: 2}", "do not divide"),
    ],
)
def test_roles_that_do_not_fit_the_gpus(tmp_path: Path, roles: str, detail: str) -> None:
    path = write(tmp_path, GOOD + f"roles: {roles}\n")
    with pytest.raises(FabricFileError, match=detail) as info:
        load_fabric(path)
    assert info.value.rule == "roles"


def test_roles_that_fit_are_kept(tmp_path: Path) -> None:
    loaded = load_fabric(write(tmp_path, GOOD + "roles: {prefill: [h0, h1], decode: [h2, h3]}\n"))
    assert loaded.roles is not None and loaded.roles.decode == ("h2", "h3")


def test_unsupported_extension_and_missing_file_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(FabricFileError, match=r"unsupported format \.xlsx") as info:
        load_fabric(tmp_path / "mine.xlsx")
    assert info.value.rule == "format"
    with pytest.raises(FabricFileError, match="cannot read it") as info:
        load_fabric(tmp_path / "absent.yaml")
    assert info.value.rule == "format"


def test_json_is_read_too(tmp_path: Path) -> None:
    import json

    import yaml

    doc = yaml.safe_load(GOOD)
    path = tmp_path / "fab.json"
    path.write_text(json.dumps(doc))
    assert len(load_fabric(path).fabric.hosts) == 4


def test_templates_and_ranges() -> None:
    assert expand_names("leaf{0..2}") == ["leaf0", "leaf1", "leaf2"]
    assert expand_names("p{0..1}t{3..4}") == ["p0t3", "p0t4", "p1t3", "p1t4"]
    assert fill_template("tor{server // 4}x{rank % 2}", {"server": 9, "rank": 3}) == "tor2x1"
    with pytest.raises(ValueError):
        fill_template("{__import__('os')}", {"server": 1})


def test_the_shipped_schema_is_a_valid_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())


# -- export and round trip -------------------------------------------------------------------
BUILT = [
    build_zcube(4),
    build_zcube(4, m=2, gpus_per_server=2),
    build_zcube(6, gpus_per_server=3),
    build_roft(),
    build_roft(servers=8, gpus_per_server=2, servers_per_leaf=2, spines=2),
    build_roft(servers=4, gpus_per_server=2, planes=2),
    build_roft(servers=4, gpus_per_server=4, oversubscription=2, spines=1),
    build_clos(),
    build_clos(servers=8, gpus_per_server=8, spines=4),
]


@pytest.mark.parametrize("built", BUILT, ids=lambda f: f"{f.kind}-{dict(f.spec.params)}")
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_export_then_import_gives_the_same_fabric_rules_and_cost(
    tmp_path: Path, built, suffix: str
) -> None:
    path = write_fabric(built, tmp_path / f"x{suffix}")
    loaded = load_fabric(path)
    f = loaded.fabric
    assert f.hosts == built.hosts
    assert f.switches == built.switches
    assert f.links == built.links
    assert f.nic_gbps == built.nic_gbps
    assert f.notes == built.notes
    for policy in ("ecmp", "static", "ff"):
        assert compute_rules(f, policy) == compute_rules(built, policy)
    assert fabric_cost(f, 1000, 10, "x") == fabric_cost(built, 1000, 10, "x")
    assert fabric_document(f)["hosts"] == fabric_document(built)["hosts"]


def test_export_names_the_origin() -> None:
    doc = fabric_document(build_zcube(4))
    assert doc["origin"] == {"kind": "zcube", "params": dict(build_zcube(4).spec.params)}
    assert doc["format"] == "zcube-fabric/1"


# -- cost of a hand-counted fabric --------------------------------------------------------
def test_cost_of_the_small_leaf_spine_by_hand(tmp_path: Path) -> None:
    text = GOOD + "prices: {switch: 1000, optic_400g: 10}\n"
    cost = fabric_cost(load_fabric(write(tmp_path, text)))
    # 3 switches; 4 NIC links + 4 leaf-spine links, all 400G; 4 + 8 switch ends used
    assert cost.switches == 3
    assert {g.role: g.count for g in cost.switch_groups} == {"leaf": 2, "spine": 1}
    assert {g.role: (g.count, g.gbps) for g in cost.links} == {
        "nic-leaf": (4, 400),
        "leaf-spine": (4, 400),
    }
    assert cost.switch_ports_used == 12
    assert cost.ports_per_switch == 4 and cost.switch_ports_installed == 12
    assert cost.tiers == 2 and cost.diameter_hops == 3
    assert cost.transceiver_ends == 16 and cost.transceiver_ends_400g == 16
    assert cost.capex_total == 3 * 1000 + 16 * 10


@pytest.mark.parametrize("built", BUILT[:1] + BUILT[3:4] + BUILT[7:8], ids=lambda f: f.kind)
def test_cost_tiers_and_diameter_match_the_builtins(built) -> None:
    cost = fabric_cost(built)
    assert cost.diameter_hops == built.diameter()
    assert cost.tiers == (1 if built.kind == "zcube" else 2)
