"""Private Open vSwitch instances (`LabOptions.ovs_instances`) without OVS: how switches are
dealt to them, how a bridge finds its instance (its management socket), which folders the stale
sweep takes, how Mininet's batched ovs-vsctl commands are addressed, and that the health
sampler counts every instance's daemon."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from zcube_lab.core.errors import ConfigError
from zcube_lab.emulator.lab import ovs
from zcube_lab.emulator.lab.health import HealthSampler
from zcube_lab.emulator.lab.nodes import _by_instance, _vsctl_run
from zcube_lab.emulator.lab.options import LabOptions
from zcube_lab.emulator.lab.ovs import instance_groups


def test_switches_are_dealt_in_contiguous_even_runs() -> None:
    names = [f"A{i}" for i in range(4)] + [f"B{i}" for i in range(4)]
    assert instance_groups(names, 2) == [names[:4], names[4:]]
    assert instance_groups(names, 8) == [[n] for n in names]
    assert instance_groups(names, 3) == [names[:3], names[3:6], names[6:]]
    assert instance_groups(names, 20) == [[n] for n in names]  # never an empty instance
    assert instance_groups(names, 1) == [names]


def test_options_refuse_bad_instance_counts() -> None:
    assert LabOptions(ovs_instances=2).ovs_instances == 2
    with pytest.raises(ConfigError, match="ovs_instances"):
        LabOptions(ovs_instances=-1)
    with pytest.raises(ConfigError, match="ovs_instances"):
        LabOptions(ovs_instances=65)
    with pytest.raises(ConfigError, match="kernel"):
        LabOptions(ovs_instances=2, datapath="kernel")


def test_a_bridge_is_found_by_its_management_socket(tmp_path: Path) -> None:
    a, b = tmp_path / "100-0", tmp_path / "100-1"
    for d in (a, b):
        d.mkdir()
        (d / "db.sock").touch()
    (b / "B0.mgmt").touch()
    assert ovs.instance_of("B0", tmp_path) == ovs.Instance(b)
    assert ovs.instance_of("A0", tmp_path) is None  # the system instance
    assert ovs.instance_of("B0", tmp_path / "absent") is None
    assert ovs.running_instances(tmp_path) == [ovs.Instance(a), ovs.Instance(b)]
    (a / "db.sock").unlink()
    assert ovs.running_instances(tmp_path) == [ovs.Instance(b)]


def test_addressing_an_instance(tmp_path: Path) -> None:
    inst = ovs.Instance(tmp_path / "7-0")
    assert ovs.vsctl_argv(None) == ["ovs-vsctl"]
    assert ovs.vsctl_argv(inst) == ["ovs-vsctl", f"--db=unix:{tmp_path}/7-0/db.sock"]
    assert inst.owner == 7
    assert ovs.Instance(tmp_path / "odd").owner is None
    inst.rundir.mkdir()
    (inst.rundir / "ovs-vswitchd.pid").write_text("4242\n")
    assert inst.pids() == {"ovs-vswitchd": 4242}


def test_stale_instances_are_those_of_dead_labs(tmp_path: Path) -> None:
    for name in ("10-0", "10-1", "20-0", "30-0", "junk"):
        (tmp_path / name).mkdir()
    alive = {20}.__contains__
    stale = ovs.stale_instances(alive, me=30, root=tmp_path)
    assert [i.rundir.name for i in stale] == ["10-0", "10-1", "junk"]


class FakeSwitch:
    def __init__(self, name: str, instance: ovs.Instance | None) -> None:
        self.name, self.instance = name, instance


def test_batched_commands_go_to_each_switch_instance(tmp_path: Path) -> None:
    i0, i1 = ovs.Instance(tmp_path / "1-0"), ovs.Instance(tmp_path / "1-1")
    switches = [FakeSwitch("A0", i0), FakeSwitch("B0", i1), FakeSwitch("A1", i0)]
    groups = _by_instance(switches)
    assert [(inst, [s.name for s in group]) for inst, group in groups] == [
        (i0, ["A0", "A1"]),
        (i1, ["B0"]),
    ]
    seen: list[tuple[str, dict]] = []

    def record(cmd: str, **kwargs: object) -> None:
        seen.append((cmd, kwargs))

    run = _vsctl_run(i1, record)
    run("ovs-vsctl -- add-br B0", shell=True)
    run("kill -HUP 12")
    assert seen == [
        (f"ovs-vsctl --db=unix:{i1.rundir}/db.sock -- add-br B0", {"shell": True}),
        ("kill -HUP 12", {}),
    ]
    assert _vsctl_run(None, record) is record  # the system instance: unchanged


def test_the_health_sampler_counts_private_daemons(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, comm in ((11, "ovs-vswitchd"), (12, "ovs-vswitchd"), (13, "python3")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(comm + "\n")
    pidfile = tmp_path / "ovs-vswitchd.pid"
    pidfile.write_text("11\n")
    private = [12, 13, 11]
    sampler = HealthSampler(proc=proc, ovs_pidfile=pidfile, private_pids=lambda: private)
    assert sampler._find_datapath() == (11, 12)  # 13 is not a datapath; 11 counted once
    pidfile.unlink()
    private[:] = [12]
    sampler._datapath_pids = ()
    assert sampler._find_datapath() == (12,)  # no system daemon: the private one alone


def test_instance_root_can_be_moved_for_a_machine() -> None:
    # The default lives on tmpfs: a reboot never leaves a live-looking instance behind.
    if "ZCUBE_LAB_OVS_DIR" not in os.environ:
        assert Path("/run/zcube-lab/ovs") == ovs.INSTANCE_ROOT


def test_doctor_reports_private_instances() -> None:
    from zcube_lab.emulator.lab.doctor import judge_ovs_instances

    assert judge_ovs_instances([]).status == "pass"
    running = judge_ovs_instances([("5-0", True, True), ("5-1", True, True)])
    assert running.status == "pass" and "5-0, 5-1" in running.detail
    dead = judge_ovs_instances([("5-0", True, True), ("9-0", False, False)])
    assert dead.status == "warn" and "9-0" in dead.detail and "5-0" not in dead.detail
    mute = judge_ovs_instances([("5-0", False, True)])
    assert mute.status == "warn" and "not answering" in mute.detail


def test_a_cluster_lab_refuses_private_instances() -> None:
    from zcube_lab.core.fabric.builders import build_fabric
    from zcube_lab.core.fabric.description import FabricSpec
    from zcube_lab.emulator.cluster.lab import ClusterLab
    from zcube_lab.emulator.cluster.remote import Machine
    from zcube_lab.emulator.lab.system import LabError

    fabric = build_fabric(FabricSpec.of("zcube", n=2))
    machines = [Machine(0, "198.19.254.1"), Machine(1, "198.19.254.2")]
    with pytest.raises(LabError, match="ovs_instances"):
        ClusterLab(fabric, machines, LabOptions(ovs_instances=2))


def test_run_and_up_take_the_instance_count() -> None:
    from zcube_lab.cli import build_parser
    from zcube_lab.cli.commands.run import config_from_args
    from zcube_lab.core.fabric.description import FabricSpec
    from zcube_lab.emulator.experiment.plan import RunConfig

    config = config_from_args(build_parser().parse_args(["run", "--ovs-instances", "8"]))
    assert config.ovs_instances == 8 and config.to_dict()["ovs_instances"] == 8
    assert config_from_args(build_parser().parse_args(["run"])).ovs_instances == 0
    assert build_parser().parse_args(["up", "--ovs-instances", "2"]).ovs_instances == 2
    with pytest.raises(ConfigError, match="ovs_instances"):
        RunConfig(fabric=FabricSpec.of("zcube", n=4), ovs_instances=65)


def test_auto_takes_the_userspace_datapath_for_private_instances() -> None:
    from zcube_lab.emulator.lab.machineprep import pick_datapath

    def kernel() -> bool:
        return True

    def asked() -> bool:
        raise AssertionError("the kernel module is probed only for auto without instances")

    assert pick_datapath("auto", 0, kernel) == "kernel"
    assert pick_datapath("auto", 0, lambda: False) == "user"
    assert pick_datapath("auto", 4, asked) == "user"  # the kernel module is there, yet user
    assert pick_datapath("kernel", 0, asked) == "kernel"
    assert pick_datapath("user", 0, asked) == "user"


def test_deleting_bridges_of_a_dead_vswitchd_does_not_wait_for_it(tmp_path: Path) -> None:
    from zcube_lab.emulator.lab.ovsbridges import _vswitchd_alive, del_br_argv

    inst = ovs.Instance(tmp_path / "9-0")
    inst.rundir.mkdir()
    assert not _vswitchd_alive(inst)  # no pidfile
    (inst.rundir / "ovs-vswitchd.pid").write_text(f"{os.getpid()}\n")
    assert _vswitchd_alive(inst)
    child = subprocess.Popen(["true"])
    child.wait()  # exited and reaped: its pid names nothing
    (inst.rundir / "ovs-vswitchd.pid").write_text(f"{child.pid}\n")
    assert not _vswitchd_alive(inst)  # the pid is gone
    assert _vswitchd_alive(None)

    dead = del_br_argv(inst, ["A0", "B0"], vswitchd_alive=False)
    assert dead[:4] == ["ovs-vsctl", f"--db={inst.db}", "--timeout=20", "--no-wait"]
    assert dead[4:] == ["--", "--if-exists", "del-br", "A0", "--", "--if-exists", "del-br", "B0"]
    assert "--no-wait" not in del_br_argv(None, ["A0"], vswitchd_alive=True)
