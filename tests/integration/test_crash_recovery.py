"""A lab whose process is killed leaves namespaces, bridges and processes behind; the next
bring-up removes them first, and its own teardown leaves nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from zcube_lab.adapters.ports import free_port
from zcube_lab.core.fabric.addressing import MANAGEMENT_RANGE, MGMT_ROOT_IP, plan_networks
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.core.fabric.hostplan import MGMT_BRIDGE
from zcube_lab.emulator.lab.hostnet import conflicts, read_host_network
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.options import LabOptions

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("lab_available")]

CRASHER = """
import os, signal, sys
from pathlib import Path
from zcube_lab.core.fabric.builders import build_fabric
from zcube_lab.core.fabric.description import FabricSpec
from zcube_lab.emulator.lab.network import Lab
from zcube_lab.emulator.lab.options import LabOptions
lab = Lab(build_fabric(FabricSpec.of("zcube", n=2)), LabOptions(
    of_port=int(sys.argv[1]), metrics_port=int(sys.argv[2]), state_dir=Path(sys.argv[3]),
    management=True))
lab.start()
print("UP", flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no teardown at all
"""


def _bridges() -> set[str]:
    out = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and ") Z " not in stat.read_text()


def test_next_bring_up_removes_what_a_killed_run_left(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CRASHER, str(free_port()), str(free_port()), str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert "UP" in done.stdout, done.stderr[-2000:]
    assert done.returncode == -signal.SIGKILL
    state_files = list(tmp_path.glob("lab-*.json"))
    assert len(state_files) == 1
    state = json.loads(state_files[0].read_text())
    fabric = build_fabric(FabricSpec.of("zcube", n=2))
    names = {s.name for s in fabric.switches}
    assert names <= _bridges()  # the killed run's switches are still there
    assert any(_alive(p) for p in state["pids"])  # and its controller and host shells
    # Its management bridge too, with its address: in the lab's own range, so the host's
    # routes and resolvers are untouched while it lingers.
    assert MGMT_BRIDGE in state["interfaces"]
    left = [e for e in read_host_network() if e.device == MGMT_BRIDGE]
    assert {str(e.network) for e in left} >= {f"{MGMT_ROOT_IP}/32"}
    assert all(e.network.subnet_of(MANAGEMENT_RANGE) for e in left)
    assert conflicts(plan_networks(), read_host_network()) == []

    lab = Lab(fabric, LabOptions(of_port=free_port(), metrics_port=free_port(), state_dir=tmp_path))
    lab.start()
    try:
        assert not any(_alive(p) for p in state["pids"])
        assert not Path(f"/sys/class/net/{MGMT_BRIDGE}").exists()  # swept by this start
        assert lab.check_reachability() == {h.name: [] for h in fabric.hosts}
    finally:
        lab.stop()
    time.sleep(0.2)
    assert not names & _bridges()
    assert not any(Path(f"/sys/class/net/{i}").exists() for i in state["interfaces"])
    assert list(tmp_path.glob("lab-*.json")) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_during_bring_up_tears_everything_down(tmp_path: Path, sig: int) -> None:
    env = {**os.environ, "ZCUBE_LAB_STATE": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "zcube_lab.cli", "up", "--fabric", "zcube", "--n", "8",
         "--of-port", str(free_port()), "--metrics-port", str(free_port())],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + 60
    while "building" not in seen and time.monotonic() < deadline:
        seen += proc.stdout.readline()
    assert "building" in seen, seen
    # At once: building this fabric takes about a second, and a whole bring-up of a smaller
    # one finished inside the half second this test used to wait.
    proc.send_signal(sig)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, seen + rest
    assert "tearing down" in rest
    fabric = build_fabric(FabricSpec.of("zcube", n=8))
    assert not {s.name for s in fabric.switches} & _bridges()
    assert list(tmp_path.glob("lab-*.json")) == []
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert not [ln for ln in links.splitlines() if ln.split("@")[0].startswith(("a0-", "b0-"))]


def _naming(text: str) -> list[int]:
    """Live processes whose command line holds `text` (a run's folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_clean_removes_what_a_sigkilled_run_left_and_then_finds_nothing(tmp_path: Path) -> None:
    """`zcube-lab run` killed with SIGKILL mid-load leaves its controller, host shells, serving
    processes, Prometheus, Locust, bridges and zcl-mgmt; `zcube-lab clean` removes all of it,
    saying so, and a second clean finds nothing."""
    state_dir, results = tmp_path / "state", tmp_path / "results"
    env = {**os.environ, "ZCUBE_LAB_STATE": str(state_dir)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "zcube_lab.cli", "run", "--fabric", "zcube", "--n", "2",
         "--gpus-per-server", "2", "--workload", "coding-agent", "--rate", "2", "--duration", "60",
         "--results", str(results)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + 240
    while "load:" not in seen and proc.poll() is None and time.monotonic() < deadline:
        seen += proc.stdout.readline()
    assert "load:" in seen, seen[-3000:]
    time.sleep(3)  # requests in flight
    proc.kill()
    proc.wait(timeout=10)
    proc.stdout.close()

    (state_file,) = state_dir.glob("lab-*.json")
    state = json.loads(state_file.read_text())
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    names = {s.name for s in build_fabric(FabricSpec.of("zcube", n=2)).switches}
    assert names <= _bridges() and Path(f"/sys/class/net/{MGMT_BRIDGE}").exists()
    left = [p for p in state["pids"] if _alive(p)]
    assert len(left) >= 5, state  # controller, host shells, engines, gateway, Prometheus...
    assert _naming(str(run_dir)), "no process of the run (Prometheus, Locust) outlived it"

    done = subprocess.run(
        [sys.executable, "-m", "zcube_lab.cli", "clean"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert {f"removed bridge {n}" for n in names} <= set(lines), done.stdout
    assert f"removed interface {MGMT_BRIDGE}" in lines
    assert sum(line.startswith("removed process ") for line in lines) >= len(left)
    time.sleep(0.5)
    assert not any(_alive(p) for p in state["pids"])
    assert _naming(str(run_dir)) == []  # no stray process of the run
    assert not names & _bridges()
    assert not any(Path(f"/sys/class/net/{i}").exists() for i in state["interfaces"])
    assert list(state_dir.glob("lab-*.json")) == []

    again = subprocess.run(
        [sys.executable, "-m", "zcube_lab.cli", "clean"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert again.returncode == 0 and again.stdout.startswith("nothing to remove"), again.stdout
