"""A fabric split over lab machines as per-machine root scripts: every link made once, as a veth
pair on its machine or as a VXLAN tunnel between two; switch ends shaped as on one machine; the
management network joined into one star around machine 0. Expectations come from the fabric
and its split, read back out of the batch files the scripts run."""

from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass, field

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.clusterplan import (
    machine_link_setup,
    machine_port_setup,
    mgmt_root_address,
    root_interfaces,
    switch_ends,
    tunnel_mtu,
)
from zcube_lab.core.fabric.description import Fabric, FabricSpec, Link
from zcube_lab.core.fabric.hostplan import (
    MGMT_BRIDGE,
    MGMT_ROOT_IP,
    management_address,
    management_interface,
    management_peer,
)
from zcube_lab.core.fabric.linkplan import (
    LinkSettings,
    Setup,
    port_shapes,
    switch_port_setup,
)
from zcube_lab.core.fabric.queues import QueueModel
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.core.fabric.split import Split, split_fabric

ZCUBE4 = build_fabric(FabricSpec.of("zcube", n=4))
ROFT4 = build_fabric(FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2))
CLOS = build_fabric(FabricSpec.of("clos"))
FABRICS = {"zcube4": ZCUBE4, "roft4x4": ROFT4}
ADDRESSES = ("192.0.2.10", "192.0.2.20", "192.0.2.30")
FOLDER = "/run/lab"
MTU = 9000


# -- the fabric and its split, as the tests see them ------------------------------------------


def names(lk: Link) -> tuple[tuple[str, str], tuple[str, str]]:
    """(node, interface) of both ends: Mininet's `<node>-eth<port>`."""
    return ((lk.node1, f"{lk.node1}-eth{lk.port1}"), (lk.node2, f"{lk.node2}-eth{lk.port2}"))


def node_pids(fabric: Fabric) -> dict[str, int]:
    """A made-up shell pid per node, distinct over all machines."""
    nodes = [*(h.name for h in fabric.hosts), *(s.name for s in fabric.switches)]
    return {n: 5000 + i for i, n in enumerate(nodes)}


def interface_macs(fabric: Fabric) -> dict[str, str]:
    """A made-up MAC per link end."""
    ends = [name for lk in fabric.links for _node, name in names(lk)]
    return {name: f"02:00:00:00:{i // 256:02x}:{i % 256:02x}" for i, name in enumerate(ends)}


def own_pids(split: Split, machine: int) -> dict[str, int]:
    """Only the pids of `machine`'s nodes: a pid means nothing on another machine."""
    return {n: p for n, p in node_pids(split.fabric).items() if split.machine_of(n) == machine}


def settings(fabric: Fabric, management: bool = False) -> LinkSettings:
    shapes = port_shapes(fabric, Scale(), MTU, QueueModel())
    return LinkSettings(mtu=MTU, shapes=shapes, management=management)


def switch_ends_of(split: Split, machine: int) -> set[str]:
    """Every switch end on `machine`, from the links and the split alone."""
    return {
        name
        for lk in split.fabric.links
        for node, name in names(lk)
        if split.fabric.is_switch(node) and split.switch_machine[node] == machine
    }


# -- reading the scripts ----------------------------------------------------------------------


def commands(setup: Setup) -> list[str]:
    """Every command the setup's script runs, batch files expanded to `<tool> <line>`."""
    files = dict(setup.files)
    assert setup.argv[0] == "sh"
    lines = files[setup.argv[1]].splitlines()
    assert lines[0] == "set -e"
    out = []
    for line in lines[1:]:
        argv = shlex.split(line.removesuffix(" >/dev/null 2>&1 || true"))
        if argv[1:2] == ["-batch"]:
            out += [f"{argv[0]} {text}" for text in files[argv[2]].splitlines()]
        else:
            out.append(shlex.join(argv))
    return out


def created(line: str) -> list[dict[str, str]]:
    """The devices one `link add` line makes, each as its keyword -> value (a veth: two)."""
    words = line.split()[2:]
    if words[0] != "name":
        words = ["name", *words]
    parts = [words]
    if "peer" in words:
        at = words.index("peer")
        parts = [words[:at], words[at + 1 :]]
    devices = [dict(zip(p[::2], p[1::2], strict=True)) for p in parts]
    for d in devices:
        d.setdefault("type", devices[0]["type"])
    return devices


@dataclass
class RootBatch:
    """One machine's `ip` lines, sorted out: devices made, moves, the rest."""

    devices: list[dict[str, str]] = field(default_factory=list)
    veth_pairs: list[frozenset[str]] = field(default_factory=list)
    moved: dict[str, int] = field(default_factory=dict)
    other: list[str] = field(default_factory=list)


def root_batch(setup: Setup) -> RootBatch:
    """Sort out the `ip` lines of a machine's link script."""
    out = RootBatch()
    for cmd in commands(setup):
        if not cmd.startswith("ip "):
            continue
        line = cmd.removeprefix("ip ")
        words = line.split()
        if words[:2] == ["link", "add"]:
            made = created(line)
            out.devices += made
            if len(made) == 2:
                out.veth_pairs.append(frozenset(d["name"] for d in made))
        elif words[:2] == ["link", "set"] and "netns" in words:
            dev = words[3] if words[2] == "dev" else words[2]
            assert dev not in out.moved, dev
            out.moved[dev] = int(words[words.index("netns") + 1])
        else:
            out.other.append(line)
    return out


def link_batches(split: Split, management: bool = False) -> list[RootBatch]:
    """Every machine's link script, read back; each gets only its own nodes' pids."""
    s = settings(split.fabric, management)
    macs = interface_macs(split.fabric)
    return [
        root_batch(
            machine_link_setup(
                split, k, ADDRESSES[: split.machines], own_pids(split, k), macs, s, FOLDER
            )
        )
        for k in range(split.machines)
    ]


def per_device(lines: list[str], tool: str, at: int) -> dict[str, list[str]]:
    """`tool` lines grouped by the device named at word `at`, the device name blanked out."""
    out: dict[str, list[str]] = {}
    for line in lines:
        words = line.split()
        if words[0] == tool:
            dev = words[at]
            words[at] = "DEV"
            out.setdefault(dev, []).append(" ".join(words))
    return out


CASES = [(name, m) for name in FABRICS for m in (2, 3)]


# -- links ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "machines"), CASES)
def test_every_link_is_one_veth_pair_on_its_machine_or_one_tunnel_end_on_each(
    name: str, machines: int
) -> None:
    fabric = FABRICS[name]
    split = split_fabric(fabric, machines)
    batches = link_batches(split)
    made_where = Counter((d["name"], k) for k, b in enumerate(batches) for d in b.devices)
    pairs = [set(b.veth_pairs) for b in batches]
    vxlan = {
        d["name"]: (k, d) for k, b in enumerate(batches) for d in b.devices if d["type"] == "vxlan"
    }
    vnis = []
    inside = cut = 0
    for lk in fabric.links:
        (n1, e1), (n2, e2) = names(lk)
        m1, m2 = split.machine_of(n1), split.machine_of(n2)
        if m1 == m2:
            inside += 1
            assert [k for k, p in enumerate(pairs) if frozenset((e1, e2)) in p] == [m1], (e1, e2)
            assert e1 not in vxlan and e2 not in vxlan
            assert made_where[(e1, m1)] == made_where[(e2, m1)] == 1
        else:
            cut += 1
            (k1, d1), (k2, d2) = vxlan[e1], vxlan[e2]
            assert (k1, k2) == (m1, m2), (e1, e2)
            assert made_where[(e1, m1)] == made_where[(e2, m2)] == 1
            assert d1["id"] == d2["id"]
            assert (d1["local"], d1["remote"]) == (ADDRESSES[m1], ADDRESSES[m2])
            assert (d2["local"], d2["remote"]) == (ADDRESSES[m2], ADDRESSES[m1])
            assert d1["dstport"] == d2["dstport"]
            vnis.append(d1["id"])
    assert inside and cut  # both kinds are exercised
    assert len(set(vnis)) == len(vnis) == len(split.cut_links)
    # Nothing else is made: every device is one end of one fabric link, made once overall.
    assert sum(made_where.values()) == 2 * len(fabric.links)
    assert all(n == 1 for n in Counter(name for name, _k in made_where).values())


@pytest.mark.parametrize(("name", "machines"), CASES)
def test_ends_go_to_their_nodes_namespaces_with_the_given_macs(name: str, machines: int) -> None:
    fabric = FABRICS[name]
    split = split_fabric(fabric, machines)
    pids, macs = node_pids(fabric), interface_macs(fabric)
    node_of = {end: node for lk in fabric.links for node, end in names(lk)}
    host_tunnel_ends = 0
    for batch in link_batches(split):
        for d in batch.devices:
            node = node_of[d["name"]]
            assert d["address"] == macs[d["name"]]
            if d["type"] == "veth":
                assert int(d["netns"]) == pids[node]
            elif fabric.is_switch(node):
                assert "netns" not in d
                assert d["name"] not in batch.moved  # Open vSwitch's ports live in the root
            else:
                assert batch.moved[d["name"]] == pids[node]
                host_tunnel_ends += 1
        # Only tunnel ends of hosts are moved after they are made.
        assert set(batch.moved) <= {d["name"] for d in batch.devices if d["type"] == "vxlan"}
    cut_host_ends = sum(
        not fabric.is_switch(node) for lk in split.cut_links for node, _e in names(lk)
    )
    assert host_tunnel_ends == cut_host_ends
    if name == "zcube4":
        assert cut_host_ends > 0  # ZCube cuts host-B links: host ends are exercised


def test_switch_ends_lose_ipv6_then_come_up_after_every_device_is_made() -> None:
    split = split_fabric(ZCUBE4, 2)
    macs = interface_macs(ZCUBE4)
    for k in range(2):
        setup = machine_link_setup(
            split, k, ADDRESSES[:2], own_pids(split, k), macs, settings(ZCUBE4), FOLDER
        )
        cmds = commands(setup)
        [sysctl] = [c for c in cmds if c.startswith("sysctl")]
        off = {kv.removeprefix("net.ipv6.conf.").split(".")[0] for kv in sysctl.split()[3:]}
        up = [
            i for i, c in enumerate(cmds) if c.startswith("ip link set dev") and c.endswith(" up")
        ]
        assert off == {cmds[i].split()[4] for i in up} == switch_ends_of(split, k)
        last_add = max(i for i, c in enumerate(cmds) if c.startswith("ip link add"))
        assert last_add < cmds.index(sysctl) < min(up)


@pytest.mark.parametrize(
    ("fabric", "machines"),
    [(ZCUBE4, 2), (ZCUBE4, 3), (ZCUBE4, 4), (ROFT4, 2), (ROFT4, 3), (CLOS, 2)],
    ids=lambda v: v.spec.kind if isinstance(v, Fabric) else str(v),
)
def test_switch_ends_partition_the_fabrics_switch_interfaces(fabric: Fabric, machines: int) -> None:
    split = split_fabric(fabric, machines)
    parts = [switch_ends(split, k) for k in range(machines)]
    everything = [n for p in parts for n in p]
    assert len(everything) == len(set(everything))
    assert sorted(everything) == sorted(fabric.switch_interfaces())
    for k, part in enumerate(parts):
        assert set(part) == switch_ends_of(split, k)
        assert list(part) == sorted(part)


def test_the_wrong_number_of_addresses_is_refused() -> None:
    split = split_fabric(ZCUBE4, 2)
    pids, macs = own_pids(split, 0), interface_macs(ZCUBE4)
    for addresses in (ADDRESSES[:1], ADDRESSES[:3]):
        with pytest.raises(ConfigError) as err:
            machine_link_setup(split, 0, addresses, pids, macs, settings(ZCUBE4), FOLDER)
        assert err.value.field == "machines"


def test_a_machine_outside_the_split_is_refused() -> None:
    split = split_fabric(ZCUBE4, 2)
    pids, macs = own_pids(split, 0), interface_macs(ZCUBE4)
    for machine in (-1, 2):
        with pytest.raises(ConfigError) as err:
            machine_link_setup(split, machine, ADDRESSES[:2], pids, macs, settings(ZCUBE4), FOLDER)
        assert err.value.field == "machine"


# -- switch ports -----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "machines"), CASES)
def test_each_machine_shapes_exactly_its_switch_ends_as_one_machine_would(
    name: str, machines: int
) -> None:
    fabric = FABRICS[name]
    split = split_fabric(fabric, machines)
    s = settings(fabric)
    one_machine = commands(switch_port_setup(fabric, s, FOLDER))
    tc_one, ethtool_one = per_device(one_machine, "tc", 4), per_device(one_machine, "ethtool", 2)
    for k in range(machines):
        cmds = commands(machine_port_setup(split, k, s, FOLDER))
        tc, ethtool = per_device(cmds, "tc", 4), per_device(cmds, "ethtool", 2)
        assert set(tc) == set(ethtool) == switch_ends_of(split, k)
        for dev in tc:
            # On one machine every end is a veth; here tunnel ends get the very same lines.
            assert tc[dev] == tc_one[dev], dev
            assert ethtool[dev] == ethtool_one[dev], dev
            shape = s.shapes[dev]
            assert any(f"htb rate {shape.mbps:f}Mbit" in line for line in tc[dev]), dev
            assert any(line.endswith(f"pfifo limit {shape.packets}") for line in tc[dev]), dev


@pytest.mark.parametrize("name", FABRICS)
def test_a_tunnel_end_is_shaped_like_a_veth_end_of_the_same_kind_of_link(name: str) -> None:
    fabric = FABRICS[name]
    split = split_fabric(fabric, 2)
    cut = set(split.cut_links)
    compared = 0
    for k in range(2):
        cmds = commands(machine_port_setup(split, k, settings(fabric), FOLDER))
        tc, ethtool = per_device(cmds, "tc", 4), per_device(cmds, "ethtool", 2)
        kinds: dict[tuple[float, bool], dict[bool, str]] = {}
        for lk in fabric.links:
            for node, end in names(lk):
                far = lk.other(node)[0]
                if fabric.is_switch(node) and split.switch_machine[node] == k:
                    kind = (lk.gbps, fabric.is_switch(far))
                    kinds.setdefault(kind, {})[lk in cut] = end
        for ends in kinds.values():
            if True in ends and False in ends:
                tunnel, veth = ends[True], ends[False]
                assert tc[tunnel] == tc[veth]
                assert ethtool[tunnel] == ethtool[veth]
                compared += 1
    assert compared > 0


# -- management network -----------------------------------------------------------------------


@pytest.mark.parametrize(("name", "machines"), CASES)
def test_management_bridges_join_in_a_star_around_machine_zero(name: str, machines: int) -> None:
    fabric = FABRICS[name]
    split = split_fabric(fabric, machines)
    pids = node_pids(fabric)
    batches = link_batches(split, management=True)
    bridge_addresses = []
    tunnels: dict[tuple[int, str], dict[str, str]] = {}
    fabric_ends = set(interface_macs(fabric))
    fabric_vnis = {
        d["id"]
        for b in batches
        for d in b.devices
        if d["type"] == "vxlan" and d["name"] in fabric_ends
    }
    for k, batch in enumerate(batches):
        [bridge] = [d for d in batch.devices if d["type"] == "bridge"]
        assert bridge["name"] == MGMT_BRIDGE
        [addr] = [line for line in batch.other if line.startswith("addr add")]
        assert addr.split()[-1] == MGMT_BRIDGE
        bridge_addresses.append(addr.split()[2].split("/")[0])
        assert bridge_addresses[-1] == mgmt_root_address(k)
        # Its own hosts' management veths, the inner end in the host, the outer on the bridge.
        mine = [h for h in fabric.hosts if split.host_machine[h.name] == k]
        veths = {pair for pair in batch.veth_pairs if not pair & fabric_ends}
        assert veths == {frozenset((management_peer(h), management_interface(h))) for h in mine}
        for h in mine:
            assert batch.moved[management_interface(h)] == pids[h.name]
            assert f"link set {management_peer(h)} master {MGMT_BRIDGE} up" in batch.other
        for d in batch.devices:
            if d["type"] == "vxlan" and d["name"] not in fabric_ends:
                assert d["local"] == ADDRESSES[k]
                assert f"link set {d['name']} master {MGMT_BRIDGE} up" in batch.other
                tunnels[(k, d["remote"])] = d
    assert bridge_addresses[0] == MGMT_ROOT_IP
    assert len(set(bridge_addresses)) == machines
    assert not set(bridge_addresses) & {management_address(h.gid) for h in fabric.hosts}
    # A star: machine 0 has a tunnel to each other machine, each other machine one to 0.
    at = {addr: k for k, addr in enumerate(ADDRESSES[:machines])}
    edges = sorted((k, at[remote]) for k, remote in tunnels)
    assert edges == sorted(
        [(0, k) for k in range(1, machines)] + [(k, 0) for k in range(1, machines)]
    )
    vnis = set()
    for k in range(1, machines):
        hub, spoke = tunnels[(0, ADDRESSES[k])], tunnels[(k, ADDRESSES[0])]
        assert hub["id"] == spoke["id"]
        assert hub["dstport"] == spoke["dstport"]
        vnis.add(hub["id"])
    assert len(vnis) == machines - 1
    assert not vnis & fabric_vnis


def test_management_root_addresses_count_down_from_the_one_machine_address() -> None:
    assert mgmt_root_address(0) == MGMT_ROOT_IP == "198.19.127.254"
    assert [mgmt_root_address(k) for k in (1, 2, 3)] == [
        "198.19.127.253",
        "198.19.127.252",
        "198.19.127.251",
    ]


@pytest.mark.parametrize(("name", "machines"), CASES)
@pytest.mark.parametrize("management", [False, True])
def test_root_interfaces_are_what_the_scripts_leave_in_the_root_namespace(
    name: str, machines: int, management: bool
) -> None:
    fabric = FABRICS[name]
    split = split_fabric(fabric, machines)
    host_pids = {p for n, p in node_pids(fabric).items() if not fabric.is_switch(n)}
    for k, batch in enumerate(link_batches(split, management)):
        in_hosts = {
            d["name"]
            for d in batch.devices
            if int(d.get("netns", 0)) in host_pids or batch.moved.get(d["name"]) in host_pids
        }
        left = {d["name"] for d in batch.devices} - in_hosts
        listed = root_interfaces(split, k, management)
        assert len(listed) == len(set(listed))
        assert set(listed) == left, k


# -- MTU --------------------------------------------------------------------------------------


def test_the_lab_mtu_must_fit_the_wire_after_the_vxlan_header() -> None:
    assert tunnel_mtu(9000, 9100) == 9000
    assert tunnel_mtu(9050, 9100) == 9050  # exactly the 50-byte VXLAN header left
    for lab, wire in ((9000, 9000), (9051, 9100), (1500, 1500)):
        with pytest.raises(ConfigError, match="mtu") as err:
            tunnel_mtu(lab, wire)
        assert err.value.field == "mtu"
        assert err.value.value == lab
