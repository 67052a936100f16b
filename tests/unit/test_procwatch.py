"""bench/procwatch.py: /proc text parsed, lab processes told apart by their real command lines
(from the run's own plan), the run's process tree walked, and a scan of a /proc tree written
here; TCP sockets counted on this process's real /proc as the kernel writes it."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.procwatch import (
    _resources,
    classify,
    count_tcp,
    descendants,
    display_order,
    parse_cmdline,
    parse_rss_kb,
    parse_stat,
    parse_tcp_table,
    process_names,
    python_module,
    scan,
    socket_inode,
)
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.placement import LayoutSpec
from zcube_lab.emulator.experiment.plan import RunConfig, plan_run
from zcube_lab.emulator.prometheus.server import PROMETHEUS_BINARY

PY = "/work/main/.venv/bin/python"


def stat_line(pid: int, comm: str, ppid: int, utime: int, stime: int, cu: int, cs: int) -> str:
    """A /proc/PID/stat line with the fields this module reads set, the rest plausible."""
    fields = ["S", ppid, pid, pid, 0, -1, 4194560, 100, 0, 0, 0, utime, stime, cu, cs]
    fields += [20, 0, 3, 0, 5555, 123456789, 2500]
    return f"{pid} ({comm}) " + " ".join(map(str, fields)) + " 0" * 30 + "\n"


# --- parsing ---------------------------------------------------------------------------------


def test_stat_fields_even_when_the_name_holds_spaces_and_parentheses() -> None:
    s = parse_stat(stat_line(4242, "py (x) y", 7, utime=300, stime=45, cu=60, cs=9))
    assert (s.pid, s.ppid, s.comm, s.start) == (4242, 7, "py (x) y", 5555)
    assert (s.ticks, s.child_ticks) == (345, 69)


def test_cmdline_keeps_empty_arguments_and_drops_the_final_nul() -> None:
    assert parse_cmdline(b"python\0-m\0locust\0--tag\0\0-v\0") == (
        "python", "-m", "locust", "--tag", "", "-v",
    )  # fmt: skip
    assert parse_cmdline(b"") == ()


def test_rss_from_status_and_none_for_a_zombie() -> None:
    status = "Name:\tpython\nState:\tS (sleeping)\nVmPeak:\t  900000 kB\nVmRSS:\t   81234 kB\n"
    assert parse_rss_kb(status) == 81234
    assert parse_rss_kb("Name:\tpython\nState:\tZ (zombie)\nThreads:\t1\n") is None


TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1001 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F40 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 1002 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:D2F0 0100007F:1F40 08 00000000:00000000 00:00000000 00000000     0        0 1003 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:D2F2 0100007F:1F40 06 00000000:00000000 03:00000ADC 00000000     0        0 0 3 0000000000000000
"""  # noqa: E501  LISTEN, ESTABLISHED, CLOSE_WAIT, TIME_WAIT (no inode)


def test_tcp_table_maps_inodes_to_states_and_skips_time_wait() -> None:
    assert parse_tcp_table(TCP) == {1001: "0A", 1002: "01", 1003: "08"}


def test_tcp_sockets_held_are_counted_by_inode_without_listeners() -> None:
    links = ["socket:[1001]", "socket:[1002]", "socket:[1003]", "socket:[7777]", "pipe:[1002]"]
    links += ["anon_inode:[eventpoll]", "/dev/null"]
    # 1001 listens, 7777 is not TCP (a unix socket), the pipe only shares a number.
    assert count_tcp(links, parse_tcp_table(TCP)) == 2
    assert socket_inode("socket:[42]") == 42
    assert socket_inode("pipe:[42]") is None


# --- who is who ------------------------------------------------------------------------------


def test_every_process_of_a_planned_run_is_classified_from_its_real_argv(tmp_path: Path) -> None:
    layout = LayoutSpec(prefill_servers=2, ep_servers=2)  # EP workers too
    config = RunConfig(fabric=FabricSpec.of("zcube", n=4), workload="kv-heavy", layout=layout)
    plan = plan_run(config)
    launches = plan.role_launches(18000, tmp_path)
    kinds = {launch.name: classify(launch.argv) for launch in launches}
    engines = {e.engine_id: e for e in plan.placement.engines}
    for name, kind in kinds.items():
        if name == "gateway":
            assert kind == ("gateway", "")
        elif name.startswith("ep-"):
            assert kind is not None and kind[0] == "ep" and kind[1].startswith("198.18.")
        else:
            e = engines[name]
            assert kind == (e.role, f"h{plan.fabric.host(e.host).gid}")
    roles = {k[0] for k in kinds.values() if k}
    assert roles == {"gateway", "prefill", "decode", "ep"}
    instances = [k for k in kinds.values() if k]
    assert len(set(instances)) == len(instances)  # every engine has its own name
    assert classify(plan.locust_argv(18000, 18001, out_dir=tmp_path)) == ("locust", "")


def test_the_controller_prometheus_and_the_datapath_but_not_its_monitor() -> None:
    controller = [PY, "-m", "zcube_lab.controller", "--fabric-spec", "{}", "--policy", "ecmp"]
    assert classify(controller) == ("controller", "")
    assert classify([PROMETHEUS_BINARY, "--config.file=/r/p.yml"]) == ("prometheus", "")
    ovs = ["ovs-vswitchd", "unix:/var/run/openvswitch/db.sock", "--detach", "--monitor"]
    assert classify(ovs) == ("ovs-vswitchd", "")
    assert classify(["/usr/sbin/ovs-vswitchd", "unix:/x"]) == ("ovs-vswitchd", "")
    # What the --monitor watchdog's command line reads once it has renamed itself.
    assert classify(["ovs-vswitchd: monitoring pid 2381 (healthy)", "", ""]) is None


@pytest.mark.parametrize(
    "argv",
    [
        ["bash", "--norc", "-is", "mininet:h0"],
        [PY, "bench/x.py", "-m", "locust"],  # a script, not a module run
        [PY, "-m", "zcube_lab.serving.cluster"],  # ours, but not a role of a run
        ["mnexec", "-da", "4242", PY, "-m", "zcube_lab.serving.decode"],  # before its exec
        [],
    ],
)
def test_other_processes_are_not_the_labs(argv: list[str]) -> None:
    assert classify(argv) is None


def test_python_module_reads_past_interpreter_options() -> None:
    assert python_module(["python3.11", "-u", "-m", "locust", "-f", "x"]) == "locust"
    assert python_module(["/usr/bin/env", "-m", "locust"]) is None


def test_descendants_walk_the_whole_tree_and_nothing_else() -> None:
    parents = {100: 1, 101: 100, 102: 100, 103: 101, 104: 103, 200: 1, 201: 200}
    assert descendants(parents, 100) == {100, 101, 102, 103, 104}
    assert descendants(parents, 104) == {104}


def test_names_get_the_pid_only_when_two_processes_would_share_one() -> None:
    found = [
        (5, "decode", "h12"),
        (6, "gateway", ""),
        (7, "ovs-vswitchd", ""),
        (8, "ovs-vswitchd", ""),
    ]
    assert process_names(found) == {
        5: "decode/h12", 6: "gateway", 7: "ovs-vswitchd#7", 8: "ovs-vswitchd#8",
    }  # fmt: skip


def test_display_order_follows_the_roles_then_numbers_as_numbers() -> None:
    found = [("run", "run"), ("decode", "decode/h10"), ("gateway", "gateway")]
    found += [("decode", "decode/h2"), ("prefill", "prefill/h0"), ("ep", "ep/10.1.0.12")]
    found += [("ep", "ep/10.1.0.3"), ("ovs-vswitchd", "ovs-vswitchd#12")]
    assert [n for _r, n in sorted(found, key=lambda rn: display_order(*rn))] == [
        "gateway", "prefill/h0", "decode/h2", "decode/h10", "ep/10.1.0.3", "ep/10.1.0.12",
        "ovs-vswitchd#12", "run",
    ]  # fmt: skip


# --- the adapter on a /proc tree -------------------------------------------------------------


def fake_process(
    proc: Path,
    pid: int,
    ppid: int,
    argv: list[str],
    *,
    comm: str = "python",
    netns: str = "1",
    mntns: str = "1",
) -> Path:
    """/proc/PID with stat, cmdline, status, two fds (one held TCP socket) and a namespace."""
    d = proc / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "ns").mkdir()
    (d / "net").mkdir()
    (d / "stat").write_text(stat_line(pid, comm, ppid, utime=pid, stime=1, cu=10, cs=0))
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (d / "status").write_text(f"Name:\t{comm}\nVmRSS:\t {pid * 10} kB\n")
    os.symlink("socket:[1002]", d / "fd" / "3")  # targets need not exist: only read as text
    os.symlink("/dev/null", d / "fd" / "0")
    os.symlink(f"net:[{netns}]", d / "ns" / "net")
    os.symlink(f"mnt:[{mntns}]", d / "ns" / "mnt")
    (d / "net" / "tcp").write_text(TCP if netns == "1" else TCP.replace(" 1002 ", " 9002 "))
    return d


def test_scan_finds_the_runs_tree_and_the_datapath(tmp_path: Path) -> None:
    proc = tmp_path
    fake_process(proc, 100, 1, [PY, "/venv/bin/zcube-lab", "run"])
    fake_process(
        proc, 101, 100, [PY, "-m", "zcube_lab.serving.decode", "--engine-index", "12"], netns="2"
    )
    fake_process(proc, 102, 100, ["bash", "--norc"], comm="bash")
    fake_process(proc, 103, 100, [PY, "-m", "locust", "-f", "x.py"])
    fake_process(
        proc, 200, 1, [PY, "-m", "zcube_lab.serving.decode", "--engine-index", "3"]
    )  # another lab
    fake_process(proc, 299, 1, ["ovs-vswitchd: monitoring pid 300 (healthy)"], comm="monitor")
    fake_process(proc, 300, 299, ["ovs-vswitchd", "unix:/db.sock"], comm="ovs-vswitchd")
    peer = ["ovs-vswitchd", "unix:/db.sock"]  # a peer machine's, in its own mount namespace
    fake_process(proc, 400, 1, peer, comm="ovs-vswitchd", mntns="2")
    gone = fake_process(
        proc, 104, 100, [PY, "-m", "zcube_lab.serving.prefill", "--engine-index", "0"]
    )
    (gone / "cmdline").unlink()  # exited between the stat and the cmdline reads
    samples = {s.name: s for s in scan(100, proc=proc)}
    assert sorted(samples) == ["decode/h12", "locust", "ovs-vswitchd", "run"]
    assert samples["ovs-vswitchd"].pid == 300
    decode = samples["decode/h12"]
    assert (decode.role, decode.pid, decode.rss_kb, decode.fds) == ("decode", 101, 1010, 2)
    assert decode.tcp == 0  # its namespace's table has another inode: not its socket
    assert samples["locust"].tcp == 1
    assert (samples["run"].ticks, samples["run"].child_ticks) == (101, 10)
    cpu_only = scan(100, resources=False, proc=proc)
    assert {s.name for s in cpu_only} == set(samples)
    assert all(s.rss_kb is None and s.fds is None for s in cpu_only)


def test_held_tcp_connections_on_the_real_proc() -> None:
    here = Path("/proc") / str(os.getpid())
    _rss, _fds, before = _resources(here, {})
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        with client, accepted:
            rss, fds, during = _resources(here, {})
    assert during - before == 2  # both ends are ours; the listener is not counted
    assert rss is not None and rss > 1000 and fds >= 3
