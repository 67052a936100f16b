"""Importers: SimAI / HPCC ns-3 text, GraphML and GML through NetworkX, containerlab YAML.
Each gives a validated fabric and says what it assumed; bad input is one error line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from zcube_lab.core.fabric.files import FabricFileError, load_fabric
from zcube_lab.core.fabric.files.importers import parse_gbps, parse_latency_us

# A SimAI-style dual-ToR dual-plane file, written by hand in the layout SimAI's generator uses:
# GPUs 0-3 (2 per server), NVSwitches 4-5 (one per server), plane-1 ToRs 6-7 (per rail), plane-2
# ToRs 8-9, one aggregation switch per plane (10, 11).
SIMAI = """\
12 2 2 6 16 H100
4 5 6 7 8 9 10 11
0 4 2880Gbps 0.000025ms 0
0 6 200Gbps 0.0005ms 0
0 8 200Gbps 0.0005ms 0
1 4 2880Gbps 0.000025ms 0
1 7 200Gbps 0.0005ms 0
1 9 200Gbps 0.0005ms 0
2 5 2880Gbps 0.000025ms 0
2 6 200Gbps 0.0005ms 0
2 8 200Gbps 0.0005ms 0
3 5 2880Gbps 0.000025ms 0
3 7 200Gbps 0.0005ms 0
3 9 200Gbps 0.0005ms 0
6 10 400Gbps 0.0005ms 0
7 10 400Gbps 0.0005ms 0
8 11 400Gbps 0.0005ms 0
9 11 400Gbps 0.0005ms 0
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_rates_and_latencies() -> None:
    assert parse_gbps("200Gbps") == 200
    assert parse_gbps("100Mbps") == pytest.approx(0.1)
    assert parse_gbps("1.6Tbps") == pytest.approx(1600)
    assert parse_gbps("fast") is None
    assert parse_latency_us("0.0005ms") == pytest.approx(0.5)
    assert parse_latency_us("2us") == 2
    assert parse_latency_us("0.001") == pytest.approx(1.0)  # SimAI's bare numbers are ms


def test_simai_dual_tor_dual_plane(tmp_path: Path) -> None:
    loaded = load_fabric(write(tmp_path, "hpn.txt", SIMAI))
    f = loaded.fabric
    assert [(h.name, h.server, h.rank) for h in f.hosts] == [
        ("h0", 0, 0),
        ("h1", 0, 1),
        ("h2", 1, 0),
        ("h3", 1, 1),
    ]
    assert [f.attachments[("h1", k)].switch for k in (0, 1)] == ["s7", "s9"]
    assert f.nic_gbps == 400
    assert {s.name: s.role for s in f.switches} == {
        "s6": "tor",
        "s7": "tor",
        "s8": "tor",
        "s9": "tor",
        "s10": "agg",
        "s11": "agg",
    }
    assert len(f.links) == 8 + 4  # NVLink lines left out
    assert f.host_hops("h0", "h2") == 1 and f.host_hops("h0", "h1") == 3
    assert any("NVSwitches" in a for a in loaded.assumptions)
    link = next(lk for lk in f.links if {lk.node1, lk.node2} == {"s6", "s10"})
    assert loaded.latency_us[link] == pytest.approx(0.5) and link.gbps == 400


def test_simai_old_header_and_parallel_lines(tmp_path: Path) -> None:
    text = "4 2 5\n2 3\n0 2 100Gbps 0.001ms 0\n1 3 100Gbps 0.001ms 0\n2 3 100Gbps 0.001ms 0\n"
    text += "2 3 100Gbps 0.001ms 0\n2 3 100Gbps 0.001ms 0\n"
    loaded = load_fabric(write(tmp_path, "old.txt", text))
    f = loaded.fabric
    assert [h.server for h in f.hosts] == [0, 1]
    assert sum(1 for lk in f.links if {lk.node1, lk.node2} == {"s2", "s3"}) == 3
    assert any("parallel links" in a for a in loaded.assumptions)
    assert any("its own server" in a for a in loaded.assumptions)


@pytest.mark.parametrize(
    "text, line, rule, detail",
    [
        ("12 2 2 6 16 H100\n4 5 6\n", 2, "syntax", "3 switch ids, the header says 8"),
        (SIMAI.replace("6 10 400Gbps", "6 99 400Gbps"), 15, "unknown-node", "99 is not a node"),
        (SIMAI.replace("0 6 200Gbps", "0 6 lots"), 4, "syntax", "rate 'lots'"),
        ("x y z\n1\n", 1, "syntax", "not a SimAI/HPCC header"),
        (SIMAI.replace("12 2 2 6 16", "12 2 2 6 17"), 1, "syntax", "says 17 links"),
        (
            SIMAI.replace("0 6 200Gbps 0.0005ms 0\n0 8 200Gbps 0.0005ms 0\n", "").replace(
                " 16 H100", " 14 H100"
            ),
            None,
            "host-without-link",
            "no NIC port",
        ),
    ],
)
def test_simai_errors_name_the_line(
    tmp_path: Path, text: str, line: int | None, rule: str, detail: str
) -> None:
    with pytest.raises(FabricFileError) as info:
        load_fabric(write(tmp_path, "bad.txt", text))
    assert info.value.rule == rule and detail in info.value.detail, str(info.value)
    if line is not None:
        assert info.value.line == line


GRAPHML = """\
<?xml version="1.0" encoding="UTF-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key id="type" for="node" attr.name="type" attr.type="string"/>
  <key id="server" for="node" attr.name="server" attr.type="int"/>
  <key id="gbps" for="edge" attr.name="gbps" attr.type="double"/>
  <graph edgedefault="undirected">
    <node id="gpu0"><data key="type">gpu</data><data key="server">0</data></node>
    <node id="gpu1"><data key="type">gpu</data><data key="server">0</data></node>
    <node id="gpu2"><data key="type">gpu</data><data key="server">1</data></node>
    <node id="tor0"/><node id="tor1"/><node id="spine"/>
    <edge source="gpu0" target="tor0"><data key="gbps">400</data></edge>
    <edge source="gpu1" target="tor0"><data key="gbps">400</data></edge>
    <edge source="gpu2" target="tor1"><data key="gbps">400</data></edge>
    <edge source="tor0" target="spine"><data key="gbps">800</data></edge>
    <edge source="tor0" target="spine"><data key="gbps">800</data></edge>
    <edge source="tor1" target="spine"/>
  </graph>
</graphml>
"""


def test_graphml_with_typed_nodes(tmp_path: Path) -> None:
    loaded = load_fabric(write(tmp_path, "pod.graphml", GRAPHML))
    f = loaded.fabric
    assert [(h.server, h.rank) for h in f.hosts] == [(0, 0), (0, 1), (1, 0)]
    assert {s.name: s.role for s in f.switches} == {"tor0": "tor", "tor1": "tor", "spine": "agg"}
    parallel = [lk for lk in f.links if {lk.node1, lk.node2} == {"tor0", "spine"}]
    assert [lk.gbps for lk in parallel] == [800, 800]
    assert any("1 link(s) without a rate" in a for a in loaded.assumptions)
    assert f.host_hops("h0", "h2") == 3


GML = """\
graph [
  node [ id 0 label "Amsterdam" ]
  node [ id 1 label "Berlin" ]
  node [ id 2 label "Paris" ]
  edge [ source 0 target 1 LinkSpeed "10" LinkSpeedUnits "G" LinkSpeedRaw 10000000000.0 ]
  edge [ source 1 target 2 LinkSpeedRaw 100000000000.0 ]
  edge [ source 0 target 2 ]
]
"""


def test_gml_topology_zoo_style_gets_one_gpu_per_node(tmp_path: Path) -> None:
    loaded = load_fabric(write(tmp_path, "zoo.gml", GML))
    f = loaded.fabric
    assert len(f.hosts) == 3 and len(f.switches) == 3
    rates = sorted(lk.gbps for lk in f.links if f.is_switch(lk.node1) and f.is_switch(lk.node2))
    assert rates == [10, 100, 400]  # LinkSpeed+Units, LinkSpeedRaw, the default
    assert any("one GPU attached to each" in a for a in loaded.assumptions)
    assert any("without a rate" in a for a in loaded.assumptions)


def test_bad_graph_files_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(FabricFileError) as info:
        load_fabric(write(tmp_path, "bad.graphml", "<graphml><graph>"))
    assert info.value.rule == "syntax"
    cut = GRAPHML.replace(
        '<edge source="gpu2" target="tor1"><data key="gbps">400</data></edge>', ""
    )
    with pytest.raises(FabricFileError) as info:
        load_fabric(write(tmp_path, "cut.graphml", cut))
    assert info.value.rule == "host-without-link" and info.value.element == "host h2"


CLAB = """\
name: small
topology:
  nodes:
    leaf1: {kind: nokia_srlinux}
    leaf2: {kind: nokia_srlinux}
    spine1: {kind: nokia_srlinux}
    gpu1: {kind: linux}
    gpu2: {kind: linux}
  links:
    - endpoints: ["leaf1:e1-1", "gpu1:eth1"]
    - endpoints: ["leaf2:e1-1", "gpu2:eth1"]
    - endpoints: ["leaf1:e1-49", "spine1:e1-1"]
    - endpoints: ["leaf2:e1-49", "spine1:e1-2"]
"""


def test_containerlab_keeps_port_numbers_and_says_rates_are_assumed(tmp_path: Path) -> None:
    loaded = load_fabric(write(tmp_path, "small.clab.yml", CLAB))
    f = loaded.fabric
    assert f.attachments[("h1", 0)].switch == "leaf2" and f.attachments[("h1", 0)].port == 1
    up = next(lk for lk in f.links if {lk.node1, lk.node2} == {"leaf1", "spine1"})
    assert {(up.node1, up.port1), (up.node2, up.port2)} == {("leaf1", 49), ("spine1", 1)}
    assert all(lk.gbps == 400 for lk in f.links)
    assert any("carries no rates" in a for a in loaded.assumptions)
    assert {s.name: s.role for s in f.switches}["spine1"] == "agg"


def test_containerlab_unknown_node_names_the_line(tmp_path: Path) -> None:
    text = CLAB.replace('"leaf2:e1-49", "spine1:e1-2"', '"leaf2:e1-49", "spine9:e1-2"')
    with pytest.raises(FabricFileError) as info:
        load_fabric(write(tmp_path, "small.clab.yml", text))
    assert info.value.rule == "unknown-node" and info.value.line == 13


def test_format_override_reads_any_name(tmp_path: Path) -> None:
    loaded = load_fabric(write(tmp_path, "hpn.topology", SIMAI), "simai")
    assert len(loaded.fabric.hosts) == 4


def test_containerlab_server_labels_group_gpus(tmp_path: Path) -> None:
    text = CLAB.replace("gpu1: {kind: linux}", "gpu1: {kind: linux, labels: {server: 0}}").replace(
        "gpu2: {kind: linux}", "gpu2: {kind: linux, labels: {server: 0}}"
    )
    f = load_fabric(write(tmp_path, "small.clab.yml", text)).fabric
    assert [(h.server, h.rank) for h in f.hosts] == [(0, 0), (0, 1)]


IMPORTS = Path(__file__).resolve().parents[2] / "examples" / "fabrics" / "imports"


@pytest.mark.parametrize(
    "name, gpus",
    [
        ("simai-dual-tor-dual-plane.txt", 4),
        ("pod.graphml", 3),
        ("zoo-triangle.gml", 3),
        ("small.clab.yml", 2),
    ],
)
def test_the_import_examples_load_and_say_what_they_assumed(name: str, gpus: int) -> None:
    loaded = load_fabric(IMPORTS / name)
    assert len(loaded.fabric.hosts) == gpus
    assert loaded.assumptions
