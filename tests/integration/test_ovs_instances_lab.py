"""The lab on private ovs-vswitchd instances (`LabOptions.ovs_instances`, issue 20): a ZCube
n=4 fabric dealt over 3 instances (uneven: 3, 3, 2 switches), routed by our controller, every
tool addressing the instance that holds each bridge, a vswitchd fault on them, and a teardown
(or a dead lab's leftovers) that removes the instances without a trace."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from zcube_lab.adapters.ports import free_port
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.scale import Scale
from zcube_lab.emulator.lab import ovs, ovsbridges
from zcube_lab.emulator.lab.health import HealthSampler
from zcube_lab.emulator.lab.measure import iperf3, port_tx_bytes
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.options import LabOptions
from zcube_lab.emulator.lab.state import remove_stale_state

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

INSTANCES = 3


def _system_bridges() -> set[str]:
    out = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    fabric = build_fabric(FabricSpec.of("zcube", n=4))
    options = LabOptions(
        scale=Scale(nic_mbps=100.0),
        of_port=free_port(),
        metrics_port=free_port(),
        state_dir=tmp_path_factory.mktemp("state"),
        datapath="user",
        ovs_instances=INSTANCES,
    )
    lab = Lab(fabric, options)
    lab.start()
    rundirs = [inst.rundir for inst in lab.ovs_instances]
    pids = [p for inst in lab.ovs_instances for p in inst.pids().values()]
    try:
        yield lab
    finally:
        lab.stop()
    names = {s.name for s in fabric.switches}
    assert [d for d in rundirs if d.exists()] == []
    assert [p for p in pids if not ovs.exited(p)] == []
    assert not set(ovsbridges.list_bridges()) & names
    # The dummy datapath makes no kernel taps: nothing named after a bridge is left.
    assert [n for n in names if Path(f"/sys/class/net/{n}").exists()] == []


def test_switches_live_in_their_instances_and_are_routed(lab: Lab) -> None:
    assert len(lab.ovs_instances) == INSTANCES
    sizes = [
        sum(1 for i in lab.switch_instance.values() if i == inst) for inst in lab.ovs_instances
    ]
    assert sizes == [3, 3, 2]
    names = {s.name for s in lab.fabric.switches}
    assert not _system_bridges() & names  # none in the system Open vSwitch
    assert names <= set(ovsbridges.list_bridges())
    for s in lab.fabric.switches:
        assert ovs.instance_of(s.name) == lab.switch_instance[s.name]
        argv = [*ovs.vsctl_argv(lab.switch_instance[s.name]), "get-fail-mode", s.name]
        mode = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()
        assert mode == "secure"
    assert lab.rules_installed == lab.expected_rules()
    failures = lab.check_reachability()
    assert {h: v for h, v in failures.items() if v} == {}


def test_traffic_crosses_instances_at_the_link_rate(lab: Lab) -> None:
    """h0 -> h5 over a0 > b1 (a0 and b1 are in different instances): the shaped rate, and
    the port counters of a private bridge (`ovs-ofctl dump-ports` on its socket) see it."""
    f = lab.fabric
    assert lab.switch_instance["a0"] != lab.switch_instance["b1"]
    port = f.switch_adjacency["a0"]["b1"][0][0]
    before = port_tx_bytes("a0", port)
    got = iperf3(lab, "h0", f.host("h5").interfaces[1].ip, seconds=2)
    rate = lab.options.scale.link_mbps(f, f.links[0].gbps)
    assert 0.9 * rate <= got <= 1.05 * rate
    assert port_tx_bytes("a0", port) - before > 1_000_000


def test_the_health_sampler_and_doctor_see_every_instance(lab: Lab) -> None:
    from zcube_lab.emulator.lab.doctor import gather, judge_ovs_instances

    sampler = HealthSampler()
    mine = {inst.pids()["ovs-vswitchd"] for inst in lab.ovs_instances}
    assert mine <= set(sampler._find_datapath())
    check = judge_ovs_instances(gather().ovs_instances)
    assert check.status == "pass" and all(d.rundir.name in check.detail for d in lab.ovs_instances)


def test_a_vswitchd_fault_restarts_every_instance(lab: Lab) -> None:
    old = {inst.pids()["ovs-vswitchd"] for inst in lab.ovs_instances}
    lab.kill_vswitchd()
    lab.start_vswitchd()
    new = {inst.pids()["ovs-vswitchd"] for inst in lab.ovs_instances}
    assert not old & new
    lab.wait_for_routes()  # bridges back from each ovsdb, rules back from the controller
    failures = lab.check_reachability()
    assert {h: v for h, v in failures.items() if v} == {}
    # A fresh ovs-vswitchd deletes the root qdisc of every port it adds: the lab shaped the
    # switch ports again (else the restarted fabric runs unshaped).
    shapes = lab.options.port_shapes(lab.fabric)
    ports = [p for p in lab.fabric.switch_interfaces() if p in shapes]
    assert ports
    for port in ports:
        out = subprocess.run(
            ["tc", "qdisc", "show", "dev", port], capture_output=True, text=True, check=True
        ).stdout
        assert " htb " in out, (port, out)


def test_a_dead_labs_instance_is_swept(tmp_path: Path) -> None:
    dead_owner = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # never a live pid
    inst = ovs.start_instance(ovs.INSTANCE_ROOT / f"{dead_owner}-0")
    pids = list(inst.pids().values())
    assert len(pids) == 2 and ovs.instance_status(inst)[0] == 0
    removed = remove_stale_state(tmp_path)
    assert f"ovs instance {dead_owner}-0" in removed
    assert not inst.rundir.exists()
    assert [p for p in pids if not ovs.exited(p)] == []


def test_bridges_of_an_instance_whose_vswitchd_died_are_deleted_without_waiting() -> None:
    # ovs-vsctl waits for ovs-vswitchd to acknowledge a change: with it dead, a plain del-br
    # waits out its whole --timeout (20 s) on every instance. The database row is what is left.
    inst = ovs.start_instance(ovs.INSTANCE_ROOT / f"{os.getpid()}-99")  # ours: never swept
    try:
        argv = [*ovs.vsctl_argv(inst), "add-br", "zdead0", "--", "set", "bridge", "zdead0"]
        subprocess.run([*argv, "datapath_type=netdev"], check=True, timeout=30)
        vswitchd = inst.pids()[ovs.VSWITCHD]
        subprocess.run(["kill", "-9", str(vswitchd)], check=True)
        while not ovs.exited(vswitchd):
            time.sleep(0.05)
        began = time.monotonic()
        assert ovsbridges.delete_bridges(["zdead0"]) == ["zdead0"]
        took = time.monotonic() - began
        assert "zdead0" not in ovsbridges.list_bridges()
        assert took < 10, f"delete_bridges waited {took:.1f} s for a dead ovs-vswitchd"
    finally:
        ovs.stop_instance(inst)
    assert not inst.rundir.exists()
