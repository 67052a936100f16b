"""The cluster doctor: pure judgement of literal probe outputs (ssh, the remote doctor, sudo,
`sshd -T`, `ip route get`/`ip link show`, the tunnel measure), then the few probes that run on
this machine alone and cost nothing (no ssh, no tunnel, no namespace)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from zcube_lab.cli import main
from zcube_lab.cli.commands.doctor import print_checks
from zcube_lab.emulator.cluster.doctor import (
    NOT_TRIED,
    REMOTE_DOCTOR_CODE,
    ClusterFindings,
    RemoteFindings,
    WireProbe,
    doctor_argv,
    judge_cluster,
    judge_remote_doctor,
    judge_ssh,
    judge_sshd,
    judge_sudo,
    judge_tunnel,
    judge_wire_mtu,
    probe_sudo,
    probe_wire,
)
from zcube_lab.emulator.cluster.remote import Machine, run_on
from zcube_lab.emulator.cluster.tunnel import TunnelMeasure
from zcube_lab.emulator.lab.doctor import Check, Probe, exit_code

HERE = Machine(0, "10.254.0.1")
PEER = Machine(1, "10.254.0.2")
REPO = "/work/main"
PYTHON = "/work/main/.venv/bin/python"

ROUTE_TO_PEER = Probe(0, "10.254.0.2 dev zpeer0 src 10.254.0.1 uid 0 \n    cache ")
ROUTE_TO_HERE = Probe(0, "10.254.0.1 dev eth0 src 10.254.0.2 uid 0 \n    cache ")
WIRE_9100 = WireProbe(
    ROUTE_TO_PEER,
    Probe(
        0,
        "20546: zpeer0@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9100 qdisc noqueue state UP "
        "mode DEFAULT group default qlen 1000\\    link/ether 7e:90:ee:15:ae:12 brd "
        "ff:ff:ff:ff:ff:ff link-netnsid 0",
    ),
)
WIRE_THERE = WireProbe(
    ROUTE_TO_HERE,
    Probe(0, "2: eth0@if20546: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9100 qdisc noqueue state UP"),
)
SSHD_PEER = Probe(
    0,
    "port 22\naddressfamily any\nmaxauthtries 6\nmaxsessions 400\nmaxstartups 200:30:400\n"
    "persourcemaxstartups none\nlogingracetime 120",
)
SSHD_DEBIAN = Probe(0, "port 22\nmaxsessions 10\nmaxstartups 10:30:100\nlogingracetime 120")
REMOTE_CHECKS = [
    {"name": "root", "status": "pass", "detail": "running as root", "fix": ""},
    {"name": "netem", "status": "warn", "detail": "no netem (Error)", "fix": "optional: ..."},
]
MEASURE = TunnelMeasure(0, 1, 9000, 2412.7, 1873.2, 0.118)


def doctor_answer(repo: str = REPO, stderr: str = "") -> Probe:
    """What the remote doctor prints: one JSON line on stdout, then whatever stderr held."""
    out = json.dumps({"repo": repo, "checks": REMOTE_CHECKS})
    return Probe(0, f"{out}\n{stderr}".strip())


def healthy_remote(**changes: object) -> RemoteFindings:
    base: dict[str, object] = {
        "machine": PEER,
        "ssh": Probe(0, ""),
        "wire_here": WIRE_9100,
        "doctor": doctor_answer(),
        "sudo": Probe(0, "/usr/bin/sudo"),
        "sshd": SSHD_PEER,
        "wire_there": WIRE_THERE,
        "tunnel": MEASURE,
    }
    base.update(changes)
    return RemoteFindings(**base)  # type: ignore[arg-type]


def cluster(*remotes: RemoteFindings) -> ClusterFindings:
    return ClusterFindings(
        here=HERE,
        local_checks=(Check("root", "pass", "running as root"), Check("ovs", "pass", "3.1.0")),
        local_sudo=Probe(0, "/usr/bin/sudo"),
        remotes=remotes,
        repo=REPO,
        python=PYTHON,
        lab_mtu=9000,
    )


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


# ---- the whole report ------------------------------------------------------------------------


def test_a_healthy_pair_of_machines_passes_with_every_check_named_by_its_machine() -> None:
    checks = judge_cluster(cluster(healthy_remote()))
    assert [c.name for c in checks] == [
        "machine 0 (10.254.0.1): root",
        "machine 0 (10.254.0.1): ovs",
        "machine 0 (10.254.0.1): sudo",
        "machine 1 (10.254.0.2): ssh",
        "machine 1 (10.254.0.2): checkout",
        "machine 1 (10.254.0.2): root",
        "machine 1 (10.254.0.2): netem",
        "machine 1 (10.254.0.2): sudo",
        "machine 1 (10.254.0.2): sshd sessions",
        "machine 0 (10.254.0.1): wire MTU to machine 1",
        "machine 1 (10.254.0.2): wire MTU to machine 0",
        "machine 0 (10.254.0.1): tunnel to machine 1",
    ]
    # The remote's own warning comes through as it is, and warnings do not fail.
    assert by_name(checks)["machine 1 (10.254.0.2): netem"].status == "warn"
    assert {c.status for c in checks} == {"pass", "warn"}
    assert exit_code(checks) == 0


def test_without_ssh_only_this_machines_side_of_the_wire_is_checked() -> None:
    denied = Probe(255, "root@10.254.0.2: Permission denied (publickey,password).")
    checks = judge_cluster(cluster(healthy_remote(ssh=denied, doctor=NOT_TRIED, tunnel=None)))
    remote = [c for c in checks if "machine 1" in c.name]
    assert [c.name for c in remote] == [
        "machine 1 (10.254.0.2): ssh",
        "machine 0 (10.254.0.1): wire MTU to machine 1",
    ]
    assert exit_code(checks) == 1


def test_no_tunnel_measured_means_no_tunnel_line() -> None:
    names = [c.name for c in judge_cluster(cluster(healthy_remote(tunnel=None)))]
    assert not any("tunnel" in n for n in names)
    assert "machine 1 (10.254.0.2): sshd sessions" in names


def test_each_other_machine_gets_its_own_lines() -> None:
    third = Machine(2, "10.254.0.3")
    checks = by_name(judge_cluster(cluster(healthy_remote(), healthy_remote(machine=third))))
    assert checks["machine 2 (10.254.0.3): ssh"].status == "pass"
    assert checks["machine 0 (10.254.0.1): tunnel to machine 2"].status == "pass"
    assert checks["machine 2 (10.254.0.3): wire MTU to machine 0"].status == "pass"


# ---- ssh ---------------------------------------------------------------------------------------


def test_ssh_that_works() -> None:
    assert judge_ssh(PEER, Probe(0, "")).status == "pass"


def test_ssh_without_the_key_says_how_to_authorize_it() -> None:
    check = judge_ssh(PEER, Probe(255, "root@10.254.0.2: Permission denied (publickey)."))
    assert check.status == "fail"
    assert "Permission denied (publickey)" in check.detail
    assert "ssh-copy-id root@10.254.0.2" in check.fix
    assert "/root/.ssh/authorized_keys" in check.fix


def test_ssh_to_an_unknown_host_key_says_how_to_accept_it() -> None:
    out = (
        "No ED25519 host key is known for 10.254.0.2 and you have requested strict checking.\n"
        "Host key verification failed."
    )
    check = judge_ssh(PEER, Probe(255, out))
    assert check.status == "fail"
    assert "ssh-keyscan 10.254.0.2 >> /root/.ssh/known_hosts" in check.fix


@pytest.mark.parametrize(
    "probe",
    [
        Probe(255, "ssh: connect to host 10.254.0.2 port 22: Connection refused"),
        Probe(255, "ssh: connect to host 10.254.0.2 port 22: Connection timed out"),
        Probe(None, "machine 1 (10.254.0.2): Command '['ssh', ...]' timed out after 20 seconds"),
    ],
)
def test_ssh_with_nobody_answering_says_to_start_sshd(probe: Probe) -> None:
    check = judge_ssh(PEER, probe)
    assert check.status == "fail"
    assert "does not answer at 10.254.0.2" in check.detail
    assert "start sshd on 10.254.0.2" in check.fix
    assert "scripts/peer.sh start" in check.fix


# ---- the same checkout and venv, and the one-machine doctor there -----------------------------


def test_the_remote_doctor_checks_come_under_the_machines_name() -> None:
    checks = judge_remote_doctor(PEER, doctor_answer(), REPO, PYTHON)
    assert checks[0] == Check(
        "machine 1 (10.254.0.2): checkout", "pass", f"{REPO} with the venv {PYTHON}"
    )
    assert checks[1] == Check("machine 1 (10.254.0.2): root", "pass", "running as root", "")
    assert checks[2].fix == "optional: ..."


def test_warnings_after_the_answer_do_not_hide_it() -> None:
    probe = doctor_answer(stderr="/x/eventlet/__init__.py:7: DeprecationWarning: eventlet {...}")
    checks = judge_remote_doctor(PEER, probe, REPO, PYTHON)
    assert checks[0].status == "pass"
    assert len(checks) == 3


@pytest.mark.parametrize(
    ("probe", "words"),
    [
        (Probe(3, "no directory /work/main"), "no checkout at /work/main"),
        (Probe(4, "no program /work/main/.venv/bin/python"), "no venv at /work/main/.venv/bin"),
        (
            Probe(1, "Traceback (most recent call last):\nModuleNotFoundError: No module named x"),
            "did not run there: ModuleNotFoundError: No module named x",
        ),
        (Probe(0, "Segmentation fault"), "printed no answer"),
        (Probe(0, '{"repo": "/work/main"}'), "printed no answer"),
    ],
)
def test_a_missing_checkout_or_venv_is_one_clear_fail(probe: Probe, words: str) -> None:
    checks = judge_remote_doctor(PEER, probe, REPO, PYTHON)
    assert len(checks) == 1
    assert checks[0].status == "fail"
    assert words in checks[0].detail
    assert "/work/main" in checks[0].fix
    assert "scripts/setup.sh" in checks[0].fix


def test_a_venv_running_another_checkout_fails_and_still_shows_its_checks() -> None:
    checks = judge_remote_doctor(PEER, doctor_answer(repo="/srv/zcube-lab"), REPO, PYTHON)
    assert checks[0].status == "fail"
    assert "/srv/zcube-lab, not /work/main" in checks[0].detail
    assert len(checks) == 3


def test_the_remote_doctor_program_is_valid_python() -> None:
    compile(REMOTE_DOCTOR_CODE, "<remote doctor>", "exec")
    assert "run_checks()" in REMOTE_DOCTOR_CODE


def test_the_remote_doctor_names_a_missing_checkout_or_venv(tmp_path: Path) -> None:
    """The wrapper the remote runs, run here on paths that do not exist (nothing else runs)."""
    here = Machine(0, "127.0.0.1")
    missing = str(tmp_path / "no checkout")
    found = Probe(*run_on(here, doctor_argv(missing, sys.executable)))
    assert judge_remote_doctor(PEER, found, missing, sys.executable)[0].detail == (
        f"no checkout at {missing}"
    )
    no_python = str(tmp_path / "venv" / "bin" / "python")
    found = Probe(*run_on(here, doctor_argv(str(tmp_path), no_python)))
    assert found.returncode == 4
    check = judge_remote_doctor(PEER, found, str(tmp_path), no_python)[0]
    assert check.detail.startswith(f"no venv at {no_python} ")


# ---- sudo and sshd -----------------------------------------------------------------------------


def test_sudo_present_and_missing() -> None:
    assert judge_sudo(PEER, Probe(0, "/usr/bin/sudo")) == Check(
        "machine 1 (10.254.0.2): sudo", "pass", "/usr/bin/sudo"
    )
    missing = judge_sudo(PEER, Probe(127, ""))
    assert missing.status == "fail"
    assert "sudo -E" in missing.detail
    assert missing.fix == "apt-get install sudo"


def test_sshd_set_up_as_peer_sh_does_passes() -> None:
    check = judge_sshd(PEER, SSHD_PEER)
    assert check.status == "pass"
    assert check.detail == "MaxSessions 400, MaxStartups 200:30:400"


def test_sshd_with_debians_defaults_fails_with_the_two_lines() -> None:
    check = judge_sshd(PEER, SSHD_DEBIAN)
    assert check.status == "fail"
    assert "MaxSessions 10, MaxStartups 10:30:100" in check.detail
    assert "MaxSessions and MaxStartups' start below 100" in check.detail
    assert "MaxStartups 200:30:400" in check.fix
    assert "MaxSessions 400" in check.fix
    assert "/etc/ssh/sshd_config.d/zcube-lab.conf" in check.fix


@pytest.mark.parametrize(
    ("output", "status", "words"),
    [
        ("maxsessions 400\nmaxstartups 99:30:400", "fail", "MaxStartups' start below 100"),
        ("maxsessions 99\nmaxstartups 100:30:400", "fail", "MaxSessions below 100"),
        ("maxsessions 100\nmaxstartups 100", "pass", "MaxStartups 100"),  # one value: the start
        ("maxsessions 400", "fail", "no MaxSessions and MaxStartups"),
    ],
)
def test_sshd_limits(output: str, status: str, words: str) -> None:
    check = judge_sshd(PEER, Probe(0, output))
    assert check.status == status
    assert words in check.detail


def test_sshd_that_cannot_print_its_settings_fails() -> None:
    check = judge_sshd(PEER, Probe(1, "sshd: no hostkeys available -- exiting."))
    assert check.status == "fail"
    assert "no hostkeys available" in check.detail


# ---- the wire and the tunnel -------------------------------------------------------------------


def test_a_9100_byte_wire_carries_the_labs_frames() -> None:
    check = judge_wire_mtu(HERE, PEER, WIRE_9100, 9000)
    assert check.name == "machine 0 (10.254.0.1): wire MTU to machine 1"
    assert check.status == "pass"
    assert "zpeer0 to 10.254.0.2 carries 9100-byte frames" in check.detail


def test_a_1500_byte_wire_fails_with_both_ways_out() -> None:
    wire = WireProbe(
        Probe(0, "10.1.2.3 via 10.0.0.1 dev eth0 src 10.0.0.5 uid 0 \n    cache "),
        Probe(0, "2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc fq_codel state UP"),
    )
    check = judge_wire_mtu(HERE, PEER, wire, 9000)
    assert check.status == "fail"
    assert "eth0 to 10.254.0.2 carries 1500-byte frames" in check.detail
    assert "need 9050" in check.detail
    assert "ip link set eth0 mtu 9050" in check.fix
    assert "--mtu 1450" in check.fix


@pytest.mark.parametrize(("mtu", "status"), [(9050, "pass"), (9049, "fail")])
def test_the_wire_needs_the_lab_mtu_plus_vxlans_50_bytes(mtu: int, status: str) -> None:
    wire = WireProbe(ROUTE_TO_PEER, Probe(0, f"5: zpeer0@if2: <UP> mtu {mtu} qdisc noqueue"))
    assert judge_wire_mtu(HERE, PEER, wire, 9000).status == status


def test_a_smaller_path_mtu_on_the_route_wins() -> None:
    route = Probe(
        0, "10.254.0.2 dev zpeer0 src 10.254.0.1 uid 0 \n    cache expires 597sec mtu 1450"
    )
    check = judge_wire_mtu(HERE, PEER, WireProbe(route, WIRE_9100.link), 9000)
    assert check.status == "fail"
    assert "carries 1450-byte frames" in check.detail


def test_no_ssh_program_here_says_to_install_it() -> None:
    probe = Probe(None, "machine 1 (10.254.0.2): [Errno 2] No such file or directory: 'ssh'")
    check = judge_ssh(PEER, probe)
    assert check.status == "fail"
    assert check.fix == "apt-get install openssh-client"


def test_no_route_to_the_peer_fails() -> None:
    wire = WireProbe(Probe(2, "RTNETLINK answers: Network is unreachable"))
    check = judge_wire_mtu(HERE, PEER, wire, 9000)
    assert check.status == "fail"
    assert "Network is unreachable" in check.detail
    assert "ip route get 10.254.0.2" in check.fix


def test_a_measured_tunnel_shows_capacity_and_rtt() -> None:
    check = judge_tunnel(HERE, PEER, MEASURE)
    assert check.status == "pass"
    assert check.name == "machine 0 (10.254.0.1): tunnel to machine 1"
    assert "1873 Mb/s both ways" in check.detail
    assert "2413 Mb/s 0->1" in check.detail
    assert "rtt 0.118 ms" in check.detail


def test_a_tunnel_that_could_not_be_built_fails_with_its_error() -> None:
    error = (
        "building the probe tunnel on machine 1 (10.254.0.2) failed: Error: Unknown device type."
    )
    check = judge_tunnel(HERE, PEER, error)
    assert check.status == "fail"
    assert "Unknown device type" in check.detail
    assert "modprobe vxlan" in check.fix
    assert "UDP 4789" in check.fix


# ---- probes that run here and cost nothing ------------------------------------------------------


def test_the_wire_probe_reads_a_real_route_and_mtu() -> None:
    here = Machine(0, "127.0.0.1")
    wire = probe_wire(here, "127.0.0.1")
    check = judge_wire_mtu(here, Machine(1, "127.0.0.1"), wire, 9000)
    assert check.status == "pass", check
    assert "lo to 127.0.0.1 carries" in check.detail


def test_the_sudo_probe_agrees_with_path() -> None:
    check = judge_sudo(HERE, probe_sudo(HERE))
    assert (check.status == "pass") == (shutil.which("sudo") is not None)


# ---- the command -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--machines", "10.254.0.1"], "machines='10.254.0.1' is not valid"),
        (["--machines", "127.0.0.1,10.254.0.2"], "not loopback"),
        (["--no-tunnel"], "only with --machines"),
    ],
)
def test_a_bad_machine_list_is_refused_before_any_check(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert words in captured.err
    assert captured.err.startswith("zcube-lab doctor: error: ")


def test_checks_print_as_json_or_as_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    checks = judge_cluster(cluster(healthy_remote(sshd=SSHD_DEBIAN)))
    print_checks(checks, as_json=True)
    data = json.loads(capsys.readouterr().out)
    assert {d["name"]: d["status"] for d in data}["machine 1 (10.254.0.2): sshd sessions"] == "fail"
    print_checks(checks, as_json=False, title="zcube-lab doctor: 2 machines")
    out = capsys.readouterr().out
    assert "zcube-lab doctor: 2 machines" in out
    assert "1 failed, 1 warnings, 10 passed" in out
