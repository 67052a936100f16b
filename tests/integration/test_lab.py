"""The real thing: each fabric at its small default built in Mininet on Open vSwitch, routed
only by our controller's rules, checked end to end, then torn down without leftovers."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from zcube_lab.adapters.ports import free_port
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.linkplan import offload_settings
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.lab.measure import group_bucket_packets, iperf3, port_tx_bytes
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.options import LabOptions

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

NIC_MBPS = 100.0
SPECS = {
    "zcube": FabricSpec.of("zcube", n=4),
    "roft": FabricSpec.of("roft", servers=4, gpus_per_server=4, spines=2),
    "clos": FabricSpec.of("clos"),
}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text()


@pytest.fixture(scope="module", params=sorted(SPECS))
def lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    fabric = build_fabric(SPECS[request.param])
    options = LabOptions(
        scale=Scale(nic_mbps=NIC_MBPS),
        of_port=free_port(),
        metrics_port=free_port(),
        state_dir=tmp_path_factory.mktemp("state"),
    )
    lab = Lab(fabric, options)
    lab.start()
    state = json.loads(lab.state_file.read_text())
    try:
        yield lab
    finally:
        lab.stop()
    # Nothing of ours remains: bridges, root-side interfaces, processes, state.
    bridges = set(
        subprocess.run(
            ["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert not bridges & {s.name for s in fabric.switches}
    assert [i for i in state["interfaces"] if Path(f"/sys/class/net/{i}").exists()] == []
    assert [p for p in state["pids"] if _alive(p)] == []
    assert len(state["pids"]) == len(fabric.hosts) + 1  # host shells and the controller
    assert not lab.state_file.exists()


def test_all_pairs_reach_through_controller_rules_only(lab: Lab) -> None:
    failures = lab.check_reachability()
    assert {h: v for h, v in failures.items() if v} == {}
    assert lab.rules_installed == lab.expected_rules()
    for s in lab.fabric.switches:
        mode = subprocess.run(
            ["ovs-vsctl", "get-fail-mode", s.name], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert mode == "secure"  # no standalone learning switch behind our back
        flows = subprocess.run(
            ["ovs-ofctl", "-O", "OpenFlow13", "dump-flows", s.name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "NORMAL" not in flows and "FLOOD" not in flows


# ethtool's names of the features `ethtool -K` sets by their short names.
FEATURES = {
    "tx": "tx-checksumming",
    "rx": "rx-checksumming",
    "tso": "tcp-segmentation-offload",
    "gso": "generic-segmentation-offload",
    "gro": "generic-receive-offload",
}


def _root(*argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True).stdout


def test_every_interface_is_shaped_and_set_as_planned(lab: Lab) -> None:
    """The batch scripts (zcube_lab.emulator.lab.links) left HTB at the link's rate with the queue
    model's FIFO under it on every switch port and on one host's ports, the MTU, the link up,
    and the offloads of the lab's datapath."""
    f = lab.fabric
    shapes = lab.options.port_shapes(f)
    features = offload_settings(lab.datapath == "user")
    root_qdiscs = _root("tc", "qdisc", "show")
    for name in f.switch_interfaces():
        assert re.search(rf"qdisc htb 5: dev {name} root .*default (0x)?1\b", root_qdiscs), name
        limit = rf"qdisc pfifo 10: dev {name} parent 5:1 limit {shapes[name].packets}p"
        assert re.search(limit, root_qdiscs), name
    host = lab.net.get(f.hosts[0].name)
    checks = [(i.name, host.cmd) for i in f.hosts[0].interfaces]
    checks.append((f.switch_interfaces()[0], lambda *argv: _root(*argv)))
    for name, run in checks:
        shape = shapes[name]
        qdiscs = run("tc", "qdisc", "show", "dev", name)
        assert re.search(r"qdisc htb 5: root .*default (0x)?1\b", qdiscs), qdiscs
        assert f"qdisc pfifo 10: parent 5:1 limit {shape.packets}p" in qdiscs, qdiscs
        classes = run("tc", "class", "show", "dev", name)
        assert re.search(rf"class htb 5:1 .*\brate {shape.mbps:g}Mbit\b", classes), classes
        link = run("ip", "link", "show", "dev", name)
        assert f"mtu {lab.options.mtu} " in link and "state UP" in link, link
        offloads = run("ethtool", "-k", name)
        for short, state in features:
            assert re.search(rf"^{FEATURES[short]}: {state}", offloads, re.M), (name, short)


def test_uncontended_path_reaches_90_percent_of_link_rate(lab: Lab) -> None:
    f = lab.fabric
    src = f.hosts[0]
    # A path where the first link is the bottleneck and nothing else runs.
    dst = f.hosts[-1]
    dst_ip = dst.interfaces[-1].ip
    out_if = 0
    if f.kind == "zcube":
        from zcube_lab.core.fabric.hostplan import egress_interface

        out_if = egress_interface(src, dst_ip)
    link = next(lk for lk in f.links if (lk.node1, lk.port1) == (src.name, out_if))
    rate = lab.options.scale.link_mbps(f, link.gbps)
    got = iperf3(lab, src.name, dst_ip, seconds=3)
    assert got >= 0.9 * rate, f"{got:.1f} Mb/s on a {rate:.0f} Mb/s link"
    assert got <= 1.05 * rate, f"{got:.1f} Mb/s exceeds the {rate:.0f} Mb/s limit"


def test_multipath_is_used(lab: Lab) -> None:
    """ROFT and Clos spread parallel flows over select-group buckets; ZCube's two disjoint
    paths are chosen by the destination address (port 1 or port 2)."""
    if lab.fabric.kind == "zcube":
        _check_zcube_addresses_select_the_two_disjoint_paths(lab)
    else:
        _check_parallel_flows_spread_over_select_group_buckets(lab)


def _check_parallel_flows_spread_over_select_group_buckets(lab: Lab) -> None:
    f = lab.fabric
    # h0 to a host under another leaf: leaf0 > spine > leaf, several equal-cost uplinks.
    dst = next(h for h in f.hosts if f.attachments[(h.name, 0)].switch != "leaf0")
    before = group_bucket_packets("leaf0")
    iperf3(lab, "h0", dst.interfaces[0].ip, seconds=2, parallel=8)
    after = group_bucket_packets("leaf0")
    used = 0
    for gid, counts in after.items():
        old = before.get(gid, [0] * len(counts))
        used = max(used, sum(1 for a, b in zip(counts, old, strict=True) if a - b > 100))
    assert used > 1, f"bucket counters before {before} after {after}"


def _check_zcube_addresses_select_the_two_disjoint_paths(lab: Lab) -> None:
    f = lab.fabric
    n = dict(f.spec.params)["n"]
    # h0 (segment 0, rail 0) to h5 (segment 1, rail 1).
    a0_to_b1 = f.switch_adjacency["a0"]["b1"][0][0]
    b0_to_a1 = f.switch_adjacency["b0"]["a1"][0][0]
    assert (a0_to_b1, b0_to_a1) == (n + 2, n + 2)
    for dst_if, used, unused in (
        (1, ("a0", a0_to_b1), ("b0", b0_to_a1)),
        (0, ("b0", b0_to_a1), ("a0", a0_to_b1)),
    ):
        before_used, before_unused = port_tx_bytes(*used), port_tx_bytes(*unused)
        iperf3(lab, "h0", f.host("h5").interfaces[dst_if].ip, seconds=1)
        sent = port_tx_bytes(*used) - before_used
        assert sent > 1_000_000, f"{used} carried {sent} bytes"
        assert port_tx_bytes(*unused) - before_unused < sent / 100
