"""The doctor: pure judgement from fake probe results, then one real run on this machine."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from zcube_lab.cli import main
from zcube_lab.emulator.lab import doctor
from zcube_lab.emulator.lab.datapath_ceiling import DatapathResults, Measurement
from zcube_lab.emulator.lab.doctor import Check, Findings, Probe, exit_code, judge

OK = Probe(0, "")
MEASURED = DatapathResults(
    machine_id="m1",
    cores=2,
    measured_at="2026-12-01T05:00:00+00:00",
    seconds=60.0,
    bridges=1,
    points=(Measurement(1500, 1, 0.45, 37_000), Measurement(9000, 4, 1.9, 26_000)),
)
MISSING = Probe(None, "x: not found")
NETEM_UNKNOWN = Probe(2, "Error: Specified qdisc kind is unknown.")


def healthy(**changes: object) -> Findings:
    """Findings of a machine where everything works; tests change one thing at a time."""
    base = {
        "euid": 0,
        "python": (3, 11, 2),
        "ovs": Probe(0, 'abc\n    ovs_version: "3.1.0"'),
        "ovs_vswitchd": Probe(0, "ovs-vswitchd (Open vSwitch) 3.1.0"),
        "module_loaded": True,
        "modprobe": OK,
        "mnexec": "/usr/bin/mnexec",
        "mininet": Probe(0, "2.3.0"),
        "os_ken": Probe(0, "4.2.2"),
        "qdiscs": {"setup": OK, "htb": OK, "tbf": OK, "netem": OK},
        "tools": {name: Probe(0, f"{name} 1.0") for name, *_ in doctor.TOOLS},
        "datapath_results": MEASURED,
        "machine_id": "m1",
        "proc_stat": (_stat(0, 0, 0), _stat(30, 69, 1)),  # 1% steal, 30% busy
    }
    base.update(changes)
    return Findings(**base)  # type: ignore[arg-type]


def _stat(busy: int, idle: int, steal: int) -> str:
    """/proc/stat text: `busy` user jiffies, `idle`, `steal` on the aggregate line, one core
    (the counters a real file carries more of are left at zero)."""
    line = f"{busy} 0 0 {idle} 0 0 0 {steal} 0 0"
    return f"cpu  {line}\ncpu0 {line}\nintr 1 2 3\nctxt 99\n"


def _reader(*texts: str) -> tuple[list[float], object]:
    slept: list[float] = []
    queue = list(texts)
    return slept, (lambda: queue.pop(0))


def test_steal_is_measured_over_a_window_and_said_what_it_means() -> None:
    slept, read = _reader(_stat(1000, 9000, 10), _stat(1060, 9060, 40))
    texts = doctor.probe_cpu(read=read, sleep=slept.append)  # type: ignore[arg-type]
    assert slept == [doctor.STEAL_WINDOW_S]
    check = doctor.judge_steal(*texts)  # of 150 jiffies: 30 stolen, 60 busy, 60 idle
    assert check.status == "warn"
    assert check.detail.startswith("CPU steal 20.0% and 40% of the CPUs busy over 3 s")
    assert "runs now will be rejected as not trustworthy" in check.detail
    assert "--dilation 2" in check.fix and "--retries" in check.fix
    quiet = by_name(judge(healthy()))["steal"]
    assert quiet.status == "pass" and quiet.detail.startswith(
        "CPU steal 1.0% and 30% of the CPUs busy"
    )
    assert "quiet enough" in quiet.detail
    near = doctor.judge_steal(_stat(0, 0, 0), _stat(10, 90, 3))  # 3%: close to the 5% limit
    assert near.status == "warn" and "close to the limit" in near.detail
    busy = doctor.judge_steal(_stat(0, 0, 0), _stat(80, 20, 0))  # 80% busy with others' work
    assert busy.status == "warn" and "other processes hold the CPUs" in busy.detail
    assert "--retries" in busy.fix


def test_an_unreadable_proc_stat_warns_that_steal_is_unknown() -> None:
    def gone() -> str:
        raise FileNotFoundError("/proc/stat")

    assert doctor.probe_cpu(read=gone, sleep=lambda _s: None) == ("", "")
    check = by_name(judge(healthy(proc_stat=("", ""))))["steal"]
    assert check.status == "warn" and "steal unknown" in check.detail


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_healthy_machine_passes_everything() -> None:
    checks = judge(healthy())
    assert {c.status for c in checks} == {"pass"}
    assert exit_code(checks) == 0
    names = [c.name for c in checks]
    assert names[:3] == ["root", "python", "ovs"]
    assert {"datapath", "mnexec", "mininet", "htb", "tbf", "netem", "os-ken"} <= set(names)
    assert {"prometheus", "promtool", "iperf3", "ethtool", "ping"} <= set(names)
    assert names[-1] == "datapath-capacity"
    c = by_name(checks)
    assert c["ovs"].detail == "Open vSwitch running 3.1.0"
    assert "4.2.2" in c["os-ken"].detail


def test_datapath_capacity_shows_the_measured_figures() -> None:
    check = by_name(judge(healthy()))["datapath-capacity"]
    assert check.status == "pass"
    assert "MTU 1500: 0.45 Gb/s (37 kpps)" in check.detail
    assert "MTU 9000: 1.90 Gb/s (26 kpps)" in check.detail
    assert "2026-12-01" in check.detail


@pytest.mark.parametrize(
    ("results", "machine", "words"),
    [(None, "m1", "not measured"), (MEASURED, "m2", "another machine")],
)
def test_datapath_capacity_warns_when_not_measured_here(
    results: DatapathResults | None, machine: str, words: str
) -> None:
    check = by_name(judge(healthy(datapath_results=results, machine_id=machine)))[
        "datapath-capacity"
    ]
    assert check.status == "warn"
    assert words in check.detail
    assert "default 500 Mb/s" in check.detail
    assert "bench/datapath.py" in check.fix


def test_not_root_fails_and_skips_tc_with_warnings() -> None:
    checks = by_name(judge(healthy(euid=1000, qdiscs={})))
    assert checks["root"].status == "fail"
    assert checks["root"].fix
    for name in ("htb", "tbf", "netem"):
        assert checks[name].status == "warn"
        assert "needs root to test" in checks[name].detail
    assert exit_code(list(checks.values())) == 1


def test_python_too_old_fails() -> None:
    check = by_name(judge(healthy(python=(3, 10, 12))))["python"]
    assert check.status == "fail"
    assert "3.10.12" in check.detail


def test_ovs_down_says_how_to_start_it() -> None:
    down = Probe(1, "ovs-vsctl: unix:/var/run/openvswitch/db.sock: database connection failed")
    check = by_name(judge(healthy(ovs=down)))["ovs"]
    assert check.status == "fail"
    assert check.fix == "/usr/share/openvswitch/scripts/ovs-ctl start"
    assert "database connection failed" in check.detail


def test_ovsdb_without_vswitchd_fails() -> None:
    down = Probe(1, "2026-11-29T17:00:00Z|00001|unixctl|WARN|failed to connect to ovs-vswitchd")
    check = by_name(judge(healthy(ovs_vswitchd=down)))["ovs"]
    assert check.status == "fail"
    assert "ovs-vswitchd does not" in check.detail
    assert check.fix == "/usr/share/openvswitch/scripts/ovs-ctl start"


def test_ovs_missing_says_to_run_setup() -> None:
    check = by_name(judge(healthy(ovs=MISSING)))["ovs"]
    assert check.status == "fail"
    assert check.fix == "sudo scripts/setup.sh"


@pytest.mark.parametrize(
    ("loaded", "modprobe", "status"),
    [(True, MISSING, "pass"), (False, OK, "pass"), (False, Probe(1, "FATAL: not found"), "warn")],
)
def test_datapath(loaded: bool, modprobe: Probe, status: str) -> None:
    check = by_name(judge(healthy(module_loaded=loaded, modprobe=modprobe)))["datapath"]
    assert check.status == status
    if status == "warn":
        assert "userspace datapath (datapath_type=netdev)" in check.detail
        assert "offloads off" in check.detail
    else:
        assert "kernel datapath" in check.detail


def test_no_netem_warns_and_names_what_it_disables() -> None:
    qdiscs = {"setup": OK, "htb": OK, "tbf": OK, "netem": NETEM_UNKNOWN}
    checks = judge(healthy(qdiscs=qdiscs))
    netem = by_name(checks)["netem"]
    assert netem.status == "warn"
    assert "link delay, loss and jitter" in netem.detail
    assert "switch hops and queueing" in netem.detail
    assert "Specified qdisc kind is unknown" in netem.detail
    assert netem.fix
    assert exit_code(checks) == 0


def test_no_htb_fails() -> None:
    qdiscs = {"setup": OK, "htb": Probe(2, "Error: Specified qdisc kind is unknown."), "tbf": OK}
    checks = by_name(judge(healthy(qdiscs={**qdiscs, "netem": OK})))
    assert checks["htb"].status == "fail"
    assert "link rates" in checks["htb"].detail
    assert checks["tbf"].status == "pass"


def test_no_tbf_warns() -> None:
    qdiscs = {"setup": OK, "htb": OK, "tbf": NETEM_UNKNOWN, "netem": OK}
    assert by_name(judge(healthy(qdiscs=qdiscs)))["tbf"].status == "warn"


def test_namespace_setup_failure_fails_every_qdisc_check() -> None:
    qdiscs = {"setup": Probe(1, "Cannot create namespace file: Permission denied")}
    checks = by_name(judge(healthy(qdiscs=qdiscs)))
    for name in ("htb", "tbf", "netem"):
        assert checks[name].status == "fail"
        assert "Permission denied" in checks[name].detail


def test_missing_programs_and_packages() -> None:
    tools = {name: MISSING for name, *_ in doctor.TOOLS}
    checks = by_name(
        judge(healthy(mnexec=None, mininet=Probe(1, "ModuleNotFoundError: mininet"), tools=tools))
    )
    assert checks["mnexec"].status == "fail"
    assert checks["mininet"].status == "fail"
    assert "ModuleNotFoundError" in checks["mininet"].detail
    # Prometheus is only needed for metrics; the measuring tools are needed for the lab's checks.
    assert checks["prometheus"].status == "warn"
    assert checks["promtool"].status == "warn"
    for name in ("iperf3", "ethtool", "ping"):
        assert checks[name].status == "fail"
    for c in checks.values():
        if c.status != "pass":
            assert c.fix, f"{c.name} has no fix"


def test_check_rejects_unknown_status() -> None:
    with pytest.raises(ValueError):
        Check("x", "ok", "")


def test_run_command_uses_argument_lists_and_reports_missing_programs() -> None:
    assert doctor.run_command(["zcl-no-such-program-xyz"]).returncode is None
    # An argument with shell metacharacters reaches the program unchanged: no shell.
    probe = doctor.run_command(["printf", "%s", "a; echo injected"])
    assert probe == Probe(0, "a; echo injected")


def test_probe_qdiscs_deletes_its_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_run(argv: list[str], timeout: float = 10.0) -> Probe:
        calls.append(list(argv))
        if "netem" in argv:
            raise RuntimeError("tc blew up")
        return OK

    monkeypatch.setattr(doctor, "run_command", fake_run)
    with pytest.raises(RuntimeError):
        doctor.probe_qdiscs("zcl-doctor-test")
    assert calls[0] == ["ip", "netns", "add", "zcl-doctor-test"]
    assert calls[-1] == ["ip", "netns", "del", "zcl-doctor-test"]


def test_ovs_permission_denied_says_to_run_as_root() -> None:
    denied = Probe(1, "ovs-vsctl: unix:/var/run/openvswitch/db.sock: ... (Permission denied)")
    check = by_name(judge(healthy(ovs=denied)))["ovs"]
    assert check.status == "fail"
    assert check.fix == "sudo zcube-lab doctor"


def test_real_doctor_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    """A machine set up by scripts/setup.sh: OVS up, Mininet, os-ken and Prometheus installed.
    The kernel facts (openvswitch module, netem) differ between this CI machine (neither) and a
    lab VM (both), so they may pass or warn but never fail."""
    checks = by_name(doctor.run_checks())
    for name in ("python", "mnexec", "mininet", "os-ken", "prometheus", "promtool"):
        assert checks[name].status == "pass", checks[name]
    if Path("/sys/module/openvswitch").exists():
        assert checks["datapath"].status == "pass"
    else:
        assert checks["datapath"].status in ("pass", "warn")
    if checks["datapath"].status == "warn":
        assert "userspace" in checks["datapath"].detail
    if os.geteuid() != 0:
        pytest.skip(
            "not root: the OVS database socket and the tc qdisc checks (htb, tbf, netem) need root"
        )
    assert checks["root"].status == "pass"
    assert checks["ovs"].status == "pass", checks["ovs"]
    assert checks["htb"].status == "pass"
    assert checks["tbf"].status == "pass"
    assert checks["netem"].status in ("pass", "warn")
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"zcl-doctor-{os.getpid()}" not in namespaces

    assert main(["doctor", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {d["name"]: d["status"] for d in data}["netem"] == checks["netem"].status
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert checks["datapath"].detail.split(":")[0] in out
    assert "0 failed" in out
